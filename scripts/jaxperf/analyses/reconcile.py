"""Step 2: reconciliation. Totals that independent records of one capture must agree on, checked:
the analysis. Its door, with the command line and what it writes, is scripts/reconcile.py."""

from __future__ import annotations

import gc
from pathlib import Path

import model_checks  # sibling skill: checks 2 to 5, step 1's model
from model_checks import row
from tracekit import capture_inputs, scratch, step_cli, trace_reader
from tracekit import trace_rules as rules

RESULT_FILE = "reconcile.json"

TABLE = "reconciliation.csv"

COLUMNS = scratch.columns(TABLE)

# Attributed time placed below the attribution's confidence threshold: above this share the
# attribution goes on the trust list (a few percent is what a clean graph capture shows).
LOW_CONFIDENCE_SHARE_MAX_PCT = 5.0


# ---------------------------------------------------------------- check 1

def check_events(x, t, n_events, xplane_why: str, trace_why: str) -> list[dict]:
    """Per GPU and stream, the trace's event count and summed time (`t`: (device, stream) ->
    [events, ps], `n_events` the trace's complete events) against the xplane's (`x`, the same
    from the xplane); either None where its file could not be read."""
    name = "gpu_events_json_vs_xplane"
    if x is None or t is None:
        return [row(name, status="not checkable", sentence=(
            f"GPU events json = xplane cannot be checked because "
            f"{xplane_why if x is None else trace_why}"))]
    import skip_stats  # its EXPORTER_EVENT_CAP
    capped = n_events >= skip_stats.EXPORTER_EVENT_CAP
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


# ---------------------------------------------------------------- check 6

def check_attribution(out_dir: Path) -> list[dict]:
    path = out_dir / "attribution" / "attribute_kernels.json"
    if not path.is_file():
        return [row("attribution", status="not checkable",
                    sentence="the attribution cannot be reconciled because step 4 "
                             "(attribute_kernels.py) has not run in this scratch folder")]
    try:
        att = scratch.Scratch(out_dir).json("attribution/attribute_kernels.json")
        execs = att["executions"]
        low = att["figures"]["low_confidence_pct_of_all_attributed"]["value"]
    except (ValueError, KeyError, TypeError) as exc:
        return [row("attribution", status="not checkable",
                    sentence=f"the attribution cannot be reconciled because {path.name} is not "
                             f"the expected result ({exc})")]
    out = []
    for d, e in sorted(execs.items(), key=lambda kv: str(kv[0])):
        if not e["executions"] or "expected_min" not in e:  # a TPU's: nothing was matched
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

def _by_stream(streams) -> dict:
    """[[device, stream, events, ps], ...] -> (device, stream) -> [events, ps]; ValueError or
    TypeError where an entry is not four integers."""
    out = {}
    for d, s, n, ps in streams:
        if not all(type(v) is int for v in (d, s, n, ps)):
            raise ValueError("not an integer")
        out[(d, s)] = [n, ps]
    return out


def xplane_side(capture, out: Path, own_process: bool) -> tuple[dict | None, str]:
    """The xplane's per-stream totals: step 0's hand-off when made from this very xplane, else
    read (in a process of its own the decoded xplane is let go at once: its totals are all
    this step reads of it); and why there are none."""
    files = capture.files
    if files.xplane is None:
        return None, "the capture has no .xplane.pb"
    got = scratch.handoff_get(out, "xplane_streams", [files.xplane],
                              lambda p: _by_stream(p["streams"]))
    if got is not None:
        return got, ""
    try:
        from jaxperf.read import xplane_reader
        streams = xplane_reader.stream_totals(xplane_reader.space_of(capture))
        if own_process:  # let go before the trace is read (its planes and lines refer to
            capture.cache.pop("space", None)  # each other: the collector frees them)
            gc.collect()
        return _by_stream(streams), ""
    except ImportError as exc:
        raise step_cli.MissingPackage(f"a package is missing ({exc}); pip install -r "
                                      "requirements.txt") from exc
    except Exception as exc:  # noqa: BLE001 - the reader's own sentence
        return None, f"the xplane cannot be read ({exc})"


