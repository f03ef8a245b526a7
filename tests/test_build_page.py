"""build_page.py (writing-trace-report-pages): the page of the bundled example's draft is one
self-contained file (no script, no outside request, the SVGs inline and cleaned), its tables are
real tables (caption, scope, numbers right-aligned with data-value, labels), headings in order,
every citation a visible label; hostile kernel and host names, raw HTML in a report and a hostile
SVG leave the page's structure unchanged; long tables are cut, the page stays small; bad input is
one sentence; the palette passes WCAG AA. The browser checks are in test_page_browser.py."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import REPO, cost_doubles

PAGE_SCRIPTS = REPO / "writing-trace-report-pages" / "scripts"
BUILD = PAGE_SCRIPTS / "build_page.py"
INVESTIGATE = REPO / "scripts" / "investigate.py"
EXAMPLE = REPO / "examples" / "minigpt-h100-2gpu-cb"
CITE = re.compile(r"\((measured|read|inferred)(, not run)?(?:;[^()]*(?:\([^()]*\)[^()]*)*)?\)")
HOSTILE = ['<script>alert(1)</script>', '"><img src=x onerror=alert(2)>', "</style>",
           "a,b\nc \"quoted\""]
BAD_BYTES = b"\xff\xfe\x80"

# A drawing that names an outside resource every way Chromium 156 follows one from inline SVG
# (each tried on a raw page: see test_page_browser.py), in any case, entity-encoded, escaped,
# quoted, in attributes, styles and a <style> sheet. Each URL's path names its way.
LEAKS = ["import.css", "cssfill", "cssupper", "cssescape", "cssquoted", "csscursor", "fill",
         "mask.svg", "clip.svg", "marker.svg", "entity", "escape", "style", "upper", "filter.svg",
         "useupper.svg", "xlink.svg", "use.svg", "imageset", "quoted", "pattern.svg", "mid.css",
         "cursor", "import2.css", "comment"]


def leaky_svg(host: str) -> str:
    h = host
    return f"""<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink"
 width="400" height="300" viewBox="0 0 400 300">
<style>@IMPORT url({h}/import.css); rect.a{{fill:url({h}/cssfill)}}
circle{{fill:URL({h}/cssupper)}} ellipse{{fill:u\\72l({h}/cssescape)}}
polygon{{fill:url(&quot;{h}/cssquoted&quot;)}} rect.b{{cursor:url({h}/csscursor),auto}}
/* unclosed @import in a comment */ path{{fill:u/**/rl({h}/comment)}}
@import "{h}/mid.css";</style>
<style><![CDATA[@import url('{h}/import2.css');]]></style>
<defs><pattern id="p" href="{h}/pattern.svg#x" width="4" height="4"/>
<pattern id="q" width="4" height="4"><rect width="2" height="2"/></pattern></defs>
<rect class="a" x="0" y="0" width="20" height="20"/>
<circle cx="30" cy="30" r="10"/><ellipse cx="50" cy="50" rx="5" ry="5"/>
<polygon points="0,0 10,10 0,10"/><path d="M0 0L5 5"/>
<rect x="0" y="30" width="20" height="20" fill="URL({h}/fill)"/>
<rect x="0" y="60" width="20" height="20" mask="Url({h}/mask.svg#m)"/>
<rect x="0" y="90" width="20" height="20" clip-path="url({h}/clip.svg#c)"/>
<line x1="0" y1="0" x2="50" y2="50" stroke="black" marker-end="url({h}/marker.svg#m)"/>
<rect x="30" y="0" width="20" height="20" stroke="&#x75;&#x52;l({h}/entity)"/>
<rect x="30" y="30" width="20" height="20" fill="u\\72l({h}/escape)"/>
<rect x="30" y="60" width="20" height="20" style="fill:URL('{h}/style')"/>
<rect x="30" y="90" width="20" height="20" FILL="url({h}/upper)"/>
<rect x="60" y="0" width="20" height="20" filter="url({h}/filter.svg#f)"/>
<rect x="60" y="30" width="20" height="20" fill="url(#q)"/>
<rect class="b" x="60" y="60" width="20" height="20" cursor="url({h}/cursor),auto"/>
<use HREF="{h}/useupper.svg#a"/><use xlink:href="{h}/xlink.svg#a"/><use href="{h}/use.svg#a"/>
<rect x="90" y="0" width="20" height="20"
 style="background-image:image-set('{h}/imageset' 1x);fill:url(&quot;{h}/quoted&quot;)"/>
