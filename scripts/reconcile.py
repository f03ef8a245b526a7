#!/usr/bin/env python3
"""Step 2: reconciliation. Totals that independent records of one capture must agree on, checked.

Usage:
    python3 -P reconcile.py <xplane.pb | trace.json.gz | run folder | log folder>
                            [--out DIR] [--run NAME] [--host NAME]

Example:
    python3 -P $B/scripts/reconcile.py ~/logs/plugins/profile/2026_02_20_13_54_10

Writes into ./ (or DIR):
    reconciliation.csv  one row per check and device (and stream where it applies): check,
                        device, stream, status (pass / fail / not checkable), the two figures
                        compared with their unit, and the sentence for the trust list when the
                        check fails or cannot be made
    reconcile.json      the same as data, with the counts per status (references/scratch-layout.md)
The checks (SKILL.md step 2):
    1 gpu_events_json_vs_xplane  per GPU and stream: event count and summed duration in the trace
                                 and in the xplane (the exporter's 1M-event cap named as the cause
                                 where it applies)
    2 launch_join                per GPU: every GPU event joins exactly one launch call (a graph's
                                 events join its one launch); ids that join nothing, several calls
                                 or a non-launch call (a stream wait) are listed
    3 kernels_per_step           per GPU: the same number of events in every analysed step
    4 same_work_across_gpus      per GPU: events, and compute + memcpy time (collectives left
                                 out: they include waiting; argument copies left out: a GPU
                                 that receives the inputs copies more), per step against the
                                 other GPUs that run the same programs (step 1's GPU
                                 groups: a GPU that runs other programs or holds only
                                 argument copies does other work, said as such)
                                 (argument copies and idle GPUs explained; time within 10%)
    5 stream_budget              per GPU and stream: compute + collective + memcpy + idle = span, to
                                 the picosecond, and idle equal to the span minus the union of the
                                 stream's events (computed a second way)
    6 attribution                per GPU, when step 4 ran (attribution/attribute_kernels.json in
                                 DIR): events per program execution within what the schedule
                                 predicts; and the share of attributed time below the confidence
A capture with one of its two files runs what it can; the rest is not checkable, with the reason.
It reads the capture once (and step 1's analysis in-process), and writes nothing else.

Exit codes: 0 done (failed checks included: they are results); 1 the input cannot be used (one
sentence says why); 2 usage; 3 a missing package (protobuf, for the xplane).
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import sibling  # noqa: E402  (where the sibling skill is: one home)

SIBLING = sibling.on_path()

import scratch  # noqa: E402  (sibling skill: the scratch files' declarations, writers)
import step_cli  # noqa: E402  (sibling skill: the command line, errors, exit codes)
import trace_rules as rules  # noqa: E402  (sibling skill)

import capture_inputs  # noqa: E402  (sibling skill)
import trace_reader  # noqa: E402  (sibling skill)

RESULT_FILE = "reconcile.json"
TABLE = "reconciliation.csv"
COLUMNS = scratch.columns(TABLE)
# Compute + memcpy time per step (collectives left out: they include waiting for peers) of GPUs
# that do the same work differs by launch jitter and data; more than this relative difference
# from the GPUs' median is a GPU that runs slower or faster, reported.
SAME_WORK_TIME_TOLERANCE = 0.10
# Attributed time placed below the attribution's confidence threshold: above this share the
# attribution goes on the trust list (a few percent is what a clean graph capture shows).
LOW_CONFIDENCE_SHARE_MAX_PCT = 5.0
IDS_LISTED = 10  # correlation ids quoted in a sentence


def _num(v):
    """A figure as written: whole numbers without a decimal point."""
    return int(v) if isinstance(v, float) and v.is_integer() else v


def row(check, device="", stream="", status="pass", a="", b="", unit="", what_a="",
        what_b="", sentence="") -> dict:
    return {"check": check, "device": device, "stream": stream, "status": status,
            "figure_a": _num(a), "figure_b": _num(b), "unit": unit, "what_a": what_a,
            "what_b": what_b, "trust_sentence": sentence}


# ---------------------------------------------------------------- check 1

def xplane_streams(space) -> dict:
    """(device, stream) -> [events, summed duration ps] from the xplane's GPU planes."""
    out = {}
    for plane in space.gpu_planes():
        for line in plane.lines:
            if not line.name.startswith("Stream #"):
                continue
            n = total = 0
            for ev in line._proto.events:
                n += 1
                total += ev.duration_ps
            out[(plane.gpu_ordinal, line.id)] = [n, total]
    return out


