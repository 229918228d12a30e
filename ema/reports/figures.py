"""Figures of one audit as SVG bytes (:mod:`ema.reports.svg`): score distributions and ROC curves."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from ema.reports.svg import COLORS, Panel, figure

#: Histogram bins at most (fewer for small sets: about two samples per bin for the smallest).
MAX_BINS = 40
#: One panel of a score figure, pixels (width, height).
PANEL = (330, 170)
#: The query first, then each reference; line styles keep identical distributions visible.
LINESTYLES = ("-", "--", ":", "-.")
#: How close to 0 or 1 a score is drawn on a logit or log axis (float64 outputs reach exactly 1.0).
LOG_AXIS_CLIP = 1e-15
#: The ROC figure's smallest false-positive rate drawn, unless the curve resolves smaller ones.
ROC_MIN_FPR = 1e-4


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
    rows = []
    for signal in signals:
        values = {label: _finite(distributions[label][signal]) for label in labels if signal in distributions[label]}
        spread, axis_label = display_scale(signal, values)
        values = {label: spread(v) for label, v in values.items()}
        histogram = Panel(xlabel=axis_label, ylabel="share of samples", title=f"{signal}: histogram")
        ecdf = Panel(xlabel=axis_label, ylabel="ECDF", title=f"{signal}: ECDF", ylim=(0, 1.02))
        _histograms(histogram, values)
        _ecdfs(ecdf, values)
        cut = thresholds.get(signal)  # labelled in the score's own units, drawn on the spread axis
        if cut is not None and np.isfinite(cut):
            drawn_at = float(spread(np.array([cut], dtype=float))[0])
            histogram.vline(drawn_at, color="black", style="--", width=1)
            ecdf.vline(drawn_at, color="black", style="--", width=1, label=f"threshold {cut:.4g}")
        rows.append([histogram, ecdf])
    return figure(rows or [[Panel()]], title=title, panel_size=PANEL)


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

    A false-positive rate of 0 (members found before any non-member) is drawn at the axis' left
    end, where a log axis has no 0: a perfect attack is a line at the top, not nothing.

    Parameters
    ----------
    curves : mapping of str to (fpr, tpr)
        Label -> the curve's false- and true-positive rates (increasing FPR).
    title : str
    """
    curves = {label: (np.asarray(fpr, float), np.asarray(tpr, float)) for label, (fpr, tpr) in curves.items()}
    positive = [fpr[fpr > 0] for fpr, _ in curves.values()]
    smallest = min([ROC_MIN_FPR, *(float(rates.min()) for rates in positive if rates.size)])
    panel = Panel(xlabel="false-positive rate (log scale)", ylabel="true-positive rate", log_x=True, ylim=(0, 1.02))
    panel.xlim = (smallest, 1.0)
    for (label, (fpr, tpr)), (color, style) in zip(curves.items(), _looks(len(curves)), strict=True):
        panel.add(np.maximum(fpr, smallest), tpr, step=True, label=label, color=color, style=style)
    chance = np.geomspace(smallest, 1, 50)
    panel.add(chance, chance, color="grey", style=":", width=1, label="chance")
    return figure([[panel]], title=title, panel_size=(420, 300))


def _finite(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=float).ravel()
    return values[np.isfinite(values)]


def _histograms(panel: Panel, values: dict[str, np.ndarray]) -> None:
    """Each set's histogram outline, as the share of its samples per bin (sets of different sizes compare)."""
    pooled = np.concatenate(list(values.values())) if values else np.zeros(0)
    smallest = min((v.size for v in values.values()), default=0)
    n_bins = int(np.clip(smallest // 2, 1, MAX_BINS))
    bins = np.histogram_bin_edges(pooled, bins=n_bins) if pooled.size else np.linspace(0, 1, 2)
    tallest = 0.0
    # strict=False: one style per series, so at most len(LINESTYLES) series are drawn
    for v, style, color in zip(values.values(), LINESTYLES, COLORS, strict=False):
        if v.size == 0:
            continue
        shares = np.histogram(v, bins=bins)[0] / v.size
        tallest = max(tallest, float(shares.max()))
        panel.add(np.repeat(bins, 2), np.concatenate([[0.0], np.repeat(shares, 2), [0.0]]), color=color, style=style)
    panel.ylim = (0.0, 1.05 * tallest or 1.0)


def _ecdfs(panel: Panel, values: dict[str, np.ndarray]) -> None:
    """Each set's ECDF, labelled with its size (the row's legend)."""
    # strict=False: one style per series, so at most len(LINESTYLES) series are drawn
    for (label, v), style, color in zip(values.items(), LINESTYLES, COLORS, strict=False):
        if v.size == 0:
            continue
        ordered = np.sort(v)
        at, share = np.r_[ordered[0], ordered], np.arange(v.size + 1) / v.size  # from 0: one sample is a step too
        panel.add(at, share, step=True, label=f"{label} (n={v.size})", color=color, style=style)


def _looks(count: int) -> list[tuple[str, str]]:
    """A colour and a line style for each of ``count`` curves: the palette, then the palette with the next style."""
    return [(COLORS[i % len(COLORS)], LINESTYLES[(i // len(COLORS)) % len(LINESTYLES)]) for i in range(count)]
