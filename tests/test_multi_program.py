"""Real runs are not one program per step: steps framed from the cycle of program executions,
every program attributed, GPUs that do different work, and the dispatch between programs as a
cause, on generated captures whose iterations, programs and planted facts are known
(tests/capgen MULTI_PROGRAM_SCENARIOS; truth/iterations.csv, truth/programs.csv)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from capgen.generate import generate
from capgen.scenarios import MULTI_PROGRAM_SCENARIOS
from conftest import REPO

INVESTIGATE = REPO / "scripts" / "investigate.py"


def read(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def investigated(tmp_path_factory):
    made = {}

    def get(name):
        if name not in made:
            base = tmp_path_factory.mktemp(name)
            r = generate(MULTI_PROGRAM_SCENARIOS[name], base / "capture")
            p = subprocess.run([sys.executable, "-P", str(INVESTIGATE), str(r.run_dir), "--out",
                                str(base / "out")], capture_output=True, text=True, timeout=600)
            assert p.returncode == 0, p.stderr + p.stdout
            made[name] = (r, base / "out", p.stdout)
        return made[name]
    return get


def truth_iterations(r) -> dict:
    return {(int(t["iteration"]), int(t["device"])): t for t in read(r.truth_dir /
                                                                    "iterations.csv")}


def check_steps_are_the_iterations(r, out):
    """Every planted iteration is one step: same count, and on every GPU it ends where the
    iteration's last GPU activity ends (to the nanosecond the tables keep)."""
    truth = truth_iterations(r)
    steps = read(out / "steps.csv")
    s1 = json.loads((out / "skip_stats.json").read_text())
    framed = sorted(s1["steps"]["analysed"] + s1["steps"]["skipped_partial"])
    assert len(framed) == len({i for i, _ in truth})
    for row in steps:
        t = truth[(int(row["step"]), int(row["device"]))]
        assert row["end_us"] == f"{int(t['end_ps']) / 1e6:.3f}"
        if t["executions"] and row["executions"]:
            assert int(row["executions"]) == int(t["executions"])
    return s1, steps


def check_one_home_of_frames(out):
    """Step 1's frames decide the median step: step 3 draws it and step 6 takes its figures
    from it; every frame's window reaches the next step's start."""
    s1 = json.loads((out / "skip_stats.json").read_text())
    fr = s1["frames"]
    assert fr["median_step"] is not None
    assert json.loads((out / "swimlanes.json").read_text())["chosen"]["step"] == \
        fr["median_step"]
    assert json.loads((out / "changes.json").read_text())["steps"]["median"] == \
        fr["median_step"]
    for f in fr["steps"]:
        if f["next_start_us"] is not None:
            assert f["window_us"] == pytest.approx(
                max(f["end_us"], f["next_start_us"]) - f["start_us"], abs=1e-6)


def check_no_straggler(out):
    s1 = json.loads((out / "skip_stats.json").read_text())
    assert s1["straggler"] is None or not s1["straggler"]["is_straggler"]
    kinds = [c["cause_kind"] for c in read(out / "changes.csv")]
    assert "straggler_wait" not in kinds
    assert not [t for t in read(out / "trust.csv") if "straggler" in t["item"].lower()]


def check_programs_attributed(r, out):
    """programs.csv has every planted program with its executions; ops.csv covers them all."""
    truth = {t["program_id"]: t for t in read(r.truth_dir / "programs.csv")}
    ours = {p["program_id"]: p for p in read(out / "attribution" / "programs.csv")
            if p["program_id"] != "(outside programs)"}
    assert set(ours) == set(truth)
    for pid, t in truth.items():
        assert int(ours[pid]["executions"]) == int(t["executions"]), pid
    assert {o["program_id"] for o in read(out / "attribution" / "ops.csv")} == set(truth)


