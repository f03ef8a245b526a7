"""A report as the fact check reads it (standard library only): its text with code and comments
blanked, its blocks and table cells, each number with its unit, and each citation `(label;
table: selector)` with what it covers: the grammar factcheck.py checks against the tables. The
units a report may write and the words after which an integer is an identifier, not a figure,
are here too."""

from __future__ import annotations

import bisect
import decimal
import re
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

# Words allowed between a number and its citation ("2,140 graph kernels on GPU 0 in step 3
# (measured; ...)": plain words and the identifiers among them); more, or a sentence's end, and
# the citation is taken to cite something else, and the number is uncited.
MAX_GAP_WORDS = 6
# A written exponent of more digits than this (e1000 and beyond: past every float and every
# table) is no figure; Decimal would refuse to scale by it.
MAX_EXPONENT_DIGITS = 3

# What stands where a figure should, before a citation, but is not a finite decimal: NaN and
# infinities (a table's cell or a division by zero written out), other bases, digit groups
# joined by underscores, an exponent no figure has. A figure of these fails the check; it is
# never skipped. Up to three words (a unit) may stand between it and the citation.
NOT_DECIMAL_RE = re.compile(
    r"(?i)(?<![\w.])([-+\u2212]?(?:nan|inf(?:inity)?|0[xob][0-9a-f]+"
    r"|\d[\d,]*_[\d_,]*(?:\.[\d_]+)?"
    r"|\d[\d,]*(?:\.\d+)?e[-+]?\d{" + str(MAX_EXPONENT_DIGITS + 1) + r",}))(?![\w.])"
    r"(?:%|x|\u00d7)?(?:\s+[^\W\d_]+(?:/[^\W\d_]+)?){0,3}\s*$")
# Words after which an integer is an identifier, not a figure (step, GPU, device, stream, rank,
# program, section, line, item, check; parts of a model or a run: "layer 4", "block 2", "node 1").
# Words that are also verbs ("blocks 3 streams", "changes 12 launches") count in the singular
# only; words mostly verbs before a count ("process 12 batches", "shard 8 ways") are not listed.
IDENTIFIER_WORDS = ("step_num", "steps?", "gpus?", "devices?", "streams?", "ranks?", "programs?",
                    "sections?", "lines?", "items?", "checks?", "change", "cause",
                    "layers?", "block", "stage", "head", "epochs?", "iterations?", "iter",
                    "nodes?", "host", "workers?", "replicas?", "experts?", "pid", "tid",
                    "thread", "core", "chip", "slice", "task", "phase", "figure", "table",
                    "columns?", "rows?", "axis", "axes", "dimension", "dim")
# The plurals that are also verbs ("changes 12 to 16 launches"): a list of integers after one
# names things ("changes 1, 2 and 3", "blocks 4 and 5"), a range only where no word follows
# ("changes 1 to 3.").
PLURAL_VERBS = ("changes", "causes", "blocks", "stages", "heads", "cores", "chips", "slices",
                "tasks", "phases", "figures", "tables")
