"""GPU events from the trace and their host calls (standard library only).

Step 1's load: every GPU stream event (kernel, memcpy, memset) as a TraceEvent (the platform's
OpRun with step 1's fields), the host events by thread and by correlation id (`collect`);
each GPU event joined to its host call (`join_events`); each launching thread mapped to the
thread that ran the execution (`launch_threads_to_exec`); and the time a set of events covers
(`union_ps`, `stream_budget`). Times are integer picoseconds. Classification rules:
trace_rules.py. Only `collect` writes, to stderr: what the reader repaired, and its progress
through a large trace.
"""

from __future__ import annotations

import bisect
import operator
import sys
from collections import Counter
from typing import NamedTuple

from tracekit import gpu as gpu_rules
from tracekit import tpu, trace_reader
from tracekit import trace_rules as rules
from tracekit.records import HostCall, OpRun

PROGRESS_EVENTS = 500_000  # events freed at a time by a collect that owns them
# Launch-thread -> execution-thread mapping: after this many unambiguous matches for one
# launching thread, the majority cannot change in any capture seen; stop counting.
VOTES_ENOUGH = 200


class TraceEvent(OpRun):
    """A GPU event as step 1 reads it from the trace: its end, the three args every table reads
    (`op`, `module`, `cid`: hlo_op, hlo_module and correlation_id, "" where absent: the args
    dict itself is not kept, so that a part of the trace read by trace_reader's child comes
    back small, and a forked child writing rows.csv copies fewer pages), its join to a host
    call (`join`: launch, graph_launch, other or none; `launch`: that call) and its step.
    `graph` is whether its args name a graph until join_events sets it (gpu_rules.in_graph)."""
    __slots__ = ("end", "op", "module", "cid", "join", "launch", "step")

    def __init__(self, device, stream, name, start, dur, category="compute", op="", module="",
                 cid="", graph=False):
        self.device = device
        self.lane = stream
        self.name = name
        self.start = start
        self.dur = dur
        self.end = start + dur
        self.op = op
        self.module = module
        self.cid = cid
        self.category = category
        self.join = "none"
        self.launch = None
        self.graph = graph
        self.step = None


_CATEGORY: dict[tuple, str] = {}
_JOIN_KIND: dict[tuple, str] = {}


def categorize(name: str, args: dict) -> str:
    """compute | collective | memcpy (gpu_rules.category), memoized by (name, hlo_op or None,
    whether memcpy_details is there)."""
    op = args.get("hlo_op")
    key = (name, op, "memcpy_details" in args)
    cat = _CATEGORY.get(key)
    if cat is None:
        cat = _CATEGORY[key] = gpu_rules.category(name, "" if op is None else op, key[2])
    return cat


def join_kind(host_name: str, kernel_name: str) -> str:
    """What a correlation id joined: launch, graph_launch, or other (gpu_rules.join_kind)."""
    key = (host_name, kernel_name)
    kind = _JOIN_KIND.get(key)
    if kind is None:
        kind = _JOIN_KIND[key] = gpu_rules.join_kind(host_name, kernel_name)
    return kind


class Collected(NamedTuple):
    """What one pass over the trace's complete events collects (`collect`): GPU stream events,
    the events on GPU lines that are not streams, host events by thread and by correlation id,
    when the last GPU or host event ends (ps; 0 without events), and the trace's totals of
    model_checks.trace_totals: (device, stream) -> [events, summed duration ps] of its stream
    lines, and step 0's facts (each GPU process's events, the host process's, the reader's
    notes); the host threads whose events the trace does not hold in start order; and the host
    events that carry a step_num (StepTraceAnnotation's), in file order: found here, where each
    event's args are at hand, not by another pass over every host event."""
    gpu: list
    other_gpu_lines: int
    host_threads: dict
    by_corr: dict
    last_end: int
    per_stream: dict
    facts: dict
    unordered: set
    marked: list
    runs: list


def collect(trace, release: bool = False) -> Collected:
    """GPU stream events, host events by thread and by correlation id, and the trace's totals
    (Collected), from the parts the reader collected (`trace.digests`: `collect_part` given to
    trace_reader.load_trace as its digest) or else from trace.events. What the reader repaired
    (trace.notes), and GPU runtime calls in a trace without GPU processes, are said on stderr.
    `release`: trace.events is emptied as it is read, for a caller that owns the trace."""
    for note in getattr(trace, "notes", ()):
        print(f"skip_stats: note: {note}", file=sys.stderr)
    parts = getattr(trace, "digests", None)
    if parts is None:
        parts = [collect_part(trace.path, trace.events, trace.processes, trace.threads,
                              release)]
    out = _merged(trace, parts)
    if not out.gpu and out.by_corr and not trace.gpu_pids():
        calls = sum(len(hs) for hs in out.by_corr.values())
        print(f"skip_stats: note: {calls} host events carry a correlation id (GPU runtime calls) "
              "but the trace has no /device:GPU process: its GPU events are missing, so this is "
              "not a CPU capture", file=sys.stderr)
    return out


