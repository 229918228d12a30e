"""What a row of the method table (:mod:`ema.workflows.methods`) is: a :class:`MethodSpec`, one auditor
method, or a :class:`Combination` of several in one run; and the :data:`Runner` a method's row names.

The table checks a row when it is registered (:func:`ema.workflows.methods.register_method`); this
module only says what a row holds, and imports no runner, mlflow or torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ema.auditors.metrics import Metric
from ema.workflows.engines import ENGINE_IN_PROCESS

if TYPE_CHECKING:
    from ema.auditors.base import Auditor
    from ema.auditors.result import AuditResult
    from ema.oracle import Predictions
    from ema.workflows.audit_session import AuditSession

#: A method's runner: calibrate its auditor for this audit, audit the query's predictions, say what it used (tags).
Runner = Callable[["AuditSession", "Predictions"], tuple["AuditResult", dict[str, str]]]


@dataclass(frozen=True, kw_only=True)
class MethodSpec:
    """One audit method: a row of the method table.

    Attributes
    ----------
    name : str
        The ``--method`` value, the key of its result in ``AuditOutcome.results``.
    help : str
        A phrase for ``ema audit --help``, shown as ``name (help)``.
    auditors : tuple of type
        The auditor classes its runner builds (each passes :func:`ema.auditors.check_auditor`).
    runner : callable
        ``runner(session, predictions) -> (AuditResult, tags)``.
    needs_probabilities : bool
        Refused on a model that returns labels only.
    engines : tuple of str
        Where its query may be scored (names of the engine table, :mod:`ema.workflows.engines`);
        an engine that runs every method runs it whether named here or not.
    metrics : tuple of Metric
        Every metric its results carry; the first is its headline number.
    trail : tuple of str
        The keys of the numbers an audit's record on the model version keeps for it, beside its
        verdict (``ema compare --model --query`` shows them); default: its headline number.
    certifies : bool
        Its ``not_memorized`` certifies a bound below ``--margin`` at ``--certify-level``; a method that does
        not is refused those options, which would change nothing.
    """

    name: str
    help: str
    auditors: tuple[type[Auditor], ...]
    runner: Runner
    needs_probabilities: bool = True
    engines: tuple[str, ...] = (ENGINE_IN_PROCESS,)
    metrics: tuple[Metric, ...] = field(default=())
    trail: tuple[str, ...] = ()
    certifies: bool = False

    @property
    def plan(self) -> tuple[str, ...]:
        """The single methods it runs: itself."""
        return (self.name,)

    @property
    def headline(self) -> str:
        """The key of the number a one-column summary shows for it (the unlearning grid's tables)."""
        return self.metrics[0].key

    @property
    def trail_numbers(self) -> tuple[str, ...]:
        """The keys of the numbers the version's audit trail keeps for it: ``trail``, else its headline."""
        return self.trail or (self.headline,)


@dataclass(frozen=True, kw_only=True)
class Combination:
    """Several methods in one audit run, in order; the first one's verdict is the run's."""

    name: str
    help: str
    parts: tuple[str, ...]

    @property
    def plan(self) -> tuple[str, ...]:
        """The single methods it runs, in order."""
        return self.parts


Method = MethodSpec | Combination
