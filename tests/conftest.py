"""Shared test set-up: paths to the bundle's script folders and to ../shared/captures/."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ROOT_SCRIPTS = REPO / "scripts"
SIBLING_SCRIPTS = REPO / "analyzing-jax-launch-overhead" / "scripts"
SHARED_CAPTURES = REPO.parent / "shared" / "captures"
REQUIRE_SHARED = os.environ.get("JAXTRACE_REQUIRE_SHARED") == "1"

# every scratch table read by a script under test refuses a column it does not declare
# (scratch.STRICT): the declarations cover every column any reader asks for
os.environ["JAXTRACE_SCRATCH_STRICT"] = "1"

for p in (ROOT_SCRIPTS, SIBLING_SCRIPTS, REPO / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


# The tiers (pytest.ini): `shared` for tests that read ../shared, `browser` for the browser's,
# `slow` for those tests/slow.txt lists (tests/tiers.py writes it from a timed run) or that say
# so themselves, `quick` for all others: `bash tests/run.sh -m quick` on every change.
SHARED_FIXTURES = frozenset({"shared", "shared_attributed", "independent", "capture"})
SLOW = frozenset((REPO / "tests" / "slow.txt").read_text().split())


def pytest_collection_modifyitems(config, items):
    for item in items:
        if SHARED_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.shared)
        if item.path.name == "test_page_browser.py":
            item.add_marker(pytest.mark.browser)
        if item.nodeid.split("[")[0] in SLOW:
            item.add_marker(pytest.mark.slow)
        if not any(item.get_closest_marker(m) for m in ("shared", "browser", "slow")):
            item.add_marker(pytest.mark.quick)


def shared_manifest() -> dict | None:
    path = SHARED_CAPTURES / "manifest.json"
    return json.loads(path.read_text()) if path.is_file() else None


def manifest_captures() -> list[dict]:
    m = shared_manifest()
    return m["captures"] if m else []


def capture_id(c: dict) -> str:
    return c["path"].split("/")[1]


@pytest.fixture
def shared():
    """The shared captures folder; skip where absent, fail under CI."""
    if not (SHARED_CAPTURES / "manifest.json").is_file():
        msg = f"{SHARED_CAPTURES} is absent (a user's clone has no ../shared)"
        if REQUIRE_SHARED:
            pytest.fail(msg + "; JAXTRACE_REQUIRE_SHARED=1 demands it")
        pytest.skip(msg)
    return SHARED_CAPTURES


def pytest_generate_tests(metafunc):
    if "capture" in metafunc.fixturenames:
        caps = manifest_captures()
        if not caps:
            if REQUIRE_SHARED:
                raise RuntimeError(f"{SHARED_CAPTURES}/manifest.json is missing; "
                                   "JAXTRACE_REQUIRE_SHARED=1 demands it")
            metafunc.parametrize("capture", [pytest.param(None, marks=pytest.mark.skip(
                reason=f"{SHARED_CAPTURES} is absent (a user's clone has no ../shared)"))])
        else:
            metafunc.parametrize("capture", caps, ids=[capture_id(c) for c in caps])


def cost_doubles(run, make, n: int, repeats: int = 3, ratio: float = 3.0) -> tuple:
    """The time bound of the tests on inputs shaped to be expensive, measured against the input
    itself rather than this machine's clock: run(make(n // 2)) and run(make(n)), the fastest of
    `repeats` each; the whole must cost under `ratio` times the half (a linear cost doubles, a
    quadratic one quadruples, an exponential one squares). A pair over the bound is measured
    again, up to three times in all: a run of a few ms slowed by the other test workers (the
    whole suite runs files in parallel) is noise, a cost that grows faster fails every time.
    Returns the two times."""
    import time

    sizes = [(k, make(k)) for k in (n // 2, n)]
    for _ in range(3):
        times = []
        for _, data in sizes:
            best = float("inf")
            for _ in range(repeats):
                t0 = time.perf_counter()
                run(data)
                best = min(best, time.perf_counter() - t0)
            times.append(best)
        half, whole = times
        if whole < ratio * half + 0.002:
            return half, whole
    raise AssertionError(
        f"size {n // 2:,}: {half:.4f} s, size {n:,}: {whole:.4f} s: more than {ratio}x")


def scale_step_durations(steps_csv: Path, factor: float) -> list[dict]:
    """steps.csv edited as a hostile hand would: every step's duration scaled, its end moved to
    match (the row agrees with itself, no longer with the skip_stats.json written with it);
    returns the edited rows."""
    import csv
    with open(steps_csv, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        r["dur_us"] = f"{float(r['dur_us']) * factor:.3f}"
        r["end_us"] = f"{float(r['start_us']) + float(r['dur_us']):.3f}"
    with open(steps_csv, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return rows


def layout_text() -> str:
    """The scratch layout document whole: references/scratch-layout.md and its parts, one per
    step, in references/scratch-layout/."""
    refs = REPO / "references"
    return "\n".join(p.read_text(encoding="utf-8") for p in
                     [refs / "scratch-layout.md", *sorted((refs / "scratch-layout").glob("*.md"))])


def read_table(path: Path) -> list[dict]:
    """A CSV's rows as dicts; a declared parent table (rows.csv, attribution/kernels.csv) with
    its child tables' columns joined in, as the steps read it (scratch.records)."""
    import csv

    from tracekit import scratch
    path = Path(path)
    for file in scratch.TABLES:
        if scratch.children(file) and path.as_posix().endswith("/" + file):
            rows = scratch.records(Path(path.as_posix()[:-len(file) - 1]), file)
            return [] if rows is None else [dict(r) for r in rows]
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def write_table(folder: Path, file: str, header: list, rows: list) -> None:
    """A hand-made declared table whose `header` may hold its child tables' columns too (as
    the table was before they moved there): the parent written with its own columns, each
    child with the rows whose cells are not the column's default."""
    import csv

    from tracekit import scratch
    at = {h: i for i, h in enumerate(header)}
    parts = [(file, scratch.columns(file), None)]
    parts += [(k.file, k.names, k) for k in scratch.children(file)]
    for name, cols, child in parts:
        path = Path(folder) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh, lineterminator="\n")
            w.writerow(cols)
            for n, r in enumerate(rows):
                if child is None:
                    w.writerow([r[at[c]] if c in at else "" for c in cols])
                    continue
                cells = [r[at[c.name]] if c.name in at else c.default
                         for c in child.columns[1:]]
                if any(str(v) not in ("", c.default) for v, c in zip(cells, child.columns[1:],
                                                                      strict=True)):
                    w.writerow([n, *cells])


# The verdict's class against a truth's: a truth this close to a class's line (the chip's share
# of the unprofiled step) may read as the class across it from the profiled capture: the
# profiler lengthens the step by a few percent (cache_no_donate: 0.820 of the unprofiled step,
# 0.798 of the profiled period)
VERDICT_CLASS = {"launch-bound": "host", "device-bound": "device", "mixed": "mixed",
                 "collective/straggler-bound": "device"}
LINE_MARGIN = 0.03
CLASS_LINES = {("device", "mixed"): 0.8, ("mixed", "device"): 0.8, ("mixed", "host"): 0.5,
               ("host", "mixed"): 0.5}


def verdict_agrees(verdict: str, truth: dict) -> bool:
    """Whether step 1's verdict is the truth's class, or the class across a line the truth's
    busy share is within LINE_MARGIN of."""
    ours = VERDICT_CLASS.get(verdict)
    line = CLASS_LINES.get((truth["bound"], ours))
    return ours == truth["bound"] or bool(
        line and truth.get("busy_share") is not None
        and abs(truth["busy_share"] - line) <= LINE_MARGIN)
