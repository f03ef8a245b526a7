"""Where a GPU sits idle within and between steps, and why (standard library only).

Within a step: the gaps on a GPU's critical stream, cut by cause (host_late while the next
kernel's launch call had not ended, device_wait once it had, unknown where no launch joined) with
the host events on the thread that launched the kernel after the gap (`classify_gaps`, gaps.csv).
Between steps: the GPU idle after a step's last kernel until the next step starts, the largest
host events in it and its cause class (`between_steps`, steps.csv). Pure functions of step 1's
Analysis; they never print or write.
"""

from __future__ import annotations

import bisect
import functools
import re
from typing import TYPE_CHECKING

from gpu_events import union_ps
from tracekit import trace_rules as rules

if TYPE_CHECKING:
    from skip_analysis import Analysis


# A gap shorter than this on the critical stream is back-to-back execution, not idleness worth a
# row: launch latency alone is a few microseconds.
MIN_GAP_PS = 1_000_000
# A kernel queued in time starts within a few microseconds of its launch call's end (the
# driver's queue latency); one that starts more than this after its launch ended waited on the
# device (a dependency on another stream or GPU: a pipeline stage waiting for its input), and
# that part of the gap before it is device_wait, not the host's.
QUEUED_START_PS = 10_000_000
# A TPU program run whose dispatch call ended this long before its device went idle was queued
# by then: the gap before it is the device's (the host, blocked in a float() on an earlier
# result, dispatched a chain of eager programs long before). Wider than the host and device
# clocks' misalignment (up to 0.43 ms on a TPU v5e: tracekit.tpu.pair_runs).
DISPATCHED_BEFORE_PS = 500_000_000
# Runtime API calls (what a tracer's own launch lines hold): a thread with nothing else did no
# host work of its own that could explain a gap.
RUNTIME_API_RE = re.compile(r"^(hip|cu[A-Z]|cuda|Memcpy|Memset)")
# Host events that frame an execution rather than cause a gap: never reported as gap causes.
# Thunks::Prepare and Thunks::Initialize are not frames: each execution runs them before its
# first launch (xla/service/gpu/gpu_executable.cc), and Initialize records or updates the
# command buffers (342 us of a 622 us gap before the first kernel on an H200 capture)
# jax 0.11.2 names them with a device prefix and PJRT's common layer ("[0] GpuExecutable::
# ExecuteThunks", "CommonPjRtLoadedExecutable::Execute (jit_train_step)")
CONTAINER_RE = re.compile(r"^(\[\d+\] )?(PjitFunction|PJRT_|PjRt|GpuExecutable::|"
                          r"CommonPjRtLoadedExecutable::)|"
                          r":XLA GPU module$|^ExecutorState::|^ThunkExecutor")
# The runtime's call that dispatches a program (PJRT's Execute): on a GPU a frame around the
# launch calls that are the gap's causes; on a TPU the dispatch itself, the host's work before
# the program starts (GapIndex dispatch_is_work).
DISPATCH_CALL_RE = re.compile(r"^(\[\d+\] )?PjRt\w*LoadedExecutable::Execute")
# jit's Python dispatch path (`pjit.py:N cache_miss`): a call that misses the C++ fast path, as
# one with effects (a host callback) does: 2.6 ms a call on the lab's callback_step
SLOW_DISPATCH_RE = re.compile(r"(?:^|[\s$/])\w*\.py:\d+ cache_miss$|^cache_miss$")
# Host events whose names say the host is preparing input (iterators, data loaders, transfers to
# the device): idle between steps with these in it is an input-pipeline wait.
INPUT_PIPELINE_RE = re.compile(r"(?i)iterator|dataset|dataloader|data_loader|prefetch|next_batch|"
                               r"get_next|device_put|infeed|transfer_to_device|BufferFromPyval|"
                               r"HtoD|H2D|MemcpyH2D")
# Host events whose names say the host is waiting on a result (block_until_ready, device_get,
# reading a value, a stream or device synchronisation): idle between steps with these filling it
# is the host blocked on a result, whatever else ran beside.
SYNC_RE = re.compile(r"(?i)block_until_ready|block_host_until_ready|device_get|__array__|"
                     r"__float__|__int__|np\.asarray|\bitem\b|_value\b|synchroniz|Synchronize|"
                     r"await")
