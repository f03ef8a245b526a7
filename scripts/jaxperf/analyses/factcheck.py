"""Fact check of a report: every number in it against the scratch-folder table it cites: the
analysis. Its door, with the command line and what it writes, is scripts/factcheck.py."""

from __future__ import annotations

import ast
import bisect
import csv
import decimal
import functools
import hashlib
import itertools
import json
import operator
import re
import statistics
from decimal import Decimal
from pathlib import Path

from jaxperf.report.citations import (
    MAX_GAP_WORDS,  # a report's numbers and citations: the grammar checked here
    NOT_DECIMAL_RE,
    NUM_RE,
    UNIT_RE,
    WRITTEN_UNITS,
    Citation,
    Context,
    D,
    Figure,
    Num,
    Row,
    TableCache,
    blocks,
    clean_report,
    decimal_of,
    find_citations,
    gap_ok,
    group_figures,
    parse_derived,
    scan_numbers,
    skip_reason,
    split_cells,
    split_selector,
)
from skip_analysis import steps_disagree  # steps.csv against its skip_stats.json
from tracekit import scratch, step_cli
from tracekit import trace_rules as rules  # CSV writing, atomic outputs

TABLE = "factcheck.csv"

RESULT_FILE = "factcheck.json"

COLUMNS = scratch.columns(TABLE)

VERDICTS = ("ok", "wrong_value", "no_label", "no_table", "skipped")

FAILING = ("wrong_value", "no_label", "no_table")

EXIT_FAILED = 4  # a figure failed: distinct from 1 (unusable input) and 2 (usage)


LABELS = ("measured", "read", "inferred")

# A table's own label -> the report labels that agree with it. roofline.json tags a ceiling
# computed from vendor figures "derived": a report may call it read (from the sheet) or inferred.
LABEL_AGREES = {"measured": {"measured"}, "read": {"read"}, "inferred": {"inferred"},
                "derived": {"read", "inferred"}}

AGGREGATES = ("median", "min", "max", "sum", "mean", "count", "first", "range")

CLAIM_CHARS = 200  # a claim is trimmed to this many characters in factcheck.csv

FAILS_PRINTED = 20  # failing claims printed on stdout; factcheck.csv has them all

# Column headers whose integer cells are identifiers (a table's row keys).
IDENTIFIER_COLUMNS = {"step", "steps", "gpu", "gpus", "device", "devices", "stream", "streams",
                      "rank", "ranks", "program", "program_id", "id", "#", "line", "core",
                      "cores", "tpu core", "op line"}

DECIMAL_PREC = 60  # enough digits for any table value divided by 2^40 and re-rounded

# A table's unit (a JSON figure's "unit", a CSV "unit" column) -> (dimension, factor).
TABLE_UNITS = {"us": ("time", D(1)), "µs": ("time", D(1)), "ms": ("time", D(1000)),
               "s": ("time", D(1000000)), "ns": ("time", D("0.001")),
               "ps": ("time", D("0.000001")), "pct": ("pct", D(1)), "%": ("pct", D(1)),
               "bytes": ("bytes", D(1)), "B": ("bytes", D(1)), "B/s": ("byte_rate", D(1)),
               "bytes/s": ("byte_rate", D(1)), "FLOP/s": ("flop_rate", D(1)),
               "FLOP": ("flop", D(1)), "flops": ("flop", D(1)),
               "FLOP/byte": ("intensity", D(1)), "FLOP/B": ("intensity", D(1))}

# Column-name suffixes -> table unit (longest first: _bytes_per_s before _s and _bytes).
COLUMN_SUFFIXES = (("_flop_per_byte", "FLOP/B"), ("_bytes_per_s", "B/s"),
                   ("_flop_per_s", "FLOP/s"), ("_flops", "FLOP"), ("_bytes", "bytes"),
                   ("_pct", "pct"), ("_us", "us"), ("_ps", "ps"), ("_ns", "ns"), ("_ms", "ms"),
                   ("_s", "s"))

# A percentage says its denominator: pct_of_device_time, idle_pct_of_step (scratch-layout.md).
PCT_NAME_RE = re.compile(r"(?:^|_)pct_of_[a-z0-9_]+$")

DIMENSION_WORDS = {"time": "a time", "pct": "a percentage", "bytes": "bytes",
                   "byte_rate": "bytes per second", "flop_rate": "FLOP per second",
                   "flop": "FLOP", "intensity": "FLOP per byte"}

LABEL_ONLY_RE = re.compile(
    r"[\s*_]*(?:[A-Za-z][\w'/-]*\s+){0,3}\(\s*[*_]*(measured|read|inferred(?:,\s*not run)?)"
    r"[*_]*\s*\)")

CODE_SPAN_RE = re.compile(r"(`+)(.+?)\1", re.S)

# a link's target holds no "(": a run of "](" was each scanned to the end (quadratic)
# a block quote's line without a citation: someone else's words (the user's question), quoted
QUOTE_LINE_RE = re.compile(r"^[ \t]*>.*$", re.M)
LINK_TARGET_RE = re.compile(r"\]\([^()\s]*\)|<?https?://[^\s>)]+>?")

KEY_REF_RE = re.compile(r"=\s*\*(\d*)\s*(?=,|$)")  # a header filter's value: *, *2, ...

HEADING_NUMBER_RE = re.compile(r"^(\s*#{1,6}\s+)(\d+(?:\.\d+)*\.?)(?=\s)")

LIST_MARKER_RE = re.compile(r"^(\s*)(\d+[.)])(?=\s)")

SENTENCE_END_RE = re.compile(r"(?<=[.!?])\s+(?=[A-Z*_`\[(<])|\n(?=\s*(?:[-*+]|\d+[.)])\s)")

AND_SEP_RE = re.compile(r"^\s*(?:and|,|&)\s*$")

