"""How step 1 frames a TPU capture's steps (standard library only): the host's annotations, the
device's Steps line where it counts steps, the cycle of program runs where it counts programs,
on the lab's real captures (tests/data/tpu/) and on copies with the annotations taken out."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest

from conftest import REPO

LAB = REPO / "tests" / "data" / "tpu"


def _step1(capture, out):
    import skip_stats
    (trace,) = capture.glob("plugins/profile/*/*.trace.json.gz")
    result, _ = skip_stats.run(trace, out)
    return result


def _without_annotations(case, tmp_path):
    """A copy of a lab capture whose trace has no StepTraceAnnotation events."""
    dst = tmp_path / case
    shutil.copytree(LAB / case / "plugins", dst / "plugins")
    (trace,) = dst.glob("plugins/profile/*/*.trace.json.gz")
    data = json.loads(gzip.decompress(trace.read_bytes()))
    data["traceEvents"] = [e for e in data["traceEvents"]
                           if "step_num" not in (e.get("args") or {})]
    trace.write_bytes(gzip.compress(json.dumps(data).encode()))
    return dst


def test_a_steps_line_that_counts_programs_is_said_and_not_used(tmp_path):
    r = _step1(LAB / "host_sync", tmp_path / "out")
    assert r["steps"]["source"].startswith("StepTraceAnnotation")
    assert any("counts programs, not steps" in n and "15 runs" in n for n in r["notes"])
    assert r["figures"]["executions_per_step"]["value"] == 3


def test_a_steps_line_that_agrees_with_the_annotations_is_said(tmp_path):
    r = _step1(LAB / "flax_optax_fused", tmp_path / "out")
    assert any("agrees with the host's annotations (5 steps)" in n for n in r["notes"])


@pytest.mark.parametrize("case, source, steps", [
    ("flax_optax_fused", "the device's Steps line", 5),
    ("host_sync", "the repeating cycle of 3 program executions", 5),
])
def test_without_annotations_the_steps_come_from_the_device_or_the_cycle(tmp_path, case,
                                                                         source, steps):
    r = _step1(_without_annotations(case, tmp_path), tmp_path / "out")
    assert r["steps"]["source"].startswith(source), r["steps"]["source"]
    assert len(r["steps"]["analysed"]) == steps
    assert r["verdict"] == "launch-bound"


def test_every_op_run_joins_its_program_run_and_dispatch(tmp_path):
    r = _step1(LAB / "host_sync", tmp_path / "out")
    assert r["joins"]["dispatch"] == r["gpu_events"] and r["join_rate_pct_of_gpu_events"] == 0
    assert any("15 program runs, 15 of them joined" in n for n in r["notes"])


def _tiny_step_compiling(tmp_path, compiles) -> tuple:
    """A copy of the lab's tiny_step whose host holds the compile events `compiles(steps)`
    ((ts us, dur us, name) each, on a thread of their own; `steps` its step annotations in
    start order): the copy's folder and those annotations."""
    dst = tmp_path / "cap"
    shutil.copytree(LAB / "tiny_step" / "plugins", dst / "plugins")
    (trace,) = dst.glob("plugins/profile/*/*.trace.json.gz")
    data = json.loads(gzip.decompress(trace.read_bytes()))
    ev = data["traceEvents"]
    steps = sorted((e for e in ev if "step_num" in (e.get("args") or {})), key=lambda e: e["ts"])
    host = next(e for e in ev if e.get("name") == "PjRtCApiLoadedExecutable::Execute")
    ev += [{"ph": "X", "pid": host["pid"], "tid": 77, "ts": ts, "dur": dur, "name": name}
           for ts, dur, name in compiles(steps)]
    trace.write_bytes(gzip.compress(json.dumps(data).encode()))
    return dst, steps


