#!/usr/bin/env python3
"""One self-contained HTML page from a trace report (Markdown) and its scratch folder.

Usage:
    python3 -P build_page.py REPORT.md [--scratch DIR] [--out PAGE.html]

Example:
    python3 -P $P/scripts/build_page.py /tmp/jaxtrace/report.md --scratch /tmp/jaxtrace \\
        --out /tmp/jaxtrace/report.html

Reads the report (written by the investigating-jax-traces skill, or its report_draft.md) and the
scratch folder it cites (default: the report's folder). Writes one HTML file (default:
<report stem>.html beside the report; never the report itself):
- the report rendered by markdown-it-py (CommonMark and tables) with raw HTML off: nothing in a
  report or a capture string becomes markup; HTML comments (the draft's judge places) are left
  out and counted in the header;
- every citation "(measured; steps.csv: dur_us, median)" shown as a visible label mark (a legend
  at the top says what measured, read and inferred mean) followed by its source in small type;
- the report's own SVG drawings (swimlanes.svg, roofline.svg) embedded inline, cleaned (no
  script, no event attribute, no outside reference, their CSS scoped to the figure), with a
  <title> for screen readers; any other image is named, not loaded. The cleaner judges each
  parsed attribute and CSS value as the browser will read it (names in any case, entities
  decoded): a value with an escape, a comment, an at-rule or a function other than colours,
  transforms, arithmetic and url(#own-id) is dropped, as is an href outside the drawing;
- the scratch folder's tables (changes, trust list, streams, steps, stragglers, gaps,
  reconciliation, instructions, Python lines, attribution classes, roofline, kernel names, the
  longest kernels) as real <table>s: <caption>, <th scope="col">, units in the headers,
  right-aligned numbers with their raw value in data-value, each numeric column's label; long
  tables cut to their top rows with the count of the rest;
- a header with the capture's run, host, GPUs, the report's name and the date built.
CSS is inline (a print stylesheet included); no JavaScript; nothing is requested from any other
file or host. Every string from a capture or a report is escaped in text and in attributes.

Exit codes: 0 written; 1 the report or the scratch folder cannot be used (one sentence says why);
2 usage; 3 markdown-it-py is missing (the install line is printed).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import html
import json
import os
import re
import stat
import string
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
# bootstrap: this skill's modules, and the platform (tracekit) of the skill installed beside it
sys.path[:0] = [str(HERE), str(HERE.parent.parent / "analyzing-jax-launch-overhead" / "scripts")]

import page_tables as pt

MAX_REPORT_BYTES = 20 << 20  # a report is text: larger than this is not a report
MAX_SVG_BYTES = 16 << 20
MAX_JSON_BYTES = 64 << 20
LONG_CELL = 90  # characters of a scratch-table cell shown whole; longer ones are cut mid-name
SVG_NS = "http://www.w3.org/2000/svg"
XLINK_NS = "http://www.w3.org/1999/xlink"
LABELS = {"measured": "m", "read": "r", "inferred": "i"}
LEGEND = {
    "measured": "read off the capture's timestamps",
    "read": "written in a record: the HLO, a device stat, a datasheet, another tool",
    "inferred": "computed by a rule: a matching, a threshold, a what-if (changes: not run)",
}
# the source takes its own spaces (mark strips them): a space that either the source or a
# pattern after it could take made a citation never closed quadratic in its spaces (100,000
# spaces: past 60 s)
CITE_RE = re.compile(r"\((measured|read|inferred)(, not run)?"
                     r"(?:;((?:[^()]|\([^()]*\))*?)|\s*)\)")
NUM_START_RE = re.compile(r"^[<>≈~]?\s*(-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)")
CITED_FILE_RE = re.compile(r";\s*([\w./-]+\.(?:csv|json))\s*:")
COMMENT_RE = re.compile(r"<!--.*?-->", re.S)
JUDGE_RE = re.compile(r"<!--\s*judge:", re.I)
# The CSS functions a drawing may use: colours, transforms, arithmetic, and url() to an id of its
# own; any other (image(), image-set(), cross-fade(), element(), src(), paint(), an unknown
# name) could load something. A bare parenthesis is a block, not a function.
CSS_FUNCTIONS = {"", "rgb", "rgba", "hsl", "hsla", "hwb", "lab", "lch", "oklab", "oklch", "calc",
                 "min", "max", "clamp", "translate", "translatex", "translatey", "rotate",
                 "scale", "scalex", "scaley", "matrix", "skewx", "skewy", "url"}
SPACE_RE = re.compile(r"\s*")
FUNCTION_RE = re.compile(r"(?<![\w-])([\w-]*)\(")  # from a word's start: linear
OWN_URL_RE = re.compile(r"url\(\s*#([\w.:-]+)\s*\)", re.I)
# attributes the browser does not read as CSS: checked for what they are, not as CSS values
NOT_CSS = {"id", "class", "href", "role", "aria-label", "aria-labelledby", "data-device",
           "version"}
# What a drawing may hold: SVG shapes, text and paint servers, nothing that runs, loads or leaves
# the figure (an <img> or any other HTML element inside inline SVG is a real HTML element).
SVG_ELEMENTS = {"svg", "g", "defs", "title", "desc", "style", "rect", "line", "polyline",
                "polygon", "path", "circle", "ellipse", "text", "tspan", "pattern",
                "clipPath", "mask", "linearGradient", "radialGradient", "stop", "marker",
                "symbol", "use"}
SVG_ATTRIBUTES = {
    "x", "y", "x1", "x2", "y1", "y2", "cx", "cy", "r", "rx", "ry", "fx", "fy", "width", "height",
    "d", "points", "transform", "viewbox", "preserveaspectratio", "class", "id", "fill",
    "fill-opacity", "fill-rule", "stroke", "stroke-width", "stroke-dasharray", "stroke-linecap",
    "stroke-linejoin", "stroke-opacity", "opacity", "font-family", "font-size", "font-weight",
    "font-style", "text-anchor", "dominant-baseline", "alignment-baseline", "dx", "dy",
    "letter-spacing", "textlength", "lengthadjust", "visibility", "display", "style",
    "patternunits", "patterncontentunits", "patterntransform", "gradientunits",
    "gradienttransform", "spreadmethod", "offset", "stop-color", "stop-opacity", "clip-path",
    "clippathunits", "mask", "maskunits", "marker-start", "marker-mid", "marker-end",
    "markerwidth", "markerheight", "refx", "refy", "orient", "href", "version", "role",
    "aria-label", "aria-labelledby", "shape-rendering", "text-rendering", "vector-effect",
    "data-device"}
# The palette: every text colour on its background passes WCAG AA (4.5:1; tests check).
PALETTE = {
    "text": ("#1b1b1b", "#ffffff"),
    "muted": ("#505050", "#ffffff"),
    "link": ("#0b57a4", "#ffffff"),
    "th": ("#1b1b1b", "#eceff3"),
    "measured": ("#0b4a80", "#e2eefa"),
    "read": ("#6a3b00", "#fbecd9"),
    "inferred": ("#5a2a85", "#efe5f8"),
    "warn": ("#7a1d00", "#fdebe6"),
}


class PageError(Exception):
    """The input cannot be used; the message is one sentence."""


class UsageError(PageError):
    pass


# ---------------------------------------------------------------- text helpers

def esc(s: str) -> str:
    return html.escape(pt.clean(str(s)), quote=True)


def read_text(path: Path, limit: int) -> str:
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):  # a FIFO would wait for ever, a device never end
            raise PageError(f"{path} is not a regular file; a report or drawing is one")
        size = st.st_size
        if size > limit:
            raise PageError(f"{path} is {size:,} bytes, more than the {limit:,} a report or "
                            "drawing may have")
        data = path.read_bytes()
    except OSError as exc:
        raise PageError(f"cannot read {path}: {exc.strerror or exc}") from None
    return pt.clean(data.decode("utf-8", errors="replace"))


def read_json(path: Path) -> dict:
    try:
        if not path.is_file() or path.stat().st_size > MAX_JSON_BYTES:
            return {}
        d = json.loads(path.read_bytes().decode("utf-8", errors="replace"))
    except (OSError, ValueError, RecursionError):
        return {}
    return d if isinstance(d, dict) else {}


def display_number(cell: str) -> str:
    """A table value as shown: thousands separated, decimals as the table wrote them."""
    s = cell.strip()
    if not pt.is_number(s) or "e" in s.lower():
        return s
    neg, s = s.startswith("-"), s.lstrip("-")
    whole, _, frac = s.partition(".")
    whole = f"{int(whole or '0'):,}"
    return ("-" if neg else "") + whole + ("." + frac if frac else "")


def slug(text: str, used: set) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60] or "section"
    s, n = base, 2
    while s in used:
        s, n = f"{base}-{n}", n + 1
    used.add(s)
    return s


def mark(label: str, source: str | None, not_run: bool = False) -> str:
    """A citation as a visible label mark and its source in small type."""
    words = label + (", not run" if not_run else "")
    if source:
        source = re.sub(r"=\*(\d*)(?=,|$)", "=(each row's key)", source.strip())
    src = f'<span class="src">; {esc(source)}</span>' if source else ""
    return (f'<span class="cite"><span class="lbl lbl-{LABELS[label]}">{esc(words)}</span>'
            f"{src}</span>")


# ---------------------------------------------------------------- SVG, cleaned and scoped

def scope_css(css: str, scope: str, prefix: str) -> str:
    """The drawing's CSS with every selector under #scope, @-rules and outside urls dropped, and
    its own url(#id) references renamed with the figure's prefix."""
    css = strip_comments(css)
    out, i, j = [], 0, -1
    while i < len(css):
        if j < i:  # the next "{" is searched for once, not again per statement before it
            j = css.find("{", i)
        if j < 0:
            break
        at = css.startswith("@", SPACE_RE.match(css, i).end())
        semi = css.find(";", i, j) if at else -1
        if semi >= 0:  # a statement (@import, @charset): dropped
            i = semi + 1
            continue
        if at:
            depth, k = 1, j + 1
            while k < len(css) and depth:
                depth += {"{": 1, "}": -1}.get(css[k], 0)
                k += 1
            i = k
            continue
        k = css.find("}", j)
        if k < 0:
            break
        sel = css[i:j].strip()
        decls = [d for d in css[j + 1:k].split(";") if d.strip() and safe_style(d)]
        body = ";".join(rename_urls(d, prefix) for d in decls)
        # a selector is kept only as a descendant of the figure: one that starts with a
        # combinator (~ + >) or escapes would reach the page around it
        sels = ",".join(f"#{scope} {x.strip()}" for x in sel.split(",")
                        if x.strip() and x.strip()[0] not in "~+>"
                        and not any(c in x for c in "\\;{}@<"))
        if sels and body:
            out.append(f"{sels}{{{body}}}")
        i = k + 1
    return "\n".join(out)


def strip_comments(css: str) -> str:
    """CSS without its comments, in one pass (an unclosed one runs to the end, as in CSS)."""
    out, i = [], 0
    while (j := css.find("/*", i)) >= 0:
        out.append(css[i:j])
        k = css.find("*/", j + 2)
        if k < 0:
            return "".join(out)
        i = k + 2
    out.append(css[i:])
    return "".join(out)


def safe_style(text: str) -> bool:
    """A CSS value or declaration (a style, a presentation attribute) that can load nothing,
    judged on the text as the browser will read it (entities already decoded by the parser),
    case-insensitively: no escapes or comments (which could spell anything), no at-rule, and
    every function one of CSS_FUNCTIONS, url() naming only an id of the figure's own."""
    low = text.lower()
    if any(c in low for c in "\\@<") or "/*" in low or "javascript:" in low:
        return False
    return all(m.group(1) in CSS_FUNCTIONS
               and (m.group(1) != "url" or OWN_URL_RE.match(low, m.start()))
               for m in FUNCTION_RE.finditer(low))


def rename_urls(text: str, prefix: str) -> str:
    return OWN_URL_RE.sub(lambda m: f"url(#{prefix}{m.group(1)})", text)


def local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def clean_svg(el: ET.Element, prefix: str, scope: str) -> None:
    for child in list(el):
        if not isinstance(child.tag, str):
            el.remove(child)  # comments and processing instructions
            continue
        name = local(child.tag)
        outside = any(local(k).lower() == "href" and not v.startswith("#")
                      for k, v in child.attrib.items())  # HREF= is href= in HTML
        if (not child.tag.startswith(f"{{{SVG_NS}}}") or name not in SVG_ELEMENTS
                or outside):
            el.remove(child)  # not SVG, not on the list, or pointing outside the figure
            continue
        if name == "style":
            child.text = scope_css(child.text or "", scope, prefix)
            for sub in list(child):
                child.remove(sub)
            if not child.text.strip():
                el.remove(child)
                continue
        clean_svg(child, prefix, scope)
    for key in list(el.attrib):
        # the HTML parser lowercases attribute names: FILL= is fill=, HREF= is href=
        name, value = local(key).lower(), el.attrib[key]
        if (name not in SVG_ATTRIBUTES or (key.startswith("{") and not key.startswith(
                f"{{{XLINK_NS}}}")) or (name == "href" and not value.startswith("#"))
                or (name not in NOT_CSS and not safe_style(value))):
            del el.attrib[key]
        elif name == "id":
            el.attrib[key] = prefix + value
        elif name == "href":
            el.attrib[key] = "#" + prefix + value[1:]
        elif name not in NOT_CSS:
            el.attrib[key] = rename_urls(value, prefix)


def embed_svg(path: Path, n: int, alt: str) -> str:
    """The drawing inline, cleaned, in a scrolling wrapper, or a sentence saying why not."""
    try:
        text = read_text(path, MAX_SVG_BYTES)
        root = ET.fromstring(text)
    except (PageError, ET.ParseError, ValueError) as exc:
        why = str(exc) if isinstance(exc, PageError) else "it is not well-formed SVG"
        return f'<span class="missing">[drawing {esc(path.name)} not embedded: {esc(why)}]</span>'
    if local(root.tag) != "svg" or not root.tag.startswith(f"{{{SVG_NS}}}"):
        return f'<span class="missing">[{esc(path.name)} is not an SVG drawing]</span>'
    prefix, scope = f"f{n}-", f"fig{n}"
    try:
        clean_svg(root, prefix, scope)
    except RecursionError:
        return (f'<span class="missing">[drawing {esc(path.name)} not embedded: nested too '
                "deeply]</span>")
    title = next((c for c in root if isinstance(c.tag, str) and local(c.tag) == "title"), None)
    if title is None:
        title = ET.Element(f"{{{SVG_NS}}}title")
        title.text = alt or path.name
        root.insert(0, title)
    title.set("id", f"{prefix}title")
    root.set("role", "img")
    root.set("aria-labelledby", f"{prefix}title")
    if "viewBox" not in root.attrib:
        w, h = root.get("width", ""), root.get("height", "")
        if re.fullmatch(r"[\d.]+", w) and re.fullmatch(r"[\d.]+", h):
            root.set("viewBox", f"0 0 {w} {h}")
    for key in list(root.attrib):  # the root's style and class apply outside its scope
        if local(key).lower() in ("style", "class"):
            del root.attrib[key]
    body = ET.tostring(root, encoding="unicode")
    return f'<span class="fig-wrap" id="{scope}">{body}</span>'


ET.register_namespace("", SVG_NS)
ET.register_namespace("xlink", XLINK_NS)


# ---------------------------------------------------------------- the report, rendered

def markdown():
    try:
        from markdown_it import MarkdownIt
        from markdown_it.token import Token
    except ImportError:
        return None, None
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"])
    return md, Token


class Render:
    """The report's tokens rewritten: headings in order with ids, citations as marks, SVG images
    inline, links to scratch files kept only as text, tables with captions, scope and numbers."""

    def __init__(self, md, token_cls, scratch: Path, report_dir: Path):
        self.md, self.Token = md, token_cls
        self.scratch, self.report_dir = scratch, report_dir
        self.ids: set = set()
        self.counts = {k: 0 for k in LABELS}
        self.figures = 0
        self.title = ""
        self.table_ids: dict = {}

    def token(self, content: str, kind: str = "html_inline"):
        t = self.Token(kind, "", 0)
        t.content = content
        return t

    def run(self, text: str) -> str:
        self.lines = text.split("\n")
        tokens = self.md.parse(text)
        tokens = self.headings(tokens)
        for t in tokens:
            if t.type == "inline" and t.children is not None:
                t.children = self.inline(t.children)
        tokens = self.tables(tokens)
        tokens = self.sole_figures(tokens)
        return self.md.renderer.render(tokens, self.md.options, {})

    def headings(self, tokens):
        out, last, first, i = [], 1, True, 0
        while i < len(tokens):
            t = tokens[i]
            if t.type == "heading_open":
                inline = tokens[i + 1] if i + 1 < len(tokens) else None
                text = inline.content if inline is not None else ""
                if first and t.tag == "h1":
                    # the page's title and its one h1: the heading's text, its Markdown read
                    # (code spans and escapes as the reader sees them, not as typed)
                    kids = getattr(inline, "children", None) or []
                    self.title = " ".join("".join(
                        " " if c.type in ("softbreak", "hardbreak") else c.content
                        for c in kids if c.type in ("text", "code_inline", "image",
                                                    "softbreak", "hardbreak")).split()) \
                        if kids else text
                    i += 3
                    first = False
                    continue
                first = False
                level = min(max(int(t.tag[1]), 2), last + 1)
                last = level
                t.tag = f"h{level}"
                t.attrSet("id", slug(text, self.ids))
            elif t.type == "heading_close":
                opener = next(o for o in reversed(out) if o.type == "heading_open")
                t.tag = opener.tag
            elif t.type != "inline":
                first = first and t.type in ("html_block",)
            out.append(t)
            i += 1
        return out

    def inline(self, children):
        merged = []
        for c in children:  # a citation may wrap: text and soft breaks joined first
            if c.type in ("text", "softbreak") and merged and merged[-1].type == "text":
                merged[-1].content += " " if c.type == "softbreak" else c.content
            else:
                merged.append(self.token(" ", "text") if c.type == "softbreak" else c)
        out, skip_close = [], 0
        for c in merged:
            if c.type == "text":
                out.extend(self.cites(c.content))
            elif c.type == "image":
                out.append(self.token(self.image(c)))
            elif c.type == "link_open":
                href = c.attrGet("href") or ""
                target = self.link_target(href)
                if target is None:
                    skip_close += 1
                    out.append(self.token('<span class="file">'))
                    continue
                c.attrSet("href", target)
                if target.startswith("http"):
                    c.attrSet("rel", "noreferrer noopener")
                out.append(c)
            elif c.type == "link_close" and skip_close:
                skip_close -= 1
                out.append(self.token("</span>"))
            else:
                out.append(c)
        return out

    def cites(self, text: str):
        out, pos = [], 0
        for m in CITE_RE.finditer(text):
            if m.start() > pos:
                out.append(self.token(text[pos:m.start()], "text"))
            label = m.group(1)
            self.counts[label] += 1
            out.append(self.token(mark(label, m.group(3), bool(m.group(2)))))
            pos = m.end()
        if pos < len(text):
            out.append(self.token(text[pos:], "text"))
        return out

    def local_file(self, ref: str) -> Path | None:
        """A relative reference to a file of the scratch folder (or the report's), else None:
        a link planted there that leads out of the folder is none of its files."""
        if not ref or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", ref) or ref.startswith(("/", "#")):
            return None
        rel = Path(ref.split("#")[0].split("?")[0])
        if ".." in rel.parts or rel.is_absolute():
            return None
        for base in (self.scratch, self.report_dir):
            p = base / rel
            try:
                inside = p.resolve().is_relative_to(base.resolve())
            except (OSError, RuntimeError):  # a link loop
                inside = False
            if inside and p.is_file():
                return p
        return None

    def link_target(self, href: str) -> str | None:
        """Where a link may point on a page that requests nothing: an outside http(s) or mailto
        address, an anchor, or a scratch table shown on the page; None: keep the text only."""
        if href.startswith(("https://", "http://", "mailto:", "#")):
            return href
        p = self.local_file(href)
        if p is not None:
            rel = str(p.relative_to(self.scratch)) if p.is_relative_to(self.scratch) else None
            return f"#{self.table_ids[rel]}" if rel in self.table_ids else None
        return None

    def image(self, tok) -> str:
        src = tok.attrGet("src") or ""
        alt = tok.content or ""
        p = self.local_file(src)
        if p is not None and p.suffix.lower() == ".svg":
            self.figures += 1
            return embed_svg(p, self.figures, alt)
        return f'<span class="missing">[image not embedded: {esc(alt or src)}]</span>'

    def tables(self, tokens):
        out, heading = [], ""
        for i, t in enumerate(tokens):
            if t.type == "inline" and i and tokens[i - 1].type == "heading_open":
                heading = t.content
            if t.type == "table_open":
                cap = heading or "Table"
                if t.map:
                    src = "\n".join(self.lines[t.map[0]:t.map[1]])
                    files = list(dict.fromkeys(CITED_FILE_RE.findall(src)))
                    rows = max(0, t.map[1] - t.map[0] - 2)
                    cap += (f" ({rows} row{'s' if rows != 1 else ''}"
                            + (f"; from {', '.join(files)}" if files else "") + ")")
                out.append(self.token(
                    f'<div class="table-wrap" role="region" tabindex="0" '
                    f'aria-label="{esc(cap)}">\n', "html_block"))
                out.append(t)
                out.append(self.token(f"<caption>{esc(cap)}</caption>\n", "html_block"))
                continue
            if t.type == "th_open":
                t.attrSet("scope", "col")
            if t.type == "td_open" and i + 1 < len(tokens) and tokens[i + 1].type == "inline":
                if m := NUM_START_RE.match(tokens[i + 1].content.strip()):
                    t.attrSet("class", "num")
                    t.attrSet("data-value", m.group(1).replace(",", ""))
            out.append(t)
            if t.type == "table_close":
                out.append(self.token("</div>\n", "html_block"))
        return out

    def sole_figures(self, tokens):
        """A paragraph that holds only a drawing becomes a figure with its caption."""
        out, i = [], 0
        while i < len(tokens):
            t = tokens[i]
            if (t.type == "paragraph_open" and i + 2 < len(tokens)
                    and tokens[i + 2].type == "paragraph_close"
                    and tokens[i + 1].children and len(tokens[i + 1].children) == 1
                    and tokens[i + 1].children[0].type == "html_inline"
                    and 'class="fig-wrap"' in tokens[i + 1].children[0].content):
                alt = tokens[i + 1].content
                alt = re.sub(r"^!\[(.*?)\]\(.*\)$", r"\1", alt.strip())
                out.append(self.token(
                    f"<figure>{tokens[i + 1].children[0].content}"
                    f"<figcaption>{esc(alt)}</figcaption></figure>\n", "html_block"))
                i += 3
                continue
            out.append(t)
            i += 1
        return out


# ---------------------------------------------------------------- the scratch tables

def table_html(t: pt.Table, tid: str) -> str:
    spec, labels = t.spec, t.labels
    numeric = [all(pt.is_number(r[k]) for r in t.rows if r[k])  # a labelled word: text
               and (c in labels or any(r[k] for r in t.rows)) for k, c in enumerate(t.columns)]
    head = []
    for c, isnum in zip(t.columns, numeric, strict=True):
        lab = labels.get(c)
        m = (f' <span class="lbl lbl-{LABELS[lab]}">{lab}</span>' if lab else "")
        cls = ' class="num"' if isnum else ""
        head.append(f'<th scope="col"{cls}>{esc(pt.heading_of(spec.file, c))}{m}</th>')
    body = []
    for r in t.rows:
        cells = []
        for v, isnum in zip(r, numeric, strict=True):
            if isnum and pt.is_number(v):
                cells.append(f'<td class="num" data-value="{esc(v.strip())}">'
                             f"{esc(display_number(v))}</td>")
            elif len(v) > LONG_CELL:
                # a long name (ROCm's Tensile kernels run to 600 characters): its two ends on
                # the page, the whole name in the title and in the table's file
                short = v[:LONG_CELL * 2 // 3] + "…" + v[-LONG_CELL // 3:]
                cells.append(f'<td title="{esc(v)}">{esc(short)}</td>')
            else:
                cells.append(f"<td>{esc(v)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    by = f" by {pt.heading_of(spec.file, spec.sort)}" if spec.sort else ""
    how = (f"top {len(t.rows):,} of {t.total:,} rows{by}" if t.rest
           else f"{t.total:,} row{'s' if t.total != 1 else ''}")
    cap = f"{spec.caption} ({how}; {spec.file})"
    rest = (f'<p class="rest">{t.rest:,} more row{"s" if t.rest != 1 else ""} in '
            f"<code>{esc(spec.file)}</code>, not shown.</p>" if t.rest else "")
    return (f'<div class="table-wrap" role="region" tabindex="0" aria-label="{esc(spec.caption)}"'
            f' id="{tid}">\n<table>\n<caption>{esc(cap)}</caption>\n<thead><tr>{"".join(head)}'
            f"</tr></thead>\n<tbody>\n" + "\n".join(body) + f"\n</tbody>\n</table>\n</div>\n{rest}")


# ---------------------------------------------------------------- the page

CSS_TEMPLATE = """
:root{color-scheme:light}
*{box-sizing:border-box}
body{margin:0 auto;max-width:76rem;padding:1rem;font:16px/1.5 system-ui,-apple-system,"Segoe UI",
Roboto,"Helvetica Neue",Arial,sans-serif;color:$text;background:$textbg}
h1{font-size:1.6rem;line-height:1.25;margin:.2rem 0 .6rem}
h2{font-size:1.3rem;margin:2rem 0 .6rem;border-bottom:1px solid #c8c8c8;padding-bottom:.2rem}
h3{font-size:1.1rem;margin:1.4rem 0 .4rem}h4,h5,h6{font-size:1rem}
a{color:$link}
p,li{overflow-wrap:anywhere}
code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.9em;
overflow-wrap:anywhere}
pre{overflow-x:auto;background:#f6f6f6;padding:.5rem}
header{border-bottom:2px solid #1b1b1b;margin-bottom:1rem;padding-bottom:.5rem}
dl.meta{display:grid;grid-template-columns:max-content 1fr;gap:.1rem .8rem;margin:.4rem 0}
dl.meta dt{font-weight:600}dl.meta dd{margin:0;overflow-wrap:anywhere}
.legend{display:flex;flex-wrap:wrap;gap:.4rem 1.2rem;margin:.6rem 0;padding:0;list-style:none}
.legend li{color:$muted}
.warn{color:$warn;background:$warnbg;padding:.4rem .6rem;border-left:4px solid $warn}
.cite{white-space:normal}
.lbl{display:inline-block;font-size:.72em;font-weight:600;line-height:1.3;padding:0 .3em;
border-radius:.25em;margin-left:.15em;vertical-align:.08em;white-space:nowrap}
.lbl-m{color:$measured;background:$measuredbg}.lbl-r{color:$read;background:$readbg}
.lbl-i{color:$inferred;background:$inferredbg}
.src{font-size:.78em;color:$muted}
.table-wrap{overflow-x:auto;margin:.8rem 0;max-width:100%}
.table-wrap:focus{outline:2px solid $link}
table{border-collapse:collapse;font-size:.88rem}
caption{text-align:left;font-weight:600;padding:.3rem 0;caption-side:top}
th,td{border:1px solid #c8c8c8;padding:.2rem .45rem;vertical-align:top;text-align:left}
td{max-width:30rem;overflow-wrap:break-word}
th{background:$thbg;color:$th}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
th.num{white-space:nowrap}
.rest{color:$muted;font-size:.9rem;margin-top:-.4rem}
figure{margin:1rem 0}figcaption{color:$muted;font-size:.9rem}
.fig-wrap{display:block;overflow-x:auto;max-width:100%}
.fig-wrap svg{display:block;height:auto}
.missing,.file{color:$muted}
footer{margin-top:2rem;color:$muted;font-size:.85rem;border-top:1px solid #c8c8c8}
@media (max-width:480px){body{padding:.6rem;font-size:15px}h1{font-size:1.3rem}
dl.meta{grid-template-columns:1fr}dl.meta dt{margin-top:.3rem}}
@media (min-width:2200px){body{max-width:120rem;font-size:22px}table{font-size:1rem}}
@media print{
body{max-width:none;padding:0;font-size:10pt}
.table-wrap,.fig-wrap{overflow:visible}
table{width:100%;font-size:8pt}
td{overflow-wrap:anywhere}
th,th.num{white-space:normal}
thead{display:table-header-group}tr,figure{break-inside:avoid}
h2{break-before:page}header+main>h2:first-child{break-before:auto}
h2,h3,caption{break-after:avoid}
.fig-wrap svg{max-width:100%}
a[href^="http"]::after{content:" (" attr(href) ")";font-size:.8em}
}
"""
# $<palette key> is its colour, $<palette key>bg its background
COLOURS = {**{k: fg for k, (fg, _) in PALETTE.items()},
           **{f"{k}bg": bg for k, (_, bg) in PALETTE.items()}}
CSS = string.Template(CSS_TEMPLATE).substitute(COLOURS)


def header_facts(scratch: Path, report: Path) -> list[tuple[str, str]]:
    info = read_json(scratch / "capture_info.json")
    cap = info.get("capture") if isinstance(info.get("capture"), dict) else {}
    run_dir = str(cap.get("run_dir") or "")
    gpus = info.get("gpus") if isinstance(info.get("gpus"), list) else []
    busy = [g for g in gpus if isinstance(g, dict) and not g.get("idle")]
    gpu = read_json(scratch / "roofline.json").get("gpu")
    model = gpu.get("model") if isinstance(gpu, dict) else None
    if not model and busy and isinstance(busy[0].get("device"), dict):
        model = busy[0]["device"].get("device_vendor")
    device = info.get("device") if isinstance(info.get("device"), dict) else {}
    kind = "TPU core" if device.get("kind") == "TPU" else "GPU"  # what the devices are
    facts = [
        ("Capture", run_dir or "not recorded (capture_info.json missing)"),
        ("Run", Path(run_dir).name if run_dir else "not recorded"),
        ("Host", str(cap.get("host") or "not recorded")),
        (f"{kind}s", (f"{len(gpus)} in the capture, {len(busy)} of them ran work" if gpus else
                      "not recorded") + (f"; {model}" if model else "")),
        ("Report", report.name),
        ("Built", dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")),
    ]
    fc = read_json(scratch / "factcheck.json")
    checked = str(fc.get("report") or "")
    try:
        digest = hashlib.sha256(report.read_bytes()).hexdigest()
    except OSError:
        digest = None
    same = bool(checked) and fc.get("report_sha256") == digest  # this very text, not its name
    figs = fc.get("figures") if isinstance(fc.get("figures"), dict) else {}
    if same:
        facts.append(("Fact check", f"{fc.get('verdict')} on this report ({figs.get('ok', 0)} "
                                    "figures found in their tables; factcheck.json)"))
    else:
        facts.append(("Fact check", "none of this report in the scratch folder"
                      + (f" (factcheck.json checked {Path(checked).name} in another "
                         "version, or another file)" if checked else "")))
    return facts


def shown_in_report(text: str, spec: pt.Spec) -> bool:
    """Whether a Markdown table of the report already cites this file (and the spec's row
    filter): the page then does not repeat it below."""
    return any(line.lstrip().startswith("|")
               and re.search(r";\s*" + re.escape(spec.file) + r"\s*:", line)
               and (spec.where is None or f"{spec.where[0]}={spec.where[1]}" in line)
               for line in text.split("\n"))


PAGE_TABLE_RE = re.compile(r"<table[\s>]")


def build(report: Path, scratch: Path) -> tuple[str, dict]:
    md, token_cls = markdown()
    if md is None:
        raise ImportError
    text = read_text(report, MAX_REPORT_BYTES)
    judges = len(JUDGE_RE.findall(text))
    # a "<!--" after the last "-->" never closes: only the text up to it is searched (each
    # unclosed one would be a search to the end: thousands of them, a quadratic time)
    cut = text.rfind("-->") + 3 if "-->" in text else 0
    text = COMMENT_RE.sub("", text[:cut]) + text[cut:]
    tables = [t for t in pt.read_tables(scratch) if not shown_in_report(text, t.spec)]
    r = Render(md, token_cls, scratch, report.parent)
    for t in tables:
        t.tid = slug("table " + t.spec.file + " " + (t.spec.where[1] if t.spec.where else ""),
                     r.ids)
        r.table_ids.setdefault(t.spec.file, t.tid)
    body = r.run(text)
    title = r.title or "Trace report"
    facts = header_facts(scratch, report)
    legend = "".join(f'<li><span class="lbl lbl-{LABELS[k]}">{k}</span> {esc(v)}</li>'
                     for k, v in LEGEND.items())
    counts = ", ".join(f"{r.counts[k]} {k}" for k in LABELS)
    warn = (f'<p class="warn">This is a draft: {judges} judgement place'
            f'{"s are" if judges != 1 else " is"} still unwritten.</p>' if judges else "")
    check = dict(facts).get("Fact check", "")
    if not check.startswith("pass on this report"):
        warn += ('<p class="warn">Not fact-checked: run factcheck.py on this report before '
                 "sharing the page.</p>")
    tables_html = "".join(table_html(t, t.tid) for t in tables)
    page = (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<title>{esc(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
        f"<header>\n<h1>{esc(title)}</h1>\n<dl class=\"meta\">"
        + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in facts)
        + f"</dl>\n<p>Every figure carries its label ({esc(counts)} in the report):</p>\n"
        f"<ul class=\"legend\">{legend}</ul>\n{warn}</header>\n<main>\n{body}\n"
        + (f'<h2 id="tables">Tables from the scratch folder</h2>\n{tables_html}'
           if tables else "")
        + "</main>\n<footer><p>Built by build_page.py from "
        f"<code>{esc(report.name)}</code> and the tables of <code>{esc(scratch.name)}</code>; "
        "self-contained: no script, no outside request.</p></footer>\n</body>\n</html>\n")
    # what the page holds, counted on the page (the report's text is escaped, so a tag here is
    # one the page drew): the report's own tables and drawings and the scratch tables below
    in_page = len(PAGE_TABLE_RE.findall(page))
    stats = {"labels": dict(r.counts), "figures": page.count('class="fig-wrap"'),
             "tables": in_page, "scratch_tables": len(tables),
             "report_tables": in_page - len(tables),
             "judge_places": judges, "bytes": len(page.encode("utf-8"))}
    return page, stats


def write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".page-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # a page to share: readable as any new file is
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("report", type=Path)
    ap.add_argument("--scratch", type=Path, help="the scratch folder (default: the report's)")
    ap.add_argument("--out", type=Path, help="the page (default: <report stem>.html beside it)")
    args = ap.parse_args(argv)
    report = args.report
    try:
        if not report.exists():
            raise PageError(f"{report} does not exist; pass the report's Markdown file")
        if not report.is_file():
            raise PageError(f"{report} is not a file; pass the report's Markdown file")
        scratch = args.scratch or report.parent
        if not scratch.is_dir():
            raise PageError(f"the scratch folder {scratch} does not exist; pass --scratch with "
                            "the folder the report cites")
        out = args.out or report.with_suffix(".html")
        if out.exists() and out.resolve() == report.resolve():
            raise UsageError(f"--out {out} is the report itself; name another file for the page")
        if not out.parent.is_dir():
            raise PageError(f"the folder of {out} does not exist")
        page, stats = build(report, scratch)
        write_atomic(out, page)
    except ImportError:
        print("build_page: markdown-it-py is missing; install it with: python3 -m pip install "
              f"-r {HERE.parent / 'requirements.txt'}", file=sys.stderr)
        return 3
    except PageError as exc:
        print(f"build_page: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, UsageError) else 1
    except OSError as exc:
        print(f"build_page: cannot write {args.out or 'the page'}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    lab = stats["labels"]
    print(f"wrote {out} ({stats['bytes'] / 1024:,.0f} kB: {sum(lab.values())} citations shown "
          "as label marks, "
          f"{stats['figures']} drawing{'s' if stats['figures'] != 1 else ''}, "
          f"{stats['tables']} table{'s' if stats['tables'] != 1 else ''}: "
          f"{stats['report_tables']} from the report, {stats['scratch_tables']} from the "
          "scratch folder)")
    if stats["judge_places"]:
        print(f"note: {stats['judge_places']} judgement places are still unwritten (a draft)")
    print("Next: open it from the file (file://), check the header and the legend, then share "
          "the one file.")
    return 0


if __name__ == "__main__":
    try:
        code = main()
        sys.stdout.flush()  # here, not at the interpreter's exit, where it could not be caught
        raise SystemExit(code)
    except BrokenPipeError:  # the reader of stdout went away (`| head`): the page is written
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(141) from None
    except KeyboardInterrupt:
        print("build_page: interrupted; the page is written whole or not at all",
              file=sys.stderr)
        raise SystemExit(130) from None