# A dimension order, a permutation of 0 to n-1 in parentheses or brackets ("the order
# (0, 2, 1, 3)", "transpose [1, 0]"): a name of axes, no figure; up to the figure, its opening
PERMUTATION_RE = re.compile(r"[(\[]((?:\s*\d+\s*,)*\s*)$")
# an array's dimension ("4096 by 4096", "8 × 128") or an alignment ("multiples of 128"): names
SHAPE_BEFORE_RE = re.compile(r"(?:\d\s*(?:x|×|by)|\bmultiples? of)\s*$")
SHAPE_AFTER_RE = re.compile(r"\s*(?:x|×|by)\s*\d")
ENUM_MAX = 20  # "(3) the ..." with at most this number is an enumeration
YEARS = (1900, 2099)  # a 4-digit integer in this range, followed by no word, is a year
D = Decimal
# Written units: symbol -> (dimension, factor to the dimension's base: us, pct, bytes, ...).
WRITTEN_UNITS = {
    "ps": ("time", D("0.000001")), "ns": ("time", D("0.001")), "us": ("time", D(1)),
    "µs": ("time", D(1)), "μs": ("time", D(1)), "ms": ("time", D(1000)),
    "s": ("time", D(1000000)),
    "%": ("pct", D(1)),
    "B": ("bytes", D(1)), "bytes": ("bytes", D(1)), "kB": ("bytes", D(10) ** 3),
    "KB": ("bytes", D(10) ** 3), "MB": ("bytes", D(10) ** 6), "GB": ("bytes", D(10) ** 9),
    "TB": ("bytes", D(10) ** 12), "KiB": ("bytes", D(2) ** 10), "MiB": ("bytes", D(2) ** 20),
    "GiB": ("bytes", D(2) ** 30), "TiB": ("bytes", D(2) ** 40),
    "FLOP/B": ("intensity", D(1)), "FLOP/byte": ("intensity", D(1)),
    "x": (None, D(1)), "×": (None, D(1)),
}
for _p, _f in (("", 1), ("k", 10 ** 3), ("K", 10 ** 3), ("M", 10 ** 6), ("G", 10 ** 9),
               ("T", 10 ** 12), ("P", 10 ** 15)):
    WRITTEN_UNITS[f"{_p}B/s"] = ("byte_rate", D(_f))
    if _p != "K":
        for _u, _d in (("FLOP/s", "flop_rate"), ("FLOPS", "flop_rate"), ("FLOP", "flop"),
                       ("FLOPs", "flop")):
            WRITTEN_UNITS[_p + _u] = (_d, D(_f))
for _p, _e in (("Ki", 10), ("Mi", 20), ("Gi", 30), ("Ti", 40)):
    WRITTEN_UNITS[f"{_p}B/s"] = ("byte_rate", D(2) ** _e)
SPACE = "[ \u00a0\u2009\u202f]"
NUM_RE = re.compile(r"(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?(?:[eE][-+]?\d+(?!\w))?")
UNIT_RE = re.compile(
    f"{SPACE}?(" + "|".join(re.escape(u) for u in sorted(WRITTEN_UNITS, key=len, reverse=True)
                            if u not in ("x", "×")) + r")(?![\w/])|(x|×)(?!\w)")
LABEL_PART = r"[^;()]{0,40}?"
SELECTOR_PART = r"(?:[^()]|\([^()]*\))*?"
CITE_RE = re.compile(
    r"\(\s*(?:(?P<label>" + LABEL_PART + r")\s*;\s*)?(?P<table>[\w./-]+\.(?:csv|json|txt|md|svg))"
    # the selector takes its own spaces (stripped where it is read): a space that either the
    # selector or a pattern after it could take made an unclosed one quadratic in its spaces
    r"(?:\s*:(?P<sel>" + SELECTOR_PART + r")|\s*)\)")
MAX_LABEL_CHARS = 40  # a label is a word or three ("inferred, not run"); longer is prose
TABLE_NAME = r"[\w./-]+\.(?:csv|json|txt|md|svg)"
TABLE_TOKEN_RE = re.compile(r"(?P<table>" + TABLE_NAME + r")(?:\s*:\s*(?P<sel>.*))?", re.S)
GROUP_RE = re.compile(r"\(((?:[^()]|\([^()]*\))*)\)")
RANGE_SEP_RE = re.compile(r"^\s*(?:–|—|−|-|to)\s*$")
PAREN_OPEN_RE = re.compile(r"^\s*\(\s*(?:range:?\s*|min[–-]max:?\s*)?$")
PAREN_CLOSE_RE = re.compile(r"[^()\d\n]{0,60}?\)")
IDENT_SEP = r"(?:,|–|-|and|or|to|through|/|\.\.|…|&)"  # "GPUs 0, 1 and 7", "steps 0 through 7"
IDENT_LIST = r"#?\d+(?:\s*" + IDENT_SEP + r"\s*#?\d+)*"
IDENT_BEFORE_RE = re.compile(
    r"(?i)\b(" + "|".join(IDENTIFIER_WORDS) + r")\s*\(?\s*(?:#|no\.?\s*|id\s*)?"
    r"(?:" + IDENT_LIST + r"\s*" + IDENT_SEP + r"\s*#?)?$")
