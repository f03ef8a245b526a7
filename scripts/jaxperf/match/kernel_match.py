"""Match GPU events (kernels, memcpys, memsets) to the HLO instructions that launched them,
command buffers (CUDA/HIP graphs) included.

The model (one per program, `Plan`):
- the schedule expanded as the runtime runs it: while loops by their known trip count (an
  unknown one runs its condition each iteration), `call`/`conditional` followed, instructions that
  launch nothing skipped. Each launching instruction execution is a *slot*; each slot expects
  GPU events of given kinds, some optional, some repeatable (`expected_events`);
- each fusion's kernel name is predicted, kernel reuse included: fusions whose fused computations
  are identical (instructions, shapes, layouts, operand wiring and attributes, names aside) and
  whose arguments have the same shapes share one compiled kernel, named after the first of them in
  emission order (XLA: xla/service/gpu/kernel_reuse_cache.cc keys on the fused computation's
  fingerprint, the kernel arguments and a discriminator);
- every instruction name of the module resolves to the scheduled instruction that launched it: an
  `hlo_op` naming an instruction inside a fusion (a memcpy fusion's `copy`, a dynamic-slice
  fusion's library hero), inside an async computation or a reduction's region, lands on its
  fusion or `*-start`.

The matching, per device and program, events in launch order (correlation id, then start):
- exact: the event's `hlo_op` resolves to a launching instruction; it anchors the alignment;
- every other run of events sharing one launch (a graph launch, or a lone event whose label names
  no launching instruction) is aligned with the expected events between the previous anchor and the
  next one by a global alignment (edit distance, `align`): an event of the right kind and predicted
  name costs 0, of the right kind under another name `MISMATCH`, an unexpected event `INSERT`, a
  missing required event `DELETE`; kinds that do not fit never pair. An event the schedule did not
  predict costs one event, never the rest of the window. Aligned events are class `name` (their
  name is the predicted one) or `order` (placed by kind and position: library kernels, memcpys,
  kernels under another name);
- none: no slot accepts it (`why` says: launched outside any instruction, or no slot).
Each event gets a confidence in [0, 1] (`confidence`): exact 1; aligned events by their own fit
and their neighbours' in the same launch. Events reordered inside a launch are put back by their
names (`_repair`); where the capture shows a launch's events running at once or out of order, its
order does not pin placements: alike events of instructions the data flow leaves unordered share
their confidence, and placements by position alone keep only their own fit (`_unpinned`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass

import numpy as np

from jaxperf.program.hlo_program import Program
from tracekit.gpu import KINDS, kernel_kind
from tracekit.records import OpRun
from tracekit.trace_rules import (
    COLLECTIVE_OPCODES,
    CONTROL_OPCODES,
    MEMSET_OPCODES,
    NO_LAUNCH_OPCODES,
    WAIT_OPCODES,
)

REDUCING_OPCODES = frozenset({"reduce", "reduce-window", "scatter", "select-and-scatter"})
# What a memcpy-like fused computation may hold besides its copy.
COPY_BODY_OPCODES = frozenset({"parameter", "constant", "bitcast", "copy", "dynamic-slice",
                               "dynamic-update-slice", "slice", "subtract", "add", "clamp",
                               "compare", "select", "convert", "tuple", "get-tuple-element"})
VENDOR_SUFFIX_RE = re.compile(r"\.kd$")

KIND_ID = {k: i for i, k in enumerate(KINDS)}
# Expected kinds: the observed kinds each accepts (a GEMM written as a Triton fusion may run
# under either name; a fusion that is a memcpy at run time on one XLA version is a kernel on
# another: "copyish" accepts both).
ACCEPTS = {
    "compute": {"compute", "gemm"},
    "gemm": {"gemm", "compute"},
    "gemm_aux": {"gemm_aux"},
    "collective": {"collective"},
    "copy": {"copy"},
    "memset": {"memset"},
    "copyish": {"copy", "compute"},
}
EXP_KINDS = tuple(ACCEPTS)
EXP_KIND_ID = {k: i for i, k in enumerate(EXP_KINDS)}
COPY_KIND = KIND_ID["copy"]
COPYISH = EXP_KIND_ID["copyish"]

# Alignment costs (integers, so that the traceback can compare exactly).
MATCH_LIBRARY = 0      # right kind, the expected name is a library's (unknown)
OWN_NAME = 5           # the slot's own name where reuse under another name was predicted
MISMATCH = 60          # right kind, another name (a reused kernel we did not predict)
KIND_SWAP = 30         # added when gemm <-> compute pair up (an XLA kernel in a library slot)
INSERT = 100           # an event the schedule did not predict
REPEAT = 80           # one more event of a slot that may launch several of that kind (below INSERT,
                      # far above a match: it never beats placing an event by name)
DELETE = 100           # a required expected event not seen (missing replay, dropped event)
LEAD = 1               # per expected event skipped before a launch's first event
INF = 1 << 40
MAX_TRIPS = 4096       # iterations expanded for a loop whose trip count is inferred (memory bound)
# Events one execution of a program may expand to through its loops of unknown trip count: each
# is bounded by MAX_TRIPS, but nested they multiply (three deep: 4096^3). Past this the
# remaining iterations are left out (`cut`, said in a note): their kernels stay unmatched.
MAX_PLAN_EVENTS = 1_000_000
WINDOW_CAP_EXTRA = 64  # expected events beyond one execution that a window may span

# Confidence: a placed event's own fit, averaged with its neighbours' in the same launch.
OWN_FIT = {"name": 1.0, "library": 0.85, "mismatch": 0.4, "repeat": 0.5, "repair": 0.3}
NEIGHBOURS = 5         # events each side whose fit supports a placement
# fits that rest on the event's position alone (its name puts it elsewhere, or nowhere): in a
# launch whose order the capture does not pin down, the neighbours' agreement does not lift them
POSITION_FITS = frozenset({"mismatch", "repeat", "repair"})
LOW_CONFIDENCE = 0.6   # below this a placement rests on weak evidence (reported as a share)
# Inside a CUDA graph on one stream, a kernel starts before the one before it has ended on real
# GPUs while the two run in the schedule's order (the H200 captures in tests/data/h200: 62% of
# consecutive kernels overlap, by up to 2.2 us and a third of the earlier one's duration, and
# no pair of name-placed kernels the data flow leaves unordered, 765 pairs, runs out of the
# schedule's order). Events run at once where a later one starts before an earlier one is this
# share done (two commands launched together start within a fraction of either's duration).
AT_ONCE_SHARE = 0.5


@dataclass(slots=True)
class Slot:
    instruction: str
    opcode: str
    scope: tuple          # enclosing control instructions (while / call / conditional), outer first
    start: int = 0        # index of its first expected event in the execution
    count: int = 0        # number of expected events


@dataclass(slots=True)
class Expect:
    slot: int
    kind: str             # one of EXP_KINDS
    name: str             # predicted kernel name ("" where a library names it)
    own: str = ""         # the slot's own sanitized name, where reuse predicts another
    optional: bool = False
    repeat: bool = False  # the slot may launch more events of this kind


class Kernel(OpRun):
    """An op run (tracekit.records.OpRun) and the answer for it: the record of an event in
    step 4. attribute_kernels builds one per event from the capture (its OpRun fields, the
    correlation id, the tracer's hlo_op and hlo_module labels, program id, whether it is a
    memcpy) and fills `kind` and `group` before matching; `match` reads name, kind, hlo_op,
    group, corr (and start, dur, stream where known: they show whether a launch's events ran at
    once) and fills instruction, inner, match, why and confidence."""
    __slots__ = ("corr", "hlo_op", "program_id", "own_program", "instruction", "match", "cpu",
                 "why", "inner", "confidence", "kind", "group", "module")

    def __init__(self, device, stream, start, dur, name, corr, hlo_op, program_id, graph,
                 memcpy, module=None, cpu=False):
        self.device = device
        self.lane = stream
        self.start = start
        self.dur = dur
        self.name = name
        self.corr = corr
        self.hlo_op = hlo_op
        self.own_program = program_id is not None  # the capture gave its program id
        self.program_id = program_id
        self.graph = graph
        self.category = "memcpy" if memcpy else ""  # trace_rules' category once classified
        self.instruction = ""
        self.match = "none"
        self.why = ""         # for none: "outside" (own launch, no label), "no slot", "no hlo"
        self.inner = ""       # the instruction the label named, where it is inside `instruction`
        self.confidence = 0.0
        self.kind = ""        # gpu.kernel_kind
        self.group = False    # one launch with other events (a graph, or a shared correlation id)
        self.cpu = cpu
        self.module = module  # the tracer's hlo_module label


# ------------------------------------------------------------------------------- names, kinds

def sanitize(name: str) -> str:
    return name.replace(".", "_").replace("-", "_")


@functools.cache
def normalize_kernel_name(name: str) -> str:
    """A kernel symbol as XLA would have named it: no vendor suffix, no signature (memoized)."""
    n = VENDOR_SUFFIX_RE.sub("", name).removeprefix("void ")
    for sep in ("(", "<"):
        i = n.find(sep)
        if i > 0:
            n = n[:i]
    return n


__all__ = ["Kernel", "Plan", "kernel_kind", "match", "normalize_kernel_name", "sanitize"]


# ------------------------------------------------------------------------------- the plan

_VOLATILE_FIELDS = ("name", "id", "operand_ids", "called_computation_ids", "metadata",
                    "control_predecessor_ids")


def _backend(ins) -> dict:
    if not ins.backend_config:
        return {}
    try:
        cfg = json.loads(ins.backend_config)
    except (ValueError, UnicodeDecodeError):
        return {}
    return cfg if isinstance(cfg, dict) else {}


class Structure:
    """A program's computations and fusions by their structure, names and ids left out
    (memoized): the kernel reuse key of a fusion, and what matches an instruction across two
    compilations that renamed it (compare.py, through ops.csv's `fingerprint`)."""

    def __init__(self, program: Program):
        self.program = program
        self._memo: dict[int, bytes] = {}

    def fingerprint(self, comp_id: int) -> bytes:
        """A computation's structure with names and ids left out (operands by position), as a
        32-byte digest: a callee enters its caller's by its digest, so the size stays fixed
        however deep fusions nest (pasted whole, it doubled with each level that calls two)."""
        if (memo := self._memo.get(comp_id)) is not None:
            return memo
        self._memo[comp_id] = b"cycle"
        comp = self.program.computations.get(comp_id)
        if comp is None:
            return b""
        pos = {ins.id: i for i, ins in enumerate(comp.instructions)}
        parts = []
        for ins in comp.instructions:
            c = type(ins)()
            c.CopyFrom(ins)
            for f in _VOLATILE_FIELDS:
                c.ClearField(f)
            parts.append(c.SerializeToString(deterministic=True))
            parts.append(repr([pos.get(o, -1) for o in ins.operand_ids]).encode())
            parts.append(b"|".join(self.fingerprint(cc) for cc in ins.called_computation_ids))
            parts.append(b"R" if ins.id == comp.root_id else b"-")
        out = self._memo[comp_id] = hashlib.blake2b(b"\x00".join(parts), digest_size=32).digest()
        return out

    def fusion_key(self, ins) -> bytes:
        """What makes two fusions launch one kernel (XLA's kernel reuse): kind, backend config,
        shapes and the fused computation's fingerprint."""
        prog = self.program
        fcfg = _backend(ins).get("fusion_backend_config", {})
        operands = [prog.instructions[o].shape.SerializeToString(deterministic=True)
                    for o in ins.operand_ids if o in prog.instructions]
        return b"\x01".join([
            ins.fusion_kind.encode(), json.dumps(fcfg, sort_keys=True).encode(),
            ins.shape.SerializeToString(deterministic=True), b"".join(operands),
            b"|".join(self.fingerprint(c) for c in ins.called_computation_ids)])

    def fusion_digest(self, ins) -> str:
        """A fusion's key as 16 hex digits ('' for an instruction that is not a fusion)."""
        return hashlib.blake2b(self.fusion_key(ins), digest_size=8).hexdigest() \
            if ins.opcode == "fusion" else ""


class Plan:
    """One program's expected GPU events per execution, kernel names, and label resolution."""

    def __init__(self, program: Program, label_counts: dict | None = None,
                 event_total: int = 0, unknown_trip_count: int = 1):
        self.program = program
        self.unknown_trip_count = unknown_trip_count
        self.structure = Structure(program)
        self.scheduled_comps = self._scheduled_computations()
        self.launcher = self._resolution()
        # events per launching instruction, from the labels (for loops of unknown trip count)
        self.label_counts: dict[str, int] = {}
        for label, c in (label_counts or {}).items():
            if r := self.launcher.get(label):
                self.label_counts[r] = self.label_counts.get(r, 0) + c
        self.event_total = event_total
        self.inferred_trips: dict[str, int] = {}
        self._fixed_trips: dict[str, int] | None = None
        self.slots: list[Slot] = []
        self.events: list[Expect] = []
        self.kernel_name: dict[str, str] = {}   # fusion -> predicted kernel name
        self._fingerprints: dict[bytes, str] = {}
        self._expand()
        if self.inferred_trips and any(v is None for v in self.inferred_trips.values()):
            self._solve_trips()
        self.positions: dict[str, list[int]] = {}
        for s in self.slots:
            self.positions.setdefault(s.instruction, []).append(s.start)
        self.slot_count = {s.instruction: s.count for s in self.slots}
        self.name_counts = dict(Counter(e.name for e in self.events if e.name))
        self._arrays()
        self._scope_masks: dict[str, np.ndarray] = {}
        self._ancestry_memo: dict[int, tuple[dict, dict]] = {}

    # -- structure
    def _scheduled_computations(self) -> set[int]:
        """Computations whose instructions are thunks of their own: the entry, while bodies and
        conditions, call targets, conditional branches (followed from the entry)."""
        prog = self.program
        out: set[int] = set()
        todo = [prog.entry_id]
        while todo:
            cid = todo.pop()
            if cid in out or cid not in prog.computations:
                continue
            out.add(cid)
            for ins in prog.computations[cid].instructions:
                if ins.opcode in CONTROL_OPCODES:
                    todo.extend(ins.called_computation_ids)
        return out

    def _resolution(self) -> dict[str, str]:
        """Every instruction name -> the scheduled instruction that launched it ("" where the
        computation holding it has several callers resolving differently)."""
        prog = self.program
        callers: dict[int, list] = {}
        for ins in prog.instructions.values():
            for cid in ins.called_computation_ids:
                callers.setdefault(cid, []).append(ins)
        comp_launcher: dict[int, str] = {}

        def launcher_of_comp(cid: int, depth: int = 0) -> str:
            if cid in comp_launcher:
                return comp_launcher[cid]
            comp_launcher[cid] = ""  # guards against cycles
            found = {launcher_of_ins(c, depth + 1) for c in callers.get(cid, ())}
            found.discard("")
            out = found.pop() if len(found) == 1 else ""
            comp_launcher[cid] = out
            return out

        def launcher_of_ins(ins, depth: int = 0) -> str:
            comp = prog.computation_of.get(ins.id)
            if comp in self.scheduled_comps:
                return ins.name
            return "" if depth > 64 or comp is None else launcher_of_comp(comp, depth)

        return {ins.name: r for ins in prog.instructions.values() if (r := launcher_of_ins(ins))}

    def fingerprint(self, comp_id: int) -> bytes:
        return self.structure.fingerprint(comp_id)

    def _predicted_name(self, ins) -> str:
        """The kernel name a fusion launches: its own, or that of the first identical fusion."""
        if (name := self.kernel_name.get(ins.name)) is None:
            key = self.structure.fusion_key(ins)
            first = self._fingerprints.setdefault(key, ins.name)
            name = self.kernel_name[ins.name] = sanitize(first)
        return name

    def _inner(self, ins) -> list:
        return [i for cid in ins.called_computation_ids
                if (comp := self.program.computations.get(cid)) is not None
                for i in comp.instructions]

    def expected_events(self, ins) -> list[Expect]:
        """The GPU events one execution of a launching instruction produces, in order."""
        op = ins.opcode
        if op in MEMSET_OPCODES:
            return [Expect(0, "memset", "")]
        if op in COLLECTIVE_OPCODES:
            return [Expect(0, "collective", "", repeat=True)]
        if op in ("copy", "copy-start"):
            return [Expect(0, "copy", "")]
        if op == "async-start":
            inner = [i for i in self._inner(ins) if i.opcode not in NO_LAUNCH_OPCODES]
            if any(i.opcode in COLLECTIVE_OPCODES for i in inner):
                return [Expect(0, "collective", "", repeat=True)]
            root = self.program.called_root(inner[0]) if len(inner) == 1 and \
                inner[0].opcode == "fusion" else None
            if root is not None and root.opcode in ("dynamic-slice", "dynamic-update-slice"):
                # XLA wraps a fusion in async-start/-done on its own only where it runs as a
                # device-to-device memcpy (MemcopyAsyncWrapper: the fusions
                # DynamicMemcpyFusion::GetMemcpyDescriptorForFusion accepts, in
                # xla/service/gpu/transforms/ and xla/backends/gpu/codegen/copy.cc); inside a
                # CUDA graph the driver runs such a copy as a kernel (memcpy32_post, memcpy128)
                return [Expect(0, "copyish", sanitize(ins.name))]
            if len(inner) == 1 and inner[0].opcode != "async-start":
                return self.expected_events(inner[0])
            return [Expect(0, "compute", sanitize(ins.name), optional=True, repeat=True)]
        if op == "custom-call":
            return self._custom_call_events(ins.custom_call_target)
        if op == "fusion":
            return self._fusion_events(ins)
        return [Expect(0, "compute", sanitize(ins.name), repeat=True)]

    def _custom_call_events(self, target: str) -> list[Expect]:
        # a library may clear its workspace or accumulators first: on an H200 (jax 0.11.2)
        # each cuBLASLt GEMM custom call launched one memset and cuDNN's fused attention four
        # (forward) or five (backward) before their kernels, each labelled with the call
        t = target.lower()
        clears = Expect(0, "memset", "", optional=True, repeat=True)
        if "gemm" in t or "matmul" in t or "blas" in t:
            return [clears, Expect(0, "gemm", "", repeat=True),
                    Expect(0, "gemm_aux", "", optional=True)]
        if "conv" in t:
            # im2col (or another transform) + GEMM, as many as the library chooses
            return [clears, Expect(0, "compute", "", optional=True, repeat=True),
                    Expect(0, "gemm", "", repeat=True)]
        # attention kernels, FFI, Triton, ...: one or more kernels, or none
        return [clears, Expect(0, "compute", "", optional=True, repeat=True)]

    def _fusion_events(self, ins) -> list[Expect]:
        fcfg = _backend(ins).get("fusion_backend_config", {})
        kind = fcfg.get("kind", "") if isinstance(fcfg, dict) else ""
        inner = self._inner(ins)
        inner_ops = {i.opcode for i in inner}
        if kind == "__custom_fusion":
            if hero := [i for i in inner if i.opcode == "custom-call"]:
                return self._custom_call_events(hero[0].custom_call_target)
            if inner_ops & COLLECTIVE_OPCODES:
                return [Expect(0, "collective", "", repeat=True)]
            if "copy" in inner_ops and inner_ops <= COPY_BODY_OPCODES:
                # a dynamic-slice fusion around a copy: a memcpy (a kernel on other versions)
                return [Expect(0, "copyish", sanitize(ins.name))]
            return [Expect(0, "gemm", sanitize(ins.name), repeat=True)]
        if "memcpy" in kind.lower():
            return [Expect(0, "copyish", sanitize(ins.name))]
        name = self._predicted_name(ins)
        own = sanitize(ins.name)
        events = self._fusion_kernel_events(ins, kind, name, inner_ops)
        if own != name:
            for e in events:
                if e.name == name:
                    e.own = own
        return events

    def _fusion_kernel_events(self, ins, kind, name, inner_ops) -> list[Expect]:
        if kind.startswith(("__triton_gemm", "__triton_nested_gemm", "__cublas")) or \
                ins.name.startswith(("gemm_fusion", "triton_gemm", "cublas")):
            # a split-K GEMM may finish with a reduction kernel of its own
            return [Expect(0, "gemm", name, repeat=True), Expect(0, "gemm_aux", "", optional=True)]
        if ("copy" in inner_ops and inner_ops <= COPY_BODY_OPCODES and
                not inner_ops & {"dynamic-update-slice"}) or \
                ("slice" in inner_ops and inner_ops <= {"parameter", "slice", "bitcast"}):
            # a fusion that only copies (or takes a static slice of a parameter): a memcpy on
            # newer XLA versions, a kernel on older ones; a multi-output one, one memcpy per
            # output
            outputs = max(1, sum(1 for i in self._inner(ins) if i.opcode in ("copy", "slice")))
            return [Expect(0, "copyish", name)] + [
                Expect(0, "copy", "", optional=True) for _ in range(outputs - 1)]
        if inner_ops & REDUCING_OPCODES:
            # a reduction may initialize its output first (a memset or an init kernel)
            return [Expect(0, "memset", "", optional=True), Expect(0, "compute", name, repeat=True)]
        return [Expect(0, "compute", name, repeat=True)]

    def _expand(self) -> None:
        prog = self.program
        self.cut = False  # loops of unknown trip count left out past MAX_PLAN_EVENTS

        def walk(comp_id: int, scope: tuple, depth: int) -> None:
            if depth > 64 or comp_id not in prog.computations:
                return
            for ins in prog.schedule(comp_id):
                op = ins.opcode
                if op in NO_LAUNCH_OPCODES or op in WAIT_OPCODES:
                    continue
                if op == "while":
                    called = list(ins.called_computation_ids)
                    cond = [c for c in called if _is_condition(prog, c)]
                    body = [c for c in called if c not in cond]
                    n = Program.trip_count(ins)
                    inner = scope + (ins.name,)
                    if n is not None:
                        for _ in range(n):
                            for b in body:
                                walk(b, inner, depth + 1)
                        continue
                    # Unknown trip count: before every iteration and at the exit the condition
                    # runs and its predicate is copied to the host (a small D2H memcpy labelled
                    # with the while; xla/backends/gpu/runtime/while_thunk.cc).
                    trips = self._trips(ins, body, comp_id) if self._fixed_trips is None \
                        else self._fixed_trips.get(ins.name, 0)
                    for it in range(trips + 1):
                        if len(self.events) > MAX_PLAN_EVENTS:
                            self.cut = True
                            break
                        for c in cond:
                            walk(c, inner, depth + 1)
                        self._add_slot(ins, scope, [Expect(0, "copy", "", optional=True)])
                        if it < trips:
                            for b in body:
                                walk(b, inner, depth + 1)
                    continue
                if op == "call":
                    for c in ins.called_computation_ids:
                        walk(c, scope + (ins.name,), depth + 1)
                    continue
                if op == "conditional":
                    if ins.called_computation_ids:
                        walk(ins.called_computation_ids[0], scope + (ins.name,), depth + 1)
                    continue
                self._add_slot(ins, scope, self.expected_events(ins))

        walk(prog.entry_id, (), 0)

    def _add_slot(self, ins, scope: tuple, events: list[Expect]) -> None:
        slot = Slot(ins.name, ins.opcode, scope, len(self.events))
        idx = len(self.slots)
        for e in events:
            e.slot = idx
            self.events.append(e)
        slot.count = len(self.events) - slot.start
        self.slots.append(slot)

    def _trips(self, ins, body: list[int], parent: int) -> int:
        """Iterations of a while loop whose trip count the HLO does not give, from the labels:
        its predicate copies run once more than its body; else the body's events against those
        of the computation around the loop; else `unknown_trip_count`."""
        counts = self.label_counts
        prog = self.program
        in_body = [counts.get(i.name, 0) for b in body if b in prog.computations
                   for i in prog.computations[b].instructions]
        per_body = max(in_body, default=0)
        n = None
        own = counts.get(ins.name, 0)
        if per_body and own > per_body:
            n = per_body / (own - per_body)
        elif per_body:
            around = max((counts.get(i.name, 0) for i in prog.computations[parent].instructions
                          if i.opcode not in CONTROL_OPCODES), default=0)
            if around:
                n = per_body / around
        if n is None:
            self.inferred_trips[ins.name] = None  # solved from the event count, or the default
            return self.unknown_trip_count
        trips = max(1, min(round(n), MAX_TRIPS))
        self.inferred_trips[ins.name] = trips
        return trips

    def _required(self, trips: dict) -> int:
        self._fixed_trips = trips
        self.slots, self.events = [], []
        self._expand()
        return sum(1 for e in self.events if not e.optional) + sum(
            1 for s in self.slots if s.instruction in trips)  # predicate copies

    def _solve_trips(self) -> None:
        """Loops whose iterations no label counts (their bodies inside graphs): the predicate
        copies of loop j run executions x (n_j + 1) times and the program's events add up to
        executions x E0 + sum_j executions x n_j x D_j (E0: events with every unknown loop at
        zero iterations, D_j: events one iteration of loop j adds). Solve for the executions,
        then each n_j; where that cannot be done, keep the default."""
        known = {w: n for w, n in self.inferred_trips.items() if n is not None}
        unknown = [w for w, n in self.inferred_trips.items() if n is None]
        base = dict(known, **{w: 0 for w in unknown})
        e0 = self._required(base)
        d = {w: self._required(dict(base, **{w: 1})) - e0 for w in unknown}
        own = {w: self.label_counts.get(w, 0) for w in unknown}
        solved = dict(base)
        denom = e0 - sum(d.values())
        if self.event_total and all(own.values()) and denom:
            execs = (self.event_total - sum(own[w] * d[w] for w in unknown)) / denom
            if execs >= 1:
                for w in unknown:
                    solved[w] = max(0, min(round(own[w] / execs - 1), MAX_TRIPS))
        for w in unknown:
            if w not in solved or (solved[w] == 0 and not own[w]):
                solved[w] = self.unknown_trip_count
        self._required(solved)
        self.inferred_trips.update({w: solved[w] for w in unknown})
        self._fixed_trips = None

    def name_code(self, name: str) -> int:
        """An event's kernel name as name_ids' code of its normalized form (0: none the plan
        predicts), remembered per name."""
        code = self.name_codes[name] = self.name_ids.get(normalize_kernel_name(name), 0)
        return code

    def _arrays(self) -> None:
        self.name_ids: dict[str, int] = {"": 0}
        self.name_codes: dict[str, int] = {}  # an event's name -> name_ids' code of it
        for e in self.events:
            for nm in (e.name, e.own):
                if nm and nm not in self.name_ids:
                    self.name_ids[nm] = len(self.name_ids)
        ev = self.events
        self.e_kind = np.array([EXP_KIND_ID[e.kind] for e in ev], dtype=np.int64)
        self.e_name = np.array([self.name_ids[e.name] for e in ev], dtype=np.int64)
        self.e_own = np.array([self.name_ids[e.own] if e.own else -1 for e in ev], dtype=np.int64)
        self.e_del = np.array([0 if e.optional else DELETE for e in ev], dtype=np.int64)
        self.e_repeat = np.array([e.repeat for e in ev], dtype=bool)
        # accept[observed kind][expected kind]
        self.accept = np.zeros((len(KINDS), len(EXP_KINDS)), dtype=bool)
        self.kind_swap = np.zeros((len(KINDS), len(EXP_KINDS)), dtype=np.int64)
        for ek, obs in ACCEPTS.items():
            for ok in obs:
                self.accept[KIND_ID[ok], EXP_KIND_ID[ek]] = True
                base = "compute" if ek == "copyish" else ek
                if ok != base and ek != "copyish":
                    self.kind_swap[KIND_ID[ok], EXP_KIND_ID[ek]] = KIND_SWAP

    def scope_mask(self, control: str) -> np.ndarray:
        if (m := self._scope_masks.get(control)) is None:
            m = self._scope_masks[control] = np.array(
                [control in self.slots[e.slot].scope for e in self.events], dtype=bool)
        return m

    def ordered(self, a: str, b: str) -> bool:
        """Whether the program fixes the order of instructions a and b inside one launch: the
        same instruction (its events, its loop iterations), instructions of different
        computations (a nested command runs as a whole), or one reads the other's result,
        directly or through others. Two instructions of one computation without a data path
        between them may run in either order, or at once, inside a command buffer: XLA records
        commands with dependencies from the buffers they use, not in the schedule's order."""
        return self._reads(a, b, either=True, unknown=True)

    def reads(self, a: str, b: str) -> bool:
        """Whether instruction a reads b's result, directly or through others (one
        computation; the same instruction's events count as read in turn)."""
        return self._reads(a, b, either=False, unknown=False)

    def _reads(self, a: str, b: str, either: bool, unknown: bool) -> bool:
        """Whether a reads b's result (or, with `either`, b reads a's); `unknown` where they are
        not instructions of one computation; True for the same instruction."""
        if a == b:
            return True
        prog = self.program
        ia, ib = prog.by_name.get(a), prog.by_name.get(b)
        comp = prog.computation_of.get(ia.id) if ia is not None and ib is not None else None
        if comp is None or comp != prog.computation_of.get(ib.id):
            return unknown
        anc, pos = self._ancestry(comp)
        ia, ib = ia.id, ib.id
        return bool((anc[ia] >> pos[ib]) & 1 or either and (anc[ib] >> pos[ia]) & 1)

    def _ancestry(self, comp_id: int) -> tuple[dict, dict]:
        """Per instruction of a computation, the set of instructions whose results it reads
        (directly or through others) as a bit mask over their positions; iterative, and a cycle
        (never in HLO XLA writes) is cut where it closes."""
        if (memo := self._ancestry_memo.get(comp_id)) is not None:
            return memo
        instructions = self.program.computations[comp_id].instructions
        pos = {ins.id: i for i, ins in enumerate(instructions)}
        operands = {ins.id: [o for o in ins.operand_ids if o in pos] for ins in instructions}
        anc: dict[int, int] = {}
        for root in pos:
            if root in anc:
                continue
            stack = [(root, 0)]
            on_path = {root}
            while stack:
                node, k = stack[-1]
                ops = operands[node]
                if k < len(ops):
                    stack[-1] = (node, k + 1)
                    o = ops[k]
                    if o not in anc and o not in on_path:
                        on_path.add(o)
                        stack.append((o, 0))
                    continue
                stack.pop()
                on_path.discard(node)
                mask = 0
                for o in ops:
                    mask |= anc.get(o, 0) | (1 << pos[o])
                anc[node] = mask
        memo = self._ancestry_memo[comp_id] = (anc, pos)
        return memo


def _is_condition(program: Program, comp_id: int) -> bool:
    comp = program.computations.get(comp_id)
    if comp is None or not comp.instructions:
        return False
    root = next((i for i in comp.instructions if i.id == comp.root_id), comp.instructions[-1])
    return root.shape.element_type == 1 and not root.shape.dimensions  # a scalar pred


# ------------------------------------------------------------------------------- alignment

@dataclass(slots=True)
class Placement:
    """The alignment of one launch's events: for each event its expected position relative to
    the window start (-1: unplaced) and its fit; `end` is where the next launch's window starts."""
    where: list
    fit: list
    end: int
    confidence: list | None = None
    reordered: bool = False  # events had to be moved out of the schedule's order (`_repair`)
    answers: list | None = None  # per event: (instruction, match, confidence), None: no slot


def align(plan: Plan, obs_kind: list[int], obs_name: list[int], masks: list,
          a: int, width: int) -> Placement:
    """Semi-global alignment of m observed events with the expected events at absolute positions
    a .. a+width-1 (modulo one execution): all observed events are consumed, expected events
    before the first placed one cost LEAD each, after the last nothing."""
    n = len(plan.events)
    m = len(obs_kind)
    cols = (np.arange(a, a + width) % n) if n else np.zeros(0, dtype=np.int64)
    ek, en, eown, edel, erep = (x[cols] for x in (plan.e_kind, plan.e_name, plan.e_own,
                                                  plan.e_del, plan.e_repeat))
    C = np.zeros(width + 1, dtype=np.int64)
    np.cumsum(edel, out=C[1:])
    D = np.empty((m + 1, width + 1), dtype=np.int64)
    D[0] = np.arange(width + 1, dtype=np.int64) * LEAD
    subs, inss = [], []
    for i in range(m):
        k, nm = obs_kind[i], obs_name[i]
        ok = plan.accept[k][ek]
        swap = plan.kind_swap[k][ek]
        if nm:  # a name the plan predicts is XLA's kernel: in a library slot it is misplaced
            sub = np.where(en == nm, 0, np.where(eown == nm, OWN_NAME, MISMATCH + swap))
        else:
            sub = np.where(en == 0, MATCH_LIBRARY + swap, MISMATCH + swap)
        if k == COPY_KIND:  # a memcpy in a copy-like slot is what that slot runs as
            sub = np.where(ek == COPYISH, MATCH_LIBRARY, sub)
        sub = np.where(ok, sub, INF)
        if masks[i] is not None:
            sub = np.where(masks[i][cols], sub, INF)
        ins = np.full(width + 1, INSERT, dtype=np.int64)
        ins[1:] = np.where(erep & ok, REPEAT, INSERT)
        prev = D[i]
        cur = prev + ins
        np.minimum(cur[1:], prev[:-1] + sub, out=cur[1:])
        D[i + 1] = C + np.minimum.accumulate(cur - C)
        subs.append(sub)
        inss.append(ins)
    end = int(np.argmin(D[m]))
    where, fit = [-1] * m, [""] * m
    i, j = m, end
    while i > 0:
        v = D[i, j]
        if j > 0 and v == D[i - 1, j - 1] + subs[i - 1][j - 1]:
            s = int(subs[i - 1][j - 1])
            where[i - 1] = j - 1
            nm = obs_name[i - 1]
            fit[i - 1] = "name" if s <= OWN_NAME and nm != 0 else (
                "library" if s < MISMATCH else "mismatch")
            i -= 1
            j -= 1
        elif v == D[i - 1, j] + inss[i - 1][j]:
            if j > 0 and inss[i - 1][j] == REPEAT:
                where[i - 1] = j - 1
                fit[i - 1] = "repeat"
            i -= 1
        else:
            j -= 1
    return Placement(where, fit, end)


def _fit(plan: Plan, kind: int, name: int, e: int) -> str:
    """How an event fits expected event e, as `align` classes it."""
    if name and (plan.e_name[e] == name or plan.e_own[e] == name):
        return "name"
    if (not name and plan.e_name[e] == 0) or (kind == COPY_KIND and plan.e_kind[e] == COPYISH):
        return "library"
    return "mismatch"


def _repair(plan: Plan, pl: Placement, obs_kind, obs_name, a: int, width: int) -> None:
    """Put events the alignment left out of place where the launch's span holds their place:
    1. by name: an event left unplaced, or placed under another name (as a mismatch, or as one
       more event of a slot named otherwise), takes the nearest position whose predicted name
       is its own and that is held by another such event (which takes the position it left,
       where its kind fits there), or, for an event placed as an extra one or unplaced, that is
       free: inside the span, or for an extra one at most the launch's length of events past
       it (its own slot left after the span).
       Events reordered inside a launch (independent commands of a command buffer, events on
       several streams) make the alignment pair two swapped kernels crosswise, each under the
       other's name: their names put them back.
    2. a library kernel placed as one more event of a slot takes the nearest required library
       slot of its kind left unfilled in the span (two alike library kernels reordered);
    3. by kind: events still unplaced take required expected events left unfilled in the span
       (by name first, then in order), then library positions left unfilled (a custom call's
       kernel moved by a reordering).
    Any move marks the placement `reordered`: the launch did not run in the schedule's order."""
    r = _Repair(plan, pl, obs_kind, obs_name, a, width)
    r.by_name()
    r.library_swaps()
    r.by_kind()


class _Repair:
    """One launch's placement while `_repair` mends it: the position each event holds (`held`:
    position -> event), the span its events cover (`hi`, as the alignment left it) and how far
    an event taken as an extra one may move (`reach`: the launch's length past the span)."""

    def __init__(self, plan: Plan, pl: Placement, obs_kind, obs_name, a: int, width: int):
        self.plan, self.pl, self.obs_kind, self.obs_name, self.a = plan, pl, obs_kind, obs_name, a
        self.n = len(plan.events)
        self.m = len(pl.where)
        placed = [w for w in pl.where if w >= 0]
        self.hi = max(max(placed) + 1 if placed else 0, pl.end)
        self.held = {w: i for i, w in enumerate(pl.where) if w >= 0}
        self.reach = min(width, self.hi + self.m)

    def loose(self, i: int) -> bool:
        """Whether event i is unplaced, or placed under another name than its own."""
        pl, name = self.pl, self.obs_name[i]
        f = pl.fit[i]
        return pl.where[i] < 0 or f == "mismatch" or (
            f == "repeat" and name != 0 and
            _fit(self.plan, self.obs_kind[i], name, (self.a + pl.where[i]) % self.n) != "name")

    def by_name(self) -> None:
        """Step 1: each loose event with a predicted name moves to the nearest position of its
        name it may take, swapping with the loose event there."""
        pl, plan, held, a, n = self.pl, self.plan, self.held, self.a, self.n
        for i in range(self.m):
            nm = self.obs_name[i]
            if not nm or not self.loose(i):
                continue
            if (best := self._named_position(i)) is None:
                # its own slot is free but it may not move there: the launch is out of order all
                # the same (or its name mispredicted), so its order does not pin placements
                if any(j not in held and (plan.e_name[(a + j) % n] == nm or
                                          plan.e_own[(a + j) % n] == nm) for j in range(self.hi)):
                    pl.reordered = True
                continue
            old, h = pl.where[i], held.get(best)
            if old >= 0 and held.get(old) == i:
                del held[old]
            pl.where[i], pl.fit[i] = best, "name"
            held[best] = i
            pl.end = max(pl.end, best + 1)
            if h is not None:
                pl.where[h], pl.fit[h] = old, _fit(plan, self.obs_kind[h], self.obs_name[h],
                                                   (a + old) % n)
                held[old] = h
            pl.reordered = True

    def _named_position(self, i: int) -> int | None:
        """Where loose event i may go by its name, nearest its place (or its last placed
        predecessor's) first: a position held by another loose event (the two were paired
        crosswise); a free one too for an event the alignment took as an extra one (its slot
        keeps its first event), within reach, or left unplaced, within the span. A mismatch
        never leaves its slot empty for a free one: that is a kernel reused under a name the
        plan did not predict, not a reordering. None: nowhere."""
        pl, plan, held, a, n = self.pl, self.plan, self.held, self.a, self.n
        accept, e_kind, obs_kind = plan.accept, plan.e_kind, self.obs_kind
        nm = self.obs_name[i]
        free_ok = self.reach if pl.fit[i] == "repeat" else (self.hi if pl.where[i] < 0 else 0)
        near = pl.where[i] if pl.where[i] >= 0 else next(
            (pl.where[x] for x in range(i - 1, -1, -1) if pl.where[x] >= 0), 0)
        best = None
        for j in range(self.reach):
            e = (a + j) % n
            if (plan.e_name[e] != nm and plan.e_own[e] != nm) or not accept[obs_kind[i]][e_kind[e]]:
                continue
            h = held.get(j)
            if h is None and j >= free_ok:
                continue
            if h is not None and (h == i or not self.loose(h) or pl.where[i] < 0 or
                                  not accept[obs_kind[h]][e_kind[(a + pl.where[i]) % n]]):
                continue
            if best is None or abs(j - near) < abs(best - near):
                best = j
        return best

    def library_swaps(self) -> None:
        """Step 2: a library kernel taken as one more event of a slot, while a required library
        slot of its kind in the span (before the first placed event too) holds nothing, moves
        to the nearest such slot: swapped alike kernels."""
        pl, plan, held, a, n, m = self.pl, self.plan, self.held, self.a, self.n, self.m
        accept, e_kind = plan.accept, plan.e_kind
        for i in range(m):
            old = pl.where[i]
            if pl.fit[i] != "repeat" or self.obs_name[i]:
                continue
            spare = [j for j in range(self.hi) if j not in held and
                     not plan.events[(a + j) % n].optional and plan.e_name[(a + j) % n] == 0
                     and accept[self.obs_kind[i]][e_kind[(a + j) % n]]]
            if not spare:
                continue
            best = min(spare, key=lambda j: abs(j - old))
            if held.get(old) == i:
                del held[old]
                other = next((x for x in range(m) if x != i and pl.where[x] == old), None)
                if other is not None:
                    held[old] = other
            pl.where[i], pl.fit[i] = best, "library"
            held[best] = i
            pl.reordered = True

    def by_kind(self) -> None:
        """Step 3: events still unplaced take required positions left unfilled in the span (by
        name first, then by kind alone), then optional library positions left unfilled."""
        pl, plan, held, a, n = self.pl, self.plan, self.held, self.a, self.n
        missing = [i for i, w in enumerate(pl.where) if w < 0]
        if not missing:
            return
        free = [j for j in range(self.hi) if j not in held and
                not plan.events[(a + j) % n].optional]
        library = [j for j in range(self.hi) if j not in held and
                   plan.events[(a + j) % n].optional and plan.e_name[(a + j) % n] == 0]
        accept, e_kind, obs_kind, obs_name = plan.accept, plan.e_kind, self.obs_kind, self.obs_name
        for by_name, pool in ((True, free), (False, free), (False, library)):
            for i in missing:
                if pl.where[i] >= 0:
                    continue
                for j in pool:
                    e = (a + j) % n
                    if not accept[obs_kind[i]][e_kind[e]]:
                        continue
                    if by_name and (obs_name[i] == 0 or plan.e_name[e] != obs_name[i]):
                        continue
                    pl.where[i], pl.fit[i] = j, "repair"
                    pool.remove(j)
                    pl.reordered = True
                    break


def _confidence(fits: list[str]) -> list[float]:
    own = [OWN_FIT.get(f, 0.0) for f in fits]
    out = []
    m = len(own)
    for i in range(m):
        lo, hi = max(0, i - NEIGHBOURS), min(m, i + NEIGHBOURS + 1)
        nb = [own[x] for x in range(lo, hi) if x != i]
        support = sum(nb) / len(nb) if nb else own[i]
        out.append(round(0.5 * own[i] + 0.5 * support, 3) if own[i] else 0.0)
    return out


def _ran_at_once(ks) -> bool:
    """Whether the capture shows the launch's events `ks` running concurrently: on
    several streams, or one starting before an earlier one is AT_ONCE_SHARE done. A command
    buffer whose events run one after another on one stream ran as recorded, in the schedule's
    order (XLA records a command buffer's commands in the order of its thunks), their
    boundaries overlapping a little as they do on real GPUs (AT_ONCE_SHARE)."""
    if len({k.lane for k in ks} - {None}) > 1:
        return True
    spans = sorted([(k.start, k.dur) for k in ks if k.start is not None and k.dur is not None])
    busy = None  # the latest point an earlier event is AT_ONCE_SHARE done
    for start, dur in spans:
        if busy is not None and start < busy:
            return True
        done = start + dur * AT_ONCE_SHARE
        busy = done if busy is None else max(busy, done)
    return False


def _unpinned(plan: Plan, pl: Placement, obs_kind, obs_name, a: int) -> None:
    """Divide the confidence of each placement that the order of the launch's events does not
    decide. Two events of one kind and one name (a kernel several fusions share through XLA's
    kernel reuse cache; library kernels in library slots; memcpys in copy slots) fit each
    other's slots equally well, so swapping them is as good an alignment. Inside a command
    buffer the events run in an order the program's data flow allows, not necessarily the
    schedule's (`Plan.ordered`): the swap is as likely as the placement when the two slots are
    not ordered and no event seen between the two reads the first one's result or feeds the
    second (the capture's own order would rule the swap out). With q such partners an event's
    confidence is divided by q + 1."""
    n = len(plan.events)
    slot_of = [plan.slots[plan.events[(a + w) % n].slot].instruction if w >= 0 else None
               for w in pl.where]
    alike: dict[tuple, list[int]] = {}
    for i, s in enumerate(slot_of):
        if s is not None:
            alike.setdefault((obs_kind[i], obs_name[i]), []).append(i)
    partners = [0] * len(slot_of)
    for members in alike.values():
        for x, i in enumerate(members):
            first = slot_of[i]
            for j in members[x + 1:]:
                second = slot_of[j]
                if plan.ordered(first, second) or any(
                        slot_of[z] is not None and (plan.reads(slot_of[z], first) or
                                                    plan.reads(second, slot_of[z]))
                        for z in range(i + 1, j)):
                    continue
                partners[i] += 1
                partners[j] += 1
    # a slot of the same predicted name (a library slot of its kind, for a library kernel) that
    # holds no event by its name (empty, or an event placed by position) could as well be its
    held = {w: i for i, w in enumerate(pl.where) if w >= 0}
    span = max(held, default=-1) + 1
    for i, s in enumerate(slot_of):
        if s is None or pl.fit[i] not in ("name", "library"):
            continue
        nm = obs_name[i]
        for j in range(span):
            e = (a + j) % n
            h = held.get(j)
            same = (plan.e_name[e] == nm or plan.e_own[e] == nm) if nm else (
                plan.e_name[e] == 0 and plan.accept[obs_kind[i]][plan.e_kind[e]])
            if h == i or not same or (h is not None and pl.fit[h] not in POSITION_FITS):
                continue
            if not plan.ordered(s, plan.slots[plan.events[e].slot].instruction):
                partners[i] += 1
    for i, q in enumerate(partners):
        if q:
            pl.confidence[i] = round(pl.confidence[i] / (q + 1), 3)
        if pl.fit[i] in POSITION_FITS:  # placed by position alone, where the order is not pinned
            pl.confidence[i] = min(pl.confidence[i], OWN_FIT[pl.fit[i]])


def match(plan: Plan, kernels: list[Kernel]) -> float:
    """Fill each event's answer; `kernels` are one device's events of one program, in launch
    order (correlation id, then start): exact labels anchor, every other launch is aligned
    between its neighbouring anchors. Returns the executions of the program the events covered
    (the alignment's final position over the events one execution expects)."""
    exact = mark_exact(plan, kernels)
    if not plan.events:
        for k, ex in zip(kernels, exact, strict=True):
            if not ex:
                k.match, k.why = "none", "no slot"
        return 0.0
    next_exact = [None] * len(kernels)
    nxt = None
    for i in range(len(kernels) - 1, -1, -1):
        next_exact[i] = nxt
        if exact[i]:
            nxt = i
    cache: dict = {}
    anchor = _Anchor()
    i, total = 0, len(kernels)
    while i < total:
        k = kernels[i]
        if exact[i]:
            anchor.advance(plan, k.instruction)
            i += 1
            continue
        if k.hlo_op is None and not k.group:
            k.match, k.why = "none", "outside"  # its own launch, no label: an argument copy
            i += 1
            continue
        j = _launch_end(kernels, exact, i)
        anchor.p += _place_launch(plan, kernels, i, j, anchor.p, next_exact[j - 1], cache)
        anchor.last = None
        i = j
    return anchor.p / len(plan.events)


def mark_exact(plan: Plan, kernels: list[Kernel]) -> list[bool]:
    """Class exact for every event whose label resolves to a launching instruction."""
    launcher = plan.launcher
    positions = plan.positions
    exact = []
    for k in kernels:
        op = k.hlo_op
        r = launcher.get(op) if op else None
        hit = r is not None and r in positions
        if hit:
            k.instruction, k.match, k.confidence = r, "exact", 1.0
            if r != op:
                k.inner = op
        exact.append(hit)
    return exact


class _Anchor:
    """The alignment's position in the expected events (absolute: executions x events), moved
    by exact events."""

    def __init__(self):
        self.p = 0            # the next expected event to fill
        self.last = None      # (instruction, start) of the last exact anchor
        self.filled = 0       # its events seen so far

    def advance(self, plan: Plan, r: str) -> None:
        count = plan.slot_count[r]
        if self.last is not None and self.last[0] == r and self.filled < max(count, 1):
            self.filled += 1  # another event of the same slot (an im2col, then its GEMM)
        else:
            start = _next_position(plan, r, self.p - count + 1 if count > 1 else self.p)
            self.last, self.filled = (r, start), 1
        self.p = max(self.p, self.last[1] + min(self.filled, count))


def _launch_end(kernels, exact, i: int) -> int:
    """One launch: the non-exact events from i sharing its correlation id and label."""
    k = kernels[i]
    j = i + 1
    if k.group:
        while j < len(kernels) and kernels[j].group and kernels[j].corr == k.corr and \
                not exact[j] and kernels[j].hlo_op == k.hlo_op:
            j += 1
    return j


def _place_launch(plan: Plan, kernels, i: int, j: int, p: int, ne, cache: dict) -> int:
    """Align kernels[i:j] with the expected events from p up to the next anchor `ne` (an index
    into kernels, or None); fill their answers; return how many expected events it consumed."""
    n = len(plan.events)
    m = j - i
    width = n + m + WINDOW_CAP_EXTRA
    if ne is not None:
        r = kernels[ne].instruction
        # up to the anchor's slot, and its other events (an im2col before a labelled GEMM)
        width = min(_next_position(plan, r, p) + max(plan.slot_count[r] - 1, 0) - p, width)
    width = max(width, 1)
    k = kernels[i]
    control = plan.launcher.get(k.hlo_op) if k.hlo_op else None
    mask = plan.scope_mask(control) if control and control not in plan.positions else None
    ks = kernels[i:j]
    codes = plan.name_codes
    ok = tuple([KIND_ID[kk.kind] for kk in ks])
    on = tuple([codes[kk.name] if kk.name in codes else plan.name_code(kk.name) for kk in ks])
    at_once = m > 1 and _ran_at_once(ks)
    key = (ok, on, control, p % n, width, at_once)
    pl = cache.get(key)
    if pl is None:  # identical launches at the same place (steps, GPUs) are aligned once
        pl = align(plan, list(ok), list(on), [mask] * m, p, width)
        _repair(plan, pl, list(ok), list(on), p, width)
        pl.confidence = _confidence(pl.fit)
        if at_once or pl.reordered:
            _unpinned(plan, pl, list(ok), list(on), p)
        pl.answers = [None if w < 0 else (plan.slots[plan.events[(p + w) % n].slot].instruction,
                                          "name" if f == "name" else "order", c)
                      for w, f, c in zip(pl.where, pl.fit, pl.confidence, strict=True)]
        cache[key] = pl
    launcher = plan.launcher
    for kk, answer in zip(ks, pl.answers, strict=True):
        if answer is None:
            kk.match, kk.why = "none", "no slot"
            continue
        kk.instruction, kk.match, kk.confidence = answer
        op = kk.hlo_op
        if op and op != answer[0] and launcher.get(op) == answer[0]:
            kk.inner = op
    return pl.end


def _next_position(plan: Plan, instruction: str, p: int) -> int:
    """The absolute position of the instruction's next slot start at or after p."""
    n = len(plan.events)
    pos = plan.positions[instruction]
    base, off = divmod(p, n) if n else (0, 0)
    return next((base * n + s for s in pos if s >= off), (base + 1) * n + pos[0])


def launch_executions(plan: Plan, kernels: list[Kernel]) -> int | None:
    """Executions of the program from its launches, where no host execution event counts them:
    per launching instruction with events launched on their own (not in a graph), its distinct
    correlation ids among events of its first required kind (a split-K reduction or an im2col
    beside a GEMM is not another execution), over its slots per execution (the trip counts of
    the loops around it); the most common value over the instructions, the smaller on a tie.
    None when no instruction has such events (every event inside graphs)."""
    first_kind: dict[str, set] = {}
    for e in plan.events:
        ins = plan.slots[e.slot].instruction
        if ins not in first_kind and not e.optional:
            first_kind[ins] = {"copy", "compute"} if e.kind == "copyish" else {e.kind}
    ids: dict[str, set] = {}
    for k in kernels:
        if k.instruction and not k.group and k.corr is not None and \
                k.kind in first_kind.get(k.instruction, ()):
            ids.setdefault(k.instruction, set()).add(k.corr)
    votes: dict[int, int] = {}
    for ins, corrs in ids.items():
        per = len(plan.positions.get(ins, ()))
        if per:
            n = round(len(corrs) / per)
            votes[n] = votes.get(n, 0) + 1
    return min(votes, key=lambda n: (-votes[n], n)) if votes else None
