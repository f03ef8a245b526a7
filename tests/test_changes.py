"""changes.py (step 6): the causes the generator planted, ranked first with the saving it planted
(launch-bound: the host gap; device-bound: the top instructions; a straggler: its GPU, against a
capture generated without it), an exact critical path on a scratch folder written here, the
combination rule, refusals where a step's tables are missing, bad input, and the real captures.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from capgen.generate import generate
from capgen.scenarios import SCENARIOS
from conftest import REPO, SHARED_CAPTURES, layout_text, read_table, write_table

SCRIPT = REPO / "scripts" / "changes.py"
BARE = getattr(sys, "_base_executable", sys.executable)
STEPS = [REPO / "scripts" / "capture_info.py",
         REPO / "analyzing-jax-launch-overhead" / "scripts" / "skip_stats.py",
         REPO / "scripts" / "attribute_kernels.py", REPO / "scripts" / "reconcile.py",
         REPO / "scripts" / "swimlanes.py", REPO / "scripts" / "roofline.py"]
KINDS = {"dispatch", "fused_on_jit", "gemm_backend", "host_gap", "kernel_gaps", "kernel_family",
         "exposed_collective", "straggler_wait", "memcpy", "instruction", "python_line",
         "idle_between_steps"}
COLUMNS = ["rank", "cause_kind", "cause", "where", "pct_of_step", "step_us", "saving_us",
           "saving_min_us", "saving_max_us", "saving_measured_us", "step_if_gone_us",
           "speedup_if_gone", "speedup_measured", "target", "assumptions", "knob", "label",
           "source"]
PS = 1e6  # picoseconds per microsecond
# Tolerances against the generator's truth. Host-late time is measured off the same timestamps
# the truth is computed from (1%: only rounding to ns and the 3-decimal tables). An instruction's
# time per step is its share of the program's kernel time over all steps times the step's compute:
# the generator draws each kernel's duration with +-3% noise, so 5%. The straggler's saving is an
# inference from kernel time (the counterfactual capture is the truth): 5%.
HOST_TOL = 0.01
INSTRUCTION_TOL = 0.05
STRAGGLER_TOL = 0.05


def run(out, *args, capture=None):
    """As a user runs it: a bare interpreter (no site-packages), -P."""
    cmd = [BARE, "-I", "-S", "-P", str(SCRIPT)] + ([str(capture)] if capture else []) + \
        ["--out", str(out), *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def read(path):
    return read_table(path)


def build(base: Path, capture: Path, steps=STEPS) -> Path:
    out = base / "out"
    for s in steps:
        p = subprocess.run([sys.executable, "-P", str(s), str(capture), "--out", str(out)],
                           capture_output=True, text=True, timeout=1200)
        assert p.returncode == 0, (s.name, p.stderr)
    return out


def scenario(tmp_path_factory, name, **changes):
    base = tmp_path_factory.mktemp(name)
    sc = dataclasses.replace(SCENARIOS[name], **changes)
    r = generate(sc, base / "capture")
    out = build(base, r.run_dir)
    p = run(out)
    assert p.returncode == 0, p.stderr
    return r, out, p


def result(out):
    return json.loads((out / "changes.json").read_text())


def truth_steps(r):
    return {(int(s["step"]), int(s["device"])): s for s in r.steps}


def truth_host_us(r, step, device):
    return truth_steps(r)[(step, device)]["host_ps"] / PS


@pytest.fixture(scope="module")
def launch_bound(tmp_path_factory):
    return scenario(tmp_path_factory, "nvidia-launch-bound")


@pytest.fixture(scope="module")
def device_bound(tmp_path_factory):
    return scenario(tmp_path_factory, "nvidia-device-bound")


@pytest.fixture(scope="module")
def straggler(tmp_path_factory):
    return scenario(tmp_path_factory, "rocm-8gpu-straggler")


# ---------------------------------------------------------------- every table's shape

def check_table(out, p):
    res = result(out)
    rows = read(out / "changes.csv")
    with open(out / "changes.csv", encoding="utf-8") as fh:
        assert fh.readline().rstrip("\n").split(",") == COLUMNS
    assert res["step"] == "changes" and res["status"] == "done"
    assert [int(r["rank"]) for r in rows] == list(range(1, len(rows) + 1))
    assert len(res["causes"]) == len(rows) == res["tables"]["changes.csv"]
    step = res["figures"]["step_us"]
    assert step["label"] == "measured" and step["min"] <= step["value"] <= step["max"]
    # why this step is the median (never another sentence written over it)
    assert res["steps"]["why"].startswith("step "), res["steps"]["why"]
    lines_seen = False
    for r, c in zip(rows, res["causes"], strict=True):
        assert r["cause_kind"] in KINDS and r["label"] == "inferred, not run"
        assert float(r["step_us"]) == pytest.approx(step["value"], abs=1e-3)
        s, lo, hi = (float(r[k]) for k in ("saving_us", "saving_min_us", "saving_max_us"))
        assert 0 <= lo <= s <= hi <= step["max"] + 1e-3
        assert float(r["step_if_gone_us"]) == pytest.approx(step["value"] - s, abs=2e-3)
        assert r["assumptions"] and r["knob"] and r["source"]
        assert c["saving_us"]["label"] == "inferred" and c["saving_us"]["value"] == \
            pytest.approx(s, abs=1e-3)
        # Python lines and kernel families (the instructions' time regrouped) come after
        # every other cause
        if r["cause_kind"] in ("python_line", "kernel_family"):
            lines_seen = True
        else:
            assert not lines_seen
    # the other causes rank by their saving per step (its share of the step)
    shares = [float(r["pct_of_step"]) for r in rows
              if r["cause_kind"] not in ("python_line", "kernel_family")]
    assert shares == sorted(shares, reverse=True)
    # the critical path's slices cover the median step's window, each microsecond once
    cp = {k: v["value"] for k, v in res["critical_path"].items()}
    assert sum(v for k, v in cp.items() if k != "window") == pytest.approx(cp["window"], abs=0.01)
    # the median step's own window is one of the steps' windows the step is the median of
    assert step["min"] - 1e-3 <= cp["window"] <= step["max"] + 1e-3
    assert all(v >= 0 for v in cp.values())
    # the exposed share of the compute is a share: never above 100%, whatever the gaps below 1 us
    assert 0 <= res["figures"]["compute_exposed_pct_of_compute"]["value"] <= 100 + 1e-9
    for r in rows:
        for m in re.finditer(r"([0-9.]+)% in step", r["assumptions"]):
            assert float(m.group(1)) <= 100
    # idle between kernels saves at most the critical path's idle inside the step
    for r in rows:
        if r["cause_kind"] == "kernel_gaps":
            assert float(r["saving_us"]) <= cp["idle_before"] + 1e-3
    comb = res["figures"]["combined_saving_us"]
    assert comb["label"] == "inferred" and 0 <= comb["value"] <= step["value"] + 1e-3
    assert comb["max"] <= step["max"] + 1e-3
    # the combined saving is not a sum of the rows (lines repeat instructions) but covers the
    # largest one
    assert comb["value"] >= max((float(r["saving_us"]) for r in rows if r["cause_kind"] !=
                                 "straggler_wait"), default=0) - 1e-3
    assert res["combine_rule"]
    # stdout: wrote lines, up to three causes, then Next
    out_lines = p.stdout.strip().splitlines()
    assert out_lines[0].startswith("wrote ") and out_lines[1].startswith("wrote ")
    assert out_lines[-1].startswith("Next:")
    assert len(out_lines) == 3 + min(3, len(rows)) or not rows
    return res, rows


# ---------------------------------------------------------------- planted causes

def test_launch_bound_names_the_host_gap_with_the_planted_host_time(launch_bound):
    r, out, p = launch_bound
    res, rows = check_table(out, p)
    assert res["verdict"] == SCENARIOS["nvidia-launch-bound"].expected_verdict == "launch-bound"
    top = rows[0]
    assert top["cause_kind"] == "host_gap"
    n = res["steps"]["median"]
    crit = truth_steps(r)[(n, 0)]["critical_stream"]
    assert top["where"].startswith(f"GPU 0 stream {crit}")
    want = truth_host_us(r, n, 0)
    assert float(top["saving_us"]) == pytest.approx(want, rel=HOST_TOL)
    lo = min(truth_host_us(r, s, 0) for s in res["steps"]["used"])
    hi = max(truth_host_us(r, s, 0) for s in res["steps"]["used"])
    assert float(top["saving_min_us"]) == pytest.approx(lo, rel=HOST_TOL)
    assert float(top["saving_max_us"]) == pytest.approx(hi, rel=HOST_TOL)
    assert float(top["pct_of_step"]) > 90
    # the host events inside the gaps: the planted Python work, so the Python tracer is named
    assert "$minigpt.py:120 batch" in top["cause"]
    assert "command buffers on" in top["knob"] and "Python tracer" in top["knob"]
    # the GPU idle between steps: the truth's next start minus its end
    (idle,) = [x for x in rows if x["cause_kind"] == "idle_between_steps"]
    t = truth_steps(r)
    gap = (t[(n + 1, 0)]["start_ps"] - t[(n, 0)]["end_ps"]) / PS
    assert float(idle["saving_us"]) == pytest.approx(gap, abs=0.01)
    # instructions hide behind the host: none is listed, and a note says how much is hidden
    assert not [x for x in rows if x["cause_kind"] == "instruction"]
    assert any(nt.startswith("not listed: the top instructions") for nt in res["notes"])
    assert p.stdout.splitlines()[2].startswith("1. host_gap (GPU 0 stream")


def test_device_bound_ranks_the_top_instructions_at_their_distance_to_the_ceiling(device_bound):
    r, out, p = device_bound
    res, rows = check_table(out, p)
    assert res["verdict"] == SCENARIOS["nvidia-device-bound"].expected_verdict
    top = rows[0]
    assert top["cause_kind"] == "instruction"
    ins = top["where"].split(" (")[0]
    roof = {x["instruction"]: x for x in read(out / "roofline.csv")}
    # the instruction furthest from its ceiling in time: the largest
    # device_us x (1 - pct_of_ceiling)
    cut = {k: float(x["device_us"]) * (1 - float(x["pct_of_ceiling"]) / 100)
           for k, x in roof.items() if x["pct_of_ceiling"] and x["category"] != "collective"}
    assert ins == max(cut, key=cut.get)
    # truth: the instruction's kernel time in the median step, at its ceiling's distance
    n = res["steps"]["median"]
    t = sum(int(k["dur_ps"]) for k in r.kernels
            if k["instruction"] == ins and k["step"] == n and k["device"] == 0) / PS
    want = t * (1 - float(roof[ins]["pct_of_ceiling"]) / 100)
    assert float(top["saving_us"]) == pytest.approx(want, rel=INSTRUCTION_TOL)
    # the host gap is the planted 20 us of Python (and dispatch) before the first launch: small
    host = [x for x in rows if x["cause_kind"] == "host_gap"]
    assert host and float(host[0]["saving_us"]) == pytest.approx(truth_host_us(r, n, 0),
                                                                  rel=HOST_TOL)
    assert int(host[0]["rank"]) > 5
    # all five listed instructions come first, then the rest; lines last
    assert [x["cause_kind"] for x in rows[:5]] == ["instruction"] * 5
    assert res["figures"]["compute_exposed_pct_of_compute"]["value"] == pytest.approx(100, abs=0.5)


def test_straggler_names_the_gpu_with_the_saving_of_a_capture_without_it(straggler,
                                                                          tmp_path_factory):
    r, out, p = straggler
    res, rows = check_table(out, p)
    assert res["verdict"] == "collective/straggler-bound"
    (defect,) = [d for d in r.defects if d["kind"] == "straggler"]
    top = rows[0]
    assert top["cause_kind"] == "straggler_wait" and top["where"] == f"GPU {defect['device']}"
    assert res["steps"]["straggler"] == int(defect["device"])
    # the truth: the same scenario generated without the straggler (same seed, same draws)
    cf = generate(dataclasses.replace(SCENARIOS["rocm-8gpu-straggler"], straggler_gpu=None),
                  tmp_path_factory.mktemp("no-straggler") / "capture")

    def step_us(steps, n):
        rows_n = [s for s in steps if int(s["step"]) == n]
        return (max(s["end_ps"] for s in rows_n) - rows_n[0]["start_ps"]) / PS

    n = res["steps"]["median"]
    want = step_us(r.steps, n) - step_us(cf.steps, n)
    assert want > 1000  # the planted 1.6x makes a large difference
    assert float(top["saving_us"]) == pytest.approx(want, rel=STRAGGLER_TOL)
    for s in res["steps"]["used"]:
        w = step_us(r.steps, s) - step_us(cf.steps, s)
        assert float(top["saving_min_us"]) <= w * (1 + STRAGGLER_TOL)
        assert float(top["saving_max_us"]) >= w * (1 - STRAGGLER_TOL)
    # the exposed collective on the straggler is its own waits, not the peers' (small)
    coll = [x for x in rows if x["cause_kind"] == "exposed_collective"]
    assert coll and float(coll[0]["saving_us"]) < 0.05 * float(top["saving_us"])


def test_off_and_graphs_name_the_host_gap_with_the_planted_host_time(tmp_path_factory):
    for name, verdict in (("nvidia-off", "launch-bound"), ("nvidia-cb-all", "mixed")):
        r, out, p = scenario(tmp_path_factory, name)
        res, rows = check_table(out, p)
        assert res["verdict"] == verdict
        n = res["steps"]["median"]
        assert rows[0]["cause_kind"] == "host_gap"
        assert float(rows[0]["saving_us"]) == pytest.approx(truth_host_us(r, n, 0), rel=HOST_TOL)
        t = truth_steps(r)
        gap = (t[(n + 1, 0)]["start_ps"] - t[(n, 0)]["end_ps"]) / PS
        (idle,) = [x for x in rows if x["cause_kind"] == "idle_between_steps"]
        assert float(idle["saving_us"]) == pytest.approx(gap, abs=0.01)
        if name == "nvidia-cb-all":
            # every kernel runs inside a graph: the host gap is the Python before the launch
            assert rows[0]["knob"].startswith("the host's work before the step's first launch")


def test_no_steps_splits_the_planted_host_time_at_the_execution_start(tmp_path_factory):
    """Without step annotations a step starts at the program's execution: the planted Python
    before it falls into the GPU idle after the previous step; together they are the truth's
    host time plus its idle between steps."""
    r, out, p = scenario(tmp_path_factory, "rocm-no-steps")
    res, rows = check_table(out, p)
    n = res["steps"]["median"]
    assert rows[0]["cause_kind"] == "host_gap"
    (idle,) = [x for x in rows if x["cause_kind"] == "idle_between_steps"]
    t = truth_steps(r)
    want = truth_host_us(r, n + 1, 0) + (t[(n + 1, 0)]["start_ps"] - t[(n, 0)]["end_ps"]) / PS
    got = float(rows[0]["saving_us"]) + float(idle["saving_us"])
    # measured step n+1's host gap starts at its execution; step n's idle tail holds the rest
    host_next = float(rows[0]["saving_us"])
    assert host_next == pytest.approx(truth_host_us(r, n, 0) - (
        float(read(out / "steps.csv")[n]["start_us"]) - t[(n, 0)]["start_ps"] / PS), rel=HOST_TOL)
    assert got == pytest.approx(want, rel=HOST_TOL)


# ---------------------------------------------------------------- an exact critical path

STEP_COLS = ["step", "device", "source", "start_us", "end_us", "dur_us", "kernels", "busy_us",
             "idle_us", "idle_pct_of_step", "critical_stream", "tklqt_us", "akd_us", "il_us",
             "il_idle_us", "union_idle_us", "host_late_us", "device_wait_us", "unknown_gap_us"]
GAP_COLS = ["device", "stream", "step", "start_us", "end_us", "dur_us", "kernel_before",
            "kernel_after", "cause", "launch_thread", "host_events"]
ROW_COLS = ["device", "stream", "stream_name", "kernel", "category", "start_us", "dur_us",
            "end_us", "correlation_id", "join", "launch_name", "launch_thread",
            "launch_start_us", "launch_dur_us", "queue_us", "launch_to_start_us", "hlo_op",
            "hlo_module", "graph", "step"]


def write(path, cols, rows):
    """One of step 1's tables as scratch.py declares it: the given columns' cells in their
    declared places, the columns not given empty."""
    from tracekit import scratch
    if scratch.children(path.name):
        return write_table(path.parent, path.name, cols, rows)
    declared = scratch.columns(path.name)
    assert set(cols) <= set(declared), set(cols) - set(declared)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(declared)
        w.writerows([dict(zip(cols, r, strict=True)).get(c, "") for c in declared]
                    for r in rows)


def tiny_scratch(folder: Path, steps: int = 2) -> Path:
    """One GPU, steps 0 and 1 (`steps` of them) of 100 us each (each starts 120 us after the one
    before), critical stream 7.
    Step 0: host-late gap 0-10, compute 10-30, an argument copy on stream 8 at 30-40 while
    stream 7 waits on the host (40-50 is a host-late gap too), a collective on stream 9 at
    50-70 while stream 7 waits on the device, compute 70-100; then idle to 120."""
    folder.mkdir(parents=True)

    def step_row(n, t0):
        return [n, 0, "annotation", f"{t0:.3f}", f"{t0 + 100:.3f}", "100.000", 4, "70.000",
                "30.000", "30.00", 7, "", "", "100.000", "20.000", "30.000", "30.000", "20.000",
                "0.000"]

    write(folder / "steps.csv", STEP_COLS, [step_row(n, 120.0 * n) for n in range(steps)])
    gaps, rows = [], []
    for n, t0 in ((n, 120.0 * n) for n in range(steps)):
        gaps += [[0, 7, n, f"{t0:.3f}", f"{t0 + 10:.3f}", "10.000", "", "fusion.1", "host_late",
                  "python", "$train.py:10 load=6.000 | jit_step=4.000"],
                 [0, 7, n, f"{t0 + 30:.3f}", f"{t0 + 50:.3f}", "20.000", "fusion.1",
                  "nccl_wait", "host_late", "python", "jit_step=20.000"],
                 [0, 7, n, f"{t0 + 50:.3f}", f"{t0 + 70:.3f}", "20.000", "nccl_wait",
                  "fusion.2", "device_wait", "python", ""]]
        for s, name, cat, a, b, op in ((7, "fusion_1", "compute", 10, 30, "fusion.1"),
                                       (8, "Memcpy HtoD", "memcpy", 30, 40, ""),
                                       (9, "ncclAllReduce", "collective", 50, 70, "all-reduce"),
                                       (7, "fusion_2", "compute", 70, 100, "fusion.2")):
            rows.append([0, s, f"Stream #{s}(Compute, Memcpy)", name, cat, f"{t0 + a:.3f}",
                         f"{b - a:.3f}", f"{t0 + b:.3f}", 1, "launch", "cuLaunchKernel",
                         "python", "", "", "", "", op, "jit_step", 0, n])
    rows.sort(key=lambda r: (r[0], r[1], float(r[5])))
    write(folder / "gaps.csv", GAP_COLS, gaps)
    write(folder / "rows.csv", ROW_COLS, rows)
    (folder / "skip_stats.json").write_text(json.dumps({
        "step": "skip_stats", "status": "done", "verdict": "launch-bound",
        "steps": {"source": "StepTraceAnnotation (step_num)", "analysed": [0, 1],
                  "partial_analysed": [], "skipped_partial": []},
        "joins": {"launch": 8, "graph_launch": 0}}))
    return folder


def test_the_critical_path_of_a_scratch_folder_written_here(tmp_path):
    out = tiny_scratch(tmp_path / "out")
    p = run(out)
    assert p.returncode == 0, p.stderr
    res = result(out)
    # step 1 has no next step: left out; step 0 is the step, its window 0-120 us
    assert res["steps"]["used"] == [0] and res["steps"]["median"] == 0
    assert any("step(s) 1 left out" in nt for nt in res["notes"])
    cp = {k: v["value"] for k, v in res["critical_path"].items()}
    assert cp == {"window": 120.0, "host_late": 30.0, "compute": 50.0, "memcpy_arg": 0.0,
                  "collective": 20.0, "idle_before": 0.0, "idle_between": 20.0}
    # the argument copy runs inside a host-late gap: the host's time, not the copy's
    rows = {r["cause_kind"]: r for r in read(out / "changes.csv")}
    assert set(rows) == {"host_gap", "exposed_collective", "idle_between_steps"}
    assert float(rows["host_gap"]["saving_us"]) == 30.0
    assert float(rows["host_gap"]["pct_of_step"]) == 25.0
    assert "$train.py:10 load 6.0 us" in rows["host_gap"]["cause"]
    assert "Python tracer" in rows["host_gap"]["knob"]
    assert float(rows["exposed_collective"]["saving_us"]) == 20.0  # after the last host gap
    assert "all-reduce 20.0 us" in rows["exposed_collective"]["cause"]
    assert float(rows["idle_between_steps"]["saving_us"]) == 20.0
    assert float(rows["idle_between_steps"]["step_if_gone_us"]) == 100.0
    # compute after the last host gap (50 us): 30 of 50 us exposed
    assert res["figures"]["compute_exposed_pct_of_compute"]["value"] == 60.0
    # combined: host 30 + collective 20 + idle 20 (no instruction without step 4), not past 120
    assert res["figures"]["combined_saving_us"]["value"] == 70.0
    assert any("attribution/ops.csv is missing" in x for x in res["refusals"])
    assert [r["rank"] for r in read(out / "changes.csv")] == ["1", "2", "3"]


def test_a_recompile_mid_run_is_ranked_over_the_mean_step(tmp_path):
    """XLA compiles in step 2 only, after steps 0 and 1 ran without (a new shape mid-run): the
    steps used leave it out (said in a note), and its row is of the mean window of those steps
    and it (its own step_us), its saving the compile's total over them; the combined saving
    leaves it out."""
    out = tiny_scratch(tmp_path / "out", steps=4)
    s1 = json.loads((out / "skip_stats.json").read_text())
    s1["steps"]["analysed"] = [0, 1, 2, 3]
    s1["compile"] = {"per_step_us": {"value": 0.0, "min": 0.0, "max": 60.0, "unit": "us",
                                     "label": "measured"}, "total_us": 60.0,
                     "steps_with_compile": 1, "steps": 3, "compiling_steps": [2], "events": 1,
                     "label": "measured"}
    (out / "skip_stats.json").write_text(json.dumps(s1))
    p = run(out)
    assert p.returncode == 0, p.stderr
    res = result(out)
    assert res["steps"]["used"] == [0, 1]
    assert any("step(s) 2 left out: XLA recompiles" in n for n in res["notes"])
    rows = {r["cause_kind"]: r for r in read(out / "changes.csv")}
    c = rows["compile"]
    assert (float(c["step_us"]), float(c["saving_us"]), float(c["pct_of_step"])) == (
        120.0, 20.0, 16.67), c
    assert "recompiles mid-run" in c["cause"] and "step 2" in c["cause"]
    assert float(rows["host_gap"]["step_us"]) == 120.0
    assert res["figures"]["combined_saving_us"]["value"] == 70.0


def test_missing_tables_rank_what_they_can_and_say_why(tmp_path, launch_bound):
    _, full, _ = launch_bound
    out = tmp_path / "out"
    shutil.copytree(full, out)
    for f in ("rows.csv", "roofline.csv", "roofline.json"):
        (out / f).unlink()
    shutil.rmtree(out / "attribution")
    p = run(out)
    assert p.returncode == 0, p.stderr
    res = result(out)
    rows = read(out / "changes.csv")
    assert rows[0]["cause_kind"] == "host_gap"
    assert rows[0]["saving_us"] == read(full / "changes.csv")[0]["saving_us"]
    assert {r["cause_kind"] for r in rows} <= {"host_gap", "idle_between_steps"}
    ref = " ".join(res["refusals"])
    assert "because rows.csv is not in" in ref and "attribution/ops.csv is missing" in ref
    # without step 5 the instructions are named by kernel time, with no saving
    shutil.rmtree(out)
    shutil.copytree(full, out)
    (out / "roofline.csv").unlink()
    assert run(out).returncode == 0
    ref = " ".join(result(out)["refusals"])
    assert "cannot say how far the top instructions are from their ceiling because roofline.csv" \
        in ref and " us of step " in ref
    assert not [r for r in read(out / "changes.csv") if r["cause_kind"] == "instruction"]


def test_rows_of_other_steps_are_left_out_not_trusted(tmp_path, launch_bound):
    _, full, _ = launch_bound
    out = tmp_path / "out"
    shutil.copytree(full, out)
    from tracekit import scratch
    (out / "rows.csv").write_text(scratch.header("rows.csv") +
                                  "9,9,x,y,compute,1.0,1.0,2.0,,,,,,,,,,,0,77\ngarbage\n")
    p = run(out)
    assert p.returncode == 0, p.stderr
    res = result(out)
    # the refusal names the check that failed and what it compared, never "missing"
    assert any("because rows.csv holds no event of the critical stream steps.csv names for "
               "step(s) 0 (device 0 stream" in x and "not of one run of step 1" in x
               for x in res["refusals"]), res["refusals"]
    assert not any("missing" in x for x in res["refusals"] if "rows.csv" in x)
    rows = read(out / "changes.csv")
    assert rows[0]["cause_kind"] == "host_gap"
    assert rows[0]["saving_us"] == read(full / "changes.csv")[0]["saving_us"]
    # the idle between steps from steps.csv alone: the same figure
    idle = {r["cause_kind"]: r["saving_us"] for r in rows}["idle_between_steps"]
    assert idle == {r["cause_kind"]: r["saving_us"] for r in
                    read(full / "changes.csv")}["idle_between_steps"]


def test_no_gpu_events_is_refused(tmp_path):
    out = build(tmp_path, REPO / "tests" / "data" / "minigpt-cpu", [STEPS[1]])
    p = run(out)
    assert p.returncode == 0, p.stderr
    res = result(out)
    assert res["status"] == "refused" and res["causes"] == []
    assert res["refusals"] == ["cannot rank any cause because step 1 found no GPU events in "
                               "analysed steps (steps.csv is empty)"]
    assert read(out / "changes.csv") == []
    assert "no cause ranked: cannot rank any cause" in p.stdout


def test_bad_input_is_one_sentence(tmp_path, launch_bound):
    empty = tmp_path / "empty"
    empty.mkdir()
    for out in (empty, tmp_path / "absent"):
        p = run(out)
        assert p.returncode == 1 and "Traceback" not in p.stderr
        assert len(p.stderr.strip().splitlines()) == 1 and p.stderr.startswith("changes: ")
    assert "run step 1 (skip_stats.py)" in run(empty).stderr
    (empty / "steps.csv").write_text("a,b\n1,2\n")
    p = run(empty)
    assert p.returncode == 1 and "is not the table skip_stats.py writes" in p.stderr
    assert run(empty, "--bogus").returncode == 2
    # a capture named on the command line must be the one the tables came from
    r, out, _ = launch_bound
    assert run(out, capture=r.run_dir).returncode == 0
    other = generate(SCENARIOS["rocm-off"], tmp_path / "other")
    p = run(out, capture=other.run_dir)
    assert p.returncode == 1 and "holds the tables of" in p.stderr
    # nothing but the two outputs is written, and a failed run leaves them as they were
    before = (out / "changes.csv").read_bytes()
    assert sorted(f.name for f in out.iterdir() if f.name.startswith(".changes")) == []
    assert (out / "changes.csv").read_bytes() == before


def test_interval_helpers():
    from jaxperf.steps import critical_path
    assert critical_path.union([(5, 7), (1, 3), (2, 4), (7, 8), (9, 9)]) == [[1, 4], [5, 8]]
    assert critical_path.subtract([[0, 10], [20, 30]], [[2, 3], [8, 22], [29, 40]]) == \
        [[0, 2], [3, 8], [22, 29]]
    assert critical_path.total([[0, 10], [20, 30]], 5, 25) == 10
    assert critical_path.spread([3, 1, 2], 0) == {"value": 2, "min": 1, "max": 3}  # the median


def test_registry_is_the_documented_cause_kinds():
    """The causes changes.py registers, in their order (the rank's tie order), are the cause_kind
    values references/changes.md's cause table and scratch-layout.md's changes.csv table (rendered
    from scratch.py) name, in the same order: a cause added, removed or moved in one place and not
    the others fails."""
    sys.path.insert(0, str(REPO / "scripts"))
    from jaxperf.analyses import changes
    registry = [c.kind for c in changes.REGISTRY]
    doc = (REPO / "references" / "changes.md").read_text(encoding="utf-8")
    section = doc.split("## Each cause\n", 1)[1].split("\n## ", 1)[0]
    table = re.findall(r"^\| `([a-z0-9_]+)` \|", section.split("\n|---", 1)[1], re.M)
    layout = layout_text()
    section = layout.split("### `changes.csv`", 1)[1].split("\n### ", 1)[0]
    row = next(ln for ln in section.splitlines() if ln.startswith("| `cause_kind` |"))
    listed = re.findall(r"`([a-z0-9_]+)`", row.split("|")[4].split("(", 1)[0])
    assert registry == table == listed
    assert len(set(registry)) == len(registry) == 24
    assert {c.kind for c in changes.REGISTRY if c.regroups} == {"python_line", "kernel_family"}


# ---------------------------------------------------------------- real captures

REAL = ["tracelens-amd-rocm/mi300x-jax0.8-gemm", "tracelens-amd-rocm/mi300x-jax0.8-elementwise",
        "independent-generator/minigpt-h100-cb-on"]


@pytest.mark.parametrize("rel", REAL)
def test_real_captures(shared, tmp_path, rel):
    cap = SHARED_CAPTURES / rel
    out = build(tmp_path, cap)
    p = run(out, capture=cap)
    assert p.returncode == 0, p.stderr
    res, rows = check_table(out, p)
    assert rows and all(x.startswith("cannot ") for x in res["refusals"])
    if rel.endswith("gemm"):
        # an eager loop of 7 program executions per step: the dispatch between programs comes
        # first, its knob names the Python function to jit; the instructions of every program
        # are ranked, each named with its program (custom-call.1 is in all six jit_dot)
        assert rows[0]["cause_kind"] == "dispatch"
        assert rows[0]["cause"].startswith("dispatch between programs: 7 program executions")
        assert "$generate_gemm_trace.py:31 run_gemms" in rows[0]["knob"]
        ins = [r["where"] for r in rows if r["cause_kind"] == "instruction"]
        assert ins and ins[0].startswith("jit_dot(49) custom-call.1")
    if rel.endswith("cb-on"):
        # command buffers on: 245 kernels a step with sub-microsecond gaps between them, and no
        # host late inside the graph: that idle is a cause of its own
        assert "kernel_gaps" in [r["cause_kind"] for r in rows]
    assert all(res["inputs"].values())
    # the step is the median of the steps' windows, each at least the step's duration on the
    # GPU that ends it: at least the median of those durations
    n = res["steps"]["median"]
    durs = [max(float(s["dur_us"]) for s in read(out / "steps.csv") if s["step"] == str(m))
            for m in res["steps"]["used"]]
    assert res["figures"]["step_us"]["value"] >= statistics.median(durs) - 1e-3
    # the step step 3 drew, where it is among the steps used
    drawn = json.loads((out / "swimlanes.json").read_text())["chosen"]["step"]
    assert n == drawn or drawn not in res["steps"]["used"]


def test_capture_without_hlo_ranks_the_host_and_refuses_instructions(shared, tmp_path):
    cap = next((SHARED_CAPTURES / "tf-profiler-demo-v100").iterdir())
    out = build(tmp_path, cap, [STEPS[1]])
    p = run(out)
    assert p.returncode == 0, p.stderr
    res, rows = check_table(out, p)
    assert rows[0]["cause_kind"] == "host_gap"
    assert any("attribution/ops.csv is missing" in x for x in res["refusals"])
    assert any("whole capture" in nt for nt in res["notes"])
    # no steps: the 940 ms before the first kernel are the capture's lead-in, not a step's cost
    assert any("the capture's lead-in" in nt for nt in res["notes"])
    assert float(rows[0]["saving_us"]) < 0.05 * float(rows[0]["step_us"])


def test_programs_in_steps_reads_the_cell_step_4_writes():
    """programs.csv steps is rules.format_ranges' cell ("0-2 5"): a program that ran in steps 0
    to 2 and 5 runs in step 5 (the space-separated runs were read as one part before)."""
    from jaxperf.steps import critical_path
    from tracekit import trace_rules
    progs = [{"program_id": "7", "steps": trace_rules.format_ranges([0, 1, 2, 5])},
             {"program_id": "9", "steps": "3"}]
    assert progs[0]["steps"] == "0-2 5"
    assert critical_path.programs_in_steps(progs, [5]) == {"7"}
    assert critical_path.programs_in_steps(progs, [3, 4]) == {"9"}


@pytest.mark.parametrize("events, lead, setup", [
    # the H200 ModernGPT gap before each step's first kernel: XLA's own set-up fills it
    ([("Thunks::Initialize", 342.5), ("command_buffer_1", 79.8), ("cuGraphLaunch", 20.0)],
     622.3, True),
    # a few us of set-up in an 88 us gap: most of the gap is not the set-up's
    ([("command_buffer_0", 6.5), ("Thunks::Initialize", 0.5)], 88.0, False),
    # the set-up beside far longer Python-traced work in the gaps
    ([("$model.py:40 block_forward", 724.6), ("Thunks::Initialize", 8.0)], 10.5, False),
    ([("DataLoader.__next__", 500.0)], 600.0, False),
])
def test_the_leading_gaps_knob_follows_what_fills_it(events, lead, setup):
    """The host's work before a step's first launch: the runtime's own set-up of each
    execution (thunks initialised, command buffers updated) where it is half the host events'
    time and fills half the gap or more: async dispatch, then fewer executions; else the input
    pipeline's prefetching first."""
    sys.path.insert(0, str(REPO / "scripts"))
    from jaxperf.analyses import changes
    knob = changes.host_knob(lead, lead, 100.0, False, events,
                             changes.adapters.ADAPTERS["GPU"].setup_re)
    assert knob.startswith("the host's work before the step's first launch is mostly the "
                           "runtime's own set-up") == setup, knob
    assert ("prefetching" in knob) != setup


def test_a_compile_that_fills_the_host_gap_ranks_before_it():
    """XLA's compile inside the step is the cause of the host gap it fills: where it saves at
    least half of that gap's saving it ranks just before it (a static argument's new value each
    step: 2.20 s of compile in a 2.24 s gap), and below half it stays in its place."""
    sys.path.insert(0, str(REPO / "scripts"))
    from jaxperf.analyses import changes

    def row(kind, v):
        return {"cause_kind": kind, "saving": {"value": v}, "where": "", "cause": kind,
                "knob": "k"}

    rows = changes.ranked(
        [row("host_gap", 2233.6), row("idle_between_steps", 1.2), row("compile", 2200.8)])
    assert [r["cause_kind"] for r in rows] == ["compile", "host_gap", "idle_between_steps"]
    assert rows[1]["cause"].endswith("; change 1 (compile) is the cause of most of it")
    assert rows[1]["knob"].startswith("first change 1's; then ")
    assert "change 1" not in rows[2]["cause"]
    kinds = [r["cause_kind"] for r in changes.ranked(
        [row("host_gap", 100.0), row("instruction", 60.0), row("compile", 40.0)])]
    assert kinds == ["host_gap", "instruction", "compile"]