LIST_SEP = r"(?:,|and|or|&)"
PLURAL_BEFORE_RE = re.compile(r"(?i)\b(" + "|".join(PLURAL_VERBS) + r")\s+((?:#?\d+(?:\s*(?:to|"
                              r"–|through)\s*#?\d+)?\s*" + LIST_SEP + r"\s*)*)#?$")
LIST_AFTER_RE = re.compile(r"^\s*" + LIST_SEP + r"\s*#?\d")
WORD_AFTER_RE = re.compile(r"^\s+(?!only\b)[a-z]")  # "changes 2 to 6 only" names them
# where a plural of PLURAL_VERBS is a noun, so that a range after it names them even with a
# word after ("Changes 4 to 7 save less", "of changes 4 to 7 each"): a sentence's, a bullet's,
# a cell's or a parenthesis' start, or after a preposition, article or conjunction
NOUN_BEFORE_RE = re.compile(r"(?i)(?:(?:^|[.!?]\s|[\n(|]|^\s*[-*+])\s*[*_]*|\b(?:of|and|or|in|"
                            r"to|for|with|from|the|see|both|all|than|by|as)\s+)$")
LINE_START_RE = re.compile(r"(?:^|\n)\s*(?:[-*+]\s+)?\(\s*$")
# a figure written inside its citation's parentheses: "(0.0%, inferred; skip_stats.json: ...)"
INNER_FIGURE_RE = re.compile(r"^\s*([<>≈~]?\s*-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?\s*\S{0,8}?)"
                             r"\s*,\s*(measured|read|inferred(?:, not run)?)\s*$")
# A derived figure's citation: "(inferred; = 100 * a / b; a = ops.csv: device_us, instruction=x;
# b = steps.csv: dur_us, median; peak = 989e12 [peaks.md: H100 SXM bf16 dense])": the formula,
# then each name bound to a cited table value or to a number with its source in brackets.
FORMULA_RE = re.compile(r"^\s*=\s*(?P<expr>[^=]+?)\s*$")
BINDING_RE = re.compile(r"^\s*(?P<name>[A-Za-z_]\w*)\s*=\s*(?P<rest>.+?)\s*$", re.S)
CONSTANT_RE = re.compile(r"^(?P<num>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*\[(?P<source>[^\]]+)\]$")
FENCE_RE = re.compile(r"^\s*(```|~~~)")
COMMENT_RE = re.compile(r"<!--.*?-->", re.S)


# ---------------------------------------------------------------- model

@dataclass
class Num:
    """One number as written: offsets in its segment, value, rounding, unit, bound."""
    start: int
    end: int
    value: Decimal
    quantum: Decimal
    unit: str | None
    rel: str = ""


@dataclass
class Figure:
    """A number, a range a-b, or a value with its range "v (a-b)": parts by role."""
    start: int
    end: int
    parts: list  # [(role, Num)], role one of value, min, max


@dataclass
class Derived:
    """A figure's formula (`expr`, Python arithmetic: + - * / ** and parentheses) and its
    inputs: name -> the Citation of a table value, or a Decimal constant with its `sources`."""
    expr: str
    inputs: dict
    sources: dict


@dataclass
class Citation:
    """One citation; a parenthesis holding several ("(measured; a.csv: x; inferred; b.csv: y)")
    is the first with the others in `more`, all with the parenthesis' offsets."""
    start: int
    end: int
    label: str | None  # as written, None when absent
    table: str
    selector: str | None
    more: list = field(default_factory=list)
    inner: tuple | None = None  # (start, end) of a figure written inside the parentheses
    derived: Derived | None = None  # a formula over cited values (the figure is its result)

    def members(self) -> list:
        return [self] + self.more

    def with_selectors(self, fn) -> Citation:
        """The same citation with each selector passed through fn (a header's key=*)."""
        first, *rest = [Citation(c.start, c.end, c.label, c.table,
                                 fn(c.selector) if c.selector else c.selector)
                        for c in self.members()]
        first.more = rest
        return first

    def at(self, pos: int) -> Citation:
        """The same citation placed at pos (a header's citation applied to a cell)."""
        first, *rest = [Citation(pos, pos, c.label, c.table, c.selector)
                        for c in self.members()]
        first.more = rest
        return first

    def is_row_ref(self) -> bool:
        """A CSV citation of rows with no column ("steps.csv: step=3, device=0")."""
        if self.derived is not None or not self.table.endswith(".csv") or not self.selector:
            return False
        items = split_selector(self.selector)
        return bool(items) and "=" in items[0]


