"""The house rules that keep the bundle maintainable, counted (references/architecture.md):
no function over 100 lines; the command line built in one place; every step's main a few lines
handed to step_cli; the scratch folder declared in one scratch.py; no private copy of a unit
formatter, a CSV writer, a result writer or a scratch reader outside their homes."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FOLDERS = [REPO / "scripts", REPO / "analyzing-jax-launch-overhead" / "scripts",
           REPO / "writing-trace-report-pages" / "scripts"]
MAX_FUNCTION_LINES = 100
MAX_PARSERS = 3  # step_cli, and the scripts that are not steps (the page)
STEP_MAIN_LINES = 3


def sources():
    for folder in FOLDERS:
        for path in sorted(folder.glob("*.py")):
            yield path, ast.parse(path.read_text(encoding="utf-8"))


def test_no_function_over_100_lines():
    long = [f"{p.relative_to(REPO)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)"
            for p, tree in sources() for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
            and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, long


def test_the_command_line_is_built_in_one_place():
    parsers = [f"{p.relative_to(REPO)}:{n.lineno}" for p, tree in sources()
               for n in ast.walk(tree) if isinstance(n, ast.Call)
               and getattr(n.func, "attr", getattr(n.func, "id", None)) == "ArgumentParser"]
    assert len(parsers) <= MAX_PARSERS, parsers
    assert any("step_cli.py" in p for p in parsers), parsers


def test_every_step_hands_its_main_to_step_cli():
    """An entry script that uses step_cli has a main of a few lines and no argparse of its own."""
    steps = []
    for p, tree in sources():
        text = p.read_text(encoding="utf-8")
        if "step_cli.Step(" not in text:
            continue
        steps.append(p.name)
        assert "import argparse" not in text, p.name
        (main,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"]
        assert main.end_lineno - main.lineno + 1 <= STEP_MAIN_LINES + 4, p.name
    assert set(steps) >= {"capture_info.py", "skip_stats.py", "attribute_kernels.py",
                          "reconcile.py", "swimlanes.py", "roofline.py", "changes.py",
                          "trust.py", "report_draft.py", "factcheck.py", "investigate.py"}, steps


def test_one_home_for_writers_readers_and_units():
    """Result files are written by scratch.write_result, tables by scratch.write_table (or a
    hot-loop writer that takes its header from scratch.header), and no script keeps its own
    microseconds formatter."""
    found = []
    for p, _ in sources():
        if p.name in ("scratch.py", "trace_rules.py"):
            continue
        text = p.read_text(encoding="utf-8")
        if re.search(r"write_text\(json\.dumps\(", text):
            found.append(f"{p.name}: a result written outside scratch.write_result")
        if re.search(r"^def (us3|_us)\(", text, re.M):
            found.append(f"{p.name}: its own microseconds formatter")
        if re.search(r'fh\.write\("[a-z_]+,[a-z_]+,', text):
            found.append(f"{p.name}: a table header written by hand")
    assert not found, found


def test_the_scratch_folder_is_declared_in_a_skill():
    import scratch
    assert Path(scratch.__file__).parent.name == "scripts"
    assert len(scratch.TABLES) >= 20 and len(scratch.FILES) >= 10
