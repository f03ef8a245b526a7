"""The committed MiniGPT CPU capture (tests/data/minigpt-cpu/, made by
tests/fixtures/capture_cpu.py with jax 0.10.2): its key facts, exactly.

XLA:CPU thunk events on `/host:CPU` carry `hlo_op` and `program_id`, so this capture is real ground
truth for the instruction -> Python line side: the lines must be real lines of minigpt.py, inside
the functions the frames name."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

from jaxperf.program.hlo_program import Program
from jaxperf.read import xplane_reader
from tracekit import trace_reader

RUN = Path(__file__).parent / "data" / "minigpt-cpu" / "plugins" / "profile" / \
    "2026_01_01_00_00_00"
MODEL = Path(__file__).parent / "fixtures" / "minigpt.py"
TRAIN_STEP = 52

# (line, function) of each thunk event's user frame in minigpt.py -> events, over the 3 steps
EXPECTED_LINES = {
    (46, "layer_norm"): 36, (47, "layer_norm"): 30, (48, "layer_norm"): 63,
    (53, "attention"): 18, (54, "attention"): 18, (55, "attention"): 6, (57, "attention"): 6,
    (58, "attention"): 24, (60, "attention"): 12, (61, "attention"): 42, (62, "attention"): 30,
    (63, "attention"): 18, (67, "mlp"): 60, (72, "block"): 6, (75, "block"): 6,
    (82, "forward"): 12, (84, "forward"): 357, (87, "forward"): 6, (93, "loss_fn"): 24,
    (94, "loss_fn"): 15, (95, "loss_fn"): 3, (101, "train_step.<locals>.<lambda>"): 39,
}


@pytest.fixture(scope="module")
def space():
    return xplane_reader.load_space(RUN / "minigpt-cpu.xplane.pb")


@pytest.fixture(scope="module")
def program(space):
    name, blob = space.hlo_protos()[TRAIN_STEP]
    assert name == "jit_train_step(52)"
    return Program(xplane_reader.parse_hlo(blob), TRAIN_STEP)


def _host_events(space):
    return [e for ln in space.plane("/host:CPU").lines for e in ln.events()]


def test_programs_and_while_loops(space, program):
    protos = space.hlo_protos()
    assert len(protos) == 27
    assert Counter(n.split("(")[0] for n, _ in protos.values())["jit__normal"] == 7
    loops = sorted((i.name, Program.trip_count(i)) for i in program.instructions.values()
                   if i.opcode == "while")
    assert loops == [("while.3", 2), ("while.45", 2)]  # forward and backward scans, 2 layers
    assert len(program.instructions) == 2078
    assert not space.gpu_planes()


def test_steps_and_thunk_events(space, program):
    events = _host_events(space)
    steps = sorted((e.stats["step_num"], e) for e in events if "step_num" in e.stats)
    assert [(n, e.name) for n, e in steps] == [(0, "train"), (1, "train"), (2, "train")]
    thunks = [e for e in events if "hlo_op" in e.stats]
    assert Counter(e.stats["program_id"] for e in thunks) == {TRAIN_STEP: 978}
    assert all(e.stats["hlo_module"] == "jit_train_step" for e in thunks)
    assert all(e.stats["hlo_op"] in program.by_name for e in thunks)
    per_step = [sum(1 for e in thunks if s.start_ps <= e.start_ps < s.end_ps) for _, s in steps]
    assert per_step == [326, 326, 326]


def _functions_by_line(path):
    """line -> qualified name of the innermost function containing it, from the source itself."""
    tree = ast.parse(path.read_text())
    spans = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.Lambda)):
                name = child.name if isinstance(child, ast.FunctionDef) else "<lambda>"
                qual = f"{prefix}{name}"
                spans.append((child.lineno, child.end_lineno, qual))
                visit(child, qual + ".<locals>.")
            else:
                visit(child, prefix)
    visit(tree, "")
    out = {}
    for start, end, qual in sorted(spans, key=lambda s: s[1] - s[0], reverse=True):
        for line in range(start, end + 1):
            out[line] = qual  # narrower spans overwrite wider ones
    return out


def test_source_lines_are_real_lines_of_the_model(space, program):
    functions = _functions_by_line(MODEL)
    lines = Counter()
    no_source = Counter()
    for e in _host_events(space):
        if "hlo_op" not in e.stats:
            continue
        ins = program.by_name[e.stats["hlo_op"]]
        frame = program.user_frame(ins)
        if frame is None:
            no_source[ins.opcode] += 1
            continue
        assert frame.file.endswith("tests/fixtures/minigpt.py")
        assert functions[frame.line] == frame.function
        lines[(frame.line, frame.function)] += 1
    assert dict(lines) == EXPECTED_LINES
    assert no_source == {"copy": 111, "fusion": 36}


def test_trace_json_matches_the_xplane_host_side(space):
    trace = trace_reader.load_trace(RUN / "minigpt-cpu.trace.json.gz")
    (pid,) = trace.host_pids()
    from_trace = Counter((e["name"], trace_reader.ps(e["ts"]), trace_reader.ps(e["dur"]))
                         for e in trace.events if e["pid"] == pid and "hlo_op" in e.get("args", {}))
    from_xplane = Counter((e.name, e.start_ps, e.duration_ps) for e in _host_events(space)
                          if "hlo_op" in e.stats)
    assert from_trace == from_xplane and sum(from_trace.values()) == 978
    assert trace.gpu_pids() == {}


def test_capture_info_on_the_cpu_capture(tmp_path):
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-P", str(Path(__file__).parent.parent / "scripts" /
                                                  "capture_info.py"), str(RUN)],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "GPUs: none in this capture" in r.stdout
    assert "CPU: 978 XLA:CPU thunk events carry hlo_op on /host:CPU" in r.stdout
    assert ("  jit_train_step(52): module jit_train_step, 206 computations, 2078 instructions, "
            "while loops with trip counts [2, 2]") in r.stdout