@dataclass
class Row:
    line: int
    pos: int
    claim: str
    figure: str
    label: str = ""
    table: str = ""
    selector: str = ""
    found_value: str = ""
    verdict: str = "skipped"
    why: str = ""
    counts: str = ""  # the word a unitless figure counts ("kernel" of "32 kernels"), if known


@dataclass
class Context:
    """What a segment inherits: a table column's citation and unit, a key or identifier cell."""
    default_cite: Citation | None = None
    default_unit: str | None = None
    skip_all: str = ""  # every number of the segment is skipped with this reason
    skip_ints: str = ""  # integers are skipped with this reason


@dataclass
class TableCache:
    folder: Path
    cache: dict = field(default_factory=dict)


# ---------------------------------------------------------------- load: the report

def clean_report(text: str) -> str:
    """Fenced code blocks and HTML comments blanked, line numbers and offsets kept."""
    lines = text.split("\n")
    fence = None
    for i, ln in enumerate(lines):
        m = FENCE_RE.match(ln)
        if fence is None and m:
            fence = m.group(1)
            lines[i] = ""
        elif fence is not None:
            if m and m.group(1) == fence:
                fence = None
            lines[i] = ""
    text = "\n".join(lines)
    # a "<!--" after the last "-->" never closes: only the text up to it is searched (else each
    # unclosed one is a search to the end, thousands of them a quadratic time)
    cut = text.rfind("-->") + 3 if "-->" in text else 0
    return COMMENT_RE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text[:cut]) + text[cut:]


def blocks(text: str):
    """(kind, [(line number, line)]) for paragraphs, list items, headings and tables."""
    out, cur, kind = [], [], None

    def flush():
        nonlocal cur, kind
        if cur:
            out.append((kind, cur))
        cur, kind = [], None

    for no, ln in enumerate(text.split("\n"), 1):
        s = ln.strip()
        if not s:
            flush()
            continue
        if s.startswith("|"):
            if kind != "table":
                flush()
                kind = "table"
            cur.append((no, ln))
            continue
        if kind == "table":
            flush()
        if s.startswith("#"):
            flush()
            out.append(("heading", [(no, ln)]))
            continue
        if re.match(r"^\s*(?:[-*+]|\d+[.)])\s", ln):
            flush()
        kind = "text"
        cur.append((no, ln))
    flush()
    return out


def split_cells(line: str):
    """A table row's cells as (text, offset in the line), split on | outside backticks."""
    cells, in_code, s = [], False, line
    start = i = s.index("|") + 1
    while i < len(s):
        c = s[i]
        if c == "`":
            in_code = not in_code
        elif c == "\\":
            i += 1
        elif c == "|" and not in_code:
            cells.append((s[start:i], start))
            start = i + 1
        i += 1
    tail = s[start:]
    if tail.strip():
        cells.append((tail, start))
    return cells


# ---------------------------------------------------------------- analysis: numbers

def decimal_of(text: str) -> Decimal | None:
    try:
        v = D(text.replace(",", "").strip())
    except (decimal.InvalidOperation, ValueError):
        return None
    return v if v.is_finite() else None


