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

import bisect
import gc
import itertools
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import gpu_events
import model_checks  # step 2's checks 2 to 5, handed on
from gap_causes import GapIndex
from gpu_events import (
    collect,
    device_step_line,
    host_copies,
    join_events,
    join_program_runs,
    launch_threads_to_exec,
)
from skip_analysis import (
    Analysis,
    build_result,
    per_step_rows,
    python_lines,
    python_tracer,
    step_refusals,
    verdict,
)
from skip_writers import (
    GPU_CHILD,
    GapsJob,
    rows_job,
    write_python_lines,
    write_result,
    write_tables,
)
from step_framing import (
    CallTree,
    assign_steps,
    find_steps,
    host_scan,
    mark_partial,
    program_call_starts,
)
from tracekit import capture_inputs, row_facts, scratch, step_cli, trace_reader
from tracekit import trace_rules as rules
from tracekit.step_cli import progress

# XLA's trace exporter (jaxlib 0.10.2) keeps at most this many events and drops the rest by time.
EXPORTER_EVENT_CAP = 1_000_000


def analyse(trace, release: bool = False) -> tuple[Analysis, dict]:
    """Step 1 on a trace up to its steps: the GPU events joined to their host calls, the steps
    framed and each event given its step, the notes and what cannot be computed; returns the
    Analysis and the join counts. What the trace lacks is said in the Analysis, never raised.
    `release`: trace.events is emptied as it is read (gpu_events.collect, which also counts
    the trace's totals for steps 0 and 2: Analysis.trace_totals)."""
    events = trace.complete
    progress("collecting GPU and host events", events, unit="trace events")
    c = collect(trace, release)
    gpu, other_gpu_lines, host_threads, by_corr = c.gpu, c.other_gpu_lines, c.host_threads, \
        c.by_corr
    notes = []
    if events == EXPORTER_EVENT_CAP:
        notes.append(f"the trace holds exactly {EXPORTER_EVENT_CAP:,} complete events, the trace "
                     "exporter's cap: events after its last time are missing, and a line may "
                     "be missing whole (the xplane has them), so the last step is cut")
    notes += gpu_events.stand_in_notes(trace, c.per_stream)
    if other_gpu_lines:
        notes.append(f"{other_gpu_lines} events on GPU lines that are not streams (derived lines "
                     "such as Steps or TensorFlow Ops) were left out")
    tpu_joins = join_program_runs(c, host_threads)
    progress("joining GPU events to their launches", len(gpu), unit="GPU events")
    joins, launch_sample = join_events(gpu, by_corr)
    scan = host_scan(host_threads, c.marked)  # one pass over the host events for the steps
    if tpu_joins is not None:
        notes += tpu_notes(tpu_joins, len(gpu))
        for h, module in tpu_joins["executions"]:  # a TPU's program runs, from their dispatch
            scan["threads"].setdefault(h["thread"], ([], []))[0].append(
                (h["start"], h["start"] + h["dur"], module))
    tree = CallTree(host_threads, scan) if scan["tracer"] else None  # the Python calls' nesting
    progress("finding the steps", len(gpu), unit="GPU events")
    annotated = len({h["args"].get("step_num") for h in scan["marks"]})
    line_notes, line_steps = device_step_line(c, annotated, tpu_joins)
    notes += line_notes
    if line_steps:
        steps, source, step_notes = device_line_steps(line_steps, scan), \
            "the device's Steps line", []
    else:
        steps, source, step_notes = find_steps(gpu, host_threads, c.last_end, scan, tree)
    notes += step_notes
    program_call_starts(gpu, steps)
    assign_steps(gpu, steps)
    analysed = mark_partial(gpu, steps, max(itertools.chain((e.end for e in gpu), (  # the steps'
        h["start"] + h["dur"] for v in host_threads.values() for h in v  # own marks left out
        if "step_num" not in h["args"])), default=None))
    refusals = step_refusals(gpu, bool(by_corr) or bool(joins.get("dispatch")), analysed)
    if gpu and not analysed:
        analysed = list(steps)  # only partial steps (refused): they are what there is
    exec_of = launch_threads_to_exec(launch_sample, host_threads, c.unordered)
    a = Analysis(gpu, steps, source, analysed, refusals=refusals, notes=notes, joins=joins,
                 exec_of=exec_of, host_threads=host_threads, python_tracer_on=scan["tracer"],
                 call_tree=tree,
                 gap_events=GapIndex(host_threads, c.marked, bool(tpu_joins), c.unordered),
                 thread_names=trace.threads,
                 trace_totals=(c.per_stream, c.facts), tpu_joins=tpu_joins,
                 host_copies=host_copies(c, host_threads, tpu_joins))
    return a, joins


