"""Result values shared by several tests: a confidence interval and the tail test result."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from scipy import stats

from ema.validation import check_open_unit

#: Alternatives of the tail tests, spelled as in scipy.stats.
TAIL_ALTERNATIVES = ("less", "greater")


class ConfidenceInterval(NamedTuple):
    """A confidence interval ``(low, high)``, as scipy.stats returns them."""

    low: float
    high: float


@dataclass(frozen=True)
class TailTestResult:
    """One-sided test on the number of query samples at or below a cut-off.

    Attributes
    ----------
    statistic : int
        Number of query samples at or below the cut-off.
    pvalue : float
        The one-sided p-value.
    alternative : {"less", "greater"}
        ``"less"``: the query has a smaller tail share than the null; ``"greater"``: larger.
    n : int
        Number of query samples.
    null_share : float
        The tail share expected under the null hypothesis.
    """

    statistic: int
    pvalue: float
    alternative: str
    n: int
    null_share: float

    def confidence_interval(self, confidence_level: float = 0.95) -> ConfidenceInterval:
        """Clopper-Pearson interval for the query's tail share, one-sided like the test.

        ``"less"`` gives ``(0, high)``, ``"greater"`` gives ``(low, 1)``.
        """
        check_open_unit("confidence_level", confidence_level)
        ci = stats.binomtest(self.statistic, self.n, alternative=self.alternative).proportion_ci(
            confidence_level=confidence_level, method="exact"
        )
        return ConfidenceInterval(float(ci.low), float(ci.high))
