"""The value an audit returns; logging and printing read it, they do not recompute it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

MEMORIZED = "memorized"
NOT_MEMORIZED = "not_memorized"
#: Neither hypothesis rejected (too little evidence), or both (a partly removed set).
INCONCLUSIVE = "inconclusive"
#: Every verdict an auditor may return.
VERDICTS = (MEMORIZED, NOT_MEMORIZED, INCONCLUSIVE)
#: Each verdict as a number (the runs' ``verdict_code`` metrics), so that plots and tables that take numbers
#: only, such as the MLflow UI's compare page, line verdicts up: inconclusive sits between the two answers.
VERDICT_CODES = {MEMORIZED: 1.0, NOT_MEMORIZED: 0.0, INCONCLUSIVE: 0.5}
#: Metrics that are p-values besides ``p_*``: the paper's rho_EMA under each test.
PVALUE_METRICS = ("rho_ema", "rho_ema_ks")


def is_pvalue(metric: str) -> bool:
    """Whether a metric name denotes a p-value (``rho_ema``, ``rho_ema_ks``, ``p_*``); ``rho_ks`` is a ratio.

    >>> [is_pvalue(m) for m in ("rho_ema", "p_removed", "rho_ks", "flag_rate")]
    [True, True, False, False]
    """
    return metric in PVALUE_METRICS or metric.startswith("p_")


class SampleFlags(NamedTuple):
    """Per query sample: each metric's score and flag, and M (each auditor documents its rule)."""

    scores: dict[str, np.ndarray]
    flags: dict[str, np.ndarray]
    membership: np.ndarray

    def columns(self) -> dict[str, np.ndarray]:
        """The membership table's columns: each metric, each metric's flag (``flag_<metric>``), and M, as int8."""
        columns: dict[str, np.ndarray] = dict(self.scores)
        columns.update({f"flag_{name}": flag.astype(np.int8) for name, flag in self.flags.items()})
        columns["M"] = self.membership.astype(np.int8)
        return columns


@dataclass(frozen=True)
class AuditResult:
    """Outcome of auditing one query set.

    Attributes
    ----------
    method : str
        The auditor that produced it.
    scores : dict of str to ndarray of shape (n_query,)
        Each membership metric on the query set.
    flags : dict of str to ndarray of shape (n_query,)
        Each metric's flags (score >= its threshold; each auditor documents its own rule).
    membership : ndarray of shape (n_query,)
        M: 1 where any metric flags the sample (each auditor documents its own rule).
    metrics : dict of str to float
        The numbers to log, e.g. ``rho_ema``, ``rho_ema_ks``, ``flag_rate``.
    verdict : str
        ``"memorized"``, ``"not_memorized"`` or ``"inconclusive"`` (auditors that test
        both "removed" and "retained" hypotheses).
    alpha : float
        Significance level of the verdict.
    thresholds : dict
        The thresholds used, as logged in ``thresholds.json``.
    """

    method: str
    scores: dict[str, np.ndarray]
    flags: dict[str, np.ndarray]
    membership: np.ndarray
    metrics: dict[str, float]
    verdict: str
    alpha: float
    thresholds: dict = field(default_factory=dict)

    @property
    def n_query(self) -> int:
        """The query's size: the ``n_query`` metric where the auditor counted it (no per-sample arrays), else M's."""
        return int(self.metrics.get("n_query", self.membership.size))

    @property
    def flag_rate(self) -> float:
        """The share of the query flagged: the ``flag_rate`` metric where the auditor counted it, else M's mean."""
        return float(self.metrics["flag_rate"] if "flag_rate" in self.metrics else self.membership.mean())

    def to_dict(self) -> dict:
        """The set-level outcome as JSON-ready data: method, verdict, alpha, metrics, thresholds.

        The per-sample arrays stay out (they go to the membership table, :meth:`sample_columns`).
        """
        return {
            "method": self.method,
            "verdict": self.verdict,
            "alpha": self.alpha,
            "metrics": dict(self.metrics),
            "thresholds": self.thresholds,
        }

    def sample_columns(self) -> dict[str, np.ndarray]:
        """Per-sample columns: each metric, each metric's flag, and M."""
        return SampleFlags(self.scores, self.flags, self.membership).columns()