SEPARATOR_RE = re.compile(r"^\s*(?:\|\s*)?:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


class NoTable(Exception):
    """The citation names no usable table, column, path or row; the message says which."""


# ---------------------------------------------------------------- analysis: tables

def skip_record(folder: Path) -> dict:
    """skip_stats.json of the folder ({} where missing or unreadable)."""
    return scratch.Scratch(folder).json("skip_stats.json") or {}


def load_table(scratch: TableCache, name: str):
    if name in scratch.cache:
        return scratch.cache[name]
    rel = Path(name)
    if rel.is_absolute() or ".." in rel.parts:
        raise NoTable(f"{name} is outside the scratch folder")
    path = scratch.folder / rel
    if rel.suffix not in (".csv", ".json"):
        raise NoTable(f"{name} is not a table (a .csv or .json file)")
    if not path.is_file():
        raise NoTable(f"{name} does not exist in {scratch.folder}")
    try:
        if rel.suffix == ".csv":
            with open(path, newline="", encoding="utf-8") as fh:
                reader = csv.reader(fh)
                header = next(reader, [])
                data = (header, [dict(zip(header, r, strict=False)) for r in reader])
            data = with_children(scratch.folder, name, *data)
        else:
            data = json.loads(path.read_text(encoding="utf-8"), parse_float=D, parse_int=D)
    except (OSError, UnicodeDecodeError, ValueError, csv.Error) as exc:
        raise NoTable(f"{name} cannot be read ({exc})") from None
    # steps.csv: cross-checked against the result written with it
    if rel == Path("steps.csv") and (why := steps_disagree(data[1], skip_record(scratch.folder))):
        raise NoTable(f"{why}: the table disagrees with its own record, so no figure of it "
                      "is checked; run skip_stats.py into the folder again")
    scratch.cache[name] = data
    return data


def with_children(folder: Path, name: str, header: list, rows: list) -> tuple[list, list]:
    """A declared table's rows with its child tables' columns (a GPU's correlation ids and
    graphs: scratch.Children), which a selector names as the table's own."""
    kids = [c.name for k in scratch.children(name) for c in k.columns[1:]] \
        if name in scratch.TABLES else []
    try:
        rows = list(scratch.with_children(rows, scratch.Children(folder, name, kids)))
    except scratch.TableError as exc:
        raise NoTable(str(exc)) from None
    return header + [k for k in kids if k not in header], rows


def column_unit(name: str) -> str | None:
    if PCT_NAME_RE.search(name):
        return "pct"
    return next((unit for suffix, unit in COLUMN_SUFFIXES if name.endswith(suffix)), None)


def range_column(column: str, role: str, header) -> str | None:
    """The column holding a one-row figure's min or max: saving_us -> saving_min_us."""
    unit = next((sfx for sfx, _ in COLUMN_SUFFIXES if column.endswith(sfx)), "")
    stem = column[:len(column) - len(unit)]
    name = f"{stem}_{role}{unit}"
    return name if name in header else None


def label_of(value) -> str | None:
    """A table's label normalised: 'inferred, not run' -> inferred."""
    if not isinstance(value, str) or not value.strip():
        return None
    return value.strip().split(",")[0].strip().lower()


def key_of(cell: str):
    """A key cell as it matches a selector's value: a number by its value (3, 3.0 and 03 are one
    key), any other text stripped and as a text output writes it (trace_rules.printable: a
    host name's right-to-left override is cited as its escape); the one rule of selector
    matching."""
    d = decimal_of(cell)
    return ("n", d.normalize()) if d is not None else ("s", rules.printable(cell.strip()))


def selected(scratch: TableCache, name: str, rows: list, filters: list) -> list:
    """The rows whose cells equal the filters' values (key_of), through an index of the table by
    those columns, built once per table and set of columns: a report's citations cost their
    number plus the table's rows, never their product."""
    if not filters:
        return rows
    cols = tuple(k for k, _ in filters)
    if (index := scratch.cache.get((name, cols))) is None:
        index = scratch.cache[(name, cols)] = {}
        for r in rows:
            index.setdefault(tuple(key_of(r.get(k, "")) for k in cols), []).append(r)
    return index.get(tuple(key_of(v) for _, v in filters), [])


def aggregate(values: list, agg: str, what: str):
    nums = [v for v in values if v is not None and v != ""]
    if agg == "count":
        return D(len(nums))
    if not nums:
        raise NoTable(f"{what}: the selected cells are empty")
    if agg == "first":
        return nums[0]
    dec = [decimal_of(v) if isinstance(v, str) else v for v in nums]
    if any(d is None for d in dec):
        raise NoTable(f"{what}: {agg} of cells that are not numbers")
    fn = {"median": statistics.median, "min": min, "max": max, "sum": sum,
          "mean": statistics.mean}[agg]
    return D(fn(dec))


def lookup(scratch: TableCache, cite: Citation, roles: set[str]) -> dict:
    """role (value, min, max) -> (value: Decimal | str, table unit | None); plus 'label'."""
    if not cite.selector:
        raise NoTable(f"the citation names {cite.table} but no column or path")
    items = split_selector(cite.selector)
    data = load_table(scratch, cite.table)
    return lookup_csv(scratch, cite.table, data, items, roles) if cite.table.endswith(".csv") \
        else lookup_json(cite.table, data, items, roles)


ENTRY_RE = re.compile(r"^([\w.]+)\[(.+)\]$")  # a column of host events, one by name


def lookup_csv(scratch, name, data, items, roles):
    header = data[0]
    column, agg, filters = items[0], None, []
    entry = ENTRY_RE.match(column)
    if entry:  # `host_events[Thunks::Initialize]`: one host event's time in a list cell
        column, entry = entry.groups()
        if (name, column) not in rules.HOST_EVENT_COLUMNS:
            raise NoTable(f"{name} {column} is not a list of host events: `column[name]` reads "
                          "one entry of " + ", ".join(
                              f"{t} {c}" for t, c in sorted(rules.HOST_EVENT_COLUMNS)))
    for it in items[1:]:
        if it in AGGREGATES:
            agg = it
        elif "=" in it:
            filters.append(it)
        else:
            raise NoTable(f"cannot read selector item '{it}' (an aggregate or key=value)")
    if column not in header:
        raise NoTable(f"{name} has no column {column}")
    sel, filters = filtered(scratch, name, data, filters)
    where = ", ".join(f"{k}={v}" for k, v in filters)
    units = {r.get("unit") for r in sel} if "unit" in header else set()
    col = declared(name, column)  # its declared unit, as TABLE_UNITS names it (none: a count)
    unit = (col and DECLARED_UNITS.get(col.unit)) or column_unit(column) or (
        units.pop() if len(units) == 1 else None)
    out = {}
    cells = [r.get(column, "") for r in sel]
    if entry:
        cells = [host_event(c, entry, f"{name} {column}") for c in cells]
        unit = "us"
    for role in roles:
        if role == "value":
            if agg in (None, "range"):  # one row, or rows that all hold the same cell
                if len(sel) != 1 and (agg or len(set(cells)) != 1):
                    raise NoTable(f"{len(sel)} rows of {name} match"
                                  f"{' ' + where if where else ''}, holding "
                                  f"{len(set(cells))} values, and no aggregate is given")
                v = cells[0]
                out[role] = (decimal_of(v) if decimal_of(v) is not None else v, unit)
            else:
                out[role] = (aggregate(cells, agg, f"{name} {column}"),
                             None if agg == "count" else unit)
        elif len(sel) == 1 and (sib := range_column(column, role, header)):
            if (d := decimal_of(sel[0].get(sib, ""))) is None:
                raise NoTable(f"{name} {sib} is empty or not a number in the selected row")
            out[role] = (d, unit)
        else:
            out[role] = (aggregate(cells, role, f"{name} {column}"), unit)
    labels = {label_of(r.get("label")) for r in sel} if "label" in header else set()
    out["label"] = labels.pop() if len(labels) == 1 else ("measured" if entry else None)
    if out["label"] is None and agg != "count":  # the column's one label (scratch.py)
        out["label"] = (col and label_of(col.label)) or None
    return out


def host_event(cell: str, name: str, where: str) -> str:
    """The us a host event of that name takes in a `name=us | ...` cell, as written."""
    for item in (cell or "").split(" | "):
        n, _, v = item.rpartition("=")
        if n == name:
            return v
    raise NoTable(f"{where} holds no host event {name} in the selected row")


# A declared unit (scratch.Column.unit) as this check's table unit (TABLE_UNITS); a count or
# ratio has none.
DECLARED_UNITS = {"us": "us", "ps": "ps", "ms": "ms", "s": "s", "pct": "pct", "bytes": "bytes",
                  "flop": "FLOP", "flop/s": "FLOP/s", "bytes/s": "B/s", "flop/byte": "FLOP/B"}


def declared(table: str, column: str) -> scratch.Column | None:
    """The column scratch.py declares for a table (its unit, its label); None for a table or
    column it does not declare."""
    try:
        return scratch.column(table, column)
    except scratch.ScratchError:
        return None


def lookup_json(name, data, items, roles):
    path, agg = items[0], None
    for it in items[1:]:
        if it in AGGREGATES:
            agg = it
        else:
            raise NoTable(f"cannot read selector item '{it}' (a JSON path takes an aggregate "
                          "only)")
    node, parent, key, chain = data, None, "", [data]
    for part in path.split("."):
        parent = node
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise NoTable(f"{name} has no {path} (stops at '{part}')")
        key = part
        chain.append(node)
    figure = node if isinstance(node, dict) and "value" in node else None
    if figure is None and key in ("value", "min", "max") and isinstance(parent, dict):
        figure = parent
    unit_src = figure if figure is not None else parent
    unit = unit_src.get("unit") if isinstance(unit_src, dict) else None
    if figure is None and column_unit(key):
        unit = column_unit(key)  # a share beside a figure's value: margin_us.pct_of_step
    if unit is None:
        owner = path.split(".")[-2] if key in ("value", "min", "max") and "." in path else key
        unit = column_unit(owner)
    out = {}
    for role in roles:
        if role == "value":
            v = node["value"] if figure is not None and node is figure else node
            if isinstance(v, list) and agg not in (None, "range"):
                v = aggregate(v, agg, f"{name} {path}")
            elif isinstance(v, dict | list) or v is None:
                raise NoTable(f"{name} {path} is an object or a list, not a figure")
            out[role] = (v if not isinstance(v, bool) else str(v).lower(), unit)
        elif figure is not None and figure.get(role) is not None:
            out[role] = (figure[role], unit)
        elif isinstance(node, list):
            out[role] = (aggregate(node, role, f"{name} {path}"), unit)
        else:
            raise NoTable(f"{name} {path} has no range (a figure object with min and max)")
    lab = figure.get("label") if figure is not None else (
        parent.get("label") if isinstance(parent, dict) and not isinstance(node, dict) else None)
    out["label"] = label_of(lab)
    if figure is not None and out["label"]:
        # the same value under another label beside it (a figure carried under two names):
        # named in the reason when the writer's label is the other one
        fpath = path.split(".")
        fpath = fpath[:-1] if node is not figure else fpath
        holder = chain[len(fpath) - 1] if len(fpath) >= 1 else None
        out["twins"] = {}
        if isinstance(holder, dict):
            for k, v in holder.items():
                if (isinstance(v, dict) and v is not figure and v.get("value") is not None
                        and v.get("value") == figure.get("value")
                        and label_of(v.get("label")) not in (None, out["label"])):
                    out["twins"].setdefault(label_of(v.get("label")),
                                            ".".join(fpath[:-1] + [k]))
    return out


# ---------------------------------------------------------------- analysis: comparison

def fmt(v: Decimal, quantum: Decimal) -> str:
    """A table value in the written unit, three more decimals than written."""
    with decimal.localcontext() as ctx:
        ctx.prec = DECIMAL_PREC
        q = v.quantize(quantum * D("0.001"), rounding=decimal.ROUND_HALF_EVEN)
    s = f"{q:f}"
    return s.rstrip("0").rstrip(".") if "." in s else s


def compare(num: Num, found, unit: str | None, written_unit: str | None):
    """(ok, found text in the written unit, why)."""
    if isinstance(found, int | float) and not isinstance(found, bool):
        found = D(str(found))
    if isinstance(found, str) and any((n.value, n.unit, n.quantum, n.rel) == (  # stated alike
            num.value, num.unit, num.quantum, "") for n in scan_numbers(found, [])):
        return True, found[:60], ""
    if not isinstance(found, Decimal) or not found.is_finite():
        return False, str(found)[:60], f"the table holds '{str(found)[:60]}', not a number"
    wdim, wfac = WRITTEN_UNITS.get(written_unit, (None, D(1)))
    tdim, tfac = TABLE_UNITS.get(unit, (None, D(1)))
    if wdim and tdim and wdim != tdim:
        return False, f"{found} {unit}", (f"written in {written_unit} ({DIMENSION_WORDS[wdim]}), "
                                          f"the table's unit is {unit}")
    with decimal.localcontext() as ctx:
        ctx.prec = DECIMAL_PREC
        v = found * tfac / wfac if (wdim and tdim) else found
        shown = fmt(v, num.quantum) + ("" if not written_unit else written_unit
                                       if written_unit in ("%", "x", "×") else f" {written_unit}")
        if num.rel in ("<", "<=", "≤", ">", ">=", "≥"):
            x = num.value
            ok = {"<": v < x, "<=": v <= x, "≤": v <= x, ">": v > x, ">=": v >= x,
                  "≥": v >= x}[num.rel]
            return ok, shown, "" if ok else f"the table gives {shown}, not {num.rel} {x}"
        rounded = {v.quantize(num.quantum, rounding=r)
                   for r in (decimal.ROUND_HALF_UP, decimal.ROUND_HALF_DOWN)}
    if num.value in rounded:
        return True, shown, ""
    return False, shown, f"the table gives {shown}, which rounds to {min(rounded):f}"


def rows_of(scratch, cite: Citation) -> int:
    """How many rows a row reference ("steps.csv: step=3, device=0") selects; NoTable when none
    or when it names a column that is not there."""
    data, items = load_table(scratch, cite.table), split_selector(cite.selector or "")
    for it in items:
        if "=" not in it:
            raise NoTable(f"cannot read selector item '{it}' (a row reference is key=value "
                          "filters only)")
    return len(filtered(scratch, cite.table, data, items)[0])


def filtered(scratch, name: str, data: tuple, items: list) -> tuple[list, list]:
    """The rows of a table (`data`: load_table's) its `key=value` selector items select, and
    the (key, value) filters; NoTable where a key is no column or no row is selected."""
    header, rows = data
    filters = []
    for it in items:
        k, _, v = it.partition("=")
        filters.append((k.strip(), v.strip().strip("`\"")))
        if k.strip() not in header:
            raise NoTable(f"{name} has no column {k.strip()}")
    sel = selected(scratch, name, rows, filters)
    if not sel:
        raise NoTable(f"no row of {name} has " + ", ".join(f"{k}={v}" for k, v in filters))
    return sel, filters


def combine(results):
    """One verdict of several citations in one parenthesis: the first failing one's, else ok;
    found values and reasons joined, each reason naming its table."""
    failing = [r for r in results if r[0] != "ok"]
    verdict = failing[0][0] if failing else "ok"
    labels = list(dict.fromkeys(r[1] for r in results))
    return (verdict, " | ".join(labels), " | ".join(r[2] for r in results),
            "; ".join(r[3] for r in failing))


def check_figure(scratch, fig: Figure, cite: Citation, default_unit: str | None):
    """(verdict, label, found_value, why) of one cited figure; with several citations in one
    parenthesis, the figure must hold in every one that names a column (a row reference only
    has to find its rows), and at least one must name a column."""
    members = cite.members()
    if cite.derived is not None:
        return check_derived(scratch, fig, cite)
    if len(members) == 1 and not cite.is_row_ref():
        return check_one_figure(scratch, fig, cite, default_unit)
    if paired(scratch, fig, members):  # "a to b (row 1's; row 2's)": two figures, in order
        return combine([check_one_figure(scratch, Figure(n.start, n.end, [("value", n)]), c,
                                         default_unit) for (_, n), c in zip(fig.parts, members,
                                                                              strict=True)])
    results = []
    for c in members:
        if c.is_row_ref():
            results.append(check_row_ref(scratch, c))
        else:
            v, label, found, why = check_one_figure(scratch, fig, c, default_unit)
            results.append((v, label, found, f"{c.table}: {why}" if why and len(members) > 1
                            else why))
    if all(c.is_row_ref() for c in members):
        rows_found = combine(results)
        return ("no_table" if rows_found[0] == "ok" else rows_found[0], rows_found[1],
                rows_found[2], "; ".join(filter(None, [
                    rows_found[3], "the citation names rows but no column: name the column "
                                   "that holds the figure (table: column, key=value)"])))
    return combine(results)


def evaluate(expr: str, values: dict) -> Decimal:
    """A formula's value in Decimal arithmetic: numbers, the bound names, + - * / ** and
    parentheses; ValueError for anything else (a call, an unbound name)."""
    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, int | float) \
                and not isinstance(n.value, bool):
            return D(str(n.value))
        if isinstance(n, ast.Name):
            if n.id not in values:
                raise ValueError(f"'{n.id}' is bound to no cited value or constant")
            return values[n.id]
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub | ast.UAdd):
            return -ev(n.operand) if isinstance(n.op, ast.USub) else ev(n.operand)
        if isinstance(n, ast.BinOp) and type(n.op) in BINARY:
            return BINARY[type(n.op)](ev(n.left), ev(n.right))
        raise ValueError(f"'{ast.unparse(n)}' is not arithmetic on the bound names")
    try:
        tree = ast.parse(expr.replace("×", "*").replace("−", "-"), mode="eval")
    except SyntaxError:
        raise ValueError("it is not a formula (numbers, names, + - * / ** and parentheses)") \
            from None
    with decimal.localcontext() as ctx:
        ctx.prec = DECIMAL_PREC
        return ev(tree)


BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
          ast.Div: operator.truediv, ast.Pow: operator.pow}


def derived_inputs(scratch, d) -> tuple[dict, list]:
    """The bound names' values (each cited value read as its table holds it, in its table's
    unit) and how they are shown; NoTable where one cannot be read."""
    values, shown = {}, []
    for name, src in d.inputs.items():
        if isinstance(src, Decimal):
            values[name] = src
            shown.append(f"{name}={src} [{d.sources[name]}]")
            continue
        try:
            v = lookup(scratch, src, {"value"})["value"][0]
        except NoTable as exc:
            raise NoTable(f"{name}: {exc}") from None
        if not isinstance(v, Decimal):
            raise NoTable(f"{name}: {src.table} holds '{str(v)[:40]}', not a number")
        values[name] = v
        shown.append(f"{name}={v}")
    return values, shown


def check_derived(scratch, fig: Figure, cite: Citation):
    """(verdict, label, found, why) of a figure derived by a formula over cited values: the
    check computes it and compares as with a table's value; a derived figure is inferred."""
    _, label_why, label = check_label(cite)
    d = cite.derived
    try:
        values, shown = derived_inputs(scratch, d)
        result = evaluate(d.expr, values)
    except NoTable as exc:
        return "no_table", label, "", str(exc)
    except (ValueError, ArithmeticError) as exc:
        return "no_table", label, "", f"cannot compute '= {d.expr}': {exc}"
    if len(fig.parts) != 1:
        return "wrong_value", label, "", "a derived figure is one number: write one formula " \
                                         "per figure"
    ok, s, why = compare(fig.parts[0][1], result, None, None)
    found = f"{s} (= {d.expr}: " + ", ".join(shown) + ")"
    if not ok:
        return "wrong_value", label, found, why.replace("the table gives", "the formula gives")
    if label != "inferred":
        return "no_label", label, found, label_why or (
            "a figure derived by a formula is inferred: write (inferred; = ...)")
    return "ok", label, found, ""


