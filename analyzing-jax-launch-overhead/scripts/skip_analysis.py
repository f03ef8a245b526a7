"""Step 1's analysis of a trace whose steps are framed (standard library only).

From the GPU events of the analysed steps: per step and GPU the SKIP metrics, busy and idle time,
the critical stream and its gaps (`per_step_rows`: the rows of steps.csv, streams.csv and
gaps.csv); which GPUs run which programs (`gpu_groups`); the verdict by the named thresholds on
the GPU that ends each step last (`verdict`); the straggler; host time by Python-traced call
(`python_lines`); and the result skip_stats.json holds (`build_result`). Pure functions: they
never print or write.
"""

from __future__ import annotations

import bisect
import operator
import statistics
from dataclasses import dataclass, field

from gap_causes import between_steps, cause_words, classify_gaps, gap_parts
from gpu_events import stream_budget, union_ps
from step_framing import CallTree
from tracekit import trace_rules as rules
from tracekit.records import Step
from tracekit.scratch import number

# Verdict thresholds, applied on the GPU that finishes each step last, on its critical stream.
# Launch-bound: the stream waits on the host for at least this share of the step. 25% is where
# removing the wait would shorten the step by a quarter: big enough to be the first thing to fix.
LAUNCH_BOUND_HOST_SHARE = 0.25
# Device-bound: the critical stream is busy (or has work queued) for at least this share of the
# step and the host share stays under HOST_SHARE_NEGLIGIBLE: the GPU, not the host, sets the pace.
DEVICE_BOUND_BUSY_SHARE = 0.75
HOST_SHARE_NEGLIGIBLE = 0.10
# A deciding share this close to its threshold (in points of the step) makes the verdict
# borderline: said in the rule, so that a report does not state it as clear-cut.
BORDERLINE_POINTS = 0.01
# Collective/straggler-bound: collective kernels (which include waiting for peers) cover at least
# this share of the step on the bounding GPU, with more than one GPU in the capture.
COLLECTIVE_BOUND_SHARE = 0.25
# Between steps: the GPU that ends a step sits idle after its last kernel until the next step
# starts. At this share of the step period the time inside the step no longer tells the whole
# story (a tenth of the wall time is beyond what the in-step verdict weighs): the verdict line
# says so and names the cause class.
BETWEEN_STEPS_SHARE = 0.10
# A step device-bound within itself is mixed over its period where the device works less than
# this share of the period (its busy time over start to the next step's start): the idle between
# steps (the host dispatching, waiting on a result) is then a fifth of the wall time or more. The
# lab's truths hold the same line (device at 0.8 of the host's step window): on a TPU v5e, four
# jitted steps blocked on every result were busy 76-78% of the period (mixed), a flash kernel's
# 83% (device).
PERIOD_DEVICE_SHARE = 0.80
# A step launch-bound by its host-late share is mixed where the device still works at least this
# share of the period: the device's own work is then most of the wall time, and taking the host's
# share away alone cannot make the step twice as fast. The lab's and the probes' truths draw the
# host line here (host below 0.5 of the step): on a TPU v5e a jitted MLP step blocked each step,
# framed by its program cycle, waits 33% of its period on the host's block and dispatch and is
# busy 67%: mixed, as the same step framed by its annotations is. Below it a step device-bound
# or mixed within itself is launch-bound over its period: a DP-SGD step blocked each step, busy
# 91% within the step, worked 37% of its period (the chip 28% of the unprofiled step: host).
LAUNCH_PERIOD_DEVICE_BELOW = 0.50
# Straggler: the rule and its margin are shared with the cross-host summary (trace_rules).
STRAGGLER_MIN_LEAD_PS = rules.STRAGGLER_MIN_LEAD_PS
STRAGGLER_MIN_LEAD_SHARE = rules.STRAGGLER_MIN_LEAD_SHARE

# Picoseconds (the analysis's unit) to microseconds (the result's).
PS_TO_US = 1e-6

# What a GPU event's correlation id joined (gpu_events.join_events), in the order the result
# and summary.txt name them.
JOIN_KEYS = ("launch", "graph_launch", "other", "none", "ambiguous", "no_correlation_id")
# What no single capture can answer: said in every result.
NEEDS_NEW_CAPTURE = ("how the step time moves with batch size (the SKIP paper's CPU-bound vs "
                     "GPU-bound test needs a batch-size sweep, not one capture)")


@dataclass
class Analysis:
    """One trace up to its steps (skip_stats.analyse): the GPU events, every step, how the steps
    were found, the steps analysed, what cannot be computed and the notes; the joins of GPU
    events to launches, each launching thread's execution thread, the host threads, whether the
    Python tracer was on, its call tree, the host events of the gaps (a gap_causes.GapIndex) and
    the thread names, the trace's totals counted as it was collected (gpu_events.Collected:
    per_stream and facts, model_checks.trace_totals' figures); `stream_names` (each GPU stream's
    line name) is set by skip_stats.run."""
    events: list
    steps: list
    step_source: str
    analysed: list
    refusals: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    joins: dict = field(default_factory=dict)
    exec_of: dict = field(default_factory=dict)
    host_threads: dict = field(default_factory=dict)
    python_tracer_on: bool = False
    call_tree: object = None
    gap_events: object = None
    thread_names: dict = field(default_factory=dict)
    stream_names: dict = field(default_factory=dict)
    trace_totals: tuple = field(default_factory=lambda: ({}, {}))
    tpu_joins: dict | None = None  # a TPU's: tracekit.tpu.join_runs' counts
    host_copies: dict | None = None  # a TPU's copies from the host (gpu_events.host_copies)
    compiled: object = False  # compile_summary's, once computed (False: not yet)


def step_refusals(gpu, launches: bool, analysed) -> list[str]:
    """What cannot be computed on these events, one sentence each: no GPU events, no launch
    events (`launches`: whether any host event carries a correlation id), GPU events launched by
    graphs, no complete step among the `analysed` ones."""
    refusals = []
    if not gpu:
        refusals.append("no GPU events: this trace has no /device:GPU stream events (a CPU "
                        "capture?); nothing about GPU time can be computed")
    if gpu and not launches:
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
    return refusals