def trace_streams(trace) -> dict:
    ordinal = {pid: o for o, pid in trace.gpu_pids().items()}
    streams = {k for k, name in trace.threads.items() if name.startswith("Stream #")}
    out: dict = {}
    for ev in trace.events:
        o = ordinal.get(ev.get("pid"))
        if o is None or (ev["pid"], ev.get("tid")) not in streams:
            continue
        e = out.setdefault((o, ev["tid"]), [0, 0])
        e[0] += 1
        e[1] += trace_reader.ps(ev.get("dur", 0))
    return out


def check_events(x, trace, xplane_why: str, trace_why: str) -> list[dict]:
    """Per GPU and stream, the trace's event count and summed time against the xplane's (`x`:
    xplane_streams, None where the xplane could not be read)."""
    name = "gpu_events_json_vs_xplane"
    if x is None or trace is None:
        return [row(name, status="not checkable", sentence=(
            f"GPU events json = xplane cannot be checked because "
            f"{xplane_why if x is None else trace_why}"))]
    t = trace_streams(trace)
    capped = len(trace.events) >= _exporter_cap()
    out = []
    for d, s in sorted(set(x) | set(t)):
        xn, xd = x.get((d, s), [0, 0])
        tn, td = t.get((d, s), [0, 0])
        cause = (" (the trace has the exporter's cap of 1,000,000 events: it dropped the rest)"
                 if capped and tn < xn else "")
        out.append(row(name + "_count", d, s, "pass" if xn == tn else "fail", tn, xn, "count",
                       "trace", "xplane", "" if xn == tn else
                       f"GPU {d} stream {s}: the trace holds {tn} events, the xplane {xn}{cause}"))
        # the trace stores microseconds with nanosecond digits: a 1 ns difference per event is
        # the format's rounding, not a disagreement
        ok = abs(xd - td) <= 1000 * max(xn, tn)
        out.append(row(name + "_duration", d, s, "pass" if ok else "fail", rules.us(td),
                       rules.us(xd), "us", "trace", "xplane", "" if ok else
                       f"GPU {d} stream {s}: summed event time differs, {rules.us(td)} us in "
                       f"the trace vs {rules.us(xd)} us in the xplane{cause}"))
    return out


def _exporter_cap() -> int:
    import skip_stats
    return skip_stats.EXPORTER_EVENT_CAP


# ---------------------------------------------------------------- checks 2 to 5 (step 1's model)

def check_joins(a) -> list[dict]:
    out = []
    by_device: dict = {}
    for e in a.events:
        by_device.setdefault(e.device, []).append(e)
    for d, evs in sorted(by_device.items()):
        bad = [e for e in evs if e.join not in ("launch", "graph_launch")]
        graphs = {e.args.get("correlation_id") for e in evs if e.join == "graph_launch"}
        joined = len(evs) - len(bad)
        sentence = ""
        if bad:
            by: dict[str, list] = {}
            for e in bad:
                by.setdefault(e.join, []).append(str(e.args.get("correlation_id", "-")))
            sentence = f"GPU {d}: {len(bad)} of {len(evs)} events join no launch call: " + \
                "; ".join(f"{k} {len(v)} (ids {', '.join(sorted(set(v))[:IDS_LISTED])})"
                          for k, v in sorted(by.items()))
        out.append(row("launch_join", d, "", "fail" if bad else "pass", joined, len(evs),
                       "count", f"events joined to a launch ({len(graphs)} graph launches)",
                       "GPU events", sentence))
    return out


def check_kernels_per_step(a, step_rows) -> list[dict]:
    out = []
    if not step_rows:
        return [row("kernels_per_step", status="not checkable",
                    sentence="kernels per step cannot be checked because no complete step was "
                             "analysed")]
    partial = any(s.partial for s in a.analysed)
    for d in sorted({r["device"] for r in step_rows}):
        per = {r["step"]: r["kernels"] for r in step_rows if r["device"] == d}
        if len(per) < 2:
            out.append(row("kernels_per_step", d, "", "not checkable", sum(per.values()), "",
                           "count", "events in the one analysed step", "",
                           f"kernels per step cannot be checked on GPU {d}: one analysed step"
                           + (" (a partial one: the capture holds no complete step)"
                              if partial else "")))
            continue
        common = statistics.mode(per.values())
        odd = {s: n for s, n in per.items() if n != common}
        out.append(row("kernels_per_step", d, "", "fail" if odd else "pass", min(per.values()),
                       max(per.values()), "count", "fewest events in a step",
                       "most events in a step", "" if not odd else
                       f"GPU {d}: {common} events in most steps, but " +
                       ", ".join(f"{n} in step {s}" for s, n in sorted(odd.items()))))
    return out


