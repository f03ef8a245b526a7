"""The capture generator: every scenario is generated, and its truth is consistent with its
capture as the project's own readers see it (counts, joins, times); the ROCm flavour has the
structure of the real AMD captures."""

from __future__ import annotations

import csv
import glob
import json
from collections import Counter

import pytest

import trace_reader
import xplane_reader
from capgen import realism
from capgen.generate import Scenario, generate
from capgen.scenarios import SCENARIOS
from conftest import SHARED_CAPTURES

NEEDS_SHARED = {"nvidia-maxtext-8gpu", "rocm-conv"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Generate each scenario once per test session, lazily."""
    made = {}

    def get(name):
        if name not in made:
            made[name] = generate(SCENARIOS[name], tmp_path_factory.mktemp(name))
        return made[name]
    return get


def _read_csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _xplane_gpu_events(space):
    out = []
    for plane in space.gpu_planes():
        for line in plane.lines:
            for ev in line.events():
                out.append((plane.gpu_ordinal, line.id, ev))
    return out


def _host_by_correlation(space):
    by = {}
    for line in space.plane("/host:CPU").lines:
        for ev in line.events():
            cid = ev.stats.get("correlation_id")
            if cid is not None:
                by.setdefault(cid, []).append((line.name, ev))
    return by


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_truth_is_consistent_with_the_capture(name, corpus, request):
    if name in NEEDS_SHARED:
        request.getfixturevalue("shared")
    sc = SCENARIOS[name]
    r = corpus(name)
    space = xplane_reader.load_space(r.xplane)
    truth = _read_csv(r.truth_dir / "kernels.csv")
    meta = json.loads((r.truth_dir / "scenario.json").read_text())
    defects = {d["kind"]: d for d in _read_csv(r.truth_dir / "defects.csv")}

    # 1. the GPU events written are exactly the truth's kernels
    events = _xplane_gpu_events(space)
    got = Counter((d, s, e.start_ps, e.duration_ps, e.name, e.stats.get("correlation_id"))
                  for d, s, e in events)
    want = Counter((int(t["device"]), int(t["stream"]), int(t["start_ps"]), int(t["dur_ps"]),
                    t["kernel"], int(t["correlation_id"])) for t in truth)
    assert got == want and len(truth) == len(r.kernels) > 0

    # 2. the trace json agrees with the xplane on GPU events, but for a planted disagreement
    trace = trace_reader.load_trace(r.trace)
    ordinal = {pid: o for o, pid in trace.gpu_pids().items()}
    from_json = Counter((ordinal[e["pid"]], e["tid"], trace_reader.ps(e["ts"]),
                         trace_reader.ps(e["dur"]), e["name"])
                        for e in trace.events if e["pid"] in ordinal)
    from_xplane = Counter((d, s, e.start_ps, e.duration_ps, e.name) for d, s, e in events)
    missing = sum((from_xplane - from_json).values())
    assert missing == (int(defects["json_disagrees"]["count"]) if "json_disagrees" in defects
                       else 0)
    assert not from_json - from_xplane

    # 3. joins: each kernel's correlation id belongs to exactly one host event, of the right kind
    host = _host_by_correlation(space)
    kinds = Counter()
    for d, s, e in events:
        matches = host.get(e.stats["correlation_id"], [])
        assert len(matches) == 1, (d, s, e)
        line, hev = matches[0]
        assert line.startswith("Host Threads/")
        if hev.name.startswith(("hipGraphLaunch", "cuGraphLaunch")):
            kinds["graph"] += 1
        elif hev.name in ("hipStreamWaitEvent", "cuStreamWaitEvent"):
            kinds["wait"] += 1
        else:
            kinds["launch"] += 1
        if hev.name not in ("hipStreamWaitEvent", "cuStreamWaitEvent"):
            assert hev.end_ps <= e.start_ps  # a kernel starts after its launch call ends
    truth_graph = sum(int(t["graph"]) for t in truth)
    assert kinds["graph"] == truth_graph
    assert (truth_graph > 0) == (sc.command_buffers in ("partial", "all", "while_bodies"))
    if sc.command_buffers == "all":
        assert kinds["launch"] == sum(1 for t in truth if t["instruction"] == "")  # arg copies
    assert kinds["wait"] == sc.non_launch_correlations

    # 4. labels: exact kernels name their instruction; graph kernels their command buffer
    label_members = {k: set(v) for k, v in meta["labels"].items()}
    by_key = {(int(t["device"]), int(t["stream"]), int(t["start_ps"])): t for t in truth}
    programs = {pid: xplane_reader.parse_hlo(blob) for pid, (_, blob) in
                space.hlo_protos().items()}
    names = {pid: {i.name for c in m.computations for i in c.instructions}
             for pid, m in programs.items()}
    for d, s, e in events:
        t = by_key[(d, s, e.start_ps)]
        label = e.stats.get("hlo_op")
        assert int(t["program_id"]) in programs
        if t["instruction"]:
            assert t["instruction"] in names[int(t["program_id"])]
        if t["graph"] == "1":
            assert label in label_members and t["instruction"] in label_members[label]
            assert label not in names[int(t["program_id"])]
        elif label is None:
            assert t["instruction"] == "" or kinds["wait"]  # argument copies, planted waits
        elif sc.collective_label == "pre_async" and "-start" in t["instruction"]:
            assert label not in names[int(t["program_id"])]
        else:
            assert label == t["instruction"]

    # 5. steps: annotations where planted; per step and GPU the same kernels
    steps = _read_csv(r.truth_dir / "steps.csv")
    assert len(steps) == sc.steps * sc.gpus
    for row in steps:
        assert int(row["busy_ps"]) + int(row["idle_ps"]) == \
            int(row["end_ps"]) - int(row["start_ps"])
        assert int(row["host_ps"]) + int(row["device_ps"]) == \
            int(row["end_ps"]) - int(row["start_ps"])
    annotations = [ev for ln in space.plane("/host:CPU").lines for ev in ln.events()
                   if "step_num" in ev.stats]
    if sc.step_annotations:
        starts = sorted({int(r_["start_ps"]) for r_ in steps})
        assert sorted(ev.start_ps for ev in annotations) == starts
        assert sorted(ev.stats["step_num"] for ev in annotations) == list(range(sc.steps))
    else:
        assert annotations == []
    per_step = Counter((t["step"], t["device"]) for t in truth if t["step"] != "")
    if "graph_replay_missing" not in defects:
        assert len(set(per_step.values())) == 1

    # 6. programs: the ids written are the ones the truth uses
    ids = {sc.program_id} | ({sc.duplicate_program_id} if sc.duplicate_program_id else set()) \
        | set(meta["extra_program_ids"])
    assert set(programs) == ids
    assert {int(t["program_id"]) for t in truth} == ids
    modules = Counter(m.name for m in programs.values())
    assert modules == {meta["module"]: len(ids)}


def test_planted_behaviours(corpus):
    def steps(name):
        return _read_csv(corpus(name).truth_dir / "steps.csv")

    launch = steps("nvidia-launch-bound")
    device = steps("nvidia-device-bound")
    share = [int(s["host_ps"]) / (int(s["end_ps"]) - int(s["start_ps"])) for s in launch]
    assert min(share) > 0.5
    share = [int(s["host_ps"]) / (int(s["end_ps"]) - int(s["start_ps"])) for s in device]
    assert max(share) < 0.1
    # the straggler arrives last at each collective, so its collective kernels are the shortest
    truth = corpus("rocm-8gpu-straggler").kernels
    coll = {}
    for t in truth:
        if t["kernel"].startswith("ncclDevKernel"):
            coll.setdefault(t["device"], []).append(t["dur_ps"])
    mean = {d: sum(v) / len(v) for d, v in coll.items()}
    assert min(mean, key=mean.get) == 5
    # kernel reuse: some fusion runs a kernel named after another fusion
    reuse = corpus("rocm-reuse-splitk").kernels
    renamed = [t for t in reuse if t["kernel"].endswith(".kd") and t["instruction"] and
               t["kernel"] != t["instruction"].replace(".", "_").replace("-", "_") + ".kd"]
    assert renamed
    split = Counter(t["correlation_id"] for t in reuse)
    assert max(split.values()) >= 2 or any("PostGSU" in t["kernel"] for t in reuse)


def test_generation_is_deterministic(tmp_path):
    sc = SCENARIOS["nvidia-cb-partial"]
    a = generate(sc, tmp_path / "a")
    b = generate(sc, tmp_path / "b")
    assert a.xplane.read_bytes() == b.xplane.read_bytes()
    for f in ("kernels.csv", "steps.csv", "defects.csv", "scenario.json"):
        assert (a.truth_dir / f).read_text() == (b.truth_dir / f).read_text()
    c = generate(Scenario(**{**sc.__dict__, "seed": 1}), tmp_path / "c")
    assert c.xplane.read_bytes() != a.xplane.read_bytes()


def test_rocm_flavour_has_the_structure_of_the_real_amd_captures(corpus, shared):
    """A feature every real AMD capture has must be generated; a generated feature must appear
    in at least one real capture. Differences the real captures show among themselves pass."""
    reals = {}
    for x in sorted(glob.glob(str(shared / "tracelens-amd-rocm/*/plugins/profile/*/*.xplane.pb"))):
        with open(x, "rb") as fh:
            f = realism.xplane_features(fh.read())
        with open(x.replace(".xplane.pb", ".trace.json.gz"), "rb") as fh:
            f |= realism.trace_features(fh.read())
        reals[x] = f
    assert len(reals) == 4
    common = set.intersection(*reals.values())
    seen = set.union(*reals.values())
    for name in ("rocm-off", "rocm-8gpu", "rocm-reuse-splitk", "rocm-no-steps"):
        r = corpus(name)
        gen = realism.xplane_features(r.xplane.read_bytes()) | \
            realism.trace_features(r.trace.read_bytes())
        assert sorted(common - gen, key=str) == [], name
        assert sorted(gen - seen, key=str) == [], name


def test_shared_captures_path_is_what_the_generator_reads():
    from capgen import programs
    assert programs.SHARED == SHARED_CAPTURES


def test_capture_info_says_differ_when_the_json_disagrees(corpus):
    """Step 2's first check on a planted disagreement: capture_info names the GPU."""
    import subprocess
    import sys

    from conftest import REPO
    r = corpus("rocm-json-disagrees")
    p = subprocess.run([sys.executable, "-P", str(REPO / "scripts" / "capture_info.py"),
                        str(r.run_dir)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "GPU 0: 2 lines, 1024 events in the xplane; 1019 events in the trace; DIFFER" \
        in p.stdout
