"""The shared frame of every report page: inline CSS, escaping, tables and inline images.

Every helper escapes the text it is given; only :func:`page` and :func:`section` take
already-built HTML (the output of these helpers).
"""

from __future__ import annotations

import base64
import html
import math
import re
from collections.abc import Iterable, Mapping

#: Characters left out of figure file names and anchors: they must be safe in artifact paths and URLs.
UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")

#: The whole page's style, inline: no stylesheet to fetch when the artifact view opens the page.
STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:1.5em auto;max-width:1100px;
padding:0 1em;color:#1d1d1f;line-height:1.45}
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.15em;border-bottom:1px solid #ccc;padding-bottom:.2em;
margin-top:1.6em}h3{font-size:1em}
table{border-collapse:collapse;margin:.5em 0 1em}th,td{border:1px solid #bbb;padding:3px 9px;text-align:left;
vertical-align:top}th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}
.verdict{border-radius:6px;padding:.8em 1.1em;margin:1em 0;border:2px solid}
.verdict .word{font-size:1.4em;font-weight:700}
.memorized{background:#fdecea;border-color:#c62828}.not_memorized{background:#e8f5e9;border-color:#2e7d32}
.inconclusive{background:#fff8e1;border-color:#f9a825}.unknown{background:#eee;border-color:#888}
.warned{background:#fff3e0;border-color:#ef6c00}
.warning{background:#fff3e0;border-left:4px solid #ef6c00;padding:.4em .8em;margin:.3em 0}
pre{background:#f6f8fa;padding:.7em;overflow-x:auto;white-space:pre-wrap;word-break:break-all}
figure{margin:.6em 0}figure img{max-width:100%;border:1px solid #ddd}figcaption{font-size:.9em;color:#555}
.muted{color:#666}
"""


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def number(value: float, undefined: str = "undefined") -> str:
    """A metric as text: four significant digits, integers without a fraction, NaN as ``undefined``."""
    value = float(value)
    if math.isnan(value):
        return undefined
    if math.isfinite(value) and value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4g}"


def table(header: Iterable[str], rows: Iterable[Iterable[object]], *, numeric: Iterable[int] = ()) -> str:
    """An HTML table of escaped cells; columns whose position is in ``numeric`` are right-aligned."""
    right = set(numeric)
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td{' class=num' if i in right else ''}>{esc(c)}</td>" for i, c in enumerate(row)) + "</tr>"
        for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def key_value_table(items: Mapping[str, object]) -> str:
    """A two-column table without a header row: label, value."""
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in items.items())
    return f"<table>{rows}</table>"


def image(picture: bytes, *, alt: str, caption: str = "", mime: str = "image/png") -> str:
    """A picture (PNG unless ``mime`` says otherwise, e.g. SVG) inline as a data URI, with a caption."""
    data = base64.b64encode(picture).decode("ascii")
    caption_html = f"<figcaption>{esc(caption)}</figcaption>" if caption else ""
    return f'<figure><img alt="{esc(alt)}" src="data:{mime};base64,{data}">{caption_html}</figure>'


def bullet_list(items: Iterable[object], *, css_class: str = "") -> str:
    attribute = f' class="{css_class}"' if css_class else ""
    return "<ul>" + "".join(f"<li{attribute}>{esc(item)}</li>" for item in items) + "</ul>"


def section(title: str, body_html: str, *, anchor: str) -> str:
    return f'<section id="{esc(anchor)}"><h2>{esc(title)}</h2>{body_html}</section>'


def page(title: str, body_html: str, *, extra_style: str = "") -> str:
    """A standalone HTML page: inline style, no script, nothing fetched."""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title><style>{STYLE}{extra_style}</style></head>"
        f"<body><h1>{esc(title)}</h1>{body_html}</body></html>\n"
    )