# A named class explains the idle between steps only where one of its events holds at least this
# share of the host time recorded there (one short prefetch call among milliseconds of other
# work is not an input-pipeline wait).
BETWEEN_CLASS_SHARE = 0.5
# Host events covering less than this share of the idle between steps do not explain it (the
# tail of the step's own sync wait, a launch call): the idle counts as not recorded.
BETWEEN_RECORDED_SHARE = 0.10
# Host events named in the between-steps column and in a gap's row, the largest first.
BETWEEN_EVENTS_NAMED = 5
GAP_EVENTS_NAMED = 8


@functools.cache
def is_container(name: str) -> bool:
    """Whether a host event frames an execution (CONTAINER_RE), memoized."""
    return CONTAINER_RE.search(name) is not None


class GapIndex:
    """The events that can explain a gap (not containers, not step markers), found by sweeping
    each host thread once in start order: a cursor per thread and lane (a GPU, or the idle
    between steps) admits the events that start before the window's end and keeps those still
    open at its start. Windows asked in time order (a lane's gaps, step by step) cost the
    events they hold plus the few still open (on one thread events nest: one a level); a
    window earlier than the last restarts the lane's sweep. An index that sorted every event
    into classes of duration first cost more to build than all the searches (0.5 s of a 50-step
    eager TPU capture's 600,000 host events)."""

    def __init__(self, host_threads, marked=(), dispatch_is_work: bool = False,
                 unordered=()):
        """`marked`: the host events that carry a step_num (gpu_events.Collected.marked);
        `dispatch_is_work`: the runtime's dispatch of a program (DISPATCH_CALL_RE) is the
        host's work, not a frame (a TPU: no launch call inside it stands for it); `unordered`:
        the threads whose events are not in start order (gpu_events.Collected.unordered)."""
        self.host_threads = host_threads
        self.marked = {id(h) for h in marked}  # held by host_threads: their ids stay
        self.unordered = set(unordered)
        self.dispatch_is_work = dispatch_is_work
        self.sorted: dict = {}
        self.cursors: dict = {}

    def overlapping(self, thread, lane, start: int, end: int) -> list:
        """[(start, end, name)] of the thread's events overlapping [start, end) (a zero-length
        event does not)."""
        cur = self.cursors.get((thread, lane))
        if cur is None or start < cur[2] or end < cur[3]:
            if thread not in self.sorted:
                evs = self.host_threads.get(thread, ())
                if thread in self.unordered:
                    evs = sorted(evs, key=lambda h: h["start"])
                work = self.dispatch_is_work
                self.sorted[thread] = evs, [h["start"] for h in evs], {
                    n for n in {h["name"] for h in evs} if is_container(n)
                    and not (work and DISPATCH_CALL_RE.search(n))}
            cur = self.cursors[(thread, lane)] = [0, [], start, end]
        evs, starts, frames = self.sorted[thread]
        i, marked = cur[0], self.marked
        j = bisect.bisect_left(starts, end, i)
        held = [x for x in cur[1] if x[1] > start]
        held += [(hs, he, name) for h in evs[i:j]  # a hot loop: every host event once a lane
                 if (he := (hs := h["start"]) + h["dur"]) > start and he > hs
                 and (name := h["name"]) not in frames and id(h) not in marked]
        cur[:] = j, held, start, end
        return held


def gap_parts(prev_end: int, ev) -> list:
    """A critical-stream gap before `ev`, from `prev_end`, cut by cause: host_late while the
    next kernel's launch call had not ended (a graph's kernels were all queued by its one
    launch), device_wait once it had (a queued kernel that waits: a dependency on another
    stream or GPU, a pipeline stage's input), unknown where no launch joined. A host_late gap
    whose kernel starts more than QUEUED_START_PS after its launch ended is cut there: the rest
    is the device's. A TPU op (joined to its program's `dispatch`) waits on the device inside
    its program run, on the host before it unless its dispatch ended DISPATCHED_BEFORE_PS or
    more before the gap began. Returns [(start, end, cause)]."""
    if ev.join == "dispatch" and ev.launch:
        # a TPU op: inside its program run the device waits on itself; before the run starts
        # the device has no program: it waits on the host's dispatch and the runtime's launch
        queued = ev.launch["run_start"] <= prev_end or (
            ev.launch["start"] + ev.launch["dur"] + DISPATCHED_BEFORE_PS <= prev_end)
        return [(prev_end, ev.start, "device_wait" if queued else "host_late")]
    if ev.join in rules.QUEUED_BY and ev.launch:
        lend = ev.launch["start"] + ev.launch["dur"]
        if lend <= prev_end:
            return [(prev_end, ev.start, "device_wait")]
        if ev.start - lend > QUEUED_START_PS:
            return [(prev_end, lend, "host_late"), (lend, ev.start, "device_wait")]
        return [(prev_end, ev.start, "host_late")]
    return [(prev_end, ev.start, "unknown")]


