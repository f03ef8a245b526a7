"""reconcile.py (step 2): every check passes on a clean capture and fails where a defect is
planted; real captures run to the end; partial and bad input."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys

import pytest

from capgen.generate import generate
from capgen.scenarios import SCENARIOS
from conftest import REPO

SCRIPT = REPO / "scripts" / "reconcile.py"
ATTRIBUTE = REPO / "scripts" / "attribute_kernels.py"


def run(capture, out, *extra):
    return subprocess.run([sys.executable, "-P", str(SCRIPT), str(capture), "--out", str(out),
                           *extra], capture_output=True, text=True, timeout=600)


def table(out) -> list[dict]:
    with open(out / "reconciliation.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def by_status(rows, check_prefix):
    return {(r["device"], r["stream"]): r for r in rows if r["check"].startswith(check_prefix)}


@pytest.fixture(scope="module")
def reconciled(tmp_path_factory):
    made = {}

    def get(name, attribute=False):
        key = (name, attribute)
        if key not in made:
            base = tmp_path_factory.mktemp(name)
            r = generate(SCENARIOS[name], base / "capture")
            if attribute:
                p = subprocess.run([sys.executable, "-P", str(ATTRIBUTE), str(r.run_dir),
                                    "--out", str(base / "out"), "--no-xprof"],
                                   capture_output=True, text=True, timeout=600)
                assert p.returncode == 0, p.stderr
            p = run(r.run_dir, base / "out")
            assert p.returncode == 0, p.stderr
            made[key] = (r, table(base / "out"), base / "out", p.stdout)
        return made[key]
    return get


def test_a_clean_capture_passes_every_check(reconciled):
    _, rows, out, stdout = reconciled("nvidia-cb-partial", attribute=True)
    others = [r for r in rows if not r["check"].startswith("same_work")]
    assert {r["status"] for r in others} == {"pass"}, [r for r in others if r["status"] != "pass"]
    # one GPU ran the program, seven were idle: nothing to compare, and said so
    same = [r for r in rows if r["check"].startswith("same_work")]
    assert {r["status"] for r in same} == {"not checkable"} and len(same) == 8
    assert sum("has no events in this capture" in r["trust_sentence"] for r in same) == 7
    assert {r["check"] for r in others} == {
        "gpu_events_json_vs_xplane_count", "gpu_events_json_vs_xplane_duration", "launch_join",
        "kernels_per_step", "stream_budget", "attribution_events_per_execution",
        "attribution_confidence"}
    join = by_status(rows, "launch_join")[("0", "")]
    assert join["figure_a"] == join["figure_b"] == "1024" and "graph launches" in join["what_a"]
    result = json.loads((out / "reconcile.json").read_text())
    assert result["counts"] == {"pass": len(others), "fail": 0, "not checkable": 8}
    assert result["trust_list"] == [] and "checks: " in stdout


def test_a_json_that_disagrees_fails_check_1_on_its_stream(reconciled):
    r, rows, _, _ = reconciled("rocm-json-disagrees")
    failed = [x for x in rows if x["status"] == "fail"]
    count = [x for x in failed if x["check"] == "gpu_events_json_vs_xplane_count"]
    planted = int(next(d["count"] for d in csv.DictReader(open(r.truth_dir / "defects.csv"))
                       if d["kind"] == "json_disagrees"))
    assert len(count) == 1
    assert int(count[0]["figure_b"]) - int(count[0]["figure_a"]) == planted == 5
    assert count[0]["trust_sentence"].startswith("GPU 0 stream ")
    assert {x["check"] for x in failed} <= {"gpu_events_json_vs_xplane_count",
                                           "gpu_events_json_vs_xplane_duration",
                                           "kernels_per_step", "stream_budget"}


def test_missing_graph_replays_fail_kernels_per_step(reconciled):
    """Graph kernels missing from some steps: the steps whose counts differ are named with the
    counts the truth gives them."""
    r, rows, out, _ = reconciled("nvidia-cb-missing-replays")
    fails = [x for x in rows if x["check"] == "kernels_per_step" and x["status"] == "fail"]
    assert len(fails) == 1 and "events in most steps, but" in fails[0]["trust_sentence"]
    truth = {}
    for t in csv.DictReader(open(r.truth_dir / "kernels.csv")):
        truth[t["step"]] = truth.get(t["step"], 0) + 1
    sentence = fails[0]["trust_sentence"]
    for part in sentence.split("but ")[1].split(", "):
        n, step = part.split(" in step ")
        assert truth[step] == int(n)
    common = int(sentence.split(": ")[1].split(" events")[0])
    analysed = json.loads((out / "reconcile.json").read_text())["checks"]
    assert common in truth.values() and len(set(truth.values())) > 1 and analysed


def test_a_non_launch_correlation_fails_the_join_check_with_its_ids(reconciled):
    r, rows, _, _ = reconciled("rocm-non-launch-correlation")
    fails = [x for x in rows if x["check"] == "launch_join" and x["status"] == "fail"]
    ids = {d["correlation_id"] for d in csv.DictReader(open(r.truth_dir / "defects.csv"))
           if d["kind"] == "correlation_joins_non_launch"}
    assert fails and ids and all(i in " ".join(x["trust_sentence"] for x in fails) for i in ids)


def test_the_straggler_runs_the_same_work_slower(reconciled):
    """GPU 5 is planted 1.6x slower: the same events per step, 1.6x their compute time, and
    only that GPU fails the time check."""
    _, rows, _, _ = reconciled("rocm-8gpu-straggler")
    events = by_status(rows, "same_work_across_gpus_events")
    assert len(events) == 8 and {x["status"] for x in events.values()} == {"pass"}
    time = by_status(rows, "same_work_across_gpus_time")
    assert [d for d, x in sorted(time.items()) if x["status"] == "fail"] == [("5", "")]
    ratio = float(time[("5", "")]["figure_a"]) / float(time[("5", "")]["figure_b"])
    assert 1.5 < ratio < 1.7
    assert {x["status"] for x in by_status(rows, "stream_budget").values()} == {"pass"}


def test_attribution_check_needs_step_4(reconciled):
    _, rows, _, _ = reconciled("nvidia-off")
    att = [x for x in rows if x["check"].startswith("attribution")]
    assert [(x["status"], x["trust_sentence"]) for x in att] == [
        ("not checkable", "the attribution cannot be reconciled because step 4 "
                          "(attribute_kernels.py) has not run in this scratch folder")]


@pytest.mark.parametrize("case", [
    "tracelens-amd-rocm/mi300x-jax0.8-conv3d-8gpu", "tracelens-amd-rocm/mi300x-jax0.8-elementwise",
    "tracelens-amd-rocm/mi300x-jax0.8-gemm", "tracelens-amd-rocm/mi355x-jax-te-fused-attn",
    "tf-profiler-demo-v100/tf2.4-bert-multiworker-8xv100",
    "independent-generator/minigpt-h100-cb-off", "independent-generator/minigpt-h100-cb-on"])
def test_every_shared_capture_runs_to_the_end(shared, tmp_path, case):
    p = run(shared / case, tmp_path)
    assert p.returncode == 0, p.stderr
    rows = table(tmp_path)
    assert rows and {r["status"] for r in rows} <= {"pass", "fail", "not checkable"}
    assert all(r["trust_sentence"] for r in rows if r["status"] != "pass")
    count = by_status(rows, "gpu_events_json_vs_xplane_count")
    assert count and {r["status"] for r in count.values()} == {"pass"}
    if case.endswith("conv3d-8gpu"):  # the stream-wait pair's id
        join = by_status(rows, "launch_join")[("0", "")]
        assert join["status"] == "fail" and "477" in join["trust_sentence"]
    if case.startswith("tf-profiler"):  # no steps: the whole capture as one partial window
        kps = [r for r in rows if r["check"] == "kernels_per_step"]
        assert kps and {r["status"] for r in kps} == {"not checkable"}
        assert all("(a partial one" in r["trust_sentence"] for r in kps)
        # GPU 1 holds only argument copies: other work, said as such, never "runs slower";
        # GPUs 4 and 6, which run the work, are compared with each other only
        other = [r for r in rows if r["check"] == "same_work_across_gpus" and r["device"] == "1"]
        assert [(r["status"], r["trust_sentence"]) for r in other] == [(
            "pass", "GPU 1 does other work than GPU(s) 4, 6: GPU 1 holds argument copies only: "
                    "19 events, 33.8 us per GPU and step (19 argument copies in all)")]
        timed = {r["device"] for r in rows if r["check"] == "same_work_across_gpus_time"}
        assert timed == {"4", "6"}


def test_only_the_xplane_runs_check_6_and_says_why_the_rest_cannot(shared, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (xplane,) = (shared / "independent-generator" / "minigpt-h100-cb-on").glob(
        "plugins/profile/*/*.xplane.pb")
    shutil.copy(xplane, src / xplane.name)
    p = run(src / xplane.name, tmp_path / "out")
    assert p.returncode == 0, p.stderr
    rows = table(tmp_path / "out")
    assert {r["check"]: r["status"] for r in rows if r["check"] != "attribution"} == {
        "gpu_events_json_vs_xplane": "not checkable", "launch_join": "not checkable",
        "kernels_per_step": "not checkable", "same_work_across_gpus": "not checkable",
        "stream_budget": "not checkable"}
    assert all("has no .trace.json.gz" in r["trust_sentence"] for r in rows
               if r["check"] != "attribution")


def test_bad_input_is_one_sentence_and_writes_nothing(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    p = run(empty, tmp_path / "out")
    assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1
    assert "Traceback" not in p.stderr and not (tmp_path / "out").exists()


# ------------------------------------------------------------------ a capture built here

TINY_PASS = """\
gpu_events_json_vs_xplane_count,0,7,pass,6,6,count,trace,xplane,
gpu_events_json_vs_xplane_duration,0,7,pass,102.000,102.000,us,trace,xplane,
gpu_events_json_vs_xplane_count,0,8,pass,3,3,count,trace,xplane,
gpu_events_json_vs_xplane_duration,0,8,pass,55.000,55.000,us,trace,xplane,
gpu_events_json_vs_xplane_count,1,7,pass,6,6,count,trace,xplane,
gpu_events_json_vs_xplane_duration,1,7,pass,92.000,92.000,us,trace,xplane,
gpu_events_json_vs_xplane_count,1,8,pass,3,3,count,trace,xplane,
gpu_events_json_vs_xplane_duration,1,8,pass,50.500,50.500,us,trace,xplane,
launch_join,0,,pass,9,9,count,events joined to a launch (0 graph launches),GPU events,
launch_join,1,,pass,9,9,count,events joined to a launch (0 graph launches),GPU events,
kernels_per_step,0,,pass,3,3,count,fewest events in a step,most events in a step,
kernels_per_step,1,,pass,3,3,count,fewest events in a step,most events in a step,
same_work_across_gpus_events,0,,pass,3,3,count,events per step (median),median over GPUs,
same_work_across_gpus_time,0,,pass,30.000,30.000,us,compute + memcpy time per step \
without argument copies (median),median over GPUs,
same_work_across_gpus_events,1,,pass,3,3,count,events per step (median),median over GPUs,
same_work_across_gpus_time,1,,pass,30.000,30.000,us,compute + memcpy time per step \
without argument copies (median),median over GPUs,
stream_budget,0,7,pass,170000000,170000000,ps,compute + collective + memcpy + idle,span,
stream_budget,0,8,pass,170000000,170000000,ps,compute + collective + memcpy + idle,span,
stream_budget,1,7,pass,170500000,170500000,ps,compute + collective + memcpy + idle,span,
stream_budget,1,8,pass,170500000,170500000,ps,compute + collective + memcpy + idle,span,
attribution,,,not checkable,,,,,,the attribution cannot be reconciled because step 4 \
(attribute_kernels.py) has not run in this scratch folder
"""


def _tiny(folder):
    """Two GPUs, three annotated steps, every kernel launched on its own (the swimlanes tests'
    capture: its kernels and their times are listed there)."""
    from test_swimlanes import build_capture
    return build_capture(folder)


def test_tiny_capture_exact_table(tmp_path):
    """Figures by hand: GPU 0 stream 7 runs 20 + 10 + 2 + 20 + 20 + 30 us; its step windows
    (annotation start to its last kernel's end) are 50 + 50 + 70 us; compute + memcpy time per
    step (the all-reduces left out) on GPU 0 is 30, 22, 50 us (median 30), on GPU 1 30, 22, 40
    (median 30)."""
    run_dir = _tiny(tmp_path / "capture")
    p = run(run_dir, tmp_path / "out")
    assert p.returncode == 0, p.stderr
    text = (tmp_path / "out" / "reconciliation.csv").read_text()
    assert text == ",".join(
        ["check", "device", "stream", "status", "figure_a", "figure_b", "unit", "what_a",
         "what_b", "trust_sentence"]) + "\n" + TINY_PASS


def test_tiny_capture_a_dropped_event_and_a_lost_launch_fail_exactly(tmp_path):
    """The trace loses GPU 1's 5 us kernel on stream 7 (json != xplane there) and the launch of
    correlation id 3 (GPU 0's third kernel joins nothing): exactly those rows fail."""
    import gzip
    run_dir = _tiny(tmp_path / "capture")
    (trace,) = run_dir.glob("*.trace.json.gz")
    data = json.loads(gzip.decompress(trace.read_bytes()))
    gpu1 = next(e["pid"] for e in data["traceEvents"] if e.get("ph") == "M" and
                e.get("args", {}).get("name") == "/device:GPU:1")
    dropped = [e for e in data["traceEvents"] if e.get("pid") == gpu1 and e.get("tid") == 7
               and e.get("dur") == 5]
    lost = [e for e in data["traceEvents"] if e.get("name") == "cuLaunchKernel" and
            e.get("args", {}).get("correlation_id") == "3"]
    assert len(dropped) == 1 and len(lost) == 1
    data["traceEvents"] = [e for e in data["traceEvents"] if e not in dropped + lost]
    trace.write_bytes(gzip.compress(json.dumps(data).encode()))
    p = run(run_dir, tmp_path / "out")
    assert p.returncode == 0, p.stderr
    fails = [(r["check"], r["device"], r["stream"], r["figure_a"], r["figure_b"],
              r["trust_sentence"]) for r in table(tmp_path / "out") if r["status"] == "fail"]
    assert fails[:3] == [
        ("gpu_events_json_vs_xplane_count", "1", "7", "5", "6",
         "GPU 1 stream 7: the trace holds 5 events, the xplane 6"),
        ("gpu_events_json_vs_xplane_duration", "1", "7", "87.000", "92.000",
         "GPU 1 stream 7: summed event time differs, 87.000 us in the trace vs 92.000 us in "
         "the xplane"),
        ("launch_join", "0", "", "8", "9",
         "GPU 0: 1 of 9 events join no launch call: none 1 (ids 3)")]


def test_a_step_that_compiles_a_new_program_is_no_defect_of_the_event_counts():
    """kernels_per_step on step 1's analysis: a step whose event count differs because XLA
    compiled a new program in it (skip_stats.json compile.compiling_steps) passes, saying why;
    a step that differs without compiling fails."""
    from types import SimpleNamespace

    import model_checks
    rows = [{"device": 0, "step": n, "kernels": 69 if n == 2 else 57} for n in range(4)]
    a = SimpleNamespace(analysed=[SimpleNamespace(partial=False)] * 4,
                        compiled={"compiling_steps": [2]})
    (r,) = model_checks.check_kernels_per_step(a, rows)
    assert r["status"] == "pass" and "XLA compiles in it" in r["trust_sentence"], r
    a.compiled = {"compiling_steps": [3]}
    (r,) = model_checks.check_kernels_per_step(a, rows)
    assert r["status"] == "fail" and "69 in step 2" in r["trust_sentence"], r
