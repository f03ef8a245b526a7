"""Progress: a long step says on stderr what it is doing, with counts (step_cli.progress), and
investigate.py relays those lines while the step runs. The interval is set to 0 here
(JAXTRACE_PROGRESS_EVERY) so that a small capture says every phase; no time is asserted."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from capgen.generate import generate
from capgen.scenarios import SCENARIOS

REPO = Path(__file__).resolve().parent.parent
SKIP_STATS = REPO / "analyzing-jax-launch-overhead" / "scripts" / "skip_stats.py"
INVESTIGATE = REPO / "scripts" / "investigate.py"
LINE_RE = re.compile(r"^(?P<step>\w+): … (?P<what>[^:(]+)(?:: (?P<count>[\d,]+)"
                     r"(?: of (?P<total>[\d,]+))?(?: [\w ']+)?)? \(\d+\.\d s\)$")


@pytest.fixture(scope="module")
def gen_capture(tmp_path_factory):
    base = tmp_path_factory.mktemp("progress")
    generate(SCENARIOS["rocm-8gpu"], base / "capture")
    return base / "capture"


def run(cmd, every: str):
    env = dict(os.environ, JAXTRACE_PROGRESS_EVERY=every)
    return subprocess.run([sys.executable, "-P", *map(str, cmd)], capture_output=True,
                          text=True, timeout=600, env=env)


def progress_lines(stderr: str) -> list[re.Match]:
    return [m for ln in stderr.splitlines() if (m := LINE_RE.match(ln.strip()))]


def test_a_step_says_its_phases_with_counts(gen_capture, tmp_path):
    p = run([SKIP_STATS, gen_capture, "--out", tmp_path / "o"], "0")
    assert p.returncode == 0, p.stderr
    lines = progress_lines(p.stderr)
    phases = [m["what"].strip() for m in lines]
    for phase in ("reading the trace", "checking the trace's events",
                  "joining GPU events to their launches", "finding the steps",
                  "measuring each step and GPU", "writing the tables"):
        assert phase in phases, (phase, phases)
    assert all(m["step"] == "skip_stats" for m in lines)
    joined = next(m for m in lines if m["what"].strip() == "joining GPU events to their launches")
    rows = (tmp_path / "o" / "rows.csv").read_text().count("\n") - 1
    assert int(joined["count"].replace(",", "")) == rows  # the count is the GPU events'
    # every stderr line is a progress line: a sound capture says nothing else here
    assert len(lines) == len(p.stderr.splitlines())


def test_a_quick_step_says_nothing_under_the_default_interval(gen_capture, tmp_path):
    p = run([SKIP_STATS, gen_capture, "--out", tmp_path / "o"], "60")
    assert p.returncode == 0 and progress_lines(p.stderr) == [], p.stderr


def test_investigate_relays_the_steps_progress(gen_capture, tmp_path):
    p = run([INVESTIGATE, gen_capture, "--out", tmp_path / "o", "--no-xprof"], "0")
    assert p.returncode == 0, p.stderr
    steps = {m["step"] for m in progress_lines(p.stderr)}
    assert {"capture_info", "skip_stats", "attribute_kernels", "reconcile", "swimlanes",
            "roofline"} <= steps, steps
    log = (tmp_path / "o" / "logs" / "skip_stats.txt").read_text()
    assert "skip_stats: … joining GPU events to their launches" in log  # kept whole too
