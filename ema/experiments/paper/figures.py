"""The paper's figures as PNG bytes, drawn with matplotlib's Agg canvas (no display, no pyplot state).

- :func:`signal_distributions` (Fig. 2): correctness, confidence and negative entropy of the
  target on a member fold, the held-out set and the other-domain set.
- :func:`ks_output_distributions` (Fig. 3): the confidence of f_D, f_Dcal and f_Dq on a
  query set, per calibration quality k, with the KS statistics behind rho_KS.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from matplotlib.figure import Figure

from ema.auditors.ks_ratio import ks_statistic
from ema.reports.canvas import png

#: Histogram bins of the continuous metrics.
N_BINS = 40
DPI = 110
#: One line style per distribution, so that identical distributions stay visible on top of each other.
LINESTYLES = ("-", "--", ":", "-.")


def _histograms(ax, values: dict[str, np.ndarray], bins: np.ndarray) -> None:
    # strict=False: one style per series, so at most len(LINESTYLES) series are drawn
    for (label, v), linestyle in zip(values.items(), LINESTYLES, strict=False):
        weights = np.full(v.shape, 1.0 / max(v.size, 1))
        ax.hist(
            v,
            bins=bins,
            weights=weights,
            histtype="step",
            linewidth=1.5,
            linestyle=linestyle,
            label=f"{label} (n={v.size})",
        )
    ax.set_yscale("log")
    ax.set_ylabel("share of samples (log)")


def signal_distributions(scores: dict[str, dict[str, np.ndarray]], *, title: str) -> bytes:
    """Fig. 2: one panel per metric, one distribution per query set.

    Parameters
    ----------
    scores : dict of str to dict of str to ndarray of shape (n,)
        Query set label -> metric name (``correctness``, ``confidence``,
        ``negative_entropy``) -> the target's score of each sample.
    title : str
    """
    figure = Figure(figsize=(12, 3.6))
    axes = figure.subplots(1, 3)
    labels = list(scores)
    shares = [float(np.mean(scores[label]["correctness"])) for label in labels]
    axes[0].bar(labels, shares, color=[f"C{i}" for i in range(len(labels))])
    axes[0].set_ylim(0, 1.05)
    axes[0].set_ylabel("share correctly classified")
    axes[0].set_title("correctness")
    for x, share in enumerate(shares):
        axes[0].text(x, share + 0.01, f"{share:.3f}", ha="center", fontsize=8)
    _histograms(axes[1], {label: scores[label]["confidence"] for label in labels}, np.linspace(0, 1, N_BINS + 1))
    axes[1].set_title("confidence f(x)_y")
    entropy = {label: scores[label]["negative_entropy"] for label in labels}
    low = min(float(v.min()) for v in entropy.values())
    _histograms(axes[2], entropy, np.linspace(min(low, -1e-3), 0, N_BINS + 1))
    axes[2].set_title("negative entropy")
    axes[2].legend(fontsize=7)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    return png(figure, dpi=DPI)


@dataclass(frozen=True)
class KSPanel:
    """The three models' probabilities on one query set at one calibration quality.

    Attributes
    ----------
    k : int
    target, calibration, query : ndarray of shape (n, n_classes)
        f_D (the target), f_Dcal (trained on the calibration set at quality k) and f_Dq
        (trained on the query set) on the query set.
    labels : ndarray of shape (n,)
    """

    k: int
    target: np.ndarray
    calibration: np.ndarray
    query: np.ndarray
    labels: np.ndarray

    def statistics(self) -> tuple[float, float]:
        """KS(f_D, f_Dq) and KS(f_Dcal, f_Dq), as the KS-ratio auditor computes them."""
        return ks_statistic(self.target, self.query), ks_statistic(self.calibration, self.query)


def ks_output_distributions(panels: list[KSPanel], *, query_label: str, title: str) -> bytes:
    """Fig. 3: per k, the confidence distributions of f_D, f_Dcal and f_Dq on the query set."""
    figure = Figure(figsize=(4.2 * max(len(panels), 1), 3.6))
    axes = np.atleast_1d(figure.subplots(1, max(len(panels), 1)))
    bins = np.linspace(0, 1, N_BINS + 1)
    for ax, panel in zip(axes, panels, strict=False):  # without panels, one blank axis is left empty
        index = np.arange(panel.labels.size)
        _histograms(
            ax,
            {
                f"f_D({query_label})": panel.target[index, panel.labels],
                f"f_Dcal({query_label})": panel.calibration[index, panel.labels],
                f"f_Dq({query_label})": panel.query[index, panel.labels],
            },
            bins,
        )
        ks_target, ks_calibration = panel.statistics()
        ratio = ks_target / ks_calibration if ks_calibration > 0 else float("inf")
        ax.set_title(
            f"k={panel.k}: KS(f_D,f_Dq)={ks_target:.3f}\nKS(f_Dcal,f_Dq)={ks_calibration:.3f}, rho_KS={ratio:.2f}",
            fontsize=9,
        )
        ax.set_xlabel("confidence f(x)_y")
        ax.legend(fontsize=7, loc="upper left")
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    return png(figure, dpi=DPI)