def classify_gaps(a: Analysis, crit_evs, step_start, device, step):
    """Gaps on the critical stream, cut by cause (gap_parts): host_late, device_wait, unknown;
    one gaps.csv row per part of at least MIN_GAP_PS."""
    totals = {"host_late": 0, "device_wait": 0, "unknown": 0}
    rows = []
    prev_end, prev_name = step_start, ""
    for ev in crit_evs:
        if ev.start > prev_end:
            for s, e, cause in gap_parts(prev_end, ev):
                totals[cause] += e - s
                if e - s >= MIN_GAP_PS:  # its host events: gap_host_cells, as it is written
                    rows.append({"device": device, "stream": ev.lane, "step": step,
                                 "start_ps": s, "end_ps": e, "dur_ps": e - s,
                                 "kernel_before": prev_name, "kernel_after": ev.name,
                                 "cause": cause, "after": ev})
        if ev.end > prev_end:
            prev_end, prev_name = ev.end, ev.name
    return totals["host_late"], totals["device_wait"], totals["unknown"], rows


def does_work(a: Analysis, thread) -> bool:
    """Whether a host thread holds any event that is not a runtime API call: asked once per
    thread (a capture of many gaps asked it once per gap, each a scan of the thread)."""
    known = a.__dict__.setdefault("_does_work", {})
    if thread not in known:
        known[thread] = any(not RUNTIME_API_RE.search(h["name"])
                            for h in a.host_threads.get(thread, []))
    return known[thread]


def gap_host_cells(a: Analysis, gap_rows) -> list[tuple]:
    """Per gaps.csv row (in order: by GPU, then start, as the GapIndex's lanes sweep), the
    thread that launched the event after it, the host events overlapping it there and the time
    Python-traced calls cover (gap_host_events): found only where the table is written
    (skip_writers.GapsJob), not where step 2 measures the steps."""
    return [gap_host_events(a, g["after"], g["start_ps"], g["end_ps"]) for g in gap_rows]


def gap_host_events(a: Analysis, ev, start, end) -> tuple[str, str, int | None]:
    """The thread that launched the event after a gap (for a graph kernel, its graph's launch
    call), the host events that overlap the gap on it, and the time Python-traced calls cover in
    the gap on it (their union: nested calls counted once)."""
    if ev.join not in rules.QUEUED_BY or not ev.launch:
        return "", "", None
    launch_thread = ev.launch["thread"]
    thread = a.exec_of.get(launch_thread)
    if thread is None:
        if does_work(a, launch_thread):
            thread = launch_thread  # launches sit on the thread that did the work
        else:
            return a.thread_names.get(launch_thread, "") + " (unknown: no execution thread " \
                "holds its launches)", "", None
    traced: list = []
    top = host_events_in(a, start, end, (thread,), traced, ev.device)[0][:GAP_EVENTS_NAMED]
    return a.thread_names.get(thread, str(thread)), rules.host_events_cell(top), traced[0]


def host_events_in(a: Analysis, start: int, end: int, threads=None,
                   traced: list | None = None, lane=None) -> tuple[list, int]:
    """The host events of `threads` (default every thread; containers and step markers left
    out) overlapping [start, end), by name, the largest first; and the time any of them covers.
    A name's time is the union of its calls' overlaps, so a call nested in another of the same
    name, or the same name on several threads at once, is counted once: no name exceeds the
    window. `traced`, when given, receives the time Python-traced calls cover (their union);
    `lane`: whose windows these are, asked in time order (GapIndex)."""
    return named_overlaps(((hs, he, name) for thread in (
        a.host_threads if threads is None else threads)
        for hs, he, name in a.gap_events.overlapping(thread, lane, start, end)),
        start, end, traced)


