"""skip_stats.py: verdicts and the host/device split against the generator's truth, joins on the
real captures, exact stream budgets, refusals, bad input, and a bare interpreter."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from capgen.generate import generate
from capgen.scenarios import SCENARIOS
from conftest import REPO, layout_text, read_table

SCRIPT = REPO / "analyzing-jax-launch-overhead" / "scripts" / "skip_stats.py"
BARE = getattr(sys, "_base_executable", sys.executable)
OUTPUTS = ("summary.txt", "skip_stats.json", "rows.csv", "rows_gpu.csv", "streams.csv",
           "steps.csv", "gaps.csv", "python_lines.csv")


def run(capture, out, python=BARE, flags=("-I", "-S", "-P")):
    """Run as a user would, in a bare interpreter (no site-packages) unless told otherwise."""
    return subprocess.run([python, *flags, str(SCRIPT), str(capture), "--out", str(out)],
                          capture_output=True, text=True, timeout=600)


def read(path):
    return read_table(path)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    made = {}

    def get(name):
        if name not in made:
            base = tmp_path_factory.mktemp(name)
            r = generate(SCENARIOS[name], base / "capture")
            p = run(r.run_dir, base / "out")
            assert p.returncode == 0, p.stderr
            made[name] = (r, base / "out")
        return made[name]
    return get


@pytest.mark.parametrize("name, verdict", [
    ("nvidia-launch-bound", "launch-bound"),
    ("rocm-off", "launch-bound"),
    ("nvidia-device-bound", "device-bound"),
    ("rocm-8gpu-straggler", "collective/straggler-bound"),
])
def test_verdict_and_host_device_split_match_the_truth(corpus, name, verdict):
    r, out = corpus(name)
    summary = (out / "summary.txt").read_text().splitlines()
    assert summary[0] == f"verdict: {verdict}"
    assert summary[1].startswith("rule: on the GPU that finishes each step last")
    steps = read(out / "steps.csv")
    assert len(steps) == len(r.steps)
    ours = sum(float(s["host_late_us"]) for s in steps) / sum(float(s["dur_us"]) for s in steps)
    truth = sum(s["host_ps"] for s in r.steps) / sum(s["end_ps"] - s["start_ps"] for s in r.steps)
    assert abs(ours - truth) <= 0.01
    # per step and GPU, start/end/busy agree with the truth to the nanosecond
    by = {(s["step"], s["device"]): s for s in r.steps}
    for s in steps:
        t = by[(int(s["step"]), int(s["device"]))]
        assert abs(float(s["start_us"]) * 1e6 - t["start_ps"]) < 1000
        assert abs(float(s["end_us"]) * 1e6 - t["end_ps"]) < 1000
        assert abs(float(s["busy_us"]) * 1e6 - t["busy_ps"]) < 2000
        assert int(s["critical_stream"]) == t["critical_stream"]


def test_straggler_is_named(corpus):
    _, out = corpus("rocm-8gpu-straggler")
    text = (out / "summary.txt").read_text()
    assert "straggler: GPU 5 finishes last in 4 of 4 steps, ahead of the next GPU by" in text
    assert "last per step: GPU 5 in 4;" in text
    assert "collective time per step: GPU 5 has the least" in text


def test_rows_join_every_event_and_say_what_the_id_joined(corpus):
    r, out = corpus("rocm-non-launch-correlation")
    rows = read(out / "rows.csv")
    assert len(rows) == len(r.kernels)
    joins = {}
    for row in rows:
        joins[row["join"]] = joins.get(row["join"], 0) + 1
    assert joins == {"launch": len(r.kernels) - 2, "other": 2}
    other = [row for row in rows if row["join"] == "other"]
    assert {row["launch_name"] for row in other} == {"hipStreamWaitEvent"}
    assert all(row["queue_us"] == "" for row in other)
    summary = (out / "summary.txt").read_text()
    assert "joins: launch 1022, graph_launch 0, other 2, none 0" in summary


def test_graph_kernels_are_marked_and_refused_for_launch_delay(corpus):
    r, out = corpus("nvidia-cb-all")
    rows = read(out / "rows.csv")
    graph = [row for row in rows if row["graph"] == "1"]
    assert len(graph) == sum(k["graph"] for k in r.kernels) == 1020
    assert all(row["join"] == "graph_launch" and row["launch_name"].startswith("cuGraphLaunch")
               and row["queue_us"] == "" for row in graph)
    summary = (out / "summary.txt").read_text()
    assert "cannot compute: 1020 GPU events were launched by graphs" in summary


def test_stream_budgets_add_up_to_the_span(corpus):
    _, out = corpus("rocm-8gpu-straggler")
    streams = read(out / "streams.csv")
    # per GPU: the compute stream (critical), the collective stream, the argument-copy stream
    assert len(streams) == 24 and sum(int(s["critical"]) for s in streams) == 8
    for s in streams:
        parts = sum(float(s[k]) for k in ("compute_us", "collective_us", "memcpy_us", "idle_us"))
        assert abs(parts - float(s["span_us"])) <= 0.002  # each value rounded to the ns
        shares = sum(float(s[k]) for k in ("compute_pct_of_span", "collective_pct_of_span",
                                           "memcpy_pct_of_span", "idle_pct_of_span"))
        assert abs(shares - 100.0) <= 0.02
    coll = [s for s in streams if float(s["collective_us"]) > 0]
    assert len(coll) == 8
    assert all(s["critical"] == "0" and float(s["compute_us"]) == 0 for s in coll)
    copies = [s for s in streams if float(s["compute_us"]) == 0 and
              float(s["collective_us"]) == 0]
    assert len(copies) == 8 and all(float(s["memcpy_us"]) > 0 for s in copies)


def test_stream_budget_partition_is_exact_in_picoseconds():
    sys.path.insert(0, str(SCRIPT.parent))
    import gpu_events
    E = gpu_events.TraceEvent
    evs = [E(0, 1, "a", 100, 50, "compute"), E(0, 1, "b", 120, 100, "collective"),
           E(0, 1, "c", 400, 7, "memcpy"), E(0, 1, "d", 405, 1000, "compute")]
    b = gpu_events.stream_budget(evs, 90, 500)
    # overlaps go to the event that started first: b gets 150-220, d gets 407-500
    assert b == {"compute": 50 + 93, "collective": 70, "memcpy": 7, "idle": 10 + 180}
    assert sum(b.values()) == 410


def test_gaps_name_the_host_events_on_the_execution_thread(corpus):
    _, out = corpus("nvidia-launch-bound")
    gaps = read(out / "gaps.csv")
    assert gaps and {g["cause"] for g in gaps} == {"host_late"}
    assert {g["launch_thread"] for g in gaps} == {"python"}  # launches are on Host Threads/N
    first = [g for g in gaps if g["kernel_before"] == ""]
    assert first and all("$minigpt.py:" in g["host_events"] for g in first)


def test_steps_without_annotations_come_from_program_executions(corpus):
    _, out = corpus("rocm-no-steps")
    summary = (out / "summary.txt").read_text()
    assert "steps: from executions of jit_train_step" in summary
    steps = read(out / "steps.csv")
    assert {s["source"] for s in steps} == {"program:jit_train_step"}
    assert {s["kernels"] for s in steps} == {"256"}


REAL = {  # capture -> (GPU events, joins to a launch, joins to another host event, memcpy)
    "tracelens-amd-rocm/mi300x-jax0.8-conv3d-8gpu": (235, 231, 4, 35),
    "tracelens-amd-rocm/mi300x-jax0.8-elementwise": (75, 75, 0, 10),
    "tracelens-amd-rocm/mi300x-jax0.8-gemm": (54, 54, 0, 24),
    "tracelens-amd-rocm/mi355x-jax-te-fused-attn": (150, 150, 0, 20),
    "tf-profiler-demo-v100/tf2.4-bert-multiworker-8xv100": (1556, 1556, 0, 226),
}


@pytest.mark.parametrize("real", sorted(REAL))
def test_real_captures_join_and_report(shared, tmp_path, real):
    p = run(shared / real, tmp_path)
    assert p.returncode == 0, p.stderr
    rows = read(tmp_path / "rows.csv")
    total, launch, other, memcpy = REAL[real]
    assert len(rows) == total
    # the category table: copy kernels (ROCm) and memcpy events (CUPTI) are memcpy, no
    # collectives in these single-program captures, the rest compute
    cats = {c: sum(r["category"] == c for r in rows) for c in ("compute", "collective", "memcpy")}
    assert cats == {"compute": total - memcpy, "collective": 0, "memcpy": memcpy}
    assert sum(r["join"] == "launch" for r in rows) == launch
    assert sum(r["join"] == "other" for r in rows) == other
    summary = (tmp_path / "summary.txt").read_text()
    rate = 100.0 * launch / total
    assert f"join rate to a launch call {rate:.1f}%" in summary
    if other:
        hosts = {r["launch_name"] for r in rows if r["join"] == "other"}
        assert "hipStreamWaitEvent" in hosts


def test_conv3d_stream_wait_kernels_are_the_known_anomaly(shared, tmp_path):
    p = run(shared / "tracelens-amd-rocm/mi300x-jax0.8-conv3d-8gpu", tmp_path)
    assert p.returncode == 0, p.stderr
    rows = read(tmp_path / "rows.csv")
    odd = sorted((r["device"], r["kernel"]) for r in rows if r["correlation_id"] == "477")
    assert odd == [("0", "Im3d2Col.kd"), ("0", "input_transpose_fusion_1.kd")]
    assert {r["join"] for r in rows if r["correlation_id"] == "477"} == {"other"}


def test_cpu_capture_is_refused_not_an_error(tmp_path):
    p = run(REPO / "tests" / "data" / "minigpt-cpu", tmp_path)
    assert p.returncode == 0, p.stderr
    summary = (tmp_path / "summary.txt").read_text()
    assert summary.splitlines()[0] == "verdict: not computable"
    assert "cannot compute: no GPU events" in summary
    assert read(tmp_path / "rows.csv") == []


def _write(path, data):
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("make, words", [
    (lambda p: _write(p / "h.trace.json.gz", b"plain text, not gzip"), "not gzip"),
    (lambda p: _write(p / "h.trace.json.gz", gzip.compress(b'{"traceEvents": []}')[:-12]),
     "not a complete gzip"),
    (lambda p: _write(p / "h.trace.json", b'{"traceEvents": [{"ph": "X", '), "not valid JSON"),
    (lambda p: _write(p / "h.trace.json", json.dumps({"schemaVersion": 1, "spans": []}).encode()),
     "without a traceEvents list"),
    (lambda p: _write(p / "h.trace.json.gz", b""), "is empty"),
    (lambda p: _write(p / "h.trace.json", json.dumps({"traceEvents": [
        {"ph": "M", "pid": 7, "name": "process_name", "args": {"name": "/host:CPU"}},
        {"ph": "X", "pid": 7, "tid": 1, "name": "launch", "dur": 1}]}).encode()),
     "has a complete event without 'ts'"),
    (lambda p: _write(p / "h.xplane.pb", b"\x0a\x00"), "no <host>.trace.json.gz"),
    (lambda p: p / "missing.trace.json.gz", "does not exist"),
])
def test_bad_input_one_sentence_exit_1_no_outputs(tmp_path, make, words):
    src = tmp_path / "in"
    src.mkdir()
    out = tmp_path / "out"
    p = run(make(src), out)
    assert p.returncode == 1
    assert words in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert not out.exists() or not any(out.iterdir())


def test_writes_into_the_current_directory_by_default(tmp_path, corpus):
    r, _ = corpus("rocm-off")
    p = subprocess.run([BARE, "-I", "-S", "-P", str(SCRIPT), str(r.trace)], cwd=tmp_path,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert sorted(f.name for f in tmp_path.iterdir()) == sorted([*OUTPUTS, ".handoff"])
    assert p.stdout.splitlines()[0] == f"wrote {Path('.') / 'summary.txt'} " \
        f"({len((tmp_path / 'summary.txt').read_text().splitlines())} lines)"


def test_a_trace_cut_at_the_exporter_cap_is_said(corpus, monkeypatch):
    """The exporter keeps 1,000,000 events; tested on a small trace by moving the cap."""
    sys.path.insert(0, str(SCRIPT.parent))
    import skip_stats
    from tracekit import trace_reader
    r, _ = corpus("rocm-off")
    trace = trace_reader.load_trace(r.trace)
    monkeypatch.setattr(skip_stats, "EXPORTER_EVENT_CAP", len(trace.events))
    a, _ = skip_stats.analyse(trace)
    assert any("the trace exporter's cap" in n for n in a.notes)
    monkeypatch.setattr(skip_stats, "EXPORTER_EVENT_CAP", len(trace.events) + 1)
    a, _ = skip_stats.analyse(trace)
    assert not any("cap" in n for n in a.notes)


def test_python_lines_add_up_and_nest(tmp_path):
    """python_lines.csv on a hand-made thread: a traced call with two nested ones (one nested
    twice), and one traced call on another thread; self time is own time less the nested."""
    sys.path.insert(0, str(SCRIPT.parent))
    import skip_analysis

    def h(name, start, dur):
        return {"name": name, "start": start * 10**6, "dur": dur * 10**6, "args": {}}
    threads = {(1, 1): [h("$train.py:10 step", 0, 100), h("$api.py:5 put", 10, 30),
                        h("$api.py:7 wait", 50, 40), h("$api.py:5 put", 60, 10),
                        h("PjitFunction(step)", 0, 100)],
               (1, 2): [h("$train.py:10 step", 200, 20)]}
    rows = {r["name"]: r for r in skip_analysis.python_lines(threads)}
    assert set(rows) == {"$train.py:10 step", "$api.py:5 put", "$api.py:7 wait"}
    step, put, wait = rows["$train.py:10 step"], rows["$api.py:5 put"], rows["$api.py:7 wait"]
    assert (step["calls"], step["total_ps"], step["self_ps"]) == (2, 120e6, (100 - 30 - 40
                                                                            + 20) * 1e6)
    assert (put["calls"], put["total_ps"], put["self_ps"]) == (2, 40e6, 40e6)
    assert (wait["total_ps"], wait["self_ps"]) == (40e6, 30e6)
    assert len(step["threads"]) == 2
    assert skip_analysis.python_lines({(1, 1): [h("PjitFunction(step)", 0, 5)]}) == []
    # the profiler's own calls span the capture: left out
    assert skip_analysis.python_lines({(1, 1): [h("$profiler.py:101 start_trace", 0, 500),
                                             h("$profiler.py:213 stop_trace", 600, 5)]}) == []


def test_rows_written_by_a_forked_child_are_the_same(corpus, tmp_path, monkeypatch):
    """Above FORK_ROWS_MIN events a forked child writes rows.csv while the parent computes the
    other tables: the files are byte for byte those of the one-process path."""
    sys.path.insert(0, str(SCRIPT.parent))
    import skip_stats
    import skip_writers
    r, out = corpus("rocm-8gpu-straggler")
    monkeypatch.setattr(skip_writers, "FORK_ROWS_MIN", 0)
    monkeypatch.setenv("JAXTRACE_CORES", "2")  # a core for the child, on any machine
    result, written = skip_stats.run(r.trace, tmp_path / "forked")
    for f in OUTPUTS:
        assert (tmp_path / "forked" / f).read_bytes() == (out / f).read_bytes(), f
    assert dict(written)["rows.csv"] == len(read(out / "rows.csv"))


def test_a_failing_rows_child_fails_the_run_and_leaves_nothing(corpus, tmp_path, monkeypatch):
    sys.path.insert(0, str(SCRIPT.parent))
    import skip_stats
    import skip_writers
    r, _ = corpus("rocm-off")
    monkeypatch.setattr(skip_writers, "FORK_ROWS_MIN", 0)
    monkeypatch.setenv("JAXTRACE_CORES", "2")

    def full(path, a):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(skip_writers, "write_rows", full)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(OSError, match="No space left on device"):
        skip_stats.run(r.trace, out)
    assert list(out.iterdir()) == []  # nothing written, the temporary folder removed


def test_rocm_launch_threads_map_to_their_execution_threads(shared, tmp_path):
    """Real MI300X conv3d: launches sit on `Host Threads/<tid>` lines; gaps name the execution
    thread that held them and what it was doing, or say "unknown" for copy threads."""
    p = run(shared / "tracelens-amd-rocm/mi300x-jax0.8-conv3d-8gpu", tmp_path)
    assert p.returncode == 0, p.stderr
    gaps = read(tmp_path / "gaps.csv")
    threads = {g["launch_thread"] for g in gaps if g["device"] == "0" and g["launch_thread"]}
    assert any(t.startswith("py_xla_execute/") for t in threads)
    assert any("Build buffer allocations=" in g["host_events"] for g in gaps)
    # the argument copies (no hlo_module), launched from Host Threads/<tid> by the next call's
    # dispatch before its program runs, open that call's step: each lies inside its step's
    # window (launch at or after the step's start, before the next step's), GPU 0's step ends
    # at its program's last kernel, and its idle between steps is the host's time between calls
    rows = read(tmp_path / "rows.csv")
    steps = read(tmp_path / "steps.csv")
    starts = {int(s["step"]): float(s["start_us"]) for s in steps}
    copies = [r for r in rows if r["device"] == "0" and not r["hlo_module"] and r["step"]
              and "Memcpy" in r["launch_name"] and int(r["step"]) in starts]
    assert len(copies) >= 20
    for r in copies:
        n, launch = int(r["step"]), float(r["launch_start_us"])
        assert starts[n] <= launch and (n + 1 not in starts or launch < starts[n + 1]), r
    assert all(float(s["dur_us"]) > 0 and float(s["busy_us"]) <= float(s["dur_us"]) + 1e-3
               for s in steps)
    gpu0 = [float(s["idle_between_pct_of_period"]) for s in steps
            if s["device"] == "0" and s["idle_between_pct_of_period"]]
    assert gpu0 and max(gpu0) > 50  # was under 1%: the copies stretched the step
    streams = read(tmp_path / "streams.csv")
    assert sum(float(s["memcpy_us"]) for s in streams if s["device"] == "0") > 100


def test_v100_capture_without_steps_is_one_partial_window(shared, tmp_path):
    p = run(shared / "tf-profiler-demo-v100/tf2.4-bert-multiworker-8xv100", tmp_path)
    assert p.returncode == 0, p.stderr
    summary = (tmp_path / "summary.txt").read_text()
    assert "steps: from the whole capture; 1 analysed (step 0)" in summary
    assert "cannot compute: only partial steps" in summary
    assert "events on GPU lines that are not streams" in summary


def test_no_launch_events_is_a_refusal(tmp_path):
    doc = {"displayTimeUnit": "ns", "traceEvents": [
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "pid": 1, "tid": 5, "name": "thread_name", "args": {"name": "Stream #5"}},
        {"ph": "X", "pid": 1, "tid": 5, "ts": 10.0, "dur": 2.0, "name": "fusion_1",
         "args": {"hlo_module": "jit_f", "hlo_op": "fusion.1"}},
        {"ph": "X", "pid": 1, "tid": 5, "ts": 20.0, "dur": 2.0, "name": "fusion_2",
         "args": {"hlo_module": "jit_f", "hlo_op": "fusion.2"}}, {}]}
    src = tmp_path / "h.trace.json"
    src.write_text(json.dumps(doc))
    p = run(src, tmp_path / "out")
    assert p.returncode == 0, p.stderr
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "cannot compute: no launch events" in summary
    assert "joins: launch 0, graph_launch 0, other 0, none 0, ambiguous 0, " \
        "no_correlation_id 2" in summary


RESULT_FIELDS = {"step", "status", "verdict", "rule", "steps", "joins", "gpu_events",
                 "join_rate_pct_of_gpu_events", "figures", "host_device_split", "straggler",
                 "notes", "refusals", "needs_new_capture", "tables", "verdict_qualifier",
                 "between_steps", "capture", "python_tracer", "gpu_groups", "dispatch", "frames",
                 "device_kind", "figures_devices"}


@pytest.mark.parametrize("name", ["rocm-8gpu-straggler", "nvidia-cb-partial", "rocm-no-steps"])
def test_result_json_has_its_documented_fields_and_summary_renders_it(corpus, name):
    import json
    sys.path.insert(0, str(SCRIPT.parent))
    import skip_writers
    _, out = corpus(name)
    result = json.loads((out / "skip_stats.json").read_text())
    assert set(result) == RESULT_FIELDS
    assert result["tables"]["rows.csv"] == len(read(out / "rows.csv"))
    for f in result["figures"].values():
        assert f is None or ({"value", "min", "max", "n", "unit", "label"} == set(f) and
                             f["min"] <= f["value"] <= f["max"])
    assert (result["straggler"] is not None) == (name == "rocm-8gpu-straggler")
    # every figure in summary.txt comes from the JSON: rendering it gives the file back
    assert skip_writers.render_summary(result) == (out / "summary.txt").read_text().splitlines()
    documented = layout_text()
    assert all(f"`{k}`" in documented for k in RESULT_FIELDS | set(result["figures"]))


def test_gaps_before_graph_kernels_name_the_graph_launch_thread(corpus):
    """A gap before a graph kernel is judged by its graph's launch call: the launching thread
    and the host events in the gap are given, as for a kernel with a launch of its own."""
    _, out = corpus("nvidia-cb-partial")
    rows = {(r["device"], r["stream"], r["start_us"]): r for r in read(out / "rows.csv")}
    gaps = [g for g in read(out / "gaps.csv") if g["cause"] == "host_late"]
    after_graph = [g for g in gaps
                   if rows[(g["device"], g["stream"], g["end_us"])]["graph"] == "1"]
    assert after_graph and all(g["launch_thread"] and g["host_events"] for g in after_graph)


@pytest.mark.parametrize("name, cause", [("nvidia-between-steps-unrecorded", "mostly not recorded"),
                                         ("nvidia-between-steps-input", "input pipeline")])
def test_the_idle_between_steps_is_measured_and_named(corpus, name, cause):
    """The generator idles the GPU 400 us between one step's sync and the next step's start;
    the period, the idle and its cause come out, and the verdict says it holds within the step."""
    r, out = corpus(name)
    rows = read(out / "steps.csv")
    starts = sorted({s["start_ps"] for s in r.steps})
    for row in rows:
        n = int(row["step"])
        if n + 1 < len(starts):
            assert abs(float(row["period_us"]) * 1e6 - (starts[n + 1] - starts[n])) < 1000
            t = next(s for s in r.steps if s["step"] == n and s["device"] == int(row["device"]))
            assert abs(float(row["idle_between_us"]) * 1e6 - (starts[n + 1] - t["end_ps"])) < 1000
            assert float(row["idle_between_us"]) >= 400
            assert row["between_cause"] == cause
        else:
            assert row["period_us"] == "" and row["between_cause"] == ""
    if cause == "input pipeline":
        assert all(x["between_host_events"].startswith("IteratorGetNext=266.667 | device_put=")
                   for x in rows if x["period_us"])
    summary = (out / "summary.txt").read_text().splitlines()
    assert summary[0].startswith("verdict: launch-bound within the step; 19% of the step "
                                 "period is between steps") and summary[0].endswith(
        f"(cause: {cause})")
    import json
    res = json.loads((out / "skip_stats.json").read_text())
    assert res["verdict"] == "launch-bound" and res["between_steps"]["cause"] == cause
    assert 18 <= res["figures"]["between_share_pct_of_period"]["value"] <= 20


def test_a_changing_last_gpu_is_no_straggler():
    """GPUs 1, 3 and 0 each end one step last, well ahead: no GPU is named a straggler."""
    sys.path.insert(0, str(SCRIPT.parent))
    import skip_analysis
    import skip_writers
    us = 1_000_000
    ends = [(0, {0: 100 * us, 1: 180 * us, 3: 120 * us}), (1, {0: 100 * us, 1: 120 * us,
                                                               3: 190 * us}),
            (2, {0: 200 * us, 1: 120 * us, 3: 100 * us})]
    rows = [{"step": n, "device": d, "dur_ps": e, "collective_ps": 0}
            for n, ends_ in ends for d, e in ends_.items()]
    sg = skip_analysis.straggler(rows, {"ends": ends}, 1e-6)
    assert sg["is_straggler"] is False and sg["ties"] == 0
    assert sg["last_counts"] == {"0": 1, "1": 1, "3": 1}
    result = {"verdict": "mixed", "rule": [], "steps": {"source": "x", "analysed": [0, 1, 2],
              "skipped_partial": [], "partial_analysed": []},
              "joins": dict.fromkeys(skip_analysis.JOIN_KEYS, 0) | {
                  "shared_ids_without_graph_launch": 0},
              "gpu_events": 9, "join_rate_pct_of_gpu_events": 0.0, "figures": {}, "straggler": sg,
              "notes": [], "refusals": [], "needs_new_capture": []}
    line = next(x for x in skip_writers.render_summary(result) if "straggler" in x)
    assert line.startswith("no straggler: the last GPU changes from step to step (last: "
                           "GPU 0 in 1, GPU 1 in 1, GPU 3 in 1 of 3 steps")
    # the same GPU last in every step by 80 us: a straggler
    ends = [(n, {0: 100 * us, 1: 180 * us}) for n in range(3)]
    rows = [{"step": n, "device": d, "dur_ps": e, "collective_ps": 0}
            for n, e_ in ends for d, e in e_.items()]
    sg = skip_analysis.straggler(rows, {"ends": ends}, 1e-6)
    assert sg["is_straggler"] and sg["gpu"] == 1 and sg["lead_us"]["value"] == 80
    # by 2 us only (under the 5 us margin): ties, no straggler
    ends = [(n, {0: 100 * us, 1: 102 * us}) for n in range(3)]
    rows = [{"step": n, "device": d, "dur_ps": e, "collective_ps": 0}
            for n, e_ in ends for d, e in e_.items()]
    sg = skip_analysis.straggler(rows, {"ends": ends}, 1e-6)
    assert not sg["is_straggler"] and sg["ties"] == 3


# ---------------------------------------------------------------- steps as the programs run them

def _exec(module, start_us, end_us, thread=("h", 1)):
    return {"name": f"{module}:XLA GPU module", "start": start_us * 1_000_000,
            "dur": (end_us - start_us) * 1_000_000, "thread": thread, "args": {}}


def test_the_cycle_of_programs_is_found_with_a_prefix_extras_and_a_cut_last_cycle():
    import step_framing
    # a warm-up call, then 10 whole cycles of (a, b, b, c) with a long pause before `a`, a
    # metrics program inside the second cycle, and a cycle the capture cut after `a, b`
    seq = ["warm"] + ["a", "b", "b", "c"] + ["a", "b", "b", "c", "metrics"] + \
        ["a", "b", "b", "c"] * 8 + ["a", "b"]
    t, events = 0, []
    for m in seq:
        t += 200 if m == "a" else 20
        events.append(_exec(m, t, t + 10))
        t += 10
    execs = step_framing.program_executions({("h", 1): events})
    assert [x.module for x in execs] == seq
    assert step_framing.find_cycle([x.module for x in execs])[0] == 4
    notes = []
    steps, source = step_framing.cycle_steps(execs, t + 100, notes)
    assert [[x.module for x in s.executions] for s in steps] == [
        ["warm"], ["a", "b", "b", "c"], ["a", "b", "b", "c", "metrics"]] + \
        [["a", "b", "b", "c"]] * 8 + [["a", "b"]]
    assert [s.partial for s in steps] == [True] + [False] * 10 + [True]
    assert [s.extra for s in steps] == [0, 0, 1] + [0] * 9
    assert source.startswith("the repeating cycle of 4 program executions (a, b x2, c)")
    # each step ends where the next begins; the first whole cycle starts at its `a`
    assert all(s.end == n.start for s, n in zip(steps, steps[1:], strict=False))
    assert steps[1].start == execs[1].start
    assert "longest host pause" in notes[0]
    assert "44 executions, 4 outside the whole cycles" in notes[0]


def test_a_sequence_that_does_not_repeat_is_one_window():
    import step_framing
    events = [_exec(m, 10 * i, 10 * i + 5) for i, m in enumerate("abcdefgh")]
    execs = step_framing.program_executions({("h", 1): events})
    assert step_framing.find_cycle([x.module for x in execs]) is None
    assert step_framing.cycle_steps(execs, 1000, []) is None


def test_one_dispatch_on_several_gpu_threads_is_one_execution():
    import step_framing
    # the first call of a multi-GPU program runs one GPU after the other; later ones at once
    threads = [("h", k) for k in range(4)]
    evs = {th: [] for th in threads}
    for k, th in enumerate(threads):
        evs[th].append(_exec("p", 100 * k, 100 * k + 50, th))
        evs[th].append(_exec("p", 1000 + k, 1040 + k, th))
        evs[th].append(_exec("p", 2000 + k, 2040 + k, th))
    execs = step_framing.program_executions(evs)
    assert [len(x.threads) for x in execs] == [4, 4, 4]


@pytest.mark.parametrize("real, period, programs", [
    ("tracelens-amd-rocm/mi300x-jax0.8-gemm", 7,
     "jit_convert_element_type x2, jit_broadcast_in_dim x2, jit_dot x3"),
    # each call of elementwise_ops (the Python tracer's loop body) runs one whole cycle: a step
    # starts where it starts, not at the longest pause (before jit_relu's custom-JVP call)
    ("tracelens-amd-rocm/mi300x-jax0.8-elementwise", 11,
     "jit_add x2, jit_sin, jit_cos, jit_multiply, jit_relu, jit__mean, jit__std, jit_subtract, "
     "jit_true_divide, jit__reduce_sum"),
])
def test_real_eager_loops_are_framed_by_their_cycle(shared, tmp_path, real, period, programs):
    """The gemm and elementwise captures call small jitted programs one after another in a
    loop: a step is one turn of the loop, not one execution of the largest program."""
    p = run(shared / real, tmp_path)
    assert p.returncode == 0, p.stderr
    result = json.loads((tmp_path / "skip_stats.json").read_text())
    assert result["steps"]["source"].startswith(
        f"the repeating cycle of {period} program executions ({programs})")
    rows = read(tmp_path / "steps.csv")
    assert rows and {r["executions"] for r in rows} == {str(period)}
    assert {r["source"] for r in rows} == {f"cycle of {period} executions"}
    # every analysed step holds the whole cycle: its programs and their executions
    first = [m.split(" x")[0] for m in rows[0]["programs"].split("; ")]
    assert sorted(set(first)) == sorted({m.split(" x")[0] for m in programs.split(", ")})
    assert all(float(r["between_programs_idle_us"]) > 0 for r in rows)
    assert result["figures"]["executions_per_step"]["value"] == period
    # the Python function whose body the loop runs: the one to jit whole
    assert result["dispatch"]["enclosing_call"] == {
        7: "$generate_gemm_trace.py:31 run_gemms",
        11: "$generate_elementwise_trace.py:20 elementwise_ops"}[period]
    if period == 11:
        assert result["steps"]["analysed"] == [0, 1, 2, 3, 4]


def test_gpu_groups_compare_only_gpus_that_run_the_same_programs():
    import gpu_events
    import skip_analysis

    def ev(device, module, cat="compute", dur=10):
        e = gpu_events.TraceEvent(device, 1, "k", 0, dur * 1_000_000, cat, module=module or "")
        e.step = 0
        return e
    by = {(0, 0): [ev(0, None, "memcpy", 1) for _ in range(5)],
          (1, 0): [ev(1, "jit_a"), ev(1, "jit_b")],
          (2, 0): [ev(2, "jit_a"), ev(2, "jit_b")],
          (3, 0): [ev(3, "jit_c", dur=50)]}
    groups = skip_analysis.gpu_groups({k: skip_analysis.gpu_step_pass(evs, 0)["work"]
                                       for k, evs in by.items()})
    assert [(g["devices"], g["kind"]) for g in groups] == [
        ([3], "programs"), ([1, 2], "programs"), ([0], "argument copies only")]
    assert skip_analysis.group_sentence(groups[2], 1) == (
        "GPU 0 holds argument copies only: 5 events, 5.0 us per GPU and step (5 argument "
        "copies in all)")


def test_a_repeated_python_call_frames_steps_where_the_programs_do_not_repeat():
    """A loop body whose programs change from turn to turn (a data-dependent number of calls):
    no cycle, but the Python tracer's outermost repeated call with executions inside is a step."""
    import step_framing

    def call(name, s, e):
        return {"name": name, "start": s * 1_000_000, "dur": (e - s) * 1_000_000,
                "thread": ("h", 1), "args": {}}
    events, t = [call("$train.py:5 main", 0, 10_000)], 10
    progs = iter("abcdefghijklmnopqrstuvwxyz")
    for turn in range(4):
        body = call("$train.py:20 train_iteration", t, t + 900)
        events.append(body)
        for k in range(2 + turn):  # 2, 3, 4, 5 programs: never the same sequence
            m = next(progs)
            events.append(call("$model.py:7 layer", t + 10 + 100 * k, t + 90 + 100 * k))
            events.append(_exec(m, t + 20 + 100 * k, t + 60 + 100 * k))
        t += 1000
    host = {("h", 1): events}
    execs = step_framing.program_executions(host)
    assert step_framing.cycle_steps(execs, t, []) is None
    notes = []
    steps, source = step_framing.python_call_steps(host, execs, t, notes)
    assert source == ("calls of $train.py:20 train_iteration (the Python tracer's outermost "
                      "repeated call)")
    assert [len(s.executions) for s in steps] == [2, 3, 4, 5]
    assert [s.start for s in steps] == [(10 + 1000 * k) * 1_000_000 for k in range(4)]