def _per_device(a, steps) -> tuple[dict, dict]:
    """One pass over the events: per GPU, the program's compute + memcpy time per step
    (collective kernels left out: their time includes waiting for the peers; argument copies
    left out: a GPU that receives the inputs copies more, which the events check explains), and
    argument copies (memcpys with no hlo_op and a launch of their own) in steps."""
    time_ps: dict = {}
    copies: dict = {}
    for e in a.events:
        if e.step not in steps:
            continue
        if rules.is_argument_copy(e.category, e.args, e.graph):
            copies[e.device] = copies.get(e.device, 0) + 1
        elif e.category != "collective":
            t = time_ps.setdefault(e.device, {})
            t[e.step] = t.get(e.step, 0) + e.dur
    return time_ps, copies


def check_same_work(a, step_rows, idle_gpus, groups=None, compared=None) -> list[dict]:
    """Same work across the GPUs that run the same programs (step 1's GPU groups): a GPU that
    runs other programs, or holds only argument copies, does other work, which is said (a pass
    with its explanation), never compared for speed."""
    out = []
    devices = sorted({r["device"] for r in step_rows})
    for d in idle_gpus:
        out.append(row("same_work_across_gpus", d, "", "not checkable", "", "", "", "", "",
                       f"GPU {d} is idle in this capture (no events): it did no work to compare"))
    groups = [g for g in (groups or []) if g["devices"]]
    if len(groups) > 1:
        import skip_analysis
        n_steps = len({r["step"] for r in step_rows})
        compared = set(compared or ())
        runs = [d for g in groups if g["kind"] == "programs" for d in g["devices"]]
        ref = sorted(compared) or sorted(runs)
        for g in groups:
            if set(g["devices"]) == compared:
                continue
            sentence = skip_analysis.group_sentence(g, n_steps)
            for d in g["devices"]:
                if g["kind"] == "programs" and len(g["devices"]) == 1:
                    why = (f"GPU {d} runs programs no other GPU runs ({sentence}): its work is "
                           "compared with none")
                elif g["kind"] == "programs":
                    why = (f"GPU {d} runs other programs than GPU(s) "
                           f"{', '.join(map(str, ref))}: {sentence}")
                else:
                    why = (f"GPU {d} does other work than GPU(s) {', '.join(map(str, ref))}: "
                           f"{sentence}")
                out.append(row("same_work_across_gpus", d, "", "pass", "", "", "", "", "", why))
            if g["kind"] == "programs" and len(g["devices"]) > 1:
                out += check_same_work(a, [r for r in step_rows if r["device"] in
                                           set(g["devices"])], [], None)
        if compared:
            out += check_same_work(a, [r for r in step_rows if r["device"] in compared], [],
                                   None)
        return out
    if len(devices) < 2:
        if devices:
            out.append(row("same_work_across_gpus", devices[0], "", "not checkable",
                           sentence="one GPU with work: nothing to compare it with"))
        return out
    steps = sorted({r["step"] for r in step_rows})
    kern = {d: statistics.median([r["kernels"] for r in step_rows if r["device"] == d])
            for d in devices}
    per_step, n_copies = _per_device(a, set(steps))
    time_ps = {d: statistics.median(per_step[d].values()) if per_step.get(d) else 0
               for d in devices}
    ref_k = statistics.median(kern.values())
    ref_t = statistics.median(time_ps.values())
    copies = {d: n_copies.get(d, 0) / max(len(steps), 1) for d in devices}
    for d in devices:
        diff = kern[d] - ref_k
        explained = diff and abs(diff - (copies[d] - statistics.median(copies.values()))) < 0.5
        status = "pass" if diff == 0 or explained else "fail"
        out.append(row("same_work_across_gpus_events", d, "", status, kern[d], ref_k, "count",
                       "events per step (median)", "median over GPUs",
                       "" if diff == 0 else
                       (f"GPU {d}: {kern[d]:g} events per step vs {ref_k:g} on the others, "
                        f"explained by {copies[d]:g} argument copies per step"
                        if explained else
                        f"GPU {d}: {kern[d]:g} events per step vs {ref_k:g} on the others, "
                        "not explained by the capture")))
        off = abs(time_ps[d] - ref_t) / ref_t if ref_t else 0.0
        out.append(row("same_work_across_gpus_time", d, "",
                       "pass" if off <= SAME_WORK_TIME_TOLERANCE else "fail",
                       rules.us(time_ps[d]), rules.us(ref_t), "us",
                       "compute + memcpy time per step without argument copies (median)",
                       "median over GPUs",
                       "" if off <= SAME_WORK_TIME_TOLERANCE else
                       f"GPU {d}: {rules.us(time_ps[d])} us of compute and memcpy time per step "
                       f"vs {rules.us(ref_t)} us on the others ({100 * off:.1f}% apart) for the "
                       "same work: this GPU runs slower or faster (clocks, power, contention: "
                       "the capture cannot say which)"))
    return out