def collect_part(path, events: list, processes: dict, threads: dict,
                 release: bool = False) -> tuple:
    """One run of the trace's complete events (all of them, or the half a reader's child holds:
    trace_reader.load_trace's digest), collected as plain values marshal carries: (GPU stream
    events as TraceEvent's fields, events on other GPU lines by pid, (pid, tid) -> [events,
    summed duration ps] of each stream line, host events by thread, host events by correlation
    id, the host threads not in start order, the host events that carry a step_num, the last
    end). `processes`, `threads`: the whole trace's names. `release`: `events` is emptied as it
    is read (its dicts freed a part at a time, their memory reused by what is collected)."""
    try:
        return _collect(events, processes, threads, release)
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        # trace_reader checks every field read here; this is the last line of defence
        raise trace_reader.TraceError(
            f"{path} has a complete event that cannot be read ({type(exc).__name__}: "
            f"{rules.printable(exc)}); pid, tid, ts, dur and name are always there in XLA's "
            "traces") from exc


def _collect(events, processes, threads, release) -> tuple:
    gpu_pid = {pid: o for o, pid in trace_reader.gpu_ordinals(processes).items()}
    host_pids = {pid for pid, name in processes.items() if name == trace_reader.HOST_CPU_PROCESS}
    stream_threads = trace_reader.device_lanes(processes, threads)
    tpu_pids = {pid for pid, name in processes.items() if tpu.is_tpu(name)}
    # a TPU's program runs are kept apart (tracekit.tpu)
    run_threads = {k: name == tpu.STEPS_LINE for k, name in threads.items()
                   if k[0] in tpu_pids and name in (tpu.MODULE_LINE, tpu.STEPS_LINE)}
    runs = []
    gpu = []
    other: dict[int, int] = {}  # GPU pid -> its events on lines that are not streams
    totals: dict[tuple, list] = {}  # (pid, tid) of a stream -> [events, summed duration ps]
    append_gpu = gpu.append
    host_threads: dict[tuple, list] = {}
    by_corr: dict[str, list] = {}
    unordered: set = set()  # host threads whose events are not in start order
    marked: list = []  # host events carrying a step_num
    last = -rules.MAX_TIME_PS  # no event ends before it (trace_reader: a start is at least that)
    n = len(events)
    empty: dict = {}
    graph_ids = gpu_rules.GRAPH_ID_STATS
    # The parser makes a new string for every value: each kernel's name, instruction and module
    # as many times as the capture ran them, and a thread key per event. Here each distinct
    # value becomes one object, so that every memo and table keyed on them later finds it by
    # identity with its hash kept (at five times the seed's size: step 1 alone 10.5 -> 9.3 s,
    # 67 MB less, a forked child's copy-on-write faults fewer).
    one = {}.setdefault
    cats = _CATEGORY
    for start in range(0, n, PROGRESS_EVENTS):
        if release:
            part = events[:PROGRESS_EVENTS]
            del events[:PROGRESS_EVENTS]
        else:
            part = events[start:start + PROGRESS_EVENTS]
        for ev in part:
            pid = ev["pid"]
            o = gpu_pid.get(pid)
            if o is not None:
                key = (pid, ev["tid"])
                if key not in stream_threads:
                    if key in run_threads:  # a program run, or a device step (its Steps line)
                        runs.append((o, round(ev["ts"] * 1_000_000), round(ev["dur"] * 1_000_000),
                                     ev["name"], run_threads[key]))
                    else:
                        other[pid] = other.get(pid, 0) + 1
                    continue
                args = ev.get("args", empty)
                name = ev["name"]
                name = one(name, name)
                s, d = round(ev["ts"] * 1_000_000), round(ev["dur"] * 1_000_000)
                if pid in tpu_pids:  # an op run: the event is the instruction, no launch
                    append_gpu((o, key[1], name, s, d, tpu.op_category(args), name, "", "",
                                False))
                else:
                    op = args.get("hlo_op")
                    op = "" if op is None else one(op, op)
                    module = args.get("hlo_module")
                    module = "" if module is None else one(module, module)
                    cat = cats.get((name, op, "memcpy_details" in args))
                    if cat is None:
                        cat = categorize(name, args)
                    append_gpu((o, key[1], name, s, d, cat, op, module,
                                args.get("correlation_id", ""), not graph_ids.isdisjoint(args)))
                t = totals.get(key)
                if t is None:
                    t = totals[key] = [0, 0]
                t[0] += 1
                t[1] += d
                if s + d > last:
                    last = s + d
            elif pid in host_pids:
                key = (pid, ev["tid"])
                key = one(key, key)
                args = ev.get("args", empty)
                s, d = round(ev["ts"] * 1_000_000), round(ev["dur"] * 1_000_000)
                name = ev["name"]
                h: HostCall = {"name": one(name, name), "start": s, "dur": d, "thread": key,
                               "args": args}
                if s + d > last:
                    last = s + d
                lst = host_threads.get(key)
                if lst is None:
                    lst = host_threads[key] = []
                elif s < lst[-1]["start"]:
                    unordered.add(key)
                lst.append(h)
                if "step_num" in args:
                    marked.append(h)
                cid = args.get("correlation_id")
                if cid is not None:
                    c = by_corr.get(cid)
                    if c is None:
                        by_corr[cid] = [h]
                    else:
                        c.append(h)
    return gpu, other, totals, host_threads, by_corr, list(unordered), marked, last, runs


