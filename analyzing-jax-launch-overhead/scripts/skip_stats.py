#!/usr/bin/env python3
"""Is the GPU step bound by the host's launches, by the device, or by GPUs waiting on each other?

Usage:
    python3 -P skip_stats.py <trace.json.gz | trace.json | run folder | log folder>
                             [--out DIR] [--run NAME] [--host NAME]

Example:
    python3 -P $S/scripts/skip_stats.py ~/logs/plugins/profile/2026_02_20_13_54_10

Reads only the trace (standard library only) and writes into the current directory (or --out):
    summary.txt  the verdict in one line, the rule that produced it, key figures with ranges
    rows.csv     every GPU event joined to its host launch call by correlation id
    streams.csv  per GPU x stream: span and compute/collective/memcpy/idle time and shares
    steps.csv    per step x GPU: start, end, busy, idle, critical stream, SKIP metrics
    gaps.csv     idle gaps on each GPU's critical stream, classified, with the host events in them
Columns and units: references/scratch-layout.md of the investigating-jax-traces skill.
What cannot be computed (no GPU events, no launch events, graph-launched kernels, one partial
step) is said in summary.txt under "cannot compute"; the rest is still written.

Exit codes: 0 done (refusals included); 1 the input cannot be read or is not a trace; 2 usage.
"""

from __future__ import annotations

import argparse
import bisect
import gc
import json
import operator
import os
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import per_host  # noqa: E402
import trace_rules as rules  # noqa: E402
from trace_rules import pct, us, write_csv  # noqa: E402

import capture_inputs  # noqa: E402
import trace_reader  # noqa: E402

# ---------------------------------------------------------------- named thresholds and patterns

# Verdict thresholds, applied on the GPU that finishes each step last, on its critical stream.
# Launch-bound: the stream waits on the host for at least this share of the step. 25% is where
# removing the wait would shorten the step by a quarter: big enough to be the first thing to fix.
LAUNCH_BOUND_HOST_SHARE = 0.25
# Device-bound: the critical stream is busy (or has work queued) for at least this share of the
# step and the host share stays under HOST_SHARE_NEGLIGIBLE: the GPU, not the host, sets the pace.
DEVICE_BOUND_BUSY_SHARE = 0.75
HOST_SHARE_NEGLIGIBLE = 0.10
# Collective/straggler-bound: collective kernels (which include waiting for peers) cover at least
# this share of the step on the bounding GPU, with more than one GPU in the capture.
COLLECTIVE_BOUND_SHARE = 0.25
# Between steps: the GPU that ends a step sits idle after its last kernel until the next step
# starts. At this share of the step period the time inside the step no longer tells the whole
# story (a tenth of the wall time is beyond what the in-step verdict weighs): the verdict line
# says so and names the cause class.
BETWEEN_STEPS_SHARE = 0.10
# Host events whose names say the host is preparing input (iterators, data loaders, transfers to
# the device): idle between steps with these in it is an input-pipeline wait.
INPUT_PIPELINE_RE = re.compile(r"(?i)iterator|dataset|dataloader|data_loader|prefetch|next_batch|"
                               r"get_next|device_put|infeed|transfer_to_device|BufferFromPyval|"
                               r"HtoD|H2D|MemcpyH2D")
# Host events covering less than this share of the idle between steps do not explain it (the
# tail of the step's own sync wait, a launch call): the idle counts as not recorded.
BETWEEN_RECORDED_SHARE = 0.10
# Host events named in the between-steps column, the largest first.
BETWEEN_EVENTS_NAMED = 5
# Straggler: the rule and its margin are shared with the cross-host summary (trace_rules).
STRAGGLER_MAJORITY = rules.STRAGGLER_MAJORITY
STRAGGLER_MIN_LEAD_PS = rules.STRAGGLER_MIN_LEAD_PS
STRAGGLER_MIN_LEAD_SHARE = rules.STRAGGLER_MIN_LEAD_SHARE
# A gap shorter than this on the critical stream is back-to-back execution, not idleness worth a
# row: launch latency alone is a few microseconds.
MIN_GAP_PS = 1_000_000
# A step is partial (skipped) when its kernel count differs from the most common count and it is
# the first or last step: the profile started or stopped inside it.
PROGRESS_EVENTS = 500_000  # report progress on stderr above this many events
# From this many GPU events on, rows.csv is written by a forked child while this process computes
# the other tables (a second core; where there is no fork, it is written first, here). Under it
# the fork costs more than it saves.
FORK_ROWS_MIN = 100_000
# Launch-thread -> execution-thread mapping: after this many unambiguous matches for one
# launching thread, the majority cannot change in any capture seen; stop counting.
VOTES_ENOUGH = 200
# XLA's trace exporter (jaxlib 0.10.2) keeps at most this many events and drops the rest by time.
EXPORTER_EVENT_CAP = 1_000_000

# Category, launch and graph rules: trace_rules.py (one home for the bundle).
# Runtime API calls (what a tracer's own launch lines hold): a thread with nothing else did no
# host work of its own that could explain a gap.
RUNTIME_API_RE = re.compile(r"^(hip|cu[A-Z]|cuda|Memcpy|Memset)")
# Host events that frame an execution rather than cause a gap: never reported as gap causes.
CONTAINER_RE = re.compile(r"^(PjitFunction|PJRT_|PjRt|GpuExecutable::|Thunks::)|"
                          r":XLA GPU module$|^ExecutorState::|^ThunkExecutor")


# Steps from the repeating cycle of program executions (no step annotation). A cycle length p is
# accepted when the executed programs' names repeat with period p for at least this share of the
# sequence: 90% tolerates a few executions outside the cycle (a warm-up call, a metrics program
# every tenth step) without accepting a sequence that does not repeat.
PERIOD_MATCH_SHARE = 0.9
# At least this many whole cycles: one cycle cannot be told from a sequence that never repeats.
PERIOD_MIN_CYCLES = 2
# The longest cycle looked for, in executions: a step of more program executions than this is
# taken as one window (the search is linear per candidate length, and no real step was seen with
# more than a few hundred dispatches).
PERIOD_MAX = 4096
# The cycle search compares the sequence with itself once per candidate length, in C: at most
# this many element comparisons in all (about a second), so a long sequence that never repeats
# costs bounded time; lengths beyond it are not tried (a cycle longer than this many
# comparisons / executions is not found, and the capture is one window).
CYCLE_SEARCH_WORK = 50_000_000
# The best-scoring lengths (shifted comparison) tried again with their most common run of
# programs, where an inserted execution shifts the rest of the sequence out of phase; a length
# that matches under this share of the shifted sequence is not a cycle with a few insertions.
CYCLE_CANDIDATES = 20
CYCLE_CANDIDATE_SHARE = 0.3
# A kernel queued in time starts within a few microseconds of its launch call's end (the
# driver's queue latency); one that starts more than this after its launch ended waited on the
# device (a dependency on another stream or GPU: a pipeline stage waiting for its input), and
# that part of the gap before it is device_wait, not the host's.
QUEUED_START_PS = 10_000_000
# Where a cycle starts: at the execution after the longest host pause of the cycle (the step's
# sync, the input pipeline), when the median pause before it is at least this many times the
# median pause before every other execution of the cycle; otherwise the pauses do not mark a
# boundary and the capture's first execution starts the first step (said in the notes).
PHASE_PAUSE_RATIO = 1.5



# ---------------------------------------------------------------- model

class GpuEvent:
    """One GPU stream event (kernel, memcpy, memset); times in integer picoseconds."""
    __slots__ = ("device", "stream", "name", "start", "dur", "end", "args", "category", "join",
                 "launch", "graph", "step")

    def __init__(self, device, stream, name, start, dur, args, category="compute"):
        self.device = device
        self.stream = stream
        self.name = name
        self.start = start
        self.dur = dur
        self.end = start + dur
        self.args = args
        self.category = category
        self.join = "none"
        self.launch = None
        self.graph = False
        self.step = None


@dataclass
class Step:
    number: int
    start: int
    end: int
    source: str
    partial: bool = False
    launched: int | None = None  # program steps: when the host finished launching the program
    executions: list = field(default_factory=list)  # the program executions of the step
    extra: int = 0  # executions outside the repeating cycle that ran in this step


@dataclass
class Analysis:
    events: list
    steps: list
    step_source: str
    analysed: list
    per_gpu: dict = field(default_factory=dict)
    refusals: list = field(default_factory=list)
    notes: list = field(default_factory=list)


# ---------------------------------------------------------------- load

_CATEGORY: dict[tuple, str] = {}
_JOIN_KIND: dict[tuple, str] = {}
_CONTAINER: dict[str, bool] = {}


def categorize(name: str, args: dict) -> str:
    """compute | collective | memcpy (trace_rules.category), memoized."""
    key = (name, args.get("hlo_op", ""), "memcpy_details" in args)
    cat = _CATEGORY.get(key)
    if cat is None:
        cat = _CATEGORY[key] = rules.category(*key)
    return cat


def join_kind(host_name: str, kernel_name: str) -> str:
    """What a correlation id joined: launch, graph_launch, or other (trace_rules.join_kind)."""
    key = (host_name, kernel_name)
    kind = _JOIN_KIND.get(key)
    if kind is None:
        kind = _JOIN_KIND[key] = rules.join_kind(host_name, kernel_name)
    return kind


def is_container(name: str) -> bool:
    c = _CONTAINER.get(name)
    if c is None:
        c = _CONTAINER[name] = CONTAINER_RE.search(name) is not None
    return c


def collect(trace):
    """GPU stream events, host events by thread, host events by correlation id. What the reader
    repaired (trace.notes), and GPU runtime calls in a trace without GPU processes, are said on
    stderr."""
    for note in getattr(trace, "notes", ()):
        print(f"skip_stats: note: {note}", file=sys.stderr)
    try:
        out = _collect(trace)
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        # trace_reader checks every field read here; this is the last line of defence
        raise trace_reader.TraceError(
            f"{trace.path} has a complete event that cannot be read ({type(exc).__name__}: "
            f"{rules.printable(exc)}); pid, tid, ts, dur and name are always there in XLA's "
            "traces") from exc
    gpu, _, _, by_corr = out
    if not gpu and by_corr and not trace.gpu_pids():
        calls = sum(len(hs) for hs in by_corr.values())
        print(f"skip_stats: note: {calls} host events carry a correlation id (GPU runtime calls) "
              "but the trace has no /device:GPU process: its GPU events are missing, so this is "
              "not a CPU capture", file=sys.stderr)
    return out


def _collect(trace):
    gpu_pid = {pid: o for o, pid in trace.gpu_pids().items()}
    host_pids = set(trace.host_pids())
    stream_threads = {k for k, name in trace.threads.items() if name.startswith("Stream #")}
    gpu, other_gpu_lines = [], 0
    append_gpu = gpu.append
    host_threads: dict[tuple, list] = {}
    by_corr: dict[str, list] = {}
    events = trace.events
    n = len(events)
    empty: dict = {}
    for start in range(0, n, PROGRESS_EVENTS):
        if start:
            print(f"skip_stats: {start:,} of {n:,} events read", file=sys.stderr)
        for ev in events[start:start + PROGRESS_EVENTS]:
            pid = ev["pid"]
            o = gpu_pid.get(pid)
            if o is not None:
                tid = ev["tid"]
                if (pid, tid) not in stream_threads:
                    other_gpu_lines += 1
                    continue
                args = ev.get("args", empty)
                name = ev["name"]
                append_gpu(GpuEvent(o, tid, name, round(ev["ts"] * 1_000_000),
                                    round(ev["dur"] * 1_000_000), args, categorize(name, args)))
            elif pid in host_pids:
                key = (pid, ev["tid"])
                args = ev.get("args", empty)
                h = {"name": ev["name"], "start": round(ev["ts"] * 1_000_000),
                     "dur": round(ev["dur"] * 1_000_000), "thread": key, "args": args}
                lst = host_threads.get(key)
                if lst is None:
                    lst = host_threads[key] = []
                lst.append(h)
                cid = args.get("correlation_id")
                if cid is not None:
                    c = by_corr.get(cid)
                    if c is None:
                        by_corr[cid] = [h]
                    else:
                        c.append(h)
    return gpu, other_gpu_lines, host_threads, by_corr


