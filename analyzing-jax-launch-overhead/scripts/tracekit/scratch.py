"""The scratch folder as data: every table and result file the bundle writes, declared once.

Each CSV table is a `Table`: its file (relative to the scratch folder), the script that writes it,
what one row is, the row order, and its columns in order, each a `Column` with its unit, its
label (measured, read, inferred; empty for keys and text) and one line of meaning. Each other
file (a JSON result, a text summary, a picture, a folder) is a `File` with its fields in prose;
a JSON result's report figures are `Figure`s, each with the one label it is written with.

Producers write through `write_table` (the declared header, the rows in its order) and
`write_result` (sorted keys, one indent, its figures checked against their declarations);
consumers read through `Scratch` (each file read once; `values` refuses an undeclared
column), `stream` (a table's declared columns, streamed, for tables of millions of rows) and
`records` (rows as dicts, streamed). Under the tests (STRICT) every row read refuses a column
its table does not declare. `references/scratch-layout.md` is rendered from these declarations
(`render_layout`); a test keeps the two equal. Standard library only: the launch-overhead skill
runs where nothing is installed.

Regenerate the layout document after changing a declaration (from the checkout's root):
    python3 -P analyzing-jax-launch-overhead/scripts/scratch_layout.py references
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import operator
import os
import re
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

from tracekit.base import StepError
from tracekit.trace_reader import no_constant  # NaN, Infinity: no JSON number
from tracekit.trace_rules import printable

csv.field_size_limit(1 << 30)  # gaps.csv host_events cells of long gaps are long

LABELS = ("measured", "read", "inferred", "inferred, not run")
# No file of the scratch folder is read past this size: the longest table (rows.csv of a
# million-event trace, kernels.csv of ten times the seed) is a few hundred MB.
MAX_SCRATCH_BYTES = 4 << 30


def open_file(path, binary: bool = False, limit: int = MAX_SCRATCH_BYTES):
    """A scratch file (or a report) opened for reading only where it is a regular file of at
    most `limit` bytes: a FIFO, a device (a link to /dev/zero), a folder or a file too large is
    an OSError saying so, never a read that waits for ever or fills memory. Text as UTF-8 with
    csv's newline handling."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens without waiting for a writer
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{path} is not a regular file")
        if st.st_size > limit:
            raise OSError(f"{path} is {st.st_size:,} bytes, more than the {limit:,} read")
        os.set_blocking(fd, True)
        return open(fd, "rb") if binary else open(fd, newline="", encoding="utf-8")
    except BaseException:
        os.close(fd)
        raise


def read_file(path, limit: int = MAX_SCRATCH_BYTES) -> str:
    """The text of a scratch file or report (open_file's rules)."""
    with open_file(path, limit=limit) as fh:
        return fh.read()


class ScratchError(Exception):
    """A table or column that is not declared, or a result figure that disagrees with its
    declaration: a defect of the bundle, never of the user's input."""


class TableError(StepError):
    """A table in the scratch folder is not the one its producer writes (a column missing, a
    row cut short, a cell that is not a number): one sentence naming the producer to run again
    (exit 1)."""


@dataclass(frozen=True)
class Column:
    name: str
    unit: str          # us, ps, pct, count, bytes, flop, flop/s, bytes/s, flop/byte, ratio, s;
                       # "" text
    label: str         # measured | read | inferred | "" (a key or text, not a figure)
    meaning: str
    at_most: str = ""  # its physical limit: a number, or another column of the same row


@dataclass(frozen=True)
class Figure:
    """A figure a report may quote from a result JSON's `figures`: {value, unit, label}."""
    name: str
    unit: str
    label: str
    meaning: str


@dataclass(frozen=True)
class Table:
    file: str
    producer: str
    row: str           # what one row is
    order: str         # the row order
    columns: tuple[Column, ...]
    notes: str = ""    # Markdown after the column list

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]


@dataclass(frozen=True)
class File:
    file: str
    producer: str
    kind: str          # json, text, svg, html, markdown, folder
    what: str          # one line
    fields: str = ""   # Markdown: the fields, what they mean
    figures: tuple[Figure, ...] = field(default=())


# ---------------------------------------------------------------- declarations

# How a page writes a declared unit, and the end of a column's name that states it (the naming
# rule of the layout document: gpu_us, run_bytes, achieved_flop_per_s); a unit not here (count,
# ratio, s) is written with no symbol.
UNIT_SYMBOLS = {"us": ("µs", "_us"), "ps": ("ps", "_ps"), "ms": ("ms", "_ms"),
                "pct": ("%", "_pct"), "bytes": ("B", "_bytes"), "flop": ("FLOP", "_flops"),
                "flop/s": ("FLOP/s", "_flop_per_s"), "bytes/s": ("B/s", "_bytes_per_s"),
                "flop/byte": ("FLOP/B", "_flop_per_byte")}


def col(name: str, unit: str, label: str, meaning: str, at_most: str = "") -> Column:
    return Column(name, unit, label, meaning, at_most)


KIND_WORDS = {"json": "A result (JSON)", "text": "Text", "svg": "A picture (SVG)",
              "html": "A page (HTML)", "markdown": "Markdown", "folder": "A folder"}


TABLES: dict[str, Table] = {}
FILES: dict[str, File] = {}
DECLARED: dict[str, Table | File] = {}  # both, in declaration order (the document's order)


def declare(*items) -> None:
    """Declare tables and files, once each; every label one of LABELS (empty for a key or a
    text column)."""
    for it in items:
        if it.file in DECLARED:
            raise ScratchError(f"{it.file} is declared twice")
        if isinstance(it, File) and it.kind not in KIND_WORDS:
            raise ScratchError(f"{it.file}: the kind {it.kind!r} is none of {list(KIND_WORDS)}")
        for c in getattr(it, "columns", ()) + getattr(it, "figures", ()):
            if c.label not in LABELS + (("",) if isinstance(c, Column) else ()):
                raise ScratchError(f"{it.file}: {c.name} has the label {c.label!r}")
        DECLARED[it.file] = it
        (TABLES if isinstance(it, Table) else FILES)[it.file] = it


# ---------------------------------------------------------------- lookup

def table(file: str) -> Table:
    t = TABLES.get(file)
    if t is None:
        raise ScratchError(f"{file} is not a declared scratch table")
    return t


def columns(file: str) -> list[str]:
    """The declared header of a table, in order."""
    return table(file).names


def column(file: str, name: str) -> Column:
    for c in table(file).columns:
        if c.name == name:
            return c
    raise ScratchError(f"{file} declares no column {name}")


def result(file: str) -> File:
    f = FILES.get(file)
    if f is None:
        raise ScratchError(f"{file} is not a declared scratch file")
    return f


def figure_of(file: str, name: str) -> Figure | None:
    return next((f for f in result(file).figures if f.name == name), None)


# ---------------------------------------------------------------- writers

def quote(value) -> str:
    v = "" if value is None else str(value)
    if any(c in v for c in ',"\n\r'):
        return '"' + v.replace('"', '""') + '"'
    return v


def header(file: str) -> str:
    """The header line of a declared table (for a producer that formats its rows itself)."""
    return ",".join(columns(file)) + "\n"


def path_of(folder: Path, file: str, stands_for: str = "") -> Path:
    """Where the declared `file` goes under `folder`; `stands_for`: the scratch sub-folder that
    `folder` is written in place of (a producer's temporary copy of attribution/)."""
    rel = file.removeprefix(stands_for + "/") if stands_for else file
    return Path(folder) / rel


# Figures that write_table withheld (a cell past its column's declared limit, `at_most`) since
# the last write_result, which writes them into its result's `withheld` for the trust list.
WITHHELD: list[str] = []
LIMIT_SLACK = 1e-6  # relative: a figure rounded to its printed decimals is not past its limit


# Key columns that hold integers where they can (a step number, a GPU ordinal, a stream or
# program id); "CPU" or "(outside programs)" stay text.
INT_KEYS = frozenset({"step", "device", "stream", "program_id"})


def parse(col: Column, cell):
    """A cell as its declaration reads it: a figure (a column with a unit) as a float, a count
    as an int, an empty one None; an integer key as an int; text as written."""
    if cell is None or cell == "":
        return None if col.unit else ""
    if col.unit:
        x = number(cell)
        if x is None:
            raise ValueError(f"its {col.name} {cell!r} is not a number")
        return int(x) if col.unit == "count" and x.is_integer() else x
    if col.name in INT_KEYS and cell.lstrip("-").isdigit():
        return int(cell)
    return cell


def number(v, default=None) -> float | None:
    """A table cell or a result's value as a finite float; `default` for an empty cell, a
    boolean, NaN, an infinity or anything that is not a number (the one number parser)."""
    if isinstance(v, bool) or v is None or v == "":
        return default
    try:
        x = float(v)
    except (TypeError, ValueError):
        return default
    return x if math.isfinite(x) else default


def past_limits(file: str, row) -> list[tuple[int, str, float, float, str]]:
    """The cells of one row (cells in the declared order) past their column's declared limit:
    (index, column, value, limit, what the limit is)."""
    t = table(file)
    out = []
    for i, c in enumerate(t.columns):
        if not c.at_most or i >= len(row):
            continue
        v = number(row[i])
        if v is None:
            continue
        limit, what = number(c.at_most), c.at_most
        if limit is None and c.at_most in t.names:
            limit = number(row[t.names.index(c.at_most)])
        if limit is not None and v > limit * (1 + LIMIT_SLACK) + 1e-9:
            out.append((i, c.name, v, limit, what))
    return out


def _withhold(file: str, row, first_key: str):
    """The row with every cell past its limit emptied (each said in WITHHELD); the row itself
    where none is."""
    bad = past_limits(file, row)
    if not bad:
        return row
    row = list(row)
    for i, name, v, limit, what in bad:
        row[i] = ""
        WITHHELD.append(f"{file} {first_key}: {name} {v:.6g} is past its physical limit "
                        f"({what} = {limit:.6g}) and is withheld, a counting error to find")
    return row


def write_table(folder: Path, file: str, rows, stands_for: str = "") -> int:
    """The declared table `file` under `folder` (path_of): its header, then `rows` (sequences of
    cells in the declared order, streamed in blocks); returns the row count. A row of another
    width is a defect of the producer (checked on the first row: the rows of one table share a
    shape). A cell past its column's declared limit (`at_most`) is written empty and said in
    WITHHELD: a figure past a physical limit is never published; nor is one (a column with a unit)
    that is not a finite number (NaN, an infinity): written empty, their count in WITHHELD."""
    names = columns(file)
    limited = any(c.at_most for c in table(file).columns)
    path = path_of(folder, file, stands_for)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    nonfinite = [0]
    figure = [bool(c.unit) for c in table(file).columns]  # text columns are written as given

    def cell(v, is_figure) -> str:
        if is_figure and (type(v) is float and not math.isfinite(v)
                          or type(v) is str and v in _NONFINITE_TEXT):
            nonfinite[0] += 1
            return ""
        return quote(v)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        fh.write(",".join(names) + "\n")
        buf = []
        for r in rows:
            if n == 0 and len(r) != len(names):
                raise ScratchError(f"{file}: a row of {len(r)} cells for {len(names)} columns")
            if limited:
                r = _withhold(file, r, " ".join(str(x) for x in r[:2]))
            buf.append(",".join(map(cell, r, figure)) + "\n")
            n += 1
            if len(buf) >= 10_000:
                fh.write("".join(buf))
                buf.clear()
        fh.write("".join(buf))
    if nonfinite[0]:
        WITHHELD.append(f"{file}: {nonfinite[0]} cell(s) that are not finite numbers (NaN or "
                        "infinite: a division by zero to find) are withheld, written empty")
    return n


# a figure formatted before it is written ("{:.3f}" of NaN): the text of no finite number
_NONFINITE_TEXT = frozenset({"nan", "-nan", "inf", "-inf", "NaN", "Infinity", "-Infinity"})


def check_figures(file: str, data: dict) -> None:
    """Every figure of a result's `figures` is declared for that file, with the unit and label
    it is written with: one figure, one label."""
    figs = data.get("figures")
    if not isinstance(figs, dict):
        return
    for name, v in figs.items():
        if not (isinstance(v, dict) and "label" in v):
            continue
        decl = figure_of(file, name)
        if decl is None:
            raise ScratchError(f"{file}: figure {name} is not declared")
        if v.get("label") != decl.label or v.get("unit") != decl.unit:
            raise ScratchError(f"{file}: figure {name} written as {v.get('unit')}, "
                               f"{v.get('label')}; declared {decl.unit}, {decl.label}")


def result_text(file: str, data: dict, **dumps) -> str:
    """A declared result as the text every result file holds: sorted keys, one-space indent."""
    result(file)
    check_figures(file, data)
    return json.dumps(_finite_only(data), indent=1, sort_keys=True, **dumps) + "\n"


def _finite_only(v):
    """A result with every float that is not finite (NaN, an infinity) written as null: JSON
    has no such number, and no figure of the bundle's is one."""
    if type(v) is float:
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _finite_only(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_finite_only(x) for x in v]
    return v


def write_result(folder: Path, file: str, data: dict, stands_for: str = "", **dumps) -> int:
    """Write the declared result `file` under `folder` (path_of), with the figures its tables
    withheld since the last result (`withheld`, for the trust list); returns 1 (one result)."""
    if WITHHELD:
        data = {**data, "withheld": list(data.get("withheld", [])) + WITHHELD}
        WITHHELD.clear()
    path = path_of(folder, file, stands_for)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(result_text(file, data, **dumps), encoding="utf-8")
    return 1


def figure(value, unit: str, label: str, rng: dict | None = None,
           decimals: int | None = None) -> dict:
    """A report figure as a result holds it: {value, unit, label}, with min and max where `rng`
    gives them; `decimals` rounds all three."""
    out = {"value": value, "unit": unit, "label": label}
    if rng:
        out["min"], out["max"] = rng["min"], rng["max"]
    if decimals is not None:
        for k in ("value", "min", "max"):
            if k in out:
                out[k] = round(out[k], decimals)
    return out


# ---------------------------------------------------------------- reader

# Under the tests (JAXTRACE_SCRATCH_STRICT=1, set by tests/conftest.py for every script they
# run), each row read through Scratch.rows or records refuses a column its table does not
# declare: every column any reader asks for is declared. Off elsewhere: plain dicts, no cost.
STRICT = os.environ.get("JAXTRACE_SCRATCH_STRICT") == "1"


def records(folder: Path, file: str):
    """The rows of the declared table `file` under `folder` as dicts, streamed (a table of
    millions of rows is never held whole); None when the file is not there."""
    table(file)
    path = Path(folder) / file
    if not path.is_file():
        return None
    return _records(path, file)


def _records(path: Path, file: str):
    try:
        with open_file(path) as fh:
            if STRICT:
                for r in csv.DictReader(fh):
                    yield DeclaredRow(file, r)
            else:
                yield from csv.DictReader(fh)
    except (UnicodeDecodeError, csv.Error) as exc:
        raise _unreadable(path, file, exc) from None


def _unreadable(path: Path, file: str, exc) -> TableError:
    """A table that is not text CSV (junk, another encoding), in one sentence."""
    producer = table(file).producer
    what = "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else f"not CSV ({exc})"
    return TableError(f"{path} is {what}, so not the table {producer} writes: run {producer} "
                      "again, or delete it")