def test_the_cycle_search_is_bounded_on_a_long_sequence_that_never_repeats():
    """A long run of programs in no order has no cycle: found as such, and an exact cycle whose
    first turn is cut (the capture started inside it) is still found, at its length."""
    import random

    import step_framing
    rng = random.Random(7)
    names = [f"jit_{rng.randrange(50)}" for _ in range(50_000)]
    assert step_framing.find_cycle(names) is None
    turn = [f"jit_op{i % 7}" for i in range(25)]
    seq = turn[11:] + turn * 300 + ["jit_metrics"] + turn * 100
    p, pattern = step_framing.find_cycle(seq)
    assert p == 25 and sorted(pattern) == sorted(turn)


@pytest.mark.parametrize("seq, period", [
    (list("cbcbddd" * 5 + "cbcbdd"), 7),   # the capture stopped inside the last turn
    (list("cbcbddd" * 5 + "cbcb"), 7),
    (list("abc" * 3 + "ab"), 3),
    (list("c" + "abc" * 3 + "ab"), 3),      # and started inside the first
])
def test_a_cycle_cut_at_either_end_is_still_the_cycle(seq, period):
    import step_framing
    assert step_framing.find_cycle(seq)[0] == period


def _timed(seq, pause_before):
    t, events = 0, []
    for i, m in enumerate(seq):
        t += 300 if pause_before(i, m) else 20
        events.append(_exec(m, t, t + 10))
        t += 10
    return {("h", 1): events}, t * 1_000_000


