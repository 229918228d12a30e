"""Figures of one audit as PNG bytes, drawn on matplotlib's Agg canvas (no display, no pyplot state)."""

from __future__ import annotations

import io
from collections.abc import Mapping

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

#: Histogram bins at most (fewer for small sets: about two samples per bin for the smallest).
MAX_BINS = 40
DPI = 90
#: Height of one signal's row of panels, inches.
ROW_HEIGHT = 2.5
#: The query first, then each reference; line styles keep identical distributions visible.
LINESTYLES = ("-", "--", ":", "-.")


def png(figure: Figure, *, dpi: int = DPI) -> bytes:
    """The figure as PNG bytes, drawn on matplotlib's Agg canvas (no display, no pyplot state)."""
    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def score_distributions(
    distributions: Mapping[str, Mapping[str, np.ndarray]],
    *,
    thresholds: Mapping[str, float | None],
    title: str,
) -> bytes:
    """One row per membership score: its histogram and its ECDF, one line per set of samples.

    Parameters
    ----------
    distributions : mapping of str to mapping of str to ndarray of shape (n,)
        Set label (the query first, then references such as ``members``) -> score name -> scores.
        A set that lacks a score is left out of that row.
    thresholds : mapping of str to float or None
        Score name -> the single cut-off the auditor applied, drawn as a vertical line
        (None: no single cut-off, e.g. one per class).
    title : str
    """
    labels = list(distributions)
    signals = list(next(iter(distributions.values()))) if distributions else []
    figure = Figure(figsize=(10, 0.6 + ROW_HEIGHT * max(len(signals), 1)))
    axes = figure.subplots(max(len(signals), 1), 2, squeeze=False)
    for row, signal in zip(axes, signals, strict=False):  # without signals, one blank row is left empty
        values = {label: _finite(distributions[label][signal]) for label in labels if signal in distributions[label]}
        _histograms(row[0], values)
        _ecdfs(row[1], values)
        cut = thresholds.get(signal)
        for ax in row:
            ax.set_xlabel(signal)
            if cut is not None and np.isfinite(cut):
                ax.axvline(cut, color="black", linewidth=1, linestyle="--", label=f"threshold {cut:.4g}")
        row[0].set_ylabel("share of samples")
        row[1].set_ylabel("ECDF")
        row[1].legend(fontsize=7, loc="best")
    figure.suptitle(title, fontsize=10)
    # fixed margins (inches): tight_layout would draw the whole figure once more only to measure it
    height = figure.get_figheight()
    figure.subplots_adjust(left=0.07, right=0.98, top=1 - 0.45 / height, bottom=0.5 / height, hspace=0.5, wspace=0.2)
    return png(figure)


def _finite(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=float).ravel()
    return values[np.isfinite(values)]


def _histograms(ax, values: dict[str, np.ndarray]) -> None:
    pooled = np.concatenate(list(values.values())) if values else np.zeros(0)
    smallest = min((v.size for v in values.values()), default=0)
    n_bins = int(np.clip(smallest // 2, 1, MAX_BINS))
    bins = np.histogram_bin_edges(pooled, bins=n_bins) if pooled.size else np.linspace(0, 1, 2)
    # strict=False: one style per series, so at most len(LINESTYLES) series are drawn
    for (label, v), linestyle in zip(values.items(), LINESTYLES, strict=False):
        if v.size == 0:
            continue
        ax.hist(
            v,
            bins=bins,
            weights=np.full(v.shape, 1.0 / v.size),
            histtype="step",
            linewidth=1.5,
            linestyle=linestyle,
            label=f"{label} (n={v.size})",
        )


def _ecdfs(ax, values: dict[str, np.ndarray]) -> None:
    # strict=False: one style per series, so at most len(LINESTYLES) series are drawn
    for (label, v), linestyle in zip(values.items(), LINESTYLES, strict=False):
        if v.size == 0:
            continue
        ordered = np.sort(v)
        ax.step(ordered, np.arange(1, v.size + 1) / v.size, where="post", linestyle=linestyle, label=label)
    ax.set_ylim(0, 1.02)
