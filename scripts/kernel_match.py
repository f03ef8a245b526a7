"""Match GPU kernels to the HLO instructions that launched them, command buffers included.

The program's schedule is expanded into slots, one per launching instruction execution, in the
order XLA's runtime runs them (while loops by their known trip count, `call`/`conditional`
followed, instructions that launch nothing skipped). Each slot expects kernels of some kinds
(a fusion one compute kernel, a convolution im2col + GEMM, a collective one collective kernel).

Kernels of one device and program, in launch order (correlation id, then start), are aligned
with the slots by a pointer that only moves forward (wrapping to the next execution):
- exact: the kernel's own `hlo_op` names a launching instruction: the pointer jumps to that
  instruction's next slot;
- name: a kernel without such a label (a graph kernel, a kernel with a label that is not an
  instruction) whose name, sanitized as XLA names kernels (`.`/`-` -> `_`, vendor suffix such as
  `.kd` removed), is the expected name of exactly one slot in its window;
- order: otherwise the next slot in the window whose expected kinds accept the kernel's kind
  (library GEMMs, copies, collectives, kernels reused under another fusion's name);
- none: no slot in the window accepts it, or it was launched outside any instruction (no
  `hlo_op`, its own launch: an argument copy).
A window runs from the pointer to the next exact kernel's slot; with no exact kernel ahead, one
whole execution of the schedule.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from hlo_program import NO_LAUNCH_OPCODES, Program

WAIT_OPCODES = frozenset({
    "all-reduce-done", "all-gather-done", "collective-permute-done", "async-done",
    "copy-done", "send-done", "recv-done", "async-update",
})
CONTROL_OPCODES = frozenset({"while", "call", "conditional"})
COLLECTIVE_OPCODES = frozenset({
    "all-reduce", "all-reduce-start", "all-gather", "all-gather-start", "reduce-scatter",
    "all-to-all", "collective-permute", "collective-permute-start", "collective-broadcast",
    "ragged-all-to-all", "send", "recv",
})
# Kernel kinds from names (vendor libraries); anything else is "compute".
GEMM_KERNEL_RE = re.compile(r"^(Cijk_|sm\d+_xmma|cutlass|nvjet|ampere_|volta_|turing_|hopper_|"
                            r"void cutlass|void gemm|gemm|.*_gemm_|.*xmma_gemm)")
GEMM_AUX_RE = re.compile(r"splitKreduce|PostGSU|gemv2T_kernel|_reduce_kernel")
COLLECTIVE_KERNEL_RE = re.compile(r"nccl|rccl|NCCL|RCCL")
COPY_KERNEL_RE = re.compile(r"^(Memcpy|memcpy)|__amd_rocclr_copy|copyBuffer")
MEMSET_KERNEL_RE = re.compile(r"^(Memset|memset)|__amd_rocclr_fill|fillBuffer")
REDUCING_OPCODES = frozenset({"reduce", "reduce-window", "scatter", "select-and-scatter"})
VENDOR_SUFFIX_RE = re.compile(r"\.kd$")


@dataclass(slots=True)
class Slot:
    instruction: str
    opcode: str
    kinds: tuple          # expected kernel kinds, in order
    name: str             # the kernel name XLA would give it ("" when a library names it)


@dataclass(slots=True)
class Kernel:
    """What the matcher needs of a kernel; `instruction` and `match` are its answer."""
    index: int
    name: str
    kind: str
    hlo_op: str | None
    group: bool           # shares its correlation id with other kernels (a graph launch)
    instruction: str = ""
    match: str = "none"
    why: str = ""         # for none: "outside" (own launch, no label) or "no slot"


def sanitize(name: str) -> str:
    return name.replace(".", "_").replace("-", "_")


_NORMALIZED: dict[str, str] = {}
_KINDS: dict[tuple, str] = {}


def normalize_kernel_name(name: str) -> str:
    """A kernel symbol as XLA would have named it: no vendor suffix, no signature."""
    out = _NORMALIZED.get(name)
    if out is None:
        out = _NORMALIZED[name] = _normalize(name)
    return out


def _normalize(name: str) -> str:
    n = VENDOR_SUFFIX_RE.sub("", name)
    if n.startswith("void "):
        n = n[5:]
    for sep in ("(", "<"):
        i = n.find(sep)
        if i > 0:
            n = n[:i]
    return n


def kernel_kind(name: str, category: str = "") -> str:
    """gemm, gemm_aux (a split-K reduction), collective, copy or compute, from the name."""
    key = (name, category)
    out = _KINDS.get(key)
    if out is None:
        out = _KINDS[key] = _kind(name, category)
    return out


def _kind(name: str, category: str) -> str:
    if category == "collective" or COLLECTIVE_KERNEL_RE.search(name):
        return "collective"
    if MEMSET_KERNEL_RE.search(name):
        return "memset"
    if category == "memcpy" or COPY_KERNEL_RE.search(name):
        return "copy"
    if GEMM_AUX_RE.search(name):
        return "gemm_aux"
    if GEMM_KERNEL_RE.match(name):
        return "gemm"
    return "compute"


def slot_for(program: Program, ins) -> Slot:
    op = ins.opcode
    if op in COLLECTIVE_OPCODES:
        return Slot(ins.name, op, ("collective",), "")
    if op == "async-start":
        for cid in ins.called_computation_ids:
            comp = program.computations.get(cid)
            if comp is not None and any(i.opcode in COLLECTIVE_OPCODES for i in comp.instructions):
                return Slot(ins.name, op, ("collective",), "")
        return Slot(ins.name, op, ("compute",), sanitize(ins.name))
    if op == "custom-call":
        target = ins.custom_call_target
        if "gemm" in target or "matmul" in target:
            return Slot(ins.name, op, ("gemm",), "")
        if "conv" in target:
            return Slot(ins.name, op, ("compute", "gemm"), "")
        return Slot(ins.name, op, ("compute",), "")
    if op in ("copy", "copy-start"):
        return Slot(ins.name, op, ("copy",), "")
    if op == "fusion" and ins.name.startswith(("gemm_fusion", "triton_gemm", "cublas")):
        return Slot(ins.name, op, ("gemm",), sanitize(ins.name))
    if op == "fusion" and _reduces(program, ins):
        # a reduction may zero its output first: an optional memset before its kernel
        return Slot(ins.name, op, ("memset?", "compute"), sanitize(ins.name))
    return Slot(ins.name, op, ("compute",), sanitize(ins.name))


def _reduces(program: Program, ins) -> bool:
    for cid in ins.called_computation_ids:
        comp = program.computations.get(cid)
        if comp is not None and any(i.opcode in REDUCING_OPCODES for i in comp.instructions):
            return True
    return False


def _is_condition(program: Program, comp_id: int) -> bool:
    comp = program.computations.get(comp_id)
    if comp is None or not comp.instructions:
        return False
    root = next((i for i in comp.instructions if i.id == comp.root_id), comp.instructions[-1])
    return root.shape.element_type == 1 and not root.shape.dimensions  # a scalar pred


def expand(program: Program, unknown_trip_count: int = 1) -> list[Slot]:
    """The launching slots of one execution of the program, in execution order."""
    out: list[Slot] = []

    def walk(comp_id: int, depth: int) -> None:
        if depth > 64:  # a malformed program calling itself: stop rather than recurse forever
            return
        for ins in program.schedule(comp_id):
            op = ins.opcode
            if op in NO_LAUNCH_OPCODES or op in WAIT_OPCODES:
                continue
            if op == "while":
                called = list(ins.called_computation_ids)
                cond = [c for c in called if _is_condition(program, c)]
                body = [c for c in called if c not in cond]
                n = Program.trip_count(ins)
                for _ in range(n if n is not None else unknown_trip_count):
                    if n is None:
                        for c in cond:
                            walk(c, depth + 1)
                    for b in body:
                        walk(b, depth + 1)
                if n is None:
                    for c in cond:
                        walk(c, depth + 1)
                continue
            if op == "call":
                for c in ins.called_computation_ids:
                    walk(c, depth + 1)
                continue
            if op == "conditional":
                if ins.called_computation_ids:
                    walk(ins.called_computation_ids[0], depth + 1)
                continue
            out.append(slot_for(program, ins))

    walk(program.entry_id, 0)
    return out


def launching(program: Program) -> set[str]:
    """Names of the instructions that launch kernels themselves."""
    return {ins.name for ins in program.instructions.values()
            if ins.opcode not in NO_LAUNCH_OPCODES and ins.opcode not in WAIT_OPCODES
            and ins.opcode not in CONTROL_OPCODES}


def _accept_index(slot_kinds: tuple, filled: int, kind: str) -> int | None:
    """The index of the slot's expected kernel that this kernel fills, from `filled` on;
    optional kinds (ending in `?`, e.g. a reduction's initializing memset) may be skipped."""
    i = filled
    while i < len(slot_kinds):
        want = slot_kinds[i]
        base = want.rstrip("?")
        if base == kind:
            return i
        # A GEMM written as a (Triton) fusion may run under a library GEMM name and vice versa.
        if {base, kind} == {"gemm", "compute"} and len(slot_kinds) - i == 1:
            return i
        if not want.endswith("?"):
            return None
        i += 1
    return None


def _accepts(slot_kinds: tuple, filled: int, kind: str) -> bool:
    return _accept_index(slot_kinds, filled, kind) is not None


def match(slots: list[Slot], kernels: list[Kernel], launchers: set[str]) -> None:
    """Fill each kernel's `instruction` and `match` (kernels in launch order)."""
    n = len(slots)
    if not n:
        return
    positions: dict[str, list[int]] = {}
    for i, s in enumerate(slots):
        positions.setdefault(s.instruction, []).append(i)
    names: dict[str, list[int]] = {}
    for i, s in enumerate(slots):
        if s.name:
            names.setdefault(s.name, []).append(i)

    def next_pos(instr: str, p_abs: int) -> int:
        """Absolute position of the instruction's next slot at or after p_abs."""
        pos = positions[instr]
        base, off = divmod(p_abs, n)
        i = bisect.bisect_left(pos, off)
        return base * n + pos[i] if i < len(pos) else (base + 1) * n + pos[0]

    exact = [k.hlo_op is not None and k.hlo_op in launchers and k.hlo_op in positions
             for k in kernels]
    # the index of the next exact kernel after each kernel (for windows)
    next_exact = [None] * len(kernels)
    nxt = None
    for i in range(len(kernels) - 1, -1, -1):
        next_exact[i] = nxt
        if exact[i]:
            nxt = i
    p = 0                  # absolute slot position of the slot being filled
    filled = 0             # kernels already matched to slot p
    last_gemm = None       # the slot of the last GEMM kernel, for split-K reductions
    for i, k in enumerate(kernels):
        if exact[i]:
            if filled and slots[p % n].instruction == k.hlo_op and \
                    filled < len(slots[p % n].kinds):
                pass  # another kernel of the same launching instruction
            elif filled and slots[p % n].instruction == k.hlo_op:
                pass  # more kernels than expected (an op with an initializer, a library call)
            else:
                p = next_pos(k.hlo_op, p + (1 if filled else 0))
                filled = 0
            k.instruction, k.match = k.hlo_op, "exact"
            idx = _accept_index(slots[p % n].kinds, filled, k.kind)
            filled = (idx if idx is not None else filled) + 1
            if k.kind == "gemm":
                last_gemm = p
            continue
        if k.hlo_op is None and not k.group:
            k.match, k.why = "none", "outside"  # its own launch, no label: an argument copy
            continue
        if k.kind == "gemm_aux" and last_gemm is not None:
            k.instruction, k.match = slots[last_gemm % n].instruction, "order"
            continue
        j = next_exact[i]
        a = p if filled < len(slots[p % n].kinds) else p + 1
        if j is not None:
            end = next_pos(kernels[j].hlo_op, a)
            if len(slots[end % n].kinds) > 1 and k.kind != kernels[j].kind:
                end += 1  # its other kernels (an im2col, an initializing memset) come first
        else:
            end = a + n
        norm = normalize_kernel_name(k.name)
        first = _first_accepting(slots, n, a, end, p, filled, k.kind)
        named = _named_in_window(names.get(norm, ()), n, a, end)
        chosen = cls = None
        unique = len(named) == 1
        if first is not None and slots[first % n].name == norm:
            chosen, cls = first, ("name" if unique else "order")
        elif named and first is not None:
            # the next slot expects another name: a reused kernel (stay) or missing kernels
            # before the nearest slot of this name (skip)? The next few kernels decide.
            b = min(x for x in named if x > first) if any(x > first for x in named) else None
            if b is not None and _score(slots, n, kernels, exact, i, b, end) > \
                    _score(slots, n, kernels, exact, i, first, end):
                chosen, cls = b, ("name" if unique else "order")
            else:
                chosen, cls = first, "order"
        elif named:
            chosen, cls = min(named), ("name" if unique else "order")
        elif first is not None:
            chosen, cls = first, "order"
        if chosen is None:
            k.match, k.why = "none", "no slot"
            continue
        if chosen != p:
            p, filled = chosen, 0
        k.instruction, k.match = slots[p % n].instruction, cls
        idx = _accept_index(slots[p % n].kinds, filled, k.kind)
        filled = (idx if idx is not None else filled) + 1
        if k.kind == "gemm":
            last_gemm = p


def _first_accepting(slots, n, a, end, p, filled, kind):
    x = a
    while x < end:
        if _accepts(slots[x % n].kinds, filled if x == p else 0, kind):
            return x
        x += 1
    return None


def _named_in_window(cands, n, a, end) -> list[int]:
    out = []
    for base in range(a // n, end // n + 1):
        for c in cands:
            x = base * n + c
            if a <= x < end:
                out.append(x)
    return out


LOOKAHEAD = 6  # kernels compared when deciding between "reused kernel" and "missing kernels"


def _score(slots, n, kernels, exact, i, x, end) -> int:
    """How many of the next non-exact kernels name the slots that follow slot x, in order."""
    score = 0
    q = x + 1
    for idx in range(i + 1, min(len(kernels), i + 1 + LOOKAHEAD)):
        kk = kernels[idx]
        if exact[idx] or (kk.hlo_op is None and not kk.group):
            break
        y = _first_accepting(slots, n, q, end + n, -1, 0, kk.kind)
        if y is None:
            break
        if slots[y % n].name == normalize_kernel_name(kk.name):
            score += 1
        q = y + 1
    return score