def test_a_program_repeated_inside_the_step_is_not_the_step():
    """28 executions of one layer program, then a head and an update, per step, the host
    pausing at the step's sync: the step is the 30 executions, not one layer with extras; a
    train program with a metrics program every tenth step, the host pausing before every train
    step: the step is one train execution, the metrics an extra in it."""
    import step_framing
    host, end = _timed((["layer"] * 28 + ["head", "update"]) * 4, lambda i, m: i % 30 == 0)
    steps, source = step_framing.cycle_steps(step_framing.program_executions(host), end, [], host)
    assert source.startswith("the repeating cycle of 30 program executions (layer x28, head, ")
    assert len(steps) == 4 and not any(s.partial for s in steps)
    host, end = _timed((["train"] * 10 + ["metrics"]) * 30, lambda i, m: m == "train")
    steps, source = step_framing.cycle_steps(step_framing.program_executions(host), end, [], host)
    assert source.startswith("executions of train")
    assert len(steps) == 300 and sum(s.extra for s in steps) == 30


def test_every_python_call_is_a_whole_step_however_many_programs_it_runs():
    import gpu_events
    import step_framing

    def call(name, s, e):
        return {"name": name, "start": s * 1_000_000, "dur": (e - s) * 1_000_000,
                "thread": ("h", 1), "args": {}}
    events, t, gpu = [], 10, []
    progs = iter("abcdefghijklmnopqrstuvwxyz")
    for k in (1, 2, 3, 1, 4):
        events.append(call("$train.py:20 train_iteration", t, t + 900))
        for j in range(k):
            events.append(_exec(next(progs), t + 20 + 100 * j, t + 60 + 100 * j))
            ev = gpu_events.TraceEvent(0, 7, "k", (t + 70 + 100 * j) * 1_000_000, 10_000_000)
            gpu.append(ev)
        t += 1000
    host = {("h", 1): events}
    steps, _, _ = step_framing.find_steps(gpu, host, t * 1_000_000)
    step_framing.assign_steps(gpu, steps)
    assert [len(s.executions) for s in step_framing.mark_partial(gpu, steps)] == [1, 2, 3, 1, 4]


