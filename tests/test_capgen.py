"""The capture generator: every scenario is generated, and its truth is consistent with its
capture as the project's own readers see it (counts, joins, times); the ROCm flavour has the
structure of the real AMD captures."""

from __future__ import annotations

import csv
import glob
import json
from collections import Counter

import pytest

from capgen import realism
from capgen.generate import Scenario, generate
from capgen.scenarios import ALL_SCENARIOS as SCENARIOS
from conftest import SHARED_CAPTURES
from jaxperf.read import xplane_reader
from tracekit import trace_reader

NEEDS_SHARED = {n for n, s in SCENARIOS.items()
                if s.program in ("maxtext-h100", "conv3d-mi300x", "pax-a100")}


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


_LOADED: dict = {}


def _loaded(name, corpus, request):
    """One scenario's capture and truth, read once for the consistency tests below."""
    if name in NEEDS_SHARED:
        request.getfixturevalue("shared")
    if name not in _LOADED:
        r = corpus(name)
        space = xplane_reader.load_space(r.xplane)
        _LOADED[name] = dict(
            sc=SCENARIOS[name], r=r, space=space,
            truth=_read_csv(r.truth_dir / "kernels.csv"),
            meta=json.loads((r.truth_dir / "scenario.json").read_text()),
            defects={d["kind"]: d for d in _read_csv(r.truth_dir / "defects.csv")},
            events=_xplane_gpu_events(space),
            programs={pid: xplane_reader.parse_hlo(blob)
                      for pid, (_, blob) in space.hlo_protos().items()})
    return _LOADED[name]


SCENARIO_NAMES = sorted(SCENARIOS)


@pytest.mark.parametrize("name", SCENARIO_NAMES)
def test_truth_lists_exactly_the_gpu_events_written(name, corpus, request):
    c = _loaded(name, corpus, request)
    got = Counter((d, s, e.start_ps, e.duration_ps, e.name, e.stats.get("correlation_id"))
                  for d, s, e in c["events"])
    want = Counter((int(t["device"]), int(t["stream"]), int(t["start_ps"]), int(t["dur_ps"]),
                    t["kernel"], int(t["correlation_id"])) for t in c["truth"])
    assert got == want and len(c["truth"]) == len(c["r"].kernels) > 0


@pytest.mark.parametrize("name", SCENARIO_NAMES)
def test_trace_json_agrees_with_the_xplane_but_where_planted(name, corpus, request):
    c = _loaded(name, corpus, request)
    trace = trace_reader.load_trace(c["r"].trace)
    ordinal = {pid: o for o, pid in trace.gpu_pids().items()}
    from_json = Counter((ordinal[e["pid"]], e["tid"], trace_reader.ps(e["ts"]),
                         trace_reader.ps(e["dur"]), e["name"])
                        for e in trace.events if e["pid"] in ordinal)
    from_xplane = Counter((d, s, e.start_ps, e.duration_ps, e.name) for d, s, e in c["events"])
    missing = sum((from_xplane - from_json).values())
    defects = c["defects"]
    assert missing == (int(defects["json_disagrees"]["count"]) if "json_disagrees" in defects
                       else 0)
    assert not from_json - from_xplane


def _join_kinds(c) -> Counter:
    host = _host_by_correlation(c["space"])
    kinds = Counter()
    for d, s, e in c["events"]:
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
    return kinds


@pytest.mark.parametrize("name", SCENARIO_NAMES)
def test_each_event_joins_one_host_call_of_the_right_kind(name, corpus, request):
    c = _loaded(name, corpus, request)
    sc, truth = c["sc"], c["truth"]
    kinds = _join_kinds(c)
    truth_graph = sum(int(t["graph"]) for t in truth)
    assert kinds["graph"] == truth_graph
    assert (truth_graph > 0) == (sc.command_buffers in ("partial", "all", "while_bodies", "xla"))
    if sc.command_buffers == "all":
        assert kinds["launch"] == sum(1 for t in truth if t["instruction"] == "")  # arg copies
    assert kinds["wait"] == sc.non_launch_correlations


@pytest.mark.parametrize("name", SCENARIO_NAMES)
def test_labels_name_the_instruction_or_the_command_buffer(name, corpus, request):
    c = _loaded(name, corpus, request)
    sc, programs = c["sc"], c["programs"]
    label_members = {k: set(v) for k, v in c["meta"]["labels"].items()}
    by_key = {(int(t["device"]), int(t["stream"]), int(t["start_ps"])): t for t in c["truth"]}
    names = {pid: {i.name for comp in m.computations for i in comp.instructions}
             for pid, m in programs.items()}
    for d, s, e in c["events"]:
        t = by_key[(d, s, e.start_ps)]
        label = e.stats.get("hlo_op")
        assert int(t["program_id"]) in programs
        if t["instruction"]:
            assert t["instruction"] in names[int(t["program_id"])]
        if t["graph"] == "1":
            assert label in label_members and t["instruction"] in label_members[label]
            assert label not in names[int(t["program_id"])]
        elif label is None:
            assert t["instruction"] == "" or sc.non_launch_correlations  # copies, planted waits
        elif sc.collective_label == "pre_async" and "-start" in t["instruction"]:
            assert label not in names[int(t["program_id"])]
        else:  # the instruction, or the instruction inside its fusion that the label names
            assert label == (t["inner_instruction"] or t["instruction"])
        if t["inner_instruction"]:
            assert t["inner_instruction"] in names[int(t["program_id"])]


