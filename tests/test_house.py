"""The house rules that keep the bundle maintainable, counted (references/architecture.md):
no function over 100 lines; the command line built in one place; every step's main a few lines
handed to step_cli; the scratch folder declared in one scratch.toml; the analyses never import a
device's module; no private copy of a unit
formatter, a CSV writer, a result writer or a scratch reader outside their homes."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FOLDERS = [REPO / "scripts", REPO / "analyzing-jax-launch-overhead" / "scripts",
           REPO / "analyzing-jax-launch-overhead" / "scripts" / "tracekit",
           REPO / "writing-trace-report-pages" / "scripts",
           *sorted(p.parent for p in (REPO / "scripts" / "jaxperf").rglob("__init__.py"))]
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
    from tracekit import scratch
    where = Path(scratch.__file__).parent
    assert (where.name, where.parent.parent.name) == ("tracekit", "analyzing-jax-launch-overhead")
    assert len(scratch.TABLES) >= 20 and len(scratch.FILES) >= 10


PLATFORM = {p.stem for p in (REPO / "analyzing-jax-launch-overhead" / "scripts" / "tracekit")
            .glob("*.py")} - {"__init__"}


def test_the_platform_is_one_package_imported_by_name():
    """Every import of a platform module names the package (`from tracekit import scratch`);
    sys.path is edited only by an entry script's bootstrap (once) and by sibling.py, the one
    home of the lookup of the skill beside; no redundant noqa for imports below it."""
    bare, edits = [], []
    for p, tree in sources():
        for n in ast.walk(tree):
            if isinstance(n, ast.Import):
                bare += [f"{p.name}: import {a.name}" for a in n.names if a.name in PLATFORM]
            elif isinstance(n, ast.ImportFrom) and n.module in PLATFORM and not n.level:
                bare.append(f"{p.name}: from {n.module} import ...")
        text = p.read_text(encoding="utf-8")
        n_edits = len(re.findall(r"^[^#\n]*sys\.path(\.insert|\.append|\[)", text, re.M))
        entry = "__main__" in text or p.name == "sibling.py"
        if n_edits > (2 if p.name == "sibling.py" else 1) or (n_edits and not entry):
            edits.append(f"{p.relative_to(REPO)}: {n_edits}")
        if "noqa: E402" in text:
            edits.append(f"{p.relative_to(REPO)}: noqa E402 (ruff.toml ignores E402)")
    assert not bare, bare
    assert not edits, edits


# the order of jaxperf/__init__.py
LAYERS = ("read", "program", "match", "cost", "gpu", "tpu", "device", "steps", "report",
          "analyses", "job")


def test_the_root_skill_shows_its_layers():
    """scripts/ holds the entry scripts (each with a main) and sibling.py; the modules they
    share are in the package jaxperf, one folder a layer, each layer importing only the layers
    above it in jaxperf/__init__.py's list (and the platform)."""
    top = sorted(p.name for p in (REPO / "scripts").glob("*.py")
                 if "__main__" not in p.read_text(encoding="utf-8"))
    assert top == ["sibling.py"], top
    pkg = REPO / "scripts" / "jaxperf"
    assert sorted(p.name for p in pkg.iterdir() if p.is_dir() and p.name != "__pycache__") \
        == sorted(LAYERS)
    wrong = []
    for p in pkg.rglob("*.py"):
        layer = p.parent.name
        text = p.read_text(encoding="utf-8")
        if "__main__" in text:
            wrong.append(f"{p.name}: a main in the library")
        for n in ast.walk(ast.parse(text)):
            if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("jaxperf."):
                used = n.module.split(".")[1]
                if LAYERS.index(used) > LAYERS.index(layer):
                    wrong.append(f"{layer}/{p.name} imports {n.module} (a layer below)")
    assert not wrong, wrong


