"""A TPU capture's op runs, read from its xplane: step 4 on a TPU reads them, it matches nothing.

On a TPU the device plane (`/device:TPU:<n>`) records each run of an HLO instruction on its
`XLA Ops` line, named by the instruction's HLO text and carrying its `program_id`,
`hlo_category`, FLOPs and bytes, and each program run on `XLA Modules` (`<module>(<program id>)`).
So each op run is its instruction, known exactly: it becomes step 4's record of an event
(kernel_match.Kernel) with its answer filled in (class `exact`, confidence 1), and the tables
are the GPU's. An op that holds others on its line (a while loop and its body) counts its self
time, the time no op nested in it runs, as XProf's op statistics do; the `Async XLA Ops` line
(asynchronous copies from start to done, overlapping the ops) is counted, not added.
"""

from __future__ import annotations

import re

import numpy as np

from jaxperf.match import kernel_match as km
from jaxperf.read.xplane_reader import TPU_PLANE_RE
from tracekit import tpu

OP_LINE = next(iter(tpu.OP_LINES))
ASYNC_LINE = tpu.ASYNC_LINE
INSTRUCTION_RE = re.compile(r"^%?([^\s=]+)")
STATS = frozenset({"program_id", "hlo_category", "source_stack"})
FRAME_RE = re.compile(r"^(.*):(\d+)(?::\d+)?$")


def tpu_planes(space) -> list:
    """The TPU device planes, by ordinal."""
    out = [(int(m.group(1)), p) for p in space.planes
           for m in [TPU_PLANE_RE.match(p.name)] if m]
    return [p for _, p in sorted(out, key=lambda x: x[0])]


def ordinal(plane) -> int:
    return int(TPU_PLANE_RE.match(plane.name).group(1))


def instruction(event_name: str) -> str:
    """`%fusion.3 = f32[...] fusion(...)` -> `fusion.3`."""
    m = INSTRUCTION_RE.match(event_name)
    return m.group(1) if m else event_name


def frames(source_stack: str) -> list:
    """An op's `source_stack` (`file:line:column` a line, innermost first) as frames."""
    from jaxperf.program.hlo_program import MAX_STACK_FRAMES, Frame
    return [Frame(m.group(1), int(m.group(2)), "")
            for text in source_stack.splitlines()[:MAX_STACK_FRAMES]
            if (m := FRAME_RE.match(text.strip()))]