class DeclaredRow(dict):
    """A row that refuses a column its table does not declare (ScratchError)."""

    __slots__ = ("file",)

    def __init__(self, file: str, row: dict):
        super().__init__(row)
        self.file = file

    def __getitem__(self, key):
        column(self.file, key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        column(self.file, key)
        return super().get(key, default)


@contextlib.contextmanager
def lines(path: Path, file: str):
    """The text lines after the header of the declared table `file` at `path`, for a reader
    that splits them itself in a hot loop (an open file); None where the file is missing,
    unreadable or has another header (not its producer's: what needs it is refused)."""
    try:
        fh = open_file(path)
    except OSError:
        yield None
        return
    with fh:
        try:
            same = fh.readline() == header(file)
        except UnicodeDecodeError:
            same = False
        yield fh if same else None


def stream(folder: Path, file: str, names) -> object:
    """Yield each row of the declared table `file` under `folder` as a tuple of the cells of
    the columns `names` (each declared), in that order, streaming: a table of millions of rows
    is never held whole. TableError where the file cannot be read, lacks a column or has a row
    cut short."""
    for n in names:
        column(file, n)
    path = Path(folder) / file
    producer = table(file).producer
    try:
        fh = open_file(path)
    except OSError as exc:
        raise TableError(f"cannot read {path}: {exc.strerror or exc}") from exc
    with fh:
        reader = csv.reader(fh)
        try:
            header = next(reader, None) or []
        except (UnicodeDecodeError, csv.Error) as exc:
            raise _unreadable(path, file, exc) from None
        missing = [c for c in names if c not in header]
        if missing:
            raise TableError(f"{path} is not the table {producer} writes (it has no column "
                             f"{missing[0]}); run {producer} into this folder again, or delete it")
        idx = [header.index(c) for c in names]
        width = max(idx) + 1
        pick = operator.itemgetter(*idx) if len(idx) > 1 else (lambda row: (row[idx[0]],))
        try:
            for n, row in enumerate(reader, 2):
                if len(row) < width:
                    raise TableError(f"{path} line {n} has {len(row)} cells where the header "
                                     f"has {len(header)}: the table is cut or not {producer}'s")
                yield pick(row)
        except (UnicodeDecodeError, csv.Error) as exc:
            raise _unreadable(path, file, exc) from None


class Scratch:
    """A scratch folder's files, each read once; a missing or unreadable file reads as None.
    `rows` returns a table's rows as dicts; `values` one declared column of it."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self._cache: dict[str, object] = {}

    def json(self, file: str) -> dict | None:
        """A result (a JSON object); None when missing, unreadable, not an object or holding
        NaN or an infinity (no writer of the bundle's writes one: the file is not its)."""
        if file not in self._cache:
            try:
                d = json.loads(read_file(self.folder / file), parse_constant=no_constant)
            except (OSError, ValueError, RecursionError):
                d = None
            self._cache[file] = d if isinstance(d, dict) else None
        return self._cache[file]

    def rows(self, file: str, need=()) -> list[dict] | None:
        """A declared table's rows as dicts; None when missing or unreadable; TableError where a
        column of `need` is missing or a figure's cell (a column with a unit) is not a finite
        number (NaN, inf, text): the table is not its producer's, and none of it is read."""
        if need:
            return self._needing(file, need)
        if file not in self._cache:
            table(file)
            try:
                with open_file(self.folder / file) as fh:
                    rows = list(csv.DictReader(fh))
            except (OSError, UnicodeDecodeError, csv.Error):
                rows = None
            if rows:
                self._whole(file, rows)
            self._cache[file] = [DeclaredRow(file, r) for r in rows] if STRICT and rows \
                else rows
        return self._cache[file]

    def _whole(self, file: str, rows: list[dict]) -> None:
        """Every row as wide as the header (a row cut short, or one of more cells, is a table
        cut or not its producer's), every figure cell a finite number: else a TableError."""
        for n, r in enumerate(rows, 2):
            if None in r or None in r.values():
                raise TableError(f"{self.folder / file} line {n} has another number of cells "
                                 f"than its header: the table is cut or not "
                                 f"{table(file).producer}'s; run {table(file).producer} again")
        for c in table(file).columns:
            if not c.unit or c.name not in rows[0]:
                continue
            for n, r in enumerate(rows, 2):
                v = r[c.name]
                if v and number(v) is None:
                    raise TableError(f"{self.folder / file} is not the table "
                                     f"{table(file).producer} writes (line {n}: its {c.name} "
                                     f"{printable(str(v))[:40]!r} is not a finite number): run "
                                     f"{table(file).producer} again")

    def typed(self, file: str, need=()) -> list[dict] | None:
        """A declared table's rows, each cell as its column's declaration reads it (`parse`; a
        declared column the file lacks reads as None): the one reader of typed rows. None where
        the file is missing or unreadable; TableError where it is not its producer's (a column
        of `need` missing, a number that is not one)."""
        key = "typed:" + file
        rows = self._needing(file, need)
        if rows is None:
            return None
        got = set(rows[0]) if rows else set()
        if key not in self._cache:
            cols = table(file).columns
            try:
                self._cache[key] = [{c.name: parse(c, r.get(c.name)) if c.name in got else None
                                     for c in cols} for r in rows]
            except ValueError as exc:
                raise TableError(f"{self.folder / file} is not the table "
                                 f"{table(file).producer} writes ({exc}): run it "
                                 "again") from None
        return self._cache[key]

    def _needing(self, file: str, need) -> list[dict] | None:
        rows = self.rows(file)
        lacking = [n for n in need if rows and n not in rows[0]]
        if lacking:
            raise TableError(f"{self.folder / file} is not the table {table(file).producer} "
                             f"writes (no {', '.join(lacking)}): run {table(file).producer} "
                             "again")
        return rows

    def values(self, file: str, name: str) -> list[str] | None:
        column(file, name)
        rows = self.rows(file)
        return None if rows is None else [r.get(name, "") for r in rows]


# ---------------------------------------------------------------- hand-offs between steps

# What one step computed from a capture file and a later step needs again (per-stream totals,
# step 1's model checks) is handed on in `.handoff/<name>.json`, keyed to the source files'
# resolved paths, sizes and modification times: a later step reads it only when every source
# is the very file it would read itself, else computes it from the capture as it would alone.
HANDOFF = ".handoff"


def own_dir(path: Path) -> Path:
    """`path` as a folder of the scratch folder's own: a symbolic link planted in its place is
    replaced by a real folder, never followed (it would send the files elsewhere)."""
    path = Path(path)
    if path.is_symlink():
        path.unlink()
    path.mkdir(parents=True, exist_ok=True)
    return path


def identity(path) -> dict | None:
    """A capture file as the one record of which input a table or hand-off was made from: its
    resolved path, size and modification time; None where it cannot be read."""
    try:
        p = Path(path).resolve()
        st = p.stat()
    except (OSError, TypeError, ValueError, RuntimeError):
        return None
    return {"file": str(p), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}


def written_for(recorded, path, base=None) -> bool:
    """The one rule of "were these tables written for this capture?": `recorded` (an identity
    record a result keeps) against the file `path` now: the same resolved file (a relative one
    resolved in `base`, the folder that recorded it), and its size and modification time where
    recorded. True where nothing is recorded or `path` is None (a folder made by hand, or no
    such file to compare with); False where the record is not one (a file that is no string)."""
    if not recorded or path is None:
        return True
    now = identity(path)
    if not isinstance(recorded, dict) or now is None:
        return False
    file = recorded.get("file")
    if not isinstance(file, str):
        return False
    if base is not None and not os.path.isabs(file):
        file = str((Path(base) / file).resolve())
    return file == now["file"] and all(
        recorded.get(k) in (None, now[k]) for k in ("bytes", "mtime_ns"))


def recorded_file(recorded) -> str:
    """The file an identity record names, for a sentence (whatever the record holds)."""
    file = recorded.get("file") if isinstance(recorded, dict) else recorded
    return printable(str(file))[:300]


def handoff_put(folder: Path, name: str, sources: list, payload: dict) -> None:
    """Hand `payload` (JSON-able) on under `name`, keyed to the files `sources`; written whole
    (a rename) or not at all; nothing when a source cannot be identified."""
    keys = [identity(p) for p in sources]
    if None in keys or not keys:
        return
    folder = own_dir(Path(folder) / HANDOFF)
    tmp = folder / f".{name}.{os.getpid()}.tmp"
    try:
        tmp.write_text(json.dumps({"sources": keys, "payload": payload}), encoding="utf-8")
        os.replace(tmp, folder / f"{name}.json")
    finally:
        if tmp.exists():
            tmp.unlink()


def handoff_get(folder: Path, name: str, sources: list, shape=None):
    """The payload handed on under `name` when its sources are the files `sources` as they are
    now (same resolved paths, sizes, modification times), through `shape` (a function that
    takes it apart as the reader needs it and raises KeyError, TypeError or ValueError where it
    is not what was handed on); None when it is missing, unreadable, not of that shape or was
    made from other files: the reader then reads the capture itself."""
    keys = [identity(p) for p in sources]
    if None in keys or not keys:
        return None
    try:
        d = json.loads(read_file(Path(folder) / HANDOFF / f"{name}.json"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(d, dict) or d.get("sources") != keys or not isinstance(
            d.get("payload"), dict):
        return None
    try:
        return shape(d["payload"]) if shape else d["payload"]
    except (KeyError, TypeError, ValueError):
        return None


# ---------------------------------------------------------------- one capture per folder

# Every table in a scratch folder belongs to one capture: each step that reads a capture file
# claims the folder for it first (`.handoff/capture.json`: each file's identity), and refuses a
# folder claimed by another (its tables would stand beside the other capture's and be read
# together). investigate.py starts a job by emptying a folder claimed by another capture.
CLAIM = "capture"


def _kind(path) -> str:
    name = Path(path).name
    return "xplane" if name.endswith(".xplane.pb") else "trace"


def claimed(folder: Path) -> dict:
    """The capture files the folder's tables were made from (kind -> identity); {} for none."""
    try:
        d = json.loads(read_file(Path(folder) / HANDOFF / f"{CLAIM}.json"))
    except (OSError, ValueError, RecursionError):
        return {}
    return d if isinstance(d, dict) else {}


def other_capture(folder: Path, sources: list) -> str:
    """Where the folder holds the tables of another capture than `sources`, the sentence that
    refuses it (naming that capture's file as claimed); else ''."""
    have = claimed(folder)
    for p in sources:
        was, now = have.get(_kind(p)), identity(p)
        if was and now and was != now:
            return (f"{folder} holds the tables of another capture ({was.get('file')}, or the "
                    "same file since changed): write into another --out, or empty it first "
                    "(investigate.py does)")
    return ""


def claim(folder: Path, sources: list) -> None:
    """Record the folder's claim for the capture files `sources` (see CLAIM); the caller has
    checked other_capture."""
    have = claimed(folder)
    for p in sources:
        if identity(p) is not None:
            have[_kind(p)] = identity(p)
    target = own_dir(Path(folder) / HANDOFF)
    tmp = target / f".{CLAIM}.{os.getpid()}.tmp"
    try:
        tmp.write_text(json.dumps(have), encoding="utf-8")
        os.replace(tmp, target / f"{CLAIM}.json")
    finally:
        if tmp.exists():
            tmp.unlink()


def outputs(folder: Path) -> list[Path]:
    """The declared files and folders present at the top of `folder` (every step's output, the
    hand-offs, the logs): what investigate.py removes before a job on another capture."""
    folder = Path(folder)
    out = set()
    for name in DECLARED:
        # the top of each declared path (attribution/, logs/, .handoff/, a file); a pattern's
        # own top is a name (<host>/): never removed
        top = name.split("/", 1)[0]
        if "<" not in top and (folder / top).exists():
            out.add(folder / top)
    return sorted(out)


def remove_produced(folder: Path, script: str) -> list[str]:
    """Remove the tables and files `script` writes (as declared: a pattern's names matched,
    <host>/ folders, logs and hand-offs never) from `folder`; the names removed. What
    investigate.py does when a step fails, so that no later step reads what it wrote before."""
    folder, removed = Path(folder), []
    for name, item in DECLARED.items():
        if item.producer != script or name.startswith(("logs/", ".handoff/", "<")):
            continue
        for path in sorted(folder.glob(re.sub(r"<[^>]*>", "*", name.rstrip("/")))):
            if path.is_symlink() or path.is_file():
                path.unlink()
            elif path.is_dir():
                shutil.rmtree(path)
            removed.append(path.relative_to(folder).as_posix())
    return removed


# ---------------------------------------------------------------- the layout document

def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_table(t: Table) -> list[str]:
    out = [f"### `{t.file}` ({t.producer})", f"One row per {t.row}; rows by {t.order}.", "",
           "| column | unit | label | meaning |", "|---|---|---|---|"]
    out += [f"| `{c.name}` | {c.unit} | {c.label} | {_cell(c.meaning)}"
            f"{f' (at most `{c.at_most}`)' if c.at_most else ''} |" for c in t.columns]
    if t.notes:
        out += ["", t.notes.strip()]
    return out + [""]


def render_file(f: File) -> list[str]:
    out = [f"### `{f.file}` ({f.producer})", f"{KIND_WORDS[f.kind]}: {f.what}"]
    if f.fields:
        out += ["", f.fields.strip()]
    if f.figures:
        out += ["", "| figure | unit | label | meaning |", "|---|---|---|---|"]
        out += [f"| `{g.name}` | {g.unit} | {g.label} | {_cell(g.meaning)} |" for g in f.figures]
    return out + [""]


# The layout document's parts, one per step (or per kind of work): the producer's script -> the
# part's file under references/scratch-layout/ and its title.
LAYOUT_PARTS = {
    "capture_info.py": ("step0-capture.md", "Step 0: what the capture holds"),
    "skip_stats.py": ("step1-verdict.md", "Step 1: verdict and host-side causes"),
    "reconcile.py": ("step2-reconciliation.md", "Step 2: reconciliation"),
    "swimlanes.py": ("step3-swimlanes.md", "Step 3: swimlanes"),
    "attribute_kernels.py": ("step4-attribution.md", "Step 4: kernel, instruction, Python line"),
    "roofline.py": ("step5-roofline.md", "Step 5: roofline"),
    "changes.py": ("step6-changes.md", "Step 6: changes"),
    "trust.py": ("step7-trust.md", "Step 7: trust list"),
    "report_draft.py": ("report.md", "The report: draft, fact check, page"),
    "factcheck.py": ("report.md", ""), "the report's writer": ("report.md", ""),
    "build_page.py": ("report.md", ""),
    "compare.py": ("compare.md", "Before and after"),
    "investigate.py": ("job.md", "The job: logs and hand-offs"),
    "per_host.py": ("hosts.md", "Several hosts"), "cross_host.py": ("hosts.md", ""),
}
LAYOUT_DIR = "scratch-layout"


def layout_part(item) -> str:
    """The part of the layout document a declared file is in (by its first producer)."""
    return LAYOUT_PARTS[item.producer.split(",")[0].strip()][0]


def render_layout() -> dict[str, str]:
    """references/scratch-layout.md (the rules, the file list with each file's part, the joins
    and the rules for bad input) and references/scratch-layout/<part>.md, one per step: each
    file declared, in declaration order. Keys: paths relative to references/."""
    items = list(DECLARED.values())
    out = [INTRO.strip(), "", "## Files", "",
           "| file | producer | one row per | order | in |", "|---|---|---|---|---|"]
    for it in items:
        part = f"[{layout_part(it)}]({LAYOUT_DIR}/{layout_part(it)})"
        if isinstance(it, Table):
            out.append(f"| `{it.file}` | `{it.producer}` | {_cell(it.row)} | {_cell(it.order)} "
                       f"| {part} |")
        else:
            out.append(f"| `{it.file}` | `{it.producer}` | ({it.kind}) {_cell(it.what)} | "
                       f"| {part} |")
    out.append("")
    docs = {"scratch-layout.md": "\n".join(out + [OUTRO.strip(), ""])}
    titles = {f: title for f, title in LAYOUT_PARTS.values() if title}
    parts: dict[str, list] = {}
    for it in items:
        parts.setdefault(layout_part(it), []).append(it)
    for part, its in parts.items():
        docs[f"{LAYOUT_DIR}/{part}"] = "\n".join(
            [f"# {titles[part]}: its files", "", "Generated from `tracekit/scratch.py` (see "
             "`../scratch-layout.md`: the rules every file follows, and how the files join).",
             "", "## Contents"] + [f"- `{it.file}`" for it in its] + [""]
            + [ln for it in its for ln in (render_table(it) if isinstance(it, Table)
                                           else render_file(it))])
    return docs


# ---------------------------------------------------------------- the declarations

INTRO = r"""
# The scratch folder: every file the tools write

Generated from `analyzing-jax-launch-overhead/scripts/tracekit/scratch.py`, where each file is
declared once; do not edit it by hand: change the declaration, then, in a checkout of the bundle,
regenerate it with
`python3 -P analyzing-jax-launch-overhead/scripts/scratch_layout.py references`
(a test keeps them equal). Each file's columns are in its step's part, `scratch-layout/<part>.md`
(the last column below). Each table below lists its columns with their unit and label;
a result file lists its figures with their one label.

Read this when you join two tables, when a column's unit is unclear, or before a script writes a
new file (its issue declares the file in `scratch.py` first, then the code).

The agent runs the scripts in one scratch folder (the current directory, or `--out DIR`). Nothing
is ever written into the user's capture folder.

## Contents
- Rules for every JSON result
- Rules for every CSV
- Files (each with its part: `scratch-layout/step0-capture.md` to `step7-trust.md`, `report.md`,
  `compare.md`, `job.md`, `hosts.md`)
- The cross-host summary
- How the files join
- Bad input

## Rules for every JSON result
Each step writes its result as `<step>.json` beside its tables: what its `summary.txt` (or, for
`capture_info.py`, its printout) says, as data. Later steps read the JSON, never the prose.
Every result has `step`, `status`, `checks` or the step's own verdict, `refusals` (sentences
"cannot ... because ...") and `notes` where it has any; a figure a report may quote is
`{value, unit, label}` (with `min`/`max` where it has a range), `label` one of `measured`,
`read`, `inferred`. Files are written whole or not at all (a temporary name, then a rename).
A result's `figures` are listed under it below with the one unit and label each is written with.

## Rules for every CSV
- UTF-8, comma-separated, one header row, `\n` line ends, columns in the order listed here, rows
  in the order stated for each file (deterministic).
- Column names are snake_case and carry their unit: `_us` microseconds, `_ps` picoseconds,
  `pct_of_<denominator>` percent (0–100), `_bytes`, `_count` where the name would otherwise be
  ambiguous. Each column below gives its unit (`us`, `ps`, `pct`, `count`, `bytes`, `flop`,
  `flop/s`, `bytes/s`, `flop/byte`, `ratio`, `s`; empty for keys and text) and its label
  (`measured`, `read`, `inferred`, `inferred, not run`; empty for keys, text and 0/1 flags).
- A percentage names its denominator, in CSV and JSON alike: `pct_of_<denominator>` is the row's
  own quantity as a share, `<what>_pct_of_<denominator>` a named part of it. The denominators:
  `gpu_time` all GPU event time of the capture (kernels, memcpys, memsets: step 4's
  `kernel_time_us`, `trust.json` `gpu_time_us`); `attributed` the kernel time attributed to an
  instruction in the programs the table covers (the sum of `attribution/ops.csv` `gpu_us`: every
  program by default, the one program of `--program ID` when narrowed; `roofline.csv` likewise);
  `all_attributed` the kernel time attributed to an instruction in every program; `group` the
  GPU time of the row's group in `attribution/how.csv` (its program, or all programs for `all`);
  `step` a step's time (in `steps.csv` and `skip_stats.json` its duration `dur_us`, in
  `changes.csv` and `changes.json` the window `step_us`, start to the next step's start);
  `period` the step period (`period_us`); `span` a stream's analysed time (`span_us`); `compute`
  the median step's compute time on its bounding GPU; `ceiling` the attainable ceiling at the
  instruction's intensity; `ours` this bundle's own count; `gpu_events` the number of GPU events.
- Times (`*_start_us`, `*_end_us`) are from the profile start, as in the capture; `_us` values
  have 3 decimals (nanoseconds), `pct_of_*` values 2 decimals.
- An empty cell means "does not apply or not known"; it never means zero. Where a reason matters,
  a neighbouring column says it (for example `join`, `match`).
- Keys: `device` is the GPU ordinal of `/device:GPU:<n>` (or `CPU` for XLA:CPU thunks);
  `stream` is the stream (xplane line) id; `step` is the step number from `steps.csv`;
  `program_id` is XLA's program (module) id; `instruction` is an HLO instruction name of that
  program; `correlation_id` is the tracer's join key between a launch and a GPU event.
"""

declare(File(
    "capture_info.json", "capture_info.py", "json",
    "the inventory: files, GPUs with their json/xplane event counts, programs, checks, refusals",
    fields="""
- `step` (`capture_info`), `status` (`done`), `capture` (`run_dir`, `host`, `hosts`, `notes`,
  `trace` and `xplane`: each file's identity record, `file`, `bytes`, `mtime_ns`, or null),
  `xplane` and `trace` (`file`, `error`: null, or why it could not be read).
- `gpus`: one per device plane or trace process (a GPU, or a TPU core): `ordinal`, `kind`
  (`GPU` or `TPU`), `idle`, `xplane_events`, `trace_events` (null where that file lacks it; a
  TPU's `Async XLA Ops` line, the xplane's alone, is not counted), `agree` (null where only
  one file has it), `device` (the plane's device stats), `lines` (`id`, `name`, `events`).
- `device`: the device record, null without a readable xplane: `kind` (`GPU`, `TPU`, `CPU` or
  null), `model`, `cores` (device planes), `peaks` (null for a GPU: step 5's ceilings; for a
  TPU name -> `{value, unit, label: read, source}`, each read from the device plane's stats:
  `mxu_flops_per_s`, `hbm_bytes_per_s` and the on-chip memories' read and write bandwidths),
  `versions` (null for a GPU; a TPU's `jax`, `jaxlib`, `tpu_runtime`); a TPU's also
  `generation` (`v5 lite`) and `megacore`.
- `cpu_thunk_events` (CPU captures), `host` (`lines`, `xplane_events`, `trace_events`),
  `profile_ms` (the profile's wall clock), `repeated_stat_events`.
- `profiler`: null where the host plane records no profiler call, else `start_trace_ms`,
  `stop_trace_ms` (the profiler's own start-up and stop on the host, `trace_rules.
  PROFILER_CALL_RE`; null where absent) and `between_ms` (from the end of the start-up to the
  stop: the traced work).
- `gpu_model`: `model` (the GPU the device stats identify, peaks.md section 4; null where none
  is), `basis`, `why` (null, or why it is not identified), `devices` (GPU planes with device
  stats); null without a readable xplane, and on a TPU (`device` names the chip).
- `programs`: null (no readable xplane), or one per program: `program_id`, `entry`, `module`,
  `computations`, `instructions`, `while_loops` (known trip counts, null where unknown), `error`
  (null, or why its HLO could not be read: that program alone is refused).
- `checks`: per active GPU `{name: "GPU events per device: json = xplane", device, status,
  xplane, trace}`, `status` one of `pass`, `fail`, `not checkable`.
- `refusals`: sentences ("cannot read program ... because ...", "cannot attribute kernels ...
  because the xplane holds no HLO").
"""))

declare(File(
    "swimlanes.svg", "swimlanes.py", "svg",
    "one step: a lane per GPU x stream and per launching host thread, the straggler marked",
    fields="""
One step (or the --start/--end window, us from the profile start) on one time axis in us, 1600 px
wide. Lanes: each GPU x stream with events in the step, labelled `GPU n · <stream_name> · <role>`
(`role` compute / collective / copy: the category with the most time in the step,
`trace_rules.stream_role`; ` · critical` and bold for `steps.csv critical_stream`); under each
GPU the host threads that launch for it alone, then host threads serving several GPUs. Bars:
kernels by kind (compute, GEMM, collective hatched, memcpy dotted, memset lined; a purple strip
marks kernels inside a graph); launch / graph launch (striped) / other host calls on host lanes;
orange bars on host lanes are `gaps.csv` gaps whose `host_events` are named (largest as label);
thin bands under critical lanes are gaps by cause. Dashed lines: the step's begin and end; a tick
at each GPU's end; the straggler in red (a tie in amber). Events narrower than one pixel (more
where over 8,000 bars) merge into one bar per lane and kind; every bar's tooltip gives name,
instruction (from `attribution/kernels.csv` when present), duration and start, or the merged
count. No scripts, no external files: it opens in a browser as it is.
"""))

declare(Table(
    "stragglers.csv", "swimlanes.py",
    row="analysed step x GPU (as `steps.csv`)", order="step, device",
    columns=(
        col("step", "", "", "the step (`steps.csv`)"),
        col("device", "", "", "the GPU"),
        col("end_us", "us", "measured", "the GPU's end in the step: `steps.csv end_us`"),
        col("lag_us", "us", "measured",
            "end − the first compared GPU's end in that step (negative for a GPU that is not "
            "compared and ends earlier)"),
        col("last_kernel", "", "", "the GPU's last-ending event"),
        col("last_stretch", "", "",
            "`collective` (it ends in a collective kernel; the stretch is that kernel), else what "
            "filled most of the time from its last collective's end (or the step start) to its "
            "end: `compute`, `copy` (busy time, all streams), or idle time by the cause of the "
            "critical-stream gap it lies in: `host_late`, `device_wait`, `unknown`, `idle` (no "
            "gap of 1 us recorded)"),
        col("stretch_start_us", "us", "measured", "the start of that stretch"),
        col("stretch_us", "us", "measured", "the length of that stretch"),
        col("finishes_last", "", "",
            "1 for every GPU ending within step 1's straggler margin of the latest (the larger "
            "of 5 us and 0.5% of the step, `trace_rules.straggler_margin_ps`); several 1s in a "
            "step are a tie, as step 1 says it"),
        col("compared", "", "",
            "1 for the GPUs of step 1's compared GPU group (`skip_stats.json` `gpu_groups` "
            "`compared`: GPUs that run the same programs), 0 for GPUs doing other work (other "
            "programs, argument copies only, a pipeline stage of its own), which never finish "
            "last"),
    )))

declare(File(
    "swimlanes.json", "swimlanes.py", "json",
    "the step's result: step chosen and why, window, lanes, merged bars, straggler, refusals",
    fields="""
- `step` (`swimlanes`), `status` (`done`), `capture` (`run`, `host`), `inputs` (`step1`:
  `read` | `ran`; `attribution`: null or `{file, kernels_alone, joined}`: the kernels drawn as
  bars of their own, and of them those that found their instruction in step 4's kernels.csv by
  device, stream and start: their tooltips name it; the others' do not).
- `chosen`: `step`, `why` (sentence), `source`, `partial`, `whole_capture`, `start_us`, `end_us`,
  `duration_us` (figure, measured).
- `window`: `start_us`, `end_us`, `zoomed`.
- `lanes`: `{id, kind: gpu, device, stream, stream_name, role, critical, in_step, events, label}`
  or `{id, kind: host, thread, role, devices, events, gaps, label}`, in drawing order.
- `merged`: `events`, `bars`, `pixel_us`, `below_px`; `drawn`: `gpu_events`, `host_calls`,
  `alone`, `gaps`, `gap_bars`.
- `straggler`: null (one GPU, or no steps: see `notes`/`refusals`) or `gpus` (each `device`,
  `end_us`, `last_kernel`, `last_stretch`, `stretch_start_us`, `stretch_us`), `tie`, `first_gpu`,
  `next_gpu`, `lag_us`, `margin_us` (figures, measured; margin = behind the next GPU),
  `tie_within_us`, `sentence`.
- `steps_last`: per analysed step `{step, gpus, tie, spread_us}`.
- `notes`, `refusals`, `tables` (`swimlanes.svg`: bytes, `stragglers.csv`: rows).
"""))

declare(Table(
    "roofline.csv", "roofline.py",
    row="(program, instruction) with kernel time, every program in `attribution/ops.csv`",
    order="the order of `attribution/ops.csv`",
    columns=(
        col("program_id", "", "", "the program (from `attribution/ops.csv`)"),
        col("instruction", "", "", "the instruction (from `attribution/ops.csv`)"),
        col("opcode", "", "", "its opcode (from `attribution/ops.csv`)"),
        col("category", "", "", "its category (from `attribution/ops.csv`)"),
        col("kernels", "count", "measured",
            "its GPU events (from `attribution/ops.csv`, summed over executions and GPUs)"),
        col("runs", "count", "measured",
            "the program's executions counted by step 4 (`attribution/programs.csv` "
            "`executions`, summed over devices) x the known trip counts of enclosing while "
            "loops"),
        col("gpu_us", "us", "measured",
            "its kernel time (from `attribution/ops.csv`, summed over executions and GPUs)"),
        col("run_flops", "flop", "inferred", "FLOPs of one run, counted from the HLO"),
        col("run_bytes", "bytes", "inferred", "bytes of one run, counted from the HLO"),
        col("total_flops", "flop", "inferred", "`run_flops` x `runs`"),
        col("total_bytes", "bytes", "inferred", "`run_bytes` x `runs`"),
        col("method", "", "",
            "how it was costed: `shapes`, `shapes (copy: read + write)`, `shapes (collective: "
            "<rule>, per GPU)`, `fused computation`, `backend config`, or `not computable: "
            "<why>`"),
        col("dtype", "", "", "the matrix operand's (or result's) element type"),
        col("ceiling_dtype", "", "",
            "the `references/peaks.csv` ceiling that bounds its arithmetic (empty: no "
            "arithmetic, memory alone)"),
        col("intensity_flop_per_byte", "flop/byte", "inferred", "`run_flops` / `run_bytes`"),
        col("achieved_flop_per_s", "flop/s", "inferred", "`total_flops` / GPU time"),
        col("achieved_bytes_per_s", "bytes/s", "inferred", "`total_bytes` / GPU time"),
        col("compute_ceiling_flop_per_s", "flop/s", "read",
            "the compute ceiling of `ceiling_dtype`, from `references/peaks.csv` (a `derived` "
            "one is computed from vendor figures)"),
        col("compute_tag", "", "",
            "its tag: vendor, vendor-mirror, secondary, derived"),
        col("compute_source", "", "", "its source in `references/peaks.csv`"),
        col("memory_ceiling_bytes_per_s", "bytes/s", "read",
            "the memory bandwidth ceiling, from `references/peaks.csv`"),
        col("memory_tag", "", "", "its tag: vendor, vendor-mirror, secondary, derived"),
        col("memory_source", "", "", "its source in `references/peaks.csv`"),
        col("binding", "", "", "`compute` or `memory` at that intensity"),
        col("attainable_flop_per_s", "flop/s", "inferred",
            "min(compute, intensity x bandwidth)"),
        col("pct_of_ceiling", "pct", "inferred",
            "achieved / attainable (bytes/s over bandwidth where there are no FLOPs)", "100"),
        col("no_ceiling_why", "", "",
            "empty when a ceiling applies, else why not (`withheld: ...` where its measured "
            "time puts it past a physical limit: above its ceiling or faster than memory)"),
        col("work", "", "",
            "the kind of work: attention, attention backward (a work of its own: a forward is "
            "never held to a backward's rate), gemm, convolution, scatter (its updates land by "
            "index: never held to a reduction's rate), reduction, elementwise, data movement, "
            "copy, kernel or custom (empty where not computable)"),
        col("backend", "", "",
            "who generates its kernel: `library <custom call target>` (cuBLAS, hipBLASLt, "
            "cuDNN, Transformer Engine, ...), `triton` (a Triton fusion: XLA's GEMM fusions), "
            "another fusion emitter's kind, or `xla` (XLA's own emitters)"),
        col("best_same_work_pct", "pct", "inferred",
            "the best `pct_of_ceiling` this capture shows for the same `work`, ceiling and "
            "binding at a similar size (within 4x its FLOPs, compute-bound, or bytes, "
            "memory-bound), itself included: a target this GPU reached", "100"),
        col("best_same_work", "", "", "the instruction that reached it"),
        col("xprof_run_flops", "flop", "read",
            "XProf's hlo_stats FLOPs per run (read from XProf; its counts are inferred by its "
            "own rules)"),
        col("xprof_run_bytes", "bytes", "read",
            "XProf's hlo_stats bytes per run (read from XProf; its counts are inferred by its "
            "own rules)"),
        col("xprof_flops_diff_pct_of_ours", "pct", "inferred",
            "XProf's FLOPs minus ours, in percent of ours"),
        col("xprof_bytes_diff_pct_of_ours", "pct", "inferred",
            "XProf's bytes minus ours, in percent of ours"),
    ),
    notes="""
- The first five columns and `gpu_us`: from `attribution/ops.csv` (measured, summed over
  executions and GPUs), one row per ops.csv row: every program, each costed from its own HLO.
- The `*_ceiling_*`, `*_tag` and `*_source` columns come from `references/peaks.csv`: a ceiling is
  never measured.
- The `xprof_*` columns are filled where step 4 left its xplane copy and XProf lists the
  instruction (`--no-xprof` leaves them empty).
- Numbers have 6 significant digits; `pct_of_ceiling` 2 decimals.
"""))

declare(File(
    "roofline.json", "roofline.py", "json",
    "GPU and evidence, ceilings used with tags, not-computable time, trust list",
    fields="""
`step` (`roofline`), `status`, `capture`, `program` (`id`, `name`); `gpu`: `model` (null when
not recognised), `basis`, `devices`, `evidence` (the device stats used), `why`, `label`
(`inferred`: matched to a peaks.csv row; a TPU's `read`, its plane names it, with `kind`
`TPU`); `ceilings` used: `{ceiling, value, unit, tag, source, other_values, label}` (a TPU's
tag `capture`: read from its device plane, `source` the plane stat);
`xprof_ceiling` (never used: the capture's `memory_bandwidth` stat, and XProf's roofline_model
peaks `compute_flop_per_s`, `memory_bytes_per_s`, `device_type`, or a `note` why not); `status`
(`done`, or `refused` when the capture holds no HLO: then `program` is null, the table is empty
and there is no plot); `figures`:
`gpu_time_us`, `not_computable_us`, `no_ceiling_us`, `not_computable_pct_of_attributed`,
`executions` (the chosen program's, summed over GPUs), `executions_all_programs`;
`trust_list`, `refusals`, `notes`, `tables`; `xprof`: `rows_with_xprof`, `note` (why XProf's
figures are missing, or null).
""",
    figures=(
        Figure("gpu_time_us", "us", "measured",
               "the kernel time of the table's instructions (refused: all GPU event time)"),
        Figure("not_computable_us", "us", "measured",
               "of it, instructions whose FLOPs or bytes are not computable"),
        Figure("no_ceiling_us", "us", "measured", "of it, instructions no ceiling applies to"),
        Figure("not_computable_pct_of_attributed", "pct", "inferred",
               "`not_computable_us` as a share of `gpu_time_us`"),
        Figure("executions", "count", "measured",
               "the chosen program's executions, summed over GPUs"),
        Figure("executions_all_programs", "count", "measured",
               "every program's executions, summed over GPUs"),
    )))

declare(File(
    "roofline.svg", "roofline.py", "svg",
    "log-log roofline, one line per ceiling dtype, points per instruction",
    fields="""
Log-log: x arithmetic intensity (FLOP/byte), y achieved FLOP/s; per ceiling dtype a memory slope
and a flat compute line, the ridge point marked; points sized by GPU time and coloured by
category, the top 8 labelled, tooltips; the caption names the GPU, its evidence and each
ceiling with its tag and source. No scripts; escaped text.
"""))

declare(Table(
    "reconciliation.csv", "reconcile.py",
    row="check x GPU (x stream where it applies)", order="the checks' order, then device, stream",
    columns=(
        col("check", "", "", "the check's name (the list below)"),
        col("device", "", "", "the GPU; empty for a check that cannot run at all"),
        col("stream", "", "", "the stream, for the checks per GPU and stream"),
        col("status", "", "", "`pass`, `fail`, `not checkable`"),
        col("figure_a", "", "measured",
            "the first of the two figures compared, in `unit`, described by `what_a`"),
        col("figure_b", "", "measured",
            "the second of the two figures compared, in `unit`, described by `what_b`"),
        col("unit", "", "", "the figures' unit: `count`, `us`, `ps`, `pct`"),
        col("what_a", "", "", "what `figure_a` is"),
        col("what_b", "", "", "what `figure_b` is"),
        col("trust_sentence", "", "",
            "empty on a pass; otherwise the sentence for the trust list (step 7), with the "
            "figures, the ids or steps concerned and the cause where the capture says it"),
    ),
    notes="""
- `check`: `gpu_events_json_vs_xplane_count` / `_duration` (per GPU and stream),
  `launch_join`, `kernels_per_step`, `same_work_across_gpus_events` / `_time`,
  `stream_budget` (per GPU and stream), `attribution_events_per_execution`,
  `attribution_confidence`; a check that cannot run at all is one row under its short name
  (`gpu_events_json_vs_xplane`, `same_work_across_gpus`, `attribution`, ...) with empty device.
- `same_work_across_gpus_time` compares each GPU's compute + memcpy time per step (median over
  steps; collective kernels left out, their time includes waiting for peers; argument copies,
  memcpys with no hlo_op outside graphs, left out: the events check explains them) with the
  median over GPUs: a fail beyond 10% (`reconcile.SAME_WORK_TIME_TOLERANCE`).
  `attribution_confidence` fails above 5% of attributed time below the confidence threshold.
- `figure_a` / `figure_b` carry the unit of the row (`unit`), not one of the column.
"""))

declare(File(
    "reconcile.json", "reconcile.py", "json",
    "the rows of `reconciliation.csv` as data, counts per status, the trust-list and refusal "
    "sentences",
    fields="""
`step` (`reconcile`), `status`, `counts` (`pass`, `fail`, `not checkable`), `checks` (the rows
above as objects), `trust_list` (the fail sentences), `refusals` (the not-checkable sentences).
"""))

declare(File(
    "skip_stats.json", "skip_stats.py", "json",
    "the step's result: verdict, figures with ranges, units and labels, refusals",
    fields="""
The step's result as data; `summary.txt` is a rendering of it. Fields:
- `step` (`skip_stats`), `status` (`done`, or `not computable` without GPU events), `verdict`,
  `rule` (the thresholds that fired, as sentences).
- `steps`: `source` (how steps were found: the step annotation, the repeating cycle of program
  executions with its programs, executions of one program, or the whole capture), `analysed`,
  `skipped_partial`, `partial_analysed` (step numbers).
- `frames`: the one home of the step frames the later steps use: `steps` (per analysed step
  `step`, `start_us`, `end_us` and `bounding_gpu`: the latest end among the GPUs that run the
  step's programs, `dur_us`, `next_start_us`: the next step of the capture, `window_us`: start
  to the later of its end and the next start, `partial`), `median_step` (the lower median by
  duration of the complete analysed steps, else of all: a step that ran; step 3 draws it and
  step 6 takes its figures from it), `why`, `margin` (the straggler margin: `floor_us`,
  `pct_of_step`; the larger applies), `label`.
- `dispatch`: null unless a step holds several program executions; else
  `executions_per_step` (figure: executions whose kernels ran on a GPU in a step),
  `between_programs_idle_us` (figure: the critical stream's host-late wait between two
  executions' kernels, per step and GPU), `enclosing_call` (the innermost Python-traced call
  that encloses a step's dispatches in most steps, `$<file>:<line> <function>`: the function to
  jit whole; null without the Python tracer or when no traced call encloses them),
  `enclosing_call_steps` (in how many steps), `steps`, `label`.
- `host_work_before_device` (a TPU, with the Python tracer on): the host's own Python work
  before each step's device work starts (the outermost traced calls wholly between the step's
  start and the first event of the device that ends it): `per_step_us` (figure, measured),
  `largest_call`, `largest_call_us_per_step`, `label`; absent otherwise. Step 6 bounds what
  prefetching by one producer thread saves with it.
- `compile`: absent unless XLA compiles on the host inside an analysed step (events matching
  `trace_rules.COMPILE_RE`, their union from a step's start to the next step's): `per_step_us`
  (figure, measured), `steps_with_compile`, `steps`, `events`, `label`.
- `gpu_groups`: the GPUs grouped by the programs they run in the analysed steps, program groups
  first, then by GPU time: `devices`, `kind` (`programs`, `argument copies only`, `memcpys only`,
  `kernels without a program label`), `programs` (module names), `events_per_gpu_and_step`,
  `gpu_us_per_gpu_and_step` (figure), `argument_copies`, `sentence` (the group in words, e.g.
  "GPU 0 holds argument copies only: 11 events, 13.9 us per GPU and step"), `runs_step` (true
  for every program group: the verdict's bounding GPU and the step's end are taken among these
  GPUs, pipeline stages included), `compared` (true for the program group of two GPUs or more
  with the most GPU time: the straggler and step 2's same-work comparison are taken among its
  GPUs only; none is compared where no two GPUs run the same programs).
- `capture`: the trace the result is of, as an identity record (`scratch.identity`: `file`, its
  resolved path, `bytes`, `mtime_ns`), so a table left from another capture in a re-used folder
  is told apart (`scratch.written_for`, the one rule every step and the host pass apply).
- `joins`: GPU events per join kind (`launch`, `graph_launch`, `other`, `none`, `ambiguous`,
  `no_correlation_id`, `shared_ids_without_graph_launch`); `gpu_events`;
  `join_rate_pct_of_gpu_events`.
- `figures`: name -> `{value, min, max, n, unit, label}` (median, min and max across the
  analysed steps and GPUs, and how many values: of two unlike values the median is their mean,
  and the summary and the draft say both; null where nothing was measured): `step_duration_us`,
  `kernels_per_step_per_gpu`, `busy_us`, `union_idle_us`, `il_idle_us`, `tklqt_us`, `akd_us`,
  `il_us`, `executions_per_step` (program executions whose kernels ran on the GPU in the step),
  `between_programs_idle_us` (measured); `host_share_pct_of_step`, `busy_share_pct_of_step`,
  `collective_share_pct_of_step` (inferred, on the GPU that bounds each step); `period_us`,
  `idle_between_us`, `idle_between_pct_of_period` (measured, over the steps another step
  follows: `steps.csv`), `between_share_pct_of_period` (measured: the idle between steps as a
  share of the period, on the GPU that bounds each step).
- `verdict_qualifier`: null, or the verdict line's text when the idle between steps reaches
  `BETWEEN_STEPS_SHARE` of the period ("device-bound within the step; 14% of the step period
  is between steps, with nothing recorded on the host ... (cause: not recorded)").
- `between_steps`: null without a following step, else `cause` (`not recorded`,
  `mostly not recorded`, `input pipeline`, `host work between steps`, or `none (no idle)`; the
  most common over the bounding GPUs' steps), `label` (`inferred`), `threshold_pct_of_period`.
- `host_device_split`: `host_pct_of_step`, `device_pct_of_step` of step time on the critical
  streams, `label`.
- `straggler` (several GPUs in the first of `gpu_groups` only, else null; GPUs of other groups
  are left out): `gpu` (the GPU last in the most steps),
  `is_straggler` (it is last in more than half the steps, each time ahead of the next GPU by more
  than the margin), `steps_last`, `steps`, `ties` (steps whose two last GPUs end within the
  margin), `last_counts` (GPU -> steps it ended last), `lead_us` (its lead over the next GPU in
  those steps), `margin_us` (`value`, `pct_of_step`: the larger applies), `end_spread_us`
  (figures as above), `least_collective_gpu`, `least_collective_us`, `most_collective_us`.
- `python_tracer`: the totals of `python_lines.csv`: `names`, `calls`, `self_us` (figure),
  `threads`.
- `notes`, `refusals` ("cannot compute" sentences), `needs_new_capture`, `tables` (file -> rows).
""",
    figures=(
        Figure("step_duration_us", "us", "measured", "the step's duration (`steps.csv` `dur_us`)"),
        Figure("kernels_per_step_per_gpu", "count", "measured",
               "GPU events per step and GPU (`steps.csv` `kernels`)"),
        Figure("busy_us", "us", "measured",
               "union of kernel intervals over all streams (`steps.csv` `busy_us`)"),
        Figure("union_idle_us", "us", "measured", "IL − union busy (`steps.csv`)"),
        Figure("il_idle_us", "us", "measured",
               "IL − Σ kernel durations, the SKIP paper's idle (`steps.csv`)"),
        Figure("tklqt_us", "us", "measured",
               "Σ(kernel start − its launch call's start) (`steps.csv`)"),
        Figure("akd_us", "us", "measured", "mean kernel duration (`steps.csv`)"),
        Figure("il_us", "us", "measured",
               "first host op of the step to the end of its last kernel (`steps.csv`)"),
        Figure("executions_per_step", "count", "measured",
               "program executions whose kernels ran on the GPU in the step"),
        Figure("between_programs_idle_us", "us", "measured",
               "the critical stream's host-late wait between two executions' kernels"),
        Figure("host_share_pct_of_step", "pct", "inferred",
               "host-late share of the step, on the GPU that bounds each step"),
        Figure("busy_share_pct_of_step", "pct", "inferred",
               "busy-or-queued share of the step, on the GPU that bounds each step"),
        Figure("collective_share_pct_of_step", "pct", "inferred",
               "collective share of the step, on the GPU that bounds each step"),
        Figure("period_us", "us", "measured",
               "the step period, over the steps another step follows"),
        Figure("idle_between_us", "us", "measured",
               "each GPU's last kernel to the next step's start"),
        Figure("idle_between_pct_of_period", "pct", "measured",
               "`idle_between_us` as a share of the period"),
        Figure("between_share_pct_of_period", "pct", "measured",
               "the idle between steps as a share of the period, on the GPU that bounds each "
               "step"),
    )))

declare(File(
    "summary.txt", "skip_stats.py", "text",
    "the verdict line, the rule, key figures with ranges",
    fields="""
First line:
`verdict: <launch-bound | device-bound | collective/straggler-bound | mixed | not computable>`.
Then `rule:` (the thresholds that fired, with their values), `steps:` (how steps were found:
`StepTraceAnnotation`, `the repeating cycle of N program executions (<module> xK, ...)`,
`executions of <module>`, `calls of <Python call> (the Python tracer's outermost repeated
call)` or `the whole capture`; which were analysed and which skipped as partial), the program
executions per step and the GPU idle between them (when a step holds more than one), the GPU
groups (when GPUs do different work), `joins:` (GPU events joined to a launch / to a graph
launch / to another host event / unjoined, each with its count), key figures each as
`name: median (min–max across steps and GPUs)`, and `cannot compute:` lines, one per refusal
with its reason.
"""))

declare(Table(
    "rows.csv", "skip_stats.py",
    row="GPU event (kernel, memcpy, memset)", order="device, stream, start",
    columns=(
        col("device", "", "", "GPU ordinal"),
        col("stream", "", "", "stream id"),
        col("stream_name", "", "", "the line name, e.g. `Stream #16(Kernel)`"),
        col("kernel", "", "", "GPU event name (kernel symbol, or the memcpy/memset event name)"),
        col("category", "", "",
            "`compute`, `collective` or `memcpy` (memcpy and memset events and copy/fill "
            "kernels); the pattern table is in the sibling SKILL.md"),
        col("start_us", "us", "measured", "the GPU event's start"),
        col("dur_us", "us", "measured", "the GPU event's duration"),
        col("end_us", "us", "measured", "the GPU event's end"),
        col("correlation_id", "", "", "as the tracer wrote it; empty when absent"),
        col("join", "", "",
            "what the correlation id joined on the host: `launch`, `graph_launch`, `other` (a "
            "host event that is not a launch call, e.g. `hipStreamWaitEvent`), `none` (no host "
            "event), `ambiguous` (several)"),
        col("launch_name", "", "", "the joined host event's name"),
        col("launch_thread", "", "", "the joined host event's thread (line) name"),
        col("launch_start_us", "us", "measured", "the joined host event's start"),
        col("launch_dur_us", "us", "measured", "the joined host event's duration"),
        col("queue_us", "us", "measured",
            "kernel start − launch end; empty unless `join` is `launch`"),
        col("launch_to_start_us", "us", "measured",
            "kernel start − launch start (one kernel's term of TKLQT); empty unless `join` is "
            "`launch`"),
        col("hlo_op", "", "", "the tracer's label on the GPU event; empty when absent"),
        col("hlo_module", "", "", "the tracer's module label on the GPU event; empty when absent"),
        col("graph", "", "",
            "1 when the event was launched inside a graph (command buffer): a graph id stat "
            "(`cuda_graph_id`) or a correlation id joining a graph launch "
            "(`gpu.in_graph`, the rule `attribution/kernels.csv` uses too), else 0"),
        col("step", "", "",
            "the step in which the event's launch call started (its own start when it has no "
            "launch call), from `steps.csv`; empty outside every step"),
    )))

declare(Table(
    "streams.csv", "skip_stats.py",
    row="GPU x stream over the analysed steps", order="device, stream",
    columns=(
        col("device", "", "", "GPU ordinal"),
        col("stream", "", "", "stream id"),
        col("stream_name", "", "", "the line name"),
        col("span_us", "us", "measured",
            "from each step's start to its end, summed over the analysed steps"),
        col("compute_us", "us", "measured", "busy time of compute events"),
        col("collective_us", "us", "measured", "busy time of collective events"),
        col("memcpy_us", "us", "measured", "busy time of memcpy events"),
        col("idle_us", "us", "measured", "the rest of the span"),
        col("compute_pct_of_span", "pct", "measured", "`compute_us` as a share of `span_us`"),
        col("collective_pct_of_span", "pct", "measured",
            "`collective_us` as a share of `span_us`"),
        col("memcpy_pct_of_span", "pct", "measured", "`memcpy_us` as a share of `span_us`"),
        col("idle_pct_of_span", "pct", "measured", "`idle_us` as a share of `span_us`"),
        col("events", "count", "measured", "the stream's GPU events in the analysed steps"),
        col("critical", "", "",
            "1 for each GPU's critical stream (as named in `steps.csv`), else 0"),
    ),
    notes="""
Over the analysed steps; the span is from each step's start to its end, summed over steps. Busy
time of a category is the union of that category's intervals on the stream; where categories
overlap on one stream, the earlier-starting event's category owns the overlap, so that
`compute_us + collective_us + memcpy_us + idle_us = span_us` exactly (in integer picoseconds
before rounding; step 2 checks it).
"""))

STEP_SOURCE = """
- `source`: how the step was framed, in this order of preference: `annotation`
  (StepTraceAnnotation `step_num`); `cycle of N executions` (the sequence of program executions
  on the host, `<module>:XLA GPU module` events or `GpuExecutable::ExecuteThunks` with its
  `module_name`, repeats with period N: several programs per step, an eager op-by-op loop, a
  train step and a separate optimizer; `step_framing.find_cycle`: the shortest N under which at
  least 90% of the sequence repeats, two whole cycles at least; a step starts at the execution
  after the cycle's longest host pause when it stands out, else at the capture's first
  execution; an execution outside the cycle joins the step it runs in; the executions before
  the first whole cycle and an unfinished last one are partial steps); `program:<module>` (the
  same with N = 1: one execution per step); `python:<name>` (the executions do not repeat in a
  cycle: each call of the Python tracer's outermost repeated call with executions inside it,
  the one holding the most executions, is a step, none partial); `capture` (nothing repeats:
  the whole capture is one window, said in the notes). Where executions lie outside the
  shortest cycle, the longer cycle that leaves none out is the step when a Python-traced call
  runs it whole or the host pauses longest once per turn of it (a layer program run 28 times
  between a head and an update), else they are extras in its steps (a metrics program every
  tenth step). A step framed from executions starts at the launch of its first call's first
  argument copy when one precedes the execution (`step_framing.program_call_starts`). The trace
  has no program ids: programs sharing a module name count as one in the cycle. The one source
  of steps for every later tool.
"""

declare(Table(
    "steps.csv", "skip_stats.py",
    row="analysed step x GPU that ran kernels in it", order="step, device",
    columns=(
        col("step", "", "", "the step number"),
        col("device", "", "", "GPU ordinal"),
        col("source", "", "",
            "how the step was framed: `annotation`, `cycle of N executions`, "
            "`program:<module>`, `python:<name>` or `capture` (below)"),
        col("start_us", "us", "measured", "the step's start"),
        col("end_us", "us", "measured", "the end of this GPU's last GPU event in the step"),
        col("dur_us", "us", "measured", "`end_us` − `start_us`"),
        col("kernels", "count", "measured", "this GPU's GPU events in the step"),
        col("busy_us", "us", "measured", "union of kernel intervals over all streams of the GPU"),
        col("idle_us", "us", "measured", "`dur_us − busy_us`"),
        col("idle_pct_of_step", "pct", "measured", "`idle_us` as a share of `dur_us`"),
        col("critical_stream", "", "",
            "the GPU's stream with the most kernel-busy time over the analysed steps"),
        col("tklqt_us", "us", "measured",
            "Σ(kernel start − its launch call's start) over the step's launched kernels"),
        col("akd_us", "us", "measured", "mean kernel duration"),
        col("il_us", "us", "measured",
            "first host op of the step to the end of its last kernel"),
        col("il_idle_us", "us", "measured",
            "`il_us` − Σ kernel durations (the paper's figure; double-counts overlapping "
            "streams)"),
        col("union_idle_us", "us", "measured", "`il_us` − union of kernel intervals"),
        col("host_late_us", "us", "measured",
            "the critical stream's idle time in the step caused by `host_late` gaps"),
        col("device_wait_us", "us", "measured",
            "the critical stream's idle time in the step caused by `device_wait` gaps"),
        col("unknown_gap_us", "us", "measured",
            "the critical stream's idle time in the step caused by `unknown` gaps"),
        col("period_us", "us", "measured",
            "the next step's start − this step's start (any step of the capture; empty for the "
            "last)"),
        col("idle_between_us", "us", "measured",
            "the next step's start − this GPU's last kernel end (0 where the next step starts "
            "first)"),
        col("idle_between_pct_of_period", "pct", "measured",
            "`idle_between_us` as a share of `period_us`"),
        col("between_cause", "", "",
            "`not recorded` (no host event in the idle), `mostly not recorded` (host events "
            "there, covering under 10% of it), `waiting on a result` (block_until_ready, "
            "device_get, a synchronisation: at least half the recorded host time), `input "
            "pipeline` (iterator, data loader, prefetch, device_put or host-to-device names: at "
            "least half of it), `host work between steps` (anything else)"),
        col("between_host_events", "", "",
            "the host events inside that idle, every thread, summed by name, the largest five "
            "(`name=us | ...`)"),
        col("executions", "count", "measured",
            "the program executions whose kernels ran on this GPU in the step; empty for a step "
            "framed without executions"),
        col("between_programs_idle_us", "us", "measured",
            "the critical stream's `host_late` gaps between the kernels of two different "
            "executions (below)"),
        col("programs", "", "",
            "this GPU's programs in the step in order of their first kernel, each with its "
            "executions (`jit_dot x3; jit_add x2`)"),
        col("arrival_us", "us", "measured",
            "from the step's start to the end of this GPU's last kernel that is not a "
            "collective, before the step's last collective starts: when it arrives at that "
            "collective (a GPU that arrives early waits inside it); empty without collectives"),
    ),
    notes=STEP_SOURCE + """\
- `executions`: an event belongs to the execution whose host events began last before its
  launch. `between_programs_idle_us`: the critical stream's `host_late` gaps (as `gaps.csv` cuts
  them) that lie between the kernels of two different executions: the time the GPU waits while
  the host dispatches the next program. A part of `host_late_us`, never more (step 6 takes it
  out of the host-gap row).
- `tklqt_us`, `akd_us`, `il_us`, `il_idle_us` (the paper's idle figure) and `union_idle_us` are
  the SKIP metrics. `il_idle_us` is `il_us` less the sum of the step's kernel times, as the
  paper defines it: negative where kernels of several streams overlap (their sum then exceeds
  the step); `union_idle_us` (the step less the union of its kernels) never is.
- `host_late_us`, `device_wait_us`, `unknown_gap_us`: the critical stream's idle time in the step
  (from the step's start), split by the cause of each gap as in `gaps.csv`; their sum plus the
  stream's busy time is `dur_us`. They are of the critical stream alone, so their sum can exceed
  `idle_us` (the GPU's idle over all streams: another stream may run while the critical one
  waits).
"""))

declare(Table(
    "gaps.csv", "skip_stats.py",
    row="gap of at least 1 µs on a critical stream in an analysed step, the gap before the "
        "step's first kernel included",
    order="device, start",
    columns=(
        col("device", "", "", "GPU ordinal"),
        col("stream", "", "", "the critical stream"),
        col("step", "", "", "the step"),
        col("start_us", "us", "measured", "the gap's start"),
        col("end_us", "us", "measured", "the gap's end"),
        col("dur_us", "us", "measured", "the gap's length"),
        col("kernel_before", "", "", "the kernel before the gap (empty before the first)"),
        col("kernel_after", "", "", "the kernel after the gap"),
        col("cause", "", "",
            "`host_late` (the next kernel's launch call, or its graph's launch call, had not "
            "ended when the gap began), `device_wait` (it had ended: the kernel was queued and "
            "waited on the device), `unknown` (no launch call joined)"),
        col("launch_thread", "", "",
            "the thread that ran the execution (below), or the launch's own thread with "
            "\"(unknown: ...)\" when no execution thread holds its launches"),
        col("host_events", "", "",
            "the host events on the launching thread that overlapped the gap, aggregated by "
            "name, as `name=overlap_us` joined by ` | `, the largest eight, largest first"),
        col("python_traced_us", "us", "measured",
            "the time Python-traced calls (`$<file>:<line> ...`) cover in the gap on that "
            "thread, their union (nested calls once; empty where no thread is known)"),
    ),
    notes="""
- `launch_thread`: on ROCm the launch events sit on their own `Host Threads/<tid>` lines: the
  thread is the one whose per-instruction TraceMe holds the launch.
- `host_events`: a name's overlap is the union of its calls' (a call nested in another of the
  same name counts once), so no name exceeds the gap. The same union rule holds for
  `steps.csv between_host_events` (every thread: a name running on several threads at once
  counts once).
"""))

declare(Table(
    "python_lines.csv", "skip_stats.py",
    row="name of a Python-traced call", order="self_us descending, name",
    columns=(
        col("name", "", "",
            "the name the Python tracer gave the call: `$<file>:<line> <function>`, "
            "`$builtins <function>`, `$<unknown> <function>` (the file's base name only)"),
        col("calls", "count", "measured", "its calls"),
        col("total_us", "us", "measured",
            "inclusive time, a recursive call counted at each level"),
        col("self_us", "us", "measured",
            "its own time: less the traced calls nested in it on the same thread; a call that "
            "blocks holds its wait as its own time"),
        col("threads", "count", "measured", "the host threads it ran on"),
    ),
    notes="""
Over the whole capture and every host thread; measured, and upper bounds (the tracer slows what
it traces). The profiler's own `start_trace` / `stop_trace` calls are left out (they span the
capture). Header only when the capture has no traced call (the tracer off). `skip_stats.json`
`python_tracer`: `names`, `calls`, `self_us` (figure), `threads`.
"""))

declare(File(
    "attribution/xplane/", "attribute_kernels.py", "folder",
    "a copy of the xplane (the device planes whole, the other planes without their events) "
    "and XProf's hlo_stats output (`hlo_stats.json`, which `roofline.py` reads instead of "
    "converting again)",
    fields="""
The copy is made so that XProf writes its files beside it, never into the capture folder; its
conversion leaves its own intermediate files here too (`ALL_HOSTS.op_stats_v2.pb`).
"""))

declare(Table(
    "attribution/kernels.csv", "attribute_kernels.py",
    row="GPU event: kernel, memcpy or memset (all programs)", order="device, stream, start",
    columns=(
        col("device", "", "",
            "GPU ordinal; `CPU` for XLA:CPU thunk events of a CPU capture (thunks of control "
            "instructions left out: they contain their bodies' thunks)"),
        col("stream", "", "", "stream id"),
        col("start_us", "us", "measured", "the event's start"),
        col("dur_us", "us", "measured", "the event's duration"),
        col("kernel", "", "", "the event's name"),
        col("correlation_id", "", "", "the tracer's join key; empty for a CPU thunk"),
        col("hlo_op", "", "",
            "the tracer's label, kept even when it is not an instruction of the saved program "
            "(async collectives) or names a command buffer"),
        col("program_id", "", "",
            "the kernel's own `program_id` stat; else the one program its `hlo_module` names; "
            "else empty for an argument copy; else the chosen program"),
        col("instruction", "", "",
            "the scheduled instruction that launched it (a thunk of the program); empty for "
            "`none`"),
        col("inner_instruction", "", "",
            "the instruction inside it that the label named (a memcpy fusion's `copy`, a "
            "dynamic-slice fusion's library call), else empty"),
        col("match", "", "", "`exact`, `name`, `order` or `none` (definitions in SKILL.md step 4)"),
        col("confidence", "ratio", "inferred",
            "0 to 1, three decimals: `exact` 1; placed events by their fit (below); `none` 0"),
        col("op_name", "", "",
            "the instruction's `op_name` metadata (else the last one inside its called "
            "computations); empty when none"),
        col("source", "", "",
            "`file:line` of the instruction's innermost frame; empty when the instruction has "
            "no source"),
        col("user_frame", "", "",
            "`file:line function` of the first user frame (`--user-re`); empty when the "
            "instruction has no source"),
        col("category", "", "",
            "`compute`, `collective`, `memcpy` (memcpys and memsets; from the event's name and "
            "memcpy details)"),
        col("graph", "", "",
            "1 when the event was launched inside a graph (command buffer), else 0 (below)"),
    ),
    notes="""
- `program_id`: an argument copy is a memcpy with no `hlo_op`, no `hlo_module`, not in a graph:
  launched by no program, class `none`.
- `confidence`: `exact` 1; placed events by their own fit to the slot and their neighbours' in
  the same launch, divided among alike events (or free slots of their name) of unordered
  instructions where the capture shows the launch's events running at once or out of order, 0.5
  or less then (references/attribution.md, Confidence); `none` 0.
- `graph`: 1 when the event was launched inside a graph (command buffer): it carries a graph id
  stat (`cuda_graph_id`), or its correlation id belongs to a graph-launch host call
  (`cuGraphLaunch`, `hipGraphLaunch`), else 0. A correlation id merely shared with other events
  is not enough (the conv3d stream-wait pair). The same rule as `rows.csv`
  (`gpu.in_graph`).
"""))

declare(Table(
    "attribution/ops.csv", "attribute_kernels.py",
    row="(program, instruction) with attributed kernel time: every program (`--program ID`: "
        "that one)",
    order="gpu_us descending, program_id, instruction",
    columns=(
        col("program_id", "", "", "the program"),
        col("instruction", "", "", "the instruction"),
        col("opcode", "", "", "its opcode"),
        col("category", "", "", "its category: `compute`, `collective`, `memcpy`"),
        col("kernels", "count", "measured", "its attributed GPU events"),
        col("gpu_us", "us", "measured", "their kernel time"),
        col("pct_of_attributed", "pct", "inferred",
            "of the table's attributed kernel time (denominator `attributed`: the sum of its "
            "`gpu_us`)"),
        col("pct_of_gpu_time", "pct", "inferred",
            "of all GPU event time (as `kernel_names.csv`)"),
        col("op_name", "", "", "as in `kernels.csv`"),
        col("source", "", "", "as in `kernels.csv`"),
        col("user_frame", "", "", "as in `kernels.csv`"),
        col("module", "", "", "the program's module name (names repeat across programs)"),
        col("executions", "count", "inferred",
            "how often the instruction ran, summed over GPUs (below); empty when its program's "
            "HLO is not held"),
        col("framework_frame", "", "",
            "the instruction's innermost frame inside a modelling framework, as "
            "`<package>/<path>:<line> <function>`; empty when none"),
        col("fingerprint", "", "",
            "a fusion's structure as 16 hex digits (kind, backend config, shapes and the fused "
            "computation with names and ids left out: what XLA's kernel reuse compares), equal "
            "across two compilations that renamed it (compare.py matches by it); empty for "
            "an instruction that is not a fusion or whose HLO is not held"),
        col("phase", "", "",
            "`forward` (under jvp in its op_name: what differentiation traced, the loss "
            "included), `backward` (under transpose), `optimizer` (an optimizer's frame: optax, "
            "flax's train state, keras; or a name scope naming one: `sgd`, `adam`, ...), "
            "`outside` (no differentiation: inference, an update under no telling name, loss "
            "scaling, an eager op), `unnamed` (no op_name: an instruction XLA made, a copy, a "
            "layout change, a combined collective's slices); `trace_rules.phase`"),
    ),
    notes="""
Every program (an op-by-op capture runs dozens of small programs); `--program ID` keeps that
program's rows only.
- `executions`: its program's executions on each GPU (`programs.csv`) x its runs per execution
  (the trip counts of the while loops around it, known or inferred from the labels).
- `framework_frame`: a modelling framework is one of `hlo_program.FRAMEWORK_PACKAGES` but jax
  (`praxis/layers/base_ops.py:42 __call__`).
"""))

declare(Table(
    "attribution/lines.csv", "attribute_kernels.py",
    row="Python line (user frame); with no user frame, framework frame",
    order="gpu_us descending, user_frame, framework_frame",
    columns=(
        col("user_frame", "", "",
            "the user frame (over every program in `ops.csv`); empty on a framework-frame row"),
        col("gpu_us", "us", "measured", "kernel time of its instructions"),
        col("pct_of_attributed", "pct", "inferred", "of the attributed kernel time (as `ops.csv`)"),
        col("pct_of_gpu_time", "pct", "inferred", "of all GPU event time"),
        col("kernels", "count", "measured", "its attributed GPU events"),
        col("instructions", "count", "measured", "its (program, instruction) pairs"),
        col("framework_frame", "", "",
            "as in `ops.csv`, the one with the most GPU time among the row's instructions"),
        col("programs", "count", "measured", "programs among its instructions"),
    ),
    notes="""
Kernels whose instruction has no user frame are one row per framework frame with an empty
`user_frame` (one row with both empty where neither is known).
"""))

declare(Table(
    "attribution/programs.csv", "attribute_kernels.py",
    row="program with GPU events, and `(outside programs)`", order="gpu_us descending, program_id",
    columns=(
        col("program_id", "", "",
            "the program; `(outside programs)` for argument copies launched by no program"),
        col("module", "", "", "its module name; `(outside programs)` on that row"),
        col("executions", "count", "measured",
            "the program's executions summed over its GPUs (an execution on 8 GPUs counts 8)"),
        col("devices", "", "", "the GPUs it ran on, their ids space-separated (`0 1 2 3`)"),
        col("executions_per_gpu", "", "", "`device=count` joined by spaces"),
        col("executions_from", "", "",
            "how executions were counted: `host execution events`, `GPU events (the host "
            "recorded N)`, `launches` or `alignment` (below)"),
        col("kernels", "count", "measured", "its GPU events (kernels, memcpys, memsets)"),
        col("kernels_per_execution", "count", "measured", "`kernels` / `executions`"),
        col("gpu_us", "us", "measured", "its GPU event time"),
        col("pct_of_gpu_time", "pct", "measured", "of all GPU event time"),
        col("attributed_us", "us", "measured", "of `gpu_us`, attributed to an instruction"),
        col("host_dispatch_us", "us", "measured",
            "the summed duration of its mapped host execution events (ExecuteThunks, else the "
            "module event); empty with `host_dispatch` = `not recorded` where no host execution "
            "event maps to it"),
        col("host_dispatch", "", "", "`measured`, or `not recorded` (see `host_dispatch_us`)"),
        col("steps", "", "",
            "the steps in which one of its GPU events starts on its GPU, as ranges (`0-3 5`)"),
    ),
    notes="""
- `executions_from`: `host execution events` (the host's `GpuExecutable::ExecuteThunks` /
  `<module>:XLA GPU module` events, each mapped to its program and GPU by the launch calls that
  start inside it; where executions run at once on several threads, by the launch threads seen
  serving that execution thread alone), else `launches` (per instruction, its distinct launch
  correlation ids of its first required kind over its runs per execution; the most common
  value), else `alignment` (the matcher's coverage of the schedule, the weakest). Never a
  pairing of kernels with optional events (a second GEMM taken for a split-K reduction).
  Where the host's events count other than the GPU events show (launches, else coverage), the
  GPU's count is kept, `GPU events (the host recorded N)`: the host may record executions
  whose kernels started before the device trace did, and every figure per execution is set
  against the kernels' time.
- `steps`: from `steps.csv` (step 1, in the same scratch folder for the same capture); empty
  when there is no such `steps.csv` (`attribute_kernels.json` `steps_note` says why).
"""))

declare(Table(
    "attribution/how.csv", "attribute_kernels.py",
    row="program x match class, then `(outside programs)` x class, then `all` x class",
    order="program_id, match",
    columns=(
        col("program_id", "", "",
            "the group: a program, `(outside programs)` (argument copies launched by no "
            "program, never counted under one), or `all`"),
        col("match", "", "", "the match class"),
        col("kernels", "count", "measured", "GPU events of that class"),
        col("gpu_us", "us", "measured", "their GPU time"),
        col("pct_of_group", "pct", "inferred",
            "of the group's GPU time; within each group the shares add up to 100"),
        col("low_confidence_kernels", "count", "inferred",
            "the attributed events of that class with `confidence` below 0.6 "
            "(`kernel_match.LOW_CONFIDENCE`)"),
        col("low_confidence_us", "us", "inferred", "their GPU time"),
        col("low_confidence_pct_of_group", "pct", "inferred", "their share of the group's time"),
    )))

declare(File(
    "attribution/attribute_kernels.json", "attribute_kernels.py", "json",
    "the step's result: figures with units and labels, checks, refusals, notes",
    fields="""
The step's result as data; `summary.txt` is a rendering of it (nothing in the summary is computed
elsewhere), and later steps read this file, never the prose. Top-level fields:
- `step` (`attribute_kernels`), `status` (`done`), `capture` (`xplane`: the identity record of
  the xplane read, `file`, `bytes`, `mtime_ns`; `host`, `run`).
- `program`: `id`, `name`, `notes` (why it was chosen; programs saved twice; inferred trip counts;
  a missing HLO text; how many HLO texts were written). The chosen program (the most GPU time,
  or `--program`) is the one whose HLO a step needing one program reads.
- `scope`: `programs` (`all`, or `one` with `--program`) and `program_ids` in `ops.csv`.
- `programs`: the rows of `programs.csv` as data (`devices` a list, `executions_per_gpu` an object
  device -> count, `steps` a list or null, numbers as numbers).
- `steps_note`: where `programs.csv` `steps` came from, or why it is empty.
- `hlo_texts`: program id -> HLO text file written.
- `device`: `GPU`, or `CPU` for a CPU capture; `control_thunks_left_out`: CPU thunks of
  while/call/conditional left out.
- `figures`: name -> `{value, unit, label}`, `label` one of `measured`, `read`, `inferred`:
  `kernels`, `devices`, `graph_kernels` (count, measured), `kernel_time_us` (us, measured),
  `attributed_pct_of_gpu_time` (pct of kernel time with an instruction, inferred),
  `low_confidence_kernels`, `low_confidence_pct_of_all_attributed` (of attributed time,
  inferred), and where XProf ran `xprof_hlo_stats_pct_of_gpu_time` (read from XProf).
- `classes`: `all` and the chosen program's id -> class -> `{kernels, gpu_us, pct_of_group}`.
- `none`: one entry per reason (`why`: `outside`, `no slot`, `unmatched`) with `label`,
  `kernels`, `gpu_us` and the `largest` five kernel names (`kernel`, `count`, `gpu_us`).
- `no_hlo`: `{kernels, pct_of_gpu_time, programs}` of kernels whose program has no HLO, or null.
- `collectives_by_order`: `{kernels, gpu_us, labels}` of the collective kernels outside graphs
  whose label names no instruction of the saved HLO (kernels.csv: category=collective, graph=0,
  match other than exact, an hlo_op), `gpu_us` their dur_us cells summed in the table's order:
  what step 7 reads for its item instead of scanning kernels.csv.
- `source`: `kernels`, `with_user_frame`, `no_source_kernels`, `no_source_pct_of_attributed`,
  `library_only_kernels`, `library_only_pct_of_attributed` (of `ops.csv`'s attributed time: every
  program, or the `--program` one).
- `coverage`: `ours_pct_of_gpu_time`, `xprof_pct_of_gpu_time` (null without XProf), `verdict`.
- `checks`: `{name, status, detail}`, `status` one of `pass`, `fail`, `not checkable` (today: our
  coverage at least XProf's hlo_stats).
- `refusals`: sentences "cannot ... because ...".
- `low_confidence_below`: the confidence threshold (0.6); `timing_s`: `matching`,
  `xprof_hlo_stats` (the seconds the step waited for XProf's hlo_stats,
  which converts in its own process while the step matches and writes); `hlo_text`: the HLO
  text's file name, or null; `tables`: file -> rows written.
- `executions`: per device (as a string), the chosen program's `executions` (counted as
  `programs.csv` says, `from` naming how), its `events` (argument copies left out), and the
  events one execution expects:
  `expected_min` (required ones) and `expected_max` (optional ones too). `reconcile.py` checks
  `events / executions` against that range.
""",
    figures=(
        Figure("kernels", "count", "measured", "GPU events (kernels, memcpys, memsets)"),
        Figure("devices", "count", "measured", "devices with GPU events"),
        Figure("graph_kernels", "count", "measured", "GPU events launched inside a graph"),
        Figure("kernel_time_us", "us", "measured", "all GPU event time"),
        Figure("attributed_pct_of_gpu_time", "pct", "inferred",
               "kernel time with an instruction, as a share of all GPU event time"),
        Figure("low_confidence_kernels", "count", "inferred",
               "attributed events with `confidence` below 0.6"),
        Figure("low_confidence_pct_of_all_attributed", "pct", "inferred",
               "their time, as a share of the attributed time"),
        Figure("xprof_hlo_stats_pct_of_gpu_time", "pct", "read",
               "XProf's hlo_stats coverage of GPU time (where XProf ran; read from XProf)"),
    )))

declare(Table(
    "attribution/kernel_names.csv", "attribute_kernels.py",
    row="kernel name (all programs)", order="gpu_us descending, kernel",
    columns=(
        col("kernel", "", "", "the kernel name as written"),
        col("family", "", "",
            "`XLA fusion`, `Triton kernel (XLA)`, `library GEMM (cuBLAS / hipBLASLt)`, "
            "`split-K reduction`, `NCCL/RCCL collective`, `memcpy`, `memset`, `Pallas / Triton "
            "kernel (custom call)` (a name a custom call's backend config declares), `attention "
            "library`, `convolution library`, `DNN library (cuDNN / MIOpen)`, `other kernel` "
            "(from the name alone, the first that fits)"),
        col("kernels", "count", "measured", "its GPU events"),
        col("gpu_us", "us", "measured", "their GPU time"),
        col("pct_of_gpu_time", "pct", "inferred", "of all GPU event time"),
        col("gpus", "count", "measured", "devices that ran it"),
        col("kernels_per_gpu", "count", "measured", "`kernels` / `gpus`"),
        col("gpu_us_per_gpu", "us", "measured", "`gpu_us` / `gpus`"),
    ),
    notes="Needs no matching."))

declare(Table(
    "attribution/phases.csv", "attribute_kernels.py",
    row="phase of the program (`ops.csv` phase), each of the five whether or not it ran",
    order="forward, backward, optimizer, outside, unnamed",
    columns=(
        col("phase", "", "", "as `ops.csv` phase"),
        col("instructions", "count", "measured", "its `ops.csv` rows"),
        col("kernels", "count", "measured", "their attributed GPU events"),
        col("gpu_us", "us", "measured", "their kernel time"),
        col("pct_of_attributed", "pct", "inferred", "of `ops.csv`'s attributed kernel time"),
        col("pct_of_gpu_time", "pct", "inferred", "of all GPU event time"),
        col("programs", "count", "measured", "distinct programs its instructions belong to"),
        col("sentence", "", "",
            "what an absent phase says of the program (\"no optimizer update in these "
            "programs: ...\", \"no instruction is under differentiation ...\"); empty "
            "otherwise"),
    ),
    notes="""
The phases are read from jax's name stack: differentiation names what it traced `jvp(...)` and
the cotangent pass `transpose(...)` (`jax/_src/interpreters/ad.py`); a loss is part of the
forward. An optimizer has no name of its own: its instructions are known by their frames only.
"""))

declare(Table(
    "attribution/families.csv", "attribute_kernels.py",
    row="kernel family that can be a cause (split-K, transposes, copies, memsets, collectives by "
        "kind)",
    order="gpu_us descending, family",
    columns=(
        col("family", "", "",
            "`split-K reduction`, `layout transpose` (a kernel name that says transpose), "
            "`memcpy`, `memset`, `collective: <kind>` (allreduce, allgather, reducescatter, "
            "alltoall, send, recv, broadcast, other: from the kernel name)"),
        col("kernels", "count", "measured", "its GPU events"),
        col("kernel_names", "count", "measured", "its distinct kernel names"),
        col("gpu_us", "us", "measured", "their GPU time"),
        col("pct_of_gpu_time", "pct", "inferred", "of all GPU event time"),
        col("instructions", "count", "measured",
            "distinct (program, instruction) pairs its attributed kernels ran under"),
        col("programs", "count", "measured", "their programs"),
        col("top_instructions", "", "",
            "the largest five by the family's time, `<program_id>:<instruction>=us` joined by "
            "` | `"),
    ),
    notes="""
Step 6 ranks a family of at least 5% of GPU time over at least 3 instructions (`changes.py`
`FAMILY_MIN_PCT_OF_GPU_TIME`, `FAMILY_MIN_INSTRUCTIONS`; a split-K reduction under one GEMM is
enough, `FAMILY_MIN_INSTRUCTIONS_OF`; collectives are ranked as exposed
collectives instead); step 7 says what the capture cannot show about it.
"""))

declare(File(
    "attribution/summary.txt", "attribute_kernels.py", "text",
    "program chosen and why, class shares, XProf's coverage next to ours",
    fields="A rendering of `attribution/attribute_kernels.json`: nothing in it is computed "
           "elsewhere."))

declare(File(
    "attribution/<module>(<id>).hlo.txt", "attribute_kernels.py", "text",
    "a program's HLO, printed from the proto by `hlo_text.py` (no jaxlib: bounded memory): the "
    "chosen program's, then the others with the most GPU time, at most `MAX_HLO_TEXTS` (10) in "
    "all (`--program ID`: that one only)",
    fields="""
`<module>` keeps letters, digits and `_.+=-` (others become `_`, at most 100, no leading dot);
`attribute_kernels.json` `hlo_texts` maps each program id to its file.
"""))

NOT_RUN = "inferred, not run"

declare(Table(
    "changes.csv", "changes.py",
    row="cause of the median step's time",
    order="rank (share of the step; Python lines and kernel families last)",
    columns=(
        col("rank", "", "", "the cause's rank"),
        col("cause_kind", "", "",
            "`dispatch`, `fused_on_jit`, `host_gap`, `straggler_wait`, `exposed_collective`, "
            "`memcpy`, `kernel_gaps`, `kernel_family`, `instruction`, `compile`, `scan_stacking`, "
            "`pallas_call`, `too_small`, `gemm_backend`, `python_line`, `idle_between_steps` "
            "(what each saving assumes: references/changes.md)"),
        col("cause", "", "",
            "one sentence with its own figures (quote it whole, cited as text: `changes.csv: "
            "cause, rank=N`)"),
        col("where", "", "", "the GPU, stream, instruction or line"),
        col("pct_of_step", "pct", NOT_RUN,
            "the cause's time in the median step as a share of its window (`step_us`)", "100"),
        col("step_us", "us", "measured",
            "the median step's window, the same on every row (3 decimals)"),
        col("saving_us", "us", NOT_RUN, "the saving in the median step", "step_us"),
        col("saving_min_us", "us", NOT_RUN, "the smallest saving across the steps used"),
        col("saving_max_us", "us", NOT_RUN, "the largest saving across the steps used"),
        col("saving_measured_us", "us", NOT_RUN,
            "the saving in the median step were it to reach a rate this capture shows for the "
            "same work (`roofline.csv` `best_same_work_pct`, or the other backend's): the low "
            "end of a range whose high end, at the datasheet ceiling, is `saving_us`; empty "
            "where the cause has no measured target", "saving_us"),
        col("step_if_gone_us", "us", NOT_RUN, "`step_us` - `saving_us`"),
        col("assumptions", "", "", "what the saving assumes"),
        col("knob", "", "", "the change to test, a hypothesis"),
        col("label", "", "", "`inferred, not run`: the label of the row's estimates"),
        col("source", "", "", "the tables used"),
    ),
    notes="Reads only the scratch folder. The shares and savings are all *inferred, not run* "
          "(`label`)."))

declare(File(
    "changes.json", "changes.py", "json",
    "steps used, figures (step time, combined saving), the median step's critical path by slice, "
    "causes, how they combine, refusals, notes",
    fields="""
`steps` (`used`, `median`, `bounding_gpu`, `why`, `straggler`), `figures` (`step_us` measured with
min/max; `combined_saving_us`, `step_if_all_gone_us` and `compute_exposed_pct_of_compute`
inferred), `critical_path` (the median step's window cut into `host_late`, `compute`,
`memcpy_arg`, `collective`, `idle_before`, `idle_between`: figures summing to `window`), `causes`
(the rows as data), `combine_rule` (a sentence), `refusals`, `notes`, `inputs` (tables read),
`tables`.
""",
    figures=(
        Figure("step_us", "us", "measured", "the median step's window, with min/max"),
        Figure("combined_saving_us", "us", "inferred",
               "the causes' savings combined by `combine_rule`, with min/max"),
        Figure("step_if_all_gone_us", "us", "inferred", "`step_us` − `combined_saving_us`"),
        Figure("compute_exposed_pct_of_compute", "pct", "inferred",
               "the exposed share of the median step's compute time (work after the step's last "
               "host-late gap: references/changes.md)"),
    )))

declare(Table(
    "trust.csv", "trust.py",
    row="trust item, then \"needs a new capture\" question",
    order="section (`trust` first); trust rows by kind (references/trust.md order), gpu_us "
          "descending, count descending, item; questions as found",
    columns=(
        col("section", "", "",
            "`trust` (items) or `needs_new_capture` (questions)"),
        col("item", "", "",
            "the item, or the open question; unique among the rows (below)"),
        col("kind", "", "", "the item's kind (below; meaning and wording: references/trust.md)"),
        col("count", "count", "measured",
            "events, kernels, GPUs, instructions or ids as the item says; "
            "`under_recorded_replays` a lower bound"),
        col("gpu_us", "us", "measured",
            "GPU event time of the item (3 decimals); for `python_tracer` the idle time of the "
            "gaps with Python-traced calls"),
        col("pct_of_gpu_time", "pct", "inferred",
            "`gpu_us` as a share of all GPU event time (`trust.json` `figures.gpu_time_us`; 2 "
            "decimals), empty for `python_tracer`"),
        col("source", "", "",
            "the tables and JSON fields the row comes from (`<file>: <selector>`, `;`-joined)"),
        col("detail", "", "",
            "the steps' own sentences and what the item means for the report; for a question, "
            "the capture that would answer it"),
    ),
    notes="""
Reads only the scratch folder.
- `needs_new_capture` rows: `item` the open question, `detail` the capture that would answer it;
  `kind`, `count`, `gpu_us`, `pct_of_gpu_time` empty.
- `kind`: `step_failed`, `no_hlo`, `reconciliation_check` (a failed step 2 check, one row per
  check family), `under_recorded_replays`, `duplicate_program`, `async_labels_missing`,
  `not_checkable`, `unattributed`, `low_confidence`, `graph_launch_metrics`, `python_tracer`,
  `nccl_waits`, `rocm_unknown_memcpy`, `not_computable`, `no_ceiling`, `tpu_cost_model`,
  `tpu_steps_line`, `refusal`. Defect kinds
  (this capture's records incomplete or disagreeing; none in a clean capture) are listed in
  `trust.json` `defect_kinds`: `reconciliation_check`, `under_recorded_replays`,
  `duplicate_program`, `async_labels_missing`; the rest are standing limits.
- `item`: unique among the rows, and without commas or quotes where the row has a figure (it is
  the citation key: `trust.csv: count, section=trust, item=<item>`).
"""))

declare(File(
    "trust.json", "trust.py", "json",
    "figures (items, defects, needs_new_capture, gpu_time_us), defect kinds, kinds, steps read "
    "and missing, largest items, refusals, notes",
    fields="""
`step` (`trust`), `status` (`done`), `figures`: `items`, `defects`, `needs_new_capture` (count,
inferred), `gpu_time_us` (measured: step 4's `kernel_time_us`, else the sum of `rows.csv`
`dur_us`); `gpu_time_source`; `defect_kinds`; `kinds` (kind -> rows); `inputs` (`read`: steps
whose JSON was read, `missing`: step -> why); `largest` (up to three items by GPU time: `item`,
`kind`, `gpu_us`); `refusals` ("cannot collect step N's findings because ..."); `notes`;
`tables` (`trust.csv`: rows).
""",
    figures=(
        Figure("items", "count", "inferred", "rows of the trust list (`section` `trust`)"),
        Figure("defects", "count", "inferred", "items of a defect kind"),
        Figure("needs_new_capture", "count", "inferred", "questions that need a new capture"),
        Figure("gpu_time_us", "us", "measured",
               "all GPU event time: step 4's `kernel_time_us`, else the sum of `rows.csv` "
               "`dur_us`"),
    )))

declare(File(
    "report_draft.md", "report_draft.py", "markdown",
    "the report with every figure filled in and cited, judgement places marked "
    "`<!-- judge: ... -->`, in the report template's sections",
    fields="""
The report in the order of `references/report-template.md`: results first, then verdict and
causes, reconciliation, GPUs and streams (with `swimlanes.svg`), top instructions and Python
lines (with `roofline.svg` and the ceilings), changes, trust list and "needs a new capture".
Every figure is followed by `(label; table: selector)`; a section whose table is missing says
which and why. Each `<!-- judge: what to decide, from which table -->` marks a sentence the agent
writes. Every summary row is cited or holds no figure (the row standing for the failed checks
past the first `RECONCILE_ROWS` = 20 names `reconciliation.csv`, no count). Where step 4
(`attribution/attribute_kernels.json`) or step 6 (`changes.json`) refuses to rank instructions
or Python lines (a refusal sentence `cannot rank <instructions | Python lines ...> because ...`),
the draft quotes that sentence, cited as `(inferred; changes.json: refusals.N)`, in place of the
`ops.csv` / `lines.csv` table: their shares are of the one program step 4 attributed, not of a
step. Each value is cited from one source with that source's label.
"""))

declare(Table(
    "factcheck.csv", "factcheck.py",
    row="number or cited claim of the report (skipped numbers included)",
    order="line, position in the line",
    columns=(
        col("line", "", "", "the report line"),
        col("claim", "", "", "the sentence, or the table row, trimmed to 200 characters"),
        col("figure", "", "", "as written (a range `a–b` or `v (a–b)` is one figure)"),
        col("label", "", "",
            "the citation's label (`inferred, not run` written as `inferred`)"),
        col("table", "", "",
            "as cited, or taken from the column header with the row's key cells filled in"),
        col("selector", "", "",
            "as cited, or taken from the column header with the row's key cells filled in"),
        col("found_value", "", "",
            "the table's value in the written unit, three decimals more than written "
            "(`; min …; max …` for a range)"),
        col("verdict", "", "", "`ok`, `wrong_value`, `no_label`, `no_table`, `skipped` (below)"),
        col("why", "", "", "the reason, empty for ok"),
    ),
    notes="""
One row per number of the report (outside HTML comments and fenced code) and per citation that
follows words, in report order.
- `table`, `selector` taken from a column header: `key=*` first cell, `key=*2` second; a key cell
  in backticks taken whole. Several citations in one parenthesis: their tables, selectors and
  labels joined by ` | `, found values too; the verdict is the first failing one's. A row
  citation (filters, no column) shows `N rows` found.
- `verdict`: `ok`; `wrong_value` (the table value, rounded as written, differs; a unit of another
  kind; cited text absent); `no_label` (no label, a label other than measured/read/inferred, or one
  the table's own `label` contradicts: the reason names the label to write and, for a JSON figure,
  the figure beside it that holds the same value under the writer's label); `no_table` (no
  citation, a label with no table, a missing file, column or path, filters that select no row,
  several rows without an aggregate, or a figure cited by rows with no column);
  `skipped` (not a figure: in backticks, an identifier after step/GPU/device/stream/rank/program/
  section/line/item/check or a part of a model or run (layer, block, stage, node, ...:
  `factcheck.IDENTIFIER_WORDS`), file:line, name(id), #n, a year, a section number, a table row's
  key cell, a number inside a tool's text quoted verbatim and cited as text).
"""))

declare(Table(
    "derived.csv", "the report's writer",
    row="figure the writer derived by a formula over cited values (optional)",
    order="as written",
    columns=(
        col("name", "", "", "the figure's name: a report cites it as `(inferred; derived.csv: "
            "value, name=...)`"),
        col("value", "", "inferred", "the figure as the writer computed it, in `unit`"),
        col("unit", "", "", "the unit `value` is written in (`us`, `%`, `GB/s`, ...; empty: "
            "none)"),
        col("formula", "", "", "`= <expr>; <name> = <table>: <selector>; <name> = <number> "
            "[<source>]` (references/report-template.md, derived figures)"),
    ),
    notes="""
Written by the report's writer, not by a step, where it keeps figures a table does not hold (a
share of a ceiling, a what-if): factcheck.py computes every row's formula from the cited values
and constants and fails a `value` the formula does not give (its rows in factcheck.csv have line
0), so a figure cited from here is as checked as a table's.
"""))

declare(File(
    "factcheck.json", "factcheck.py", "json",
    "the check's result: verdict, counts per verdict, every failing claim",
    fields="""
`step` (`factcheck`), `status` (`done`), `verdict` (`pass`: no wrong_value, no_label or
no_table; else `fail`), `report` (the report's path), `figures` (plain counts per verdict: `ok`,
`wrong_value`, `no_label`, `no_table`, `skipped`; not report figures), `skipped` (the skipped
numbers counted by kind: an identifier, inside backticks, inside a quoted text, ...), `failing`
(every failing row: `line`, `figure`, `verdict`, `why`, `claim`), `notes` (e.g. the report holds
no cited figure), `refusals` (empty), `tables` (`factcheck.csv`: rows). Exit code 0 on pass, 4
on fail, 1 when the report or the scratch folder cannot be read.
"""))

declare(File(
    "report_draft.html", "build_page.py", "html",
    "the draft as one self-contained page, written by `investigate.py --page` (build_page.py of "
    "writing-trace-report-pages)"))

declare(Table(
    "compare.csv", "compare.py",
    row="compared figure: a step figure, the verdict and its parts, a host-side figure, the GPU "
        "time per step of a program, instruction, kernel family, kernel name or Python line, or "
        "one of BEFORE's ranked changes",
    order="section (step, verdict, verdict_part, host, program, instruction, family, "
          "kernel, line, prediction; for a run of several hosts: step, then host_result per "
          "host); within a GPU-time section by the size of the change, largest first; "
          "predictions by rank",
    columns=(
        col("section", "", "", "what the row compares (order above)"),
        col("key", "", "",
            "the figure, or what the row matches across the captures: the module name, "
            "`<module>/<instruction>/<opcode>`, the family, the kernel name, the source line, "
            "or `change <rank>` "
            "(its cause and where in `note`)"),
        col("before", "us", "",
            "(labelled per row: `label`) BEFORE's value (median per step; a verdict's word; "
            "for a prediction the predicted saving, inferred); units as `unit` says"),
        col("after", "us", "",
            "(labelled per row: `label`) AFTER's value (for a prediction the measured change "
            "of its cause, inferred)"),
        col("change", "us", "",
            "(labelled per row: `label`) `after` less `before` (3 decimals); for a prediction "
            "the measured less the predicted"),
        col("change_pct", "pct", "",
            "(labelled per row: `label`) `change` as a share of `before` (2 decimals)"),
        col("unit", "", "", "`us`, `count`, or empty for a word"),
        col("label", "", "",
            "the row's own label: `measured` (steps.csv figures), `inferred` (per-step GPU "
            "time of the attribution tables, the verdict, predictions)"),
        col("status", "", "",
            "`changed` or `within spread` (step figures, by the rule), `new` or `gone` (a key "
            "of one capture alone), `not comparable`, `not measurable`, `same`"),
        col("note", "", "", "how the value was had, and for a step figure the rule's reason"),
    ),
    notes="""
Written by `compare.py BEFORE AFTER`, into its own `--out` (not a capture's scratch folder).
- The rule for `changed`: the per-step values of the two captures do not overlap, each side has
  two analysed steps or more, and the medians differ by 1% or more; otherwise `within spread`,
  never a gain.
- Per step: `step_period` (a step's start to the next's) and `step_time` (the longest GPU's
  duration) per analysed step; host-side times the largest over GPUs, counts the sum over GPUs;
  the GPU time of a program, instruction, family or line is its capture-wide `gpu_us` over the
  capture's analysed steps (all GPUs).
- `prediction` rows: `before` is BEFORE's `changes.csv` `saving_us`, `after` the measured
  change of the quantity its cause names (host-late, dispatch idle, idle between steps, device
  wait, straggler lag, the exposed collective time of step 6's critical path, or the GPU time
  of its family, instruction or line), per step; the note gives the step period's change as a
  multiple of the prediction.
"""))

declare(File(
    "compare.json", "compare.py", "json",
    "figures (the step period and step time before and after, with min and max), whether the "
    "difference counts, the verdicts, what moved, predictions, notes, refusals",
    fields="""
`step` (`compare`), `status` (`done`), `figures` (below), `significant` (true or false by the
rule of `compare.csv`), `significance` (`of`: `step_period` or `step_time`, `why`, `rule`),
`verdict_before`, `verdict_after`, `moved` (up to three step parts, largest change first:
`part`, `words`, `before_us`, `after_us`), `predictions` (one per BEFORE change: `rank`,
`cause`, `where`, `predicted_saving_us`, `measured_change_us` (null where not measurable),
`cause_before_us`, `cause_after_us`, `cause_ratio` (the measured change over the prediction),
`step_period_change_us`, `error_ratio`: the step period's change over the prediction, for the
one change whose cause moved most and by half its prediction or more, null for the others: the
step's change is one effect of what was changed, set against no change that was not made),
`notes`, `refusals`, `inputs` (`before`, `after`: the scratch folders read), `tables`. For two
runs of several hosts, each host common to both is compared into `<host>/compare.csv` and
`<host>/compare.json`; the top-level result is the run's (its steps each the slowest host's, from
`host_steps.csv`; no verdict or predictions) with `hosts`: per host `host`, `significant`, `why`,
`verdict_before`, `verdict_after`.
""",
    figures=(
        Figure("step_period_before_us", "us", "measured",
               "BEFORE's median step period (min and max over its steps)"),
        Figure("step_period_after_us", "us", "measured", "AFTER's median step period"),
        Figure("step_time_before_us", "us", "measured",
               "BEFORE's median step time (the longest GPU's), min and max"),
        Figure("step_time_after_us", "us", "measured", "AFTER's median step time"),
    )))

declare(File(
    "compare_draft.md", "compare.py", "markdown",
    "the report's \"Before and after\" section: the step figures, the verdicts, what moved and "
    "each prediction beside what its cause moved, every figure cited from `compare.csv`, the "
    "judgement places marked; it passes the fact check run on the comparison's folder"))

declare(File(
    "logs/<script>.txt", "investigate.py", "text",
    "the command each step ran and all it printed"))

declare(File(
    ".handoff/<name>.json", "capture_info.py, skip_stats.py, attribute_kernels.py", "json",
    "what a step computed from a capture file and a later step needs again, keyed to that file; "
    "not a result: a later step's input, read only when made from the very file it reads",
    fields="""
`sources` (each source file's resolved `file` path, `bytes` and `mtime_ns`) and `payload`. A
reader takes the payload only when every source is, now, the file it would read itself (same
path, size and modification time); otherwise it reads the capture as it would alone. Written
whole (a rename). The hand-offs: `xplane_streams` (from the xplane, by attribute_kernels.py,
which decodes every event, else by capture_info.py: per GPU and stream line the event count and
summed duration in ps, `streams` as [device, stream, events, ps]; capture_info.py then decodes
no GPU plane's events); from the trace, by skip_stats.py, which holds it decoded:
`trace_streams` (the same per stream line, and `events`, the trace's complete events),
`model_checks` (the rows of step 2's checks 2 to 5 on step 1's analysis, `rows`, in
reconciliation.csv's columns) and `trace_facts` (what step 0's inventory reads of the trace:
`gpu_events` as [ordinal, events], `host_events`, the reader's `notes`). reconcile.py reads the
first three, capture_info.py the fourth; each reads the capture itself where its hand-off is
missing or stale. From rows.csv itself, keyed to the table as it was written: `row_facts`
(tracekit/row_facts.py: what trust.py reads of rows.csv, summarised by the process that wrote
it, row by row as written; trust.py reads the table whole where it is missing or the table has
changed since). `capture.json` is the folder's claim (CLAIM): the identity of each capture file
(`xplane`, `trace`) its tables were made from, recorded by each step that reads a capture once
it succeeds; a step of another capture (or of the same file since changed) refuses the folder in
one sentence, and investigate.py empties it first. `writer.lock` is held while investigate.py
(one host or many) or compare.py runs: a second of them into the folder is refused.
"""))

declare(File(
    "<host>/", "per_host.py", "folder",
    "that host's scratch folder, written by every entry script given a run of several hosts: "
    "every file above, for that host alone, and `logs/<script>.txt`",
    fields="""
`<host>` is the host's name when it is a plain file name no other host's name equals but for
case (and not one of the summary's file names), else `host-<n>`; `hosts.csv` keeps the name.
"""))

HOSTS_BY = """
Written by every entry script given a run of several hosts (`per_host.py` runs it per host,
`cross_host.py` writes the summary; see the cross-host summary below)"""

declare(Table(
    "hosts.csv", "cross_host.py",
    row="host of the run", order="the run's host order (by name)",
    columns=(
        col("host", "", "", "the host's name"),
        col("folder", "", "", "its scratch folder (`<host>/`)"),
        col("exit", "", "", "the exit code of the last per-host pass"),
        col("seconds", "s", "measured", "the last per-host pass's wall time"),
        col("gpus", "count", "measured",
            "its GPUs with kernels in a step (the most over its steps)"),
        col("verdict", "", "", "its step-1 verdict"),
        col("steps", "count", "measured", "its analysed steps"),
        col("step_us", "us", "measured",
            "the median over the host's steps of the step's duration on its bounding GPU"),
        col("step_min_us", "us", "measured", "the shortest such step"),
        col("step_max_us", "us", "measured", "the longest such step"),
        col("period_us", "us", "measured", "the median step period"),
        col("period_min_us", "us", "measured", "the shortest step period"),
        col("period_max_us", "us", "measured", "the longest step period"),
        col("slowest_in_steps", "count", "inferred",
            "steps in which this host was the slowest by more than the margin"),
        col("compute_us_per_gpu_step", "us", "measured",
            "`streams.csv` compute total over the analysed steps, per GPU with events and per "
            "step"),
        col("collective_us_per_gpu_step", "us", "measured",
            "`streams.csv` collective total over the analysed steps, per GPU with events and "
            "per step"),
        col("kernel_time_ratio", "ratio", "measured",
            "over the kernel names every host ran (`host_kernels.csv`) but collectives (their "
            "time holds the wait for other GPUs and hosts), the median of this host's mean "
            "kernel time over the median host's"),
        col("kernel_time_ratio_min", "ratio", "measured", "the smallest such ratio"),
        col("kernel_time_ratio_max", "ratio", "measured", "the largest such ratio"),
        col("same_kernels", "", "",
            "`yes` when the host ran the same kernel names with the same count per step "
            "(within 1%) as another host, `no` otherwise"),
        col("top_change_kind", "", "", "`changes.csv` rank 1's `cause_kind`"),
        col("top_change", "", "", "`changes.csv` rank 1's `cause`"),
        col("top_saving_us", "us", NOT_RUN, "`changes.csv` rank 1's `saving_us`"),
        col("trust_items", "count", "inferred", "`trust.json` items"),
        col("error", "", "", "the sentence the host's process ended with"),
        col("not_read", "", "", "why the host's tables were not read (below)"),
        col("arrival_us", "us", "measured",
            "when the host arrives at its steps' last collective: the median over its steps of "
            "its latest GPU's `steps.csv` `arrival_us`; empty without collectives"),
    ),
    notes=HOSTS_BY + """.
- `not_read`: why the host's tables were not read (its pass failed; or its step-1 tables, left in
  a re-used folder, name another capture than this run's: `skip_stats.json` `capture`); the
  host's figures are then empty and it is left out of the comparison.
- `exit`, `seconds`, `error`: the last per-host pass (`hosts.json` `script` names its script).
- `step_us` (min, max): from `steps.csv` `dur_us`, the bounding GPU being the GPU whose step
  lasts longest (summary.txt's step duration is the median over steps and every GPU: a little
  shorter); `period_us` (min, max) the median step period.
- `kernel_time_ratio` (min, max): empty where step 4 did not run on two hosts or more.
- `top_change_kind`, `top_change`, `top_saving_us`, `trust_items`: empty where that step did not
  run.
"""))

declare(Table(
    "host_steps.csv", "cross_host.py",
    row="step on every host x host", order="step, then host",
    columns=(
        col("step", "", "", "the step number (steps are matched by number)"),
        col("host", "", "", "the host"),
        col("gpus", "count", "measured", "the host's GPUs with kernels in the step"),
        col("bounding_device", "", "", "the host's GPU that finishes the step last"),
        col("dur_us", "us", "measured", "the step's duration on that GPU"),
        col("busy_us", "us", "measured", "that GPU's busy time in the step"),
        col("period_us", "us", "measured", "the step period"),
        col("slowest", "", "",
            "1 for the slowest host when it leads the next by more than the margin, else 0 for "
            "every host (a tie)"),
        col("behind_slowest_us", "us", "measured", "how far behind the slowest host it finished"),
    ),
    notes=HOSTS_BY + """, for the steps every host with
steps has (matched by step number). The margin is the larger of 5 us and 0.5% of its step
(step 1's straggler margin).
"""))

declare(Table(
    "host_kernels.csv", "cross_host.py",
    row="kernel name every such host ran x host", order="kernel, then host",
    columns=(
        col("kernel", "", "", "the kernel name"),
        col("host", "", "", "the host"),
        col("kernels", "count", "measured", "the host's GPU events of that name"),
        col("mean_us", "us", "measured",
            "`gpu_us / kernels` of the host's `attribution/kernel_names.csv`"),
        col("ratio_to_median_host", "ratio", "measured", "`mean_us` over the median host's"),
    ),
    notes=HOSTS_BY + """, where step 4 ran on two
hosts or more (else an earlier pass's file is removed).
"""))

declare(File(
    "hosts.json", "cross_host.py", "json",
    "the cross-host result: per-host rows, figures, the slow-host rule, verdicts by host",
    fields="""
`step` (`cross_host`), `status` (`done`, `refused` when fewer than two hosts have steps or no step
is on every host), `script`, `run_dir`, `hosts` (the rows of `hosts.csv` as data, ranges as
`{value, min, max, unit, label}`; `failed_step1`: its pass ended but its step 1 wrote nothing,
its reason in `not_read`), `figures` (`hosts`, `hosts_failed`, `step_us` over the hosts'
medians, `step_spread_us`: per step the slowest minus the fastest host's duration, median
(min-max) over the steps), `steps` (`compared`, `not_on_every_host`), `slow_host` (`host`,
`is_slow_host`: slowest in more than half of the compared steps, `steps`, `steps_slowest`,
`ties`, `slowest_counts`, `lead_us`, `margin_us`, `label` inferred), `verdicts` (verdict ->
hosts), `waits` (whether hosts can wait for each other inside the program: no collective time on
any host, or some), `culprit` (the host the others wait for inside collectives spanning hosts:
`host` or null, `why` with its figures, `rule`, `most_compute`, `next`, `lead_pct`,
`least_in_collectives`, `last_to_arrive`, `label` inferred: the host whose compute per GPU step
leads the next host's by 5% or more, which spends the least time in collectives and, where
arrivals are known, arrives last at the steps' last collective; step times converge there and
cannot name it), `host_steps`,
`host_kernels`, `needs_new_capture` (a host that runs the same
kernels more than 5% slower than the median host: why, which the capture cannot say), `notes`,
`refusals`. Only durations are compared across hosts, never start or end times: each host's
timestamps are on its own clock.
""",
    figures=(
        Figure("hosts", "count", "read", "the run's hosts"),
        Figure("hosts_failed", "count", "measured",
               "hosts whose pass exited non-zero or whose step 1 wrote nothing"),
        Figure("step_us", "us", "measured", "the hosts' median step durations, with min/max"),
        Figure("step_spread_us", "us", "measured",
               "per step the slowest minus the fastest host's duration, median (min-max) over "
               "the steps"),
    )))

declare(File(
    "hosts.txt", "cross_host.py", "text",
    "the rendering of `hosts.json`: per-host verdicts, the slow host, the spread of step times",
    fields="A rendering of `hosts.json`: nothing in it is computed elsewhere."))

declare(File(
    "hosts_draft.md", "cross_host.py", "markdown",
    "the report of the whole run: per host its verdict, step, compute and collective time per "
    "GPU step cited from `hosts.csv`, the slow host by step time and the host that holds the "
    "others back, a judgement place; the fact check run on this folder covers it"))

OUTRO = """
## The cross-host summary (`per_host.py`, `cross_host.py`)
Given a run folder with several hosts and no `--host`, a script runs itself once per host (the
same arguments, then `--host=H --out=DIR/<folder>`), at most `--jobs` at once (default: the
cores, lowered so that the largest host's estimated memory, 24 x its capture files + 150 MiB,
times the jobs fits in the memory available), then writes the summary (`hosts.csv`,
`host_steps.csv`, `host_kernels.csv`, `hosts.json`, `hosts.txt`). `<folder>` is the host's name
when it is a plain file name no other host's name equals but for case (and not one of the
summary's file names), else `host-<n>`; `hosts.csv` keeps the name. `changes.py`, `trust.py` and
`report_draft.py` given such a DIR (it holds `hosts.json` and no `skip_stats.json`) run on each
host's folder and write the summary again. The exit code is the largest of the hosts' (0 when
every host succeeded). Only durations are compared across hosts, never start or end times: each
host's timestamps are on its own clock.

## How the files join
- `rows.csv` ↔ `attribution/kernels.csv`: on `device, stream, start_us` (the same GPU event; both
  read the same capture: the trace and the xplane agree on GPU events to the picosecond, which
  `capture_info.py` checks).
- `rows.csv.step` ↔ `steps.csv.step` (and `device`); likewise `gaps.csv` and `stragglers.csv`
  (`step`, `device`) ↔ `steps.csv`.
- `streams.csv` ↔ `steps.csv`: `device` and `critical_stream = stream`.
- `kernels.csv.instruction` ↔ `ops.csv.instruction` (within `program_id`);
  `kernels.csv.user_frame` ↔ `lines.csv.user_frame`.

## Bad input (every script that reads a capture)
A file that is not what XProf writes is refused in one sentence on stderr (`<script>: ...`,
exit 1) naming the user's file, and nothing is written or half-written in the scratch folder.
What the readers accept is in the docstrings of `trace_reader.py`, `xplane_reader.py` and
`hlo_program.py`. A script that reads both files says which one it could not read, in its JSON,
and goes on (exit 0); one program whose HLO is inconsistent is refused alone
(`capture_info.json` `programs[].parses` and `error`; a refusal in
`attribution/attribute_kernels.json`). `capture_info.json` `trace.notes` says what the reader
repaired (lone surrogate escapes replaced by U+FFFD); `host.gpu_runtime_calls` counts host
events with a correlation id when the xplane has no GPU plane (its GPU planes are missing: not a
CPU capture). The HLO text file's `<module>` keeps letters, digits and `_.+=-` (others become
`_`, at most 100, no leading dot). Names reach text outputs with control characters escaped
(`trace_rules.printable`); the CSV and JSON keep them exactly, and they read back with Python's
csv module as the same strings.
"""