@pytest.mark.parametrize("name", SCENARIO_NAMES)
def test_steps_add_up_and_repeat_the_same_kernels(name, corpus, request):
    c = _loaded(name, corpus, request)
    sc, truth = c["sc"], c["truth"]
    steps = _read_csv(c["r"].truth_dir / "steps.csv")
    active = {int(t["device"]) for t in truth}
    assert len(steps) == sc.steps * len(active)
    assert sc.plan is not None or active == set(range(sc.gpus))
    for row in steps:
        assert int(row["busy_ps"]) + int(row["idle_ps"]) == \
            int(row["end_ps"]) - int(row["start_ps"])
        assert int(row["host_ps"]) + int(row["device_ps"]) == \
            int(row["end_ps"]) - int(row["start_ps"])
    annotations = [ev for ln in c["space"].plane("/host:CPU").lines for ev in ln.events()
                   if "step_num" in ev.stats]
    if sc.step_annotations:
        starts = sorted({int(r_["start_ps"]) for r_ in steps})
        assert sorted(ev.start_ps for ev in annotations) == starts
        assert sorted(ev.stats["step_num"] for ev in annotations) == list(range(sc.steps))
    else:
        assert annotations == []
    per_step = Counter((t["step"], t["device"]) for t in truth if t["step"] != "")
    if "graph_replay_missing" not in c["defects"]:
        # every step repeats the same GPU work: the same on every GPU where one program runs on
        # all of them, the same per GPU where a plan gives GPUs different work
        for device in active:
            assert len({v for (_, d), v in per_step.items() if d == str(device)}) == 1
        assert sc.plan is not None or len(set(per_step.values())) == 1


@pytest.mark.parametrize("name", SCENARIO_NAMES)
def test_program_ids_written_are_the_truths(name, corpus, request):
    c = _loaded(name, corpus, request)
    sc, meta, programs = c["sc"], c["meta"], c["programs"]
    if sc.plan is not None:  # each program of the plan under its own id, named as built
        written = {pid: m.name for pid, m in programs.items()}
        assert written == {int(k): v for k, v in meta["programs"].items()}
        assert set(written) == {d.program_id for d in sc.plan.programs}
        assert {int(t["program_id"]) for t in c["truth"]} == set(written)
        return
    ids = {sc.program_id} | ({sc.duplicate_program_id} if sc.duplicate_program_id else set()) \
        | set(meta["extra_program_ids"])
    assert set(programs) == ids
    assert {int(t["program_id"]) for t in c["truth"]} == ids
    assert Counter(m.name for m in programs.values()) == {meta["module"]: len(ids)}
    assert "programs" not in meta and "planted" not in meta and "plan" not in meta


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
    # several programs per step: the same for a seed, every truth file included
    sc = SCENARIOS["eager-op-by-op"]
    a = generate(sc, tmp_path / "d")
    b = generate(sc, tmp_path / "e")
    assert a.xplane.read_bytes() == b.xplane.read_bytes()
    assert a.trace.read_bytes() == b.trace.read_bytes()
    for f in ("kernels.csv", "steps.csv", "iterations.csv", "programs.csv", "scenario.json"):
        assert (a.truth_dir / f).read_text() == (b.truth_dir / f).read_text()


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
    for name in ("rocm-off", "rocm-8gpu", "rocm-reuse-splitk", "rocm-no-steps",
                 "eager-op-by-op-rocm", "copies-on-other-gpu"):
        r = corpus(name)
        gen = realism.xplane_features(r.xplane.read_bytes()) | \
            realism.trace_features(r.trace.read_bytes())
        assert sorted(common - gen, key=str) == [], name
        assert sorted(gen - seen, key=str) == [], name


def test_shared_captures_path_is_what_the_generator_reads():
    from capgen import programs
    assert programs.SHARED == SHARED_CAPTURES