# ---------------------------------------------------------------- analyses

def join_events(gpu, by_corr, threads) -> dict:
    """Join each GPU event to its host call by correlation id; say what the id joined."""
    counts = {"launch": 0, "graph_launch": 0, "other": 0, "none": 0, "ambiguous": 0,
              "no_correlation_id": 0}
    # device_id on host events may be an agent number: learn its map to ordinals from
    # unambiguous joins, and use it only to break ties.
    agent_votes: dict[str, dict[int, int]] = {}
    if any(len(hs) > 1 for hs in by_corr.values()):
        for ev in gpu:
            hs = by_corr.get(ev.args.get("correlation_id"), ())
            if len(hs) == 1 and "device_id" in hs[0]["args"]:
                v = agent_votes.setdefault(hs[0]["args"]["device_id"], {})
                v[ev.device] = v.get(ev.device, 0) + 1
    agent = {a: max(v, key=v.get) for a, v in agent_votes.items()}
    shared: dict[tuple, int] = {}
    graph_ids = rules.GRAPH_ID_STATS
    in_graph = rules.in_graph
    kinds = _JOIN_KIND
    none: list = []
    for ev in gpu:  # a hot loop: every GPU event once
        args = ev.args
        cid = args.get("correlation_id")
        if cid is None:
            counts["no_correlation_id"] += 1
            ev.join = "none"
            ev.graph = in_graph(not graph_ids.isdisjoint(args), False)
            continue
        hs = by_corr.get(cid, none)
        if len(hs) > 1:
            hs = [h for h in hs if agent.get(h["args"].get("device_id")) == ev.device] or hs
        if not hs:
            join = "none"
        elif len(hs) > 1:
            join = "ambiguous"
        else:
            h = ev.launch = hs[0]
            join = kinds.get((h["name"], ev.name)) or join_kind(h["name"], ev.name)
        ev.join = join
        counts[join] += 1
        key = (ev.device, cid)
        shared[key] = shared.get(key, 0) + 1
        ev.graph = in_graph(not graph_ids.isdisjoint(args), join == "graph_launch")
    counts["shared_ids_without_graph_launch"] = sum(
        n for (d, cid), n in shared.items() if n > 1 and not any(
            h for h in by_corr.get(cid, []) if rules.is_graph_launch(h["name"])))
    return counts


@dataclass
class Execution:
    """One dispatch of one program: its host execution events (one per GPU thread)."""
    module: str
    start: int
    end: int
    threads: set


MODULE_SUFFIX = ":XLA GPU module"


def host_scan(host_threads) -> dict:
    """One pass over the host events for what step framing needs: per thread its
    `<module>:XLA GPU module` events and `GpuExecutable::ExecuteThunks` events (start, end,
    module), and whether the Python tracer was on. Names repeat, so each distinct name is
    classified once."""
    kind: dict[str, int] = {}  # 0 nothing, 1 module event, 2 ExecuteThunks, 3 traced Python
    tracer = False
    per: dict = {}
    for key, events in host_threads.items():
        mods, thunks = [], []
        for h in events:
            name = h["name"]
            k = kind.get(name)
            if k is None:
                k = kind[name] = (1 if name.endswith(MODULE_SUFFIX) else
                                  2 if name == "GpuExecutable::ExecuteThunks" else
                                  3 if name.startswith(rules.PYTHON_TRACER_PREFIX) else 0)
            if not k:
                continue
            if k == 1:
                mods.append((h["start"], h["start"] + h["dur"], name[:-len(MODULE_SUFFIX)]))
            elif k == 2:
                m = h["args"].get("module_name")
                if m:
                    thunks.append((h["start"], h["start"] + h["dur"], str(m)))
            else:
                tracer = True
        if mods or thunks:
            per[key] = (mods, thunks)
    return {"threads": per, "tracer": tracer}


def program_executions(host_threads, scan: dict | None = None) -> list:
    """Executions of programs on the host, in start order: `<module>:XLA GPU module` events (or,
    on a thread without them, `GpuExecutable::ExecuteThunks` with its module_name), one per GPU
    thread; consecutive executions of one module on distinct threads are one dispatch (a
    multi-GPU program runs on one execution thread per GPU, at once or, on its first call, one
    GPU after another)."""
    evs = []
    for key, (mods, thunks) in (scan or host_scan(host_threads))["threads"].items():
        evs.extend((s, e, m, key) for s, e, m in (mods or thunks))
    evs.sort(key=lambda x: (x[0], x[1]))
    out: list[Execution] = []
    for s, e, m, key in evs:
        cur = out[-1] if out else None
        if cur is not None and cur.module == m and key not in cur.threads:
            cur.threads.add(key)
            cur.end = max(cur.end, e)
            continue
        out.append(Execution(m, s, e, {key}))
    return out