def test_compilation_inside_the_steps_is_measured_and_ranked_first(tmp_path):
    """XLA compiling on the host inside each step (the compile events a real recompiling TPU
    capture holds, bench/tpu_lab.py's recompile case: PJRT_Client_Compile around
    TpuCompiler::Compile) placed in a lab capture's steps: step 1 measures it once per step
    (nested events counted once), step 6 ranks it with its knob (on the lab's real recompile
    capture, 3.6 s of compiling in a 3.7 s step, it ranks first); the edited capture runs one
    program in every step, so its knob is one jax.jit object, not a few shapes."""
    import subprocess
    import sys
    # 150 us of compiling at each step's start, before its dispatch
    dst, _ = _tiny_step_compiling(tmp_path, lambda steps: [
        (s["ts"] + d, dur, name) for s in steps
        for d, dur, name in ((1, 150, "PJRT_Client_Compile"), (2, 140, "TpuCompiler::Compile"))])
    out = tmp_path / "out"
    r = _step1(dst, out)
    assert r["compile"]["steps_with_compile"] == r["compile"]["steps"] > 0
    assert 149 <= r["compile"]["per_step_us"]["value"] <= 150.001
    for step in ("attribute_kernels.py", "roofline.py"):
        subprocess.run([sys.executable, "-P", str(REPO / "scripts" / step), str(dst), "--out",
                        str(out), "--no-xprof"], check=True, capture_output=True)
    subprocess.run([sys.executable, "-P", str(REPO / "scripts" / "changes.py"), "--out",
                    str(out)], check=True, capture_output=True)
    import csv
    with open(out / "changes.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    (row,) = [r for r in rows if r["cause_kind"] == "compile"]
    # one program runs in every step: what compiles is that program again, not a new shape
    assert 149 <= float(row["saving_us"]) <= 150.001 and "its HLO the same" in row["cause"]
    assert row["knob"].startswith("one jax.jit object"), row["knob"]


def test_a_compile_between_steps_leaves_the_last_steps_unseen_zero_out(tmp_path):
    """XLA compiling before each step but the first (a greedy decode growing its history: each
    compile falls in the step before, from its start to the next one's): the last step, which no
    step follows, is seen to its own end only, so its zero is not a step without a compile (a
    real capture read "0 to 2.25 s" a step, and an agent took the 0 for a step that compiled
    not)."""
    # 9 us of compiling just before each later step starts
    dst, steps = _tiny_step_compiling(tmp_path, lambda steps: [
        (s["ts"] - 10, 9, "PJRT_Client_Compile") for s in steps[1:]])
    c = _step1(dst, tmp_path / "out")["compile"]
    assert c["steps_with_compile"] == c["steps"] == len(steps) - 1, c
    assert c["per_step_us"]["min"] == pytest.approx(9.0, abs=0.01), c


def test_the_hosts_own_work_before_the_device_is_the_calls_wholly_inside():
    """CallTree.inside: the outermost traced calls that start and end inside a window; a call
    that spans past it (the loop body around the dispatch) is not the host's work before it,
    its children inside are."""
    from step_framing import CallTree
    key = (1, 1)
    calls = [{"name": "$a.py:1 step", "start": 0, "dur": 100, "thread": key, "args": {}},
             {"name": "$a.py:2 make_batch", "start": 5, "dur": 40, "thread": key, "args": {}},
             {"name": "$a.py:3 inner", "start": 10, "dur": 5, "thread": key, "args": {}},
             {"name": "$a.py:4 put", "start": 50, "dur": 10, "thread": key, "args": {}}]
    tree = CallTree(None, {"calls": {key: calls}})
    assert [h["name"] for h in tree.inside(0, 70)] == ["$a.py:2 make_batch", "$a.py:4 put"]
    assert [h["name"] for h in tree.inside(0, 100)] == ["$a.py:1 step"]
    assert tree.inside(46, 49) == []


def test_a_plane_without_peaks_takes_its_generations_datasheet_and_says_so():
    """The device plane's own peaks are the ceilings; a plane that gives none (a profiler that
    did not record them) takes its generation's datasheet, tagged vendor with the datasheet as
    its source, and the device record says where; a generation without one gets no ceiling,
    said."""
    import sys
    sys.path.insert(0, str(REPO / "scripts"))
    from jaxperf.read import xplane_reader, xprotos
    from jaxperf.tpu import chip
    path = next((REPO / "tests" / "data" / "tpu" / "bf16_matmul").rglob("*.xplane.pb"))
    proto = xprotos.classes()["XSpace"].FromString(path.read_bytes())
    whole = xplane_reader.Space(proto, path, lazy=True)
    device, ceilings = chip.ceilings(whole)
    assert ceilings["bf16_fp16_matrix"].tag == "capture" and device["why"] is None
    for p in proto.planes:
        ids = {k for k, m in p.stat_metadata.items() if m.name.startswith("peak_")}
        kept = [st for st in p.stats if st.metadata_id not in ids]
        del p.stats[:]
        p.stats.extend(kept)
    device, ceilings = chip.ceilings(xplane_reader.Space(proto, path, lazy=True))
    mxu, hbm = ceilings["bf16_fp16_matrix"], ceilings["hbm_bandwidth"]
    assert (mxu.value, hbm.value) == (197e12, 819e9) and mxu.tag == hbm.tag == "vendor"
    assert mxu.source.startswith("datasheet: Cloud TPU v5e") and device["why"] is None
    assert "datasheet" in device["basis"]
    assert chip.datasheet_of("v3") is None and chip.datasheet_of("v6 lite") == "v6e"


def test_the_runtimes_dispatch_is_the_hosts_work_before_a_tpu_program(tmp_path):
    """On a TPU the program's dispatch call (PJRT's Execute) stands for no launch inside it: it
    is the host's work in the gap before the program's first op (the lab's Pallas matmul: 116 us
    of a 156 us gap), named there, and the host-gap change says fewer dispatches, never an input
    pipeline the capture does not show."""
    import csv
    import subprocess
    import sys
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-P", str(REPO / "scripts" / "investigate.py"),
                        str(REPO / "tests" / "data" / "tpu" / "pallas_matmul"), "--out", str(out),
                        "--no-xprof"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    with open(out / "gaps.csv", newline="", encoding="utf-8") as fh:
        lead = [r for r in csv.DictReader(fh) if r["cause"] == "host_late"
                and not r["kernel_before"]]
    assert lead and all("PjRtCApiLoadedExecutable::Execute=" in r["host_events"] for r in lead)
    with open(out / "changes.csv", newline="", encoding="utf-8") as fh:
        host = next(r for r in csv.DictReader(fh) if r["cause_kind"] == "host_gap")
    assert host["knob"].startswith("the host's work before the step's first op is mostly the "
                                   "runtime dispatching the program"), host["knob"]