def device_line_steps(line_steps: list, scan: dict) -> list:
    """Steps framed from the device's own step line (gpu_events.device_step_line), each with
    the program executions that began inside it."""
    from step_framing import program_executions
    from tracekit.records import Step
    execs = program_executions(None, scan)
    starts = [x.start for x in execs]
    out = []
    for n, s, e in line_steps:
        st = Step(n, s, e, "device steps")
        st.executions = execs[bisect.bisect_left(starts, s):bisect.bisect_left(starts, e)]
        out.append(st)
    return out


def tpu_notes(j: dict, ops: int) -> list[str]:
    """What joining a TPU's op runs to their program runs and dispatches left out."""
    notes = [f"TPU: {ops:,} op runs on the devices' op lines (the HLO instructions themselves); "
             f"{j['runs']:,} program runs, {j['runs_dispatched']:,} of them joined to their "
             f"host dispatch ({j['dispatch_calls']:,} dispatch calls on the host)"]
    if j["no_run"]:
        notes.append(f"TPU: {j['no_run']:,} op runs lie outside every program run on their "
                     "device: no program and no dispatch for them")
    if j["empty"]:
        n = sum(j["empty"].values())
        notes.append(f"TPU: {n:,} of the {j['runs']:,} program runs hold no op on the devices' "
                     "op lines (" + ", ".join(f"{m} x{k}" for m, k in sorted(j["empty"].items()))
                     + "): they count in the program cycle, not in a step's program executions "
                     "(steps.csv executions)")
    if (early := j.get("early", (0, 0)))[0]:
        notes.append(f"TPU: {early[0]:,} program runs start on the device's clock before their "
                     f"dispatch on the host's, by up to {early[1] / 1e6:,.1f} us (clocks aligned "
                     "roughly): a step's edges and the gaps by a dispatch are that uncertain")
    if j["runs"] > j["runs_dispatched"]:
        late, lost = j.get("late", 0), j["runs"] - j["runs_dispatched"]
        notes.append(f"TPU: {lost:,} program runs joined no dispatch ({lost - late:,} at the "
                     "capture's start: dispatched before it began or by a host not recorded; "
                     f"{late:,} at its end: their dispatch is past the trace's end): their gaps "
                     "are of unknown cause")
    return notes


def stream_names(trace) -> dict:
    """(GPU ordinal, stream thread id) -> the stream line's name in the trace."""
    gpu_pid = {pid: o for o, pid in trace.gpu_pids().items()}
    return {(gpu_pid[pid], tid): name for (pid, tid), name in trace.threads.items()
            if pid in gpu_pid}