def _merged(trace, parts) -> Collected:
    """The parts (collect_part's, in file order) as one Collected."""
    gpu_pid = {pid: o for o, pid in trace.gpu_pids().items()}
    gpu: list = []
    other: dict[int, int] = {}
    totals: dict[tuple, list] = {}
    host_threads: dict[tuple, list] = {}
    by_corr: dict[str, list] = {}
    unordered: set = set()
    marked: list = []
    runs: list = []
    last = -rules.MAX_TIME_PS
    for p_gpu, p_other, p_totals, p_threads, p_corr, p_unordered, p_marked, p_last, p_runs \
            in parts:
        runs += p_runs
        gpu += [TraceEvent(*x) for x in p_gpu]
        for pid, n in p_other.items():
            other[pid] = other.get(pid, 0) + n
        for key, (n, d) in p_totals.items():
            t = totals.setdefault(key, [0, 0])
            t[0] += n
            t[1] += d
        for key, lst in p_threads.items():  # a part's own list where it is the first
            if (had := host_threads.setdefault(key, lst)) is not lst:
                if lst[0]["start"] < had[-1]["start"]:
                    unordered.add(key)
                had += lst
        for cid, lst in p_corr.items():
            if (had := by_corr.setdefault(cid, lst)) is not lst:
                had += lst
        unordered.update(p_unordered)
        marked += p_marked
        last = max(last, p_last)
    per_device = {o: other.get(pid, 0) for pid, o in gpu_pid.items()}
    for r in runs:  # a TPU's program runs: events of its process too
        per_device[r[0]] += 1
    per_stream = {}
    for (pid, tid), t in totals.items():
        per_stream[(gpu_pid[pid], tid)] = t
        per_device[gpu_pid[pid]] += t[0]
    kinds = trace_reader.device_kinds(trace.processes)
    for pid, tid in [k for k, name in trace.threads.items() if name == tpu.MODULE_LINE]:
        own = [r for r in runs if r[0] == (o := gpu_pid.get(pid)) and not r[4]]
        if own and not any(d == o for d, _ in per_stream):  # no op line's event: runs are ops
            gpu += [TraceEvent(o, tid, r[3], r[1], r[2], "compute", r[3]) for r in own]
            per_stream[(o, tid)] = [len(own), sum(r[2] for r in own)]
    facts = {"gpu_events": [[o, k] for o, k in sorted(per_device.items())],
             "kinds": {str(o): "TPU" for pid, o in gpu_pid.items() if kinds.get(pid) == "TPU"},
             "host_events": sum(map(len, host_threads.values())),
             "notes": list(getattr(trace, "notes", ()))}
    return Collected(gpu, sum(other.values()), host_threads, by_corr,
                     last if gpu or host_threads else 0, per_stream, facts, unordered, marked,
                     runs)


def stand_in_notes(trace, per_stream: dict) -> list[str]:
    """A note for each TPU core whose program runs stand for its ops (_merged)."""
    pid = trace.gpu_pids()
    return [f"TPU core {o}'s op line holds no event in this trace: its {n:,} program runs "
            "stand for its ops, one op a run named by its program" for (o, tid), (n, _) in
            per_stream.items() if trace.threads.get((pid[o], tid)) == tpu.MODULE_LINE]


