"""Line plots as SVG text: the audit report's figures, drawn without matplotlib.

An audit's figures are step lines (histograms, ECDFs, ROC curves) on linear or log-x axes, with
ticks, labels and a legend. matplotlib drew them in 0.8 s of a 5.2 s cached ``ema audit``
process (its import 0.23 s, its artists and canvas the rest; the full benchmark run of 2026-11-28
06:25 UTC, CHANGELOG): that process was 1.38x the imports against a goal of 1.25x, the same audit without
figures 1.16x. Writing the few SVG elements they need takes milliseconds. Browsers, report.html
and MLflow's artifact viewer show SVG as they show PNG, and it stays sharp when zoomed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

import numpy as np

#: The MIME type of the figures this module writes (for data URIs).
MIME = "image/svg+xml"
#: matplotlib's default colour cycle ("tab10"), so the report looks as it did.
COLORS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
#: matplotlib's line styles as SVG dash arrays (None: solid).
DASHES = {"-": None, "--": "6,3", ":": "1.5,2.5", "-.": "6,2,1.5,2"}
FONT = "DejaVu Sans, Arial, Helvetica, sans-serif"
#: A tick mark's length, pixels (its label sits beyond it).
TICK = 4
#: Share of the data range left free at each end of a linear axis (as matplotlib's default margins).
MARGIN = 0.05
#: Most ticks on a log axis: decades beyond it are labelled every second, third, ... decade.
MOST_LOG_TICKS = 8
#: A legend's pixels per entry, per character of a label (DejaVu Sans at 11 px averages under 6.2), and before it.
LEGEND_ROW, LEGEND_CHAR, LEGEND_SAMPLE = 18, 6.8, 32
#: Characters XML 1.0 forbids (control characters, lone surrogates, U+FFFE, U+FFFF): written as U+FFFD.
NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


@dataclass(frozen=True)
class Line:
    """One drawn line: its points in data units and how it looks."""

    x: np.ndarray
    y: np.ndarray
    label: str | None = None
    color: str = COLORS[0]
    style: str = "-"
    width: float = 1.5
    #: Drawn across the panel's height at ``x`` (a threshold), whatever ``y`` and the y limits.
    across: bool = False


@dataclass
class Panel:
    """One set of axes: lines in data units, limits (None: from the data), labels, log-scale x."""

    xlabel: str = ""
    ylabel: str = ""
    title: str = ""
    log_x: bool = False
    xlim: tuple[float, float] | None = None
    ylim: tuple[float, float] | None = None
    lines: list[Line] = field(default_factory=list)

    def add(self, x: np.ndarray, y: np.ndarray, *, step: bool = False, **look) -> None:
        """Add a line through (x, y); ``step``: a step that holds each y until the next x (matplotlib's "post")."""
        x, y = np.asarray(x, float), np.asarray(y, float)
        if step and x.size:
            x, y = np.repeat(x, 2)[1:], np.repeat(y, 2)[:-1]
        self.lines.append(Line(x, y, **look))

    def vline(self, x: float, **look) -> None:
        """A vertical line across the panel at ``x``, whatever its y limits."""
        self.lines.append(Line(np.array([x, x]), np.array([np.nan, np.nan]), across=True, **look))


def figure(rows: Sequence[Sequence[Panel]], *, title: str, panel_size: tuple[int, int]) -> bytes:
    """Panels in rows under a title, as SVG bytes, each row's labelled lines listed at its right (its legend).

    The legends are as wide as the longest label and a row as tall as its legend, so no entry is cut.
    """
    width, height = panel_size
    left, right, top, row_gap = 62, 16, 48, 66
    entries = [[line for panel in row for line in panel.lines if line.label] for row in rows]
    legend_width = max((LEGEND_SAMPLE + LEGEND_CHAR * len(line.label) for row in entries for line in row), default=0)
    columns = max((len(row) for row in rows), default=0)
    legend_x = left + columns * (width + left + right) - left - right + 14
    total_width = round(legend_x + legend_width + right) if legend_width else legend_x - 14 + right
    row_heights = [max(height + row_gap, LEGEND_ROW * (len(row) + 1)) for row in entries]
    total_height = top + sum(row_heights)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_width}" height="{total_height}" '
        f'viewBox="0 0 {total_width} {total_height}" font-family="{FONT}">',
        '<rect width="100%" height="100%" fill="white"/>',
        _text(total_width / 2, 20, title, size=13, anchor="middle"),
    ]
    y = top
    for r, (row, listed, row_height) in enumerate(zip(rows, entries, row_heights, strict=True)):
        for c, panel in enumerate(row):
            parts.append(_panel(panel, (left + c * (width + left + right), y, width, height), f"clip{r}-{c}"))
        parts.append(_legend(listed, legend_x, y))
        y += row_height
    parts.append("</svg>")
    return "\n".join(parts).encode("utf-8")


