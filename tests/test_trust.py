"""trust.py (step 7): the defect items against the generator's planted defects on every corpus
scenario (but the two big ones), an exact table from a scratch folder written inline, steps that
did not run (--failed), the V100 capture without HLO, and bad input."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from capgen.generate import generate
from capgen.scenarios import SCENARIOS
from conftest import REPO, SHARED_CAPTURES, read_table, write_table
from jaxperf.analyses import trust

SCRIPT = REPO / "scripts" / "trust.py"
BARE = getattr(sys, "_base_executable", sys.executable)
STEP_SCRIPTS = [REPO / "scripts" / "capture_info.py",
                REPO / "analyzing-jax-launch-overhead" / "scripts" / "skip_stats.py",
                REPO / "scripts" / "attribute_kernels.py", REPO / "scripts" / "reconcile.py",
                REPO / "scripts" / "swimlanes.py", REPO / "scripts" / "roofline.py"]
BIG = {"nvidia-maxtext-8gpu", "nvidia-pax-cb"}
CORPUS = sorted(n for n in SCENARIOS if n not in BIG)
# truth/defects.csv kinds that are what the workload does (the verdict the scenario plants), not
# records to distrust: the trust list has no item for them.
VERDICTS = {"launch_bound", "device_bound"}
COLLECTIVE_INSTRUCTION = re.compile(
    r"^(all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute)")


def run_trust(out, *args):
    """As a user runs it: a bare interpreter (standard library only), -P."""
    return subprocess.run([BARE, "-I", "-S", "-P", str(SCRIPT), "--out", str(out),
                           *map(str, args)], capture_output=True, text=True, timeout=600)


def run_steps(capture, out):
    for script in STEP_SCRIPTS:
        r = subprocess.run([sys.executable, "-P", str(script), str(capture), "--out", str(out)],
                           capture_output=True, text=True, timeout=900)
        yield script.stem, r


def read(path):
    return read_table(path)


def trust_rows(out):
    return [r for r in read(out / "trust.csv") if r["section"] == "trust"]


def as_truth(row) -> str:
    """The truth/defects.csv kind a defect item stands for."""
    kind, src = row["kind"], row["source"]
    if kind == "under_recorded_replays":
        return "graph_replay_missing"
    if kind == "reconciliation_check":
        for check, truth in (("gpu_events_json_vs_xplane", "json_disagrees"),
                             ("launch_join", "correlation_joins_non_launch"),
                             ("same_work_across_gpus", "straggler")):
            if f"check={check}" in src:
                return truth
        return f"reconciliation_check ({src})"
    return kind


def assert_citable(rows):
    """A report cites a trust figure as `trust.csv: device_us, section=trust, item=<item>`: the
    item must select one row and hold no selector separator (comma) or quote."""
    items = [x["item"] for x in rows]
    assert len(items) == len(set(items)), items
    for x in rows:
        if x["count"] or x["device_us"]:
            assert not set(x["item"]) & set(',"`'), x["item"]


def expected_defects(truth: Path) -> list:
    """(kind, count, device) of every planted defect the trust list must name: truth/defects.csv
    less the planted verdicts, plus the two the generator plants by parameter only (one program
    under two ids; async collective labels absent from the saved HLO)."""
    out = [(r["kind"], int(r["count"]) if r["count"] else None, r["device"])
           for r in read(truth / "defects.csv") if r["kind"] not in VERDICTS]
    sc = json.loads((truth / "scenario.json").read_text())
    if sc["duplicate_program_id"] is not None:
        out.append(("duplicate_program", 2, ""))
    if sc["collective_label"] == "pre_async":
        n = sum(1 for k in read(truth / "kernels.csv")
                if COLLECTIVE_INSTRUCTION.match(k["instruction"]) and k["graph"] == "0")
        out.append(("async_labels_missing", n, ""))
    return sorted(out, key=str)


@pytest.mark.parametrize("name", CORPUS)
def test_defect_items_are_the_planted_defects(tmp_path, name):
    res = generate(SCENARIOS[name], tmp_path / "capture")
    out = tmp_path / "out"
    failed = [f"{step}: {r.stderr.strip()[-300:]}" for step, r in
              run_steps(tmp_path / "capture", out) if r.returncode]
    assert not failed, failed
    r = run_trust(out)
    assert r.returncode == 0, r.stderr
    rows = trust_rows(out)
    defects = [x for x in rows if x["kind"] in trust.DEFECT_KINDS]
    want = expected_defects(res.truth_dir)
    got = sorted(((as_truth(x), int(x["count"]) if x["count"] else None, x["item"])
                  for x in defects), key=str)
    assert [k for k, _, _ in got] == sorted(k for k, _, _ in want), (got, want)
    for (kind, count, device), (_, n, text) in zip(sorted(want, key=lambda w: w[0]),
                                                   sorted(got, key=lambda g: g[0]), strict=True):
        if count is not None:
            assert n == count, (kind, n, count, text)
        if device != "":
            assert f"GPU {device})" in text, (kind, device, text)
    # standing items, true of every capture of its kind, with the truth's own counts
    truth_k = read(res.truth_dir / "kernels.csv")
    graph = [x for x in rows if x["kind"] == "graph_launch_metrics"]
    n_graph = sum(1 for k in truth_k if k["graph"] != "0")
    assert [int(x["count"]) for x in graph] == ([n_graph] if n_graph else [])
    coll = [x for x in rows if x["kind"] == "nccl_waits"]
    n_coll = sum(1 for k in truth_k if COLLECTIVE_INSTRUCTION.match(k["instruction"]))
    assert [int(x["count"]) for x in coll] == ([n_coll] if n_coll else [])
    assert {x["kind"] for x in rows if x["kind"] == "step_failed"} == {"step_failed"}
    assert [x["source"] for x in rows if x["kind"] == "step_failed"] == ["changes.json"]
    assert_citable(rows)
    result = json.loads((out / "trust.json").read_text())
    assert result["figures"]["defects"]["value"] == len(want)
    assert result["figures"]["items"]["value"] == len(rows)


# ---------------------------------------------------------------- a scratch folder written here

def write_csv(path, header, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)


ROWS_HEADER = ["device", "stream", "stream_name", "kernel", "category", "start_us", "dur_us",
               "end_us", "correlation_id", "join", "launch_name", "launch_thread",
               "launch_start_us", "launch_dur_us", "queue_us", "launch_to_start_us", "hlo_op",
               "hlo_module", "graph", "step"]


def row(kernel, category, dur, corr, join, launch, hlo_op="", graph=0, step=0, device=0):
    return [device, 13, "Stream #13", kernel, category, 0, dur, dur, corr, join, launch, "t", 0,
            1, "", "", hlo_op, "m", graph, step]


def scratch(out: Path):
    """Every step's result for a small 1-GPU ROCm capture: a json/xplane disagreement, a graph
    replayed three times (one replay a kernel short), one program under ids 3 and 9, two
    collectives whose labels are not in the HLO, Python tracer events in a gap, one hipMemcpy."""
    out.mkdir(parents=True)

    def dump(rel, obj):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(json.dumps(obj))

    def rc(check, status, a, b, unit, s=""):
        return {"check": check, "device": 0, "stream": 13, "status": status, "figure_a": a,
                "figure_b": b, "unit": unit, "trust_sentence": s}

    dump("capture_info.json", {"step": "capture_info", "status": "done",
                               "capture": {"hosts": ["h"]}, "xplane": {"error": None},
                               "gpus": [{"ordinal": 0, "device": {"device_vendor": "AMD"}}],
                               "programs": [{"program_id": 3}, {"program_id": 9}],
                               "checks": [], "refusals": []})
    dump("skip_stats.json", {
        "step": "skip_stats", "status": "done", "verdict": "device-bound", "notes": [],
        "refusals": ["11 GPU events were launched by graphs (command buffers): they have no "
                     "launch call of their own"],
        "needs_new_capture": ["how the step time moves with batch size"]})
    dump("reconcile.json", {"step": "reconcile", "status": "done", "checks": [
        rc("gpu_events_json_vs_xplane_count", "fail", 10, 13, "count", "GPU 0: 10 vs 13"),
        rc("gpu_events_json_vs_xplane_duration", "fail", 1.0, 2.0, "us", "GPU 0: 1 vs 2 us"),
        rc("launch_join", "pass", 16, 16, "count"),
        rc("kernels_per_step", "fail", 7, 8, "count", "GPU 0: 7 events, 8 in step 1"),
        rc("attribution_confidence", "fail", 9.0, 5.0, "pct", "9% below")],
        "trust_list": [], "refusals": []})
    dump("swimlanes.json", {"step": "swimlanes", "status": "done", "refusals": [],
                            "notes": []})
    dump("roofline.json", {"step": "roofline", "status": "done", "gpu": {"model": "MI300X"},
                           "figures": {"not_computable_us": {"value": 0.0}}, "trust_list": [],
                           "refusals": []})
    dump("attribution/attribute_kernels.json", {
        "step": "attribute_kernels", "status": "done", "low_confidence_below": 0.6,
        "figures": {"kernel_time_us": {"value": 100.0, "unit": "us", "label": "measured"}},
        "program": {"id": 3, "notes": ["p(3) chosen: the most kernel time", "program 3 is saved "
                                       "under several ids (3, 9, identical HLO); 3 has the most "
                                       "kernel time; kernels of 9 are matched within their own "
                                       "id"]},
        "none": [{"why": "outside", "label": "argument copies", "kernels": 1, "device_us": 4.0,
                  "largest": [{"kernel": "copy", "count": 1, "device_us": 4.0}]}],
        "no_hlo": None, "checks": [], "refusals": [],
        # what step 4 counts on the kernels.csv rows below
        "collectives_by_order": {"kernels": 2, "device_us": 8.0,
                                 "labels": ["all-gather.1", "all-gather.2"]}})
    write_csv(out / "attribution/how.csv",
              ["program_id", "match", "kernels", "device_us", "pct_of_group",
               "low_confidence_kernels", "low_confidence_us", "low_confidence_pct_of_group"],
              [[3, "exact", 10, 60.0, 75.0, 0, 0, 0], [3, "order", 3, 20.0, 25.0, 2, 7.5, 9.4],
               [9, "exact", 4, 16.0, 100.0, 0, 0, 0],
               ["all", "exact", 14, 76.0, 76.0, 0, 0, 0], ["all", "order", 3, 20.0, 20.0, 2, 7.5,
                                                           7.5]])
    write_table(out, "attribution/kernels.csv",
              ["device", "stream", "start_us", "dur_us", "kernel", "correlation_id", "hlo_op",
               "program_id", "instruction", "inner_instruction", "match", "confidence",
               "op_name", "source", "user_frame", "category", "graph"],
              [[0, 14, 0, 6.0, "ncclKernel", 5, "all-gather.1", 3, "all-gather-start.1", "",
                "order", 0.7, "", "", "", "collective", 0],
               [0, 14, 9, 2.0, "ncclKernel", 6, "all-gather.2", 3, "all-gather-start.2", "",
                "order", 0.7, "", "", "", "collective", 0],
               [0, 14, 20, 3.0, "ncclKernel", 7, "all-reduce-start.3", 3, "all-reduce-start.3",
                "", "exact", 1, "", "", "", "collective", 0]])
    rows = []
    for corr, n in ((100, 4), (200, 4), (300, 3)):  # one graph, three replays, one short
        rows += [row(f"k{i}", "compute", 2.0, corr, "graph_launch",
                     "cuGraphLaunch (CudaGraph:1)", "command_buffer_0", graph=1)
                 for i in range(n)]
    rows += [row(f"k{i}", "compute", 1.0, 400, "graph_launch", "cuGraphLaunch (CudaGraph:1)",
                 "command_buffer_0", graph=1, step="") for i in range(1)]  # cut by the capture
    rows += [row("ncclKernel", "collective", 6.0, 5, "launch", "hipLaunchKernel"),
             row("ncclKernel", "collective", 2.0, 6, "launch", "hipLaunchKernel"),
             row("__amd_rocclr_copyBuffer.kd", "memcpy", 4.0, 7, "launch",
                 "hipMemcpyDtoDAsync")]
    write_table(out, "rows.csv", ROWS_HEADER, rows)
    write_csv(out / "gaps.csv", ["device", "stream", "step", "start_us", "end_us", "dur_us",
                                 "kernel_before", "kernel_after", "cause", "launch_thread",
                                 "host_events"],
              [[0, 13, 0, 0, 12, 12.0, "a", "b", "host_late", "python",
                "$train.py:10 step=8.000 | PjitFunction=3.000"],
               [0, 13, 0, 20, 22, 2.0, "b", "c", "device_wait", "python", ""]])


def test_exact_table_from_a_scratch_folder_written_here(tmp_path):
    out = tmp_path / "out"
    scratch(out)
    r = run_trust(out)
    assert r.returncode == 0, r.stderr
    got = [(x["kind"], x["count"], x["device_us"], x["pct_of_device_time"])
           for x in trust_rows(out)]
    assert got == [
        ("step_failed", "", "", ""),
        ("reconciliation_check", "3", "", ""),          # |10 - 13| events, one item for both
        ("under_recorded_replays", "1", "", ""),        # 4, 4, 3: one kernel short
        ("duplicate_program", "2", "16.000", "16.00"),  # ids 3 and 9; time under 9
        ("async_labels_missing", "2", "8.000", "8.00"),  # exact-matched label not counted
        ("unattributed", "1", "4.000", "4.00"),
        ("low_confidence", "2", "7.500", "7.50"),
        ("graph_launch_metrics", "12", "23.000", "23.00"),
        ("python_tracer", "1", "", ""),                 # the gap's idle is no GPU time
        ("nccl_waits", "2", "8.000", "8.00"),
        ("rocm_unknown_memcpy", "1", "4.000", "4.00"),
    ]
    assert_citable(trust_rows(out))
    by = {x["kind"]: x for x in trust_rows(out)}
    assert by["reconciliation_check"]["source"] == (
        "reconciliation.csv: check=gpu_events_json_vs_xplane_count; "
        "check=gpu_events_json_vs_xplane_duration")
    assert "GPU 0: 10 vs 13 | GPU 0: 1 vs 2 us" == by["reconciliation_check"]["detail"]
    # kernels_per_step is the short replay: folded into it, not listed twice
    assert "check=kernels_per_step" in by["under_recorded_replays"]["source"]
    assert "1 of 3 replays short" in by["under_recorded_replays"]["detail"]
    # the confidence check is the low-confidence item's verdict
    assert "9% below" in by["low_confidence"]["detail"]
    assert "launched by graphs" in by["graph_launch_metrics"]["detail"]  # not a refusal too
    assert "$train.py:10 step" in by["python_tracer"]["detail"]
    assert "overlaps 12.000 us of gaps" in by["python_tracer"]["detail"]
    assert "all-gather.1, all-gather.2" in by["async_labels_missing"]["detail"]
    questions = [x for x in read(out / "trust.csv") if x["section"] == "needs_new_capture"]
    caps = " ".join(x["detail"] for x in questions)
    for needed in ("batch-size sweep", "command buffers off", "Python tracer off",
                   "async collectives turned off", "collectives alone", "several hosts"):
        assert needed in caps, needed
    assert all(x["kind"] == "" and x["count"] == "" for x in questions)
    result = json.loads((out / "trust.json").read_text())
    assert result["figures"]["items"] == {"value": 11, "unit": "count", "label": "inferred"}
    assert result["figures"]["defects"]["value"] == 4
    assert result["figures"]["needs_new_capture"]["value"] == len(questions)
    assert result["figures"]["device_time_us"] == {"value": 100.0, "unit": "us",
                                                "label": "measured"}
    assert result["inputs"]["missing"] == {"changes": "changes.json is missing: the step did "
                                                      "not run here, or failed"}
    assert result["largest"][0]["kind"] == "graph_launch_metrics"
    lines = r.stdout.splitlines()
    assert lines[:2] == [f"wrote {out / 'trust.csv'} ({11 + len(questions)} rows)",
                         f"wrote {out / 'trust.json'}"]
    assert lines[2].startswith("trust items: 11 (4 defects of this capture); needs a new "
                               f"capture: {len(questions)} questions")
    assert sum(1 for x in lines if x.startswith("  largest: ")) == 3
    assert lines[-1].startswith("Next: ")


def test_ranked_changes_become_questions(tmp_path):
    out = tmp_path / "out"
    scratch(out)
    (out / "changes.json").write_text(json.dumps({"step": "changes", "status": "done",
                                                  "refusals": []}))
    write_csv(out / "changes.csv", ["rank", "cause_kind", "cause", "where", "step_if_gone_us",
                                    "knob"],
              [[n, "host_gap", f"cause {n}", f"GPU 0 stream {n}", 100.0 - n, f"knob {n}"]
               for n in (1, 2, 3, 4, 5)])
    r = run_trust(out)
    assert r.returncode == 0, r.stderr
    assert not [x for x in trust_rows(out) if x["kind"] == "step_failed"]
    qs = [x for x in read(out / "trust.csv") if x["source"].startswith("changes.csv")]
    assert [x["source"] for x in qs] == ["changes.csv: rank=1", "changes.csv: rank=2",
                                         "changes.csv: rank=3", "changes.csv: knob"]
    assert qs[0]["item"] == ("the step time with rank 1's change made: host_gap at GPU 0 "
                             "stream 1 (estimated 99.0 us, inferred, not run)")
    assert qs[0]["detail"].endswith("; the knob: knob 1")
    assert qs[3]["item"] == "the step time with each of the other 2 ranked changes made"


def test_failed_steps_are_items_and_stale_results_are_not_read(tmp_path):
    out = tmp_path / "out"
    scratch(out)
    (out / "reconcile.json").unlink()
    r = run_trust(out, "--failed", "attribute_kernels=exit 1: the xplane holds no HLO",
                  "--failed", "6=not run yet")
    assert r.returncode == 0, r.stderr
    rows = trust_rows(out)
    failed = {x["source"]: x["detail"] for x in rows if x["kind"] == "step_failed"}
    assert set(failed) == {"attribution/attribute_kernels.json", "reconcile.json",
                           "changes.json"}
    assert failed["attribution/attribute_kernels.json"].startswith(
        "exit 1: the xplane holds no HLO; for the report: no kernel is attributed")
    assert failed["changes.json"].startswith("not run yet; ")
    assert failed["reconcile.json"].startswith("reconcile.json is missing")
    kinds = {x["kind"] for x in rows}
    # step 4's older result is not read: none of its items
    assert not kinds & {"duplicate_program", "async_labels_missing", "unattributed",
                        "low_confidence"}
    assert "reconciliation_check" not in kinds
    result = json.loads((out / "trust.json").read_text())
    assert any("attribute_kernels failed in this run" in n for n in result["notes"])
    assert len(result["refusals"]) == 3


def test_told_after_its_long_reads_it_writes_what_its_arguments_give(tmp_path):
    """--rest-when-told (investigate.py runs trust beside the last steps): the failures that
    come on standard input count as --failed; the files equal those of --failed arguments."""
    out = tmp_path / "out"
    scratch(out)
    (out / "reconcile.json").unlink()
    failed = ["attribute_kernels=exit 1: the xplane holds no HLO", "6=not run yet"]
    r = run_trust(out, *[a for f in failed for a in ("--failed", f)])
    assert r.returncode == 0, r.stderr
    given = {f: (out / f).read_bytes() for f in ("trust.csv", "trust.json")}
    told = subprocess.run([BARE, "-I", "-S", "-P", str(SCRIPT), "--out", str(out),
                           "--rest-when-told", "--failed", failed[0]],
                          input=failed[1] + "\n\n", capture_output=True, text=True,
                          timeout=600)
    assert told.returncode == 0, told.stderr
    assert {f: (out / f).read_bytes() for f in given} == given
    bad = subprocess.run([BARE, "-I", "-S", "-P", str(SCRIPT), "--out", str(out),
                          "--rest-when-told"], input="no such step\n", capture_output=True,
                         text=True, timeout=600)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_bad_input(tmp_path):
    r = run_trust(tmp_path / "nowhere")
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "does not exist" in r.stderr
    (tmp_path / "empty").mkdir()
    r = run_trust(tmp_path / "empty")
    assert r.returncode == 1 and "no step has written" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "empty" / "trust.csv").exists()
    r = run_trust(tmp_path / "empty", "--failed", "step9=x")
    assert r.returncode == 2 and "STEP=REASON" in r.stderr
    out = tmp_path / "broken"
    scratch(out)
    (out / "roofline.json").write_text("{not json")
    r = run_trust(out)
    assert r.returncode == 0, r.stderr
    failed = [x for x in trust_rows(out) if x["kind"] == "step_failed"]
    assert [x["source"] for x in failed] == ["roofline.json", "changes.json"]
    assert "is not a JSON object (Expecting property name" in failed[0]["detail"]


# ---------------------------------------------------------------- real captures

def test_v100_capture_without_hlo(tmp_path, shared):
    capture = (shared / "tf-profiler-demo-v100" / "tf2.4-bert-multiworker-8xv100" / "plugins" /
               "profile" / "GPU-multi-worker")
    out = tmp_path / "out"
    codes = {step: r.returncode for step, r in run_steps(capture, out)}
    assert codes == {"capture_info": 0, "skip_stats": 0, "attribute_kernels": 1,
                     "reconcile": 0, "swimlanes": 0, "roofline": 0}
    r = run_trust(out, "--failed", "attribute_kernels=exit 1")
    assert r.returncode == 0, r.stderr
    rows = trust_rows(out)
    no_hlo = [x for x in rows if x["kind"] == "no_hlo"]
    assert len(no_hlo) == 1 and "holds no HLO" in no_hlo[0]["item"]
    assert no_hlo[0]["pct_of_device_time"] == "100.00"
    assert float(no_hlo[0]["device_us"]) == pytest.approx(30162.105, abs=0.001)
    assert [x["source"] for x in rows if x["kind"] == "step_failed"] == [
        "attribution/attribute_kernels.json", "changes.json"]
    # each sentence once: the no-HLO refusals of steps 0 and 5 are the no_hlo item's detail
    assert not [x for x in rows if x["kind"] == "refusal" and "no HLO" in x["item"]]
    assert [x["kind"] for x in rows if x["kind"] == "no_ceiling"] == ["no_ceiling"]
    questions = [x for x in read(out / "trust.csv") if x["section"] == "needs_new_capture"]
    assert any("HLO" in x["detail"] for x in questions)


def test_independent_capture_with_command_buffers(tmp_path):
    capture = SHARED_CAPTURES / "independent-generator" / "minigpt-h100-cb-on"
    if not capture.is_dir():
        pytest.skip(f"{capture} is absent")
    out = tmp_path / "out"
    assert all(r.returncode == 0 for _, r in run_steps(capture, out))
    r = run_trust(out)
    assert r.returncode == 0, r.stderr
    rows = trust_rows(out)
    assert not [x for x in rows if x["kind"] in trust.DEFECT_KINDS]
    graph = [x for x in rows if x["kind"] == "graph_launch_metrics"]
    joins = json.loads((out / "skip_stats.json").read_text())["joins"]
    assert [int(x["count"]) for x in graph] == [joins["graph_launch"]]


@pytest.mark.parametrize("source", ["rocm-8gpu-straggler", "nvidia-cb-missing-replays",
                                     "shared:tracelens-amd-rocm/mi300x-jax0.8-conv3d-8gpu",
                                     "shared:independent-generator/minigpt-h100-cb-on"])
def test_the_facts_step1_hands_on_are_rows_csv_s(tmp_path, monkeypatch, shared, source):
    """Step 1 summarises rows.csv as it writes it (row_facts, in the forked child or in its own
    process): the facts equal, float for float, those of the table read whole, which step 7
    reads only where none were handed on or the table has changed since."""
    sys.path.insert(0, str(STEP_SCRIPTS[1].parent))
    import skip_stats
    import skip_writers
    from tracekit import row_facts
    from tracekit import scratch as scratch_files
    if source.startswith("shared:"):
        run_dir = shared / source.split(":", 1)[1]
    else:
        run_dir = generate(SCENARIOS[source], tmp_path / "capture").run_dir
    trace = next(run_dir.rglob("*.trace.json.gz"))
    monkeypatch.setenv("JAXTRACE_CORES", "2")  # a core for the child, on any machine
    for fork in (False, True):
        out = tmp_path / f"out-{fork}"
        monkeypatch.setattr(skip_writers, "FORK_ROWS_MIN", 0 if fork else 10**9)
        skip_stats.run(trace, out)
        read_whole = row_facts.summarise(scratch_files.stream(out, "rows.csv",
                                                               row_facts.COLUMNS))
        assert row_facts.handed_on(out) == read_whole
        assert read_whole.device_us > 0
    rows_csv = out / "rows.csv"
    os.utime(rows_csv, ns=(rows_csv.stat().st_atime_ns, rows_csv.stat().st_mtime_ns + 1))
    assert row_facts.handed_on(out) is None  # the table changed since: read it again


def _recorded_on(src: Path, dst: Path, keep: set) -> Path:
    """A copy of a real capture whose GPUs outside `keep` recorded nothing: their planes' lines
    emptied in the xplane, their events dropped from the trace (as a profiler that missed them)."""
    import gzip
    import shutil

    from jaxperf.read import xprotos
    shutil.copytree(src / "plugins", dst / "plugins")
    (xp,) = dst.glob("plugins/profile/*/*.xplane.pb")
    space = xprotos.classes()["XSpace"].FromString(xp.read_bytes())
    for p in space.planes:
        if p.name.startswith("/device:GPU:") and int(p.name.rsplit(":", 1)[1]) not in keep:
            del p.lines[:]
    xp.write_bytes(space.SerializeToString())
    (tr,) = dst.glob("plugins/profile/*/*.trace.json.gz")
    data = json.loads(gzip.decompress(tr.read_bytes()))
    gone = {e["pid"] for e in data["traceEvents"] if e.get("name") == "process_name"
            and str(e["args"].get("name", "")).startswith("/device:GPU:")
            and int(e["args"]["name"].rsplit(":", 1)[1]) not in keep}
    data["traceEvents"] = [e for e in data["traceEvents"]
                           if e.get("pid") not in gone or e.get("ph") == "M"]
    tr.write_bytes(gzip.compress(json.dumps(data).encode()))
    return dst


def test_a_program_spanning_gpus_the_capture_missed_is_an_incomplete_capture(tmp_path, shared):
    """The real 3D convolution sharded over 8 MI300X GPUs, as a capture that recorded GPUs 0
    and 1 only: its HLO's sharding spans 8 devices (programs.csv partitions), so the other six
    are work not recorded, a defect item, not idle GPUs; the whole capture has none."""
    src = shared / "tracelens-amd-rocm" / "mi300x-jax0.8-conv3d-8gpu"
    for keep, missing in (({0, 1}, 6), (set(range(8)), 0)):
        cap = _recorded_on(src, tmp_path / f"cap{len(keep)}", keep)
        out = tmp_path / f"out{len(keep)}"
        assert all(r.returncode == 0 for _, r in run_steps(cap, out))
        assert run_trust(out).returncode == 0
        progs = {r["module"]: r for r in read(out / "attribution" / "programs.csv")}
        assert progs["jit_forward_3d_conv"]["partitions"] == "8"
        got = [x for x in trust_rows(out) if x["kind"] == "incomplete_capture"]
        if not missing:
            assert not got
            continue
        (it,) = got
        assert it["count"] == str(missing) and "jit_forward_3d_conv" in it["item"]
        assert "not idle" in it["detail"] and "incomplete_capture" in trust.DEFECT_KINDS


@pytest.mark.parametrize("case", ["gemm", "two_programs"])
def test_steps_that_run_other_programs_of_one_module_name_are_not_the_same_work(
        shared, tmp_path, case):
    """A sweep over GEMM shapes (mi300x gemm: each turn another jit_dot) frames its turns from
    the trace, where programs of one module name count together: step 4's program ids show
    each step runs other programs, a trust item. Two jitted programs and an eager norm a step
    (a TPU probe): every step runs the same programs, no item."""
    capture = (shared / "tracelens-amd-rocm" / "mi300x-jax0.8-gemm" if case == "gemm"
               else REPO / "tests" / "data" / "tpu-probes" / "two_programs")
    out = tmp_path / "out"
    for name, r in run_steps(capture, out):
        assert r.returncode == 0, (name, r.stderr)
    r = run_trust(out)
    assert r.returncode == 0, r.stderr
    items = [x for x in trust_rows(out) if x["kind"] == "steps_not_same_work"]
    if case == "two_programs":
        assert items == []
        return
    (it,) = items
    assert it["count"] == "5" and "jit_dot: 5 program ids" in it["item"], it
    assert "," not in it["item"]
