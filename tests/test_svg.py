"""svg.py: the SVG text both plots are written with (escaping, elements and their attributes,
text widths), on hand-written values with the exact text expected."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from jaxperf.report import svg


def test_esc_makes_any_text_safe_xml():
    assert svg.esc("a<b & \"c\" 'd'>") == "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;"
    assert svg.esc("it's", apos="&#x27;") == "it&#x27;s"
    assert svg.esc("x\x01y\ud800z\ufffe") == "x\ufffdy\ufffdz\ufffd"
    assert svg.esc(12) == "12"
    ET.fromstring(f"<t a=\"{svg.esc(chr(7) + '<&>')}\">{svg.esc(chr(0) + 'ok')}</t>")


def test_element_attributes_in_order_numbers_by_type():
    assert svg.element("rect", x=16, y=2.26, width="199.60000000000002", height=None,
                       class_="kc", fill_opacity="0.85") == (
        '<rect x="16" y="2.3" width="199.60000000000002" class="kc" fill-opacity="0.85"/>')
    assert svg.element("line", tip="a < b", x1=1.06, y1=0) == (
        '<line x1="1.1" y1="0"><title>a &lt; b</title></line>')
    assert svg.element("text", '<tspan class="c">x</tspan>', x=1) == (
        '<text x="1"><tspan class="c">x</tspan></text>')
    assert svg.element("title", "") == "<title></title>"
    assert svg.start("g", id="gpu0-s7", class_="lane-gpu") == '<g id="gpu0-s7" class="lane-gpu">'


def test_text_escapes_its_body_and_puts_the_tooltip_first():
    assert svg.text(8, 20.0, "XProf's <op>", tip="whole & more", text_anchor="end") == (
        '<text x="8" y="20.0" text-anchor="end"><title>whole &amp; more</title>'
        'XProf&#39;s &lt;op&gt;</text>')
    assert svg.text(1, 2, "it's", apos="&#x27;") == '<text x="1" y="2">it&#x27;s</text>'


def test_widths_clip_and_wrap():
    assert svg.text_px("abcde") == 5 * svg.CHAR_PX
    assert svg.fits(62) == 10 and svg.fits(62, font_px=22) == 5
    assert svg.clip("abcdefghij", 62) == "abcdefghij"
    assert svg.clip("abcdefghijk", 62) == "abcdefghi\u2026"
    assert svg.clip("abc", 6.1) == "" and svg.clip("", 0) == ""
    assert svg.wrap(["one two three", "", "four"], 8, "  ") == [
        "one two", "  three", "", "four"]