def test_a_python_loop_of_jitted_layer_calls_is_one_step_per_call_of_the_loop():
    """A Python function calling one jitted layer 6 times, called 5 times with a block after
    each (the probe python_loop_layers: 48 layers, 16 calls, jitting the whole stack measured
    9.24x): a step is one call of the function, 6 executions, not each execution; where a
    traced call holds each execution alone (the user's own step function), or the host waits on
    a result between them (a loop of train steps each reading its loss: an epoch function), the
    execution stays the step, however many of them an outer call holds."""
    import step_framing

    def call(name, s, e):
        return {"name": name, "start": s * 1_000_000, "dur": (e - s) * 1_000_000,
                "thread": ("h", 1), "args": {}}

    def loop(per_call: bool, sync: bool = False):
        events, t = [], 10
        for _ in range(5):
            events.append(call("$model.py:12 stack", t, t + 700))
            for j in range(6):
                events.append(_exec("layer", t + 20 + 100 * j, t + 60 + 100 * j))
                if per_call:
                    events.append(call("$model.py:5 layer_step", t + 15 + 100 * j,
                                       t + 65 + 100 * j))
                if sync:  # each execution's result read before the next: each is a step
                    events.append(call("$array.py:300 __float__", t + 62 + 100 * j,
                                       t + 90 + 100 * j))
            t += 1000
        return {("h", 1): events}, t * 1_000_000

    host, end = loop(False)
    notes = []
    steps, source = step_framing.cycle_steps(step_framing.program_executions(host), end, notes,
                                             host)
    assert [len(st.executions) for st in steps] == [6] * 5
    assert source.startswith("the repeating cycle of 6 program executions (layer x6)")
    assert "a step is one call of $model.py:12 stack: each of its 5 calls runs 6 turns" in \
        notes[0]
    for per_call, sync in ((True, False), (False, True)):
        host, end = loop(per_call, sync)
        steps, source = step_framing.cycle_steps(step_framing.program_executions(host), end,
                                                 [], host)
        assert len(steps) == 30 and source.startswith("executions of layer")