def join_events(gpu, by_corr) -> tuple[dict, dict]:
    """Join each GPU event to its host call by correlation id; say what the id joined (counts),
    and gather the launches launch_threads_to_exec votes with: per launching thread, its first
    4 x VOTES_ENOUGH launch calls that name an instruction (their hlo_op, else the event's),
    with that name."""
    counts = {"launch": 0, "graph_launch": 0, "other": 0, "none": 0, "ambiguous": 0,
              "no_correlation_id": 0}
    # device_id on host events may be an agent number: learn its map to ordinals from
    # unambiguous joins, and use it only to break ties.
    agent_votes: dict[str, dict[int, int]] = {}
    if any(len(hs) > 1 for hs in by_corr.values()):
        for ev in gpu:
            hs = by_corr.get(ev.cid, ())
            if len(hs) == 1 and "device_id" in hs[0]["args"]:
                v = agent_votes.setdefault(hs[0]["args"]["device_id"], {})
                v[ev.device] = v.get(ev.device, 0) + 1
    agent = {a: max(v, key=v.get) for a, v in agent_votes.items()}
    ids: list = []  # (GPU, correlation id) of each event not launched by a graph
    in_graph = gpu_rules.in_graph
    kinds = _JOIN_KIND
    none: list = []
    sample: dict[tuple, list] = {}
    most = 4 * VOTES_ENOUGH
    for ev in gpu:  # a hot loop: every GPU event once (its args left untouched)
        cid = ev.cid
        if not cid:
            if ev.join == "dispatch":  # a TPU op run, joined to its dispatch (tracekit.tpu)
                counts["dispatch"] = counts.get("dispatch", 0) + 1
                continue
            counts["no_correlation_id"] += 1
            ev.join = "none"
            ev.graph = in_graph(ev.graph, False)
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
            if join == "launch":
                lst = sample.get(h["thread"])
                if lst is None:
                    lst = sample[h["thread"]] = []
                if len(lst) < most:
                    label = h["args"].get("hlo_op") or ev.op
                    if label:
                        lst.append((h, label))
        ev.join = join
        counts[join] += 1
        if join != "graph_launch":  # its id names a graph launch: never counted below
            ids.append((ev.device, cid))
        ev.graph = in_graph(ev.graph, join == "graph_launch")
    counts["shared_ids_without_graph_launch"] = sum(
        n for (d, cid), n in Counter(ids).items() if n > 1 and not any(
            h for h in by_corr.get(cid, []) if gpu_rules.is_graph_launch(h["name"])))
    return counts, sample


def join_program_runs(c: Collected, host_threads: dict) -> dict | None:
    """Where the device records its program runs (a TPU's `XLA Modules`), each op run joined to
    its run and that run's host dispatch (tracekit.tpu.join_runs: its counts, `executions` and
    `runs_of`); None where it records none (a GPU's events join by correlation id:
    join_events)."""
    runs = [r[:4] for r in c.runs if not r[4]]
    return tpu.join_runs(c.gpu, runs, host_threads) if runs else None


def host_copies(c: Collected, host_threads: dict, joins: dict | None) -> dict | None:
    """Where the device records its program runs (a TPU), the host's copies to it
    (tracekit.tpu.host_copies); None elsewhere (a GPU's copies are device events)."""
    return tpu.host_copies(host_threads) if joins is not None else None


def device_step_line(c: Collected, annotated: int, joins: dict | None) -> tuple[list, list]:
    """The device's own step line (a TPU's `Steps`) beside the host's `annotated` steps: its
    notes, and the steps it frames, (number, start, end) each, where it counts steps and the
    host annotated none (tracekit.tpu.steps_line_notes, steps_from_line); else no steps."""
    runs = [r[:4] for r in c.runs if not r[4]]
    line = [r[:4] for r in c.runs if r[4]]
    notes, counts = tpu.steps_line_notes(line, runs, annotated)
    return notes, tpu.steps_from_line(line, joins["runs_of"]) \
        if counts and not annotated and joins is not None else []


def launch_threads_to_exec(sample, host_threads, unordered=()) -> dict:
    """Map each launching thread to the thread that ran the execution (by the per-instruction
    TraceMe that holds the launch in time and carries the same instruction name). `sample`:
    join_events' launches, a few per launching thread (enough for the majority); `unordered`:
    the host threads whose events are not in start order (Collected.unordered)."""
    labels = {label for lst in sample.values() for _, label in lst}
    if not labels:
        return {}
    # label -> thread -> (sorted starts, ends): one bisect per thread that has the name. An
    # event that starts after the last sampled launch holds none: a thread in start order is
    # read only up to there (the sample is the first launches: a fraction of a long trace).
    last = max(L["start"] for lst in sample.values() for L, _ in lst)
    start_of = operator.itemgetter("start")
    index: dict[str, dict] = {}
    for key, events in host_threads.items():
        if key not in unordered:
            events = events[:bisect.bisect_right(events, last, key=start_of)]
        for h in events:
            if h["name"] in labels and h["start"] <= last:
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
        cands = [key for key, (starts, ends) in index.get(label, {}).items()
                 if key != L["thread"] and (i := bisect.bisect_right(starts, t) - 1) >= 0
                 and ends[i] >= t]
        if len(cands) == 1:
            v = votes.setdefault(L["thread"], {})
            v[cands[0]] = v.get(cands[0], 0) + 1
            decided[L["thread"]] = decided.get(L["thread"], 0) + 1
    return {t: max(v, key=v.get) for t, v in votes.items()}


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
