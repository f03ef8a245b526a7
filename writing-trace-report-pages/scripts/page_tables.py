"""The scratch folder's CSV tables as page tables: which tables, which columns, their units and
labels, the order, and how many rows; long tables cut to their top rows with the count of the rest.

Each table is read as text (invalid UTF-8 replaced, control characters removed), streamed where it
can be long (attribution/kernels.csv: the top rows kept in a bounded heap, never the whole file in
memory). Nothing here writes HTML: build_page.py escapes and renders what this returns.
"""

from __future__ import annotations

import csv
import heapq
import re
from dataclasses import dataclass, field
from pathlib import Path

csv.field_size_limit(1 << 24)

# The tables' declarations: the platform (tracekit, standard library) of the launch-overhead
# skill, beside this skill in an install and in a checkout alike (build_page.py's bootstrap).
from tracekit import scratch
from tracekit import trace_rules as rules

CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
NUMBER_RE = re.compile(r"^-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$")
# A percentage names its denominator (references/scratch-layout.md): pct_of_<denominator>, or
# <what>_pct_of_<denominator>.
PCT_OF_RE = re.compile(r"(?:^|_)pct_of_([a-z0-9_]+)$")


@dataclass
class Spec:
    """One page table: the file, its caption, the columns shown, the sort (a numeric column,
    largest first; None keeps the file's order), how many rows, and an optional row filter
    (column, value). Each column's label is its declaration's (scratch.py)."""
    file: str
    caption: str
    columns: list
    sort: str | None = None
    top: int = 20
    where: tuple | None = None


SPECS = [
    Spec("compare.csv", "Before and after: the step", ["key", "before", "after", "change",
                                                         "change_pct", "status", "note"],
         where=("section", "step")),
    Spec("compare.csv", "Before and after: the host side per step",
         ["key", "before", "after", "change", "change_pct", "unit"], where=("section", "host")),
    Spec("compare.csv", "Before and after: each change's prediction beside what its cause "
         "moved", ["key", "before", "after", "note"], top=30, where=("section", "prediction")),
    Spec("compare.csv", "Before and after: kernel families, device time per step",
         ["key", "before", "after", "change", "change_pct", "status"],
         where=("section", "family")),
    Spec("compare.csv", "Before and after: instructions, device time per step (largest changes)",
         ["key", "before", "after", "change", "change_pct", "status"],
         where=("section", "instruction")),
    Spec("compare.csv", "Before and after: hosts", ["key", "before", "after", "status", "note"],
         top=64, where=("section", "host_result")),
    Spec("changes.csv", "Changes, ranked by their share of the step (inferred, not run)",
         ["rank", "cause_kind", "where", "pct_of_step", "saving_us", "saving_min_us",
          "saving_max_us", "step_if_gone_us", "knob"], top=30),
    Spec("derived.csv", "Figures the report derived: each with its formula and the cited values "
         "it is computed from (the fact check recomputes each)", ["name", "value", "unit",
                                                                  "formula"], top=50),
    Spec("trust.csv", "Trust list: where this capture cannot be trusted",
         ["item", "kind", "count", "device_us", "pct_of_device_time"], top=40,
         where=("section", "trust")),
    Spec("trust.csv", "Questions that need a new capture", ["item", "detail"], top=40,
         where=("section", "needs_new_capture")),
    Spec("streams.csv", "GPUs and streams over the analysed steps",
         ["device", "stream", "stream_name", "span_us", "compute_us", "collective_us",
          "memcpy_us", "idle_us", "compute_pct_of_span", "idle_pct_of_span", "events",
          "critical"], top=64),
    Spec("steps.csv", "Steps per GPU",
         ["step", "device", "dur_us", "kernels", "busy_us", "idle_pct_of_step", "host_late_us",
          "device_wait_us", "tklqt_us", "akd_us"], top=48),
    Spec("stragglers.csv", "Which GPU finishes each step last",
         ["step", "device", "lag_us", "last_stretch", "stretch_us", "finishes_last"], top=48),
    Spec("gaps.csv", "Longest idle gaps on the critical streams",
         ["device", "stream", "step", "dur_us", "cause", "kernel_before", "kernel_after",
          "host_events"], sort="dur_us", top=20),
    Spec("reconciliation.csv", "Reconciliation checks",
         ["check", "device", "stream", "status", "figure_a", "figure_b", "unit"], top=60),
    Spec("attribution/ops.csv", "Top HLO instructions by device time",
         ["instruction", "opcode", "category", "kernels", "device_us", "pct_of_attributed",
          "pct_of_device_time", "user_frame"],
         sort="device_us", top=20),
    Spec("attribution/lines.csv", "Top Python lines by device time",
         ["user_frame", "device_us", "pct_of_attributed", "pct_of_device_time", "kernels",
          "instructions"], sort="device_us", top=20),
    Spec("attribution/how.csv", "How kernels were attributed",
         ["program_id", "match", "kernels", "device_us", "pct_of_group",
          "low_confidence_pct_of_group"],
         top=100),
    Spec("roofline.csv", "Roofline of the top instructions",
         ["instruction", "opcode", "device_us", "runs", "run_flops", "run_bytes", "dtype",
          "intensity_flop_per_byte", "achieved_flop_per_s", "achieved_bytes_per_s", "binding",
          "pct_of_ceiling", "method"],
         sort="device_us", top=20),
    Spec("attribution/kernel_names.csv", "Top kernels by name",
         ["kernel", "family", "kernels", "device_us", "pct_of_device_time", "gpus"],
         sort="device_us", top=20),
    Spec("attribution/kernels.csv", "Longest single kernels",
         ["device", "stream", "start_us", "dur_us", "kernel", "instruction", "match",
          "confidence", "user_frame"], sort="dur_us", top=20),
]