def split_group(inner: str) -> list[str]:
    """A parenthesis' text split on ; and | outside "...", backticks and nested parentheses
    (a Markdown table's escaped \\| too)."""
    parts, cur, quote, depth = [], "", None, 0
    for c in inner:
        if quote:
            quote = None if c == quote else quote
        elif c in "\"`":
            quote = c
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c in ";|" and depth == 0:
            parts.append(cur[:-1] if c == "|" and cur.endswith("\\") else cur)
            cur = ""
            continue
        cur += c
    return parts + [cur]


def parse_group(inner: str):
    """[(label, table, selector)] of a parenthesis holding one or more citations, each
    `[label;] table[: selector]`, separated by ; or |; a citation without a label takes the
    previous one's. None when the parenthesis is not citations only."""
    out, pending = [], None
    for tok in split_group(inner):
        t = re.sub(r"\s+", " ", tok).strip()
        if m := TABLE_TOKEN_RE.fullmatch(t):
            label = pending if pending is not None else (out[-1][0] if out else None)
            out.append((label, m.group("table"), (m.group("sel") or "").strip() or None))
            pending = None
        elif pending is None and len(t) <= MAX_LABEL_CHARS:
            pending = t
        else:
            return None
    return out if out and pending is None else None


def parse_derived(inner: str):
    """(label, Derived) of a parenthesis `label; = formula; name = table: selector; name =
    number [source]; ...`, or None when it is not one."""
    parts = [re.sub(r"\s+", " ", p).strip() for p in split_group(inner)]
    if len(parts) < 3 or len(parts[0]) > MAX_LABEL_CHARS:
        return None
    f = FORMULA_RE.match(parts[1])
    if not f:
        return None
    inputs, sources = {}, {}
    for part in parts[2:]:
        b = BINDING_RE.match(part)
        if not b:
            return None
        cited, const = TABLE_TOKEN_RE.fullmatch(b.group("rest")), CONSTANT_RE.match(b.group("rest"))
        if cited:
            inputs[b.group("name")] = Citation(0, 0, parts[0], cited.group("table"),
                                               (cited.group("sel") or "").strip() or None)
        elif const:
            inputs[b.group("name")] = D(const.group("num"))
            sources[b.group("name")] = const.group("source").strip()
        else:
            return None
    return parts[0], Derived(f.group("expr"), inputs, sources)


def escaped_at(text: str, i: int) -> bool:
    """Whether the character at i is backslash-escaped (an odd run of backslashes before it)."""
    n = 0
    while i - n - 1 >= 0 and text[i - n - 1] == "\\":
        n += 1
    return n % 2 == 1


def find_citations(text: str) -> list[Citation]:
    r"""The citations of a text; a parenthesis escaped as Markdown writes a literal one (`\(`,
    a capture's name quoted by the draft) opens none."""
    out, pos = [], 0
    while (i := text.find("(", pos)) >= 0:
        pos = i + 1  # past it, or past the citation read from it (below)
        if escaped_at(text, i):
            continue
        m = GROUP_RE.match(text, i)
        derived = parse_derived(m.group(1)) if m and "=" in m.group(1) else None
        parsed = parse_group(m.group(1)) if m and not derived else None
        if derived:
            label, d = derived
            tables = sorted({c.table for c in d.inputs.values() if isinstance(c, Citation)})
            out.append(Citation(m.start(), m.end(), label, " + ".join(tables) or "(constants)",
                                "= " + d.expr, derived=d))
        elif parsed and len(parsed) > 1:
            cites = [Citation(m.start(), m.end(), lab, table, sel) for lab, table, sel in parsed]
            cites[0].more = cites[1:]
            out.append(cites[0])
        elif m := CITE_RE.match(text, i):  # one citation: its selector read as written
            label = m.group("label")
            sel = re.sub(r"\s+", " ", m.group("sel") or "").strip()
            inner = INNER_FIGURE_RE.match(label) if label is not None else None
            if inner:  # the figure inside: "(0.0%, inferred; ...)" cites 0.0%
                label = inner.group(2)
                inner = (m.start("label") + inner.start(1), m.start("label") + inner.end(1))
            out.append(Citation(m.start(), m.end(),
                                re.sub(r"\s+", " ", label).strip() if label is not None
                                else None, m.group("table"), sel or None, inner=inner))
        else:
            continue
        pos = m.end()
    return out