def per_step_rows(a: Analysis) -> tuple[list, list, list, dict]:
    """steps.csv rows, streams.csv rows, gaps.csv rows, and the verdict's inputs (`by_stream`:
    each analysed (GPU, step)'s events by stream, for step 2's stream budgets)."""
    analysed = {s.number: s for s in a.analysed}
    by_gpu_step: dict[tuple, list] = {}
    for ev in a.events:
        if ev.step in analysed:
            by_gpu_step.setdefault((ev.device, ev.step), []).append(ev)
    devices = sorted({ev.device for ev in a.events})
    # one pass over each GPU's events of each step (gpu_step_pass), then what needs every
    # step's: the critical stream of each GPU, and the GPUs' groups
    starts = device_starts(analysed, by_gpu_step)
    passes = {k: gpu_step_pass(evs, starts[k]) for k, evs in by_gpu_step.items()}
    critical = critical_streams(passes, devices)
    step_rows, gap_rows = [], []
    stream_acc: dict[tuple, dict] = {}
    verdict_in = []
    for num, st in sorted(analysed.items()):
        ends = {}
        exec_starts = [x.start for x in st.executions]
        for d in devices:
            if not (evs := by_gpu_step.get((d, num))):
                continue
            row, per_stream, gaps = gpu_step_row(a, st, d, evs, passes[(d, num)],
                                                 critical.get(d), exec_starts, starts[(d, num)])
            ends[d] = row["end_ps"]
            gap_rows.extend(gaps)
            step_rows.append(row)
            add_stream_budgets(stream_acc, d, per_stream, row["start_ps"], row["end_ps"])
        if ends:
            verdict_in.append((num, ends))
    between_steps(a, step_rows)
    ahead = ran_ahead(step_rows, analysed)
    if ahead and ahead not in a.notes:
        a.notes.append(ahead)
    groups = gpu_groups({k: p["work"] for k, p in passes.items()})
    main, compared = weighed_gpus(groups)
    return step_rows, stream_acc, gap_rows, {
        "critical": critical, "ends": verdict_in, "groups": groups, "main_group": main,
        "compared": compared, "by_stream": {k: p["per_stream"] for k, p in passes.items()}}


def device_starts(analysed: dict, by_gpu_step: dict) -> dict:
    """(GPU, step) -> where the step starts on that GPU: the step's own start, or, where the
    host ran ahead (the GPU still worked on the step before when this one began on the host: its
    work was queued behind it), the end of that work on the GPU, or this step's first event if
    it began earlier (streams overlapping the two steps). Steps the host blocked on start where
    they began on the host."""
    out, prev_end, by_step = {}, {}, {}
    for (d, n), evs in by_gpu_step.items():
        by_step.setdefault(n, []).append((d, evs))
    for num, st in sorted(analysed.items(), key=lambda kv: kv[1].start):
        for d, evs in by_step.get(num, ()):
            start = st.start
            before = prev_end.get(d)
            if before is not None and before > start:
                start = max(start, min(before, min(e.start for e in evs)))
            out[(d, num)] = start
            prev_end[d] = max(before or 0, max(e.end for e in evs))
    return out


def ran_ahead(step_rows, analysed: dict) -> str | None:
    """The note where the host ran ahead of a GPU in some analysed steps (device_starts moved
    their start): how many, and the host's period beside the GPU's."""
    if not (moved := [r for r in step_rows if r["start_ps"] != analysed[r["step"]].start]):
        return None
    order = sorted(analysed.values(), key=lambda st: st.start)
    host = [b.start - a.start for a, b in zip(order, order[1:], strict=False)]
    dev = [r["period_ps"] for r in step_rows if r.get("period_ps")]
    return (f"the host ran ahead of the device in {len(moved)} of {len(step_rows)} step rows: "
            "the device still ran the step before when the host began the next one, so each "
            "such step starts on the device where the step before ended there (its work was "
            "queued behind it); periods are the device's: median "
            f"{statistics.median(dev) * PS_TO_US:,.1f} us between one step's start on the "
            "device and the next's" + (f", where the host's step annotations are "
                                       f"{statistics.median(host) * PS_TO_US:,.1f} us apart "
                                       "(median)" if host else "") +
            " (steps.csv start_us)")


def critical_streams(passes, devices) -> dict:
    """GPU -> its critical stream: the stream with the most kernel-busy time over the analysed
    steps (the lowest stream id among equals)."""
    streams_of: dict[int, dict] = {}
    for (d, _), p in passes.items():
        busy = streams_of.setdefault(d, {})
        for s, b in p["stream_busy"].items():
            busy[s] = busy.get(s, 0) + b
    return {d: max(sorted(busy), key=busy.get) for d in devices if (busy := streams_of.get(d))}


def gpu_step_pass(evs: list, start: int) -> dict:
    """One pass over one GPU's events of one step (the hot loop of a large trace): its end,
    busy time from `start`, kernel time, launch queue time, collectives, its events by stream
    and each stream's busy time, its programs' first kernels and what gpu_groups weighs."""
    end = evs[0].end
    kernel_sum = tklqt = n_launched = copies = memcpy = 0
    busy_iv, coll_iv = [], []
    per_stream: dict[int, list] = {}
    first: dict[str, int] = {}  # program -> its first kernel's start
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
        cat = e.category
        if cat == "collective":
            coll_iv.append((es, ee))
        if m := e.module:
            f = first.get(m)
            if f is None or es < f:
                first[m] = es
        elif cat == "memcpy":
            if rules.is_argument_copy(cat, e.op, e.graph):
                copies += 1
            else:
                memcpy += 1
        lst = per_stream.get(e.lane)
        if lst is None:
            lst = per_stream[e.lane] = []
        lst.append(e)
    return {"end": end, "busy_iv": busy_iv, "coll_iv": coll_iv, "kernel_sum": kernel_sum,
            "tklqt": tklqt, "launched": n_launched, "per_stream": per_stream, "first": first,
            "stream_busy": {s: union_ps([(e.start, e.end) for e in sevs])
                            for s, sevs in per_stream.items()},
            "work": {"modules": set(first), "ps": kernel_sum, "events": len(evs),
                     "copies": copies, "memcpy": memcpy}}