def test_eager_op_by_op_is_framed_by_its_cycle_and_dispatch_ranks_first(investigated):
    r, out, stdout = investigated("eager-op-by-op")
    s1, steps = check_steps_are_the_iterations(r, out)
    assert s1["steps"]["source"].startswith("the repeating cycle of 25 program executions (")
    assert {row["source"] for row in steps} == {"cycle of 25 executions"}
    # planted: dispatch-bound, the Python function around each iteration is block_forward
    assert json.loads((r.truth_dir / "scenario.json").read_text())["planted"][
        "dispatch_bound"] is True
    assert s1["dispatch"]["enclosing_call"] == "$model.py:40 block_forward"
    assert s1["dispatch"]["enclosing_call_steps"] == 4
    changes = read(out / "changes.csv")
    assert changes[0]["cause_kind"] == "dispatch"
    assert changes[0]["cause"].startswith("dispatch between programs: 25 program executions")
    assert "jax.jit the function that makes these calls ($model.py:40 block_forward" in \
        changes[0]["knob"]
    assert "change 1: dispatch between programs" in stdout
    check_no_straggler(out)
    check_programs_attributed(r, out)
    check_one_home_of_frames(out)
    assert json.loads((out / "factcheck.json").read_text())["verdict"] == "pass"


def test_a_train_step_and_its_optimizer_are_one_step(investigated):
    r, out, _ = investigated("train-plus-optimizer")
    s1, steps = check_steps_are_the_iterations(r, out)
    assert s1["steps"]["source"].startswith(
        "the repeating cycle of 2 program executions (jit_train_step, jit_apply_updates)")
    assert {row["programs"] for row in steps} == {"jit_train_step x1; jit_apply_updates x1"}
    check_programs_attributed(r, out)
    check_no_straggler(out)
    check_one_home_of_frames(out)


def test_annotated_steps_still_win_and_list_their_programs(investigated):
    r, out, _ = investigated("train-plus-optimizer-annotated")
    s1, steps = check_steps_are_the_iterations(r, out)
    assert s1["steps"]["source"] == "StepTraceAnnotation (step_num)"
    assert {row["executions"] for row in steps} == {"2"}


def test_a_gpu_with_only_argument_copies_does_other_work(investigated):
    r, out, _ = investigated("copies-on-other-gpu")
    s1, _ = check_steps_are_the_iterations(r, out)
    groups = [(g["devices"], g["kind"]) for g in s1["gpu_groups"]]
    assert groups == [([7], "programs"), ([0], "argument copies only")]
    check_no_straggler(out)
    rec = [x for x in read(out / "reconciliation.csv")
           if x["check"] == "same_work_across_gpus" and x["device"] == "0"]
    assert [x["status"] for x in rec] == ["pass"]
    assert rec[0]["trust_sentence"].startswith("GPU 0 does other work than GPU(s) 7: GPU 0 "
                                               "holds argument copies only")
    assert "runs slower" not in (out / "reconciliation.csv").read_text()
    assert json.loads((out / "swimlanes.json").read_text())["status"] == "done"


@pytest.mark.parametrize("name", ["pipeline-stages", "pipeline-stages-4"])
def test_pipeline_stages_run_different_programs_and_no_gpu_is_a_straggler(investigated, name):
    r, out, _ = investigated(name)
    s1, _ = check_steps_are_the_iterations(r, out)
    stages = len({d for _, d in truth_iterations(r)})
    assert len(s1["gpu_groups"]) == stages
    assert not [g for g in s1["gpu_groups"] if g["compared"]]
    assert all(g["runs_step"] for g in s1["gpu_groups"])
    check_no_straggler(out)
    check_programs_attributed(r, out)
    sw = json.loads((out / "swimlanes.json").read_text())
    assert sw["status"] == "done" and sw["straggler"] is None


