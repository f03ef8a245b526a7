#!/usr/bin/env python3
"""The scratch folder as data: every table and result file the bundle writes, declared once.

Each CSV table is a `Table`: its file (relative to the scratch folder), the script that writes it,
what one row is, the row order, and its columns in order, each a `Column` with its unit, its
label (measured, read, inferred; empty for keys and text) and one line of meaning. Each other
file (a JSON result, a text summary, a picture, a folder) is a `File` with its fields in prose;
a JSON result's report figures are `Figure`s, each with the one label it is written with.

Producers write through `write_table` (the declared header, the rows in its order) and
`write_result` (sorted keys, one indent, its figures checked against their declarations);
consumers read through `Scratch` (each file read once, a column asked for by name and refused
when it is not declared). `references/scratch-layout.md` is rendered from these declarations
(`render_layout`); a test keeps the two equal. Standard library only: the launch-overhead skill
runs where nothing is installed.

Usage (regenerate the layout document after changing a declaration):
    python3 -P analyzing-jax-launch-overhead/scripts/scratch.py > references/scratch-layout.md
"""

from __future__ import annotations

import csv
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

csv.field_size_limit(1 << 24)

LABELS = ("measured", "read", "inferred", "inferred, not run")


class ScratchError(Exception):
    """A table or column that is not declared, or a result figure that disagrees with its
    declaration: a defect of the bundle, never of the user's input."""


@dataclass(frozen=True)
class Column:
    name: str
    unit: str          # us, ps, pct, count, bytes, flop, flop/s, bytes/s, flop/byte, s; "" text
    label: str         # measured | read | inferred | "" (a key or text, not a figure)
    meaning: str


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

def col(name: str, unit: str, label: str, meaning: str) -> Column:
    return Column(name, unit, label, meaning)


TABLES: dict[str, Table] = {}
FILES: dict[str, File] = {}
DECLARED: dict[str, Table | File] = {}  # both, in declaration order (the document's order)


def declare(*items) -> None:
    for it in items:
        if it.file in DECLARED:
            raise ScratchError(f"{it.file} is declared twice")
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


def write_table(folder: Path, file: str, rows) -> int:
    """The declared table `file` under `folder`: its header, then `rows` (sequences of cells in
    the declared order, streamed in blocks); returns the row count. A row of another width is a
    defect of the producer (checked on the first row: the rows of one table share a shape)."""
    names = columns(file)
    path = Path(folder) / file
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(path, "w", newline="", encoding="utf-8") as fh:
        fh.write(",".join(names) + "\n")
        buf = []
        for r in rows:
            if n == 0 and len(r) != len(names):
                raise ScratchError(f"{file}: a row of {len(r)} cells for {len(names)} columns")
            buf.append(",".join(quote(v) for v in r) + "\n")
            n += 1
            if len(buf) >= 10_000:
                fh.write("".join(buf))
                buf.clear()
        fh.write("".join(buf))
    return n


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
    return json.dumps(data, indent=1, sort_keys=True, **dumps) + "\n"


def write_result(folder: Path, file: str, data: dict, **dumps) -> int:
    """Write the declared result `file` under `folder`; returns 1 (one result)."""
    path = Path(folder) / file
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(result_text(file, data, **dumps), encoding="utf-8")
    return 1


def figure(value, unit: str, label: str, rng: dict | None = None) -> dict:
    """A report figure as a result holds it: {value, unit, label} (and min, max where given)."""
    out = {"value": value, "unit": unit, "label": label}
    if rng:
        out.update(rng)
    return out


# ---------------------------------------------------------------- reader

class Scratch:
    """A scratch folder's files, each read once; a missing or unreadable file reads as None.
    `rows` returns a table's rows as dicts; `values` one declared column of it."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self._cache: dict[str, object] = {}

    def json(self, file: str) -> dict | None:
        if file not in self._cache:
            try:
                self._cache[file] = json.loads((self.folder / file).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                self._cache[file] = None
        return self._cache[file]

    def rows(self, file: str) -> list[dict] | None:
        if file not in self._cache:
            try:
                with open(self.folder / file, newline="", encoding="utf-8") as fh:
                    self._cache[file] = list(csv.DictReader(fh))
            except (OSError, UnicodeDecodeError, csv.Error):
                self._cache[file] = None
        return self._cache[file]

    def values(self, file: str, name: str) -> list[str] | None:
        column(file, name)
        rows = self.rows(file)
        return None if rows is None else [r.get(name, "") for r in rows]


# ---------------------------------------------------------------- the layout document

def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_table(t: Table) -> list[str]:
    out = [f"### `{t.file}` ({t.producer})", f"One row per {t.row}; rows by {t.order}.", "",
           "| column | unit | label | meaning |", "|---|---|---|---|"]
    out += [f"| `{c.name}` | {c.unit} | {c.label} | {_cell(c.meaning)} |" for c in t.columns]
    if t.notes:
        out += ["", t.notes.strip()]
    return out + [""]


def render_file(f: File) -> list[str]:
    out = [f"### `{f.file}` ({f.producer})", f.what]
    if f.fields:
        out += ["", f.fields.strip()]
    if f.figures:
        out += ["", "| figure | unit | label | meaning |", "|---|---|---|---|"]
        out += [f"| `{g.name}` | {g.unit} | {g.label} | {_cell(g.meaning)} |" for g in f.figures]
    return out + [""]


def render_layout() -> str:
    """references/scratch-layout.md: the rules, the file list, then each file declared, in
    declaration order, then the joins and the rules for bad input."""
    items = list(DECLARED.values())
    out = [INTRO.strip(), "", "## Files", "",
           "| file | producer | one row per | order |", "|---|---|---|---|"]
    for it in items:
        if isinstance(it, Table):
            out.append(f"| `{it.file}` | `{it.producer}` | {_cell(it.row)} | {_cell(it.order)} |")
        else:
            out.append(f"| `{it.file}` | `{it.producer}` | ({it.kind}) {_cell(it.what)} | |")
    out.append("")
    for it in items:
        out += render_table(it) if isinstance(it, Table) else render_file(it)
    out += [OUTRO.strip(), ""]
    return "\n".join(out)


# ---------------------------------------------------------------- the declarations

INTRO = """
# The scratch folder: every file the tools write
"""

OUTRO = """
"""


if __name__ == "__main__":
    sys.stdout.write(render_layout())
