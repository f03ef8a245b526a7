"""One read per capture: what steps 0 and 1 hand on to step 2 (scratch.handoff_put/get) gives
step 2 the very table it computes from the capture itself, is never taken from another file or
a changed one, and spares step 2 the trace; XProf's peaks from the planes' headers equal its
peaks from the whole xplane; an XProf conversion started and then abandoned leaves nothing."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys

import pytest

from capgen.generate import generate
from capgen.scenarios import ALL_SCENARIOS, MULTI_PROGRAM_SCENARIOS
from conftest import REPO

SCRIPTS = REPO / "scripts"
SIBLING = REPO / "analyzing-jax-launch-overhead" / "scripts"


def step(script, capture, out, *extra):
    p = subprocess.run([sys.executable, "-P", str(script), str(capture), "--out", str(out),
                        *extra], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return p


def reconciled(capture, out, handed_on: bool) -> bytes:
    """reconciliation.csv of step 2 after step 4, with steps 0 and 1 first (their hand-offs)
    or without them (step 2 reads the capture itself)."""
    if handed_on:
        step(SCRIPTS / "capture_info.py", capture, out)
        step(SIBLING / "skip_stats.py", capture, out)
    step(SCRIPTS / "attribute_kernels.py", capture, out, "--no-xprof")
    step(SCRIPTS / "reconcile.py", capture, out)
    assert (out / ".handoff" / "model_checks.json").is_file() == handed_on
    return (out / "reconciliation.csv").read_bytes()


SCENES = ["rocm-8gpu-straggler", "nvidia-cb-partial", "eager-op-by-op", "pipeline-stages",
          "rocm-json-disagrees", "rocm-non-launch-correlation"]


@pytest.mark.parametrize("name", SCENES)
def test_step_2_from_the_hand_offs_equals_step_2_from_the_capture(tmp_path, name):
    scenario = {**ALL_SCENARIOS, **MULTI_PROGRAM_SCENARIOS}[name]
    r = generate(scenario, tmp_path / "capture")
    a = reconciled(r.run_dir, tmp_path / "a", handed_on=True)
    b = reconciled(r.run_dir, tmp_path / "b", handed_on=False)
    assert a == b
    assert b"fail" in a or name not in ("rocm-json-disagrees", "rocm-non-launch-correlation")


@pytest.fixture(scope="module")
def handed(tmp_path_factory):
    base = tmp_path_factory.mktemp("handed")
    r = generate(ALL_SCENARIOS["rocm-8gpu-straggler"], base / "capture")
    out = base / "out"
    reconciled(r.run_dir, out, handed_on=True)
    return r, out


def test_step_2_reads_no_trace_when_step_1_handed_on(handed, tmp_path):
    from jaxperf.analyses import reconcile
    from tracekit import capture_inputs

    r, out = handed

    class NoTrace(capture_inputs.Capture):
        @property
        def trace(self):
            raise AssertionError("step 2 read the trace although step 1 handed on")

    files = capture_inputs.resolve(r.run_dir)
    t, n, rows, why = reconcile.trace_side(NoTrace(files), out)
    assert why == "" and n > 0 and rows and t


def test_a_changed_or_other_capture_is_never_read_from_a_stale_hand_off(handed, tmp_path):
    from tracekit import scratch

    r, out = handed
    trace = next(r.run_dir.glob("*.trace.json.gz"))
    assert scratch.handoff_get(out, "model_checks", [trace]) is not None
    # the same bytes under another name: another file
    other = tmp_path / trace.name
    shutil.copy2(trace, other)
    assert scratch.handoff_get(out, "model_checks", [other]) is None
    # the same file, modified (its time moved): its hand-off is never read, and a step refuses
    # to write its tables beside the ones made from the file as it was (one capture a folder)
    st = trace.stat()
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    try:
        assert scratch.handoff_get(out, "model_checks", [trace]) is None
        p = subprocess.run([sys.executable, "-P", str(SCRIPTS / "reconcile.py"),
                            str(r.run_dir), "--out", str(out)], capture_output=True, text=True,
                           timeout=600)
        assert p.returncode == 1 and "holds the tables of another capture" in p.stderr
        fresh = tmp_path / "fresh"
        p = step(SCRIPTS / "reconcile.py", r.run_dir, fresh)  # alone: from the capture
        assert "checks:" in p.stdout
    finally:
        os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns))
    # a hand-off cut short or not JSON reads as none
    path = out / ".handoff" / "trace_streams.json"
    kept = path.read_text()
    path.write_text(kept[:40])
    try:
        assert scratch.handoff_get(out, "trace_streams", [trace]) is None
    finally:
        path.write_text(kept)


def test_a_hand_off_is_keyed_and_whole(tmp_path):
    from tracekit import scratch

    src = tmp_path / "h.trace.json.gz"
    src.write_bytes(b"x")
    scratch.handoff_put(tmp_path / "out", "t", [src], {"a": [1, 2]})
    d = json.loads((tmp_path / "out" / ".handoff" / "t.json").read_text())
    assert d["payload"] == {"a": [1, 2]}
    assert d["sources"][0]["bytes"] == 1 and d["sources"][0]["file"] == str(src.resolve())
    assert scratch.handoff_get(tmp_path / "out", "t", [src]) == {"a": [1, 2]}
    assert scratch.handoff_get(tmp_path / "out", "t", [tmp_path / "missing"]) is None
    assert [p.name for p in (tmp_path / "out" / ".handoff").iterdir()] == ["t.json"]


# ---------------------------------------------------------------- XProf's conversions

def _xplanes(shared) -> list:
    return sorted(shared.glob("**/*.xplane.pb"))


def test_xprof_peaks_from_the_planes_headers_equal_those_from_the_whole_xplane(shared,
                                                                                tmp_path):
    """Step 5 hands XProf's roofline_model only the planes' stats and metadata (no events):
    on every shared capture its peaks are those it gives for the whole xplane."""
    pytest.importorskip("xprof")
    from jaxperf.read import xplane_reader, xprof_figures

    seen = 0
    for i, xplane in enumerate(_xplanes(shared)):
        folder = tmp_path / str(i) / "attribution" / "xplane"
        folder.mkdir(parents=True)
        shutil.copy2(xplane, folder / xplane.name)
        space = xplane_reader.load_space(xplane)
        whole = xprof_figures.peaks(tmp_path / str(i))
        headers = xprof_figures.peaks(tmp_path / str(i), space)
        assert whole == headers, xplane
        seen += "compute_flop_per_s" in whole
    assert seen >= 3


def test_an_abandoned_xprof_conversion_is_ended(tmp_path):
    """A step that fails while XProf converts in its child ends the child (Pending.cancel)."""
    pytest.importorskip("xprof")
    from jaxperf.read import xprof_figures

    big = tmp_path / "h.xplane.pb"
    big.write_bytes(b"\x0a\x00" * 10)
    pending = xprof_figures.Pending(big, "hlo_stats")
    proc = pending._proc
    pending.cancel()
    assert proc.poll() is not None


def _hlo_stats(path):
    from jaxperf.read import xprof_figures
    return xprof_figures.convert(path, "hlo_stats")


def test_xprof_reads_the_same_from_the_device_planes_copy(shared, tmp_path):
    """Step 4 hands XProf the xplane without the host plane's events (device_copy): on every
    shared capture and on generated ones (command buffers on and off, eight GPUs), XProf's
    hlo_stats of the copy is byte for byte its hlo_stats of the whole xplane, and the copy
    decodes to the same planes, device events and metadata."""
    pytest.importorskip("xprof")
    from jaxperf.read import xprof_figures, xprotos

    xplanes = _xplanes(shared)
    for name in ("nvidia-cb-partial", "rocm-8gpu-straggler", "nvidia-off"):
        r = generate(ALL_SCENARIOS[name], tmp_path / name)
        xplanes += sorted(r.run_dir.glob("*.xplane.pb"))
    trimmed = 0
    XSpace = xprotos.classes()["XSpace"]
    for i, xplane in enumerate(xplanes):
        whole, copy = tmp_path / f"w{i}" / xplane.name, tmp_path / f"c{i}" / xplane.name
        whole.parent.mkdir()
        copy.parent.mkdir()
        shutil.copy2(xplane, whole)
        trimmed += xprof_figures.device_copy(xplane, copy)
        assert _hlo_stats(copy) == _hlo_stats(whole), xplane
        a, b = XSpace.FromString(xplane.read_bytes()), XSpace.FromString(copy.read_bytes())
        assert [p.name for p in a.planes] == [p.name for p in b.planes]
        assert list(a.hostnames) == list(b.hostnames)
        for pa, pb in zip(a.planes, b.planes, strict=True):
            assert pa.event_metadata == pb.event_metadata and list(pa.stats) == list(pb.stats)
            if pa.name.startswith("/device:"):
                assert pa == pb
            else:
                assert len(pb.lines) == 0
    assert trimmed >= len(xplanes) - 1  # the V100 TF capture too: it has device events


def test_the_device_planes_copy_of_a_cpu_capture_or_odd_bytes_is_the_whole_file(tmp_path):
    from jaxperf.read import xprof_figures, xprotos

    XSpace = xprotos.classes()["XSpace"]
    xs = XSpace()
    host = xs.planes.add()
    host.name = "/host:CPU"
    line = host.lines.add()
    line.events.add().duration_ps = 5
    src = tmp_path / "cpu.xplane.pb"
    src.write_bytes(xs.SerializeToString())
    assert not xprof_figures.device_copy(src, tmp_path / "a.xplane.pb")
    assert (tmp_path / "a.xplane.pb").read_bytes() == src.read_bytes()
    odd = tmp_path / "odd.xplane.pb"
    odd.write_bytes(b"\x0a\xff\xff\xff\x0f" + b"x" * 10)
    assert not xprof_figures.device_copy(odd, tmp_path / "b.xplane.pb")
    assert (tmp_path / "b.xplane.pb").read_bytes() == odd.read_bytes()


def test_a_hand_off_not_of_its_shape_is_read_as_none(handed, tmp_path):
    """A hand-off someone edited (its key still right) is read as missing: the step reads the
    capture itself and writes the same table, never a traceback."""
    r, out = handed
    before = (out / "reconciliation.csv").read_bytes()
    info = (out / "capture_info.json").read_bytes()
    for name, bad in (("model_checks", {"rows": [{"check": "x"}]}),
                      ("trace_streams", {"streams": [[0, 1, "two", 3]], "events": 5}),
                      ("xplane_streams", {"streams": "no"}),
                      ("trace_facts", {"gpu_events": [[0]], "host_events": 1, "notes": []})):
        path = out / ".handoff" / f"{name}.json"
        kept = path.read_text()
        d = json.loads(kept)
        d["payload"] = bad
        path.write_text(json.dumps(d))
        try:
            step(SCRIPTS / "reconcile.py", r.run_dir, out)
            step(SCRIPTS / "capture_info.py", r.run_dir, out)
            assert (out / "reconciliation.csv").read_bytes() == before, name
            assert (out / "capture_info.json").read_bytes() == info, name
        finally:
            path.write_text(kept)


def test_step_0_after_step_4_decodes_no_gpu_plane_and_says_the_same(tmp_path):
    """Step 4 hands on the xplane's per-stream totals (it decodes every event): step 0 then
    decodes no GPU plane's events (the host plane's at most), and its inventory and hand-off
    are those it makes from the whole file alone."""
    from jaxperf.analyses import capture_info
    from tracekit import capture_inputs
    r = generate(ALL_SCENARIOS["rocm-8gpu-straggler"], tmp_path / "capture")
    alone, after = tmp_path / "alone", tmp_path / "after"
    step(SCRIPTS / "attribute_kernels.py", r.run_dir, after, "--no-xprof")
    inventories, decoded = [], []
    for out in (alone, after):
        cap = capture_inputs.open_capture(r.run_dir)
        inventories.append(capture_info.run(cap, out=out))
        decoded.append({p.name for p in cap.cache["space"].planes if p._events is not None})
    assert inventories[0] == inventories[1]
    assert any(n.startswith("/device:GPU:") for n in decoded[0])
    assert not any(n.startswith("/device:GPU:") for n in decoded[1])

    def streams(out):
        return json.loads((out / ".handoff" / "xplane_streams.json").read_text())["payload"]
    assert streams(alone) == streams(after) and streams(after)["streams"]


def _collected_and_counted(trace_path) -> tuple:
    """(step 1's totals counted as it collects, model_checks.trace_totals' pass) of one trace."""
    sys.path.insert(0, str(SIBLING))
    import gpu_events
    import model_checks
    from tracekit import trace_reader

    trace = trace_reader.load_trace(trace_path)
    counted = model_checks.trace_totals(trace)
    c = gpu_events.collect(trace)
    return (c.per_stream, c.facts), counted


@pytest.mark.parametrize("name", ["rocm-8gpu-straggler", "nvidia-cb-partial", "eager-op-by-op",
                                  "rocm-json-disagrees"])
def test_the_totals_step_1_counts_as_it_collects_equal_the_traces_own_pass(tmp_path, name):
    """Steps 0 and 2 are handed the totals step 1 counts in its one pass over the trace
    (gpu_events.Collected); step 0 alone counts them in a pass of its own
    (model_checks.trace_totals): the two are equal, events and picoseconds."""
    scenario = {**ALL_SCENARIOS, **MULTI_PROGRAM_SCENARIOS}[name]
    r = generate(scenario, tmp_path / "capture")
    collected, counted = _collected_and_counted(next(r.run_dir.glob("*.trace.json.gz")))
    assert collected == counted and collected[0]


def test_the_last_end_step_1_collects_is_the_latest_event_end_before_zero_too(tmp_path):
    """Collected.last_end: the latest end among the GPU stream and host events, also where every
    event lies before the trace's zero (negative times), and 0 without events."""
    sys.path.insert(0, str(SIBLING))
    import gpu_events
    from tracekit import trace_reader
    r = generate(ALL_SCENARIOS["rocm-8gpu-straggler"], tmp_path / "capture")
    trace = trace_reader.load_trace(next(r.run_dir.glob("*.trace.json.gz")))
    shift = 1e9 + max(ev["ts"] + ev["dur"] for ev in trace.events)  # us: all end before zero
    for ev in trace.events:
        ev["ts"] -= shift
    c = gpu_events.collect(trace)
    ends = [e.end for e in c.gpu] + [h["start"] + h["dur"] for hs in c.host_threads.values()
                                     for h in hs]
    assert c.last_end == max(ends) < 0
    trace.events = []
    assert gpu_events.collect(trace).last_end == 0