@pytest.mark.parametrize("cut", [1, 3, 5])
def test_a_real_capture_stopped_early_keeps_its_cycle(shared, tmp_path, cut):
    """The MI300X gemm capture with its last executions (and everything after the cut) removed,
    as a profile stopped early: the same cycle of 7, the cut turn a partial step, the whole
    turns unchanged (a perturbation costs the steps it touches, never a cascade)."""
    (src,) = (shared / "tracelens-amd-rocm" / "mi300x-jax0.8-gemm").glob("**/*.trace.json.gz")
    doc = json.loads(gzip.decompress(src.read_bytes()))
    starts = sorted(e["ts"] for e in doc["traceEvents"] if e.get("ph") == "X" and
                    str(e.get("name", "")).endswith(":XLA GPU module"))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("ph") != "X" or
                          e["ts"] + e.get("dur", 0) < starts[-cut]]
    cap = tmp_path / "cap" / src.name
    cap.parent.mkdir()
    cap.write_bytes(gzip.compress(json.dumps(doc).encode()))
    whole, short = tmp_path / "whole", tmp_path / "short"
    assert run(src, whole).returncode == 0
    assert run(cap, short).returncode == 0
    a = json.loads((whole / "skip_stats.json").read_text())
    b = json.loads((short / "skip_stats.json").read_text())
    assert b["steps"]["source"] == a["steps"]["source"]
    rows_a = {r["step"]: r for r in read(whole / "steps.csv")}
    rows_b = {r["step"]: r for r in read(short / "steps.csv")}
    assert set(rows_b) == set(rows_a) - {max(rows_a, key=int)}
    assert all(rows_b[n]["dur_us"] == rows_a[n]["dur_us"] for n in rows_b)