def gpu_step_row(a: Analysis, st: Step, d: int, evs: list, p: dict, crit,
                 exec_starts, start: int) -> tuple:
    """One GPU's events of one step (`p`: their gpu_step_pass): its steps.csv row (from the
    step's start on the GPU, device_starts, to its last event's end), its events by stream, and
    the gaps.csv rows of its critical stream."""
    end, kernel_sum, n_launched = p["end"], p["kernel_sum"], p["launched"]
    per_stream = p["per_stream"]
    dur = end - start
    busy = union_ps(p["busy_iv"])
    coll_iv = p["coll_iv"]
    arrival = None  # the end of its last other kernel before the step's last collective starts
    if coll_iv:
        last = max(cs for cs, _ in coll_iv)
        arrival = max((e.end for e in evs if e.category != "collective" and e.end <= last),
                      default=None)
    crit_evs = sorted(per_stream.get(crit, ()), key=lambda e: e.start)
    host_late, device_wait, unknown, gaps = classify_gaps(a, crit_evs, start, d, st.number)
    coll = union_ps(coll_iv)
    n_exec, programs, between_programs = step_programs(evs, exec_starts, crit, p["first"])
    row = {
        "step": st.number, "device": d, "source": st.source, "start_ps": start, "end_ps": end,
        "dur_ps": dur, "kernels": len(evs), "busy_ps": busy, "idle_ps": dur - busy,
        "critical_stream": crit, "tklqt_ps": p["tklqt"] if n_launched else None,
        "akd_ps": kernel_sum / len(evs), "il_ps": dur, "il_idle_ps": dur - kernel_sum,
        "union_idle_ps": dur - busy, "host_late_ps": host_late,
        "device_wait_ps": device_wait, "unknown_gap_ps": unknown,
        "collective_ps": coll, "launched": n_launched, "executions": n_exec,
        "programs": programs, "between_programs_ps": between_programs,
        "arrival_ps": None if arrival is None else max(0, arrival - start)}
    return row, per_stream, gaps


def add_stream_budgets(stream_acc: dict, d: int, per_stream: dict, start: int, end: int) -> None:
    """Add one GPU's step window [start, end) to its streams' totals (streams.csv): span,
    compute, collective, memcpy and idle time, events."""
    for s, sevs in per_stream.items():
        b = stream_budget(sevs, start, end)
        acc = stream_acc.setdefault((d, s), {"span": 0, "compute": 0, "collective": 0,
                                             "memcpy": 0, "idle": 0, "events": 0})
        acc["span"] += end - start
        for k in ("compute", "collective", "memcpy", "idle"):
            acc[k] += b[k]
        acc["events"] += len(sevs)


def weighed_gpus(groups: list) -> tuple[list, list]:
    """The GPUs the verdict is weighed on, and those whose work is compared. The verdict is
    weighed on every GPU that runs the step's programs (pipeline stages included: the step ends
    when its last stage does); work is compared, and a straggler named, only inside one group:
    the program group with the most GPU time among those of two GPUs or more (none: every GPU
    runs programs of its own, so nothing is compared)."""
    runs = [d for g in groups if g["kind"] == "programs" for d in g["devices"]]
    main = sorted(runs) or (groups[0]["devices"] if groups else [])
    compared = next((g["devices"] for g in groups if len(g["devices"]) > 1 and
                     (g["kind"] == "programs" or not runs)), [])
    if len(groups) == 1:
        compared = groups[0]["devices"]
    return main, compared


def step_programs(evs, exec_starts, crit, first: dict) -> tuple:
    """One GPU's events of one step: how many of the step's program executions ran kernels on
    it, its programs in order of their first kernel (`first`: program -> that kernel's start)
    with their executions (`module xN`), and the critical stream's idle between the kernels of
    two different executions while the host was still launching the next one (the dispatch
    between programs: the host_late gaps that lie between two executions). An event belongs to
    the execution whose host events began last before its launch (its own start where it joined
    no launch)."""
    if len(exec_starts) <= 1:
        # no execution, or one (the common case of one program per step): no dispatch between
        # programs
        mods = sorted(first, key=lambda m: (first[m], m))
        if not exec_starts:
            return None, "; ".join(mods), None
        return (1 if mods else 0), "; ".join(f"{m} x1" for m in mods), 0
    idx_of = {}
    for e in evs:
        L = e.launch
        t = L["start"] if L is not None and e.join in rules.QUEUED_BY else e.start
        idx_of[e] = max(0, bisect.bisect_right(exec_starts, t) - 1)
    order = sorted(evs, key=operator.attrgetter("start"))
    runs: dict[str, set] = {}
    for e in order:
        if m := e.module:
            runs.setdefault(m, set()).add(idx_of[e])
    # on the critical stream, as classify_gaps cuts it: a host_late gap (the next kernel's launch
    # call had not ended when the stream went idle) between two executions' kernels; so the
    # dispatch is a part of host_late_us, never more (a copy on another stream inside the gap
    # does not cut it; a gap before a kernel queued in time waits on the device)
    between = 0
    cur_end, cur_idx = None, None
    for e in order:
        if crit is not None and e.lane != crit:
            continue
        i = idx_of[e]
        if cur_end is not None and e.start > cur_end and i != cur_idx:
            between += sum(b - a for a, b, cause in gap_parts(cur_end, e) if cause == "host_late")
        if cur_end is None or e.end > cur_end:
            cur_end, cur_idx = e.end, i
    executions = len({idx_of[e] for e in evs if e.module})
    programs = "; ".join(f"{m} x{len(ix)}" for m, ix in runs.items())
    return executions, programs, between


