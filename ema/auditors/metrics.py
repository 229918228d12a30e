"""What an auditor's metrics are: a key, a kind and a meaning, so that reports and tables need no lists of their own.

The method table (:mod:`ema.workflows.methods`) gives every method its metrics as
:class:`Metric` values; the report reads their kinds (which numbers are p-values compared
with alpha, which are checks, which describe power) and their meanings from there.

=============  ==========================================================================
kind           what the number is
=============  ==========================================================================
``p-value``    a p-value the verdict compares with alpha (``rho_ema``, ``p_removed``)
``check``      a p-value of a side check that warns at its own level (``p_class_mix``)
``power``      how much this audit could detect (``power_retained``)
``estimate``   any other number: a statistic, a share, a count (``rho_ks``, ``flag_rate``)
=============  ==========================================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ema.auditors.result import is_pvalue
from ema.errors import InputError

PVALUE = "p-value"
CHECK = "check"
POWER = "power"
ESTIMATE = "estimate"
#: Every kind a metric may have.
METRIC_KINDS = (PVALUE, CHECK, POWER, ESTIMATE)
#: The kinds whose values are p-values (named as :func:`~ema.auditors.result.is_pvalue` expects).
PVALUE_KINDS = (PVALUE, CHECK)


@dataclass(frozen=True)
class Metric:
    """One metric an auditor reports.

    Attributes
    ----------
    key : str
        The name in ``AuditResult.metrics`` and in the run's MLflow metrics.
    kind : str
        One of :data:`METRIC_KINDS`.
    meaning : str
        One phrase a reader of the report understands.
    undefined : str
        What the report and the printout say where the value is NaN (not computed, not logged):
        ``"undefined"`` unless the metric names why (``"not estimable"``).

    Raises
    ------
    InputError
        If the kind is unknown, or the key disagrees with the kind: p-values (kinds ``p-value``
        and ``check``) are named ``p_*`` (or are the paper's ``rho_ema``, ``rho_ema_ks``), and
        nothing else is, so that :func:`ema.auditors.check_auditor` finds every p-value by name.

    Examples
    --------
    >>> Metric("p_removed", PVALUE, "p-value of 'the query set was removed'").kind
    'p-value'
    """

    key: str
    kind: str
    meaning: str
    undefined: str = "undefined"

    def __post_init__(self) -> None:
        if self.kind not in METRIC_KINDS:
            raise InputError(f"expected the kind of metric {self.key!r} in {METRIC_KINDS}, got {self.kind!r}")
        if is_pvalue(self.key) != (self.kind in PVALUE_KINDS):
            raise InputError(
                f"expected a p-value metric to be named p_* and nothing else, got {self.key!r} of kind {self.kind!r}; "
                "rename it or change its kind"
            )


def metric_kind(key: str, vocabulary: Mapping[str, Metric]) -> str:
    """The kind of ``key``: as the vocabulary says, else by its name (``p_*`` is a p-value, anything else an estimate).

    >>> metric_kind("p_new", {}), metric_kind("score", {})
    ('p-value', 'estimate')
    """
    if key in vocabulary:
        return vocabulary[key].kind
    return PVALUE if is_pvalue(key) else ESTIMATE


def undefined_text(key: str, vocabulary: Mapping[str, Metric]) -> str:
    """What the report and the printout call a NaN value of ``key``: its metric's ``undefined``, else "undefined".

    >>> undefined_text("information", {"information": Metric("information", ESTIMATE, "", "not estimable")})
    'not estimable'
    """
    return vocabulary[key].undefined if key in vocabulary else "undefined"
