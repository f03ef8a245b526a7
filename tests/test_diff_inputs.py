"""Small traces with their expected tables kept as text (tests/diff/README.md): steps 1 and 3
run on each, and every kept table must come out byte for byte the same."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CASES = sorted(p.parent for p in (REPO / "tests" / "diff").glob("*/host.trace.json"))
STEPS = (REPO / "analyzing-jax-launch-overhead" / "scripts" / "skip_stats.py",
         REPO / "scripts" / "swimlanes.py")
KEPT = ("steps.csv", "streams.csv", "gaps.csv", "rows.csv", "rows_gpu.csv", "stragglers.csv")
WRITE = os.environ.get("JAXTRACE_DIFF_WRITE") == "1"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_tables_of_a_small_trace_are_the_kept_ones(case, tmp_path):
    for step in STEPS:
        p = subprocess.run([sys.executable, "-P", str(step), str(case / "host.trace.json"),
                            "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
    expected = case / "expected"
    if WRITE:
        expected.mkdir(exist_ok=True)
        for name in KEPT:
            (expected / name).write_bytes((tmp_path / name).read_bytes())
    kept = sorted(p.name for p in expected.iterdir())
    assert kept == sorted(KEPT), kept
    moved = [n for n in kept if (tmp_path / n).read_bytes() != (expected / n).read_bytes()]
    assert not moved, f"{case.name}: {moved} moved (tests/diff/README.md says how to keep them)"


def test_there_are_cases():
    assert len(CASES) >= 3, CASES