DERIVED_FILE = "derived.csv"


def check_derived_file(scratch) -> list[Row]:
    """derived.csv, where the writer keeps derived figures: every row's formula computed and
    its value compared (rows of line 0 in factcheck.csv)."""
    if not (scratch.folder / DERIVED_FILE).is_file():
        return []
    try:
        header, rows = load_table(scratch, DERIVED_FILE)
    except NoTable as exc:
        return [Row(0, 0, DERIVED_FILE, "", verdict="no_table", why=str(exc))]
    out = []
    for r in rows:
        claim = f"{DERIVED_FILE}: name={r.get('name', '')}"
        written = f"{r.get('value', '')}{r.get('unit', '')}".strip()
        formula = (r.get("formula") or "").strip()
        # the formula as a citation writes it after its label: `= <expr>; ...` (the `= ` may be
        # left out in the table's own column)
        parsed = parse_derived("inferred; " + (formula if formula.startswith("=") else
                                               "= " + formula))
        nums = scan_numbers(str(r.get("value") or ""), [])
        if parsed is None or len(nums) != 1:
            out.append(Row(0, 0, claim, written, "inferred", DERIVED_FILE, "", "", "no_table",
                           "the row needs a number in value and a formula `= <expr>; <name> = "
                           "<table>: <selector>; ...` (references/report-template.md)"))
            continue
        cite = Citation(0, 0, "inferred", DERIVED_FILE, "= " + parsed[1].expr, derived=parsed[1])
        verdict, label, found, why = check_derived(scratch, Figure(0, 0, [("value", nums[0])]),
                                                   cite)
        out.append(Row(0, 0, claim, written, label, DERIVED_FILE, cite.selector, found, verdict,
                       why))
    return out


def paired(scratch, fig: Figure, members: list) -> bool:
    """Two numbers joined by "to", "-" or "and" before two citations that each select one row
    (or one JSON value by its path) are two figures, each checked against its own citation
    (not a range: one row has no spread)."""
    if len(fig.parts) != 2 or len(members) != 2 or any(c.is_row_ref() for c in members):
        return False
    try:
        return all(c.table.endswith(".csv") and one_row(scratch, c) or
                   c.table.endswith(".json") and bool(c.selector) and "=" not in c.selector
                   for c in members)
    except NoTable:
        return False


def one_row(scratch, cite: Citation) -> bool:
    """Whether a CSV citation's filters select exactly one row and it names no aggregate."""
    items = split_selector(cite.selector or "")
    if len(items) < 2 or any(i in AGGREGATES for i in items[1:]):
        return False
    return rows_of(scratch, Citation(cite.start, cite.end, cite.label, cite.table,
                                     ", ".join(items[1:]))) == 1


def check_row_ref(scratch, cite: Citation) -> tuple:
    """(verdict, label, found, why) of a citation that names rows and no column: its rows must
    exist and its label must be one of the three."""
    label_ok, label_why, label = check_label(cite)
    try:
        n = rows_of(scratch, cite)
    except NoTable as exc:
        return "no_table", label, "", f"{cite.table}: {exc}"
    if not label_ok:
        return "no_label", label, "", f"{cite.table}: {label_why}"
    return "ok", label, f"{n} row{'s' if n != 1 else ''}", ""