def self_times(start: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Each event's duration less the time of the events nested in it on the same line
    (children that start inside a parent and end by its end; `start` sorted)."""
    self_ps = dur.copy()
    stack: list = []  # (end, index) of the open events
    for i, (s, d) in enumerate(zip(start.tolist(), dur.tolist(), strict=True)):
        while stack and stack[-1][0] <= s:
            stack.pop()
        if stack and s + d <= stack[-1][0]:
            self_ps[stack[-1][1]] -= d
        stack.append((s + d, i))
    return np.maximum(self_ps, 0)


def dispatches(space) -> tuple[list, list]:
    """The host's program dispatches in the xplane (tracekit.tpu.DISPATCH_NAMES: the first name
    the host plane holds), in start order: their starts and durations (ps)."""
    host = space.plane("/host:CPU")
    found: dict = {}
    wanted = set(tpu.DISPATCH_NAMES)
    for line in host.lines if host is not None else ():
        if not len(line):
            continue
        c = line.columns(frozenset())
        for name, s, d in zip(c.names(), c.start.tolist(), c.dur.tolist(), strict=True):
            if name in wanted:
                found.setdefault(name, []).append((s, d))
    for name in tpu.DISPATCH_NAMES:
        if name in found:
            got = sorted(found[name])
            return [s for s, _ in got], [d for _, d in got]
    return [], []


def collect(space, built: dict) -> tuple[list, dict, dict, dict]:
    """The op runs of every TPU plane as answered Kernels (device: the TPU ordinal; stream: the
    line id; dur: self time), in device and start order; (program id, device) -> executions
    entry (count_executions' shape, from the `XLA Modules` runs, `host_ps` their host
    dispatches' summed duration, paired as step 1 pairs them: tracekit.tpu.pair_runs);
    (device, program id) -> the op runs' starts; counts of what was left aside (`async`: Async
    XLA Ops events, `nested`: ops with others inside them)."""
    kernels, execs, starts = [], {}, {}
    counts = {"async": 0, "nested": 0, "no_program": 0}
    disp = dispatches(space)
    for plane in tpu_planes(space):
        dev = ordinal(plane)
        for line in plane.lines:
            if line.name == ASYNC_LINE:
                counts["async"] += len(line)
            elif line.name == tpu.MODULE_LINE and len(line):
                c = line.columns(frozenset())
                order = np.argsort(c.start, kind="stable")
                names = np.array(c.names(), dtype=object)[order].tolist()
                paired = tpu.pair_runs(c.start[order].tolist(), disp[0])
                for name, k in zip(names, paired, strict=True):
                    _, pid = tpu.module_name(name)
                    key = (int(pid) if pid else None, dev)
                    e = execs.setdefault(key, {"executions": 0, "from": "device program runs",
                                               "host_ps": None})
                    e["executions"] += 1
                    if k is not None:  # its host dispatch's duration
                        e["host_ps"] = (e["host_ps"] or 0) + disp[1][k]
        for line in plane.lines:
            if line.name != OP_LINE or not len(line):
                continue
            c = line.columns(STATS)
            order = np.lexsort((-c.dur, c.start))
            start, dur = c.start[order], c.dur[order]
            own = self_times(start, dur)
            counts["nested"] += int((own < dur).sum())
            names, pids, cats, stacks = (np.array(v, dtype=object)[order].tolist() for v in (
                c.names(), c.stats["program_id"], c.stats["hlo_category"], c.stats["source_stack"]))
            memo: dict = {}
            for s, d, name, pid, cat, stack in zip(start.tolist(), own.tolist(), names, pids,
                                                   cats, stacks, strict=True):
                key = (name, pid, cat)
                if (m := memo.get(key)) is None:
                    try:
                        p = int(pid) if pid not in (None, "") else None
                    except (TypeError, ValueError):
                        p = None
                    ins = instruction(name)
                    prog = built.get(p)
                    if prog is not None and isinstance(stack, str) and stack \
                            and ins not in prog.run_frames:
                        prog.run_frames[ins] = frames(stack)
                    m = memo[key] = (ins, p, tpu.category(str(cat or "")),
                                     prog.name if prog is not None else "")
                ins, p, category, module = m
                k = km.Kernel(dev, line.id, s, d, ins, None, ins, p, False, False, module)
                k.category = k.kind = category
                if p is None:
                    counts["no_program"] += 1
                    k.why = "outside"
                else:
                    k.instruction, k.match, k.confidence = ins, "exact", 1.0
                kernels.append(k)
                starts.setdefault((dev, p), []).append(s)
    starts = {key: np.array(v, np.int64) for key, v in starts.items()}
    return kernels, execs, starts, counts


COST_STATS = frozenset({"program_id", "flops", "model_flops", "bytes_accessed", "hlo_category",
                        "memory_access_breakdown"})
# memory_access_breakdown: repeated MemoryAccessed (field 1), each (operation, field 1; memory
# space, field 2; bytes, field 3); memory space 1 is HBM (then CMEM 2, VMEM 3), as XProf's
# PerformanceInfo.MemoryAccessed numbers them. XProf's own HBM bandwidth per op is these bytes
# over its time (checked on the lab's train_step: equal to the byte).
HBM_SPACE = 1


def hbm_bytes(breakdown) -> int | None:
    """The HBM bytes of one run from its serialized memory_access_breakdown; None where it has
    none or it cannot be read."""
    if not isinstance(breakdown, bytes | bytearray) or not breakdown:
        return None
    try:
        total, i = 0, 0
        while i < len(breakdown):
            _, i = _varint(breakdown, i)
            n, i = _varint(breakdown, i)
            sub, i, fields, j = breakdown[i:i + n], i + n, {}, 0
            while j < len(sub):
                tag, j = _varint(sub, j)
                fields[tag >> 3], j = _varint(sub, j)
            if fields.get(2) == HBM_SPACE:
                total += fields.get(3, 0)
        return total
    except IndexError:
        return None


def _varint(b, i: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        x = b[i]
        i += 1
        out |= (x & 0x7F) << shift
        shift += 7
        if x < 0x80 or shift > 63:
            return out, i


def costs(space) -> dict:
    """(program id, instruction) -> (flops, model_flops, bytes_accessed, hlo_category, HBM
    bytes) of one run, as the capture states them (XLA's cost model; a Pallas call's own cost
    estimate, 0 where it gives none; HBM bytes from its memory-access breakdown, None where it
    has none), from the first run of each instruction on the TPU planes."""
    out: dict = {}
    for plane in tpu_planes(space):
        for line in plane.lines:
            if line.name != OP_LINE or not len(line):
                continue
            c = line.columns(COST_STATS)
            st = c.stats
            for i, name in enumerate(c.names()):
                try:
                    key = (int(st["program_id"][i]), instruction(name))
                except (TypeError, ValueError):
                    continue
                if key not in out:
                    out[key] = tuple(_int(st[k][i]) for k in ("flops", "model_flops",
                                                               "bytes_accessed")) + (
                        str(st["hlo_category"][i] or ""),
                        hbm_bytes(st["memory_access_breakdown"][i]))
    return out


def _int(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None