def test_the_totals_step_1_counts_equal_the_traces_own_pass_on_shared_traces(shared):
    seen = 0
    for path in sorted(shared.glob("**/*.trace.json.gz")):
        collected, counted = _collected_and_counted(path)
        assert collected == counted, path
        seen += bool(collected[0])
    assert seen >= 3


def test_step_1_holds_each_repeated_name_instruction_module_and_thread_once(tmp_path):
    """gpu_events.collect makes equal kernel names, host event names, hlo_op and hlo_module
    values and thread keys one object each (the memos keyed on them find them by identity), and
    changes no value: every collected event equals the trace's own."""
    sys.path.insert(0, str(SIBLING))
    import gpu_events
    from tracekit import trace_reader
    r = generate(ALL_SCENARIOS["rocm-8gpu-straggler"], tmp_path / "capture")
    trace = trace_reader.load_trace(next(r.run_dir.glob("*.trace.json.gz")))
    before = copy.deepcopy(trace.events)
    c = gpu_events.collect(trace)
    assert trace.events == before
    values = [e.name for e in c.gpu] + [v for e in c.gpu for v in (e.op, e.module) if v]
    values += [h[k] for hs in c.host_threads.values() for h in hs for k in ("name", "thread")]
    assert len({id(v) for v in values}) == len(set(values)) < len(values) / 10