def scan_numbers(text: str, skips: list, orig: str | None = None):
    """Numbers of a masked segment; numbers that are names (file:line, #13, name(17)) go to
    `skips` as (start, end, why). Words with digits (H100, fusion.12) are not numbers. `orig`:
    the segment before masking (a code span's name before "(17)": `jit_dot`(17))."""
    orig = text if orig is None else orig
    nums = []
    for m in NUM_RE.finditer(text):
        s, e = m.start(), m.end()
        p = text[s - 1] if s else ""
        p2 = text[s - 2] if s > 1 else ""
        if p.isalnum() or p == "_" or (p == "." and (p2.isalnum() or p2 == "_")):
            continue
        if p == "/" and p2 and not p2.isspace():
            continue
        if p == ":" and p2 and not p2.isspace():
            skips.append((s, e, "file:line or a name's number"))
            continue
        if p == "#":
            skips.append((s, e, "an identifier (#)"))
            continue
        q2 = orig[s - 2] if s > 1 else ""  # the name before "(": a code span or emphasis too
        if p == "(" and (p2.isalnum() or p2 == "_" or (q2 and q2 in "`*_")) \
                and text[e:e + 1] == ")":
            skips.append((s, e, "a program id in name(id)"))
            continue
        sign = 1
        start = s
        if p and p in "-−":
            if p2.isalpha() or p2 == "_":
                continue  # a name such as all-gather-2
            if not p2.isdigit():
                sign, start = -1, s - 1
        unit = None
        if um := UNIT_RE.match(text, e):
            unit = um.group(1) or um.group(2)
            end = um.end()
        else:
            nxt = text[e:e + 1]
            if nxt.isalnum() or nxt == "_":
                continue  # part of a word: 3rd, 2D
            end = e
        before = text[max(0, start - 3):start].rstrip()
        rel = next((r for r in ("<=", ">=", "≤", "≥", "<", ">", "~", "≈")
                    if before.endswith(r) and not before.endswith(("->", "=>"))), "")
        raw = m.group(0).replace(",", "")
        mant, _, exp = raw.lower().partition("e")
        if len(exp.lstrip("+-")) > MAX_EXPONENT_DIGITS:  # 1e999999999: no figure is that
            skips.append((s, e, "a number whose exponent no figure has"))
            continue
        decimals = len(mant.split(".")[1]) if "." in mant else 0
        quantum = D(1).scaleb(int(exp or 0) - decimals)
        nums.append(Num(start, end, sign * D(raw), quantum, unit, rel))
    return nums


def group_figures(text: str, nums: list[Num], cites=()) -> list[Figure]:
    """Numbers joined into figures: "v (a-b)", "a-b", "a to b", or one number. Numbers with a
    citation between them are never joined: each part then carries its own citation."""
    out, i = [], 0
    starts = sorted(c.start for c in cites)

    def cited_between(x: int, y: int) -> bool:
        k = bisect.bisect_left(starts, x)
        return k < len(starts) and starts[k] < y

    while i < len(nums):
        a = nums[i]
        if (i + 2 < len(nums) and PAREN_OPEN_RE.match(text[a.end:nums[i + 1].start])
                and RANGE_SEP_RE.match(text[nums[i + 1].end:nums[i + 2].start])
                and not cited_between(a.end, nums[i + 2].start)
                and (close := PAREN_CLOSE_RE.match(text, nums[i + 2].end))):
            parts = [("value", a), ("min", nums[i + 1]), ("max", nums[i + 2])]
            out.append(Figure(a.start, close.end(), inherit_units(parts)))
            i += 3
            continue
        if (i + 1 < len(nums) and RANGE_SEP_RE.match(text[a.end:nums[i + 1].start])
                and not cited_between(a.end, nums[i + 1].start)):
            parts = [("min", a), ("max", nums[i + 1])]
            out.append(Figure(a.start, nums[i + 1].end, inherit_units(parts)))
            i += 2
            continue
        out.append(Figure(a.start, a.end, [("value", a)]))
        i += 1
    return out