def run(trace, out: Path) -> tuple[dict, list]:
    """Step 1 on a trace: a capture_inputs.Capture (its trace read once per process), a
    trace_reader.Trace, or a path (loaded here and freed before the tables are written).
    Writes the tables, skip_stats.json and summary.txt in `out`, each file replaced whole (a
    temporary folder first); returns the result and the (file, rows) written. Raises
    trace_reader.TraceError on a malformed trace."""
    owned = not isinstance(trace, (capture_inputs.Capture, trace_reader.Trace))
    if isinstance(trace, capture_inputs.Capture):
        trace = trace.trace  # read once per process, shared with the other steps
    elif owned:  # its events collected as they are read, half of them by a second process
        trace = trace_reader.load_trace(trace, digest=gpu_events.collect_part)
    events = trace.complete
    a, joins = analyse(trace, release=owned)  # a trace read here is let go as it is analysed
    per_stream, facts = a.trace_totals
    streams = {"streams": [[d, s, n, t] for (d, s), (n, t) in sorted(per_stream.items())],
               "events": events}
    if KEEP_TO_EXIT:  # freed by the exit, not one object at a time (about 1 s on 1M events)
        _KEPT.append(trace)
    source = scratch.identity(trace.path)
    a.stream_names = stream_names(trace)
    idle_gpus = sorted(set(trace.gpu_pids()) - {e.device for e in a.events})
    trace_path = trace.path
    del trace  # the analysis holds what it needs; free the parsed json before writing
    with rules.replace_files(out, ".skip_stats-") as tmp:
        rows = rows_job(tmp / "rows.csv", a)  # the events are final once analysed
        gaps = None
        try:
            progress("measuring each step and GPU", len(a.analysed), unit="steps")
            step_rows, stream_acc, gap_rows, info = per_step_rows(a)
            gaps = GapsJob(tmp / "gaps.csv", a, gap_rows)
            name, rule, figures = verdict(a, step_rows, info) if a.events else \
                ("not computable", ["no GPU events"], {})
            progress("writing the tables", len(a.events), unit="GPU events")
            written = write_tables(tmp, a, stream_acc, info["critical"], step_rows)
            py = python_lines(a.call_tree)  # None: the tracer was off
            written.append(("python_lines.csv", write_python_lines(tmp / "python_lines.csv", py)))
            progress("checking joins, steps, same work and stream budgets for step 2",
                     len(a.events), unit="GPU events")
            checks = model_checks.rows(a, step_rows, stream_acc, info, idle_gpus)
            n_rows, facts_of_rows, n_gpu = rows.wait()
            written[:0] = [("rows.csv", n_rows), (GPU_CHILD, n_gpu)]
            written.insert(4, ("gaps.csv", gaps.wait()))
        except BaseException:
            rows.abort()
            if gaps is not None:
                gaps.abort()
            raise
        result = build_result(a, joins, name, rule, figures, step_rows, info)
        result["python_tracer"] = python_tracer(py)
        result["tables"] = {f: n for f, n in written}
        result["capture"] = source
        if KEEP_TO_EXIT:
            _KEPT.append(a)
        written[:0] = write_result(tmp, result)
    # for step 2, which would otherwise read the trace and run this analysis again
    scratch.handoff_put(out, "trace_streams", [trace_path], streams)
    scratch.handoff_put(out, "trace_facts", [trace_path], facts)
    scratch.handoff_put(out, "model_checks", [trace_path], {"rows": checks})
    # for step 7, which would otherwise read rows.csv whole again: keyed to the table itself
    scratch.handoff_put(out, row_facts.HANDOFF, [out / "rows.csv"], facts_of_rows)
    return result, written


# Run as a command, the analysis (millions of small objects) is left for the process's exit to
# free at once (step_cli.run_and_exit) instead of object by object when run()
# returns; imported (tests, another step), nothing is kept.
KEEP_TO_EXIT = False
_KEPT: list = []


STEP = step_cli.Step("skip_stats", __doc__, __file__)


def body(args) -> list[str]:
    # Millions of small objects and no reference cycles: the cyclic collector would only rescan
    # the growing heap again and again (it doubled the run time on a 1M-event trace).
    gc.disable()
    files = capture_inputs.resolve(args.capture, run=args.run, host=args.host)
    if files.trace is None:
        raise capture_inputs.CaptureError(
            f"no <host>.trace.json.gz for host {files.host} in {files.run_dir}; "
            "skip_stats.py reads the trace, which jax.profiler writes beside the xplane.pb")
    for n in files.notes:
        step_cli.say(STEP, n)
    step_cli.claim_for(files, args.out)
    result, written = run(files.trace, args.out)
    return step_cli.wrote(args.out, written) + [
        f"verdict: {result['verdict']}",
        "Next: read summary.txt, then check streams.csv shares and gaps.csv causes "
        "(the analyzing-jax-launch-overhead skill explains each)."]


def main(argv=None) -> int:
    return step_cli.main(STEP, body, argv)


if __name__ == "__main__":
    KEEP_TO_EXIT = True
    step_cli.run_and_exit(STEP, main)