def test_two_unlike_values_are_said_as_both_not_as_a_median():
    """A figure of two values (two step periods, 3,615.5 and 23,948.6 us) has no median worth
    the name: the summary and the draft say both values, never their mean as a median."""
    import skip_analysis
    import skip_writers
    from jaxperf.analyses import report_draft
    f = skip_analysis.spread([3615.5, 23948.6], "us", "measured")
    assert f["n"] == 2 and f["value"] == (3615.5 + 23948.6) / 2
    text = skip_writers._rng(f, lambda v: f"{v:,.1f}")
    assert text == "3,615.5 and 23,948.6 (two values)" and "13,782" not in text

    class One:
        def json(self, _):
            return {"figures": {"period_us": f}}
    drafted = report_draft.fig(One(), "skip_stats.json", "period_us")
    assert drafted.startswith("3,615.5 us (measured; skip_stats.json: figures.period_us.min) and")
    assert "13,782" not in drafted
    three = skip_analysis.spread([1.0, 2.0, 9.0], "us", "measured")
    assert skip_writers._rng(three, str) == "2.0 (1.0-9.0)"


def test_the_cause_between_steps_is_weighed_by_time_not_presence():
    """One short prefetch call beside a long block_until_ready is not an input-pipeline wait:
    the host is blocked on a result; a data loader that fills the idle is the input pipeline;
    other work, or host events covering little of the idle, say so."""
    import gap_causes as gc
    idle = 45_000
    block = [("$api.py:3154 block_until_ready", 43_500), ("prefetch_to_device", 390)]
    assert gc.between_cause(block, 44_000, idle) == "waiting on a result"
    loader = [("DataLoader.__next__", 30_000), ("$train.py:40 main", 44_000)]
    assert gc.between_cause(loader, 44_000, idle) == "input pipeline"
    other = [("$train.py:88 log_metrics", 20_000), ("device_put", 900)]
    assert gc.between_cause(other, 44_000, idle) == "host work between steps"
    assert gc.between_cause(block, 1_000, idle) == "mostly not recorded"
    assert gc.between_cause([], 0, idle) == "not recorded"