def check_stream_budgets(a, stream_acc) -> list[dict]:
    import gpu_events
    out = []
    analysed = {s.number: s for s in a.analysed}
    ends: dict = {}
    by_stream_step: dict = {}  # (device, stream, step) -> events, grouped once
    for e in a.events:
        if e.step in analysed:
            k = (e.device, e.step)
            ends[k] = max(ends.get(k, 0), e.end)
            by_stream_step.setdefault((e.device, e.stream, e.step), []).append(e)
    for (d, s), acc in sorted(stream_acc.items()):
        parts = acc["compute"] + acc["collective"] + acc["memcpy"] + acc["idle"]
        # idle a second way: the span minus the union of the stream's events in each window
        idle2 = 0
        for num, st in analysed.items():
            if (d, num) not in ends:
                continue
            start, end = st.start, ends[(d, num)]
            iv = [(max(e.start, start), min(e.end, end))
                  for e in by_stream_step.get((d, s, num), ()) if e.end > start]
            idle2 += (end - start) - gpu_events.union_ps(iv)
        ok = parts == acc["span"] and idle2 == acc["idle"]
        out.append(row("stream_budget", d, s, "pass" if ok else "fail", parts, acc["span"], "ps",
                       "compute + collective + memcpy + idle", "span", "" if ok else
                       f"GPU {d} stream {s}: the budget parts add up to {parts} ps for a span "
                       f"of {acc['span']} ps (idle {acc['idle']} ps vs {idle2} ps from the "
                       "union of its events)"))
    return out


# ---------------------------------------------------------------- check 6

def check_attribution(out_dir: Path) -> list[dict]:
    path = out_dir / "attribution" / "attribute_kernels.json"
    if not path.is_file():
        return [row("attribution", status="not checkable",
                    sentence="the attribution cannot be reconciled because step 4 "
                             "(attribute_kernels.py) has not run in this scratch folder")]
    try:
        att = json.loads(path.read_text())
        execs = att["executions"]
        low = att["figures"]["low_confidence_pct_of_all_attributed"]["value"]
    except (ValueError, KeyError, TypeError) as exc:
        return [row("attribution", status="not checkable",
                    sentence=f"the attribution cannot be reconciled because {path.name} is not "
                             f"the expected result ({exc})")]
    out = []
    for d, e in sorted(execs.items(), key=lambda kv: str(kv[0])):
        if not e["executions"]:
            continue
        per = e["events"] / e["executions"]
        ok = e["expected_min"] <= per <= e["expected_max"]
        out.append(row("attribution_events_per_execution", d, "", "pass" if ok else "fail",
                       f"{per:.1f}", f"{e['expected_min']}-{e['expected_max']}", "count",
                       f"events per execution ({e['events']} over {e['executions']})",
                       "the schedule's prediction", "" if ok else
                       f"GPU {d}: {per:.1f} events per execution of the program where its "
                       f"schedule predicts {e['expected_min']} to {e['expected_max']}: the "
                       "capture holds events the schedule does not explain, or misses some"))
    ok = low <= LOW_CONFIDENCE_SHARE_MAX_PCT
    out.append(row("attribution_confidence", "", "", "pass" if ok else "fail", f"{low:.2f}",
                   f"{LOW_CONFIDENCE_SHARE_MAX_PCT:.2f}", "pct",
                   "attributed time below the confidence threshold", "allowed at most",
                   "" if ok else f"{low:.2f}% of the attributed GPU time rests on placements "
                   "below the attribution's confidence threshold"))
    return out


# ---------------------------------------------------------------- run

