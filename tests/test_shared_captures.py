"""The readers against the independent figures in ../shared/captures/manifest.json, exactly."""

from __future__ import annotations

from collections import Counter

from conftest import SHARED_CAPTURES
from jaxperf.read import xplane_reader
from tracekit import trace_reader


def _space(capture):
    return xplane_reader.load_space(SHARED_CAPTURES / capture["path"])


def _gpu_events(space):
    for plane in space.gpu_planes():
        for line in plane.lines:
            for ev in line.events():
                yield plane, line, ev


def test_planes_hosts_and_device_stats(capture):
    space = _space(capture)
    assert [p.name for p in space.planes] == capture["planes"]
    assert space.hostnames == capture["hostnames"]
    active = [p for p in space.gpu_planes() if p.lines]
    assert active, "every shared capture has an active GPU"
    for plane in active:
        assert {k: plane.stats.get(k) for k in capture["device"]} == capture["device"]
    start, stop = space.profile_times_ns()
    env = capture["task_env"]
    assert (start, stop) == ((env["profile_start_time"], env["profile_stop_time"]) if env
                             else (None, None))


def test_gpu_event_counts(capture):
    space = _space(capture)
    counts = Counter()
    lines = set()
    first = last = None
    for _, line, ev in _gpu_events(space):
        lines.add(line.name)
        counts["events"] += 1
        for stat, key in (("correlation_id", "corr"), ("hlo_op", "hlo_op"),
                          ("hlo_module", "hlo_module"), ("kernel_details", "kernels"),
                          ("memcpy_details", "memcpys")):
            counts[key] += stat in ev.stats
        if line.name.startswith("Stream #"):
            first = ev.start_ps if first is None else min(first, ev.start_ps)
            last = ev.end_ps if last is None else max(last, ev.end_ps)
    assert counts["events"] == capture["gpu_device_events"]
    assert counts["kernels"] == capture["gpu_kernel_events"]
    assert counts["memcpys"] == capture["gpu_memcpy_events"]
    assert counts["corr"] == capture["gpu_events_with_correlation_id"]
    assert counts["hlo_op"] == capture["gpu_events_with_hlo_op"]
    assert counts["hlo_module"] == capture["gpu_events_with_hlo_module"]
    assert sorted(lines) == capture["gpu_line_names"]
    assert round((last - first) / 1e9, 3) == capture["gpu_span_ms"]


def test_host_events_and_programs(capture):
    space = _space(capture)
    assert space.plane("/host:CPU").event_count() == capture["host_events"]
    protos = space.hlo_protos()
    assert len(protos) == capture["hlo_protos_in_host_metadata"]
    assert sorted(name for name, _ in protos.values()) == sorted(capture["hlo_modules"])
    for program_id, (name, blob) in protos.items():
        module = xplane_reader.parse_hlo(blob)
        assert name == f"{module.name}({program_id})"
        assert module.id == program_id
        entry = [c for c in module.computations if c.id == module.entry_computation_id]
        assert len(entry) == 1
        # every scheduled instruction id belongs to its computation
        for comp in module.computations:
            seq = module.schedule.sequences.get(comp.id)
            if seq is not None:
                ids = {i.id for i in comp.instructions}
                assert set(seq.instruction_ids) <= ids


def test_trace_json_against_manifest(capture):
    d = capture["derived_trace_json_gz"]
    trace = trace_reader.load_trace(SHARED_CAPTURES / d["path"])
    assert trace.entry_count == d["events"]
    assert len(trace.events) == d["x_events"]
    gpu = set(trace.gpu_pids().values())
    gpu_events = [e for e in trace.events if e["pid"] in gpu]
    assert len(gpu_events) == d["gpu_x_events"]
    assert sorted({k for e in gpu_events for k in e.get("args", {})}) == d["gpu_arg_keys"]
    assert sorted(set(trace.processes.values())) == d["processes"]
    assert trace.display_time_unit == "ns"


def test_trace_and_xplane_agree_on_every_gpu_event(capture):
    """Same GPU events in both files, to the picosecond, keyed by names never by pid."""
    space = _space(capture)
    trace = trace_reader.load_trace(SHARED_CAPTURES / capture["derived_trace_json_gz"]["path"])
    ordinal = {pid: o for o, pid in trace.gpu_pids().items()}
    stream_names = {(o, tid): name for (pid, tid), name in trace.threads.items()
                    if (o := ordinal.get(pid)) is not None}
    from_x, from_t = Counter(), Counter()
    for plane, line, ev in _gpu_events(space):
        if line.name.startswith("Stream #"):
            from_x[(plane.gpu_ordinal, line.name, ev.name, ev.start_ps, ev.duration_ps)] += 1
    for e in trace.events:
        o = ordinal.get(e["pid"])
        name = stream_names.get((o, e["tid"]), "")
        if o is not None and name.startswith("Stream #"):
            from_t[(o, name, e["name"], trace_reader.ps(e["ts"]), trace_reader.ps(e["dur"]))] += 1
    assert from_x and from_x == from_t