def gpu_groups(work: dict) -> list[dict]:
    """GPUs grouped by the programs they run in the analysed steps (module names of their
    kernels), the group with the most GPU time first; `work`: (GPU, step) -> what its events
    hold (gpu_step_pass: modules, ps, events, copies, memcpy). A GPU that runs no program's
    kernels is said for what it holds: argument copies only (memcpys outside a program),
    memcpys only, or kernels without a program label. Work is compared, and a straggler named,
    only inside a group: GPUs that run other programs do other work."""
    per: dict[int, dict] = {}
    for (d, _), w in work.items():
        g = per.setdefault(d, {"modules": set(), "ps": 0, "events": 0, "copies": 0, "memcpy": 0})
        g["modules"] |= w["modules"]
        for k in ("ps", "events", "copies", "memcpy"):
            g[k] += w[k]
    groups: dict[tuple, dict] = {}
    for d, g in sorted(per.items()):
        key = tuple(sorted(g["modules"]))
        kind = ("programs" if key else "argument copies only" if g["copies"] == g["events"]
                else "memcpys only" if g["copies"] + g["memcpy"] == g["events"]
                else "kernels without a program label")
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
    by: dict[int, list] = {}
    for r in step_rows:
        by.setdefault(r["step"], []).append(r)
    # the next step's start: on its GPUs where analysed (skip_analysis.device_starts)
    nxt = {st.number: min((r["start_ps"] for r in by.get(order[i + 1].number, ())),
                          default=order[i + 1].start) for i, st in enumerate(order[:-1])}
    partial = {s.number for s in a.analysed if s.partial}
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
    # those followed by another step where any are: the steps step 6 uses (a period, the idle
    # between steps), so that steps 3 and 6 speak of one median step
    followed = [f for f in pool if f["next_start_us"] is not None]
    median, why = None, ""
    if pool:
        ranked = sorted(followed or pool, key=lambda f: (f["dur_us"], f["step"]))
        median = ranked[(len(ranked) - 1) // 2]["step"]
        why = (f"step {median}: the lower-median duration of the {len(ranked)} "
               f"{'complete ' if pool is not frames or not partial else ''}analysed step(s)"
               + (" followed by another" if followed and len(followed) < len(pool) else ""))
    return {"median_step": median, "why": why, "steps": frames,
            "margin": {"floor_us": STRAGGLER_MIN_LEAD_PS / 1e6,
                       "pct_of_step": 100.0 * STRAGGLER_MIN_LEAD_SHARE},
            "label": "measured"}


def compile_summary(a: Analysis) -> dict | None:
    """XLA compiling on the host inside the analysed steps (trace_rules.COMPILE_RE: the union
    of those events, nested ones counted once), from each step's start to the next step's:
    the time per step, where any step holds some; None where none does (nothing is said)."""
    if a.compiled is False:
        a.compiled = _compile_summary(a)
    return a.compiled


def _compile_summary(a: Analysis) -> dict | None:
    names = {n for n in {h["name"] for events in a.host_threads.values() for h in events}
             if rules.COMPILE_RE.match(n)}  # each name judged once
    if not names:
        return None
    iv = sorted((h["start"], h["start"] + h["dur"]) for events in a.host_threads.values()
                for h in events if h["name"] in names)
    order = sorted(a.steps, key=lambda st: st.start)
    nxt = {st.number: order[i + 1].start for i, st in enumerate(order[:-1])}
    per = {st.number: union_ps([(max(s, st.start), min(e, end)) for s, e in iv if s < end
                                and e > st.start]) for st in a.analysed
           for end in [max(st.end, nxt.get(st.number, st.end))]}
    # a step no step follows is seen to its end only: its zero is unseen (a compile after it)
    per = {n: p for n, p in per.items() if p or n in nxt} or per
    if not any(v := list(per.values())):
        return None
    return {"per_step_us": spread(v, "us", "measured", 1e-6), "total_us": round(sum(v) * 1e-6, 3),
            "steps_with_compile": sum(1 for p in v if p), "steps": len(v), "events": len(iv),
            "compiling_steps": [n for n, p in per.items() if p], "label": "measured"}


def compile_note(c: dict) -> str | None:
    """A sentence where XLA compiles in fewer than half the analysed steps (a first call, an
    occasional new shape): the medians leave it out, so no change ranks it; None otherwise."""
    if 2 * c["steps_with_compile"] >= c["steps"]:
        return None
    steps = ", ".join(str(n) for n in c["compiling_steps"])
    return (f"XLA compiles on the host in {c['steps_with_compile']} of {c['steps']} analysed "
            f"steps (step {steps}; {c['per_step_us']['max']:,.1f} us at most): a first call or "
            "an occasional new shape, a one-off the step medians leave out (skip_stats.json "
            "compile); where it recurs over a run, it costs its total over the steps it spans")


def first_device_event(a: Analysis, step_rows, info, dispatched: bool = False) -> dict:
    """step -> the start of the step's first event on the device that ends it (with
    `dispatched`: (that start, the start of the host call that queued it, or None))."""
    bound = {r["step"]: r["device"] for r in bounding_rows(step_rows, info)}
    first: dict = {}
    for ev in a.events:
        key = (ev.step, ev.device)
        if bound.get(ev.step) == ev.device and ev.start < first.get(key, (ev.end + 1,))[0]:
            first[key] = (ev.start, ev.launch["start"] if ev.launch else None)
    return {st.number: (f if dispatched else f[0]) if (f := first.get(
        (st.number, bound.get(st.number)))) else None for st in a.analysed}


def host_to_device_summary(a: Analysis, step_rows, info) -> dict | None:
    """Copies from the host to the device before each step's device work starts (the reader's
    `host_copies`: their host-side work, and, where the step's program was queued before its
    first transfer began, that transfer until the device's first event of the step), from the
    step's start to the first event of the device that ends it: per step their union
    (`per_step_us`), the transfers' part (`transfer_us`), the bytes they carried; the name with
    the most host work. None where no step holds any or the reader records none (a GPU)."""
    copies = getattr(a, "host_copies", None)
    if not copies or not (copies["work"] or copies["transfers"]):
        return None
    first = first_device_event(a, step_rows, info, dispatched=True)
    per, moving, carried, names = [], [], [], {}
    for st in a.analysed:
        if first.get(st.number) is None:
            continue
        t1, queued = first[st.number]
        work = [(max(s, st.start), min(e, t1), n) for s, e, n in copies["work"]
                if s < t1 and e > st.start]
        sent = [(s, b) for s, b in copies["transfers"] if st.start <= s < t1]
        # a transfer holds the device back only where its program was queued before it began
        # (else the device waits for the dispatch, and what the transfer took is unknown)
        span = [(sent[0][0], t1)] if sent and queued is not None and queued <= sent[0][0] else []
        per.append(union_ps([(s, e) for s, e, _ in work] + span))
        moving.append(t1 - span[0][0] if span else 0)
        carried.append(sum(b for _, b in sent))
        for s, e, n in work:
            names[n] = names.get(n, 0) + e - s
    if not per or not any(per):
        return None
    return {"per_step_us": spread(per, "us", "measured", 1e-6),
            "transfer_us": spread(moving, "us", "measured", 1e-6),
            "bytes_per_step": spread(carried, "bytes", "read"),
            "largest": max(sorted(names), key=names.get) if names else "", "label": "measured"}


def host_work_summary(a: Analysis, step_rows, info) -> dict | None:
    """The host's own Python work before each step's device work starts, per step: the
    outermost traced calls wholly between the step's start and the first event of the device
    that ends it (a producer, set-up; not the loop's body around the dispatch); and the call
    with the most of it. None without the Python tracer, where no step holds any, and on a GPU
    (checked on TPU pairs: the lab's input pipeline, 14.5 ms estimated, 14.1 ms saved)."""
    tree = getattr(a, "call_tree", None)
    if tree is None or getattr(a, "tpu_joins", None) is None:  # measured on TPU pairs only
        return None
    first = first_device_event(a, step_rows, info)
    per, names = [], {}
    for st in a.analysed:
        if (t1 := first.get(st.number)) is None:
            continue
        calls = tree.inside(st.start, t1)
        per.append(sum(h["dur"] for h in calls))
        for h in calls:
            names[h["name"]] = names.get(h["name"], 0) + h["dur"]
    if not per or not any(per):
        return None
    top = max(sorted(names), key=names.get)
    return {"per_step_us": spread(per, "us", "measured", 1e-6), "largest_call": top,
            "largest_call_us_per_step": names[top] / len(per) / 1e6, "label": "measured"}


def dispatch_summary(a: Analysis, step_rows) -> dict | None:
    """Steps that hold several program executions: executions per step, the GPU idle between
    two executions' kernels (steps.csv), and the Python-traced call that encloses a step's
    dispatches in most steps (the function to jit whole)."""
    rows = [r for r in step_rows if r.get("executions")]
    if not rows or max(r["executions"] for r in rows) < 2:
        return None
    tree = getattr(a, "call_tree", None)
    names = [] if tree is None else [n for st in a.analysed if (n := enclosing_call(tree, st))]
    top = max(sorted(set(names)), key=names.count) if names else None
    return {"executions_per_step": spread([r["executions"] for r in rows], "count", "measured"),
            "between_programs_idle_us": spread([r["between_programs_ps"] for r in rows], "us",
                                               "measured", 1e-6),
            "enclosing_call": top, "enclosing_call_steps": names.count(top) if top else 0,
            "steps": len(a.analysed), "label": "measured"}


def group_sentence(g: dict, steps: int) -> str:
    """What a group of GPUs holds, in words (per analysed step)."""
    n, per = len(g["devices"]), max(steps, 1)
    who = f"GPU{'' if n == 1 else 's'} {', '.join(map(str, g['devices']))}"
    events, us = g["events"] / per / n, g["gpu_ps"] / 1e6 / per / n  # per GPU and step
    if g["kind"] == "programs":
        progs = ", ".join(g["programs"][:6]) + (f" and {len(g['programs']) - 6} more"
                                               if len(g["programs"]) > 6 else "")
        return (f"{who} {'runs' if n == 1 else 'run'} {progs}: {events:,.0f} GPU events and "
                f"{us:,.1f} us of GPU time per GPU and step")
    return (f"{who} {'holds' if n == 1 else 'hold'} {g['kind']}: {events:,.0f} events, "
            f"{us:,.1f} us per GPU and step ({g['copies']} argument copies in all)")


def device_word(a: Analysis) -> str:
    """What the devices are called in sentences: a TPU's cores, else GPUs."""
    return "TPU core" if getattr(a, "tpu_joins", None) is not None else "GPU"


def verdict(a: Analysis, step_rows, info) -> tuple[str, list, dict]:
    """Apply the named thresholds on the GPU that finishes each step last: the verdict, the
    lines of its rule, and the figures it was weighed on."""
    if not step_rows:
        return "not computable", ["no analysed step has GPU events"], {}
    bound = bounding_rows(step_rows, info)
    host = [r["host_late_ps"] / r["dur_ps"] for r in bound if r["dur_ps"]]
    busy = [(r["dur_ps"] - r["host_late_ps"] - r["unknown_gap_ps"]) / r["dur_ps"]
            for r in bound if r["dur_ps"]]
    coll = [r["collective_ps"] / r["dur_ps"] for r in bound if r["dur_ps"]]
    unknown = [r["unknown_gap_ps"] / r["dur_ps"] for r in bound if r["dur_ps"]]
    main = set(info.get("main_group") or ()) or {r["device"] for r in step_rows}
    h, b, c, u = (statistics.median(x) for x in (host, busy, coll, unknown))
    # GPUs that wait for a straggler spend it inside collective kernels: take the GPU that
    # spends the most step time in collectives, not only the bounding one
    coll_all = [r["collective_ps"] / r["dur_ps"] for r in step_rows
                if r["dur_ps"] and r["device"] in main]
    c_max = max(coll_all) if coll_all else 0.0
    figures = {"host_share": host, "busy_share": busy, "collective_share": coll,
               "unknown_share": unknown}
    dev = device_word(a)
    rule = (f"on the {dev} that finishes each step last (among those that run the step's "
            f"programs), {'its op line' if dev != 'GPU' else 'critical stream'}: host-late share "
            f"{h:.1%}, busy-or-queued share {b:.1%}, collective share {c:.1%}, unknown gap "
            f"share {u:.1%} (medians over {len(bound)} steps)")
    name, fired = weigh(h, b, max(c, c_max), u, len(main))
    lines = [rule] + fired
    between, between_figures = weigh_between_steps(a, bound, name)
    figures.update(between_figures)
    period = between_figures.get("period_device_share")
    moved = None  # the verdict over the period, where the idle between steps changes it
    if period is None:
        pass
    elif name in ("device-bound", "mixed") and period < LAUNCH_PERIOD_DEVICE_BELOW:
        moved = "launch-bound", (
            f"{name} within the step, but the {dev} works {period:.1%} of the step period < "
            f"LAUNCH_PERIOD_DEVICE_BELOW {LAUNCH_PERIOD_DEVICE_BELOW:.0%}: host-bound over the "
            "period (launch-bound: the idle between steps, the host's, is most of the wall time)")
    elif name == "device-bound" and period < PERIOD_DEVICE_SHARE:
        moved = "mixed", (f"device-bound within the step, but the {dev} works {period:.1%} of "
                          f"the step period < PERIOD_DEVICE_SHARE {PERIOD_DEVICE_SHARE:.0%}: "
                          "mixed over the period (the idle between steps is the rest)")
    elif name == "launch-bound" and period >= LAUNCH_PERIOD_DEVICE_BELOW:
        moved = "mixed", (f"launch-bound by its host-late share, but the {dev} works "
                          f"{period:.1%} of the step period >= LAUNCH_PERIOD_DEVICE_BELOW "
                          f"{LAUNCH_PERIOD_DEVICE_BELOW:.0%}: mixed over the period")
    if moved:
        name = moved[0]
        between.append(moved[1])
        if "qualifier" in figures:
            figures["qualifier"] = f"{name} over the period: " + figures["qualifier"]
    return name, lines + between, figures


def bounding_rows(step_rows, info) -> list[dict]:
    """Per step, the steps.csv row of the GPU that ends it last among those that run the step's
    programs (every GPU where none does; the lowest ordinal among equals)."""
    by = {(r["step"], r["device"]): r for r in step_rows}
    bound = []
    main = set(info.get("main_group") or ())
    for num, ends in info["ends"]:
        mine = {d: t for d, t in ends.items() if d in main} or ends
        last = max(sorted(mine), key=lambda d: mine[d])
        bound.append(by[(num, last)])
    return bound


def weigh(h: float, b: float, c: float, u: float, gpus: int) -> tuple[str, list]:
    """The verdict from the median shares of the step on the bounding GPU (host-late `h`,
    busy-or-queued `b`, unknown gaps `u`), the largest collective share `c` on any GPU that runs
    the step, and how many GPUs run it; with the thresholds that fired, in words."""
    fired = []
    if gpus > 1 and c >= COLLECTIVE_BOUND_SHARE:
        fired.append(f"collective share up to {c:.1%} of a step on one GPU >= "
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
        # each threshold with the share it was held against: a mixed verdict says why
        fired.append(f"no threshold fired alone: host-late share {h:.1%} < "
                     f"LAUNCH_BOUND_HOST_SHARE {LAUNCH_BOUND_HOST_SHARE:.0%}; busy-or-queued "
                     f"share {b:.1%} " + (
                         f"< DEVICE_BOUND_BUSY_SHARE {DEVICE_BOUND_BUSY_SHARE:.0%}"
                         if b < DEVICE_BOUND_BUSY_SHARE else
                         f">= DEVICE_BOUND_BUSY_SHARE {DEVICE_BOUND_BUSY_SHARE:.0%} but host-late "
                         f"share >= HOST_SHARE_NEGLIGIBLE {HOST_SHARE_NEGLIGIBLE:.0%}")
                     + (f"; collective share up to {c:.1%} < COLLECTIVE_BOUND_SHARE "
                        f"{COLLECTIVE_BOUND_SHARE:.0%}" if gpus > 1 else ""))
        name = "mixed"
    if u > HOST_SHARE_NEGLIGIBLE:
        fired.append(f"caution: {u:.1%} of the bounding stream's step is gaps of unknown cause "
                     "(graph kernels or unjoined events)")
    near = [(what, v, t, n) for what, v, t, n in (
        ("host-late share", h, LAUNCH_BOUND_HOST_SHARE, "LAUNCH_BOUND_HOST_SHARE"),
        ("host-late share", h, HOST_SHARE_NEGLIGIBLE, "HOST_SHARE_NEGLIGIBLE"),
        ("busy-or-queued share", b, DEVICE_BOUND_BUSY_SHARE, "DEVICE_BOUND_BUSY_SHARE"),
        ("collective share", c if gpus > 1 else None, COLLECTIVE_BOUND_SHARE,
         "COLLECTIVE_BOUND_SHARE")) if v is not None and abs(v - t) < BORDERLINE_POINTS]
    for what, v, t, n in near:
        fired.append(f"caution: borderline: {what} {v:.1%} is within "
                     f"{BORDERLINE_POINTS:.0%} of the step of {n} {t:.0%}; the verdict could "
                     "fall the other way in another capture (the per-step range: figures)")
    return name, fired


def weigh_between_steps(a: Analysis, bound: list[dict], name: str) -> tuple[list, dict]:
    """The idle between steps on the bounding GPU, against the step period: the rule's lines,
    and the figures `between_share`, `between_cause` and, at BETWEEN_STEPS_SHARE or more,
    `qualifier` (the verdict holds within the step only). Nothing without a next step."""
    if not (between := [r for r in bound if r.get("period_ps")]):
        return [], {}
    shares = [r["idle_between_ps"] / r["period_ps"] for r in between]
    share = statistics.median(shares)
    period_device = statistics.median(
        (r["dur_ps"] - r["host_late_ps"] - r["unknown_gap_ps"]) / r["period_ps"]
        for r in between)
    causes = [r["between_cause"] for r in between if r["idle_between_ps"]]
    cause = max(sorted(set(causes)), key=causes.count) if causes else "none (no idle)"
    figures = {"between_share": shares, "between_cause": cause,
               "period_device_share": period_device}
    words = cause_words(cause, getattr(a, "python_tracer_on", False))
    dev = device_word(a)
    lines = [f"between steps, on the same {dev}: {share:.1%} of the step period (start to "
             f"the next step's start) is {dev} idle after the step's last "
             f"{'kernel' if dev == 'GPU' else 'op'} (median "
             f"over {len(between)} steps); host in that idle: {words}"]
    if share >= BETWEEN_STEPS_SHARE:
        figures["qualifier"] = (f"{name} within the step; {share:.0%} of the step period is "
                                f"between steps, {words} (cause: {cause})")
        lines.append(f"between-steps share {share:.1%} >= BETWEEN_STEPS_SHARE "
                     f"{BETWEEN_STEPS_SHARE:.0%}: the verdict holds within the step only")
    return lines, figures


def spread(values, unit: str, label: str, scale: float = 1.0) -> dict | None:
    """A figure across steps and GPUs: median, min, max and how many values (`n`: a median of
    two is their mean, said as the two values); None where nothing was measured."""
    values = [v * scale for v in values if v is not None]
    if not values:
        return None
    return {"value": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values), "unit": unit, "label": label}


def build_result(a: Analysis, joins, name, rule, figures, step_rows, info) -> dict:
    """Everything summary.txt says, as data (fields: references/scratch-layout.md)."""
    result = result_head(a, joins, name, rule)
    if not step_rows:
        return result
    weighed = weighed_rows(step_rows, info)
    result["figures"] = step_figures(weighed, figures)
    result["figures_devices"] = sorted({r["device"] for r in weighed})
    result["verdict_qualifier"] = figures.get("qualifier")
    if any(r.get("period_ps") for r in step_rows):
        result["between_steps"] = {"cause": figures.get("between_cause"), "label": "inferred",
                                   "threshold_pct_of_period": 100.0 * BETWEEN_STEPS_SHARE}
    host = sum(r["host_late_ps"] for r in step_rows)
    span = sum(r["dur_ps"] for r in step_rows)
    result["host_device_split"] = {"host_pct_of_step": 100 * host / span,
                                   "device_pct_of_step": 100 - 100 * host / span,
                                   "label": "inferred"}
    result["dispatch"] = dispatch_summary(a, step_rows)
    work = host_work_summary(a, step_rows, info)
    if work is not None:  # absent without the Python tracer or host work before the device's
        result["host_work_before_device"] = work
    copies = host_to_device_summary(a, step_rows, info)
    if copies is not None:  # absent where no host-to-device copy runs before the device's work
        result["host_to_device_before_device"] = copies
    compiled = compile_summary(a)
    if compiled is not None:  # absent where no step compiles (every capture's result alike)
        result["compile"] = compiled
        if said := compile_note(compiled):
            result["notes"].append(said)
    result["frames"] = step_frames(a, step_rows, info)
    result["gpu_groups"] = group_entries(info, len({r["step"] for r in step_rows}))
    if len(result["gpu_groups"]) > 1:
        result["notes"].append(groups_note(result["gpu_groups"], info))
    gpus = sorted(info.get("compared") or ())
    if len(gpus) > 1:
        sub = dict(info, ends=[(n, {d: t for d, t in e.items() if d in gpus})
                               for n, e in info["ends"]])
        result["straggler"] = straggler([r for r in step_rows if r["device"] in gpus], sub,
                                        PS_TO_US)
        if str(a.step_source).startswith("the whole capture"):
            # one window that is not a step: which GPU ends it last says nothing about steps
            result["straggler"]["is_straggler"] = False
    return result


def result_head(a: Analysis, joins, name, rule) -> dict:
    """The result of a trace before its figures: status, verdict, the steps, the joins, notes
    and refusals; every later field empty (None, [] or {}): the whole result where no analysed
    step has GPU events."""
    analysed = {s.number for s in a.analysed}
    total = len(a.events)
    return {
        "step": "skip_stats", "status": "done" if a.events else "not computable",
        "verdict": name, "rule": rule,
        "steps": {"source": a.step_source, "analysed": [s.number for s in a.analysed],
                  "skipped_partial": [s.number for s in a.steps
                                      if s.partial and s.number not in analysed],
                  "partial_analysed": [s.number for s in a.analysed if s.partial]},
        "joins": {k: joins.get(k, 0) for k in JOIN_KEYS + ("shared_ids_without_graph_launch",)
                  + (("dispatch",) if joins.get("dispatch") else ())},
        "gpu_events": total, "device_kind": "TPU" if device_word(a) != "GPU" else "GPU",
        "join_rate_pct_of_gpu_events": 100.0 * joins.get("launch", 0) / total if total else 0.0,
        "figures": {}, "host_device_split": None, "straggler": None, "gpu_groups": [],
        "dispatch": None, "frames": None,
        "verdict_qualifier": None, "between_steps": None,
        "notes": list(a.notes), "refusals": list(a.refusals),
        "needs_new_capture": [NEEDS_NEW_CAPTURE],
    }


# skip_stats.json's figures that summarise a steps.csv column over every row (median, min,
# max): (figure, the step row's key, unit, label); the column is the key in the table's unit
# (dur_ps: dur_us). A reader cross-checks the table against them (compare.py).
STEP_FIGURES = (
    ("step_duration_us", "dur_ps", "us", "measured"),
    ("kernels_per_step_per_device", "kernels", "count", "measured"),
    ("busy_us", "busy_ps", "us", "measured"),
    ("union_idle_us", "union_idle_ps", "us", "measured"),
    ("il_idle_us", "il_idle_ps", "us", "measured"),
    ("tklqt_us", "tklqt_ps", "us", "measured"),
    ("akd_us", "akd_ps", "us", "measured"),
    ("il_us", "il_ps", "us", "measured"),
    ("executions_per_step", "executions", "count", "measured"),
    ("between_programs_idle_us", "between_programs_ps", "us", "measured"))


# steps.csv's cells are written to 3 decimals of a microsecond (2 of a percent): the median of a
# column and skip_stats.json's figure of it, and a row's duration and its end minus its start,
# agree within this, or the table is not the one step 1 wrote with its result
AGREE_WITHIN = 0.006


def steps_disagree(rows: list, skip: dict) -> str:
    """Where steps.csv disagrees with itself or with the skip_stats.json it was written with (a
    row's duration against its start and end; its row count; each column's median against the
    figure of the same name over as many rows), the sentence saying so; else ''."""
    for r in rows:
        s, e, d = (number(r.get(k)) for k in ("start_us", "end_us", "dur_us"))
        if None not in (s, e, d) and abs(e - s - d) > AGREE_WITHIN:
            return (f"steps.csv's step {r.get('step')} on GPU {r.get('device')} lasts "
                    f"{d:,.3f} us but runs from {s:,.3f} to {e:,.3f} us")
    told = (skip.get("tables") or {}).get("steps.csv")
    if isinstance(told, int) and told != len(rows):
        return f"steps.csv has {len(rows)} rows where skip_stats.json says {told}"
    columns = {key: col[:-3] + "_us" if col.endswith("_ps") else col
               for key, col, _, _ in STEP_FIGURES}
    for name, fig in (skip.get("figures") or {}).items():
        column = columns.get(name, name)
        if not rows or column not in rows[0] or not isinstance(fig, dict):
            continue
        cells = [v for v in (number(r.get(column)) for r in rows) if v is not None]
        value = number(fig.get("value"))
        if cells and value is not None and fig.get("n") == len(cells) and \
                abs(statistics.median(cells) - value) > AGREE_WITHIN:
            return (f"steps.csv's {column} has the median {statistics.median(cells):,.3f} where "
                    f"skip_stats.json's {name}, written with it, says {value:,.3f}")
    return ""


def weighed_rows(step_rows, info) -> list:
    """The step rows the figures are medians over: where the GPUs do different work (step 1's
    groups), those of the GPUs that run the step's programs (the verdict's, `main_group`),
    never a median across unlike GPUs (one GPU's compute steps with another's copies); else
    every row."""
    main = set(info.get("main_group") or ())
    if len(info.get("groups") or ()) < 2 or not main:
        return step_rows
    return [r for r in step_rows if r["device"] in main] or step_rows


def step_figures(step_rows, figures) -> dict:
    """The result's `figures`: each steps.csv measure across steps and GPUs, and the verdict's
    shares on the bounding GPU, as spreads (median, min, max)."""
    fig = {key: spread([r[col] for r in step_rows], unit, label, PS_TO_US if unit == "us" else 1.0)
           for key, col, unit, label in STEP_FIGURES}
    for key in ("host_share", "busy_share", "collective_share"):
        fig[key + "_pct_of_step"] = spread(figures.get(key, []), "pct", "inferred", 100.0)
    with_period = [r for r in step_rows if r.get("period_ps")]
    fig["period_us"] = spread([r["period_ps"] for r in with_period], "us", "measured", PS_TO_US)
    fig["idle_between_us"] = spread([r["idle_between_ps"] for r in with_period], "us",
                                    "measured", PS_TO_US)
    fig["idle_between_pct_of_period"] = spread(
        [r["idle_between_ps"] / r["period_ps"] for r in with_period], "pct", "measured", 100.0)
    # the same ratio of measured times as idle_between_pct_of_period, on the bounding GPU only:
    # one label for one kind of value
    fig["between_share_pct_of_period"] = spread(figures.get("between_share", []), "pct",
                                                "measured", 100.0)
    return fig


def group_entries(info, n_steps: int) -> list[dict]:
    """The result's `gpu_groups`: each group of GPUs with its work per GPU and step, its
    sentence, whether its work is compared and whether it runs the step."""
    return [
        {"devices": g["devices"], "kind": g["kind"], "programs": g["programs"],
         "events_per_device_and_step": g["events"] / max(n_steps, 1) / len(g["devices"]),
         "device_us_per_device_and_step": {"value": g["gpu_ps"] * PS_TO_US / max(n_steps, 1)
                                     / len(g["devices"]), "unit": "us", "label": "measured"},
         "argument_copies": g["copies"], "sentence": group_sentence(g, n_steps),
         "compared": g["devices"] == info.get("compared"),
         "runs_step": g["kind"] == "programs" or g["devices"] == info.get("main_group")}
        for g in info.get("groups") or []]


def groups_note(entries: list[dict], info) -> str:
    """The note of a capture whose GPUs do different work: each group's sentence, which GPUs
    are compared, and which GPUs the verdict is weighed on."""
    gpus = sorted(info.get("compared") or ())
    return ("GPUs do different work: " + "; ".join(g["sentence"] for g in entries)
            + (f". Work is compared and a straggler named only among GPUs "
               f"{', '.join(map(str, gpus))}, the group of GPUs that run the same programs with "
               "the most GPU time" if gpus else
               ". No two GPUs run the same programs (pipeline stages, or one GPU with work): "
               "work is not compared and no straggler is named")
            + "; the verdict is weighed on the GPU that ends each step last among GPU(s) "
            + ", ".join(map(str, info.get("main_group") or [])) + ", which run the step's "
            "programs")


def straggler(step_rows, info, us_) -> dict:
    """Which GPU ends each step last, by how much, and whether that is a straggler: one GPU last
    in most of the steps, each time ahead of the next GPU by more than the margin (the one rule
    of steps 1, 3 and 6 and of the hosts: trace_rules.last_alone, majority_last); a step whose
    two last GPUs end within the margin is a tie."""
    dur = {(r["step"], r["device"]): r["dur_ps"] for r in step_rows}
    spreads, lasts, leads = [], [], {}
    for num, ends in info["ends"]:
        spreads.append(max(ends.values()) - min(ends.values()))
        if len(ends) < 2:
            continue
        top_now = max(ends, key=lambda d: (ends[d], -d))  # the margin is of its step's length
        last, lead = rules.last_alone(ends, dur.get((num, top_now), 0))
        lasts.append(last)  # None: a tie
        if last is not None:
            leads.setdefault(last, []).append(lead)
    ties = lasts.count(None)
    top, is_straggler, counts = rules.majority_last(lasts)
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


def python_lines(calls_of) -> list[dict]:
    """Host time under the Python tracer, per traced name (`$<file>:<line> <function>`, or
    `$builtins <function>`): calls, total (inclusive) and self time (less the traced calls
    nested in it on the same thread; a call that blocks, waiting for the GPUs, holds that
    wait as its own time), threads; by self time, largest first. The profiler's own start and
    stop calls are left out. `calls_of`: the traced calls' nesting (step_framing.CallTree, or
    the host thread map it is built from; None: the tracer was off). Empty when the tracer was
    off."""
    tree = CallTree.of(calls_of)
    per: dict[str, dict] = {}
    threads = zip(tree.keys, tree.threads, strict=True) if tree else ()
    for key, (_, calls, parent, _) in threads:
        accs = []
        for h, p in zip(calls, parent, strict=True):
            if (acc := per.get(h["name"])) is None:
                acc = per[h["name"]] = {"name": h["name"], "calls": 0, "total_ps": 0,
                                        "self_ps": 0, "threads": set()}
            acc["calls"] += 1
            acc["total_ps"] += h["dur"]
            acc["self_ps"] += h["dur"]
            acc["threads"].add(key)
            if p >= 0:  # nested in the call around it: not that call's own time
                up = calls[p]
                accs[p]["self_ps"] -= min(h["start"] + h["dur"], up["start"] + up["dur"]) - \
                    h["start"]
            accs.append(acc)
    return sorted(per.values(), key=lambda r: (-r["self_ps"], r["name"]))


def python_tracer(py: list) -> dict:
    """skip_stats.json `python_tracer` from python_lines' rows: names, calls, their own time and
    the host threads they ran on."""
    return {"names": len(py), "calls": sum(r["calls"] for r in py),
            "self_us": {"value": sum(r["self_ps"] for r in py) / 1e6, "unit": "us",
                        "label": "measured"},
            "threads": len({t for r in py for t in r["threads"]})}
