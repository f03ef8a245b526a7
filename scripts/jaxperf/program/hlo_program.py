"""One compiled program (``xla.HloModuleProto``) as plain lookups: computations, instructions,
schedule order, while-loop trip counts, and each instruction's Python source frames.

Source frames come from whichever the program fills (handle every combination):
- ``OpMetadata.stack_frame_id`` through the module's ``stack_frame_index`` (jax 0.10.2 fills
  only this): a chain from the innermost frame outward via ``parent_frame_id``; ids are 1-based,
  0 = none;
- ``OpMetadata.source_file`` / ``source_line`` (older jax): one frame;
- a fusion whose own metadata is empty takes its frames from its fused instructions.

A program is checked when it is wrapped (``ProgramError``, one sentence, where it is not what XLA
writes): unique computation and instruction ids and instruction names,
no empty computation, every called computation and operand present, calls that never loop
back and nest at most ``MAX_CALL_DEPTH`` deep, schedules that list an instruction once, backend
configs nested less deep than the parser can follow, and at most
``MAX_RUNS_PER_EXECUTION`` instruction runs per execution with loops unrolled by their known
trip counts (what the matcher expands). ``load(blob, id)`` parses and checks in one step.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from jaxperf.read.xprotos import PRIMITIVE_TYPES
from jaxperf.read.xprotos import nbytes as xprotos_nbytes
from tracekit.trace_rules import (
    NO_LAUNCH_OPCODES,  # noqa: F401  (re-exported: one home)
    WAIT_OPCODES,
)

# The default "user code" frame: the first frame (innermost first) in none of these libraries,
# matched on a path component (`/opt/praxis/praxis/layers/base_ops.py` is praxis). The one list:
# references/attribution.md and SKILL.md name the same. jax itself and the modelling frameworks
# built on it: a model's einsum goes through a framework's wrapper (praxis base_ops, flax's
# module call), whose line is the same for every layer and says nothing about the model.
FRAMEWORK_PACKAGES = ("jax", "jaxlib", "flax", "praxis", "paxml", "equinox", "haiku", "optax",
                      "keras")
# jax's own frames are its internals (lax, numpy wrappers): never reported as the framework frame.
JAX_PACKAGES = frozenset({"jax", "jaxlib"})
# Installed packages: library code wherever they sit (a package without a component above).
INSTALL_DIRS = frozenset({"site-packages", "dist-packages"})
_PATH_SPLIT_RE = re.compile(r"[/\\]")
# Calls (fusions, while bodies, branches) nest a few levels in XLA's programs (a fusion in a
# while body in a while body is 3); the matcher follows 64, so a deeper program is not XLA's.
MAX_CALL_DEPTH = 64
# Frames kept of one instruction's stack, innermost first: JAX records the user's frames of a
# traceback (tens); a chain of 200,000 frames walked whole for each instruction took 70 s and
# 2.2 GB. The user's line is the first frame outside the libraries, near the innermost end.
MAX_STACK_FRAMES = 256
# Instruction runs in one execution, while loops unrolled by their known trip counts: the
# matcher holds one slot per run. The largest program seen (the PAX A100 step, 37,026
# instructions) runs about 12,000; MaxText's scanned layers about 3,500. Ten million slots would
# cost gigabytes, so more is a corrupt trip count, not a program.
MAX_RUNS_PER_EXECUTION = 5_000_000
# jax.random's samplers (their jitted helpers in the name stack) and its bits primitive: an xor
# under one of them is a round of threefry's hash (rbg's bits are one rng-bit-generator, and a
# key's split or fold_in is `_threefry_split`/`_threefry_fold_in`: a few words, not the bits).
RANDOM_SAMPLER_RE = re.compile(
    r"jit\(_(?:uniform|bernoulli|normal|randint|truncated_normal|gumbel|categorical|choice|"
    r"permutation|gamma|beta|exponential|poisson|laplace|logistic|cauchy|dirichlet|rademacher|"
    r"orthogonal|binomial)\w*\)|random_bits|threefry2x32")
# xors under a sampler that make an instruction one computing threefry's bits (its 20 rounds
# hold an xor each)
RANDOM_MIX_MIN = 8
# A backend config with more brackets than this is parsed once here to prove its depth is one a
# JSON parser can follow (XLA's nest under 10 levels; a RecursionError must not reach a step).
CONFIG_BRACKETS_CHECKED = 500


@dataclass(frozen=True, slots=True)
class Frame:
    file: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


class ProgramError(ValueError):
    """The program is not one XLA writes (a corrupt HLO proto); the message is one sentence.
    `parse`: True when the proto does not even parse, False when it parses but is
    inconsistent."""

    def __init__(self, message: str, parse: bool = False):
        super().__init__(message)
        self.parse = parse


def load(blob: bytes, program_id: int | None = None) -> Program:
    """Parse a serialized ``xla.HloProto`` and check it: a ProgramError when it does not parse
    or is inconsistent."""
    from jaxperf.read import xprotos
    try:
        module = xprotos.classes()["HloProto"].FromString(blob).hlo_module
    except xprotos.MissingDependency:
        raise
    except Exception as exc:  # noqa: BLE001 - the runtime raises DecodeError or others
        raise ProgramError(f"program {program_id}: its HLO proto does not parse "
                           f"({str(exc) or type(exc).__name__})", parse=True) from exc
    return Program(module, program_id)


class Program:
    def __init__(self, module, program_id: int | None = None, check: bool = True):
        self.module = module
        self.id = module.id if program_id is None else program_id
        self.name = module.name
        self.computations = {c.id: c for c in module.computations}
        self.instructions = {}
        self.computation_of = {}
        for comp in module.computations:
            for ins in comp.instructions:
                self.instructions[ins.id] = ins
                self.computation_of[ins.id] = comp.id
        self.by_name = {ins.name: ins for ins in self.instructions.values()}
        # instruction name -> the frames its runs carry on the device, for an instruction whose
        # HLO has none (a TPU's op events hold their own source stack: jaxperf.tpu.op_runs)
        self.run_frames: dict[str, list[Frame]] = {}
        self.entry_id = module.entry_computation_id
        sfi = module.stack_frame_index
        self._files = list(sfi.file_names)
        self._functions = list(sfi.function_names)
        self._locations = list(sfi.file_locations)
        self._frames = list(sfi.stack_frames)
        self._stacks: dict[int, list[Frame]] = {}
        self._comp_frames: dict[int, list[Frame]] = {}
        self._loop_of: dict[int, str] | None = None
        self._states: dict = {}
        if check:
            self.check()

    def _fail(self, what: str) -> None:
        raise ProgramError(f"program {self.name}({self.id}) {what}, so its HLO is corrupt")

    def check(self) -> None:
        """Raise ProgramError where the program is not one XLA writes (see the module's
        docstring); it runs in linear time."""
        m = self.module
        comps = m.computations
        if len(self.computations) != len(comps):
            self._fail("has two computations with one id")
        n = sum(len(c.instructions) for c in comps)
        if len(self.instructions) != n:
            self._fail("has two instructions with one id")
        if len(self.by_name) != n:
            self._fail("has two instructions with one name")
        calls: dict[int, list[int]] = {}
        operands: set = set()
        for c in comps:
            out = calls[c.id] = []
            if not c.instructions:
                self._fail(f"holds computation {c.id} without instructions")
            for ins in c.instructions:
                called = ins.called_computation_ids
                if called:
                    out.extend(called)
                operands.update(ins.operand_ids)
                cfg = ins.backend_config
                if len(cfg) > CONFIG_BRACKETS_CHECKED and \
                        cfg.count(b"[") + cfg.count(b"{") > CONFIG_BRACKETS_CHECKED:
                    try:
                        json.loads(cfg)
                    except RecursionError:
                        self._fail(f"nests {ins.name}'s backend config too deep to read")
                    except ValueError:
                        pass  # not JSON: read as no config, as everywhere
        if missing := operands.difference(self.instructions):
            self._fail(f"names operand {min(missing)}, an instruction it does not hold")
        if missing := {cid for out in calls.values() for cid in out}.difference(self.computations):
            self._fail(f"calls computation {min(missing)}, which it does not hold")
        for cid, seq in m.schedule.sequences.items():
            if len(set(seq.instruction_ids)) != len(seq.instruction_ids):
                self._fail(f"schedules an instruction twice in computation {cid}")
        # calls: no cycle, no deeper than MAX_CALL_DEPTH (iterative: no recursion to overflow)
        depth: dict[int, int] = {}
        for root in calls:
            if root in depth:
                continue
            stack = [(root, iter(calls[root]))]
            on_path = {root}
            while stack:
                cid, it = stack[-1]
                nxt = next(it, None)
                if nxt is None:
                    stack.pop()
                    on_path.discard(cid)
                    depth[cid] = 1 + max((depth[c] for c in calls[cid]), default=0)
                    if depth[cid] > MAX_CALL_DEPTH:
                        self._fail(f"nests calls more than {MAX_CALL_DEPTH} deep")
                    continue
                if nxt in on_path:
                    self._fail(f"has computation {nxt} call itself (through its callees)")
                if nxt not in depth:
                    on_path.add(nxt)
                    stack.append((nxt, iter(calls[nxt])))
        runs = self.runs_per_execution()
        if runs > MAX_RUNS_PER_EXECUTION:
            self._fail(f"runs {runs:,} instructions per execution with its loops unrolled, over "
                       f"{MAX_RUNS_PER_EXECUTION:,} (a while loop's trip count is absurd)")

    def runs_per_execution(self) -> int:
        """Instruction runs in one execution, loops unrolled by their known trip counts (one
        iteration where unknown), from the entry; the call graph must be acyclic."""
        memo: dict[int, int] = {}

        def size(cid: int) -> int:
            if cid in memo:
                return memo[cid]
            if cid not in self.computations:
                return 0  # an entry the module does not hold: nothing runs
            total = 0
            for ins in self.schedule(cid):
                op = ins.opcode
                if op in NO_LAUNCH_OPCODES or op in WAIT_OPCODES:
                    continue
                if op in ("while", "call", "conditional"):
                    inner = sum(size(c) for c in ins.called_computation_ids
                                if c in self.computations) + 1
                    total += inner * max(1, self.trip_count(ins) or 1) if op == "while" \
                        else inner
                else:
                    total += 1
                if total > MAX_RUNS_PER_EXECUTION:
                    break  # already too many: stop counting
            memo[cid] = total
            return total
        return size(self.entry_id)

    def arguments(self) -> tuple[int, float]:
        """The program's arguments: how many arrays it takes (its entry parameters, a tuple's
        elements each), and the share of their bytes (percent) that are 64-bit floats (f64,
        c128: what a chip without f64 arithmetic emulates)."""
        leaves = []
        todo = [i.shape for i in self.computations[self.entry_id].instructions
                if i.opcode == "parameter"] if self.entry_id in self.computations else []
        while todo:
            shape = todo.pop()
            if shape.tuple_shapes:
                todo.extend(shape.tuple_shapes)
            else:
                leaves.append((xprotos_nbytes(shape), self.dtype_of(shape) in ("f64", "c128")))
        total = sum(b for b, _ in leaves)
        return len(leaves), 100.0 * sum(b for b, f in leaves if f) / total if total else 0.0

    def partitions(self) -> int | None:
        """The devices the program's sharding spans: over its instructions' OpShardings, the
        most a tile assignment names (its device ids, else the product of its dimensions: an
        iota assignment) or a maximal sharding's device id + 1; None where none names a device
        (a program on one device)."""
        def spans(s) -> int:
            if s.type == 2:  # a tuple: its elements'
                return max((spans(t) for t in s.tuple_shardings), default=0)
            if s.type in (1, 3) and s.tile_assignment_devices:  # maximal, or tiled by ids
                return max(s.tile_assignment_devices) + 1
            return math.prod(s.tile_assignment_dimensions) if s.type == 3 else 0
        n = max((spans(i.sharding) for i in self.instructions.values()
                 if i.HasField("sharding")), default=0)
        return n if n > 1 else None

    def schedule(self, computation_id: int) -> list:
        """Instructions of a computation in execution order (the schedule), else stored order.
        An id the schedule names that is not one of this computation's instructions is left
        out (it would let a computation run another's while loop, and loop back into itself)."""
        seq = self.module.schedule.sequences.get(computation_id)
        if seq is not None and seq.instruction_ids:
            own = self.computation_of
            return [self.instructions[i] for i in seq.instruction_ids
                    if own.get(i) == computation_id]
        return list(self.computations[computation_id].instructions)

    def under(self, ins, opcodes=("bitcast",)):
        """The instruction under a chain of `opcodes` (first operands)."""
        while ins.opcode in opcodes and ins.operand_ids and \
                ins.operand_ids[0] in self.instructions:
            ins = self.instructions[ins.operand_ids[0]]
        return ins

    def called_root(self, ins, opcodes=("bitcast",)):
        """The root of the computation `ins` calls first (a fusion's, an async-start's), under
        a chain of `opcodes`; None where it calls none."""
        comp = self.computations.get(ins.called_computation_ids[0]) \
            if ins.called_computation_ids else None
        if comp is None or not comp.instructions:
            return None
        return self.under(self.instructions.get(comp.root_id) or comp.instructions[-1], opcodes)

    def moves_layout(self, ins) -> str:
        """Whether a copy or transpose (or a fusion rooted in one) changes the layout: "yes" for
        a transpose, or a copy whose operand is laid out otherwise (minor-to-major order or
        tiles); "no" for a copy into the same layout (a buffer copy XLA inserted: a loop's carry,
        an input not donated); "" for any other instruction, or where the HLO holds no
        layout."""
        root = self.called_root(ins) if ins.opcode == "fusion" else ins
        if root is None or root.opcode not in ("copy", "transpose"):
            return ""
        if root.opcode == "transpose":
            return "yes"
        src = self.instructions.get(root.operand_ids[0]) if root.operand_ids else None
        if src is None or not (root.shape.HasField("layout") and src.shape.HasField("layout")):
            return ""

        def laid(shape) -> tuple:
            lay = shape.layout
            return tuple(lay.minor_to_major), tuple(tuple(x.dimensions) for x in lay.tiles)
        return "yes" if laid(root.shape) != laid(src.shape) else "no"

    def argument_layout(self, ins) -> str:
        """For a layout-changing copy (`moves_layout` "yes"; or a fusion rooted in one) in the
        entry computation that moves a parameter of the program into the layout the program
        computes in ("in"), or a value into the layout of the program's result ("out"): that
        direction, then the order of the array's dimensions, major to minor, in the layout the
        program computes in ("in 0,2,1,3": an array of that order laid out row-major would need
        no copy), then " not donated" for a parameter the program does not alias to a result;
        "" for any other instruction."""
        if self.computation_of.get(ins.id) != self.entry_id or self.moves_layout(ins) != "yes":
            return ""
        root = self.called_root(ins) if ins.opcode == "fusion" else ins
        if root.opcode != "copy" or not root.operand_ids:
            return ""
        src = self.under(self.instructions[root.operand_ids[0]])
        if src.opcode == "parameter" and ins is not root:  # a fusion's parameter: its operand
            src = self.under(self.instructions[ins.operand_ids[src.parameter_number]]) \
                if src.parameter_number < len(ins.operand_ids) else src
        entry_root = self.instructions.get(self.computations[self.entry_id].root_id)
        outs = {self.under(self.instructions[i]).id for i in entry_root.operand_ids} \
            if entry_root is not None and entry_root.opcode == "tuple" else \
            {self.under(entry_root).id} if entry_root is not None else set()
        if src.opcode == "parameter" and self.computation_of.get(src.id) == self.entry_id:
            way, program_shape = "in", root.shape
        elif ins.id in outs:
            way, program_shape = "out", self.instructions[root.operand_ids[0]].shape
        else:
            return ""
        order = list(reversed(program_shape.layout.minor_to_major))
        if order == sorted(order):
            return ""  # the program computes in row-major order: the argument is the odd one
        donated = {e.parameter_number for e in self.module.input_output_alias.entries}
        return (f"{way} {','.join(map(str, order))}" + (
            " not donated" if way == "in" and src.parameter_number not in donated else ""))

    def random_bits(self, ins) -> str:
        """"threefry" where `ins`, or a computation it calls (fused or nested), computes
        jax.random's threefry bits: RANDOM_MIX_MIN or more xors whose op_name lies under a
        jax.random sampler (RANDOM_SAMPLER_RE); "" otherwise."""
        def xors(i) -> int:
            return i.opcode == "xor" and bool(RANDOM_SAMPLER_RE.search(i.metadata.op_name))
        n, todo, seen = int(xors(ins)), list(ins.called_computation_ids), set()
        while todo and n < RANDOM_MIX_MIN:
            cid = todo.pop()
            if cid in seen or cid not in self.computations:
                continue
            seen.add(cid)
            for i in self.computations[cid].instructions:
                n += xors(i)
                todo.extend(i.called_computation_ids)
        return "threefry" if n >= RANDOM_MIX_MIN else ""

    def independent_loop(self, ins) -> str:
        """The outermost while loop around `ins` (or `ins` itself) whose iterations are
        independent of each other (`independent`): its name, "" where none."""
        if self._loop_of is None:
            caller = {c: i for i in self.instructions.values() for c in i.called_computation_ids}
            self._loop_of = {}
            for cid in self.computations:  # outward from each computation; memo on the way back
                chain, at = [], cid
                while at not in self._loop_of and at in caller and len(chain) <= MAX_CALL_DEPTH:
                    chain.append(at)
                    at = self.computation_of[caller[at].id]
                found = self._loop_of.get(at, "")
                for c in reversed(chain):
                    w = caller[c]
                    if not found and w.opcode == "while" and \
                            w.called_computation_ids[0] == c and self.independent(w):
                        found = w.name
                    self._loop_of[c] = found
        return self._loop_of.get(self.computation_of.get(ins.id), "") or (
            ins.name if ins.opcode == "while" and self.independent(ins) else "")

    def independent(self, w) -> bool:
        return self._loop_state(w) is not None

    def invariant_bytes(self, ins) -> int:
        """Of an instruction in an independent loop's body (`_loop_state`): the bytes of its
        operands that are the same whole arrays every iteration (state the loop passes through,
        read other than by a slice at the counter): read once when the loop is vectorised."""
        w = self.by_name.get(self.independent_loop(ins))
        if w is None or self.computation_of.get(ins.id) != w.called_computation_ids[0]:
            return 0
        element, counters, _, through = self._loop_state(w)
        return sum(xprotos_nbytes(self.instructions[x].shape)
                   for k, x in enumerate(ins.operand_ids)
                   if element(self.instructions[x]) in through
                   and not self._sliced_at(ins, k, element, counters))

    def _sliced_at(self, user, k, element, counters) -> bool:
        """Whether `user` reads its operand `k` only as slices at the loop's counter (or at
        constants): a dynamic-slice of it, or a fusion whose parameter k only dynamic-slices
        do."""
        get = self.instructions.get
        if user.opcode == "fusion" and user.called_computation_ids:
            comp = self.computations.get(user.called_computation_ids[0])
            param = next((i for i in comp.instructions if i.opcode == "parameter"
                          and i.parameter_number == k), None) if comp else None
            if param is None:
                return False
            ops = {i.parameter_number: element(get(user.operand_ids[i.parameter_number]))
                   for i in comp.instructions if i.opcode == "parameter"
                   and i.parameter_number < len(user.operand_ids)}
            at = [i for i in comp.instructions if param.id in i.operand_ids]

            def at_counter(x) -> bool:  # a constant, or the parameter the counter comes in by
                x = self.under(get(x), ("bitcast", "copy", "convert"))
                return x.opcode == "constant" or x.opcode == "parameter" and \
                    ops.get(x.parameter_number) in counters
            return bool(at) and all(i.opcode == "dynamic-slice" and i.operand_ids[0] == param.id
                                    and param.id not in i.operand_ids[1:]
                                    and all(at_counter(x) for x in i.operand_ids[1:]) for i in at)
        return user.opcode == "dynamic-slice" and k == 0 and all(
            get(x).opcode == "constant" or element(get(x)) in counters
            for x in user.operand_ids[1:])

    def _loop_state(self, w):
        """A while loop whose iterations are independent (a lax.map, a fori_loop writing
        `out.at[i]`, a scan whose only carry is its counter): its body passes each element of
        its state through unchanged, adds constants to it (a counter), or writes one
        iteration's slice into it (a dynamic-update-slice, alone or as a fusion's root) that
        the body reads nowhere else but at the counter: no value flows from one iteration into
        the next. None where not; else (element: an instruction -> the state element it reads,
        counters, written elements, passed-through elements). Memoized."""
        if w.id not in self._states:
            self._states[w.id] = self._find_state(w)
        return self._states[w.id]

    def _find_state(self, w):
        body = self.computations.get(w.called_computation_ids[0]) \
            if w.opcode == "while" and w.called_computation_ids else None
        root = self.instructions.get(body.root_id) if body is not None else None
        params = [i.id for i in body.instructions if i.opcode == "parameter"] if body else []
        if root is None or root.opcode != "tuple" or len(params) != 1:
            return None
        get = self.instructions.get

        def element(i) -> int | None:  # the state's element `i` reads, under bitcasts/copies
            i = self.under(i, ("bitcast", "copy")) if i is not None else None
            return i.tuple_index if i is not None and i.opcode == "get-tuple-element" and \
                list(i.operand_ids) == params else None
        counters, written, through = set(), {}, set()
        for j, oid in enumerate(root.operand_ids):
            o = self.under(get(oid), ("bitcast", "copy")) if get(oid) is not None else None
            if o is None:
                return None
            reads = [element(get(x)) for x in o.operand_ids]
            top = self.called_root(o) if o.opcode == "fusion" else o
            if element(o) == j:
                through.add(j)
            elif top is not None and top.opcode == "add" and j in reads and all(
                    e == j or get(x).opcode == "constant"
                    for x, e in zip(o.operand_ids, reads, strict=True)):
                counters.add(j)  # the element plus constants (a fusion's inside it)
            elif top is not None and top.opcode == "dynamic-update-slice" and j in reads:
                written[j] = o.id
            else:
                return None
        if not counters or not written:
            return None
        for i in body.instructions:  # a written element read but by its update or at the counter
            for k, x in enumerate(i.operand_ids):
                e = element(get(x))
                if e in written and i.id not in (written[e], root.id) and \
                        get(x).opcode == "get-tuple-element" and \
                        not self._sliced_at(i, k, element, counters):
                    return None
        return element, counters, set(written), through

    @staticmethod
    def trip_count(ins) -> int | None:
        """``known_trip_count`` of a while instruction's backend_config, when present."""
        if ins.opcode != "while" or not ins.backend_config:
            return None
        try:
            cfg = json.loads(ins.backend_config)
            n = int(cfg["known_trip_count"]["n"])
        except (ValueError, KeyError, TypeError, RecursionError):
            return None
        return n if n >= 0 else None

    @staticmethod
    def dtype(ins) -> str:
        return Program.dtype_of(ins.shape)

    @staticmethod
    def dtype_of(shape) -> str:
        return PRIMITIVE_TYPES.get(shape.element_type, f"type{shape.element_type}")

    def stack(self, frame_id: int) -> list[Frame]:
        """The frames from ``frame_id`` outward (innermost first); [] when none (memoized:
        instructions share frames)."""
        if frame_id in self._stacks:
            return self._stacks[frame_id]
        out = self._stacks[frame_id] = []
        seen = set()
        while 0 < frame_id <= len(self._frames) and frame_id not in seen \
                and len(out) < MAX_STACK_FRAMES:
            seen.add(frame_id)
            fr = self._frames[frame_id - 1]
            loc_id = fr.file_location_id
            if 0 < loc_id <= len(self._locations):
                loc = self._locations[loc_id - 1]
                file = self._files[loc.file_name_id - 1] if 0 < loc.file_name_id <= len(
                    self._files) else ""
                func = self._functions[loc.function_name_id - 1] if 0 < loc.function_name_id \
                    <= len(self._functions) else ""
                out.append(Frame(file, loc.line, func))
            frame_id = fr.parent_frame_id
        return out

    def frames(self, ins) -> list[Frame]:
        """Source frames of an instruction (innermost first), looking into fusions if needed
        (each fused computation's answer memoized: fusions nested and shared would otherwise
        be searched once per path to them, twice as often per level)."""
        md = ins.metadata
        if md.stack_frame_id and (frames := self.stack(md.stack_frame_id)):
            return frames
        if md.source_file:
            return [Frame(md.source_file, md.source_line, "")]
        if ins.opcode == "fusion":
            for comp_id in ins.called_computation_ids:
                if frames := self._computation_frames(comp_id):
                    return frames
        return self.run_frames.get(ins.name, [])

    def _computation_frames(self, comp_id: int) -> list[Frame]:
        """The frames of a fused computation's last instruction that has any (its root is stored
        last); [] for none. Memoized; calls nest at most MAX_CALL_DEPTH deep (checked)."""
        if (memo := self._comp_frames.get(comp_id)) is None:
            self._comp_frames[comp_id] = []  # a call back to it (a cycle the checks refused)
            comp = self.computations.get(comp_id)
            memo = next((f for f in (self.frames(inner) for inner in reversed(comp.instructions))
                         if f), []) if comp is not None else []
            self._comp_frames[comp_id] = memo
        return memo

    def user_frame(self, ins, user_re: re.Pattern | None = None) -> Frame | None:
        """The first frame that counts as user code (``user_re`` matches its file; by default a
        frame in no library: ``is_library_file``), if any."""
        is_user = user_re.search if user_re is not None else lambda f: not is_library_file(f)
        return next((fr for fr in self.frames(ins) if is_user(fr.file)), None)

    def framework_frame(self, ins) -> str:
        """The innermost frame inside a modelling framework (FRAMEWORK_PACKAGES but jax), as
        ``<package>/<path>:<line> <function>`` (``praxis/layers/base_ops.py:42 __call__``); ""
        when no frame is in one."""
        return next((f"{rel}:{fr.line} {fr.function}".strip() for fr in self.frames(ins)
                     if (rel := framework_path(fr.file))), "")


def _package_at(parts: list[str]) -> int:
    """Index of the innermost folder naming a FRAMEWORK_PACKAGES package (a checkout is
    `/opt/praxis/praxis/...`: the package is the inner one), else -1."""
    # from the folder holding the file (the file itself is not a package) outward
    return next((i for i in range(len(parts) - 2, -1, -1) if parts[i] in FRAMEWORK_PACKAGES), -1)


def is_library_file(path: str) -> bool:
    """A frame's file is library code: under an install folder (INSTALL_DIRS), in a
    FRAMEWORK_PACKAGES package (a path component), or frozen (`<frozen runpy>`)."""
    if path.startswith("<frozen "):
        return True
    parts = _PATH_SPLIT_RE.split(path)
    return not INSTALL_DIRS.isdisjoint(parts[:-1]) or _package_at(parts) >= 0


def framework_path(path: str) -> str:
    """The file's path from its framework package on (`praxis/layers/base_ops.py`) when it lies
    in a modelling framework (FRAMEWORK_PACKAGES but jax), else ""."""
    parts = _PATH_SPLIT_RE.split(path)
    i = _package_at(parts)
    if i < 0 or parts[i] in JAX_PACKAGES:
        return ""
    return "/".join(parts[i:])