</svg>"""


def page_of_drawing(scratch: Path, folder: Path, svg: str, out: Path):
    """The page of a one-line report showing `svg`, built from a copy of the scratch folder."""
    shutil.copytree(scratch, folder)
    (folder / "leaky.svg").write_text(svg, encoding="utf-8")
    (folder / "report.md").write_text("# R\n\n![a drawing](leaky.svg)\n", encoding="utf-8")
    return build(folder / "report.md", folder, out)


class Doc(HTMLParser):
    """The page as a list of (tag, attribute names) and its text, for structure comparisons."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.attrs, self.text, self.stack = [], [], [], []
        self.in_svg = 0

    def handle_starttag(self, tag, attrs):
        # a long name's cell carries it whole in a title: a longer name is not a new structure
        self.tags.append((tag, tuple(sorted(k for k, _ in attrs
                                            if not (tag == "td" and k == "title")))))
        self.attrs.append((tag, dict(attrs)))

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)

    def handle_data(self, data):
        self.text.append(data)


def parse(path: Path) -> Doc:
    d = Doc()
    d.feed(path.read_text(encoding="utf-8"))
    return d


def build(report, scratch, out, *extra):
    return subprocess.run([sys.executable, "-P", str(BUILD), str(report), "--scratch",
                           str(scratch), "--out", str(out), *extra],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    out = tmp_path_factory.mktemp("page") / "scratch"
    p = subprocess.run([sys.executable, "-P", str(INVESTIGATE), str(EXAMPLE), "--out", str(out),
                        "--page"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert f"page: {out / 'report_draft.html'}" in p.stdout
    return out


def test_the_page_is_one_self_contained_file(scratch):
    page = scratch / "report_draft.html"
    doc = parse(page)
    tags = [t for t, _ in doc.tags]
    assert tags[0] == "html" and doc.attrs[0][1].get("lang") == "en"
    assert "script" not in tags and "iframe" not in tags and "img" not in tags
    assert "link" not in tags  # CSS inline only
    for tag, attrs in doc.attrs:
        assert not [k for k in attrs if k.startswith("on")], (tag, attrs)
        for k in ("src", "href", "xlink:href"):
            v = attrs.get(k)
            if v is not None:
                assert v.startswith(("#", "https://", "http://", "mailto:")), (tag, k, v)
    # both drawings inline, with a title for screen readers
    svgs = [a for t, a in doc.attrs if t == "svg"]
    assert len(svgs) == 2 and all(a.get("role") == "img" and a.get("aria-labelledby")
                                  for a in svgs)
    ids = [a["id"] for _, a in doc.attrs if "id" in a]
    assert len(ids) == len(set(ids)), "duplicate ids on the page"
    assert page.stat().st_size < 3_000_000


def test_headings_are_in_order_and_the_header_says_what_was_captured(scratch):
    doc = parse(scratch / "report_draft.html")
    levels = [int(t[1]) for t, _ in doc.tags if re.fullmatch(r"h[1-6]", t)]
    assert levels[0] == 1 and levels.count(1) == 1
    assert all(b <= a + 1 for a, b in zip(levels, levels[1:], strict=False)), levels
    text = "".join(doc.text)
    info = json.loads((scratch / "capture_info.json").read_text())
    for word in ("Capture", "Run", "Host", "GPUs", "Built", info["capture"]["host"],
                 "H100 SXM5 80GB", "2026_01_01_00_00_00"):
        assert word in text, word
    assert "10 judgement places are still unwritten" in text
    # the title is the heading as read: the draft's code span around the run name is not shown
    # as backticks
    html = (scratch / "report_draft.html").read_text(encoding="utf-8")
    assert "<h1>2026_01_01_00_00_00 on H100 SXM5 80GB: mixed</h1>" in html
    assert "<title>2026_01_01_00_00_00 on H100 SXM5 80GB: mixed</title>" in html


def test_every_citation_is_a_visible_label(scratch):
    report = (scratch / "report_draft.md").read_text(encoding="utf-8")
    body = re.sub(r"<!--.*?-->", "", report, flags=re.S)
    n = len(CITE.findall(body))
    html = (scratch / "report_draft.html").read_text(encoding="utf-8")
    marks = re.findall(r'<span class="cite"><span class="lbl lbl-([mri])">', html)
    assert len(marks) == n > 100
    # the legend names all three labels; header marks of the scratch tables are extra
    for lab in ("measured", "read", "inferred"):
        assert f'<span class="lbl lbl-{lab[0]}">{lab}</span>' in html


def test_tables_are_real_tables(scratch):
    html = (scratch / "report_draft.html").read_text(encoding="utf-8")
    doc = parse(scratch / "report_draft.html")
    n_tables = sum(1 for t, _ in doc.tags if t == "table")
    assert n_tables >= 12
    assert html.count("<caption>") == n_tables
    # the report's own tables are captioned by their section, row count and cited files
    assert re.search(r"<caption>GPUs and streams \(\d+ rows; from streams\.csv\)</caption>", html)
    # a scratch table the report already shows is not repeated below it
    assert "(changes.csv)" not in html and "; changes.csv)</caption>" not in html
    ths = [a for t, a in doc.attrs if t == "th"]
    assert ths and all(a.get("scope") == "col" for a in ths)
    nums = [a for t, a in doc.attrs if t == "td" and "num" in a.get("class", "")]
    assert len(nums) > 200
    for a in nums:
        float(a["data-value"])
    # units in the headers, each numeric column of a scratch table with its label
    assert "device (µs)" in html
    assert re.search(r'<th scope="col" class="num">dur \(µs\) <span class="lbl lbl-m">', html)
    # the long table is cut to its top rows with the count of the rest
    kernels = sum(1 for _ in open(scratch / "attribution" / "kernels.csv")) - 1
    assert f"top 20 of {kernels:,} rows by dur (µs)" in html
    assert f"{kernels - 20:,} more rows in <code>attribution/kernels.csv</code>" in html


def plant(scratch: Path, to: Path) -> Path:
    """A copy of the scratch folder with hostile kernel, host and run names (and bytes that are
    not UTF-8) where the page shows them, and a hostile SVG."""
    shutil.copytree(scratch, to)
    bad = "".join(HOSTILE)

    def rewrite_csv(rel, column, rows_to_change):
        path = to / rel
        rows = list(csv.reader(open(path, newline="", encoding="utf-8")))
        i = rows[0].index(column)
        for r in rows[1:1 + rows_to_change]:
            r[i] = bad + r[i] + "@@BAD@@"
        buf = io.StringIO()
        csv.writer(buf).writerows(rows)
        path.write_bytes(buf.getvalue().encode("utf-8").replace(b"@@BAD@@", BAD_BYTES))

    rewrite_csv("attribution/kernel_names.csv", "kernel", 3)
    rewrite_csv("gaps.csv", "host_events", 3)
    # the longest kernels (the ones the page shows) get the hostile name
    path = to / "attribution" / "kernels.csv"
    rows = list(csv.reader(open(path, newline="", encoding="utf-8")))
    i, d = rows[0].index("kernel"), rows[0].index("dur_us")
    for r in sorted(rows[1:], key=lambda r: -float(r[d]))[:5]:
        r[i] = bad + r[i]
    buf = io.StringIO()
    csv.writer(buf).writerows(rows)
    path.write_text(buf.getvalue(), encoding="utf-8")
    info = json.loads((to / "capture_info.json").read_text())
    info["capture"]["host"] = "host" + bad + "@@BAD@@"
    info["capture"]["run_dir"] = "runs/" + bad
    (to / "capture_info.json").write_bytes(
        json.dumps(info).encode("utf-8").replace(b"@@BAD@@", BAD_BYTES))
    # a hostile drawing: a script element, an event attribute, an outside image, CSS that leaks
    svg = (to / "swimlanes.svg").read_text(encoding="utf-8")
    svg = svg.replace("<svg ", '<svg onload="alert(10)" ', 1)
    svg = re.sub(r"(<svg[^>]*>)", r"\1<script>alert(11)</script><image href='http://evil/x.png' "
                 r"width='1' height='1'/><img src='http://evil/a.png'/><style>@import "
                 r"url(http://evil/c.css); rect{fill:url(http://evil/f)}"
                 r"@media screen{body{display:none}} ~ p{background:red}"
                 r" text{fill:image-set('http://evil/b.png' 1x)}"
                 r" line{stroke:\\75 rl(http://evil/e.png)}</style>", svg, count=1)
    (to / "swimlanes.svg").write_text(svg, encoding="utf-8")
    return to


def test_hostile_names_leave_the_page_unchanged_in_structure(scratch, tmp_path):
    hostile = plant(scratch, tmp_path / "hostile")
    # the report quotes a hostile kernel name in its text and in a table cell, raw HTML and all
    draft = (scratch / "report_draft.md").read_text(encoding="utf-8")
    bad = "".join(HOSTILE[:3])
    report_h = draft.replace("- Verdict:", "- " + bad + " Verdict:", 1)
    report_h = re.sub(r"(\n\| 0 \| 13 \| )", r"\1" + bad.replace("\\", "\\\\") + " ",
                      report_h, count=1)
    (hostile / "report.md").write_bytes(report_h.encode("utf-8").replace(
        b"- ", b"- " + BAD_BYTES + b" ", 1))
    (scratch / "clean.md").write_text(draft + "\n\n", encoding="utf-8")
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in hostile.rglob("*")
              if p.is_file()}
    p1 = build(scratch / "clean.md", scratch, tmp_path / "clean.html")
    p2 = build(hostile / "report.md", hostile, tmp_path / "hostile.html")
    assert p1.returncode == 0 and p2.returncode == 0, p1.stderr + p2.stderr
    after = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in hostile.rglob("*")
             if p.is_file()}
    assert before == after, "the input was modified"
    clean, host = parse(tmp_path / "clean.html"), parse(tmp_path / "hostile.html")
    # the structure: the same elements with the same attribute names, in the same order (the
    # hostile SVG's script, image, event attribute and @import are removed)
    assert host.tags == clean.tags
    text = "".join(host.text)
    assert "<script>alert(1)</script>" in text and "onerror=alert(2)>" in text
    assert "\ufffd" in text  # the bytes that are not UTF-8, shown replaced
    page = (tmp_path / "hostile.html").read_text(encoding="utf-8")
    assert "alert(10)" not in page and "alert(11)" not in page and "evil" not in page
    assert "display:none" not in page.replace(" ", "")
    # the drawing's own CSS applies to the drawing alone
    for rule in re.findall(r"<style>([^<]*)</style>", page)[1:]:
        for sel in re.findall(r"([^{}]+)\{", rule):
            assert all(s.strip().startswith("#fig") for s in sel.split(",")), sel


def test_raw_html_links_and_images_in_a_report_stay_text(scratch, tmp_path):
    report = tmp_path / "r.md"
    report.write_text(
        "# A report\n\n<div onclick=\"alert(1)\">raw</div>\n\n"
        "Click [me](javascript:alert(2)) or [the tables](gaps.csv) or [docs](https://x.org).\n\n"
        "![remote](http://evil/x.png) ![local](roofline.svg)\n\n"
        "| a | b |\n|---|---|\n| <b>x</b> | 1.5 ms (measured; steps.csv: dur_us, median) |\n",
        encoding="utf-8")
    p = build(report, scratch, tmp_path / "r.html")
    assert p.returncode == 0, p.stderr
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    doc = parse(tmp_path / "r.html")
    tags = [t for t, _ in doc.tags]
    assert "div" not in [t for t, a in doc.attrs if a.get("onclick")]
    assert "&lt;div onclick=&quot;alert(1)&quot;&gt;" in page
    assert "[me](javascript:alert(2))" in page  # not a link: shown as the text written
    hrefs = [a.get("href") for t, a in doc.attrs if t == "a"]
    assert "https://x.org" in hrefs and all(h.startswith(("#", "https://")) for h in hrefs)
    assert any(h.startswith("#table-gaps-csv") for h in hrefs)  # a scratch table on the page
    assert "img" not in tags and "[image not embedded: remote]" in page
    assert tags.count("svg") == 1  # the local drawing, inline
    assert "&lt;b&gt;x&lt;/b&gt;" in page
    assert '<td class="num" data-value="1.5">' in page


def test_long_tables_keep_the_page_small(scratch, tmp_path):
    """200,000 kernels in kernels.csv: the page shows 20 and grows by nothing like the file."""
    big = tmp_path / "big"
    shutil.copytree(scratch, big)
    path = big / "attribution" / "kernels.csv"
    rows = list(csv.reader(open(path, newline="", encoding="utf-8")))
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(rows[0])
        for n in range(200_000):
            w.writerow(rows[1 + n % (len(rows) - 1)])
    p = build(big / "report_draft.md", big, tmp_path / "big.html")
    assert p.returncode == 0, p.stderr
    small = (scratch / "report_draft.html").stat().st_size
    size = (tmp_path / "big.html").stat().st_size
    assert size < small + 5_000 and size < 3_000_000
    assert "top 20 of 200,000 rows" in (tmp_path / "big.html").read_text(encoding="utf-8")


def luminance(hex_colour: str) -> float:
    c = [int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    c = [x / 12.92 if x <= 0.03928 else ((x + 0.055) / 1.055) ** 2.4 for x in c]
    return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]


def contrast(a: str, b: str) -> float:
    la, lb = sorted((luminance(a), luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def test_the_palette_passes_wcag_aa():
    sys.path.insert(0, str(PAGE_SCRIPTS))
    import build_page
    for name, (fg, bg) in build_page.PALETTE.items():
        assert contrast(fg, bg) >= 4.5, (name, fg, bg, contrast(fg, bg))
    # the label marks and muted text also sit on the table header's background
    th_bg = build_page.PALETTE["th"][1]
    assert contrast(build_page.PALETTE["muted"][0], th_bg) >= 4.5


@pytest.mark.parametrize("case", ["missing", "folder", "no_scratch", "out_is_report",
                                  "no_out_folder"])
def test_bad_input_is_one_sentence(scratch, tmp_path, case):
    report = tmp_path / "report.md"
    report.write_text("# r\n", encoding="utf-8")
    args = [str(report), "--scratch", str(scratch), "--out", str(tmp_path / "p.html")]
    want = 1
    if case == "missing":
        args[0] = str(tmp_path / "nothing.md")
    elif case == "folder":
        args[0] = str(tmp_path)
    elif case == "no_scratch":
        args[2] = str(tmp_path / "no-such-folder")
    elif case == "out_is_report":
        args[4], want = str(report), 2
    else:
        args[4] = str(tmp_path / "no" / "p.html")
    p = subprocess.run([sys.executable, "-P", str(BUILD), *args], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == want, p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert p.stderr.startswith("build_page: ")
    assert report.read_text(encoding="utf-8") == "# r\n"
    assert not (tmp_path / "p.html").exists()


def test_help_is_the_docstring():
    p = subprocess.run([sys.executable, "-P", str(BUILD), "--help"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and "self-contained" in p.stdout


def test_investigate_finds_the_page_skill_in_an_install(tmp_path):
    """Installed side by side, investigate.py --page finds build_page.py beside it."""
    skills = tmp_path / "skills"
    p = subprocess.run([sys.executable, str(REPO / "install_skills.py"), str(skills)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    inv = skills / "investigating-jax-traces" / "scripts" / "investigate.py"
    out = tmp_path / "scratch"
    p = subprocess.run([sys.executable, "-P", str(inv), str(EXAMPLE), "--out", str(out),
                        "--page"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and "could not run" not in p.stdout + p.stderr, p.stderr
    assert (out / "report_draft.html").is_file()
    assert (skills / "writing-trace-report-pages" / "requirements.txt").is_file()


def test_deep_svg_and_a_changed_report(scratch, tmp_path):
    """A drawing nested 5,000 deep is named, not embedded (no traceback); a report changed after
    its fact check is not called fact-checked."""
    folder = tmp_path / "s"
    shutil.copytree(scratch, folder)
    (folder / "deep.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg">' + "<g>" * 5000
                                     + "</g>" * 5000 + "</svg>", encoding="utf-8")
    report = folder / "report.md"
    report.write_text("# R\n\n![deep](deep.svg)\n\nStep 1.5 ms (measured; steps.csv: dur_us, "
                      "max)\n", encoding="utf-8")
    fc = subprocess.run([sys.executable, "-P", str(REPO / "scripts" / "factcheck.py"),
                         str(report), "--out", str(folder)], capture_output=True, text=True,
                        timeout=120)
    assert fc.returncode in (0, 4), fc.stderr
    p = build(report, folder, tmp_path / "a.html")
    assert p.returncode == 0, p.stderr
    page = (tmp_path / "a.html").read_text(encoding="utf-8")
    assert "nested too deeply" in page
    assert re.search(r"<dt>Fact check</dt><dd>(pass|fail) on this report", page)
    report.write_text(report.read_text(encoding="utf-8") + "\nAdded 999.9 us later.\n",
                      encoding="utf-8")
    p = build(report, folder, tmp_path / "b.html")
    page = (tmp_path / "b.html").read_text(encoding="utf-8")
    assert "<dt>Fact check</dt><dd>none of this report" in page
    assert "Not fact-checked" in page


def test_capture_names_in_the_draft_stay_text(scratch, tmp_path):
    """Markdown in a capture's names (a link, an image, emphasis, a backtick) reaches the draft
    escaped: the page gets no link and no extra drawing, and the fact check still passes."""
    folder = tmp_path / "s"
    shutil.copytree(scratch, folder)
    path = folder / "gaps.csv"
    rows = list(csv.reader(open(path, newline="", encoding="utf-8")))
    i = rows[0].index("host_events")
    for r in rows[1:]:
        r[i] = "[see fix](https://evil.example/x) ![pic](roofline.svg) *x* `tick=1.000"
    buf = io.StringIO()
    csv.writer(buf).writerows(rows)
    path.write_text(buf.getvalue(), encoding="utf-8")
    for script in ("changes.py", "report_draft.py"):
        p = subprocess.run([sys.executable, "-P", str(REPO / "scripts" / script), "--out",
                            str(folder)], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
    p = subprocess.run([sys.executable, "-P", str(REPO / "scripts" / "factcheck.py"),
                        str(folder / "report_draft.md"), "--out", str(folder)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:]
    p = build(folder / "report_draft.md", folder, tmp_path / "p.html")
    assert p.returncode == 0, p.stderr
    doc = parse(tmp_path / "p.html")
    assert not [a for t, a in doc.attrs if t == "a" and "evil" in a.get("href", "")]
    assert [t for t, _ in doc.tags].count("svg") == 2
    assert "[see fix](https://evil.example/x)" in "".join(doc.text)


def test_the_printout_counts_what_the_page_holds(scratch, tmp_path):
    """The closing line counts the page's tables (the report's own and the scratch folder's)
    and drawings as the page holds them; one table more in the report is one more counted."""
    p = build(scratch / "report_draft.md", scratch, tmp_path / "a.html")
    assert p.returncode == 0, p.stderr
    doc = parse(tmp_path / "a.html")
    tables = sum(1 for t, _ in doc.tags if t == "table")
    drawings = sum(1 for t, a in doc.attrs if t == "span" and a.get("class") == "fig-wrap")
    scratch_tables = sum(1 for t, a in doc.attrs if t == "div" and a.get("id", "").startswith(
        "table-"))
    assert tables > scratch_tables > 0 and drawings == 2
    m = re.search(r"(\d+) drawings, (\d+) tables: (\d+) from the report, (\d+) from the scratch "
                  r"folder\)", p.stdout)
    assert m, p.stdout
    assert [int(x) for x in m.groups()] == [drawings, tables, tables - scratch_tables,
                                            scratch_tables]
    report = tmp_path / "more.md"
    report.write_text((scratch / "report_draft.md").read_text(encoding="utf-8")
                      + "\n| a | b |\n|---|---|\n| x | y |\n", encoding="utf-8")
    p = build(report, scratch, tmp_path / "b.html")
    assert p.returncode == 0, p.stderr
    m2 = re.search(r"(\d+) tables: (\d+) from the report", p.stdout)
    assert (int(m2.group(1)), int(m2.group(2))) == (tables + 1, tables - scratch_tables + 1)


def test_comments_never_closed_end_in_linear_time(scratch, tmp_path):
    """20,000 "<!--" with no "-->" after them (ran past 120 s): the page is built, the text
    after them kept (an unclosed comment hides nothing, as before)."""
    report = tmp_path / "r.md"
    report.write_text((scratch / "report_draft.md").read_text() + "\n" + "<!-- " * 20000
                      + "the tail\n")
    p = subprocess.run([sys.executable, "-P", str(BUILD), str(report), "--scratch",
                        str(scratch), "--out", str(tmp_path / "r.html")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "the tail" in (tmp_path / "r.html").read_text()


def test_no_way_a_drawing_names_an_outside_resource_survives(scratch, tmp_path):
    """Every attribute and CSS value is judged as the browser reads it (names lowercased,
    entities decoded, no escapes or comments, only known functions, url() to the figure's own
    ids): of the drawing's 25 ways out, none is left in the page; its own url(#q) is kept."""
    p = page_of_drawing(scratch, tmp_path / "s", leaky_svg("http://leak.invalid"),
                        tmp_path / "a.html")
    assert p.returncode == 0, p.stderr
    page = (tmp_path / "a.html").read_text(encoding="utf-8")
    assert "leak.invalid" not in page and "@import" not in page.lower()
    fig = page[page.index('<span class="fig-wrap"'):]
    assert 'fill="url(#f1-q)"' in fig and 'id="f1-q"' in fig and 'id="f1-p"' not in fig
    assert fig.count("<rect") == 13 and fig.count("<use") == 0


SHEETS = {  # each grows in the dimension that a pattern or a scan could make quadratic
    "unclosed comments": lambda n: "/*" * n,
    "rules without a semicolon": lambda n: "a{}" * n,
    "unclosed at-blocks": lambda n: "@x{" * n,
    "a long selector": lambda n: "a" * n + "{fill:red}",
    "a long word": lambda n: "fill:" + "u" * n,
    "unclosed url(": lambda n: "a{fill:" + "url(" * n + "}",
    "statements": lambda n: "@import x;" * n + "a{fill:red}",
}


@pytest.mark.parametrize("shape", SHEETS)
def test_a_drawing_sheet_is_cleaned_in_linear_time(shape):
    """A drawing's <style> text and a style value are cleaned in one pass whatever their shape:
    the cost at 200,000 is under 3 times the cost at 100,000 (a function pattern tried at every
    character of a word took 5.6 s on 40,000 characters)."""
    sys.path.insert(0, str(PAGE_SCRIPTS))
    import build_page

    def clean(css):
        build_page.scope_css(css, "fig1", "f1-")
        build_page.safe_style(css)

    cost_doubles(clean, SHEETS[shape], 200_000)


def test_a_drawing_linked_in_from_outside_the_folder_is_not_embedded(scratch, tmp_path):
    """A link planted in the scratch folder that leads to a drawing outside it is no file of
    the folder: the page says the image is not embedded and holds nothing of it, while a
    drawing of the folder itself is embedded."""
    secret = tmp_path / "elsewhere" / "secret.svg"
    secret.parent.mkdir()
    secret.write_text('<svg xmlns="http://www.w3.org/2000/svg"><text>outside-words</text></svg>')
    folder = tmp_path / "s"
    shutil.copytree(scratch, folder)
    (folder / "linked.svg").symlink_to(secret)
    (folder / "report.md").write_text("# R\n\n![a drawing](linked.svg)\n\n![own](roofline.svg)\n",
                                      encoding="utf-8")
    p = build(folder / "report.md", folder, tmp_path / "page.html")
    assert p.returncode == 0, p.stderr
    html = (tmp_path / "page.html").read_text()
    assert "outside-words" not in html and "image not embedded" in html
    assert html.count("<svg") >= 1


def test_the_reports_derived_figures_show_their_formulas(scratch, tmp_path):
    """A report that derives a figure (derived.csv): the page shows each one's value and its
    formula with the values it is computed from, so the reader sees how it was made."""
    mine = tmp_path / "mine"
    shutil.copytree(scratch, mine)
    formula = "= 100 * s / w; s = changes.csv: saving_us, rank=1; w = changes.csv: step_us, rank=1"
    with open(mine / "derived.csv", "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows([["name", "value", "unit", "formula"],
                                  ["share_of_change_1", "14.42", "%", formula]])
    p = build(mine / "report_draft.md", mine, tmp_path / "page.html")
    assert p.returncode == 0, p.stderr
    html = (tmp_path / "page.html").read_text(encoding="utf-8")
    assert re.search(r"<caption>Figures the report derived[^<]*\(1 row; derived\.csv\)", html)
    assert "share_of_change_1" in html and "s = changes.csv: saving_us, rank=1" in html