# A device's own modules (its vocabulary, peaks, kernel matching, knobs), and the analyses that
# reach them only through the device's adapter (jaxperf.device.adapters) or the records the
# readers (gpu_events.py, capture_info.py, attribute_kernels.py) fill
DEVICE_MODULES = ("tracekit.gpu", "tracekit.tpu", "jaxperf.gpu", "jaxperf.tpu", "jaxperf.match")
SIBLING = REPO / "analyzing-jax-launch-overhead" / "scripts"
ANALYSES = [*(REPO / "scripts" / f"{n}.py" for n in (
    "reconcile", "swimlanes", "roofline", "changes", "trust", "compare", "report_draft",
    "factcheck")),
    *(REPO / "scripts" / "jaxperf" / "analyses" / f"{n}.py" for n in (
        "reconcile", "swimlanes", "roofline", "changes", "trust", "compare", "report_draft",
        "factcheck")),
    *(SIBLING / f"{n}.py" for n in ("skip_stats", "skip_analysis", "skip_writers", "gap_causes",
                                    "step_framing", "model_checks")),
    *(REPO / "writing-trace-report-pages" / "scripts").glob("*.py"),
    *(REPO / "scripts" / "jaxperf" / "steps").glob("*.py"),
    *(REPO / "scripts" / "jaxperf" / "report").glob("*.py")]


def test_the_analyses_never_import_a_device():
    """Steps 1 to 7, compare.py, the report, the fact check and the page ask the capture's
    device through its adapter, never by importing the device's own modules: a device's
    knowledge lives in its folder alone."""
    wrong = []
    for p in ANALYSES:
        for n in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            names = []
            if isinstance(n, ast.Import):
                names = [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom) and n.module:
                names = [n.module] + [f"{n.module}.{a.name}" for a in n.names]
            wrong += [f"{p.name} imports {m}" for m in names
                      if any(m == d or m.startswith(d + ".") for d in DEVICE_MODULES)]
    assert len(ANALYSES) >= 20 and not wrong, wrong


SKILL_MAX_LINES = 250
SKILL_MAX_CHARS = 16_000  # about 4,000 tokens at four characters a token
CONTENTS_OVER_LINES = 100


def test_the_skills_keep_their_budget_and_long_references_their_contents():
    """SKILL.md at most 250 lines and about 4,000 tokens (a checklist, one command a step); each
    sibling skill's SKILL.md too; every reference over 100 lines opens with a contents list."""
    for skill in (REPO, REPO / "analyzing-jax-launch-overhead",
                  REPO / "writing-trace-report-pages"):
        text = (skill / "SKILL.md").read_text(encoding="utf-8")
        assert len(text.splitlines()) <= SKILL_MAX_LINES, skill
        assert len(text) <= SKILL_MAX_CHARS, (skill, len(text))
    long = [p for p in (REPO / "references").rglob("*.md")
            if len(p.read_text(encoding="utf-8").splitlines()) > CONTENTS_OVER_LINES]
    assert long
    lacking = [p.name for p in long if "\n## Contents\n" not in p.read_text(encoding="utf-8")]
    assert not lacking, lacking


RECORDS = REPO / "analyzing-jax-launch-overhead" / "scripts" / "tracekit" / "records.py"


def _fields(cls: ast.ClassDef) -> set:
    out = {n.target.id for n in cls.body
           if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    for n in cls.body:
        if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "__slots__"
                                             for t in n.targets):
            out |= {e.value for e in getattr(n.value, "elts", []) if isinstance(e, ast.Constant)}
    return out


def test_the_records_a_capture_becomes_are_declared_once():
    """A device's run of work (device, start, duration), a program's run (module, start, end)
    and a step are the records of tracekit/records.py: a class elsewhere that holds one extends
    it, and each record's table named there is a declared scratch table."""
    tree = ast.parse(RECORDS.read_text(encoding="utf-8"))
    records = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    assert records == {"Device", "HostCall", "OpRun", "ProgramRun", "Step"}
    doc = ast.get_docstring(tree)
    for name in records:
        assert f"- `{name}`" in doc, name
    from tracekit import scratch
    declared = set(scratch.DECLARED)
    named = set(re.findall(r"[\w/]+\.(?:csv|json)", doc))
    assert named and named <= declared, named - declared
    shapes = ({"device", "start", "dur"}, {"module", "start", "end"}, {"number", "start", "end"})
    wrong = [f"{p.relative_to(REPO)}:{c.lineno} {c.name}" for p, t in sources() if p != RECORDS
             for c in ast.walk(t) if isinstance(c, ast.ClassDef)
             and any(s <= _fields(c) for s in shapes)
             and not {getattr(b, "id", "") for b in c.bases} & records]
    assert not wrong, wrong
