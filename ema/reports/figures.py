"""Figures of one audit as PNG bytes, drawn on matplotlib's Agg canvas (no display, no pyplot state)."""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

#: Histogram bins at most (fewer for small sets: about two samples per bin for the smallest).
MAX_BINS = 40
DPI = 90
#: Height of one signal's row of panels, inches.
ROW_HEIGHT = 2.5
#: The query first, then each reference; line styles keep identical distributions visible.
LINESTYLES = ("-", "--", ":", "-.")
#: How close to 0 or 1 a score is drawn on a logit or log axis (float64 outputs reach exactly 1.0).
LOG_AXIS_CLIP = 1e-15
#: The ROC figure's smallest false-positive rate drawn, unless the curve resolves smaller ones.
ROC_MIN_FPR = 1e-4


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
        spread, axis_label = display_scale(signal, values)
        values = {label: spread(v) for label, v in values.items()}
        _histograms(row[0], values)
        _ecdfs(row[1], values)
        cut = thresholds.get(signal)  # labelled in the score's own units, drawn on the spread axis
        for ax in row:
            ax.set_xlabel(axis_label)
            if cut is not None and np.isfinite(cut):
                drawn_at = float(spread(np.array([cut], dtype=float))[0])
                ax.axvline(drawn_at, color="black", linewidth=1, linestyle="--", label=f"threshold {cut:.4g}")
        row[0].set_ylabel("share of samples")
        row[1].set_ylabel("ECDF")
        row[1].legend(fontsize=7, loc="best")
    figure.suptitle(title, fontsize=10)
    # fixed margins (inches): tight_layout would draw the whole figure once more only to measure it
    height = figure.get_figheight()
    figure.subplots_adjust(left=0.07, right=0.98, top=1 - 0.45 / height, bottom=0.5 / height, hspace=0.5, wspace=0.2)
    return png(figure)


def display_scale(signal: str, values: Mapping[str, np.ndarray]) -> tuple[Callable[[np.ndarray], np.ndarray], str]:
    """How a score is drawn so a well-fitted model's values spread out: the transform and the axis label.

    Scores in [0, 1] (confidence) crowd at 1.0 on a linear axis: they are drawn as logit(p).
    Scores at or below 0 (negative entropy) crowd at 0: drawn as -log10(-s), so a tiny entropy
    is a large value. Both keep "higher is more member-like"; binary scores (correctness) and
    unbounded ones (log-odds) stay as they are.
    """
    pooled = np.concatenate([np.asarray(v, float) for v in values.values()]) if values else np.zeros(0)
    if pooled.size == 0 or np.isin(pooled, (0.0, 1.0)).all():
        return _unchanged, signal
    if pooled.min() >= 0 and pooled.max() <= 1:
        return _logit, f"logit({signal})"
    if pooled.max() <= 0:
        return _minus_log10_minus, f"-log10(-{signal})"
    return _unchanged, signal


def _unchanged(values: np.ndarray) -> np.ndarray:
    return values


def _logit(values: np.ndarray) -> np.ndarray:
    p = np.clip(values, LOG_AXIS_CLIP, 1 - LOG_AXIS_CLIP)
    return np.log(p) - np.log1p(-p)


def _minus_log10_minus(values: np.ndarray) -> np.ndarray:
    return -np.log10(np.maximum(-values, LOG_AXIS_CLIP))


def roc_curves(curves: Mapping[str, tuple[np.ndarray, np.ndarray]], *, title: str) -> bytes:
    """ROC curves with a log-scale false-positive axis, as membership-inference papers draw them.

    Parameters
    ----------
    curves : mapping of str to (fpr, tpr)
        Label -> the curve's false- and true-positive rates (increasing FPR).
    title : str
    """
    figure = Figure(figsize=(6, 4.5))
    ax = figure.subplots()
    smallest = ROC_MIN_FPR
    for label, (fpr, tpr) in curves.items():
        fpr, tpr = np.asarray(fpr, float), np.asarray(tpr, float)
        shown = fpr > 0
        if shown.any():
            smallest = min(smallest, float(fpr[shown].min()))
        ax.step(fpr[shown], tpr[shown], where="post", label=label)
    chance = np.geomspace(smallest, 1, 50)
    ax.plot(chance, chance, color="grey", linestyle=":", linewidth=1, label="chance")
    ax.set_xscale("log")
    # plain labels (0.001, 0.01, ...): the default 10^k labels are mathtext, whose parser is built on first use
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlim(smallest, 1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("false-positive rate (log scale)")
    ax.set_ylabel("true-positive rate")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(title, fontsize=10)
    figure.subplots_adjust(left=0.12, right=0.97, top=0.9, bottom=0.12)
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