def check_one_figure(scratch, fig: Figure, cite: Citation, default_unit: str | None):
    """(verdict, label, found_value, why) of one cited figure against one citation."""
    label_ok, label_why, label = check_label(cite)
    try:
        found = lookup(scratch, cite, {role for role, _ in fig.parts})
    except NoTable as exc:
        return "no_table", label, "", str(exc)
    except (ArithmeticError, TypeError) as exc:  # a table value no rule can compute with
        return "no_table", label, "", f"{cite.table} cannot be aggregated as cited ({exc})"
    shown, whys = [], []
    for role, num in fig.parts:
        value, unit = found[role]
        try:
            ok, s, why = compare(num, value, unit, num.unit or default_unit)
        except ArithmeticError as exc:
            ok, s, why = False, str(value)[:60], f"cannot compare with {value} ({exc})"
        shown.append(s if role == "value" else f"{role} {s}")
        if not ok:
            whys.append((f"{role}: " if len(fig.parts) > 1 else "") + why)
    found_text = "; ".join(shown)
    if whys:
        extra = f"; also {label_why}" if not label_ok else ""
        return "wrong_value", label, found_text, "; ".join(whys) + extra
    if not label_ok:
        return "no_label", label, found_text, label_why
    agrees = LABEL_AGREES.get(found.get("label") or "")
    if agrees is not None and label not in agrees:
        column = split_selector(cite.selector or "")[0] if cite.selector else cite.table
        twin = (found.get("twins") or {}).get(label)
        return "no_label", label, found_text, (
            f"labelled {label}, but {cite.table} labels {column} {found['label']}: one label "
            f"per value, the one its table gives; write ({found['label']}; {cite.table}: "
            f"{cite.selector})" + (f", or cite {twin}, which holds the same value labelled "
                                   f"{label}" if twin else ""))
    return "ok", label, found_text, ""


def check_label(cite: Citation):
    """(ok, why, normalised label) of a citation's label."""
    if cite.label is None:
        return False, "the citation has no label (measured, read or inferred)", ""
    lab = re.sub(r"\s+", " ", cite.label.replace("*", "").replace("_", " ").strip().lower())
    if lab in LABELS:
        return True, "", lab
    if lab == "inferred, not run":
        return True, "", "inferred"
    return False, f"the label '{cite.label}' is not measured, read or inferred", cite.label


def check_text_claim(scratch, cite: Citation, text: str, start: int):
    """A citation after words: the table's text must stand in text[start:cite]. (verdict,
    label, found, why, figure, covered span or None), or None when the table (any of several
    citations in one parenthesis) holds a number; each row reference must find its rows."""
    members = cite.members()
    if len(members) == 1 and not cite.is_row_ref():
        return check_one_text(scratch, cite, text, start)
    results = []
    for c in members:
        if c.is_row_ref():
            results.append(check_row_ref(scratch, c) + ("", None))
            continue
        res = check_one_text(scratch, c, text, start)
        if res is None:
            return None
        results.append(res)
    verdict, label, found, why = combine([r[:4] for r in results])
    spans = [r[5] for r in results if r[5]]
    span = (min(a for a, _ in spans), max(b for _, b in spans)) if spans else None
    return (verdict, label, found, why, next((r[4] for r in results if r[4]), ""),
            span if verdict == "ok" else None)


def check_one_text(scratch, cite: Citation, text: str, start: int):
    """check_text_claim for one citation."""
    label_ok, label_why, label = check_label(cite)
    try:
        found = lookup(scratch, cite, {"value"})
    except NoTable as exc:
        return "no_table", label, "", str(exc), "", None
    value = found["value"][0]
    if isinstance(value, Decimal):
        return None
    shown = str(value)[:60]
    words = str(value).split()
    m = re.compile(r"\s+".join(map(re.escape, words))).search(text, start, cite.start) \
        if words else None
    if m or (words and normalise_words(str(value)) in normalise_words(text[start:cite.start])):
        # matched word for word, or (escapes and emphasis undone) somewhere since the previous
        # citation: that stretch is the quoted text
        span = (m.start(), m.end()) if m else (start, cite.start)
        if not label_ok:
            return "no_label", label, shown, label_why, shown, span
        return "ok", label, shown, "", shown, span
    return ("wrong_value", label, shown,
            f"the table holds '{shown}', which the text before the citation does not say",
            re.sub(r"\s+", " ", text[start:cite.start]).strip()[-40:], None)


def normalise_words(s: str) -> str:
    """Words compared as text: emphasis, underscores and Markdown's backslash escapes undone."""
    s = re.sub(r"\\([\\`*_\[\](){}<>#+.!|-])", r"\1", s)
    return re.sub(r"\s+", " ", re.sub(r"[_\-`*]", " ", s)).strip().lower()


# ---------------------------------------------------------------- analysis: segments

def mask(text: str, spans) -> str:
    chars = list(text)
    for s, e in spans:
        for i in range(s, e):
            if chars[i] != "\n":
                chars[i] = " "
    return "".join(chars)


def code_spans(masked: str, add) -> list[tuple]:
    """The code spans of a segment (masked out by the caller); each number inside is skipped,
    but a span that is a figure with its unit alone (`12 us`, `3.5%`) fails: a figure is never
    hidden in code (`add`: add_row's rest)."""
    spans = []
    for m in CODE_SPAN_RE.finditer(masked):
        for n in NUM_RE.finditer(m.group(2)):
            s = m.start(2) + n.start()
            p = m.group(2)[n.start() - 1] if n.start() else ""
            if p.isalnum() or (p and p in "_."):
                continue
            unit = UNIT_RE.match(m.group(2), n.end())
            if unit and (unit.group(1) or "") not in ("", "s", "B") and \
                    m.group(2).strip() == n.group(0) + unit.group(0):
                add(s, n.group(0) + unit.group(0), "no_table",
                    why="a figure with a unit inside backticks is not checked: write it outside "
                        "code, with its citation")
            else:
                add(s, n.group(0), "skipped", why="inside backticks")
        spans.append((m.start(), m.end()))
    return spans


def quoted(masked: str, cites: list, add) -> list[tuple]:
    """The block-quote lines of a segment without a citation (someone else's words: the
    user's); each number in one is said as skipped, never hidden (`add`: add_row's rest). A
    cited figure in one is the report's own, checked wherever it stands."""
    spans = []
    for m in QUOTE_LINE_RE.finditer(masked):
        if any(m.start() <= c.start < m.end() for c in cites):
            continue
        for n in NUM_RE.finditer(m.group(0)):
            add(m.start() + n.start(), n.group(0), "skipped",
                why="in a block quote: someone else's words (the user's), not checked")
        spans.append((m.start(), m.end()))
    return spans