def test_capture_info_says_differ_when_the_json_disagrees(corpus, tmp_path):
    """Step 2's first check on a planted disagreement: capture_info names the GPU."""
    import subprocess
    import sys

    from conftest import REPO
    r = corpus("rocm-json-disagrees")
    p = subprocess.run([sys.executable, "-P", str(REPO / "scripts" / "capture_info.py"),
                        str(r.run_dir), "--out", str(tmp_path)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "GPU 0: 2 lines, 1024 events in the xplane; 1019 events in the trace; DIFFER" \
        in p.stdout
    import json
    checks = json.loads((tmp_path / "capture_info.json").read_text())["checks"]
    assert [(c["device"], c["status"], c["xplane"], c["trace"]) for c in checks] == [
        (0, "fail", 1024, 1019)]


# ---------------------------------------------------------------- XLA runtime behaviours
# Each test reads a generated capture back through the project's readers and checks one behaviour
# the generator models from XLA's source (tests/capgen/programs.py and flavours.py cite it).

def _capture(r):
    """(space, [(truth row, its GPU event)], programs by id, scenario.json) of a generated run."""
    space = xplane_reader.load_space(r.xplane)
    events = {(d, s, e.start_ps): e for d, s, e in _xplane_gpu_events(space)}
    rows = [(t, events[(int(t["device"]), int(t["stream"]), int(t["start_ps"]))])
            for t in _read_csv(r.truth_dir / "kernels.csv")]
    programs = {pid: xplane_reader.parse_hlo(blob) for pid, (_, blob) in
                space.hlo_protos().items()}
    meta = json.loads((r.truth_dir / "scenario.json").read_text())
    _INDEX.update({id(m): _instructions(m) for m in programs.values()})
    return space, rows, programs, meta


_INDEX: dict = {}  # id(module) -> its instructions by name, filled by _capture


def _ins(programs, t) -> dict:
    """The instructions by name of the program that ran truth row t."""
    return _INDEX[id(programs[int(t["program_id"])])]


def _instructions(module) -> dict:
    return {i.name: i for c in module.computations for i in c.instructions}


def _fused_root(module, fusion):
    comp = next(c for c in module.computations if c.id == fusion.called_computation_ids[0])
    by_id = {i.id: i for i in comp.instructions}
    return comp, by_id, by_id[comp.root_id]


def _fusion_config(ins) -> dict:
    return json.loads(ins.backend_config or b"{}").get("fusion_backend_config", {})


def _sanitized(name: str) -> str:
    return name.replace(".", "_").replace("-", "_")


def _only_host_event(host, event):
    matches = host[event.stats["correlation_id"]]
    assert len(matches) == 1
    return matches[0][1]


def test_copy_runs_as_a_device_to_device_memcpy(corpus):
    """NVIDIA: a `copy` is a MemcpyD2D event with memcpy_details and a launch of its own with the
    same correlation id; inside a graph a memcpy node with the graph launch's id and label. ROCm:
    a copyBuffer kernel, as in the real AMD captures."""
    for name, launch in (("nvidia-off", "MemcpyD2D"), ("nvidia-ids-memset", "cuMemcpyDtoDAsync_v2"),
                         ("nvidia-copy-xla-cb", None), ("rocm-off", "hipMemcpyDtoDAsync")):
        space, rows, programs, meta = _capture(corpus(name))
        host = _host_by_correlation(space)
        copies = [(t, e) for t, e in rows if t["instruction"] and
                  _ins(programs, t)[t["instruction"]].opcode == "copy"]
        assert copies, name
        for t, e in copies:
            launch_ev = _only_host_event(host, e)
            if name.startswith("rocm"):
                assert e.name == "__amd_rocclr_copyBuffer.kd" and launch_ev.name == launch
                continue
            assert e.name == "MemcpyD2D"
            assert e.stats["memcpy_details"].startswith("kind_src:device kind_dst:device size:")
            if launch is None:  # a memcpy node of a graph: no launch of its own
                assert t["graph"] == "1" and launch_ev.name.startswith("cuGraphLaunch")
                assert e.stats["hlo_op"] in meta["labels"]
                assert t["instruction"] in meta["labels"][e.stats["hlo_op"]]
            else:
                assert t["graph"] == "0" and e.stats["hlo_op"] == t["instruction"]
                assert launch_ev.name == launch and "memcpy_details" in launch_ev.stats


def test_fusions_that_only_copy_run_as_memcpys(corpus, shared):
    """Memcpy fusions (every root a copy of a parameter), static-slice copies (newest XLA),
    `__dynamic_memcpy` fusions and copy-hero dynamic-slice fusions each run as one memcpy, labelled
    with the fusion or with the copy inside; dynamic-memcpy fusions are not graph commands."""
    # memcpy fusions and static slices (MaxText): one MemcpyD2D per execution, hlo_op = fusion
    _, rows, programs, _ = _capture(corpus("nvidia-memcpy-fusions"))
    kinds = Counter()
    for t, e in rows:
        ins = _ins(programs, t).get(t["instruction"])
        if ins is None or ins.opcode != "fusion":
            continue
        module = programs[int(t["program_id"])]
        _, by_id, root = _fused_root(module, ins)
        if root.opcode == "copy" and by_id[root.operand_ids[0]].opcode == "parameter":
            kinds["memcpy"] += 1
            assert e.name == "MemcpyD2D" and e.stats["hlo_op"] == t["instruction"]
        elif _fusion_config(ins).get("custom_fusion_config", {}).get("name", "").endswith(
                "address_computation"):
            kinds["dsf_gemm"] += 1  # the cuBLAS GEMM inside, labelled with the fusion
            assert "gemm" in e.name and e.stats["hlo_op"] == t["instruction"]
        elif root.opcode == "slice" and e.name == "MemcpyD2D":
            kinds["slice"] += 1
    assert kinds["memcpy"] and kinds["dsf_gemm"] and kinds["slice"]
    # copy-hero dynamic-slice fusions: labelled with the fusion, or (other XLA versions) the copy
    for name, hero in (("nvidia-off", False), ("nvidia-dsf-copy-hero", True)):
        _, rows, programs, _ = _capture(corpus(name))
        seen = 0
        for t, e in rows:
            ins = _ins(programs, t).get(t["instruction"])
            if ins is None or _fusion_config(ins).get("custom_fusion_config", {}).get(
                    "name") != "dynamic_slice_fusion":
                continue
            seen += 1
            assert e.name == "MemcpyD2D"
            if hero:
                inner = _ins(programs, t)[t["inner_instruction"]]
                assert inner.opcode == "copy" and e.stats["hlo_op"] == inner.name
                comp, _, _ = _fused_root(programs[int(t["program_id"])], ins)
                assert inner.name in {i.name for i in comp.instructions}
            else:
                assert e.stats["hlo_op"] == t["instruction"] and t["inner_instruction"] == ""
        assert seen, name
    # __dynamic_memcpy fusions: memcpys launched on their own between graphs
    _, rows, programs, meta = _capture(corpus("nvidia-dynamic-memcpy-xla-cb"))
    members = set().union(*map(set, meta["labels"].values()))
    dynamic = [(t, e) for t, e in rows if t["instruction"] and
               _fusion_config(_ins(programs, t)[t["instruction"]]).get("kind") ==
               "__dynamic_memcpy"]
    assert dynamic and any(t["graph"] == "1" for t, _ in rows)
    for t, e in dynamic:
        assert e.name == "MemcpyD2D" and t["graph"] == "0" and t["instruction"] not in members
        assert e.stats["hlo_op"] == t["instruction"]


def test_partition_and_replica_ids_are_memsets(corpus):
    """`partition-id` / `replica-id` write their id with a 4-byte memset; an AllocateBuffer custom
    call launches nothing at all."""
    space, rows, programs, _ = _capture(corpus("nvidia-ids-memset"))
    host = _host_by_correlation(space)
    ins = _instructions(programs[SCENARIOS["nvidia-ids-memset"].program_id])
    assert {"partition-id.1", "replica-id.1", "custom-call.nop"} <= set(ins)
    ids = [(t, e) for t, e in rows if t["instruction"] in ("partition-id.1", "replica-id.1")]
    assert len(ids) == 2 * 8 * 2  # two instructions, 8 GPUs, 2 steps
    for t, e in ids:
        assert e.name.startswith("Memset") and "num_bytes:4 " in e.stats["Memset_details"]
        assert e.stats["hlo_op"] == t["instruction"]
        assert _only_host_event(host, e).name == "cuMemsetD32Async"
    assert not [t for t, _ in rows if t["instruction"] == "custom-call.nop"]
    assert not [ev for ln in space.plane("/host:CPU").lines for ev in ln.events()
                if ev.name == "custom-call.nop"]
    # ROCm: a fill kernel; a FUSION command, so inside the graph
    _, rows, _, _ = _capture(corpus("rocm-ids-memset-xla-cb"))
    ids = [(t, e) for t, e in rows if t["instruction"] in ("partition-id.1", "replica-id.1")]
    assert ids and all(e.name == "__amd_rocclr_fillBufferAligned.kd" and t["graph"] == "1"
                       for t, e in ids)


def _fingerprint(module, fusion) -> tuple:
    """The fused computation without names, ids, metadata and backend configs (operands by
    position, called computations by their own fingerprint), and which operands repeat."""
    comps = {c.id: c for c in module.computations}

    def comp_key(cid):
        comp = comps[cid]
        pos = {i.id: k for k, i in enumerate(comp.instructions)}
        out = []
        for i in comp.instructions:
            c = type(i)()
            c.CopyFrom(i)
            for f in ("name", "id", "operand_ids", "called_computation_ids", "metadata",
                      "backend_config", "control_predecessor_ids"):
                c.ClearField(f)
            c.DiscardUnknownFields()
            out.append((c.SerializeToString(deterministic=True),
                        tuple(pos[o] for o in i.operand_ids),
                        tuple(comp_key(x) for x in i.called_computation_ids),
                        i.id == comp.root_id))
        return tuple(out)

    first: dict = {}
    repeats = tuple(first.setdefault(o, k) for k, o in enumerate(fusion.operand_ids))
    return comp_key(fusion.called_computation_ids[0]), repeats


def test_kernel_reuse_names_the_first_identical_fusion(corpus, shared):
    """Fusions whose fused computations are identical launch one kernel, named after one of them;
    fusions that differ never share a kernel. The MaxText double-buffered loop reuses kernels
    across its clones and peeled copies."""
    for name in ("nvidia-off", "rocm-reuse-cache", "nvidia-maxtext-double-buffer"):
        _, rows, programs, _ = _capture(corpus(name))
        groups: dict = {}
        by_name = {pid: _instructions(m) for pid, m in programs.items()}
        fusions = {pid: {_sanitized(n) for n, i in ins.items() if i.opcode == "fusion"}
                   for pid, ins in by_name.items()}
        prints: dict = {}
        for t, e in rows:
            pid = int(t["program_id"])
            ins = by_name[pid].get(t["instruction"])
            kernel = e.name.removesuffix(".kd")
            if ins is None or ins.opcode != "fusion" or kernel not in fusions[pid]:
                continue  # not a kernel XLA generated for a fusion
            if (pid, ins.name) not in prints:
                prints[(pid, ins.name)] = _fingerprint(programs[pid], ins)
            groups.setdefault(prints[(pid, ins.name)], {}).setdefault(kernel, set()).add(
                t["instruction"])
        kernels = [k for g in groups.values() for k in g]
        assert len(kernels) == len(set(kernels)), name  # one fingerprint per kernel
        shared_kernels = 0
        for g in groups.values():
            assert len(g) == 1, (name, g)   # identical computations: one kernel
            (kernel, members), = g.items()
            assert kernel in {_sanitized(m) for m in members}, (name, kernel, members)
            shared_kernels += len(members) > 1
        assert shared_kernels, name
    # the double-buffered loop: clones run a kernel named after another instance of their fusion
    _, rows, _, _ = _capture(corpus("nvidia-maxtext-double-buffer"))
    clones = {t["instruction"]: e.name for t, e in rows
              if t["instruction"].endswith(".double_buffer_clone") and
              e.name.startswith(("loop_", "input_"))}
    assert clones and any(k != _sanitized(i) for i, k in clones.items())


def test_collectives_in_graphs_and_custom_calls(corpus):
    """With COLLECTIVES recorded into command buffers the NCCL kernels are graph nodes: the graph
    launch's correlation id and label, no launch of their own."""
    space, rows, programs, meta = _capture(corpus("nvidia-8gpu-cb-collectives"))
    host = _host_by_correlation(space)
    nccl = [(t, e) for t, e in rows if e.name.startswith("ncclDevKernel_AllReduce_Sum")]
    assert nccl
    for t, e in nccl:
        assert t["instruction"].startswith("all-reduce-start") and t["graph"] == "1"
        assert e.stats["hlo_op"] in meta["labels"] and \
            t["instruction"] in meta["labels"][e.stats["hlo_op"]]
        assert _only_host_event(host, e).name.startswith("cuGraphLaunch")


def test_unknown_trip_count_runs_the_condition_every_iteration(corpus):
    """A while without known_trip_count runs its condition before every iteration and at the
    exit, each followed by a one-byte copy of the predicate to the host that the host waits for;
    the condition is launched op by op even where the body runs as graphs."""
    space, rows, programs, _ = _capture(corpus("nvidia-unknown-trip-count-xla-cb"))
    module = programs[SCENARIOS["nvidia-unknown-trip-count-xla-cb"].program_id]
    comps = {c.id: c for c in module.computations}
    whiles = [i for c in module.computations for i in c.instructions if i.opcode == "while"]
    assert whiles and all(b"known_trip_count" not in w.backend_config for w in whiles)
    host = _host_by_correlation(space)
    launch_lines = {ln.name: sorted(ev.start_ps for ev in ln.events())
                    for ln in space.plane("/host:CPU").lines if ln.name.startswith("Host Threads/")}
    for w in whiles:
        cond = next(comps[c] for c in w.called_computation_ids if any(  # root: a scalar pred
            i.id == comps[c].root_id and i.shape.element_type == 1 and not i.shape.dimensions
            for i in comps[c].instructions))
        cond_names = {i.name for i in cond.instructions}
        cond_rows = [(t, e) for t, e in rows if t["instruction"] in cond_names]
        preds = [(t, e) for t, e in rows if t["instruction"] == w.name]
        assert cond_rows and len(preds) == len(cond_rows)
        per_step = Counter(t["step"] for t, _ in preds)
        assert len(set(per_step.values())) == 1 and min(per_step.values()) >= 2
        for t, e in cond_rows:
            assert t["graph"] == "0" and e.stats["hlo_op"] == t["instruction"]
        for t, e in preds:
            assert e.name == "MemcpyD2H" and e.stats["hlo_op"] == w.name and t["graph"] == "0"
            assert "kind_dst:pinned size:1 " in e.stats["memcpy_details"]
            (line, launch_ev), = host[e.stats["correlation_id"]]
            assert launch_ev.name == "MemcpyD2H"
            later = [s for s in launch_lines[line] if s > launch_ev.start_ps]
            assert not later or later[0] >= e.end_ps  # the host waited for the predicate
    assert any(t["graph"] == "1" for t, _ in rows)


def test_double_buffered_loops_keep_their_clone_names(corpus, shared):
    """MaxText's peeled and double-buffered loop instructions launch under their own names."""
    _, rows, programs, _ = _capture(corpus("nvidia-maxtext-double-buffer"))
    names = set(_instructions(programs[SCENARIOS["nvidia-maxtext-double-buffer"].program_id]))
    for suffix in (".double_buffer_clone", ".peeled_double_buffer"):
        mine = [(t, e) for t, e in rows if t["instruction"].endswith(suffix)]
        assert mine, suffix
        assert all(t["instruction"] in names and e.stats["hlo_op"] == t["instruction"]
                   for t, e in mine)
        assert len({t["step"] for t, _ in mine}) == SCENARIOS["nvidia-maxtext-double-buffer"].steps


# ---------------------------------------------------------------- several programs per step
# The truth of a plan (truth/iterations.csv, truth/programs.csv) is checked against the capture
# read back alone: each GPU event joins its launch (correlation id), the launch lies inside one
# execution's `PjRtStreamExecutorLoadedExecutable::Execute` on the python thread (every plan
# execution here runs on one GPU, so on the calling thread), and the iterations are the
# executions in dispatch order cut every len(plan.iteration).

PLAN_NAMES = sorted(n for n, s in SCENARIOS.items() if s.plan is not None)


def _executions(c) -> list[dict]:
    """The executions as the capture shows them, in dispatch order, each with its GPU events."""
    host = _host_by_correlation(c["space"])
    python = next(ln for ln in c["space"].plane("/host:CPU").lines if ln.name == "python")
    chain = sorted((ev for ev in python.events()
                    if ev.name == "PjRtStreamExecutorLoadedExecutable::Execute"),
                   key=lambda ev: ev.start_ps)
    thunks = sorted((ev for ev in python.events() if ev.name == "GpuExecutable::ExecuteThunks"),
                    key=lambda ev: ev.start_ps)
    assert len(chain) == len(thunks)
    out = [{"start": ev.start_ps, "end": ev.end_ps, "module": th.stats["module_name"],
            "events": []} for ev, th in zip(chain, thunks, strict=True)]
    starts = [x["start"] for x in out]
    for d, s, e in c["events"]:
        (_, launch), = host[e.stats["correlation_id"]]
        k = max(i for i, st in enumerate(starts) if st <= launch.start_ps)
        assert launch.end_ps <= out[k]["end"], (d, s, e.name)
        out[k]["events"].append((d, s, e))
    return out


def _iterations_from_capture(c) -> dict:
    """(iteration, device) -> the GPU events and executions the capture shows there."""
    per = len(c["sc"].plan.iteration)
    execs = _executions(c)
    assert len(execs) == per * c["sc"].steps
    got: dict = {}
    for n, x in enumerate(execs):
        for d, _, e in x["events"]:
            row = got.setdefault((n // per, d), {"events": [], "programs": []})
            row["events"].append(e)
            pid = e.stats.get("program_id")
            if pid is not None:
                assert e.stats["hlo_module"] == x["module"]
                label = f"{x['module']}({pid})"
                if not row["programs"] or row["programs"][-1][0] != n:
                    row["programs"].append((n, label))
    return got


@pytest.mark.parametrize("name", PLAN_NAMES)
def test_iterations_truth_is_what_the_capture_runs(name, corpus, request):
    c = _loaded(name, corpus, request)
    rows = _read_csv(c["r"].truth_dir / "iterations.csv")
    got = _iterations_from_capture(c)
    assert {(int(r["iteration"]), int(r["device"])) for r in rows} == set(got)
    for r in rows:
        g = got[(int(r["iteration"]), int(r["device"]))]
        evs = g["events"]
        assert r["programs"] == ";".join(label for _, label in g["programs"])
        assert int(r["executions"]) == len(g["programs"])
        assert int(r["kernels"]) == len(evs)
        assert int(r["argument_copies"]) == sum(1 for e in evs if "program_id" not in e.stats)
        assert int(r["start_ps"]) == min(e.start_ps for e in evs)
        assert int(r["end_ps"]) == max(e.end_ps for e in evs)
        assert int(r["busy_ps"]) == _union_ps([(e.start_ps, e.end_ps) for e in evs])
        assert int(r["first_launch_ps"]) < int(r["start_ps"])
    # the same programs in every iteration, on every GPU
    by_device: dict = {}
    for r in rows:
        by_device.setdefault(r["device"], set()).add(r["programs"])
    assert all(len(v) == 1 for v in by_device.values())


def _union_ps(intervals) -> int:
    total, end = 0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


@pytest.mark.parametrize("name", PLAN_NAMES)
def test_programs_truth_is_what_the_capture_runs(name, corpus, request):
    c = _loaded(name, corpus, request)
    sc = c["sc"]
    rows = {int(r["program_id"]): r for r in _read_csv(c["r"].truth_dir / "programs.csv")}
    assert set(rows) == set(c["programs"])
    execs = _executions(c)
    for pid, r in rows.items():
        assert r["module"] == c["programs"][pid].name
        mine = [x for x in execs if any(e.stats.get("program_id") == pid
                                        for _, _, e in x["events"])]
        assert int(r["executions"]) == len(mine)
        assert int(r["executions_per_iteration"]) * sc.steps == len(mine)
        assert int(r["executions_per_iteration"]) == sum(
            1 for ex in sc.plan.iteration
            if next(d.program_id for d in sc.plan.programs if d.key == ex.program) == pid)
        launched = Counter((n, d) for n, x in enumerate(mine) for d, _, e in x["events"]
                           if e.stats.get("program_id") == pid)
        assert r["kernels_per_execution"] == ";".join(map(str, sorted(set(launched.values()))))
        events = [(d, e) for x in mine for d, _, e in x["events"]
                  if e.stats.get("program_id") == pid]
        assert r["gpus"] == ";".join(map(str, sorted({d for d, _ in events})))
        assert int(r["gpu_ps"]) == sum(e.duration_ps for _, e in events)
        # the truth's rows of the program: instructions it holds, as many per iteration and GPU
        # as its executions launch
        mine_truth = [t for t in c["truth"] if int(t["program_id"]) == pid and t["instruction"]]
        assert {t["instruction"] for t in mine_truth} <= {
            i.name for comp in c["programs"][pid].computations for i in comp.instructions}
        per = Counter((t["step"], t["device"]) for t in mine_truth)
        assert set(per.values()) == {int(r["executions_per_iteration"]) *
                                     int(r["kernels_per_execution"])}


def test_eager_op_by_op_is_dispatch_bound_with_nested_python_calls(corpus):
    """Many small programs per iteration, some run several times, distinct programs sharing a
    module name; the GPU finishes each program before the host launches the next; the Python
    tracer's calls nest (a function in itself) inside one outermost call per iteration."""
    c = _loaded("eager-op-by-op", corpus, None)
    sc, meta = c["sc"], c["meta"]
    assert meta["planted"] == {"dispatch_bound": True, "straggler": False}
    assert not sc.step_annotations and not [
        ev for ln in c["space"].plane("/host:CPU").lines for ev in ln.events()
        if "step_num" in ev.stats]
    programs = {int(r["program_id"]): r for r in _read_csv(c["r"].truth_dir / "programs.csv")}
    per_iteration = sum(int(r["executions_per_iteration"]) for r in programs.values())
    assert 20 <= per_iteration <= 40 and len(programs) >= 8
    assert max(int(r["executions_per_iteration"]) for r in programs.values()) >= 4
    names = Counter(r["module"] for r in programs.values())
    assert names["jit_matmul"] >= 2 and names["jit_add"] >= 2
    # distinct programs under one name really differ (shapes of the GEMM)
    shapes = {tuple(i.shape.dimensions) for pid, r in programs.items()
              if r["module"] == "jit_matmul"
              for i in c["programs"][pid].computations[0].instructions if i.opcode == "parameter"}
    assert len(shapes) >= 4
    # dispatch-bound: every execution's first launch comes after the previous one's GPU work
    execs = _executions(c)
    gpu = [(min(e.start_ps for _, _, e in x["events"]), max(e.end_ps for _, _, e in x["events"]))
           for x in execs]
    host = _host_by_correlation(c["space"])
    first_launch = [min(host[e.stats["correlation_id"]][0][1].start_ps
                        for _, _, e in x["events"]) for x in execs]
    for k in range(1, len(execs)):
        assert first_launch[k] > gpu[k - 1][1]
    for r in _read_csv(c["r"].truth_dir / "iterations.csv"):
        assert int(r["busy_ps"]) < 0.25 * (int(r["end_ps"]) - int(r["start_ps"]))
    # the Python tracer: strictly nested calls, one outermost block_forward per iteration
    python = next(ln for ln in c["space"].plane("/host:CPU").lines if ln.name == "python")
    events = sorted(python.events(), key=lambda e: (e.start_ps, -e.duration_ps))
    stack, nested_in_itself, outer = [], 0, []
    for e in events:
        while stack and stack[-1].end_ps <= e.start_ps:
            stack.pop()
        assert not stack or e.end_ps <= stack[-1].end_ps, e.name  # nested, never overlapping
        if e.name.startswith("$"):
            if not stack:
                outer.append(e)
            nested_in_itself += any(s.name == e.name for s in stack)
        elif e.name.startswith("PjitFunction("):
            assert stack and stack[0].name == "$model.py:40 block_forward"
        stack.append(e)
    assert [e.name for e in outer] == ["$model.py:40 block_forward",
                                       "$api.py:3105 block_until_ready"] * sc.steps
    assert nested_in_itself >= 2 * sc.steps  # apply_layers inside apply_layers, twice
    # kernels attribute to the model's lines through the programs' stack frames
    lines = {(t["kernel"], t["source"], t["user_frame"]) for t in c["truth"]
             if t["instruction"] == "custom-call"}
    assert ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"
            "_execute_segment_k_off_kernel__5x_cublas", "/workspace/model.py:15",
            "/workspace/model.py:15 matmul") in lines


def test_train_step_then_optimizer_with_and_without_annotations(corpus):
    for name, annotated in (("train-plus-optimizer", False),
                            ("train-plus-optimizer-annotated", True)):
        c = _loaded(name, corpus, None)
        rows = _read_csv(c["r"].truth_dir / "iterations.csv")
        assert {r["programs"] for r in rows} == {"jit_train_step(17);jit_apply_updates(19)"}
        assert len(rows) == c["sc"].steps
        opt = next(r for r in _read_csv(c["r"].truth_dir / "programs.csv")
                   if r["module"] == "jit_apply_updates")
        assert int(opt["kernels_per_execution"]) >= 4
        python = next(ln for ln in c["space"].plane("/host:CPU").lines if ln.name == "python")
        steps = [ev for ev in python.events() if "step_num" in ev.stats]
        pjit = [ev for ev in python.events() if ev.name.startswith("PjitFunction(")]
        assert [ev.name for ev in sorted(pjit, key=lambda e: e.start_ps)][:2] == [
            "PjitFunction(train_step)", "PjitFunction(apply_updates)"]
        if not annotated:
            assert steps == []
            continue
        assert len(steps) == c["sc"].steps
        for ev in steps:  # the step annotation holds both dispatches and their GPU work
            inside = [p.name for p in pjit if ev.start_ps <= p.start_ps and p.end_ps <= ev.end_ps]
            assert inside == ["PjitFunction(train_step)", "PjitFunction(apply_updates)"]
            row = rows[ev.stats["step_num"]]
            assert ev.start_ps < int(row["start_ps"]) and int(row["end_ps"]) < ev.end_ps


def test_copies_on_one_gpu_and_the_program_on_another(corpus):
    c = _loaded("copies-on-other-gpu", corpus, None)
    assert c["meta"]["planted"] == {"dispatch_bound": False, "straggler": False}
    on = Counter((d, "program_id" in e.stats) for d, _, e in c["events"])
    assert set(on) == {(0, False), (7, True)}  # GPU 0: copies only; GPU 7: program only
    assert all(e.name == "__amd_rocclr_copyBuffer.kd" for d, _, e in c["events"] if d == 0)
    rows = _read_csv(c["r"].truth_dir / "iterations.csv")
    assert {(r["device"], r["programs"], r["argument_copies"]) for r in rows} == {
        ("0", "", "2"), ("7", "jit_train_step(17)", "0")}
    programs = _read_csv(c["r"].truth_dir / "programs.csv")
    assert [(r["module"], r["gpus"]) for r in programs] == [("jit_train_step", "7")]
    assert not [d for d in _read_csv(c["r"].truth_dir / "defects.csv") if d["kind"] == "straggler"]


@pytest.mark.parametrize("name", ["pipeline-stages", "pipeline-stages-4"])
def test_pipeline_stages_run_one_program_each_in_order(name, corpus):
    c = _loaded(name, corpus, None)
    sc = c["sc"]
    assert c["meta"]["planted"]["straggler"] is False
    rows = _read_csv(c["r"].truth_dir / "iterations.csv")
    stages = {r["device"]: r["programs"] for r in rows}
    assert len(stages) == sc.gpus and len(set(stages.values())) == sc.gpus
    assert all(";" not in p for p in stages.values())  # one program per GPU per iteration
    ids = {d: {e.stats["program_id"] for dd, _, e in c["events"] if dd == d and
               "program_id" in e.stats} for d in range(sc.gpus)}
    assert all(len(v) == 1 for v in ids.values()) and len(set().union(*ids.values())) == sc.gpus
    by = {(int(r["iteration"]), int(r["device"])): r for r in rows}
    for (it, dev), r in by.items():
        if dev:  # a stage starts after the stage before it ends, though launched earlier
            before = by[(it, dev - 1)]
            assert int(r["start_ps"]) > int(before["end_ps"])
            assert int(r["first_launch_ps"]) < int(before["end_ps"])