def named_overlaps(found, start: int, end: int, traced: list | None = None) -> tuple[list, int]:
    """host_events_in's answer from the events `found` ((start, end, name), each overlapping
    [start, end)): each name's union of its overlaps, the largest first, and their union."""
    per: dict[str, list] = {}
    spans = []
    for hs, he, name in found:
        span = (hs if hs > start else start, he if he < end else end)
        iv = per.get(name)
        if iv is None:
            per[name] = [span]
        else:
            iv.append(span)
        spans.append(span)
    overlap = {name: iv[0][1] - iv[0][0] if len(iv) == 1 else union_ps(iv)
               for name, iv in per.items()}
    if traced is not None:
        traced.append(union_ps([x for name, iv in per.items()
                                if name.startswith(rules.PYTHON_TRACER_PREFIX) for x in iv]))
    return sorted(overlap.items(), key=lambda kv: (-kv[1], kv[0])), union_ps(spans)


def between_steps(a: Analysis, step_rows) -> None:
    """Per step and GPU: the step period (this step's start to the next step's, any step the
    capture holds), the GPU idle after its last kernel until the next step starts, the largest
    host events inside that idle (all host threads, containers left out) and its cause class:
    waiting on a result, input pipeline, host work between steps, or not recorded
    (between_cause)."""
    order = sorted(a.steps, key=lambda st: st.start)
    nxt = {st.number: order[i + 1] for i, st in enumerate(order[:-1])}
    on_device = {(r["device"], r["step"]): r["start_ps"] for r in step_rows}
    windows: dict = {}  # step -> [(row, idle start, next start)]
    for r in step_rows:
        n = nxt.get(r["step"])
        if n is not None:  # the next step's start on this GPU (skip_analysis.device_starts)
            n = on_device.get((r["device"], n.number), n.start)
        r["period_ps"] = r["idle_between_ps"] = None
        r["between_events"], r["between_cause"] = "", ""
        if n is None or n <= r["start_ps"]:
            continue
        r["period_ps"] = n - r["start_ps"]
        r["idle_between_ps"] = max(0, n - r["end_ps"])
        if r["idle_between_ps"]:
            windows.setdefault(r["step"], []).append((r, r["end_ps"], n))
    # one search of every thread a step, over its devices' windows together, each device's
    # window then read from it: a search a device and thread grew with their product
    for step in sorted(windows, key=lambda k: min(w[1] for w in windows[k])):
        lo, hi = min(w[1] for w in windows[step]), max(w[2] for w in windows[step])
        found = [x for thread in a.host_threads
                 for x in a.gap_events.overlapping(thread, "between", lo, hi)]
        for r, start, end in windows[step]:
            events, covered = named_overlaps(
                (x for x in found if x[0] < end and x[1] > start), start, end)
            r["between_events"] = rules.host_events_cell(events[:BETWEEN_EVENTS_NAMED])
            r["between_cause"] = between_cause(events, covered, r["idle_between_ps"])


def between_cause(events, covered: int, idle: int) -> str:
    """The cause class of the GPU idle between steps from the host events inside it ((name,
    time) pairs) and the time they cover: the named class (waiting on a result, input
    pipeline) one of whose events holds at least BETWEEN_CLASS_SHARE of that time, by time, not
    by presence."""
    if not events:
        return "not recorded"
    if covered < BETWEEN_RECORDED_SHARE * idle:
        return "mostly not recorded"  # events there, but they cover under 10% of the idle
    for cause, pattern in (("waiting on a result", SYNC_RE),
                           ("input pipeline", INPUT_PIPELINE_RE)):
        # the class's largest event against the time recorded there (events nest and overlap:
        # their sum is no share)
        if max((t for name, t in events if pattern.search(name)), default=0) >= \
                BETWEEN_CLASS_SHARE * covered:
            return cause
    return "host work between steps"


def cause_words(cause: str, tracer_on: bool) -> str:
    """The cause class of the idle between steps in words; what 'not recorded' means depends on
    whether the Python tracer was on (one truthful sentence: never 'may be off' when it was on)."""
    if cause == "not recorded":
        return ("with nothing recorded on the host (the Python tracer was on: the host was "
                "outside traced Python, in C code, waiting or idle)" if tracer_on else
                "with nothing recorded on the host (the Python tracer was off: what Python did "
                "there is not in the capture)")
    return CAUSE_WORDS.get(cause, cause)


CAUSE_WORDS = {
    "mostly not recorded": "with host events covering under 10% of that idle (steps.csv "
                           "between_host_events names them)",
    "input pipeline": "with the host preparing input (iterator, transfer or device_put events)",
    "waiting on a result": "with the host blocked waiting on a result (block_until_ready, "
                           "device_get or a synchronisation: steps.csv between_host_events)",
    "host work between steps": "with the host busy in other work (the events named in "
                               "steps.csv between_host_events)",
}