def check_segment(scratch, text: str, where, claim_of, ctx: Context, rows: list):
    """Every number and citation of one segment (a paragraph, a heading, a table cell).
    `where(pos)` -> (line, global position); `claim_of(pos)` -> the claim text."""
    code = [(m.start(), m.end()) for m in CODE_SPAN_RE.finditer(text)]
    cites = [c for c in find_citations(text)  # a citation shown in backticks is an example
             if not any(s < c.start < e for s, e in code)]
    add = functools.partial(add_row, rows, where, claim_of)  # add_row's rest
    masked = mask(text, [(c.start, c.end) for c in cites])
    spans = code_spans(masked, add)
    spans += [(m.start(), m.end()) for m in LINK_TARGET_RE.finditer(masked)]
    spans += quoted(masked, cites, add)
    masked = mask(masked, spans)
    named = []
    nums = scan_numbers(masked, named, text)
    for s, e, why in named:
        add(s, text[s:e], "skipped", why=why)
    figures = group_figures(masked, nums, cites)
    claimed, covered, misquoted = {}, [], set()
    for cite in cites:  # a figure written inside its citation: "(0.0%, inferred; ...)"
        if cite.inner is not None:
            s, e = cite.inner
            if inner := scan_numbers(mask(text, [(0, s), (e, len(text))]), [], text):
                fig = group_figures(text, inner)[0]
                figures.append(fig)
                claimed[id(fig)] = cite
    dc = ctx.default_cite
    if dc is not None and not cites and not ctx.skip_all and text.strip():
        # a table cell under a header citing a text column: the cell must say that text
        if (res := check_text_claim(scratch, dc.at(len(text)), text, 0)) is not None:
            verdict, label, found, why, figure, _ = res
            add(len(text) - len(text.lstrip()), figure, verdict, cite=dc, label=label,
                found=found, why=why + (" (the column header's citation)" if why else ""))
            covered.append(((0, len(text)), f"inside the text cell checked against {dc.table}"))
    # one walk: the figures before each citation not yet claimed (a stack: its top is claimed,
    # or, for a value's citation, the nearest below the identifiers on top), and where the
    # previous citation ended
    by_end = sorted(figures, key=lambda f: f.end)
    unclaimed: list = []
    nxt = prev = 0
    for i, cite in enumerate(cites):
        while nxt < len(by_end) and by_end[nxt].end <= cite.start:
            unclaimed.append(by_end[nxt])
            nxt += 1
        rows_only = all(c.is_row_ref() for c in cite.members())
        # the nearest figure before it; a value's citation passes over the identifiers between
        # ("610 us on GPU 0 in step 1 (...)"), a row citation claims one ("step 3 (...)")
        k = len(unclaimed) - 1
        while not rows_only and k > 0 and skip_reason(masked, unclaimed[k]):
            k -= 1
        fig = unclaimed[k] if unclaimed and cite.inner is None else None
        res, start = None, prev
        if cite.derived is None and (cite.label is not None or cite.selector is not None):
            # a quoted text cell that ends in a number is a text claim, not that number's; the
            # quoted text starts after the previous citation (a file merely named in
            # parentheses, "(roofline.svg)", is no citation); a number written alone is
            # checked against the sentence (compare)
            res = check_text_claim(scratch, cite, text, prev)
            prev = cite.end
        if (fig is not None and k > 0 and len(cite.members()) == 2 and not rows_only
                and AND_SEP_RE.match(masked[unclaimed[k - 1].end:fig.start])
                and len(unclaimed[k - 1].parts) == len(fig.parts) == 1):
            a = unclaimed[k - 1]  # "a and b (c1; c2)": two figures, each its citation's
            both = Figure(a.start, fig.end, [("min", a.parts[0][1]), ("max", fig.parts[0][1])])
            if paired(scratch, both, cite.members()):
                del unclaimed[k - 1]
                k -= 1
                figures.remove(a)
                figures[figures.index(fig)] = fig = unclaimed[k] = both
        named = cite.label is None and cite.selector is None and cite.derived is None
        if (fig is not None and gap_ok(masked[fig.end:cite.start]) and not ctx.skip_all
                and (not skip_reason(masked, fig) if rows_only  # "step 3 (...: step=3)"
                     else res is None or res[0] != "ok")
                and not (named and skip_reason(masked, fig))):  # "change 1 (changes.csv)"
            claimed[id(fig)] = cite
            if res is not None and any(f is not fig and f.start >= start and not skip_reason(
                    masked, f) for f in unclaimed):  # a misquote: the sentence's number is not it
                misquoted.add(id(fig))
            del unclaimed[k]
            continue
        if cite.inner is not None:
            continue  # its own figure, claimed above
        if cite.label is None and cite.selector is None:
            continue  # a file named in parentheses, not a citation
        if res is None:
            bad = NOT_DECIMAL_RE.search(masked, max(cites[i - 1].end if i else 0,
                                                     cite.start - 80), cite.start)
            if bad and not rows_only:  # NaN, inf, 0x1F, 1_135.9, 1e999999999 (...): no figure
                add(bad.start(1), bad.group(1), "wrong_value", cite=cite,
                    why=f"'{bad.group(1)}' is not a finite decimal figure "
                    "(a figure is digits, with an optional point and exponent)")
            else:
                add(cite.start, "", "skipped", cite=cite, why="a citation with no number before it")
            continue
        verdict, label, found, why, figure, span = res
        add(cite.start, figure, verdict, cite=cite, label=label, found=found, why=why)
        if span and verdict == "ok":
            covered.append((span, f"inside the text quoted from {cite.table} (checked as text)"))
    check_figures(scratch, text, masked, figures, cites, claimed, covered, ctx, add, misquoted)


def check_figures(scratch, text: str, masked: str, figures, cites, claimed: dict,
                  covered: list, ctx, add, misquoted) -> None:
    """Each figure's verdict: claimed by a citation (`misquoted`: a failed quote's), inside a
    quoted text, skipped, under a header's citation, or without one."""
    starts = [c.start for c in cites]
    for fig in figures:
        inside = next((why for (s, e), why in covered if s <= fig.start and fig.end <= e), "")
        if inside and id(fig) not in claimed:
            add(fig.start, text[fig.start:fig.end], "skipped", why=inside)
            continue
        rel = fig.parts[0][1].rel
        written = rel + re.sub(r"\s+", " ", text[fig.start:fig.end]).strip()
        cite = claimed.get(id(fig))
        counts = counted_word(text, fig.end)
        if cite is not None:
            verdict, label, found, why = check_figure(scratch, fig, cite, ctx.default_unit)
            if id(fig) in misquoted and verdict == "ok" and decimal_of(found) is None:
                verdict, why = "wrong_value", f"the table holds '{found}', not a number"
            add(fig.start, written, verdict, cite=cite, label=label, found=found, why=why,
                counts=counts)
            continue
        ints = all(n.quantum == 1 and n.unit is None for _, n in fig.parts)
        reason = ctx.skip_all or (ctx.skip_ints if ints else "") or skip_reason(masked, fig)
        if reason:
            add(fig.start, written, "skipped", why=reason)
        elif ctx.default_cite is not None:
            cite = ctx.default_cite
            verdict, label, found, why = check_figure(scratch, fig, cite, ctx.default_unit)
            add(fig.start, written, verdict, cite=cite, label=label, found=found,
                why=why + (" (the column header's citation)" if why else ""))
        elif lab := LABEL_ONLY_RE.match(text, fig.end):
            add(fig.start, written, "no_table", label=lab.group(1),
                why="a label but no table: write (label; table: column or path)")
        else:
            k = bisect.bisect_left(starts, fig.end)  # the first citation after it
            later = cites[k] if k < len(cites) else None
            if later is not None and not re.search(r"[.!?]\s", masked[fig.end:later.start]):
                why = (f"its citation is too far: at most {MAX_GAP_WORDS} words (and no "
                       "other figure) may stand between a number and its citation; cite it "
                       "right after the number")
            else:
                why = "no citation: write (label; table: column or path) after it"
            add(fig.start, written, "no_table", why=why, counts=counts)


