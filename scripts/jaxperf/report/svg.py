"""SVG text for the bundle's plots (roofline.svg, swimlanes.svg): escaping, elements with their
attributes and tooltips, and text measured, clipped and wrapped by an estimated glyph width.
Standard library only.

An attribute is given as a keyword (`class_` for class, `_` for `-`: `text_anchor`) and written
in the order given; None leaves it out. A number in it is written as an int as it is, a float to
0.1 px; a str as the caller formatted it."""

from __future__ import annotations

import re
import textwrap

FONT_PX = 11   # px, the plots' label font size
CHAR_PX = 6.2  # px, the mean glyph width of FONT_PX sans-serif: a text's width is estimated
APOS = "&#39;"  # how an apostrophe is written (roofline.svg writes html.escape's "&#x27;")

# Characters XML 1.0 cannot hold (controls, lone surrogates, U+FFFE/U+FFFF)
_BAD_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def esc(value, apos: str = APOS) -> str:
    """Text from the capture, safe in XML content and in a quoted attribute (characters XML
    cannot hold become U+FFFD)."""
    return _BAD_XML.sub("\ufffd", str(value)).replace("&", "&amp;").replace(
        "<", "&lt;").replace(">", "&gt;").replace('"', "&quot;").replace("'", apos)


def num(value) -> str:
    """An attribute's value as written: an int as it is, a float to 0.1, anything else escaped."""
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value) if isinstance(value, int) else esc(value)


def attributes(given: dict) -> str:
    """' name="value"' for each attribute given (see the module's docstring)."""
    return "".join(f' {name.rstrip("_").replace("_", "-")}="{num(v)}"'
                   for name, v in given.items() if v is not None)


def start(name: str, **given) -> str:
    """An element's start tag (an <svg> or a group: the caller closes it)."""
    return f"<{name}{attributes(given)}>"


def element(name: str, content: str | None = None, tip: str | None = None,
            apos: str = APOS, **given) -> str:
    """One element: `content` is markup, written as it is; `tip` a tooltip (a <title> child,
    escaped). With neither, the element closes itself."""
    if content is None and tip is None:
        return f"<{name}{attributes(given)}/>"
    title = "" if tip is None else f"<title>{esc(tip, apos)}</title>"
    return f"<{name}{attributes(given)}>{title}{content or ''}</{name}>"


def text(x, y, body, tip: str | None = None, apos: str = APOS, **given) -> str:
    """A <text> at (x, y) holding `body`, escaped."""
    return element("text", esc(body, apos), tip, apos, x=x, y=y, **given)


def text_px(s: str) -> float:
    """The estimated width of `s` in FONT_PX sans-serif."""
    return len(s) * CHAR_PX


def fits(px: float, font_px: float = FONT_PX) -> int:
    """How many characters of `font_px` sans-serif fit in `px`."""
    return int(px / (CHAR_PX * font_px / FONT_PX))


def clip(s: str, px: float, font_px: float = FONT_PX) -> str:
    """`s` cut to about `px` pixels wide, with an ellipsis where it was cut."""
    n = max(0, fits(px, font_px))
    return s if len(s) <= n else (s[:max(0, n - 1)] + "\u2026" if n else "")


def wrap(lines: list[str], chars: int, indent: str) -> list[str]:
    """Each line wrapped to `chars` characters, its continuations indented; an empty line kept."""
    return [part for line in lines
            for part in textwrap.wrap(line, chars, subsequent_indent=indent) or [""]]