@pytest.mark.parametrize("name", ["rocm-8gpu-straggler", "rocm-off", "nvidia-launch-bound"])
def test_launch_threads_map_the_same_read_up_to_the_last_sampled_launch(corpus, name):
    """launch_threads_to_exec reads a host thread in start order only up to the last launch it
    samples: the map is the one every event gives, and the same where every thread is out of
    order (read whole); collect says which threads are out of order."""
    sys.path.insert(0, str(SCRIPT.parent))
    import gpu_events
    import skip_stats
    from tracekit import trace_reader
    r, _ = corpus(name)
    trace = trace_reader.load_trace(r.trace)
    c = gpu_events.collect(trace)
    assert not c.unordered  # XLA's exporter writes each line in start order
    _, sample = gpu_events.join_events(c.gpu, c.by_corr)
    mapped = gpu_events.launch_threads_to_exec(sample, c.host_threads, c.unordered)
    assert mapped and mapped == skip_stats.analyse(trace_reader.load_trace(r.trace))[0].exec_of
    # a launch sampled at the end of time (of a name no event has) makes every event read
    whole = {**sample, ("none",): [({"start": 1 << 62, "thread": ("none",)}, "\0")]}
    assert gpu_events.launch_threads_to_exec(whole, c.host_threads) == mapped
    everything = set(c.host_threads)
    assert gpu_events.launch_threads_to_exec(sample, c.host_threads, everything) == mapped
    backwards = {k: evs[::-1] for k, evs in c.host_threads.items()}
    assert gpu_events.launch_threads_to_exec(sample, backwards, everything) == mapped
    # a thread read out of order is said, and then read whole: its map is the same
    events = trace_reader.load_trace(r.trace)
    key = next(k for k, evs in c.host_threads.items() if len(evs) > 1)
    mine = [i for i, ev in enumerate(events.events) if (ev["pid"], ev["tid"]) == key]
    events.events[mine[0]], events.events[mine[-1]] = \
        events.events[mine[-1]], events.events[mine[0]]
    c2 = gpu_events.collect(events)
    assert c2.unordered == {key}
    _, sample2 = gpu_events.join_events(c2.gpu, c2.by_corr)
    assert gpu_events.launch_threads_to_exec(sample2, c2.host_threads, c2.unordered) == mapped


def test_a_process_with_one_core_writes_its_long_table_itself(monkeypatch):
    """Forked forks only where the process may use two cores or more: its share where the job
    (or the per-host pass) that started it said it (JAXTRACE_CORES), else the cores it may run
    on; a share that is not a positive integer is not one."""
    import os
    sys.path.insert(0, str(SCRIPT.parent))
    from tracekit import forked
    monkeypatch.setenv("JAXTRACE_CORES", "1")
    f = forked.Forked(os.getpid)
    assert f.pid is None and f.wait() == os.getpid()
    monkeypatch.setenv("JAXTRACE_CORES", "2")
    f = forked.Forked(os.getpid)
    assert f.pid is not None and f.wait() != os.getpid()
    for bad in ("0", "-2", "two", "", " 2", "\uff12"):
        monkeypatch.setenv("JAXTRACE_CORES", bad)
        assert forked.cores() == len(os.sched_getaffinity(0))


def _trading(first, fail=None):
    """A generator for Exchange: yields first, then twice each answer, three times; returns the
    sum of what it was told and the process it ran in; raises `fail` on its second answer."""
    import os
    told = [(yield first)]
    for _ in range(2):
        if fail is not None and len(told) == 2:
            raise fail
        told.append((yield 2 * told[-1]))
    return sum(told), os.getpid()


def test_an_exchange_trades_values_with_its_child(monkeypatch):
    """Exchange runs a generator in a forked child (or here, with one core or `here`): what it
    yields is got here, what is put here is the value of its yield, its return is the last get.
    A StepError of the child's is raised here as it was; another exception is an OSError with
    its words; a child that dies is one sentence; abort stops it."""
    import os
    import signal
    sys.path.insert(0, str(SCRIPT.parent))
    from tracekit import forked
    from tracekit.base import StepError
    for cores, here in (("1", False), ("2", True), ("2", False)):
        monkeypatch.setenv("JAXTRACE_CORES", cores)
        ex = forked.Exchange(_trading, 5, here=here)
        got = [ex.get()]
        for answer in (10, 7, 1):
            ex.put(answer)
            got.append(ex.get())
        total, pid = got.pop()
        assert got == [5, 20, 14] and total == 18
        assert (pid == os.getpid()) == (cores == "1" or here)
    monkeypatch.setenv("JAXTRACE_CORES", "2")
    for fail, raised, words in ((StepError("the file is cut"), StepError, "the file is cut"),
                                (KeyError("plan"), OSError, "KeyError: 'plan'")):
        ex = forked.Exchange(_trading, 1, fail)
        ex.get()
        ex.put(3)
        ex.get()
        ex.put(4)
        with pytest.raises(raised, match=words) as info:
            ex.get()
        assert type(info.value) is raised and ex.pid is None
    ex = forked.Exchange(_trading, 1)
    ex.get()
    os.kill(ex.pid, signal.SIGKILL)
    ex.put(3)
    with pytest.raises(OSError, match="ended without its result"):
        ex.get()
    ex = forked.Exchange(_trading, 1)
    pid = ex.pid
    ex.abort()
    assert ex.pid is None
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, 0)


class _Stopped(Exception):
    pass


def _marking(path):
    """A generator for Exchange that leaves a mark as soon as it runs."""
    path.write_text("ran")
    yield 1