def linear_ticks(low: float, high: float, count: int = 5) -> np.ndarray:
    """Round tick values (1, 2, 2.5 or 5 times a power of ten apart) inside [low, high], about ``count`` of them."""
    raw = (high - low) / max(count, 1)
    power = 10.0 ** np.floor(np.log10(raw))
    step = power * next(m for m in (1, 2, 2.5, 5, 10) if m * power >= raw * (1 - 1e-9))
    ticks = np.arange(np.ceil(low / step - 1e-9), np.floor(high / step + 1e-9) + 1) * step
    ticks[np.abs(ticks) < step * 1e-9] = 0.0  # 0, not -1e-17
    return ticks


def log_ticks(low: float, high: float) -> np.ndarray:
    """The powers of ten inside [low, high] (both > 0); over :data:`MOST_LOG_TICKS` of them, every k-th, 1 kept."""
    decades = 10.0 ** np.arange(np.ceil(np.log10(low) - 1e-9), np.floor(np.log10(high) + 1e-9) + 1)
    every = -(-decades.size // MOST_LOG_TICKS)
    return decades[::-1][::every][::-1]


def tick_labels(values: np.ndarray) -> list[str]:
    """The ticks' labels: six significant digits (0.001, 2.5, -20), more where six would repeat one (a narrow range)."""
    for digits in range(6, 18):
        labels = [f"{value:.{digits}g}" for value in values]
        if len(set(labels)) == len(labels):
            break
    return labels


def limits(panel: Panel) -> tuple[tuple[float, float], tuple[float, float]]:
    """The panel's x and y limits: given ones, else the finite data's range with a margin (decades for log x)."""
    return (
        panel.xlim or _data_range(np.concatenate([line.x for line in panel.lines] or [np.zeros(0)]), panel.log_x),
        panel.ylim or _data_range(np.concatenate([line.y for line in panel.lines] or [np.zeros(0)]), False),
    )


def _data_range(values: np.ndarray, log: bool) -> tuple[float, float]:
    values = values[np.isfinite(values) & ((values > 0) if log else True)]
    if values.size == 0:
        return (0.1, 1.0) if log else (0.0, 1.0)
    low, high = float(values.min()), float(values.max())
    if log:
        return 10.0 ** np.floor(np.log10(low)), 10.0 ** np.ceil(np.log10(high) + (low == high))
    if low == high:
        return low - 0.5, high + 0.5
    pad = (high - low) * MARGIN
    return low - pad, high + pad


def _panel(panel: Panel, box: tuple[float, float, float, float], clip: str) -> str:
    x0, y0, width, height = box
    (xlow, xhigh), (ylow, yhigh) = limits(panel)
    forward = np.log10 if panel.log_x else (lambda v: v)
    xspan, yspan = forward(xhigh) - forward(xlow), yhigh - ylow

    def px(values: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return x0 + (forward(values) - forward(xlow)) / xspan * width

    def py(values: np.ndarray) -> np.ndarray:
        return y0 + height - (values - ylow) / yspan * height

    parts = [
        f'<clipPath id="{clip}"><rect x="{x0}" y="{y0}" width="{width}" height="{height}"/></clipPath>',
        f'<g clip-path="url(#{clip})" fill="none">',
    ]
    for line in panel.lines:
        ys = np.array([y0, y0 + height], float) if line.across else py(line.y)
        parts.append(_path(px(line.x), ys, line))
    parts.append("</g>")
    parts.append(f'<rect x="{x0}" y="{y0}" width="{width}" height="{height}" fill="none" stroke="black"/>')
    xticks = log_ticks(xlow, xhigh) if panel.log_x else linear_ticks(xlow, xhigh)
    for label, at in zip(tick_labels(xticks), px(xticks), strict=True):
        parts.append(f'<path d="M{at:.1f},{y0 + height} v{TICK}" stroke="black"/>')
        parts.append(_text(at, y0 + height + TICK + 11, label, anchor="middle"))
    yticks = linear_ticks(ylow, yhigh)
    for label, at in zip(tick_labels(yticks), py(yticks), strict=True):
        parts.append(f'<path d="M{x0},{at:.1f} h-{TICK}" stroke="black"/>')
        parts.append(_text(x0 - TICK - 2, at + 4, label, anchor="end"))
    parts.append(_text(x0 + width / 2, y0 + height + TICK + 28, panel.xlabel, size=12, anchor="middle"))
    middle = y0 + height / 2
    parts.append(_text(x0 - 48, middle, panel.ylabel, size=12, anchor="middle", rotate=(x0 - 48, middle)))
    parts.append(_text(x0 + width / 2, y0 - 6, panel.title, size=12, anchor="middle"))
    return "\n".join(parts)


def _path(xs: np.ndarray, ys: np.ndarray, line: Line) -> str:
    """A polyline through the finite points at 0.1 px; a point inside a straight run drawn in one pixel column or
    row is left out (an ECDF of thousands stays small), a turn in it (a histogram's peak) is kept.
    """
    keep = np.isfinite(xs) & np.isfinite(ys)
    points = np.round(np.column_stack([xs[keep], ys[keep]]), 1)
    # repeats first: a point judged interior beside its own repeat could be a corner, and both corners go
    points = points[np.r_[True, np.any(points[1:] != points[:-1], axis=1)]] if len(points) else points
    if len(points) > 2:
        before, here, after = points[:-2], points[1:-1], points[2:]
        between = (before - here) * (here - after) > 0  # per coordinate: strictly between its neighbours'
        aligned = (before == here) & (here == after)
        inside = (aligned[:, 0] & between[:, 1]) | (aligned[:, 1] & between[:, 0])
        points = points[np.r_[True, ~inside, True]]
    if len(points) == 0:
        return ""
    text = np.char.mod("%.1f", points)
    pairs = np.char.add(np.char.add(text[:, 0], ","), text[:, 1])
    dash = DASHES[line.style]
    dashed = f' stroke-dasharray="{dash}"' if dash else ""
    return f'<path d="M{" L".join(pairs)}" stroke="{line.color}" stroke-width="{line.width:g}"{dashed}/>'


def _legend(lines: Sequence[Line], x: float, y: float) -> str:
    """One entry per line (the labelled ones): a short sample of the line, then its label."""
    parts = []
    for i, line in enumerate(lines):
        at = y + 8 + i * LEGEND_ROW
        sample = Line(
            np.array([x, x + LEGEND_SAMPLE - 6]),
            np.array([at, at]),
            color=line.color,
            style=line.style,
            width=line.width,
        )
        parts.append(_path(sample.x, sample.y, sample))
        parts.append(_text(x + LEGEND_SAMPLE, at + 4, line.label, anchor="start"))
    return "\n".join(parts)


def _text(
    x: float, y: float, text: str, *, size: int = 11, anchor: str, rotate: tuple[float, float] | None = None
) -> str:
    if not text:
        return ""
    turned = f' transform="rotate(-90 {rotate[0]:.1f} {rotate[1]:.1f})"' if rotate else ""
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}"{turned}>'
        f"{escape(NOT_XML.sub(chr(0xFFFD), str(text)), quote=False)}</text>"
    )
