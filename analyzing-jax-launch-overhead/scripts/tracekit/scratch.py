"""The scratch folder as data: every table and result file the bundle writes, declared once in
`scratch.toml` beside this file and read here into typed records.

Each CSV table is a `Table`: its file (relative to the scratch folder), the script that writes it,
what one row is, the row order, and its columns in order, each a `Column` with its unit, its
label (measured, read, inferred; empty for keys and text) and one line of meaning. Each other
file (a JSON result, a text summary, a picture, a folder) is a `File` with its fields in prose;
a JSON result's report figures are `Figure`s, each with the one label it is written with.

Producers write through `write_table` (the declared header, the rows in its order) and
`write_result` (sorted keys, one indent, its figures checked against their declarations);
consumers read through `Scratch` (each file read once; `values` refuses an undeclared
column), `stream` (a table's declared columns, streamed, for tables of millions of rows) and
`records` (rows as dicts, streamed), each under the one reader policy (`opened`): a file that is
not there reads as None (what needs it is refused, naming it); one that is there but cannot be
its producer's is a TableError. Under the tests (STRICT) every row read refuses a column
its table does not declare. `references/scratch-layout.md` is rendered from the declarations
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
import tomllib
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
    default: str = ""  # a child table's column: what a parent row without a child row reads


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
    parent: str = ""   # a child table: the table whose rows it extends (CHILD_KEY: their row)

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
# rule of the layout document: device_us, run_bytes, achieved_flop_per_s); a unit not here (count,
# ratio, s) is written with no symbol.
UNIT_SYMBOLS = {"us": ("µs", "_us"), "ps": ("ps", "_ps"), "ms": ("ms", "_ms"),
                "pct": ("%", "_pct"), "bytes": ("B", "_bytes"), "flop": ("FLOP", "_flops"),
                "flop/s": ("FLOP/s", "_flop_per_s"), "bytes/s": ("B/s", "_bytes_per_s"),
                "flop/byte": ("FLOP/B", "_flop_per_byte")}


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
    if (t := TABLES.get(file)) is None:
        raise ScratchError(f"{file} is not a declared scratch table")
    return t


def columns(file: str) -> list[str]:
    """The declared header of a table, in order."""
    return table(file).names


def children(file: str) -> list[Table]:
    """The child tables of `file`: each extends some of its rows with columns of one device's
    own (a GPU's correlation id and graph), keyed by the row (CHILD_KEY)."""
    return [t for t in TABLES.values() if t.parent == file]


def column(file: str, name: str) -> Column:
    """A declared column of `file`, or of one of its child tables (a reader of the parent reads
    the child's columns as its own: `stream`, `records`, `Scratch.rows`)."""
    for t in [table(file), *children(file)]:
        for c in t.columns:
            if c.name == name and not (t.file != file and name == CHILD_KEY):
                return c
    raise ScratchError(f"{file} declares no column {name}")


# A child table's first column: the 0-based row of its parent (after the header) it extends.
CHILD_KEY = "row"


class Children:
    """The cells of the child columns among `names` of the table `file` under `folder`, read
    beside the parent's rows in their order (both are in row order: neither is held whole):
    `cells(i)` is row i's {column: cell}, a column's default where its child lists no row i.
    A child table that is not there reads as every row's defaults (its parent was written on a
    device that has no such cells); one that cannot be read is a TableError (`stream`)."""

    def __init__(self, folder: Path, file: str, names):
        self.defaults: dict = {}
        self.its: list = []  # [its rows (stream), its columns, its next (row, cells) or None]
        for t in children(file):
            want = [c for c in t.columns[1:] if c.name in names]
            self.defaults.update((c.name, c.default) for c in want)
            rows = stream(folder, t.file, [CHILD_KEY, *(c.name for c in want)]) if want \
                else None
            if rows is not None:
                self.its.append([rows, [c.name for c in want], None, Path(folder) / t.file])
                self._next(self.its[-1])

    @staticmethod
    def _next(it) -> None:
        r = next(it[0], None)
        if r is not None and not r[0].isdigit():
            raise TableError(f"{it[3]} is not the table its producer writes (a row without its "
                             f"{CHILD_KEY}): run it again, or delete it")
        it[2] = None if r is None else (int(r[0]), r[1:])

    def cells(self, i: int) -> dict:
        out = self.defaults
        for it in self.its:
            while it[2] is not None and it[2][0] < i:
                self._next(it)
            if it[2] is not None and it[2][0] == i:
                out = {**out, **dict(zip(it[1], it[2][1], strict=True))}
                self._next(it)
        return out


def with_children(rows, kids: Children):
    """Each row (a dict) of a parent table with its child tables' cells (`Children`), in
    place; the rows streamed."""
    if not kids.defaults:
        yield from rows
        return
    try:
        for i, r in enumerate(rows):
            r.update(kids.cells(i))
            yield r
    finally:
        for it in kids.its:
            it[0].close()


def result(file: str) -> File:
    if (f := FILES.get(file)) is None:
        raise ScratchError(f"{file} is not a declared scratch file")
    return f


# ---------------------------------------------------------------- writers

def quote(value) -> str:
    """A CSV cell: quoted where it holds a comma, a quote or a line break (a hot path: every
    cell of every table)."""
    v = value if type(value) is str else "" if value is None else str(value)
    if '"' in v:
        return '"' + v.replace('"', '""') + '"'
    return '"' + v + '"' if "," in v or "\n" in v or "\r" in v else v


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
        if (x := number(cell)) is None:
            raise ValueError(f"its {col.name} {cell!r} is not a number")
        return int(x) if col.unit == "count" and x.is_integer() else x
    return int(cell) if col.name in INT_KEYS and cell.lstrip("-").isdigit() else cell


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
        if (v := number(row[i])) is None:
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
    if not (bad := past_limits(file, row)):
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
    n, nonfinite = 0, [0]
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
        if (decl := next((f for f in result(file).figures if f.name == name), None)) is None:
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
        # None: not known (a step a saving would leave empty)
        out.update((k, round(out[k], decimals)) for k in ("value", "min", "max")
                   if out.get(k) is not None)
    return out


# ---------------------------------------------------------------- reader

# Under the tests (JAXTRACE_SCRATCH_STRICT=1, set by tests/conftest.py for every script they
# run), each row read through Scratch.rows or records refuses a column its table does not
# declare: every column any reader asks for is declared. Off elsewhere: plain dicts, no cost.
STRICT = os.environ.get("JAXTRACE_SCRATCH_STRICT") == "1"


def opened(path: Path, file: str, binary: bool = False):
    """The one reader policy of the scratch folder, for every reader of a declared file: None
    where nothing is at `path` (what needs it is refused and names it); a TableError in one
    sentence where something is there that cannot be its producer's (not a regular file, past
    the size read, unreadable; the readers add: not UTF-8, not CSV or JSON, a header without a
    needed column, a row cut short, a figure that is not a finite number); else the open
    file. A table that cannot be read is never read as empty."""
    try:
        return open_file(path, binary=binary)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _unreadable(path, file, exc) from None


def read_whole(path: Path, file: str, read):
    """`read(open file)` of a declared file under the one policy (`opened`): None where it is
    not there; a TableError where it is not text its reader can read."""
    if (fh := opened(path, file)) is None:
        return None
    try:
        with fh:
            return read(fh)
    except (UnicodeDecodeError, ValueError, RecursionError, csv.Error) as exc:
        raise _unreadable(path, file, exc) from None


def records(folder: Path, file: str):
    """The rows of the declared table `file` under `folder` as dicts, streamed (a table of
    millions of rows is never held whole); None when the file is not there (`opened`)."""
    table(file)
    path = Path(folder) / file
    if (fh := opened(path, file)) is None:
        return None
    kids = Children(folder, file, {c.name for k in children(file) for c in k.columns})
    return with_children(_records(fh, path, file), kids)


def _records(fh, path: Path, file: str):
    try:
        with fh:
            rows = csv.DictReader(fh)
            yield from (DeclaredRow(file, r) for r in rows) if STRICT else rows
    except (UnicodeDecodeError, csv.Error) as exc:
        raise _unreadable(path, file, exc) from None


def _unreadable(path: Path, file: str, exc) -> TableError:
    """A file that is there and is not its producer's (junk, another encoding, not a regular
    file, too large), in one sentence naming the producer to run again."""
    producer = DECLARED[file].producer if file in DECLARED else "the step that writes it"
    if isinstance(exc, UnicodeDecodeError):
        what = "is not UTF-8 text"
    elif isinstance(exc, OSError):
        what = (f"cannot be read ({exc.strerror.lower()})" if exc.strerror else
                str(exc).removeprefix(f"{path} "))
    elif isinstance(exc, csv.Error):
        what = f"is not CSV ({exc})"
    else:
        what = f"is not a JSON object ({exc})"
    return TableError(f"{path} {what}, so it is not the file {producer} writes: run {producer} "
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
    that splits them itself in a hot loop (an open file); None where the file is not there,
    a TableError where its header is not its producer's (`opened`)."""
    if (fh := opened(path, file)) is None:
        yield None
        return
    with fh:
        try:  # the declared header, whatever the line ending (a table saved by another tool)
            same = fh.readline().rstrip("\r\n") == header(file).rstrip("\n")
        except UnicodeDecodeError as exc:
            raise _unreadable(path, file, exc) from None
        if not same:
            raise TableError(f"{path} has another header than the table {table(file).producer} "
                             f"writes: run {table(file).producer} into this folder again, or "
                             "delete it")
        yield fh


def stream(folder: Path, file: str, names):
    """Each row of the declared table `file` under `folder` as a tuple of the cells of the
    columns `names` (each declared), in that order, streamed (a table of millions of rows is
    never held whole); None where the file is not there; TableError where it cannot be read,
    lacks a column or has a row cut short (`opened`)."""
    for n in names:
        column(file, n)
    path = Path(folder) / file
    if (fh := opened(path, file)) is None:
        return None
    own = set(columns(file))
    kids = Children(folder, file, [n for n in names if n not in own])
    if not kids.defaults:
        return _stream(fh, path, file, names)
    mine = [n for n in names if n in own]
    return (tuple(r[n] for n in names) for r in with_children(
        (dict(zip(mine, row, strict=True)) for row in _stream(fh, path, file, mine)), kids))


def _stream(fh, path: Path, file: str, names):
    producer = table(file).producer
    with fh:
        reader = csv.reader(fh)
        try:
            header = next(reader, None) or []
        except (UnicodeDecodeError, csv.Error) as exc:
            raise _unreadable(path, file, exc) from None
        if missing := [c for c in names if c not in header]:
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
    """A scratch folder's files, each read once, under the one reader policy (`opened`): a
    file that is not there reads as None, one that is not its producer's is a TableError.
    `rows` returns a table's rows as dicts; `values` one declared column of it."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self._cache: dict[str, object] = {}

    def json(self, file: str) -> dict | None:
        """A result (a JSON object); None when not there; a TableError where it is not JSON,
        not an object or holds NaN or an infinity (no writer of the bundle's writes one: the
        file is not its)."""
        if file not in self._cache:
            path = self.folder / file
            d = read_whole(path, file, lambda fh: json.loads(fh.read(), parse_constant=no_constant))
            if d is not None and not isinstance(d, dict):
                raise _unreadable(path, file, ValueError(f"a {type(d).__name__}"))
            self._cache[file] = d
        return self._cache[file]

    def rows(self, file: str, need=()) -> list[dict] | None:
        """A declared table's rows as dicts; None when not there; TableError where it cannot
        be read, a column of `need` is missing or a figure's cell (a column with a unit) is not
        a finite number (NaN, inf, text): the table is not its producer's, none of it read."""
        if need:
            return self._needing(file, need)
        if file not in self._cache:
            table(file)
            rows = read_whole(self.folder / file, file, lambda fh: list(csv.DictReader(fh)))
            if rows:
                self._whole(file, rows)
                rows = list(with_children(rows, Children(
                    self.folder, file, {c.name for k in children(file) for c in k.columns})))
            self._cache[file] = [DeclaredRow(file, r) for r in rows] if STRICT and rows else rows
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
        the file is not there; TableError where it is not its producer's (a column
        of `need` missing, a number that is not one)."""
        key = "typed:" + file
        if (rows := self._needing(file, need)) is None:
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
        if lacking := [n for n in need if rows and n not in rows[0]]:
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
    _handoff_write(folder, name, {"sources": keys, "payload": payload})


def _handoff_write(folder: Path, name: str, data) -> None:
    """`.handoff/<name>.json` written whole (a rename) or not at all."""
    target = own_dir(Path(folder) / HANDOFF)
    tmp = target / f".{name}.{os.getpid()}.tmp"
    try:
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, target / f"{name}.json")
    finally:
        if tmp.exists():
            tmp.unlink()


def _handoff_read(folder: Path, name: str):
    """`.handoff/<name>.json` as read; None where it is missing or unreadable."""
    try:
        return json.loads(read_file(Path(folder) / HANDOFF / f"{name}.json"))
    except (OSError, ValueError, RecursionError):
        return None


def handoff_get(folder: Path, name: str, sources: list, shape=None):
    """The payload handed on under `name` when its sources are the files `sources` as they are
    now (same resolved paths, sizes, modification times), through `shape` (a function that
    takes it apart as the reader needs it and raises KeyError, TypeError or ValueError where it
    is not what was handed on); None when it is missing, unreadable, not of that shape or was
    made from other files: the reader then reads the capture itself."""
    keys = [identity(p) for p in sources]
    if None in keys or not keys:
        return None
    d = _handoff_read(folder, name)
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
    d = _handoff_read(folder, CLAIM)
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
    have.update((_kind(p), now) for p in sources if (now := identity(p)) is not None)
    _handoff_write(folder, CLAIM, have)


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
    if t.parent:
        out[1:1] = [f"A child table of `{t.parent}`, keyed by `{CHILD_KEY}`: a row of it that "
                    "this table does not list reads as each column's default."]
    out += [f"| `{c.name}` | {c.unit} | {c.label} | {_cell(c.meaning)}"
            f"{f' (at most `{c.at_most}`)' if c.at_most else ''}"
            f"{f' (default `{c.default}`)' if c.default else ''} |" for c in t.columns]
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
            [f"# {titles[part]}: its files", "", "Generated from `tracekit/scratch.toml` (see "
             "`../scratch-layout.md`: the rules every file follows, and how the files join).",
             "", "## Contents"] + [f"- `{it.file}`" for it in its] + [""]
            + [ln for it in its for ln in (render_table(it) if isinstance(it, Table)
                                           else render_file(it))])
    return docs


# ---------------------------------------------------------------- the declarations (scratch.toml)

DECLARATIONS = Path(__file__).with_name("scratch.toml")


def _load(path: Path) -> tuple[str, str, dict[str, tuple[str, str]]]:
    """Declare every file of `path` (scratch.toml), in its order; its layout document's intro,
    outro and parts (the producer's script -> its part's file and title)."""
    with open(path, "rb") as fh:
        data = tomllib.load(fh)
    for d in data["declare"]:
        if d["kind"] == "csv":
            declare(Table(d["file"], d["producer"], d["row"], d["order"], tuple(
                Column(c["name"], c.get("unit", ""), c.get("label", ""), c["meaning"],
                       c.get("at_most", ""), c.get("default", "")) for c in d["column"]),
                d.get("notes", ""), d.get("parent", "")))
        else:
            declare(File(d["file"], d["producer"], d["kind"], d["what"], d.get("fields", ""),
                         tuple(Figure(g["name"], g["unit"], g["label"], g["meaning"])
                               for g in d.get("figure", ()))))
    return data["intro"], data["outro"], {k: tuple(v) for k, v in data["parts"].items()}


INTRO, OUTRO, LAYOUT_PARTS = _load(DECLARATIONS)
