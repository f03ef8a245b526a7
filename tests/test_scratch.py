"""scratch.py: the declarations of every scratch file. The layout document is their rendering; the
one command on the bundled example writes only declared files, each table with its declared header
and each result's figures with their declared unit and label; the writers and the reader refuse
what is not declared."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, SIBLING_SCRIPTS
from tracekit import scratch  # the sibling skill's, on sys.path through conftest

EXAMPLE = REPO / "examples" / "minigpt-h100-2gpu-cb"
LAYOUT = REPO / "references" / "scratch-layout.md"


def pattern(name: str) -> re.Pattern:
    """A declared file name as a pattern: each `<part>` stands for one path segment."""
    parts = re.split(r"(<[^>]+>)", name)
    return re.compile("".join("[^/]+" if p.startswith("<") else re.escape(p) for p in parts))


def declaration(rel: str) -> str | None:
    """The declaration a written file falls under (by name, by pattern, inside a declared folder,
    or in a host's folder as one of the files above), or None."""
    if rel in scratch.DECLARED:
        return rel
    for name in scratch.DECLARED:
        if "<" in name and not name.endswith("/") and pattern(name).fullmatch(rel):
            return name
    for name in scratch.DECLARED:
        if name.endswith("/") and "<" not in name and rel.startswith(name):
            return name
    head, _, rest = rel.partition("/")
    if "<host>/" in scratch.DECLARED and rest and declaration(rest) not in (None, "<host>/"):
        return "<host>/"
    return None


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """The one command (with the page) on the bundled example: its scratch folder."""
    out = tmp_path_factory.mktemp("scratch") / "out"
    p = subprocess.run([sys.executable, "-P", str(REPO / "scripts" / "investigate.py"),
                        str(EXAMPLE), "--out", str(out), "--page"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return out


def test_the_layout_document_is_the_rendering_of_the_declarations():
    """scratch-layout.md and its parts, one per step, are the declarations rendered; no part
    is left over from an earlier rendering."""
    docs = scratch.render_layout()
    for rel, text in docs.items():
        assert (LAYOUT.parent / rel).read_text(encoding="utf-8") == text, rel
    kept = {f"scratch-layout/{p.name}" for p in (LAYOUT.parent / "scratch-layout").glob("*.md")}
    assert kept == set(docs) - {"scratch-layout.md"}


def test_the_script_writes_the_layout(tmp_path):
    p = subprocess.run([sys.executable, "-P", str(SIBLING_SCRIPTS / "scratch_layout.py"),
                        str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    for rel, text in scratch.render_layout().items():
        assert (tmp_path / rel).read_text(encoding="utf-8") == text
    p = subprocess.run([sys.executable, "-P", str(SIBLING_SCRIPTS / "scratch_layout.py")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "usage" in p.stderr


def test_each_declaration_is_well_formed():
    for item in scratch.DECLARED.values():
        if isinstance(item, scratch.Table):
            assert len(set(item.names)) == len(item.names), item.file
            for c in item.columns:
                assert c.label in scratch.LABELS + ("",), (item.file, c.name)
                assert c.meaning, (item.file, c.name)
        else:
            assert item.kind in ("json", "text", "svg", "html", "markdown", "folder"), item.file
            for f in item.figures:
                assert f.label in scratch.LABELS and f.unit and f.meaning, (item.file, f.name)


def test_every_file_written_is_declared_with_its_header_and_figures(example):
    written = [p for p in sorted(example.rglob("*")) if p.is_file()]
    assert written
    seen = set()
    for p in written:
        rel = p.relative_to(example).as_posix()
        name = declaration(rel)
        assert name is not None, f"{rel} is written but not declared"
        seen.add(name)
        if rel.endswith(".csv"):
            with open(p, encoding="utf-8") as fh:
                assert fh.readline().rstrip("\n").split(",") == scratch.columns(rel), rel
        elif rel.endswith(".json") and isinstance(scratch.DECLARED.get(rel), scratch.File):
            scratch.check_figures(rel, json.loads(p.read_text(encoding="utf-8")))
    # the single-host run writes every table of the layout but the cross-host ones, the
    # comparison's (compare.py, of two captures) and the report writer's own (derived.csv)
    tables = {t for t, d in scratch.TABLES.items()
              if d.producer not in ("cross_host.py", "compare.py", "the report's writer")}
    assert tables <= seen, tables - seen


def test_a_pattern_covers_a_segment_and_a_host_folder_its_files():
    assert declaration("attribution/jit_train_step(17).hlo.txt") == \
        "attribution/<module>(<id>).hlo.txt"
    assert declaration("logs/skip_stats.txt") == "logs/<script>.txt"
    assert declaration("attribution/xplane/hlo_stats.json") == "attribution/xplane/"
    assert declaration("host-0/attribution/ops.csv") == "<host>/"
    assert declaration("host-0/unknown.csv") is None
    assert declaration("unknown.csv") is None


def test_the_writers_and_the_reader_refuse_what_is_not_declared(tmp_path):
    names = scratch.columns("stragglers.csv")
    row = list(range(len(names)))
    assert scratch.write_table(tmp_path, "stragglers.csv", [row, row]) == 2
    assert (tmp_path / "stragglers.csv").read_text().splitlines()[0] == ",".join(names)
    assert scratch.Scratch(tmp_path).values("stragglers.csv", "lag_us") == ["3", "3"]
    with pytest.raises(scratch.ScratchError):
        scratch.write_table(tmp_path, "stragglers.csv", [row[:-1]])
    with pytest.raises(scratch.ScratchError):
        scratch.write_table(tmp_path, "undeclared.csv", [])

    good = {"figures": {"items": scratch.figure(3, "count", "inferred")}}
    assert scratch.write_result(tmp_path, "trust.json", good) == 1
    assert json.loads((tmp_path / "trust.json").read_text()) == good
    undeclared = {"figures": {"not_a_figure": scratch.figure(1, "count", "inferred")}}
    wrong_label = {"figures": {"items": scratch.figure(3, "count", "measured")}}
    wrong_unit = {"figures": {"device_time_us": scratch.figure(3, "pct", "measured")}}
    for data in (undeclared, wrong_label, wrong_unit):
        with pytest.raises(scratch.ScratchError):
            scratch.write_result(tmp_path, "trust.json", data)
    with pytest.raises(scratch.ScratchError):
        scratch.write_result(tmp_path, "undeclared.json", good)

    s = scratch.Scratch(tmp_path)
    assert s.json("trust.json") == good
    assert s.rows("gaps.csv") is None and s.json("missing.json") is None  # not written
    with pytest.raises(scratch.ScratchError):
        s.rows("missing.csv")  # not declared
    (tmp_path / "stragglers.csv").write_text(scratch.header("stragglers.csv") +
                                             "0,1,2.000,0.000,k,compute,,,1,1\n")
    (row,) = s.rows("stragglers.csv")
    assert row["end_us"] == "2.000"
    if scratch.STRICT:  # under the tests: a column no declaration names is refused
        with pytest.raises(scratch.ScratchError):
            row.get("not_a_column")
    with pytest.raises(scratch.ScratchError):
        s.values("stragglers.csv", "not_a_column")
    with pytest.raises(scratch.ScratchError):
        s.values("undeclared.csv", "step")


def test_a_figure_has_one_label_wherever_it_is_declared():
    """A name declared as a figure in several results carries the same unit and label in each."""
    seen: dict[str, tuple] = {}
    for f in scratch.FILES.values():
        for g in f.figures:
            assert seen.setdefault(g.name, (g.unit, g.label)) == (g.unit, g.label), \
                (f.file, g.name)



def test_remove_produced_takes_a_steps_declared_files_alone(tmp_path):
    """What investigate.py removes of a step that failed: its declared files, a pattern's
    matches and its folders; never another step's, the logs or the hand-offs."""
    for rel in ["attribution/kernels.csv", "attribution/jit_f(3).hlo.txt", "attribution/xplane/a",
                "attribution/notes.md", "steps.csv", "logs/attribute_kernels.txt",
                ".handoff/capture.json"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    gone = scratch.remove_produced(tmp_path, "attribute_kernels.py")
    assert sorted(gone) == ["attribution/jit_f(3).hlo.txt", "attribution/kernels.csv",
                            "attribution/xplane"]
    left = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert left == [".handoff/capture.json", "attribution/notes.md", "logs/attribute_kernels.txt",
                    "steps.csv"]


def test_a_figure_past_its_limit_is_withheld(tmp_path):
    """A cell past its column's declared limit is written empty and said in the next result's
    `withheld` (for the trust list); a cell at its limit is kept."""
    cols = scratch.columns("roofline.csv")
    row = [""] * len(cols)
    row[cols.index("program_id")], row[cols.index("instruction")] = "7", "fusion.3"
    row[cols.index("pct_of_ceiling")] = "321.00"
    ok = list(row)
    ok[cols.index("pct_of_ceiling")] = "100.00"
    assert scratch.write_table(tmp_path, "roofline.csv", [row, ok]) == 2
    text = (tmp_path / "roofline.csv").read_text().splitlines()
    assert text[1].split(",")[cols.index("pct_of_ceiling")] == ""
    assert text[2].split(",")[cols.index("pct_of_ceiling")] == "100.00"
    scratch.write_result(tmp_path, "roofline.json", {"step": "roofline"})
    withheld = json.loads((tmp_path / "roofline.json").read_text())["withheld"]
    assert len(withheld) == 1 and "7 fusion.3: pct_of_ceiling 321" in withheld[0]
    scratch.write_result(tmp_path, "roofline.json", {"step": "roofline"})
    assert "withheld" not in json.loads((tmp_path / "roofline.json").read_text())
    c = scratch.columns("changes.csv")
    saving = [""] * len(c)
    saving[c.index("step_us")], saving[c.index("saving_us")] = "100.0", "120.0"
    assert scratch.past_limits("changes.csv", saving)[0][1] == "saving_us"


def test_only_regular_files_of_bounded_size_are_read(tmp_path, monkeypatch):
    """A FIFO, a link to a device, a folder or a file past the limit named like a scratch file
    is an OSError at once (never a read that waits for ever or fills memory); every reader of
    the scratch folder says it in one sentence (the one policy, scratch.opened): a file there
    that is not its producer's is a TableError, never read as missing or empty; a file not
    there is None."""
    os.mkfifo(tmp_path / "steps.csv")
    (tmp_path / "changes.json").symlink_to("/dev/zero")
    (tmp_path / "trust.csv").mkdir()
    (tmp_path / "ops.csv").write_text("a,b\n1,2\n")
    for name, words in (("steps.csv", "not a regular file"), ("changes.json", "not a regular"),
                        ("trust.csv", "not a regular")):
        with pytest.raises(OSError, match=words):
            scratch.open_file(tmp_path / name)
    monkeypatch.setattr(scratch, "MAX_SCRATCH_BYTES", 4)
    with pytest.raises(OSError, match="more than the 4 read"):
        scratch.open_file(tmp_path / "ops.csv", limit=scratch.MAX_SCRATCH_BYTES)
    monkeypatch.undo()
    s = scratch.Scratch(tmp_path)
    for read in (lambda: s.rows("steps.csv"), lambda: s.json("changes.json"),
                 lambda: s.rows("trust.csv"), lambda: scratch.records(tmp_path, "steps.csv"),
                 lambda: scratch.stream(tmp_path, "trust.csv", ["item"])):
        with pytest.raises(scratch.TableError, match="not a regular file, so it is not the file"):
            read()
    (tmp_path / "gaps.csv").write_text("junk,header\n")
    with pytest.raises(scratch.TableError, match="another header"), \
            scratch.lines(tmp_path / "gaps.csv", "gaps.csv"):
        pass
    (tmp_path / "roofline.json").write_text("[1, 2]")
    with pytest.raises(scratch.TableError, match="not a JSON object .a list"):
        s.json("roofline.json")
    for name in ("rows.csv", "kernels.json"):
        (tmp_path / name).symlink_to(tmp_path / "nowhere")  # a link to nothing: not there
    assert s.rows("rows.csv") is None and s.json("capture_info.json") is None
    assert scratch.stream(tmp_path, "rows.csv", ["kernel"]) is None
    assert scratch.records(tmp_path, "changes.csv") is None
    with scratch.lines(tmp_path / "rows.csv", "rows.csv") as fh:
        assert fh is None


def test_later_steps_end_on_fifos_and_devices_named_like_tables(example, tmp_path):
    """Every table the later steps read replaced by a FIFO or a link to /dev/zero: each step
    ends (in seconds, without a traceback), saying what it could not read."""
    out = tmp_path / "out"
    shutil.copytree(example, out, symlinks=True)
    for i, name in enumerate(("steps.csv", "roofline.csv", "attribution/ops.csv",
                              "changes.csv", "trust.csv", "skip_stats.json", "roofline.json",
                              "changes.json", "capture_info.json")):
        (out / name).unlink()
        if i % 2:
            (out / name).symlink_to("/dev/zero")
        else:
            os.mkfifo(out / name)
    for script in ("changes.py", "trust.py", "report_draft.py"):
        p = subprocess.run([sys.executable, "-P", str(REPO / "scripts" / script), "--out",
                            str(out)],
                           capture_output=True, text=True, timeout=120)
        assert "Traceback" not in p.stderr, (script, p.stderr)


def test_folders_are_made_with_the_users_umask(tmp_path):
    """A folder a step makes whole (attribution/, written beside and renamed) has the mode the
    user's umask gives, not mkdtemp's 0700."""
    from tracekit import trace_rules
    old = os.umask(0o027)
    try:
        with trace_rules.atomic_folder(tmp_path / "attribution") as tmp:
            (tmp / "a.csv").write_text("x\n")
        with trace_rules.replace_files(tmp_path / "out") as tmp:
            (tmp / "b.csv").write_text("x\n")
    finally:
        os.umask(old)
    assert (tmp_path / "attribution").stat().st_mode & 0o777 == 0o750
    assert (tmp_path / "out" / "b.csv").is_file()


def test_format_characters_are_escaped_wherever_control_characters_are():
    """Every format character of the interpreter's Unicode (category Cf: a right-to-left
    override, a zero-width space, a byte order mark) is escaped in a printed line and in a page's
    text, as control characters are; other letters stay as they are."""
    import unicodedata

    from tracekit import trace_rules
    sys.path.insert(0, str(REPO / "writing-trace-report-pages" / "scripts"))
    import page_tables
    cf = [chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) == "Cf"]
    for ch in cf:
        name = f"fusion{ch}.1"
        for shown in (trace_rules.printable(name), page_tables.clean(name)):
            assert ch not in shown and "\\" in shown, (hex(ord(ch)), shown)
    assert trace_rules.printable("gpu\u202eevil\x1b") == "gpu\\u202eevil\\x1b"
    assert trace_rules.printable("ядро µs 核") == "ядро µs 核"


@pytest.mark.parametrize("recorded", ["relative", 12, "text", None])
def test_a_recorded_capture_is_read_whatever_it_holds(example, tmp_path, recorded):
    """Step 4's record of its xplane: a relative path is resolved in the scratch folder that
    recorded it (roofline.py accepts the capture it names); a number or a string where a
    record stands is one sentence, never a TypeError."""
    out = tmp_path / "out"
    shutil.copytree(example, out, symlinks=True)
    path = out / "attribution" / "attribute_kernels.json"
    res = json.loads(path.read_text())
    xplane = next(EXAMPLE.rglob("*.xplane.pb"))
    if recorded == "relative":
        res["capture"]["xplane"]["file"] = os.path.relpath(xplane.resolve(), out)
    elif recorded == "text":
        res["capture"] = "somewhere"
    else:
        res["capture"]["xplane"]["file"] = recorded
    path.write_text(json.dumps(res))
    p = subprocess.run([sys.executable, "-P", str(REPO / "scripts" / "roofline.py"), str(EXAMPLE),
                        "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert "Traceback" not in p.stderr, p.stderr
    if recorded == "relative":
        assert p.returncode == 0, p.stderr
    else:
        assert p.returncode == 1 and "was written for" in p.stderr.splitlines()[-1]


def test_no_figure_that_is_not_a_finite_number_is_written_or_read(example, tmp_path):
    """Writers: a NaN or an infinity (a float, or its text) in a table is written empty and
    said in WITHHELD; in a result it is null. Readers: a table whose figure cell is NaN, inf or
    text is not its producer's: one sentence (report_draft.py once wrote 'saves nan us')."""
    scratch.WITHHELD.clear()
    n = scratch.write_table(tmp_path, "streams.csv",
                            [[0, 7, "Stream #7", float("nan"), "inf", 1.0, 2.0, 3.0, 4.0,
                              5.0, 6.0, 7.0, 8.0, 1]])
    assert n == 1
    row = (tmp_path / "streams.csv").read_text().splitlines()[1].split(",")
    assert row[3] == row[4] == "" and len(scratch.WITHHELD) == 1
    scratch.WITHHELD.clear()
    text = scratch.result_text("skip_stats.json", {"x": float("inf"), "y": [1.5, float("nan")]})
    assert json.loads(text) == {"x": None, "y": [1.5, None]}
    out = tmp_path / "out"
    shutil.copytree(example, out, symlinks=True)
    path = out / "changes.csv"
    lines = path.read_text().splitlines(keepends=True)
    head = lines[0].rstrip("\n").split(",")
    cells = next(csv.reader([lines[1]]))
    cells[head.index("saving_us")] = "nan"
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(cells)
    path.write_text(lines[0] + buf.getvalue() + "".join(lines[2:]))
    p = subprocess.run([sys.executable, "-P", str(REPO / "scripts" / "report_draft.py"),
                        "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "'nan' is not a finite number" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


def test_a_child_table_follows_its_parent_and_keys_its_rows_by_row():
    """Every child table (a GPU's own columns of a parent's rows) is declared after its parent,
    its first column `row`, read through the parent (scratch.Children)."""
    from tracekit import scratch as sc
    order = list(sc.TABLES)
    kids = [t for t in sc.TABLES.values() if t.parent]
    assert {t.file for t in kids} == {"rows_gpu.csv", "attribution/kernels_gpu.csv"}
    for t in kids:
        assert order.index(t.parent) < order.index(t.file) and t.columns[0].name == sc.CHILD_KEY
        assert sc.column(t.parent, "graph").default == "0"
