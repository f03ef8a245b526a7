"""Inputs shaped to be expensive, not broken: HLO whose fusions nest deep and share their
callees, and loops of unknown trip count that would expand without end. Each is answered in
time linear in the program, or cut at a stated bound with a note; never a hang."""

from __future__ import annotations

import subprocess
import sys

import pytest
import shapes

from capgen.generate import generate
from capgen.scenarios import SCENARIOS
from conftest import REPO


def test_fusions_nested_40_deep_sharing_their_callees(tmp_path):
    """Each level calls the one below twice: 2^40 paths. Searching a fusion's frames and its
    structure's fingerprint once per computation (20 deep took 1.3 s, 24 deep ran past 120 s,
    40 deep past 23 GB): done at once, the fingerprint a fixed 32 bytes (tests/shapes.py)."""
    frames, fingerprint = shapes.fusion_depth(40, tmp_path)()
    assert frames == [] and len(fingerprint) == 32


def test_loops_of_unknown_trip_count_expand_to_a_bound(tmp_path, monkeypatch):
    """A loop whose trip count the HLO does not give, taken to run ten million times (nested
    loops multiply to that and beyond): its schedule stops at MAX_PLAN_EVENTS events per
    execution, says so (`cut`), and the note names what was left out."""
    from jaxperf.analyses import attribute_kernels
    from jaxperf.match import kernel_match as km
    from jaxperf.program.hlo_program import load
    from jaxperf.read import xplane_reader
    monkeypatch.setattr(km, "MAX_PLAN_EVENTS", 20_000)
    r = generate(SCENARIOS["nvidia-unknown-trip-count-xla-cb"], tmp_path / "cap")
    space = xplane_reader.load_space(next(r.run_dir.glob("*.xplane.pb")))
    (pid, (_, blob)), = space.hlo_protos().items()
    prog = load(blob, pid)
    plan = km.Plan(prog, {}, 0, unknown_trip_count=10**7)
    assert plan.cut and 20_000 < len(plan.events) < 20_000 + 1_000
    assert not km.Plan(prog, {}, 0).cut  # one iteration: nothing left out
    notes: list = []
    monkeypatch.setattr(km, "Plan", lambda *a, **k: plan)
    attribute_kernels.program_plan(prog, pid, {}, 0, notes)
    assert any("expand past 20,000 events per execution" in n for n in notes), notes


@pytest.mark.parametrize("name", ["nvidia-unknown-trip-count-xla-cb", "nvidia-cb-partial"])
def test_the_bounds_change_nothing_on_ordinary_programs(tmp_path, name):
    """The corpus's programs stay whole (no cut) and attribute as before (the golden outputs
    are unchanged: bench/golden.py)."""
    p = subprocess.run([sys.executable, "-P", str(REPO / "scripts" / "attribute_kernels.py"),
                        str(generate(SCENARIOS[name], tmp_path / "cap").run_dir), "--out",
                        str(tmp_path / "out"), "--no-xprof"], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr
    assert "left out of its schedule" not in (tmp_path / "out" / "attribution" /
                                              "summary.txt").read_text()


def test_names_of_a_megabyte_are_cut_where_they_are_read(tmp_path):
    """60 kernels named by one 1,000,000-character name (an 822 MB kernels.csv before; the longest
    real name, 4,174 characters on the shared MI355X capture, stays whole): the trace
    reader cuts each at MAX_NAME_CHARS and says how many it cut; rows.csv stays small; the
    xplane reader cuts a metadata name the same way."""
    import gzip
    import json

    from jaxperf.read import xplane_reader, xprotos
    from tracekit import trace_rules
    big = "k" * 1_000_000
    ev = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/device:GPU:0"}},
          {"ph": "M", "name": "thread_name", "pid": 1, "tid": 7,
           "args": {"name": "Stream #7(Kernel)"}},
          {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/host:CPU"}}]
    for i in range(60):
        ev.append({"ph": "X", "name": "cudaLaunchKernel", "pid": 2, "tid": 3, "ts": 10.0 + 3 * i,
                   "dur": 0.5, "args": {"correlation_id": str(i + 1)}})
        ev.append({"ph": "X", "name": big, "pid": 1, "tid": 7, "ts": 11.0 + 3 * i, "dur": 0.5,
                   "args": {"correlation_id": str(i + 1)}})
    trace = tmp_path / "h.trace.json.gz"
    with gzip.open(trace, "wt") as fh:
        json.dump({"traceEvents": ev + [{}]}, fh)
    p = subprocess.run([sys.executable, "-P", str(REPO / "analyzing-jax-launch-overhead" /
                                                  "scripts" / "skip_stats.py"), str(trace),
                        "--out", str(tmp_path / "out")], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "out" / "rows.csv").stat().st_size < 60 * 2 * trace_rules.MAX_NAME_CHARS
    p = subprocess.run([sys.executable, "-P", str(REPO / "scripts" / "capture_info.py"),
                        str(trace), "--out", str(tmp_path / "out")], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    notes = json.loads((tmp_path / "out" / "capture_info.json").read_text())["trace"]["notes"]
    assert any("60 event name(s) longer than 65,536 characters" in n for n in notes), notes
    assert trace_rules.cut_name(big).endswith("…[934,464 more characters]")
    xs = xprotos.classes()["XSpace"]()
    plane = xs.planes.add(name="/device:GPU:0", id=1)
    plane.event_metadata[1].name = big
    path = tmp_path / "h.xplane.pb"
    path.write_bytes(xs.SerializeToString())
    space = xplane_reader.load_space(path)
    assert space.gpu_planes()[0].event_names[1] == trace_rules.cut_name(big)


def test_a_stack_frame_chain_of_200000_frames(tmp_path):
    """One instruction per tenth frame of a 200,000-frame chain (70 s and 2.2 GB before: each
    stack walked whole): each instruction's stack is its innermost MAX_STACK_FRAMES frames."""
    stacks = shapes.frame_chain(200_000, tmp_path)()
    assert len(stacks[-1]) == 256 and len(stacks[0]) == 1
    assert f"{stacks[-1][0].file}:{stacks[-1][0].line}" == "user.py:199991"  # the innermost


@pytest.mark.parametrize("name", list(shapes.SHAPES))
def test_each_shape_costs_twice_at_twice_the_size(tmp_path, name):
    """tests/shapes.py: each input shaped to be expensive (a count, a length, a depth, a width)
    run at n/2 and n; the second costs under 3 times the first (quadratic would be 4 times; a
    cost is the run's CPU time, which the other test workers' load inflates less than the wall
    clock), and no run passes 60 s. Sizes are those at which the costs found were seconds to
    minutes: 20,000 kernels under one long host event took 45 s (11.5 s at 10,000)."""
    r = shapes.check(shapes.SHAPES[name], tmp_path, timeout=60)
    assert r["failure"] is None, r