def find_cycle(names: list, complete: bool = False) -> tuple[int, list] | None:
    """The repeating cycle of a sequence of executed programs: the shortest p and the p-gram
    (one rotation of the cycle) whose whole, non-overlapping occurrences cover at least
    PERIOD_MATCH_SHARE of the sequence, PERIOD_MIN_CYCLES of them at least; None when nothing
    repeats. Every length p is scored by comparing the sequence with itself shifted by p (in C,
    on program ids: linear per p); the exact cycle wins at once; otherwise the
    CYCLE_CANDIDATES best-scoring lengths are tried with their most common p-gram (a rolling
    hash), so an execution inserted into one cycle does not shift every later one out of
    phase. The shortest length that passes wins. `complete`: every execution must lie in a
    cycle (a cut one at either end included), no execution outside. The work is bounded:
    lengths past CYCLE_SEARCH_WORK / len(names) are not tried."""
    n = len(names)
    ids: dict[str, int] = {}
    seq = [ids.setdefault(m, len(ids) + 1) for m in names]
    top = min(PERIOD_MAX, n // PERIOD_MIN_CYCLES, max(1, CYCLE_SEARCH_WORK // max(n, 1)))
    mod, base = (1 << 61) - 1, 1_000_003
    need = n if complete else PERIOD_MATCH_SHARE * n

    def covers(pattern: list) -> bool:
        covered, whole = walk_coverage(names, pattern)
        return covered >= need and whole >= PERIOD_MIN_CYCLES

    def common_run(p: int) -> tuple[int, list] | None:
        """Length p with its most common p-gram (rolling hash), if it covers the sequence."""
        h, power = 0, pow(base, p, mod)
        counts: dict[int, int] = {}
        first: dict[int, int] = {}
        for i, v in enumerate(seq):
            h = (h * base + v) % mod
            if i >= p:
                h = (h - seq[i - p] * power) % mod
            if i >= p - 1:
                counts[h] = counts.get(h, 0) + 1
                first.setdefault(h, i - p + 1)
        best = max(counts, key=lambda k: (counts[k], -first[k]))
        if counts[best] * p < PERIOD_MATCH_SHARE * n - p or counts[best] < PERIOD_MIN_CYCLES:
            return None
        pattern = names[first[best]:first[best] + p]
        return (p, pattern) if covers(pattern) else None

    scores, found = [], None
    for p in range(1, top + 1):
        same = n - p - sum(map(operator.ne, seq[:n - p], seq[p:]))
        share = same / (n - p) if n > p else 0.0
        if share >= PERIOD_MATCH_SHARE:
            # the sequence starts in the cycle, or outside it (its most common run)
            found = (p, names[:p]) if covers(names[:p]) else common_run(p)
            if found:
                break
        scores.append((share, p))
    # shorter lengths whose shifted comparison an inserted execution spoilt (a metrics program
    # every tenth step shifts the rest out of phase): their most common run
    for p in sorted(p for share, p in sorted(scores, reverse=True)[:CYCLE_CANDIDATES]
                    if share >= CYCLE_CANDIDATE_SHARE):
        if found and p >= found[0]:
            break
        shorter = common_run(p)
        if shorter:
            return shorter
    return found


def occurrences(names: list, pattern: list) -> list:
    """Where the whole occurrences of `pattern` start, taken left to right, not overlapping."""
    p, i, out = len(pattern), 0, []
    while i < len(names):
        if names[i:i + p] == pattern:
            out.append(i)
            i += p
        else:
            i += 1
    return out


def walk_coverage(names: list, pattern: list) -> tuple[int, int]:
    """Executions inside whole occurrences of `pattern` (taken left to right, not overlapping),
    plus a cycle the capture cut at either end (the executions before the first occurrence
    when they end the pattern, those after the last when they begin it), and how many whole
    occurrences."""
    p, at = len(pattern), occurrences(names, pattern)
    covered, whole = p * len(at), len(at)
    if whole:
        head, tail = names[:at[0]], names[at[-1] + p:]
        if head and len(head) < p and head == pattern[p - len(head):]:
            covered += len(head)
        if tail and len(tail) < p and tail == pattern[:len(tail)]:
            covered += len(tail)
    return covered, whole


def cycle_positions(names: list, pattern: list) -> list:
    """Each execution's position in the cycle (None for one outside every whole occurrence)."""
    p, pos = len(pattern), [None] * len(names)
    for i in occurrences(names, pattern):
        pos[i:i + p] = range(p)
    return pos


def cycle_phase(execs: list, pattern: list) -> tuple[list, str]:
    """The rotation of the cycle that starts a step: the one after the longest host pause (the
    median over cycles of the time from the previous execution's end to this one's start), when
    it stands out by PHASE_PAUSE_RATIO; else the cycle as the capture first runs it."""
    p = len(pattern)
    if p == 1:
        return pattern, "one program per step"
    names = [x.module for x in execs]
    pos = cycle_positions(names, pattern)
    pauses: dict[int, list] = {}
    for i in range(1, len(execs)):
        if pos[i] is not None:
            pauses.setdefault(pos[i], []).append(max(0, execs[i].start - execs[i - 1].end))
    med = {r: statistics.median(v) for r, v in pauses.items() if v}
    if len(med) < p:
        return pattern, "the capture's first execution of the cycle starts a step"
    best = max(sorted(med), key=lambda r: med[r])
    rest = statistics.median([v for r, v in med.items() if r != best])
    if med[best] >= PHASE_PAUSE_RATIO * max(rest, 1):
        return pattern[best:] + pattern[:best], (
            f"a step starts after the longest host pause of the cycle (median "
            f"{med[best] / 1e6:,.1f} us before {pattern[best]}, against {rest / 1e6:,.1f} us "
            "before the others)")
    return pattern, ("no host pause marks the cycle's start, so the capture's first execution "
                     "of the cycle starts a step")


class CallTree:
    """The Python-traced calls of each host thread as a nesting (each call's enclosing call),
    built once, so that the calls enclosing a time are found by one bisection and a walk up."""

    def __init__(self, host_threads):
        self.threads = []  # per thread: (starts, calls, parent index, nesting depth)
        for events in host_threads.values():
            calls = sorted((h for h in events if h["name"].startswith(rules.PYTHON_TRACER_PREFIX)
                            and not PROFILER_CALL_RE.match(h["name"])),
                           key=lambda h: (h["start"], -h["dur"]))
            if not calls:
                continue
            parent, depth, stack = [], [], []
            for i, h in enumerate(calls):
                while stack and calls[stack[-1]]["start"] + calls[stack[-1]]["dur"] <= h["start"]:
                    stack.pop()
                parent.append(stack[-1] if stack else -1)
                depth.append(len(stack))
                stack.append(i)
            self.threads.append(([h["start"] for h in calls], calls, parent, depth))

    @classmethod
    def of(cls, host_threads) -> CallTree | None:
        """A tree given one, else one built from a thread map (None for none)."""
        if isinstance(host_threads, cls) or host_threads is None:
            return host_threads
        return cls(host_threads)

    def innermost_enclosing(self, t0: int, t1: int) -> dict | None:
        """The shortest traced call, on any thread, that starts by t0 and ends at t1 or later."""
        best = None
        for starts, calls, parent, _ in self.threads:
            i = bisect.bisect_right(starts, t0) - 1
            while i >= 0 and calls[i]["start"] + calls[i]["dur"] < t1:
                i = parent[i]  # the calls enclosing t0 are this call's ancestors
            if i >= 0 and (best is None or calls[i]["dur"] < best["dur"]):
                best = calls[i]
        return best


def python_phase(tree, execs: list, pattern: list) -> tuple[list, str] | None:
    """The rotation of the cycle that a Python-traced call runs whole: a traced call (one name,
    at least PERIOD_MIN_CYCLES calls) inside each of which exactly one cycle's executions begin,
    in one rotation of the cycle; the innermost such call (the loop body a person calls a step).
    None without the tracer or without such a call."""
    p = len(pattern)
    tree = CallTree.of(tree)
    if p < 2 or not tree:
        return None
    starts = [x.start for x in execs]
    names = [x.module for x in execs]
    rotations = {tuple(pattern[r:] + pattern[:r]) for r in range(p)}
    span = min((execs[i + p - 1].start - execs[i].start for i in range(len(execs) - p + 1)),
               default=0)
    best = None
    for _, calls, _, _ in tree.threads:
        per: dict[str, list] = {}
        for h in calls:
            if h["dur"] < span:
                continue
            lo = bisect.bisect_left(starts, h["start"])
            hi = bisect.bisect_left(starts, h["start"] + h["dur"])
            if hi - lo == p and tuple(names[lo:hi]) in rotations:
                per.setdefault(h["name"], []).append((h["dur"], tuple(names[lo:hi])))
        for name, calls in per.items():
            if len(calls) < PERIOD_MIN_CYCLES:
                continue
            rot = max(set(c[1] for c in calls), key=[c[1] for c in calls].count)
            rank = (statistics.median(c[0] for c in calls), name)
            if best is None or rank < best[0]:
                best = (rank, name, rot, len(calls))
    if best is None:
        return None
    _, name, rot, n = best
    return list(rot), (f"a step starts where {name} starts: each of its {n} calls runs one "
                       "whole cycle (the Python tracer's call, the loop body)")


def cycle_steps(execs: list, trace_end: int, notes: list,
                host_threads=None) -> tuple[list, str] | None:
    """Steps from the repeating cycle of executed programs, or None when nothing repeats."""
    names = [x.module for x in execs]
    found = find_cycle(names)
    if found is None:
        return None
    p, pattern = found
    tree = CallTree.of(host_threads)
    chose = ""
    if walk_coverage(names, pattern)[0] < len(names):
        # executions outside the shortest cycle: extras inside its steps (a metrics program every
        # tenth step), or the shortest cycle is a part of the step (a layer program run 28 times
        # between a head and an update): the longer cycle that leaves nothing out is the step
        # when a Python-traced call runs it whole, or the host pauses longest once per turn
        full = find_cycle(names, complete=True)
        if full and full[0] > p:
            by_call = python_phase(tree, execs, full[1])
            rotated, pause = cycle_phase(execs, full[1])
            if by_call or pause.startswith("a step starts after"):
                chose = (f"the cycle of {full[0]} executions, not its part of {p} with the rest as "
                         "extras: " + ("a Python-traced call runs it whole" if by_call else
                                       "the host pauses longest once per turn of it"))
                p, pattern = full
    cycle, why = python_phase(tree, execs, pattern) or cycle_phase(execs, pattern)
    if chose:
        why = f"{chose}; {why}"
    # walk the executions: a step at every whole cycle; an execution outside the cycle joins the
    # step it runs in (a metrics program every tenth step); those before the first whole cycle
    # and an unfinished last cycle are partial steps
    groups: list[list] = []
    extra: list[int] = []
    i = 0
    while i < len(execs):
        if names[i:i + p] == cycle:
            groups.append(list(range(i, i + p)))
            extra.append(0)
            i += p
        elif len(execs) - i < p and names[i:] == cycle[:len(execs) - i]:
            groups.append(list(range(i, len(execs))))  # the cycle the capture cut
            extra.append(0)
            break
        elif groups:
            groups[-1].append(i)
            extra[-1] += 1
            i += 1
        else:
            groups.append([i])  # before the first whole cycle
            extra.append(0)
            i += 1
    steps = []
    for k, idx in enumerate(groups):
        group = [execs[j] for j in idx]
        nxt = groups[k + 1][0] if k + 1 < len(groups) else None
        end = execs[nxt].start if nxt is not None else trace_end
        st = Step(k, group[0].start, end, "", launched=max(x.end for x in group))
        st.executions = group
        st.extra = extra[k]
        st.partial = [names[j] for j in idx[:p]] != cycle
        steps.append(st)
    distinct = list(dict.fromkeys(cycle))
    if p == 1:
        source = f"executions of {cycle[0]}"
        label = f"program:{cycle[0]}"
    else:
        counts = {m: cycle.count(m) for m in distinct}
        source = (f"the repeating cycle of {p} program executions ("
                  + ", ".join(f"{m} x{c}" if c > 1 else m for m, c in counts.items())
                  + ")")
        label = f"cycle of {p} executions"
    for st in steps:
        st.source = label
    outside = sum(len(g) if st.partial else st.extra for g, st in zip(groups, steps, strict=True))
    notes.append(f"steps: {source}; {why}; {len(execs)} executions, {outside} outside the "
                 "whole cycles (the trace has no program ids, so programs sharing a module "
                 "name count together)")
    return steps, source + " (the trace has no program ids, so programs sharing a module name "\
        "count together)"


def python_call_steps(host_threads, execs: list, trace_end: int, notes: list):
    """Steps from the Python tracer: the outermost traced call that repeats (at least
    PERIOD_MIN_CYCLES times) with program executions inside each call, on one thread: the
    user's loop body when the programs it runs do not repeat in a cycle (a data-dependent number
    of calls). The call that holds the most executions in all wins (the loop body, not a
    helper inside it), then the shallowest. Every call is a whole step (the tracer records a
    call when it ends), none partial. None without the tracer or without such a call."""
    starts = [x.start for x in execs]
    best = None
    tree = CallTree.of(host_threads)
    for _, traced, _, depths in tree.threads if tree else ():
        by: dict[tuple, list] = {}  # (depth, name) -> calls
        for h, depth in zip(traced, depths, strict=True):
            by.setdefault((depth, h["name"]), []).append(h)
        for (depth, name), calls in by.items():
            inside = [bisect.bisect_left(starts, c["start"] + c["dur"]) -
                      bisect.bisect_left(starts, c["start"]) for c in calls]
            calls = [c for c, n in zip(calls, inside, strict=True) if n]
            if len(calls) < PERIOD_MIN_CYCLES:
                continue
            # the call that holds the most executions in all (the loop body, not a helper it
            # calls), then the shallowest
            rank = (-sum(n for n in inside if n), depth)
            if best is None or rank < best[0]:
                best = (rank, name, calls)
    if best is None:
        return None
    _, name, calls = best
    steps = []
    for k, c in enumerate(calls):
        end = calls[k + 1]["start"] if k + 1 < len(calls) else max(trace_end,
                                                                    c["start"] + c["dur"])
        st = Step(k, c["start"], end, f"python:{name}")
        lo, hi = bisect.bisect_left(starts, c["start"]), bisect.bisect_left(
            starts, c["start"] + c["dur"])
        st.executions = execs[lo:hi]
        st.launched = max(x.end for x in st.executions)
        steps.append(st)
    notes.append(f"steps: the program executions do not repeat in a cycle; each call of "
                 f"{name}, the outermost Python-traced call that repeats with program "
                 f"executions inside it, is a step ({len(calls)} calls)")
    return steps, f"calls of {name} (the Python tracer's outermost repeated call)"


def find_steps(gpu, host_threads, trace_end, scan: dict | None = None,
               tree: CallTree | None = None) -> tuple[list, str, list]:
    notes = []
    marks: dict[int, list] = {}
    for events in host_threads.values():
        for h in events:
            sn = h["args"].get("step_num")
            if sn is not None:
                try:
                    marks.setdefault(int(sn), []).append(h)
                except ValueError:
                    continue
    if marks:
        steps = [Step(n, min(h["start"] for h in hs), max(h["start"] + h["dur"] for h in hs),
                      "annotation") for n, hs in sorted(marks.items())]
        # the program executions that began inside each annotated step
        execs = program_executions(host_threads, scan)
        starts = [x.start for x in execs]
        for st in steps:
            st.executions = execs[bisect.bisect_left(starts, st.start):
                                  bisect.bisect_right(starts, st.end)]
        return steps, "StepTraceAnnotation (step_num)", notes
    execs = program_executions(host_threads, scan)
    if tree is None and execs and (scan or host_scan(host_threads))["tracer"]:
        tree = CallTree(host_threads)
    found = cycle_steps(execs, trace_end, notes, tree) if execs else None
    if found is None and tree:
        found = python_call_steps(tree, execs, trace_end, notes)
    if found is not None:
        steps, source = found
        return steps, source, notes
    if not gpu:
        return [], "none", notes
    start = min(e.start for e in gpu)
    end = max(e.end for e in gpu)
    if not execs:
        why = ("no StepTraceAnnotation and no program executions on the host (no "
               "`<module>:XLA GPU module` or GpuExecutable::ExecuteThunks events)")
    else:
        why = (f"no StepTraceAnnotation, and the {len(execs)} program execution(s) on the host "
               "do not repeat in a cycle")
    notes.append(f"{why}: the whole capture is analysed as one window")
    st = Step(0, start, end, "capture", partial=True)
    st.executions = execs
    return [st], "the whole capture", notes


def program_call_starts(gpu, steps) -> None:
    """Steps taken from program executions: a call starts with its argument copies, launched by
    its dispatch before the program runs. Each step's start moves back to the launch of the
    earliest such copy (a memcpy outside the program: no hlo_op, no hlo_module, not in a graph,
    not to the host, joined to a launch call of its own) launched after the host finished
    launching the previous execution; the previous step then ends there. So a GPU's step ends
    at its program's last kernel, the next call's copies run inside the next call's step, and
    the idle between calls is measured. The first step looks back at most twice the longest
    such lead of the others (copies made long before the first call are set-up)."""
    if not steps or steps[0].launched is None:
        return
    starts = [s.start for s in steps]
    first: dict[int, int] = {}
    for ev in gpu:
        if not (ev.join == "launch" and ev.launch and "hlo_module" not in ev.args
                and rules.is_argument_copy(ev.category, ev.args, ev.graph)) \
                or rules.is_copy_to_host(ev.name, ev.launch["name"]):
            continue
        t = ev.launch["start"]
        i = bisect.bisect_right(starts, t)  # the next execution: starts[i] > t
        if i >= len(steps) or (i > 0 and t <= steps[i - 1].launched):
            continue  # after the last call, or launched while the previous call was launching
        if t < first.get(i, starts[i]):
            first[i] = t
    leads = [starts[i] - t for i, t in first.items() if i > 0]
    if 0 in first and (not leads or starts[0] - first[0] > 2 * max(leads)):
        del first[0]
    for i, t in sorted(first.items()):
        steps[i].start = t
        if i > 0:
            steps[i - 1].end = min(steps[i - 1].end, t)


def assign_steps(gpu, steps) -> None:
    starts = [s.start for s in steps]
    for ev in gpu:
        t = ev.launch["start"] if ev.join == "launch" and ev.launch else ev.start
        i = bisect.bisect_right(starts, t) - 1
        if i >= 0 and t <= steps[i].end or (i >= 0 and steps[i].source != "annotation"):
            ev.step = steps[i].number
        else:
            ev.step = None



def mark_partial(gpu, steps) -> list:
    """The first and last step are partial when their event count differs from the most common
    one (the profile started or stopped inside them); steps framed from Python calls keep their
    own flags (a call's work varies by design, and a traced call is recorded whole)."""
    if steps and steps[0].source.startswith("python:"):
        return [s for s in steps if not s.partial]
    counts = {}
    for ev in gpu:
        if ev.step is not None:
            counts[ev.step] = counts.get(ev.step, 0) + 1
    if not steps:
        return []
    values = [counts.get(s.number, 0) for s in steps]
    common = max(set(values), key=values.count) if values else 0
    for pos in (0, len(steps) - 1):
        s = steps[pos]
        if len(steps) > 1 and counts.get(s.number, 0) != common:
            s.partial = True
    return [s for s in steps if not s.partial]


def union_ps(intervals) -> int:
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if e <= s:
            continue  # empty (or a negative duration the tracer wrote): covers nothing
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def stream_budget(events, start, end) -> dict:
    """Partition [start, end) of one stream into category time and idle, exactly."""
    out = {"compute": 0, "collective": 0, "memcpy": 0}
    covered = start
    for ev in sorted(events, key=lambda e: (e.start, -e.dur)):
        s, e = max(ev.start, covered), min(ev.end, end)
        if e > s:
            out[ev.category] += e - s
            covered = e
    out["idle"] = (end - start) - sum(out.values())
    return out


def launch_threads_to_exec(gpu, host_threads) -> dict:
    """Map each launching thread to the thread that ran the execution (by the per-instruction
    TraceMe that holds the launch in time and carries the same instruction name)."""
    # a sample of launches per launching thread is enough for the majority
    sample: dict[tuple, list] = {}
    for ev in gpu:
        if ev.join != "launch" or not ev.launch:
            continue
        lst = sample.setdefault(ev.launch["thread"], [])
        if len(lst) < 4 * VOTES_ENOUGH:
            label = ev.launch["args"].get("hlo_op") or ev.args.get("hlo_op")
            if label:
                lst.append((ev.launch, label))
    labels = {label for lst in sample.values() for _, label in lst}
    # label -> thread -> (sorted starts, ends): one bisect per thread that has the name
    index: dict[str, dict] = {}
    for key, events in host_threads.items():
        for h in events:
            if h["name"] in labels:
                index.setdefault(h["name"], {}).setdefault(key, []).append(
                    (h["start"], h["start"] + h["dur"]))
    for per_thread in index.values():
        for key, iv in per_thread.items():
            iv.sort()
            per_thread[key] = ([s for s, _ in iv], [e for _, e in iv])
    votes: dict[tuple, dict] = {}
    decided: dict[tuple, int] = {}
    for L, label in (x for lst in sample.values() for x in lst):
        if decided.get(L["thread"], 0) >= VOTES_ENOUGH:
            continue
        t = L["start"]
        cands = []
        for key, (starts, ends) in index.get(label, {}).items():
            if key == L["thread"]:
                continue
            i = bisect.bisect_right(starts, t) - 1
            if i >= 0 and ends[i] >= t:
                cands.append(key)
        if len(cands) == 1:
            v = votes.setdefault(L["thread"], {})
            v[cands[0]] = v.get(cands[0], 0) + 1
            decided[L["thread"]] = decided.get(L["thread"], 0) + 1
    return {t: max(v, key=v.get) for t, v in votes.items()}


class GapIndex:
    """Per thread, built on first use: the events that can explain a gap (not containers, not
    step markers), sorted by start, with the longest duration, so that a gap's overlaps are found
    by bisection."""

    def __init__(self, host_threads):
        self.host_threads = host_threads
        self.built: dict = {}

    def get(self, key, default):
        if key not in self.built:
            evs = []
            append = evs.append
            known = _CONTAINER
            longest = 0
            for h in self.host_threads.get(key, ()):  # a hot loop: every host event once
                name = h["name"]
                c = known.get(name)
                if c is None:
                    c = is_container(name)
                if c or "step_num" in h["args"]:
                    continue
                hs, d = h["start"], h["dur"]
                if d > longest:
                    longest = d
                append((hs, hs + d, name))
            evs.sort()
            self.built[key] = ([e[0] for e in evs], evs, longest) if evs else None
        return self.built[key] or default


def analyse(trace) -> tuple[Analysis, dict]:
    gpu, other_gpu_lines, host_threads, by_corr = collect(trace)
    refusals, notes = [], []
    if len(trace.events) == EXPORTER_EVENT_CAP:
        notes.append(f"the trace holds exactly {EXPORTER_EVENT_CAP:,} complete events, the trace "
                     "exporter's cap: events after its last time are missing (the xplane has "
                     "them), so the last step is cut")
    if other_gpu_lines:
        notes.append(f"{other_gpu_lines} events on GPU lines that are not streams (derived lines "
                     "such as Steps or TensorFlow Ops) were left out")
    joins = join_events(gpu, by_corr, host_threads)
    ends = [max(map(operator.attrgetter("end"), gpu))] if gpu else []
    ends += [max(h["start"] + h["dur"] for h in hs) for hs in host_threads.values() if hs]
    trace_end = max(ends, default=0)
    scan = host_scan(host_threads)  # one pass over the host events for the step framing
    tree = CallTree(host_threads) if scan["tracer"] else None  # the Python calls' nesting
    steps, source, step_notes = find_steps(gpu, host_threads, trace_end, scan, tree)
    notes += step_notes
    program_call_starts(gpu, steps)
    assign_steps(gpu, steps)
    analysed = mark_partial(gpu, steps)
    if not gpu:
        refusals.append("no GPU events: this trace has no /device:GPU stream events (a CPU "
                        "capture?); nothing about GPU time can be computed")
    if gpu and not by_corr:
        refusals.append("no launch events: no host event carries a correlation_id, so queue "
                        "delay, TKLQT and the host/device classification of gaps are unknown")
    graph = sum(1 for e in gpu if e.graph)
    if graph:
        refusals.append(f"{graph} GPU events were launched by graphs (command buffers): they "
                        "have no launch call of their own, so launch delay and TKLQT exclude "
                        "them; gaps before them are judged by their graph's one launch call")
    if gpu and not analysed:
        refusals.append("only partial steps: the capture holds no complete step, so per-step "
                        "figures describe a fragment")
        analysed = [s for s in steps]
    a = Analysis(gpu, steps, source, analysed, refusals=refusals, notes=notes)
    a.joins = joins
    a.exec_of = launch_threads_to_exec(gpu, host_threads)
    a.host_threads = host_threads
    a.python_tracer_on = scan["tracer"]
    a.call_tree = tree
    a.gap_events = GapIndex(host_threads)
    a.thread_names = trace.threads
    return a, joins


def per_step_rows(a: Analysis) -> tuple[list, list, list, dict]:
    """steps.csv rows, streams.csv rows, gaps.csv rows, and the verdict's inputs."""
    analysed = {s.number: s for s in a.analysed}
    by_gpu_step: dict[tuple, list] = {}
    for ev in a.events:
        if ev.step in analysed:
            by_gpu_step.setdefault((ev.device, ev.step), []).append(ev)
    devices = sorted({ev.device for ev in a.events})
    # critical stream per GPU: the stream with the most kernel-busy time over the analysed steps
    busy_by_stream: dict[tuple, int] = {}
    for (d, _), evs in by_gpu_step.items():
        per_stream: dict[int, list] = {}
        for ev in evs:
            per_stream.setdefault(ev.stream, []).append((ev.start, ev.end))
        for s, iv in per_stream.items():
            busy_by_stream[(d, s)] = busy_by_stream.get((d, s), 0) + union_ps(iv)
    critical = {}
    for d in devices:
        cands = {s: b for (dd, s), b in busy_by_stream.items() if dd == d}
        if cands:
            critical[d] = max(sorted(cands), key=lambda s: cands[s])
    step_rows, gap_rows = [], []
    stream_acc: dict[tuple, dict] = {}
    verdict_in = []
    for num, st in sorted(analysed.items()):
        ends = {}
        exec_starts = [x.start for x in st.executions]
        for d in devices:
            evs = by_gpu_step.get((d, num), [])
            if not evs:
                continue
            start = st.start
            crit = critical.get(d)
            # one pass over the step's events on this GPU (the hot loop of a large trace)
            end = evs[0].end
            kernel_sum = tklqt = n_launched = 0
            busy_iv, coll_iv, crit_evs = [], [], []
            per_stream: dict[int, list] = {}
            for e in evs:
                es, ee = e.start, e.end
                if ee > end:
                    end = ee
                if ee > start:
                    busy_iv.append((es if es > start else start, ee))
                kernel_sum += e.dur
                if e.join == "launch" and e.launch:
                    tklqt += es - e.launch["start"]
                    n_launched += 1
                if e.category == "collective":
                    coll_iv.append((es, ee))
                lst = per_stream.get(e.stream)
                if lst is None:
                    lst = per_stream[e.stream] = []
                lst.append(e)
            ends[d] = end
            dur = end - start
            busy = union_ps(busy_iv)
            crit_evs = sorted(per_stream.get(crit, ()), key=lambda e: e.start)
            host_late, device_wait, unknown, gaps = classify_gaps(a, crit_evs, start, d, num)
            gap_rows.extend(gaps)
            coll = union_ps(coll_iv)
            n_exec, programs, between_programs = step_programs(evs, exec_starts, crit)
            step_rows.append({
                "step": num, "device": d, "source": st.source, "start_ps": start, "end_ps": end,
                "dur_ps": dur, "kernels": len(evs), "busy_ps": busy, "idle_ps": dur - busy,
                "critical_stream": crit, "tklqt_ps": tklqt if n_launched else None,
                "akd_ps": kernel_sum / len(evs), "il_ps": dur, "il_idle_ps": dur - kernel_sum,
                "union_idle_ps": dur - busy, "host_late_ps": host_late,
                "device_wait_ps": device_wait, "unknown_gap_ps": unknown,
                "collective_ps": coll, "launched": n_launched, "executions": n_exec,
                "programs": programs, "between_programs_ps": between_programs})
            for s, sevs in per_stream.items():
                b = stream_budget(sevs, start, end)
                acc = stream_acc.setdefault((d, s), {"span": 0, "compute": 0, "collective": 0,
                                                     "memcpy": 0, "idle": 0, "events": 0})
                acc["span"] += end - start
                for k in ("compute", "collective", "memcpy", "idle"):
                    acc[k] += b[k]
                acc["events"] += len(sevs)
        if ends:
            verdict_in.append((num, ends))
    between_steps(a, step_rows)
    groups = gpu_groups(a, by_gpu_step)
    # the verdict is weighed on every GPU that runs the step's programs (pipeline stages
    # included: the step ends when its last stage does); work is compared, and a straggler
    # named, only inside one group: the program group with the most GPU time among those of
    # two GPUs or more (none: every GPU runs programs of its own, so nothing is compared)
    runs = [d for g in groups if g["kind"] == "programs" for d in g["devices"]]
    main = sorted(runs) or (groups[0]["devices"] if groups else [])
    compared = next((g["devices"] for g in groups if len(g["devices"]) > 1 and
                     (g["kind"] == "programs" or not runs)), [])
    if len(groups) == 1:
        compared = groups[0]["devices"]
    return step_rows, stream_acc, gap_rows, {"critical": critical, "ends": verdict_in,
                                             "groups": groups, "main_group": main,
                                             "compared": compared}


def step_programs(evs, exec_starts, crit=None) -> tuple:
    """One GPU's events of one step: how many of the step's program executions ran kernels on
    it, its programs in order of their first kernel with their executions (`module xN`), and
    the critical stream's idle between the kernels of two different executions while the host
    was still launching the next one (the dispatch between programs: the host_late gaps that
    lie between two executions). An event belongs to the execution whose host events began
    last before its launch (its own start where it joined no launch)."""
    if len(exec_starts) <= 1:
        # no execution, or one (the common case of one program per step): no dispatch between
        # programs; the programs in order of their first kernel, in one pass
        first: dict[str, int] = {}
        for e in evs:
            m = e.args.get("hlo_module")
            if m and (m not in first or e.start < first[m]):
                first[m] = e.start
        mods = sorted(first, key=lambda m: (first[m], m))
        if not exec_starts:
            return None, "; ".join(mods), None
        return (1 if mods else 0), "; ".join(f"{m} x1" for m in mods), 0
    idx_of = {}
    for e in evs:
        L = e.launch
        t = L["start"] if L is not None and e.join in ("launch", "graph_launch") else e.start
        idx_of[e] = max(0, bisect.bisect_right(exec_starts, t) - 1)
    order = sorted(evs, key=operator.attrgetter("start"))
    runs: dict[str, set] = {}
    for e in order:
        m = e.args.get("hlo_module")
        if m:
            runs.setdefault(m, set()).add(idx_of[e])
    # on the critical stream, as classify_gaps cuts it: a host_late gap (the next kernel's launch
    # call had not ended when the stream went idle) between two executions' kernels; so the
    # dispatch is a part of host_late_us, never more (a copy on another stream inside the gap
    # does not cut it; a gap before a kernel queued in time waits on the device)
    between = 0
    cur_end, cur_idx = None, None
    for e in order:
        if crit is not None and e.stream != crit:
            continue
        i = idx_of[e]
        if cur_end is not None and e.start > cur_end and i != cur_idx:
            between += sum(b - a for a, b, cause in gap_parts(cur_end, e)
                           if cause == "host_late")
        if cur_end is None or e.end > cur_end:
            cur_end, cur_idx = e.end, i
    executions = len({idx_of[e] for e in evs if e.args.get("hlo_module")})
    programs = "; ".join(f"{m} x{len(ix)}" for m, ix in runs.items())
    return executions, programs, between


def gpu_groups(a: Analysis, by_gpu_step) -> list[dict]:
    """GPUs grouped by the programs they run in the analysed steps (module names of their
    kernels), the group with the most GPU time first. A GPU that runs no program's kernels is
    said for what it holds: argument copies only (memcpys outside a program), memcpys only, or
    kernels without a program label. Work is compared, and a straggler named, only inside a
    group: GPUs that run other programs do other work."""
    per: dict[int, dict] = {}
    for (d, _), evs in by_gpu_step.items():
        g = per.setdefault(d, {"modules": set(), "ps": 0, "events": 0, "copies": 0,
                                "memcpy": 0})
        ps = copies = memcpy = 0
        mods = set()
        for e in evs:  # a hot loop: every analysed event once
            ps += e.dur
            m = e.args.get("hlo_module")
            if m:
                mods.add(m)
            elif e.category != "memcpy":
                continue
            elif rules.is_argument_copy(e.category, e.args, e.graph):
                copies += 1
            else:
                memcpy += 1
        g["modules"] |= mods
        g["ps"] += ps
        g["events"] += len(evs)
        g["copies"] += copies
        g["memcpy"] += memcpy
    groups: dict[tuple, dict] = {}
    for d, g in sorted(per.items()):
        key = tuple(sorted(g["modules"]))
        if key:
            kind = "programs"
        elif g["copies"] == g["events"]:
            kind = "argument copies only"
        elif g["copies"] + g["memcpy"] == g["events"]:
            kind = "memcpys only"
        else:
            kind = "kernels without a program label"
        grp = groups.setdefault((key, kind), {"programs": list(key), "kind": kind,
                                             "devices": [], "gpu_ps": 0, "events": 0,
                                             "copies": 0})
        grp["devices"].append(d)
        for k in ("events", "copies"):
            grp[k] += g[k]
        grp["gpu_ps"] += g["ps"]
    return sorted(groups.values(), key=lambda x: (x["kind"] != "programs", -x["gpu_ps"],
                                                  x["devices"]))


def enclosing_call(tree: CallTree, st: Step) -> str | None:
    """The innermost Python-traced call that encloses every program dispatch of a step (its
    first execution's start to its last one's): the user's function a `jax.jit` around it would
    make one program; None when no traced call encloses them all."""
    if len(st.executions) < 2:
        return None
    h = tree.innermost_enclosing(st.executions[0].start, st.executions[-1].start)
    return h["name"] if h else None


def step_frames(a: Analysis, step_rows, info) -> dict:
    """The one home of the step frames later steps use: per analysed step its start, its end
    and bounding GPU (the latest end among the GPUs that run the step's programs), the next
    step's start (any step of the capture: the period) and the window (start to the later of
    its end and the next start); the median step (the lower median by duration of the complete
    analysed steps, else of all analysed ones: a step that ran) and the straggler margin.
    Step 3 draws the median step and step 6 takes its figures from it."""
    main = set(info.get("main_group") or ())
    order = sorted(a.steps, key=lambda st: st.start)
    nxt = {st.number: order[i + 1].start for i, st in enumerate(order[:-1])}
    partial = {s.number for s in a.analysed if s.partial}
    by: dict[int, list] = {}
    for r in step_rows:
        by.setdefault(r["step"], []).append(r)
    frames = []
    for n, rows in sorted(by.items()):
        mine = [r for r in rows if r["device"] in main] or rows
        end = max(r["end_ps"] for r in mine)
        bound = min(r["device"] for r in mine if r["end_ps"] == end)
        start = min(r["start_ps"] for r in rows)
        ns = nxt.get(n)
        wend = max(end, ns) if ns is not None and ns > start else end
        frames.append({"step": n, "start_us": start / 1e6, "end_us": end / 1e6,
                       "bounding_gpu": bound, "dur_us": (end - start) / 1e6,
                       "next_start_us": None if ns is None else ns / 1e6,
                       "window_us": (wend - start) / 1e6, "partial": n in partial})
    pool = [f for f in frames if not f["partial"]] or frames
    median = None
    why = ""
    if pool:
        ranked = sorted(pool, key=lambda f: (f["dur_us"], f["step"]))
        median = ranked[(len(ranked) - 1) // 2]["step"]
        why = (f"step {median}: the lower-median duration of the {len(ranked)} "
               f"{'complete ' if pool is not frames or not partial else ''}analysed step(s)")
    return {"median_step": median, "why": why, "steps": frames,
            "margin": {"floor_us": STRAGGLER_MIN_LEAD_PS / 1e6,
                       "pct_of_step": 100.0 * STRAGGLER_MIN_LEAD_SHARE},
            "label": "measured"}


def dispatch_summary(a: Analysis, step_rows) -> dict | None:
    """Steps that hold several program executions: executions per step, the GPU idle between
    two executions' kernels (steps.csv), and the Python-traced call that encloses a step's
    dispatches in most steps (the function to jit whole)."""
    rows = [r for r in step_rows if r.get("executions")]
    if not rows or max(r["executions"] for r in rows) < 2:
        return None
    names = []
    tree = getattr(a, "call_tree", None)
    if tree is not None:
        for st in a.analysed:
            name = enclosing_call(tree, st)
            if name:
                names.append(name)
    top = max(sorted(set(names)), key=names.count) if names else None
    return {"executions_per_step": spread([r["executions"] for r in rows], "count", "measured"),
            "between_programs_idle_us": spread([r["between_programs_ps"] for r in rows], "us",
                                               "measured", 1e-6),
            "enclosing_call": top, "enclosing_call_steps": names.count(top) if top else 0,
            "steps": len(a.analysed), "label": "measured"}


def group_sentence(g: dict, steps: int) -> str:
    """What a group of GPUs holds, in words (per analysed step)."""
    gpus = ", ".join(map(str, g["devices"]))
    who = f"GPU {gpus}" if len(g["devices"]) == 1 else f"GPUs {gpus}"
    per = max(steps, 1)
    if g["kind"] == "programs":
        progs = ", ".join(g["programs"][:6]) + (f" and {len(g['programs']) - 6} more"
                                               if len(g["programs"]) > 6 else "")
        verb = "runs" if len(g["devices"]) == 1 else "run"
        return (f"{who} {verb} {progs}: {g['events'] / per / len(g['devices']):,.0f} GPU events "
                f"and {g['gpu_ps'] / 1e6 / per / len(g['devices']):,.1f} us of GPU time per GPU "
                "and step")
    return (f"{who} {'holds' if len(g['devices']) == 1 else 'hold'} {g['kind']}: "
            f"{g['events'] / per / len(g['devices']):,.0f} events, "
            f"{g['gpu_ps'] / 1e6 / per / len(g['devices']):,.1f} us per GPU and step "
            f"({g['copies']} argument copies in all)")


def between_steps(a: Analysis, step_rows) -> None:
    """Per step and GPU: the step period (this step's start to the next step's, any step the
    capture holds), the GPU idle after its last kernel until the next step starts, the largest
    host events inside that idle (all host threads, containers left out) and its cause class:
    input pipeline (input-preparing names), host work between steps, or not recorded."""
    order = sorted(a.steps, key=lambda st: st.start)
    nxt = {st.number: order[i + 1].start for i, st in enumerate(order[:-1])}
    for r in step_rows:
        n = nxt.get(r["step"])
        r["period_ps"] = r["idle_between_ps"] = None
        r["between_events"], r["between_cause"] = "", ""
        if n is None or n <= r["start_ps"]:
            continue
        r["period_ps"] = n - r["start_ps"]
        r["idle_between_ps"] = max(0, n - r["end_ps"])
        if not r["idle_between_ps"]:
            continue
        events, covered = host_events_in(a, r["end_ps"], n)
        r["between_events"] = rules.host_events_cell(events[:BETWEEN_EVENTS_NAMED])
        r["between_cause"] = between_cause(events, covered, r["idle_between_ps"])


def host_events_in(a: Analysis, start: int, end: int, threads=None,
                   traced: list | None = None) -> tuple[list, int]:
    """The host events of `threads` (default every thread; containers and step markers left
    out) overlapping [start, end), by name, the largest first; and the time any of them covers.
    A name's time is the union of its calls' overlaps, so a call nested in another of the same
    name, or the same name on several threads at once, is counted once: no name exceeds the
    window. `traced`, when given, receives the time Python-traced calls cover (their union)."""
    per: dict[str, list] = {}
    spans = []
    for thread in a.host_threads if threads is None else threads:
        starts, evs, longest = a.gap_events.get(thread, ([], [], 0))
        i = bisect.bisect_left(starts, start - longest)
        while i < len(evs) and evs[i][0] < end:
            hs, he, name = evs[i]
            s, e = max(hs, start), min(he, end)
            if e > s:
                per.setdefault(name, []).append((s, e))
                spans.append((s, e))
            i += 1
    overlap = {name: iv[0][1] - iv[0][0] if len(iv) == 1 else union_ps(iv)
               for name, iv in per.items()}
    if traced is not None:
        traced.append(union_ps([x for name, iv in per.items()
                                if name.startswith(rules.PYTHON_TRACER_PREFIX) for x in iv]))
    return sorted(overlap.items(), key=lambda kv: (-kv[1], kv[0])), union_ps(spans)


def between_cause(events, covered: int, idle: int) -> str:
    if not events:
        return "not recorded"
    if covered < BETWEEN_RECORDED_SHARE * idle:
        return "mostly not recorded"  # events there, but they cover under 10% of the idle
    if any(INPUT_PIPELINE_RE.search(name) for name, _ in events):
        return "input pipeline"
    return "host work between steps"


def gap_parts(prev_end: int, ev) -> list:
    """A critical-stream gap before `ev`, from `prev_end`, cut by cause: host_late while the
    next kernel's launch call had not ended (a graph's kernels were all queued by its one
    launch), device_wait once it had (a queued kernel that waits: a dependency on another
    stream or GPU, a pipeline stage's input), unknown where no launch joined. A host_late gap
    whose kernel starts more than QUEUED_START_PS after its launch ended is cut there: the rest
    is the device's. Returns [(start, end, cause)]."""
    if ev.join in ("launch", "graph_launch") and ev.launch:
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
                if e - s >= MIN_GAP_PS:
                    thread, events, traced = gap_host_events(a, ev, s, e)
                    rows.append({"device": device, "stream": ev.stream, "step": step,
                                 "start_ps": s, "end_ps": e, "dur_ps": e - s,
                                 "kernel_before": prev_name, "kernel_after": ev.name,
                                 "cause": cause, "launch_thread": thread, "host_events": events,
                                 "python_traced_ps": traced})
        if ev.end > prev_end:
            prev_end, prev_name = ev.end, ev.name
    return totals["host_late"], totals["device_wait"], totals["unknown"], rows


def gap_host_events(a: Analysis, ev, start, end) -> tuple[str, str, int | None]:
    """The thread that launched the event after a gap (for a graph kernel, its graph's launch
    call), the host events that overlap the gap on it, and the time Python-traced calls cover in
    the gap on it (their union: nested calls counted once)."""
    if ev.join not in ("launch", "graph_launch") or not ev.launch:
        return "", "", None
    launch_thread = ev.launch["thread"]
    thread = a.exec_of.get(launch_thread)
    if thread is None:
        own = a.host_threads.get(launch_thread, [])
        if any(not RUNTIME_API_RE.search(h["name"]) for h in own):
            thread = launch_thread  # launches sit on the thread that did the work
        else:
            return a.thread_names.get(launch_thread, "") + " (unknown: no execution thread " \
                "holds its launches)", "", None
    traced: list = []
    top = host_events_in(a, start, end, (thread,), traced)[0][:8]
    return a.thread_names.get(thread, str(thread)), rules.host_events_cell(top), traced[0]


def verdict(a: Analysis, step_rows, info) -> tuple[str, list, dict]:
    """Apply the named thresholds on the GPU that finishes each step last."""
    if not step_rows:
        return "not computable", ["no analysed step has GPU events"], {}
    by = {(r["step"], r["device"]): r for r in step_rows}
    bound = []
    main = set(info.get("main_group") or ())
    for num, ends in info["ends"]:
        mine = {d: t for d, t in ends.items() if d in main} or ends
        last = max(sorted(mine), key=lambda d: mine[d])
        bound.append(by[(num, last)])
    host = [r["host_late_ps"] / r["dur_ps"] for r in bound if r["dur_ps"]]
    busy = [(r["dur_ps"] - r["host_late_ps"] - r["unknown_gap_ps"]) / r["dur_ps"]
            for r in bound if r["dur_ps"]]
    coll = [r["collective_ps"] / r["dur_ps"] for r in bound if r["dur_ps"]]
    unknown = [r["unknown_gap_ps"] / r["dur_ps"] for r in bound if r["dur_ps"]]
    main = main or {r["device"] for r in step_rows}
    gpus = len(main)
    h, b, c, u = (statistics.median(x) for x in (host, busy, coll, unknown))
    # GPUs that wait for a straggler spend it inside collective kernels: take the GPU that
    # spends the most step time in collectives, not only the bounding one
    coll_all = [r["collective_ps"] / r["dur_ps"] for r in step_rows
                if r["dur_ps"] and r["device"] in main]
    c_max = max(coll_all) if coll_all else 0.0
    figures = {"host_share": host, "busy_share": busy, "collective_share": coll,
               "unknown_share": unknown}
    rule = (f"on the GPU that finishes each step last (among those that run the step's "
            f"programs), critical stream: host-late share "
            f"{h:.1%}, busy-or-queued share {b:.1%}, collective share {c:.1%}, unknown gap "
            f"share {u:.1%} (medians over {len(bound)} steps)")
    fired = []
    if gpus > 1 and max(c, c_max) >= COLLECTIVE_BOUND_SHARE:
        fired.append(f"collective share up to {max(c, c_max):.1%} of a step on one GPU >= "
                     f"COLLECTIVE_BOUND_SHARE {COLLECTIVE_BOUND_SHARE:.0%} with {gpus} GPUs")
        name = "collective/straggler-bound"
    elif h >= LAUNCH_BOUND_HOST_SHARE:
        fired.append(f"host-late share {h:.1%} >= LAUNCH_BOUND_HOST_SHARE "
                     f"{LAUNCH_BOUND_HOST_SHARE:.0%}")
        name = "launch-bound"
    elif b >= DEVICE_BOUND_BUSY_SHARE and h < HOST_SHARE_NEGLIGIBLE:
        fired.append(f"busy-or-queued share {b:.1%} >= DEVICE_BOUND_BUSY_SHARE "
                     f"{DEVICE_BOUND_BUSY_SHARE:.0%} and host-late share {h:.1%} < "
                     f"HOST_SHARE_NEGLIGIBLE {HOST_SHARE_NEGLIGIBLE:.0%}")
        name = "device-bound"
    else:
        fired.append("no threshold fired alone")
        name = "mixed"
    if u > HOST_SHARE_NEGLIGIBLE:
        fired.append(f"caution: {u:.1%} of the bounding stream's step is gaps of unknown cause "
                     "(graph kernels or unjoined events)")
    lines = [rule] + fired
    between = [r for r in bound if r.get("period_ps")]
    if between:
        shares = [r["idle_between_ps"] / r["period_ps"] for r in between]
        figures["between_share"] = shares
        share = statistics.median(shares)
        causes = [r["between_cause"] for r in between if r["idle_between_ps"]]
        cause = max(sorted(set(causes)), key=causes.count) if causes else "none (no idle)"
        figures["between_cause"] = cause
        words = cause_words(cause, getattr(a, "python_tracer_on", False))
        lines.append(f"between steps, on the same GPU: {share:.1%} of the step period (start to "
                     f"the next step's start) is GPU idle after the step's last kernel (median "
                     f"over {len(between)} steps); host in that idle: {words}")
        if share >= BETWEEN_STEPS_SHARE:
            figures["qualifier"] = (f"{name} within the step; {share:.0%} of the step period is "
                                    f"between steps, {words} "
                                    f"(cause: {cause})")
            lines.append(f"between-steps share {share:.1%} >= BETWEEN_STEPS_SHARE "
                         f"{BETWEEN_STEPS_SHARE:.0%}: the verdict holds within the step only")
    return name, lines, figures


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
    "host work between steps": "with the host busy in other work (the events named in "
                               "steps.csv between_host_events)",
}


# ---------------------------------------------------------------- writers

ROW_COLUMNS = ["device", "stream", "stream_name", "kernel", "category", "start_us", "dur_us",
               "end_us", "correlation_id", "join", "launch_name", "launch_thread",
               "launch_start_us", "launch_dur_us", "queue_us", "launch_to_start_us", "hlo_op",
               "hlo_module", "graph", "step"]


def write_rows(path, a: Analysis) -> int:
    """One line per GPU event, streamed to the file. This is the hot loop of a large trace:
    strings repeat (kernel, stream, op names), so each is quoted once and looked up after."""
    names = a.thread_names
    quoted: dict[str, str] = {}

    def q(v):
        r = quoted.get(v)
        if r is None:
            r = quoted[v] = rules.quote(v)
        return r
    streams = {k: q(v) for k, v in a.stream_names.items()}
    threads = {k: q(v) for k, v in names.items()}
    n = 0
    events = sorted(a.events, key=operator.attrgetter("device", "stream", "start"))
    # the columns that repeat from event to event, each combination formatted once
    heads: dict[tuple, str] = {}
    tails: dict[tuple, str] = {}
    with open(path, "w", newline="", encoding="utf-8") as fh:
        fh.write(",".join(ROW_COLUMNS) + "\n")
        buf = []
        append = buf.append
        for ev in events:
            join = ev.join
            L = ev.launch
            start = ev.start
            if L is not None and join != "ambiguous":
                ls, ld = L["start"], L["dur"]
                lname = quoted.get(L["name"]) or q(L["name"])
                if join == "launch":
                    launch = (f"{lname},{threads.get(L['thread'], '')},{ls / 1e6:.3f},"
                              f"{ld / 1e6:.3f},{(start - ls - ld) / 1e6:.3f},"
                              f"{(start - ls) / 1e6:.3f}")
                else:
                    launch = (f"{lname},{threads.get(L['thread'], '')},{ls / 1e6:.3f},"
                              f"{ld / 1e6:.3f},,")
            else:
                launch = ",,,,,"
            args = ev.args
            key = (ev.device, ev.stream, ev.name, ev.category)
            head = heads.get(key)
            if head is None:
                head = heads[key] = (
                    f"{ev.device},{ev.stream},{streams.get((ev.device, ev.stream), '')},"
                    f"{q(ev.name)},{ev.category},")
            key = (args.get("hlo_op", ""), args.get("hlo_module", ""), ev.graph, ev.step)
            tail = tails.get(key)
            if tail is None:
                hlo_op, hlo_module, graph, step = key
                tail = tails[key] = (f"{q(hlo_op)},{q(hlo_module)},{1 if graph else 0},"
                                     f"{'' if step is None else step}\n")
            cid = args.get("correlation_id", "")
            if type(cid) is not int:
                cid = q(str(cid))  # a malformed id (text with commas, quotes) stays one field
            append(f"{head}{start / 1e6:.3f},{ev.dur / 1e6:.3f},{ev.end / 1e6:.3f},{cid},"
                   f"{join},{launch},{tail}")
            n += 1
            if n % 10_000 == 0:
                fh.write("".join(buf))
                buf.clear()
        fh.write("".join(buf))
    return n



RESULT_FILE = "skip_stats.json"
JOIN_KEYS = ("launch", "graph_launch", "other", "none", "ambiguous", "no_correlation_id")
NEEDS_NEW_CAPTURE = ("how the step time moves with batch size (the SKIP paper's CPU-bound vs "
                     "GPU-bound test needs a batch-size sweep, not one capture)")


def spread(values, unit: str, label: str, scale: float = 1.0) -> dict | None:
    """A figure across steps and GPUs: median, min, max (None where nothing was measured)."""
    values = [v * scale for v in values if v is not None]
    if not values:
        return None
    return {"value": statistics.median(values), "min": min(values), "max": max(values),
            "unit": unit, "label": label}


def build_result(a: Analysis, joins, name, rule, figures, step_rows, info) -> dict:
    """Everything summary.txt says, as data (fields: references/scratch-layout.md)."""
    analysed = {s.number for s in a.analysed}
    total = len(a.events)
    result = {
        "step": "skip_stats", "status": "done" if a.events else "not computable",
        "verdict": name, "rule": rule,
        "steps": {"source": a.step_source, "analysed": [s.number for s in a.analysed],
                  "skipped_partial": [s.number for s in a.steps
                                      if s.partial and s.number not in analysed],
                  "partial_analysed": [s.number for s in a.analysed if s.partial]},
        "joins": {k: joins.get(k, 0) for k in JOIN_KEYS + ("shared_ids_without_graph_launch",)},
        "gpu_events": total,
        "join_rate_pct_of_gpu_events": 100.0 * joins.get("launch", 0) / total if total else 0.0,
        "figures": {}, "host_device_split": None, "straggler": None, "gpu_groups": [],
        "dispatch": None, "frames": None,
        "verdict_qualifier": None, "between_steps": None,
        "notes": list(a.notes), "refusals": list(a.refusals),
        "needs_new_capture": [NEEDS_NEW_CAPTURE],
    }
    if not step_rows:
        return result
    us_ = 1e-6
    fig = result["figures"]
    for key, col, unit, label in (
            ("step_duration_us", "dur_ps", "us", "measured"),
            ("kernels_per_step_per_gpu", "kernels", "count", "measured"),
            ("busy_us", "busy_ps", "us", "measured"),
            ("union_idle_us", "union_idle_ps", "us", "measured"),
            ("il_idle_us", "il_idle_ps", "us", "measured"),
            ("tklqt_us", "tklqt_ps", "us", "measured"),
            ("akd_us", "akd_ps", "us", "measured"),
            ("il_us", "il_ps", "us", "measured"),
            ("executions_per_step", "executions", "count", "measured"),
            ("between_programs_idle_us", "between_programs_ps", "us", "measured")):
        fig[key] = spread([r[col] for r in step_rows], unit, label,
                          us_ if unit == "us" else 1.0)
    for key in ("host_share", "busy_share", "collective_share"):
        fig[key + "_pct_of_step"] = spread(figures.get(key, []), "pct", "inferred", 100.0)
    with_period = [r for r in step_rows if r.get("period_ps")]
    fig["period_us"] = spread([r["period_ps"] for r in with_period], "us", "measured", us_)
    fig["idle_between_us"] = spread([r["idle_between_ps"] for r in with_period], "us",
                                    "measured", us_)
    fig["idle_between_pct_of_period"] = spread(
        [r["idle_between_ps"] / r["period_ps"] for r in with_period], "pct", "measured", 100.0)
    # the same ratio of measured times as idle_between_pct_of_period, on the bounding GPU only:
    # one label for one kind of value
    fig["between_share_pct_of_period"] = spread(figures.get("between_share", []), "pct",
                                                "measured", 100.0)
    result["verdict_qualifier"] = figures.get("qualifier")
    if with_period:
        result["between_steps"] = {"cause": figures.get("between_cause"), "label": "inferred",
                                   "threshold_pct_of_period": 100.0 * BETWEEN_STEPS_SHARE}
    host = sum(r["host_late_ps"] for r in step_rows)
    span = sum(r["dur_ps"] for r in step_rows)
    result["host_device_split"] = {"host_pct_of_step": 100 * host / span,
                                   "device_pct_of_step": 100 - 100 * host / span,
                                   "label": "inferred"}
    result["dispatch"] = dispatch_summary(a, step_rows)
    result["frames"] = step_frames(a, step_rows, info)
    groups = info.get("groups") or []
    n_steps = len({r["step"] for r in step_rows})
    result["gpu_groups"] = [
        {"devices": g["devices"], "kind": g["kind"], "programs": g["programs"],
         "events_per_gpu_and_step": g["events"] / max(n_steps, 1) / len(g["devices"]),
         "gpu_us_per_gpu_and_step": {"value": g["gpu_ps"] * us_ / max(n_steps, 1)
                                     / len(g["devices"]), "unit": "us", "label": "measured"},
         "argument_copies": g["copies"], "sentence": group_sentence(g, n_steps),
         "compared": g["devices"] == info.get("compared"),
         "runs_step": g["kind"] == "programs" or g["devices"] == info.get("main_group")}
        for g in groups]
    gpus = sorted(info.get("compared") or ())
    if len(groups) > 1:
        result["notes"].append(
            "GPUs do different work: " + "; ".join(g["sentence"] for g in result["gpu_groups"])
            + (f". Work is compared and a straggler named only among GPUs "
               f"{', '.join(map(str, gpus))}, the group of GPUs that run the same programs with "
               "the most GPU time" if gpus else
               ". No two GPUs run the same programs (pipeline stages, or one GPU with work): "
               "work is not compared and no straggler is named")
            + "; the verdict is weighed on the GPU that ends each step last among GPU(s) "
            + ", ".join(map(str, info.get("main_group") or [])) + ", which run the step's "
            "programs")
    if len(gpus) > 1:
        sub = dict(info, ends=[(n, {d: t for d, t in e.items() if d in gpus})
                               for n, e in info["ends"]])
        result["straggler"] = straggler([r for r in step_rows if r["device"] in gpus], sub,
                                        us_)
        if str(a.step_source).startswith("the whole capture"):
            # one window that is not a step: which GPU ends it last says nothing about steps
            result["straggler"]["is_straggler"] = False
    return result


def straggler(step_rows, info, us_) -> dict:
    """Which GPU ends each step last, by how much, and whether that is a straggler: one GPU last
    in more than STRAGGLER_MAJORITY of the steps, ahead of the next GPU by more than the margin
    in the median of those steps; a step whose two last GPUs end within the margin is a tie."""
    dur = {(r["step"], r["device"]): r["dur_ps"] for r in step_rows}
    spreads, lasts, leads = [], [], {}
    for num, ends in info["ends"]:
        spreads.append(max(ends.values()) - min(ends.values()))
        order = sorted(ends, key=lambda d: (-ends[d], d))
        if len(order) < 2:
            continue
        lead = ends[order[0]] - ends[order[1]]
        margin = max(STRAGGLER_MIN_LEAD_PS, STRAGGLER_MIN_LEAD_SHARE
                     * dur.get((num, order[0]), 0))
        if lead <= margin:
            lasts.append(None)  # a tie
            continue
        lasts.append(order[0])
        leads.setdefault(order[0], []).append(lead)
    counts = {d: lasts.count(d) for d in sorted({d for d in lasts if d is not None})}
    ties = lasts.count(None)
    top = max(sorted(counts), key=lambda d: counts[d]) if counts else None
    is_straggler = top is not None and counts[top] > STRAGGLER_MAJORITY * len(lasts)
    coll: dict = {}
    for r in step_rows:
        coll.setdefault(r["device"], []).append(r["collective_ps"])
    med = {d: statistics.median(v) for d, v in coll.items()}
    least = min(sorted(med), key=lambda d: med[d])
    return {
        "gpu": top, "is_straggler": is_straggler,
        "steps_last": counts.get(top, 0), "steps": len(lasts), "ties": ties,
        "last_counts": {str(d): c for d, c in sorted(counts.items(), key=lambda kv: -kv[1])},
        "lead_us": spread(leads.get(top, []), "us", "measured", us_),
        "margin_us": {"value": STRAGGLER_MIN_LEAD_PS * us_, "unit": "us", "label": "inferred",
                      "pct_of_step": 100.0 * STRAGGLER_MIN_LEAD_SHARE},
        "end_spread_us": spread(spreads, "us", "measured", us_),
        "least_collective_gpu": least if any(med.values()) else None,
        "least_collective_us": med[least] * us_,
        "most_collective_us": max(med.values()) * us_}


def _rng(f: dict | None, fmt) -> str:
    if f is None:
        return "n/a"
    return f"{fmt(f['value'])} ({fmt(f['min'])}-{fmt(f['max'])})"


def render_summary(r: dict) -> list[str]:
    """summary.txt: a rendering of the result, nothing computed here."""
    out = [f"verdict: {r.get('verdict_qualifier') or r['verdict']}"]
    out += [f"rule: {x}" for x in r["rule"]]
    st = r["steps"]
    out.append(f"steps: from {st['source']}; {len(st['analysed'])} analysed "
               f"({', '.join(map(str, st['analysed'])) or 'none'})"
               + (f"; skipped as partial: {', '.join(map(str, st['skipped_partial']))}"
                  if st["skipped_partial"] else "")
               + (f"; partial but analysed for want of a complete one: "
                  f"{', '.join(map(str, st['partial_analysed']))}"
                  if st["partial_analysed"] else ""))
    f0 = r["figures"]
    if (f0.get("executions_per_step") or {}).get("max", 0) > 1:
        bp = f0.get("between_programs_idle_us")
        out.append(f"  program executions per step and GPU: "
                   f"{_rng(f0['executions_per_step'], lambda v: f'{v:.0f}')}; the critical stream "
                   f"waiting on the host between two executions' kernels: "
                   f"{_rng(bp, lambda v: f'{v:,.1f} us')} per step "
                   "(steps.csv programs, executions, between_programs_idle_us)")
        dp = r.get("dispatch") or {}
        if dp.get("enclosing_call"):
            out.append(f"  the Python call that encloses a step's dispatches: "
                       f"{dp['enclosing_call']} (in {dp['enclosing_call_steps']} of "
                       f"{dp['steps']} steps)")
    for g in r.get("gpu_groups") or []:
        if len(r["gpu_groups"]) > 1:
            out.append(f"  GPU group{' (compared)' if g['compared'] else ''}: {g['sentence']}")
    j = r["joins"]
    out.append("joins: " + ", ".join(f"{k} {j[k]}" for k in JOIN_KEYS)
               + f" (of {r['gpu_events']} GPU events; join rate to a launch call "
               f"{r['join_rate_pct_of_gpu_events']:.1f}%)")
    if j["other"]:
        out.append(f"note: {j['other']} GPU events carry a correlation id that belongs to a "
                   "host event that is not a launch (e.g. a stream wait): they are not joined "
                   "to a launch")
    if j["shared_ids_without_graph_launch"]:
        out.append(f"note: {j['shared_ids_without_graph_launch']} GPU events share a "
                   "correlation id with another on the same GPU without a graph launch")
    f = r["figures"]
    if f:
        f_us = lambda v: f"{v:,.1f} us"  # noqa: E731
        f_pct = lambda v: f"{v:.1f}%"  # noqa: E731
        out.append("figures: median (min-max) across analysed steps and GPUs")
        out.append(f"  step duration: {_rng(f['step_duration_us'], f_us)}")
        out.append("  kernels per step per GPU: "
                   f"{_rng(f['kernels_per_step_per_gpu'], lambda v: f'{v:.0f}')}")
        out.append(f"  busy (union of all streams): {_rng(f['busy_us'], f_us)}")
        out.append(f"  idle from the union (IL - union busy): {_rng(f['union_idle_us'], f_us)}")
        out.append("  idle as the SKIP paper computes it (IL - sum of kernel time; double-counts "
                   f"overlapping streams): {_rng(f['il_idle_us'], f_us)}")
        out.append(f"  TKLQT (sum of kernel start - launch start): {_rng(f['tklqt_us'], f_us)}")
        out.append(f"  AKD (mean kernel duration): {_rng(f['akd_us'], f_us)}")
        out.append("  IL (first host op of the step to its last kernel's end): "
                   f"{_rng(f['il_us'], f_us)}")
        for k, label in (("host_share_pct_of_step", "host-late share of the step (bounding GPU)"),
                         ("busy_share_pct_of_step", "busy-or-queued share (bounding GPU)"),
                         ("collective_share_pct_of_step", "collective share (bounding GPU)")):
            out.append(f"  {label}: {_rng(f[k], f_pct)}")
        if f.get("period_us"):
            out.append(f"  step period (start to the next step's start, every GPU): "
                       f"{_rng(f['period_us'], f_us)}")
            out.append(f"  GPU idle between steps (each GPU's last kernel to the next step's "
                       f"start, every GPU): "
                       f"{_rng(f['idle_between_us'], f_us)}, "
                       f"{_rng(f['idle_between_pct_of_period'], f_pct)} of the period; cause: "
                       f"{(r.get('between_steps') or {}).get('cause')} (steps.csv "
                       "between_host_events)")
        hd = r["host_device_split"]
        out.append(f"  host/device split on the critical streams: host "
                   f"{hd['host_pct_of_step']:.2f}%, device {hd['device_pct_of_step']:.2f}% "
                   "of step time")
    sg = r["straggler"]
    if sg:
        dist = ", ".join([f"GPU {d} in {c}" for d, c in sg["last_counts"].items()]
                         + ([f"a tie in {sg['ties']}"] if sg["ties"] else []))
        spread_txt = _rng(sg["end_spread_us"], lambda v: f"{v:,.1f} us")
        margin = (f"{sg['margin_us']['value']:,.1f} us or "
                  f"{sg['margin_us']['pct_of_step']:.1f}% of the step")
        if str(r["steps"]["source"]).startswith("the whole capture"):
            out.append(f"no straggler: the capture has no steps (one whole-capture window, "
                       f"last: {dist})")
        elif sg["is_straggler"]:
            out.append(f"straggler: GPU {sg['gpu']} finishes last in {sg['steps_last']} of "
                       f"{sg['steps']} steps, ahead of the next GPU by "
                       f"{_rng(sg['lead_us'], lambda v: f'{v:,.1f} us')} (margin {margin}); "
                       f"last per step: {dist}; spread of step end times {spread_txt}")
        else:
            out.append(f"no straggler: the last GPU changes from step to step (last: {dist} "
                       f"of {sg['steps']} steps; a lead within {margin} is a tie); spread of "
                       f"step end times {spread_txt}")
        if sg["least_collective_gpu"] is not None:
            out.append(f"  collective time per step: GPU {sg['least_collective_gpu']} has the "
                       f"least ({sg['least_collective_us']:,.1f} us, others up to "
                       f"{sg['most_collective_us']:,.1f} us): collective kernels include "
                       "waiting for peers, so the GPU that waits least is the one the others "
                       "wait for")
    pt = r.get("python_tracer") or {}
    if pt.get("calls"):
        out.append(f"python tracer: on; {pt['calls']:,} traced calls of {pt['names']:,} names on "
                   f"{pt['threads']} host thread(s), {pt['self_us']['value']:,.1f} us of their "
                   "own time (python_lines.csv: host time by Python line, largest first; "
                   "upper bounds, the tracer slows what it traces; a blocking call's wait is "
                   "its own time; the profiler's start and stop calls left out)")
    else:
        out.append("python tracer: no traced call (it was off, or traced nothing): host time "
                   "by Python line is not in this capture")
    out += [f"note: {n}" for n in r["notes"]]
    out += [f"cannot compute: {x}" for x in r["refusals"]]
    out += [f"needs a new capture: {x}" for x in r["needs_new_capture"]]
    return [rules.printable(line) for line in out]  # a newline in a name stays on its line


def run(trace, out: Path) -> tuple[dict, list]:
    """Step 1 on a trace: a capture_inputs.Capture (its trace read once per process), a
    trace_reader.Trace, or a path (loaded here and freed before the tables are written).
    Writes the tables, skip_stats.json and summary.txt in `out`, each file replaced whole (a
    temporary folder first); returns the result and the (file, rows) written. Raises
    trace_reader.TraceError on a malformed trace."""
    if isinstance(trace, capture_inputs.Capture):
        trace = trace.trace  # read once per process, shared with the other steps
    elif not isinstance(trace, trace_reader.Trace):
        trace = trace_reader.load_trace(trace)
    a, joins = analyse(trace)
    if KEEP_TO_EXIT:  # freed by the exit, not one object at a time (about 1 s on 1M events)
        _KEPT.append(trace)
    source = trace_identity(trace.path)
    a.stream_names = {}
    gpu_pid = {pid: o for o, pid in trace.gpu_pids().items()}
    for (pid, tid), name in trace.threads.items():
        if pid in gpu_pid:
            a.stream_names[(gpu_pid[pid], tid)] = name
    del trace  # the analysis holds what it needs; free the parsed json before writing
    with rules.replace_files(out, ".skip_stats-") as tmp:
        rows_job = RowsJob(tmp / "rows.csv", a)  # the events are final once analysed
        try:
            step_rows, stream_acc, gap_rows, info = per_step_rows(a)
            name, rule, figures = verdict(a, step_rows, info) if a.events else \
                ("not computable", ["no GPU events"], {})
            written = write_tables(tmp, a, stream_acc, info["critical"], step_rows, gap_rows)
            py = python_lines(a.host_threads)
            written.append(("python_lines.csv", write_csv(
                tmp / "python_lines.csv", PYTHON_LINES_COLUMNS,
                ([r["name"], r["calls"], us(r["total_ps"]), us(r["self_ps"]), len(r["threads"])]
                 for r in py))))
            written.insert(0, ("rows.csv", rows_job.wait()))
        except BaseException:
            rows_job.abort()
            raise
        result = build_result(a, joins, name, rule, figures, step_rows, info)
        result["python_tracer"] = {
            "names": len(py), "calls": sum(r["calls"] for r in py),
            "self_us": {"value": sum(r["self_ps"] for r in py) / 1e6, "unit": "us",
                        "label": "measured"},
            "threads": len({t for r in py for t in r["threads"]})}
        result["tables"] = {f: n for f, n in written}
        result["capture"] = source
        if KEEP_TO_EXIT:
            _KEPT.append(a)
        lines = render_summary(result)
        (tmp / "summary.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (tmp / RESULT_FILE).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n",
                                       encoding="utf-8")
        written[:0] = [("summary.txt", len(lines)), (RESULT_FILE, 1)]
    return result, written


# Run as a command, the analysis (millions of small objects) is left for the process's exit to
# free at once (os._exit after the output is flushed) instead of object by object when run()
# returns; imported (tests, another step), nothing is kept.
KEEP_TO_EXIT = False
_KEPT: list = []


PYTHON_LINES_COLUMNS = ["name", "calls", "total_us", "self_us", "threads"]
# the profiler's own calls (they span the capture): not the program's time
PROFILER_CALL_RE = re.compile(r"^\$profiler\.py:\d+ (start_trace|stop_trace|trace)$")


def python_lines(host_threads) -> list[dict]:
    """Host time under the Python tracer, per traced name (`$<file>:<line> <function>`, or
    `$builtins <function>`): calls, total (inclusive) and self time (less the traced calls
    nested in it on the same thread; a call that blocks, waiting for the GPUs, holds that
    wait as its own time), threads; by self time, largest first. The profiler's own start and
    stop calls are left out. Empty when the tracer was off."""
    per: dict[str, dict] = {}
    for key, events in host_threads.items():
        traced = [h for h in events if h["name"].startswith(rules.PYTHON_TRACER_PREFIX)
                  and not PROFILER_CALL_RE.match(h["name"])]
        traced.sort(key=lambda h: (h["start"], -h["dur"]))
        stack: list = []  # (end, the enclosing call's name totals)
        for h in traced:
            start, end = h["start"], h["start"] + h["dur"]
            while stack and stack[-1][0] <= start:
                stack.pop()
            acc = per.get(h["name"])
            if acc is None:
                acc = per[h["name"]] = {"name": h["name"], "calls": 0, "total_ps": 0,
                                        "self_ps": 0, "threads": set()}
            acc["calls"] += 1
            acc["total_ps"] += h["dur"]
            acc["self_ps"] += h["dur"]
            acc["threads"].add(key)
            if stack:  # nested in the call below it: not that call's own time
                stack[-1][1]["self_ps"] -= min(end, stack[-1][0]) - start
            stack.append((end, acc))
    return sorted(per.values(), key=lambda r: (-r["self_ps"], r["name"]))


def trace_identity(path) -> dict:
    """The trace a result was computed from: its path as given, size and modification time, so
    that a reader can tell a table of this capture from an earlier one left in the folder."""
    try:
        st = Path(path).stat()
        return {"trace": str(path), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}
    except (OSError, TypeError, ValueError):
        return {"trace": str(path), "bytes": None, "mtime_ns": None}


class RowsJob:
    """rows.csv, the one table as long as the trace: written by a forked child (it sees the
    analysed events as they are at the fork, copy-on-write) while this process computes and
    writes the other tables; `wait()` gives its row count or raises OSError with the child's
    reason. Without os.fork, or under FORK_ROWS_MIN events, it is written here at once."""

    def __init__(self, path: Path, a):
        self.pid = None
        self.n = None
        if not hasattr(os, "fork") or len(a.events) < FORK_ROWS_MIN:
            self.n = write_rows(path, a)
            return
        r, w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: writes, reports its count (or why not) and exits at once
            code = 1
            try:
                os.close(r)
                os.write(w, str(write_rows(path, a)).encode())
                code = 0
            except BaseException as exc:  # noqa: BLE001 - said to the parent, which raises
                try:
                    os.write(w, f"!{type(exc).__name__}: {exc}"[:2000].encode("utf-8",
                                                                           "replace"))
                except BaseException:  # noqa: BLE001, S110 - nothing left to tell
                    pass
            finally:
                os._exit(code)
        os.close(w)
        self.pid, self.fd = pid, r

    def wait(self) -> int:
        if self.pid is None:
            return self.n
        chunks = []
        while True:
            chunk = os.read(self.fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
        os.close(self.fd)
        _, status = os.waitpid(self.pid, 0)
        self.pid = None
        text = b"".join(chunks).decode("utf-8", "replace")
        if os.waitstatus_to_exitcode(status) != 0 or not text.isdigit():
            raise OSError(text[1:] if text.startswith("!") else
                          f"the process writing rows.csv ended with status {status}")
        self.n = int(text)
        return self.n

    def abort(self) -> None:
        """Stop the child (this process failed or was interrupted) and reap it."""
        if self.pid is None:
            return
        try:
            os.kill(self.pid, 15)
        except OSError:
            pass
        try:
            os.waitpid(self.pid, 0)
            os.close(self.fd)
        except OSError:
            pass
        self.pid = None


def write_tables(tmp: Path, a: Analysis, stream_acc, critical, step_rows, gap_rows) -> list:
    """streams.csv, steps.csv, gaps.csv (rows.csv is RowsJob's)."""
    written = []
    stream_rows = []
    for (d, s), acc in sorted(stream_acc.items()):
        span = acc["span"]
        stream_rows.append([d, s, a.stream_names.get((d, s), ""), us(span),
                            us(acc["compute"]), us(acc["collective"]), us(acc["memcpy"]),
                            us(acc["idle"]), pct(acc["compute"], span),
                            pct(acc["collective"], span), pct(acc["memcpy"], span),
                            pct(acc["idle"], span), acc["events"], int(critical.get(d) == s)])
    written.append(("streams.csv", write_csv(tmp / "streams.csv", [
        "device", "stream", "stream_name", "span_us", "compute_us", "collective_us",
        "memcpy_us", "idle_us", "compute_pct_of_span", "collective_pct_of_span",
        "memcpy_pct_of_span", "idle_pct_of_span",
        "events", "critical"], stream_rows)))
    written.append(("steps.csv", write_csv(tmp / "steps.csv", [
        "step", "device", "source", "start_us", "end_us", "dur_us", "kernels", "busy_us",
        "idle_us", "idle_pct_of_step", "critical_stream", "tklqt_us", "akd_us", "il_us",
        "il_idle_us", "union_idle_us", "host_late_us", "device_wait_us", "unknown_gap_us",
        "period_us", "idle_between_us", "idle_between_pct_of_period", "between_cause",
        "between_host_events", "executions", "between_programs_idle_us", "programs"],
        [[r["step"], r["device"], r["source"], us(r["start_ps"]), us(r["end_ps"]),
          us(r["dur_ps"]), r["kernels"], us(r["busy_ps"]), us(r["idle_ps"]),
          pct(r["idle_ps"], r["dur_ps"]), r["critical_stream"], us(r["tklqt_ps"]),
          us(r["akd_ps"]), us(r["il_ps"]), us(r["il_idle_ps"]), us(r["union_idle_ps"]),
          us(r["host_late_ps"]), us(r["device_wait_ps"]), us(r["unknown_gap_ps"]),
          us(r["period_ps"]), us(r["idle_between_ps"]),
          pct(r["idle_between_ps"], r["period_ps"]) if r["period_ps"] else "",
          r["between_cause"], r["between_events"],
          "" if r["executions"] is None else r["executions"], us(r["between_programs_ps"]),
          r["programs"]]
         for r in step_rows])))
    written.append(("gaps.csv", write_csv(tmp / "gaps.csv", [
        "device", "stream", "step", "start_us", "end_us", "dur_us", "kernel_before",
        "kernel_after", "cause", "launch_thread", "host_events", "python_traced_us"],
        [[g["device"], g["stream"], g["step"], us(g["start_ps"]), us(g["end_ps"]),
          us(g["dur_ps"]), g["kernel_before"], g["kernel_after"], g["cause"],
          g["launch_thread"], g["host_events"], us(g["python_traced_ps"])]
         for g in sorted(gap_rows, key=lambda g: (g["device"], g["start_ps"]))])))
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("capture")
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--run")
    ap.add_argument("--host")
    per_host.add_arguments(ap)
    args = ap.parse_args(argv)
    fanned = per_host.maybe_fan_out("skip_stats", __file__, argv, args.capture, args.run,
                                   args.host, args.out, args.jobs)
    if fanned is not None:
        return fanned
    # Millions of small objects and no reference cycles: the cyclic collector would only rescan
    # the growing heap again and again (it doubled the run time on a 1M-event trace).
    gc.disable()
    try:
        files = capture_inputs.resolve(args.capture, run=args.run, host=args.host)
        if files.trace is None:
            raise capture_inputs.CaptureError(
                f"no <host>.trace.json.gz for host {files.host} in {files.run_dir}; "
                "skip_stats.py reads the trace, which jax.profiler writes beside the xplane.pb")
        for n in files.notes:
            print(f"skip_stats: {n}", file=sys.stderr)
        result, written = run(files.trace, args.out)
    except (capture_inputs.CaptureError, trace_reader.TraceError) as exc:
        print(f"skip_stats: {rules.printable(exc)}", file=sys.stderr)
        return 1
    except OSError as exc:  # the scratch folder: permissions, a full disk
        print(f"skip_stats: cannot write into {rules.printable(args.out)}: "
              f"{exc.strerror or exc}", file=sys.stderr)
        return 1
    except MemoryError:
        print(f"skip_stats: {rules.printable(args.capture)} is too large to analyse in this "
              "machine's memory", file=sys.stderr)
        return 1
    for fname, n in written:
        print(f"wrote {args.out / fname} ({n} {'lines' if fname.endswith('.txt') else 'rows'})")
    print(f"verdict: {result['verdict']}")
    print("Next: read summary.txt, then check streams.csv shares and gaps.csv causes "
          "(the analyzing-jax-launch-overhead skill explains each).")
    return 0


if __name__ == "__main__":
    KEEP_TO_EXIT = True
    code = rules.run_main("skip_stats", main)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(code)