def test_split_k_reductions_are_a_family_cause_with_what_the_capture_cannot_show(tmp_path):
    """nvidia-reuse-splitk-cb adds a cuBLAS split-K reduction kernel to half its GEMMs: the
    family's kernels, time and instructions equal the planted ones, step 6 ranks it with its
    knob, and step 7 says what the capture cannot show about it."""
    from capgen.scenarios import SCENARIOS
    r = generate(SCENARIOS["nvidia-reuse-splitk-cb"], tmp_path / "capture")
    p = subprocess.run([sys.executable, "-P", str(INVESTIGATE), str(r.run_dir), "--out",
                        str(tmp_path / "out")], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    out = tmp_path / "out"
    planted = [k for k in read(r.truth_dir / "kernels.csv") if "splitKreduce" in k["kernel"]]
    fam = {f["family"]: f for f in read(out / "attribution" / "families.csv")}
    sk = fam["split-K reduction"]
    assert int(sk["kernels"]) == len(planted)
    assert sk["device_us"] == f"{sum(int(k['dur_ps']) for k in planted) / 1e6:.3f}"
    assert int(sk["instructions"]) == len({(k["program_id"], k["instruction"]) for k in planted})
    rows = [c for c in read(out / "changes.csv") if c["cause_kind"] == "kernel_family"]
    split = [c for c in rows if c["where"].startswith("split-K reduction")]
    assert split and "algorithm choice" in split[0]["knob"]
    trust = [t for t in read(out / "trust.csv") if t["kind"] == "kernel_family"]
    assert any(t["item"].startswith(f"split-K reduction kernels (change {split[0]['rank']}): "
                                    "the capture cannot show why the backend chose split-K")
               for t in trust)


def test_eager_element_wise_passes_fuse_once_jitted_bounded_by_their_bytes(investigated):
    """The MLP op by op with its GELU as eight jnp passes (one line) after the bias add: the jit
    of the dispatch row also fuses the nine back-to-back element-wise programs into one kernel;
    the fused_on_jit row's measured saving is their planted time less the largest pass's bytes
    (counted here from the shapes: T x F bf16 tensors, a scalar operand 4 bytes) at the best
    byte rate the planted passes reached. The split-K GEMM's partial-sum kernel is a family of
    its own under one GEMM, and a program without differentiation says so."""
    from capgen.small_programs import GELU_PASSES, F, T
    r, out, _ = investigated("eager-gelu-passes")
    check_steps_are_the_iterations(r, out)
    changes = read(out / "changes.csv")
    assert changes[0]["cause_kind"] == "dispatch"
    fused = next(c for c in changes if c["cause_kind"] == "fused_on_jit")
    assert "9 passes" in fused["cause"] and "/workspace/model.py:36 8 passes" in fused["cause"]
    median = json.loads((out / "changes.json").read_text())["steps"]["median"]
    builder = {p.program_id: p.key for p in
               MULTI_PROGRAM_SCENARIOS["eager-gelu-passes"].plan.programs}
    tensor = T * F * 2
    moved, durs = [], []
    for k in r.kernels:
        name = builder[k["program_id"]]
        if k["step"] != median or not k["instruction"] or not (
                name in GELU_PASSES or name == "add_bias_up"):
            continue  # another step, an argument copy, or no pass
        # the bias add reads x [T, F] and b [F]; a pass reads its tensors and scalars
        operands = GELU_PASSES[name][2] if name in GELU_PASSES else "x"
        moved.append((operands.count("x") + 1) * tensor + 4 * operands.count("s")
                     + (F * 2 if name == "add_bias_up" else 0))
        durs.append(k["dur_ps"] / 1e12)
    assert len(moved) == 9
    rate = max(b / d for b, d in zip(moved, durs, strict=True))
    want = sum(durs) * 1e6 - max(moved) / rate * 1e6
    assert float(fused["saving_measured_us"]) == pytest.approx(want, abs=0.05)
    assert float(fused["saving_measured_us"]) <= float(fused["saving_us"]) <= sum(durs) * 1e6
    fam = {f["family"]: f for f in read(out / "attribution" / "families.csv")}
    assert fam["split-K reduction"]["instructions"] == "1"
    assert any(c["cause_kind"] == "kernel_family" and
               c["where"] == "split-K reduction (1 instruction)" for c in changes)
    phases = {p["phase"]: p for p in read(out / "attribution" / "phases.csv")}
    assert phases["forward"]["sentence"].startswith("no instruction is under differentiation")
    assert json.loads((out / "factcheck.json").read_text())["verdict"] == "pass"