def trace_side(capture, out: Path) -> tuple[dict | None, int, list | None, str]:
    """The trace's per-stream totals, its complete events, and the rows of checks 2 to 5 on
    step 1's analysis: step 1's hand-offs when made from this very trace, else the trace read
    and step 1's analysis run here; and why there are none."""
    files = capture.files
    if files.trace is None:
        return None, 0, None, "the capture has no .trace.json.gz"
    streams = scratch.handoff_get(out, "trace_streams", [files.trace],
                                  lambda p: (_by_stream(p["streams"]), int(p["events"])))
    checks = scratch.handoff_get(out, "model_checks", [files.trace],
                                 lambda p: [{c: r[c] for c in COLUMNS} for r in p["rows"]])
    if streams is not None and checks is not None:
        return streams[0], streams[1], checks, ""
    try:
        trace = capture.trace
    except (trace_reader.TraceError, capture_inputs.CaptureError) as exc:
        return None, 0, None, f"the trace cannot be read ({exc})"
    import skip_stats
    a, _ = skip_stats.analyse(trace)
    t = a.trace_totals[0]
    step_cli.progress("measuring each step and GPU", len(a.analysed), unit="steps")
    step_rows, stream_acc, _, info = skip_stats.per_step_rows(a)
    step_cli.progress("checking joins, steps, same work and stream budgets",
                      len(a.events), unit="GPU events")
    idle = sorted(set(trace.gpu_pids()) - {e.device for e in a.events})
    return t, len(trace.events), model_checks.rows(a, step_rows, stream_acc, info, idle), ""


def run(capture, out: Path, own_process: bool = False) -> tuple[dict, list]:
    """Step 2 on a capture (capture_inputs.Capture, each file read once per process): what steps
    0 and 1 handed on for these very files (scratch.handoff_get), else the files themselves."""
    xstreams, xplane_why = xplane_side(capture, out, own_process)
    tstreams, n_events, model_rows, trace_why = trace_side(capture, out)
    if xstreams is None and tstreams is None:
        raise step_cli.StepError(f"nothing to reconcile in {capture.files.run_dir}: "
                                 f"{xplane_why}; {trace_why}")
    step_cli.progress("comparing the trace's and the xplane's GPU events")
    rows = check_events(xstreams, tstreams, n_events, xplane_why, trace_why)
    if model_rows is None:
        for check in ("launch_join", "kernels_per_step", "same_work_across_gpus",
                      "stream_budget"):
            rows.append(row(check, status="not checkable",
                            sentence=f"{check} cannot be checked because {trace_why}"))
    else:
        rows += model_rows
    if xstreams is None:
        rows.append(row("attribution", status="not checkable",
                        sentence=f"the attribution cannot be reconciled because {xplane_why}"))
    else:
        rows += check_attribution(out)
    if (scratch.Scratch(out).json("skip_stats.json") or {}).get("device_kind") == "TPU":
        for r in rows:  # the checks' sentences, said of a GPU, in a TPU's words
            r["trust_sentence"] = rules.tpu_said(r["trust_sentence"])
    counts = {s: sum(1 for r in rows if r["status"] == s)
              for s in ("pass", "fail", "not checkable")}
    result = {"step": "reconcile", "status": "done", "counts": counts, "checks": rows,
              "refusals": [r["trust_sentence"] for r in rows if r["status"] == "not checkable"],
              "trust_list": [r["trust_sentence"] for r in rows if r["status"] == "fail"]}
    with rules.replace_files(out, ".reconcile-") as tmp:  # both files whole or not at all
        n = scratch.write_table(tmp, TABLE, ([r[c] for c in COLUMNS] for r in rows))
        scratch.write_result(tmp, RESULT_FILE, result)
    return result, [(TABLE, n), (RESULT_FILE, None)]