def add_row(rows, where, claim_of, pos, figure, verdict, cite=None, label="", found="", why="",
            counts=""):
    line, gpos = where(pos)
    members = cite.members() if cite else []
    rows.append(Row(line, gpos, claim_of(pos), figure, label if cite or label else "",
                    " | ".join(c.table for c in members),
                    " | ".join(c.selector or "" for c in members), found, verdict, why,
                    counts))


# the words a figure counts: the first two after it, past a citation written right after it
COUNTED_RE = re.compile(r"\s*(?:\([^()]*\)\s*)?([A-Za-z][A-Za-z-]*)(?:\s+([A-Za-z][A-Za-z-]*))?")


SUBJECT_RE = re.compile(r"\s+(?:(?:the|its|a|an|their|this|that)\s+)?([A-Za-z][A-Za-z-]*)")


def counted_word(text: str, end: int) -> str:
    """What the figure ending at `end` counts, its next two words ("kernel ran" of "32 kernels
    ran"; a plural's s cut: "1 step", "2 steps"), or what a share is of ("of peak" of "100% of
    peak", "of time" of "100% of the time"); "" where no word follows."""
    if not (m := COUNTED_RE.match(text, end)):
        return ""
    word = m.group(1).lower()
    if word in ("of", "in"):
        sub = SUBJECT_RE.match(text, m.end(1))
        return f"{word} {sub.group(1).lower().removesuffix('s')}" if sub else word
    return " ".join(w.lower().removesuffix("s") for w in m.groups() if w)


def same_thing(a: str, b: str) -> bool:
    """Whether two figures count one thing: a share's "of ..." alike, a count's first word among
    the other's two ("8 steps", "8 analysed steps"; never "32 steps" and "32 kernels")."""
    return a == b if not (a and b) or "of " in (a[:3], b[:3]) or "in " in (a[:3], b[:3]) else \
        a.split()[0] in b.split() or b.split()[0] in a.split()


def collapse(s: str) -> str:
    """The claim as factcheck.csv shows it: whitespace collapsed, cut to CLAIM_CHARS. Only as
    much of `s` is read as those characters need: a paragraph of one endless sentence holding
    thousands of citations gives each of its rows the same claim, never a copy of all of it."""
    n = CLAIM_CHARS * 2
    while True:
        c = re.sub(r"\s+", " ", s[:n]).strip()
        if len(c) > CLAIM_CHARS or n >= len(s):
            break
        n *= 4
    return c if len(c) <= CLAIM_CHARS else c[:CLAIM_CHARS - 1] + "…"


def check_report(scratch: TableCache, text: str) -> list[Row]:
    rows: list[Row] = []
    cleaned = clean_report(text)
    line_start = [0, *itertools.accumulate(len(ln) + 1 for ln in cleaned.split("\n")[:-1])]
    for kind, lines in blocks(cleaned):
        if kind == "table":
            check_table(scratch, lines, line_start, rows)
            continue
        first = lines[0][0]
        seg = "\n".join(ln for _, ln in lines)
        starts = [0, *itertools.accumulate(len(ln) + 1 for _, ln in lines[:-1])]

        def where(pos, first=first, starts=starts):
            i = bisect.bisect_right(starts, pos) - 1
            return first + i, line_start[first - 1 + i] + pos - starts[i]

        bounds = [0] + [m.end() for m in SENTENCE_END_RE.finditer(seg)] + [len(seg) + 1]

        def claim_of(pos, seg=seg, bounds=bounds):
            i = bisect.bisect_right(bounds, pos) - 1
            return collapse(seg[bounds[i]:bounds[i + 1]])

        if m := (HEADING_NUMBER_RE if kind == "heading" else LIST_MARKER_RE).match(seg):
            if kind == "heading":
                add_row(rows, where, claim_of, m.start(2), m.group(2), "skipped",
                        why="a section number")
            seg = seg[:m.start(2)] + " " * len(m.group(2)) + seg[m.end(2):]
        check_segment(scratch, seg, where, claim_of, Context(), rows)
    rows.sort(key=lambda r: (r.line, r.pos))
    restated(rows)
    return rows


def written_value(figure: str) -> tuple | None:
    """(value, unit) of one number as written ("100%", "30"), in the unit's base; else None."""
    nums = scan_numbers(figure.strip(), [])
    if len(nums) != 1 or nums[0].rel or nums[0].end != len(figure.strip()):
        return None
    dim, factor = WRITTEN_UNITS.get(nums[0].unit, (None, D(1)))
    return nums[0].value * factor, dim


CONSTANT_SHOWN_RE = re.compile(r"(\w+)=(-?[\d.]+(?:E[-+]?\d+)?) \[([^\]]+)\]")


def constants_of(row: Row) -> list[tuple]:
    """(name, value, source) of the named constants a derived figure's row shows."""
    return [(n, D(v), s) for n, v, s in CONSTANT_SHOWN_RE.findall(row.found_value)] \
        if row.selector.startswith("= ") else []


def restated(rows: list[Row]) -> None:
    """An uncited figure that restates one cited and found right elsewhere is that figure: ok,
    saying where it is cited. A whole number restates a cited value ("all 30 kernels"), one
    with decimals the same figure written alike ("5,007.4 us"); a count or share restates only
    one of the same thing (same_thing: "100% of peak" never restates "100% of GPU time")."""
    cited: dict = {}  # (value, dimension) -> the rows that cite it, found right
    constants: dict = {}  # value -> (name, source, row) of a derived figure's named constant
    for r in rows:
        if r.verdict == "ok" and r.table:
            if (v := written_value(r.figure)) is not None:
                cited.setdefault(v, []).append(r)
            for name, value, source in constants_of(r):
                constants.setdefault(value, (name, source, r))
    for r in rows:
        if r.verdict != "no_table" or not r.why.startswith(("no citation", "its citation is")):
            continue
        if (v := written_value(r.figure)) is None:
            continue
        unit = v[1] not in (None, "pct")
        if src := next((c for c in cited.get(v, ()) if (
                "." not in r.figure or c.figure == r.figure) and (
                unit or (r.counts and same_thing(r.counts, c.counts)))), None):
            r.verdict, r.label, r.table, r.selector, r.found_value = \
                "ok", src.label, src.table, src.selector, src.found_value
            r.why = f"restates the figure cited on line {src.line} ({src.table}: {src.selector})"
        elif v[0] in constants:  # a constant, as written, decimals and all, in any unit
            name, source, src = constants[v[0]]
            r.verdict, r.label, r.table, r.selector = "ok", src.label, f"[{source}]", name
            r.why = f"restates the constant {name} [{source}] of line {src.line}'s formula"