def run(capture, out: Path, own_process: bool = False) -> tuple[dict, list]:
    """Step 2 on a capture (capture_inputs.Capture, each file read once per process). In a
    process of its own (`own_process`, the command line) the decoded xplane is let go once its
    per-stream counts are taken, before the trace is read: the step's peak memory is then the
    trace's and step 1's analysis, not those and the xplane's; steps sharing the Capture in one
    process keep it."""
    files = capture.files
    xstreams = trace = None
    xplane_why = trace_why = ""
    if files.xplane is None:
        xplane_why = "the capture has no .xplane.pb"
    else:
        try:
            import xplane_reader
            xstreams = xplane_streams(xplane_reader.space_of(capture))
            if own_process:  # its per-stream counts are all this step reads of the xplane:
                capture.cache.pop("space", None)  # let go before the trace is read (its
                gc.collect()  # planes and lines refer to each other: the collector frees them)
        except ImportError as exc:
            raise step_cli.MissingPackage(f"a package is missing ({exc}); pip install -r "
                                          "requirements.txt") from exc
        except Exception as exc:  # noqa: BLE001 - the reader's own sentence
            xplane_why = f"the xplane cannot be read ({exc})"
    if files.trace is None:
        trace_why = "the capture has no .trace.json.gz"
    else:
        try:
            trace = capture.trace
        except (trace_reader.TraceError, capture_inputs.CaptureError) as exc:
            trace_why = f"the trace cannot be read ({exc})"
    if xstreams is None and trace is None:
        raise step_cli.StepError(f"nothing to reconcile in {files.run_dir}: {xplane_why}; "
                                 f"{trace_why}")
    step_cli.progress("comparing the trace's and the xplane's GPU events")
    rows = check_events(xstreams, trace, xplane_why, trace_why)
    if trace is None:
        for check in ("launch_join", "kernels_per_step", "same_work_across_gpus",
                      "stream_budget"):
            rows.append(row(check, status="not checkable",
                            sentence=f"{check} cannot be checked because {trace_why}"))
    else:
        import skip_stats
        a, _ = skip_stats.analyse(trace)
        step_cli.progress("measuring each step and GPU", len(a.analysed), unit="steps")
        step_rows, stream_acc, _, info = skip_stats.per_step_rows(a)
        step_cli.progress("checking joins, steps, same work and stream budgets",
                          len(a.events), unit="GPU events")
        idle = sorted(set(trace.gpu_pids()) - {e.device for e in a.events})
        rows += check_joins(a)
        rows += check_kernels_per_step(a, step_rows)
        rows += check_same_work(a, step_rows, idle, info.get("groups"), info.get("compared"))
        rows += check_stream_budgets(a, stream_acc)
    if xstreams is None:
        rows.append(row("attribution", status="not checkable",
                        sentence=f"the attribution cannot be reconciled because {xplane_why}"))
    else:
        rows += check_attribution(out)
    counts = {s: sum(1 for r in rows if r["status"] == s)
              for s in ("pass", "fail", "not checkable")}
    result = {"step": "reconcile", "status": "done", "counts": counts, "checks": rows,
              "refusals": [r["trust_sentence"] for r in rows if r["status"] == "not checkable"],
              "trust_list": [r["trust_sentence"] for r in rows if r["status"] == "fail"]}
    with rules.replace_files(out, ".reconcile-") as tmp:  # both files whole or not at all
        n = scratch.write_table(tmp, TABLE, ([r[c] for c in COLUMNS] for r in rows))
        scratch.write_result(tmp, RESULT_FILE, result)
    return result, [(TABLE, n), (RESULT_FILE, None)]


STEP = step_cli.Step("reconcile", __doc__, __file__)


def body(args) -> list[str]:
    result, written = run(step_cli.open_capture(STEP, args), args.out, own_process=True)
    c = result["counts"]
    lines = step_cli.wrote(args.out, written)
    lines.append(f"checks: {c['pass']} pass, {c['fail']} fail, {c['not checkable']} not checkable")
    lines += [f"{r['status']}: {rules.printable(r['trust_sentence'])}"
              for r in result["checks"] if r["status"] != "pass"]
    return lines + ["Next: every fail and not-checkable sentence goes on the trust list "
                    "(SKILL.md step 7)."]


def main(argv=None) -> int:
    return step_cli.main(STEP, body, argv)


if __name__ == "__main__":
    raise SystemExit(step_cli.run(STEP, main))