def inherit_units(parts):
    unit = next((n.unit for _, n in parts if n.unit), None)
    for _, n in parts:
        if n.unit is None:
            n.unit = unit
    return parts


def gap_ok(gap: str) -> bool:
    """Only up to MAX_GAP_WORDS plain words, emphasis and identifiers ("on GPU 0 in step 3":
    the caller passes over identifier figures only) between a number and its citation."""
    words = gap.replace("*", " ").replace("_", " ").split()
    return len(words) <= MAX_GAP_WORDS and all(
        re.fullmatch(r"[A-Za-z][A-Za-z'/-]*|#?\d+(?:['’]s)?,?", w) for w in words)


def skip_reason(text: str, fig: Figure) -> str:
    """Why an uncited figure is not a figure (identifier, year), or ''."""
    nums = [n for _, n in fig.parts]
    ints = all(n.quantum == 1 and n.unit is None and not n.rel and n.value >= 0 for n in nums)
    before = text[max(0, fig.start - 80):fig.start]
    if ints and len(nums) == 1 and (re.search(r"\b[A-Za-z]\s*[+-]\s*$", before[-4:]) or re.match(
            r"/[A-Za-z]\b", text[fig.end:fig.end + 3])):  # "k+1", "1/k"
        return "an index expression (" + (text[fig.start:fig.end + 2] if text[fig.end:][:1] == "/"
                                          else text[fig.start - 2:fig.end].strip()) + ")"
    if ints and (ident := IDENT_BEFORE_RE.search(before)):
        return f"an identifier after '{ident.group(1)}'"
    plural = PLURAL_BEFORE_RE.search(before) if ints else None
    if plural and (plural.group(2) or (LIST_AFTER_RE.match(text[fig.end:fig.end + 8])
                                       if len(nums) == 1 else
                                       not WORD_AFTER_RE.match(text[fig.end:fig.end + 8])
                                       or NOUN_BEFORE_RE.search(before[:plural.start(1)]))):
        return f"an identifier after '{plural.group(1)}' (a list of them)"
    if ints and len(nums) == 1 and nums[0].value <= ENUM_MAX and \
            re.search(r"\(\s*$", text[max(0, fig.start - 3):fig.start]) and \
            re.match(r"\s*\)", text[fig.end:fig.end + 3]) and (
                re.match(r"\s*\)\s+[*_`\[]{0,2}[A-Za-z]", text[fig.end:fig.end + 6])
                or LINE_START_RE.search(text[max(0, fig.start - 8):fig.start])):
        return "an enumeration: (1), (2), ..."
    if ints and (perm := PERMUTATION_RE.search(text[max(0, fig.start - 40):fig.start])) and (
            tail := re.match(r"[\d,\s]*[)\]]", text[fig.start:fig.start + 40])) and sorted(
            map(int, re.findall(r"\d+", perm.group(1) + tail.group()))) == list(
            range(len(re.findall(r"\d+", perm.group(1) + tail.group())))):
        return "a dimension order (a permutation of 0 to n-1)"
    if ints and len(nums) == 1 and (SHAPE_BEFORE_RE.search(before) or SHAPE_AFTER_RE.match(
            text[fig.end:fig.end + 12])):
        return "an array's shape (4096 by 4096) or an alignment (multiples of 128)"
    if ints and len(nums) == 1 and YEARS[0] <= nums[0].value <= YEARS[1] \
            and len(text[nums[0].start:nums[0].end]) == 4 \
            and not text[fig.end:].lstrip()[:1].isalpha():
        return "a year"
    return ""


def split_selector(sel: str) -> list[str]:
    """Selector items split on commas outside "..." and backticks."""
    items, cur, quote = [], "", None
    for c in sel:
        if quote:
            if c == quote:
                quote = None
            else:
                cur += c
        elif c in "\"`":
            quote = c
        elif c == ",":
            items.append(cur.strip())
            cur = ""
        else:
            cur += c
    items.append(cur.strip())
    return [i for i in items if i]