def test_a_stop_as_an_exchange_forks_leaves_no_work_behind(tmp_path, monkeypatch):
    """A SIGTERM that comes as Exchange forks, before the child is the Exchange's to stop: the
    child never starts its work (it waits for the Exchange's word) and ends once the stop has
    closed the pipes, so nothing writes into a folder the step is letting go; one that comes
    after is stopped and reaped by the Exchange."""
    import os
    import signal
    import threading
    import time
    sys.path.insert(0, str(SCRIPT.parent))
    from tracekit import forked
    monkeypatch.setenv("JAXTRACE_CORES", "2")
    real_fork, children = os.fork, []

    def fork_then_stopped():  # the stop comes right after the fork, in the parent
        pid = real_fork()
        if pid:  # to this thread: a stop sent to the process may reach another of its threads
            children.append(pid)  # (a test worker's), whose handler can run after the start
            signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)
        return pid

    def stop(signum, frame):
        raise _Stopped()
    was = signal.signal(signal.SIGTERM, stop)
    try:
        monkeypatch.setattr(forked.os, "fork", fork_then_stopped)
        with pytest.raises(_Stopped):
            forked.Exchange(_marking, tmp_path / "mark")
    finally:
        signal.signal(signal.SIGTERM, was)
        monkeypatch.undo()
    deadline = time.monotonic() + 10

    def running(pid) -> bool:  # False once ended (reaped here, or already by the Exchange)
        try:
            return os.waitpid(pid, os.WNOHANG) == (0, 0)
        except ChildProcessError:
            return False
    while running(children[0]) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert time.monotonic() < deadline, "the child did not end"
    assert not (tmp_path / "mark").exists()
    monkeypatch.setenv("JAXTRACE_CORES", "2")
    ex = forked.Exchange(_marking, tmp_path / "mark")  # adopted: it runs, and abort reaps it
    assert ex.get() == 1 and (tmp_path / "mark").exists()
    pid = ex.pid
    ex.abort()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def test_a_job_tells_each_step_its_share_of_the_cores(monkeypatch):
    """The job's steps (and the per-host pass's hosts) are started with their share of the
    cores: those of the job (its own share, where it was told one) over the steps run at
    once, at least one; a process started alone inherits what its starter was told."""
    sys.path.insert(0, str(REPO / "scripts"))
    from jaxperf.job import job_runner
    code = "import os; print(os.environ.get('JAXTRACE_CORES'))"
    monkeypatch.setenv("JAXTRACE_CORES", "5")
    for at_once, share in ((1, "5"), (2, "2"), (3, "1"), (8, "1"), (None, "5")):
        p = job_runner.run_relaying([sys.executable, "-c", code], at_once=at_once)
        assert p.stdout.strip() == share, at_once


def test_a_job_tells_the_steps_it_starts_together_their_share(tmp_path, monkeypatch):
    """run_job tells each step its share among the steps running once it has started: two
    started together on four cores get two each; one started alone gets all four."""
    import types
    sys.path.insert(0, str(REPO / "scripts"))
    from jaxperf.job import job_runner
    script = tmp_path / "record.py"
    script.write_text("import os, sys\n"
                      "out = sys.argv[sys.argv.index('--out') + 1]\n"
                      "name = os.path.basename(sys.argv[0])\n"
                      "open(os.path.join(out, name + '.cores'), 'w').write("
                      "os.environ.get('JAXTRACE_CORES', ''))\n", encoding="utf-8")
    steps = []
    for name, after in (("a", ()), ("b", ()), ("c", ("a", "b"))):
        path = tmp_path / f"{name}.py"
        path.write_text(script.read_text(), encoding="utf-8")
        steps.append(job_runner.JobStep(name, path, f"step {name}", "recording",
                                        reads_capture=False, after=after))
    monkeypatch.setenv("JAXTRACE_CORES", "4")
    out = tmp_path / "out"
    out.mkdir()
    codes = job_runner.run_job(steps, types.SimpleNamespace(step_limit=60, files=None), out,
                               {}, 0.0, 2)
    assert codes == {"a": 0, "b": 0, "c": 0}
    assert {n: (out / f"{n}.py.cores").read_text() for n in "abc"} == \
        {"a": "2", "b": "2", "c": "4"}


def test_a_share_at_its_threshold_is_said_to_be_borderline():
    import skip_analysis as sa

    name, fired = sa.weigh(h=0.099, b=0.88, c=0.0, u=0.0, gpus=1)
    assert name == "device-bound"
    (said,) = [f for f in fired if "borderline" in f]
    assert "host-late share 9.9%" in said and "HOST_SHARE_NEGLIGIBLE 10%" in said
    _, fired = sa.weigh(h=0.05, b=0.88, c=0.0, u=0.0, gpus=1)
    assert not [f for f in fired if "borderline" in f]
    _, fired = sa.weigh(h=0.02, b=0.40, c=0.255, u=0.0, gpus=8)
    assert [f for f in fired if "borderline" in f and "COLLECTIVE_BOUND_SHARE" in f]
    _, fired = sa.weigh(h=0.02, b=0.40, c=0.255, u=0.0, gpus=1)  # one GPU: no collective rule
    assert not [f for f in fired if "borderline" in f]


def test_a_trace_read_and_collected_by_two_processes_gives_the_same_tables(corpus, tmp_path,
                                                                           monkeypatch):
    """From trace_reader.SPLIT_MIN bytes of text, the trace's second half is parsed, checked
    and collected (gpu_events.collect_part, the reader's digest) by a forked child: every table
    is the one a single process writes."""
    r, out = corpus("rocm-8gpu-straggler")
    sys.path.insert(0, str(SCRIPT.parent))
    import skip_stats
    from tracekit import trace_reader
    monkeypatch.setattr(trace_reader, "SPLIT_MIN", 0)
    monkeypatch.setattr(trace_reader, "PARSE_PIECE", 1 << 14)  # the half falls among events
    handed = []
    digested = trace_reader._Tail.digested
    monkeypatch.setattr(trace_reader._Tail, "digested",
                        lambda self: handed.append(digested(self)) or handed[-1])
    skip_stats.run(next(r.run_dir.glob("*.trace.json.gz")), tmp_path / "two")
    assert handed and handed[0][0]  # the child collected GPU events
    for f in OUTPUTS:
        assert (tmp_path / "two" / f).read_bytes() == (out / f).read_bytes(), f


def test_figures_are_medians_over_the_gpus_that_run_the_step():
    """GPUs doing other work (one running the step's program, one holding argument copies
    only): the figures are medians over the GPU that runs the step, never across the two."""
    import skip_analysis
    rows = [{"device": d, "step": s, "dur_ps": (2_000_000 if d == 7 else 500_000) + s}
            for s in range(3) for d in (0, 7)]
    info = {"groups": [{"devices": [7]}, {"devices": [0]}], "main_group": [7]}
    assert {r["device"] for r in skip_analysis.weighed_rows(rows, info)} == {7}
    assert skip_analysis.weighed_rows(rows, {"groups": [{"devices": [0, 7]}],
                                             "main_group": [0, 7]}) == rows
