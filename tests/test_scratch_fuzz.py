"""Hostile scratch folders and option values (issue 36): the steps that read a scratch folder
(changes, trust, report_draft, factcheck, compare) on the bundled example's folder with one of
its files replaced by a FIFO, a link to /dev/zero, a folder, junk, nothing, a cut copy, a figure
cell of NaN, inf or text, or a copy that disagrees with the rest; and every typed option given
hostile values. Each case ends within its time limit with a documented exit code and no
traceback, and writes nothing outside its --out. Cases are drawn from Random(f"{SEED}:{i}")
alone, so any case can be made again by its number (JAXTRACE_SCRATCH_FUZZ=N for more)."""

from __future__ import annotations

import csv
import io
import os
import random
import re
import shutil
import subprocess
import sys

import pytest

from conftest import REPO

EXAMPLE = REPO / "examples" / "minigpt-h100-2gpu-cb"
SCRIPTS = REPO / "scripts"
SEED = "scratch-fuzz"
CASES = int(os.environ.get("JAXTRACE_SCRATCH_FUZZ", "24"))
READERS = ("changes.py", "trust.py", "report_draft.py", "factcheck.py", "compare.py")
MUTATIONS = ("fifo", "dev_zero", "folder", "junk", "empty", "cut", "nan_cell", "inf_cell",
             "text_cell", "disagree")
EXITS = {"changes.py": {0, 1}, "trust.py": {0, 1}, "report_draft.py": {0, 1},
         "factcheck.py": {0, 1, 4}, "compare.py": {0, 1}}
LIMIT_S = 120


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("fuzz") / "out"
    p = subprocess.run([sys.executable, "-P", str(SCRIPTS / "investigate.py"), str(EXAMPLE),
                        "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return out


def _tables(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if p.is_file() and p.suffix in (".csv", ".json")
                  and not any(part.startswith(".") or part in ("logs", "xplane")
                              for part in p.relative_to(folder).parts))


def _mutate(path, how: str, rng: random.Random) -> None:
    text = path.read_bytes()
    path.unlink()
    if how == "fifo":
        os.mkfifo(path)
    elif how == "dev_zero":
        path.symlink_to("/dev/zero")
    elif how == "folder":
        path.mkdir()
    elif how == "junk":
        path.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4000))))
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "cut":
        path.write_bytes(text[:rng.randrange(1, max(2, len(text)))])
    elif path.suffix == ".json":  # a figure's value set to what no figure is
        bad = {"nan_cell": "NaN", "inf_cell": "Infinity", "text_cell": '"x"',
               "disagree": "1e300"}[how]
        key = b'"value": '
        i = text.find(key)
        if i < 0:
            path.write_bytes(text)
            return
        j = i + len(key)
        k = min(x for x in (text.find(b",", j), text.find(b"\n", j)) if x >= 0)
        path.write_bytes(text[:j] + bad.encode() + text[k:])
    else:  # a CSV: one figure cell of one row, or every row's figure scaled (a disagreeing copy)
        rows = list(csv.reader(io.StringIO(text.decode("utf-8"))))
        if len(rows) > 1:
            cols = [i for i, c in enumerate(rows[0]) if c.endswith(("_us", "_pct", "_ps"))
                    or "pct" in c] or [len(rows[0]) - 1]
            col = rng.choice(cols)
            targets = rows[1:] if how == "disagree" else [rng.choice(rows[1:])]
            for r in targets:
                if col < len(r):
                    r[col] = {"nan_cell": "nan", "inf_cell": "inf", "text_cell": "many",
                              "disagree": "9" + (r[col] or "0")}[how]
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(rows)
        path.write_text(buf.getvalue(), encoding="utf-8")


@pytest.mark.parametrize("i", range(CASES))
def test_a_hostile_scratch_folder_is_one_sentence_never_a_hang(folder, tmp_path, i):
    rng = random.Random(f"{SEED}:{i}")
    target, how = rng.choice(_tables(folder)), MUTATIONS[i % len(MUTATIONS)]
    script = rng.choice(READERS)
    out = tmp_path / "out"
    shutil.copytree(folder, out, symlinks=True)
    _mutate(out / target, how, rng)
    outside = sorted(p.name for p in tmp_path.iterdir())
    if script == "factcheck.py":
        shutil.copy(folder / "report_draft.md", tmp_path / "report.md")
        outside = sorted(p.name for p in tmp_path.iterdir())
        argv = [str(tmp_path / "report.md"), "--out", str(out)]
    elif script == "compare.py":
        argv = [str(folder), str(out), "--out", str(tmp_path / "cmp")]
        outside.append("cmp")
    else:
        argv = ["--out", str(out)]
    try:
        p = subprocess.run([sys.executable, "-P", str(SCRIPTS / script), *argv],
                           capture_output=True, text=True, timeout=LIMIT_S,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"case {i}: {script} on {target} as {how} ran past {LIMIT_S} s")
    case = f"case {i}: {script} on {target} as {how}: exit {p.returncode}\n{p.stderr[-1500:]}"
    assert "Traceback" not in p.stderr + p.stdout, case
    assert p.returncode in EXITS[script], case
    if p.returncode == 1:
        said = [ln for ln in p.stderr.splitlines() if ln.strip() and "…" not in ln]
        assert said and said[-1].startswith(script[:-3] + ": "), case
    assert sorted(q.name for q in tmp_path.iterdir()) == sorted(set(outside)), case
    if script == "report_draft.py" and p.returncode == 0:  # no figure of NaN or inf drafted
        draft = (out / "report_draft.md").read_text(encoding="utf-8")
        assert not re.search(r"(?i)\b(nan|inf|infinity)\b", draft), case


HOSTILE_VALUES = ("nan", "-inf", "inf", "1e308", "-1", "0", "", "1_000", "0x10", "x" * 5000,
                  "\u202e1", "../../escape", "7")
TYPED = (("investigate.py", "--step-limit"), ("investigate.py", "--jobs"),
         ("swimlanes.py", "--start"), ("swimlanes.py", "--end"), ("swimlanes.py", "--step"),
         ("attribute_kernels.py", "--program"), ("investigate.py", "--costs"),
         ("investigate.py", "--host"), ("investigate.py", "--run"))


@pytest.mark.parametrize("script, option", TYPED)
def test_hostile_option_values_are_one_sentence(tmp_path, script, option):
    """Each typed option given each hostile value on a capture that does not exist: exit 1 or 2
    with one sentence (the option's value is checked before the capture is looked for), never
    a traceback; nothing written but --out."""
    for n, value in enumerate(HOSTILE_VALUES):
        out = tmp_path / f"out{n}"
        p = subprocess.run([sys.executable, "-P", str(SCRIPTS / script), str(tmp_path / "none"),
                            "--out", str(out), f"{option}={value}"], capture_output=True,
                           text=True, timeout=LIMIT_S, stdin=subprocess.DEVNULL)
        case = f"{script} {option}={value[:40]!r}: exit {p.returncode}\n{p.stderr[-800:]}"
        assert "Traceback" not in p.stderr + p.stdout, case
        assert p.returncode in (1, 2), case
        assert len([ln for ln in p.stderr.splitlines() if ln.startswith(("usage:", "  "))
                    is False and ln.strip()]) >= 1, case
    assert not list(tmp_path.glob("escape*")) and not (tmp_path.parent / "escape").exists()