def check_table(scratch, lines, line_start, rows):
    """A Markdown table: header citations apply to the cells below (a filter value `*` takes the
    row's first cell, `*2` its second, ...: those cells are the row's key); a cell's own
    citation wins."""
    if len(lines) < 2 or not SEPARATOR_RE.match(lines[1][1]):
        for no, ln in lines:  # not a table: plain text lines
            check_row_cells(scratch, no, ln, line_start, [(ln, 0)], [Context()], rows)
        return
    head_no, head = lines[0]
    head_cells = split_cells(head)
    contexts, key_cells = [], set()
    for text, _ in head_cells:
        cites = find_citations(text)
        rest = mask(text, [(c.start, c.end) for c in cites])
        um = re.search(r"\((" + "|".join(re.escape(u) for u in WRITTEN_UNITS) + r")\)", rest)
        name = re.sub(r"\([^)]*\)", "", rest).strip(" *_`").lower()
        ctx = Context(default_unit=um.group(1) if um else None)
        if len(cites) == 1 and cites[0].selector:
            ctx.default_cite = cites[0]
            key_cells |= {int(n or 1) - 1 for c in cites[0].members()
                          for n in KEY_REF_RE.findall(c.selector or "")}
        if name in IDENTIFIER_COLUMNS:
            ctx.skip_ints = f"an identifier (column {name})"
        contexts.append(ctx)
    heads = [mask(t, [(c.start, c.end) for c in find_citations(t)]) for t, _ in head_cells]
    check_row_cells(scratch, head_no, head, line_start, list(zip(heads, (o for _, o in
                    head_cells), strict=True)), [Context()] * len(heads), rows)
    for no, ln in lines[2:]:
        cells = split_cells(ln)
        keys = [key_text(t) for t, _ in cells]

        def key_of(m, keys=keys):
            k = int(m.group(1) or 1) - 1
            v = keys[k] if k < len(keys) else ""
            return "=" + (f'"{v}"' if "," in v else v)

        ctxs = []
        for j, _ in enumerate(cells):
            base = contexts[j] if j < len(contexts) else Context()
            ctx = Context(base.default_cite, base.default_unit, base.skip_all, base.skip_ints)
            if ctx.default_cite is not None and ctx.default_cite.selector:
                ctx.default_cite = ctx.default_cite.with_selectors(
                    lambda sel, key_of=key_of: KEY_REF_RE.sub(key_of, sel))
            if j in key_cells and base.default_cite is None:
                ctx.skip_all = "the row key (the column headers' key=* filter)"
            ctxs.append(ctx)
        check_row_cells(scratch, no, ln, line_start, cells, ctxs, rows)


EMPHASIS_RE = re.compile(r"^(\*{1,3})(?=\S)(.*?)(?<=\S)\1$", re.S)

CODE_CELL_RE = re.compile(r"^(`+)(.*)\1$", re.S)

ESCAPE_RE = re.compile(r"\\([\\`*_\[\](){}<>#+.!|-])")


def key_text(cell: str) -> str:
    """A table cell as a row key, the name it shows: a code span's text verbatim, else the text
    with Markdown's backslash escapes undone and asterisk emphasis taken off. Underscores are
    kept: `__call__`, `_fused_op_` are names (write emphasis with asterisks)."""
    t = cell.strip()
    while m := EMPHASIS_RE.match(t):
        t = m.group(2).strip()
    m = CODE_CELL_RE.match(t)
    n = len(m.group(1)) if m else 0
    if m and not re.search(rf"(?<!`)`{{{n}}}(?!`)", m.group(2)) and not m.group(2).endswith("`"):
        inner = m.group(2)
        # CommonMark takes one space off each end when both ends have one (`` ` a ` ``)
        if len(inner) > 1 and inner.startswith(" ") and inner.endswith(" ") and inner.strip():
            inner = inner[1:-1]
        return inner.replace("\\|", "|")
    return ESCAPE_RE.sub(r"\1", t).strip()


def check_row_cells(scratch, no, line, line_start, cells, ctxs, rows):
    claim = collapse(line)
    for (text, off), ctx in zip(cells, ctxs, strict=True):
        def where(pos, off=off):
            return no, line_start[no - 1] + off + pos
        check_segment(scratch, text, where, lambda pos: claim, ctx, rows)


# ---------------------------------------------------------------- writers

# SKILL.md's length for the sections before the appendix, citations and comments not counted
WORDS_BEFORE_APPENDIX = 2000
APPENDIX_RE = re.compile(r"^#{1,6}[ \t]+Appendix\b", re.M | re.I)


def words_before_appendix(text: str) -> int:
    """The words of the sections before the first heading named Appendix, without citations
    and HTML comments (SKILL.md's count; an unclosed comment runs to the end), in one pass."""
    m = APPENDIX_RE.search(text)
    text = text[:m.start()] if m else text
    parts, at = [], 0
    while (i := text.find("<!--", at)) >= 0:
        parts.append(text[at:i])
        j = text.find("-->", i + 4)
        at = len(text) if j < 0 else j + 3
    body = " ".join(parts + [text[at:]])
    for c in reversed(find_citations(body)):
        body = body[:c.start] + " " + body[c.end:]
    return len(body.split())


def result_of(rows: list[Row], report: Path, words: int = 0) -> dict:
    counts = {v: sum(r.verdict == v for r in rows) for v in VERDICTS}
    failing = [r for r in rows if r.verdict in FAILING]
    checked = any(r.verdict != "skipped" for r in rows)  # nothing checked is no pass
    notes = [] if checked else [
        "the report holds no cited figure: nothing was checked against a table"]
    if words > WORDS_BEFORE_APPENDIX:
        notes.append(f"the sections before the appendix hold {words:,} words (citations and "
                     f"comments not counted), past the {WORDS_BEFORE_APPENDIX:,} SKILL.md asks "
                     "for: move detail into the appendix, citations and all")
    try:
        digest = hashlib.sha256(report.read_bytes()).hexdigest()
    except OSError:
        digest = None
    skipped: dict = {}
    for r in rows:
        if r.verdict == "skipped":
            kind = re.sub(r" after '[^']*'.*| (?:from|against) \S+.*| \([^)]*\)$", "", r.why)
            skipped[kind] = skipped.get(kind, 0) + 1
    return {"step": "factcheck", "status": "done",
            "verdict": "fail" if failing or not checked else "pass",
            "report": str(report), "report_sha256": digest, "figures": counts,
            "words_before_appendix": words,
            "skipped": dict(sorted(skipped.items(), key=lambda kv: (-kv[1], kv[0]))),
            "failing": [{"line": r.line, "figure": r.figure, "verdict": r.verdict,
                         "why": r.why, "claim": r.claim} for r in failing],
            "notes": notes, "refusals": [], "tables": {TABLE: len(rows)}}


def write(out: Path, rows: list[Row], result: dict):
    with rules.replace_files(out, ".factcheck-") as tmp:  # both files whole or not at all
        n = scratch.write_table(tmp, TABLE, ([getattr(r, c) for c in COLUMNS] for r in rows))
        scratch.write_result(tmp, RESULT_FILE, result)
    return n


def run(report: Path, out: Path):
    if not report.is_file():
        raise step_cli.StepError(f"the report {report} does not exist or is not a file; "
                                 "give the Markdown report's path")
    if not out.is_dir():
        raise step_cli.StepError(f"the scratch folder {out} does not exist; give the folder "
                                 "the steps wrote into with --out DIR")
    try:
        text = report.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise step_cli.StepError(
            f"the report {report} cannot be read as UTF-8 text ({exc})") from None
    cache = TableCache(out)
    rows = check_derived_file(cache) + check_report(cache, text.replace("\r\n", "\n"))
    result = result_of(rows, report, words_before_appendix(text))
    return rows, result, write(out, rows, result)