@dataclass
class Table:
    spec: Spec
    columns: list  # the spec's columns the file has
    rows: list = field(default_factory=list)  # lists of cell strings, in `columns` order
    total: int = 0  # rows of the file (after the filter)

    @property
    def labels(self) -> dict:
        """column -> its declared label's first word (measured, read, inferred), for the
        columns that hold figures."""
        return {c: lab for c in self.columns if (lab := label_of(self.spec.file, c))}

    @property
    def rest(self) -> int:
        return max(0, self.total - len(self.rows))


def label_of(file: str, column: str) -> str:
    """The label scratch.py declares for a column ("inferred, not run" shown as inferred: the
    caption says not run); empty for keys and text."""
    try:
        return scratch.column(file, column).label.split(",")[0]
    except scratch.ScratchError:
        return ""


def clean(text: str) -> str:
    """A capture string made safe to show: control characters out, format characters (a
    right-to-left override, a zero-width space) as their escapes, as in every text output
    (HTML escaping is the caller's)."""
    return rules.FORMAT_RE.sub(rules.escaped, CONTROL_RE.sub("", text))


def heading_of(file: str, column: str) -> str:
    """A column header in words with its declared unit (scratch.UNIT_SYMBOLS): device_us -> 'gpu
    (µs)'; a percentage with its denominator: idle_pct_of_step -> 'idle (% of step)',
    pct_of_device_time -> 'share (% of gpu time)'."""
    if m := PCT_OF_RE.search(column):
        name = column[:m.start()].replace("_", " ") or "share"
        return f"{name} (% of {m.group(1).replace('_', ' ')})"
    symbol, suffix = scratch.UNIT_SYMBOLS.get(scratch.column(file, column).unit, ("", ""))
    name = column[: -len(suffix)] if suffix and column.endswith(suffix) else column
    name = name.replace("_", " ")
    return f"{name} ({symbol})" if symbol else name


def is_number(cell: str) -> bool:
    return bool(NUMBER_RE.match(cell.strip()))


def read_table(folder: Path, spec: Spec) -> Table | None:
    """The spec's rows of one CSV, or None when the file is absent or not a table of the
    scratch layout (none of the spec's columns)."""
    path = folder / spec.file
    if not path.is_file():
        return None
    try:
        fh = open(path, newline="", encoding="utf-8", errors="replace")
    except OSError:
        return None
    with fh:
        reader = csv.reader(fh)
        try:
            header = [clean(h) for h in next(reader)]
        except (StopIteration, csv.Error):
            return None
        cols = [c for c in spec.columns if c in header]
        if not cols:
            return None
        idx = [header.index(c) for c in cols]
        wcol = header.index(spec.where[0]) if spec.where and spec.where[0] in header else None
        scol = header.index(spec.sort) if spec.sort in header else None
        table = Table(spec, cols)
        heap: list = []
        try:
            for n, rec in enumerate(reader):
                if wcol is not None and (len(rec) <= wcol or rec[wcol] != spec.where[1]):
                    continue
                table.total += 1
                if scol is None:
                    if len(table.rows) < spec.top:
                        table.rows.append(pick(rec, idx))
                    continue
                try:
                    key = float(rec[scol])
                except (IndexError, ValueError):
                    key = float("-inf")
                if key != key:  # NaN sorts last
                    key = float("-inf")
                item = (key, -n, rec)
                if len(heap) < spec.top:
                    heapq.heappush(heap, item)
                elif item > heap[0]:
                    heapq.heapreplace(heap, item)
        except csv.Error:
            pass  # a broken line ends the table: the rows read so far stand, counted
        if scol is not None:
            table.rows = [pick(rec, idx) for _, _, rec in sorted(heap, reverse=True)]
    return table


def pick(rec: list, idx: list) -> list:
    return [clean(rec[i]) if i < len(rec) else "" for i in idx]


def read_tables(folder: Path) -> list[Table]:
    return [t for spec in SPECS if (t := read_table(folder, spec)) is not None and t.total]
