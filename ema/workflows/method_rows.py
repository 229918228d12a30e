"""What a row of the method table (:mod:`ema.workflows.methods`) is: a :class:`MethodSpec`, one auditor
method, or a :class:`Combination` of several in one run; and the :data:`Runner` a method's row names.

The table checks a row when it is registered (:func:`ema.workflows.methods.register_method`) with
:func:`check_spec` or :func:`check_combination`; this module says what a row holds and what a
well-formed one is, and imports no runner, mlflow or torch.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ema.auditors.metrics import Metric
from ema.errors import InputError
from ema.workflows.engines import ENGINE_IN_PROCESS, ENGINES

if TYPE_CHECKING:
    from ema.auditors.base import Auditor
    from ema.auditors.result import AuditResult
    from ema.oracle import Predictions
    from ema.workflows.audit_session import AuditSession

#: A single method's name is a run tag's suffix (``verdict.<name>``) and a column prefix; a combination joins with +.
SINGLE_NAME = re.compile(r"[a-z][a-z0-9-]*")
COMBINED_NAME = re.compile(r"[a-z][a-z0-9+-]*")
#: A method's runner: calibrate its auditor for this audit, audit the query's predictions, say what it used (tags).
Runner = Callable[["AuditSession", "Predictions"], tuple["AuditResult", dict[str, str]]]
#: When a method needs the workbench's calibration model (trained from the target's recipe, or a clone of it,
#: unless ``--calibration-model`` supplies one): always, only when no member reference file is given (the
#: calibrated auditor's transfer route), or never.
CALIBRATION_MODEL_NEEDED = "needed"
CALIBRATION_MODEL_WITHOUT_MEMBERS = "without members"
CALIBRATION_MODEL_NOT_NEEDED = "not needed"


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
    calibration_model : str
        When it needs the workbench's calibration model (:data:`CALIBRATION_MODEL_NEEDED` and the two others):
        an audit of a model with no recipe and no clone is refused before scoring only when it does.
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
    calibration_model: str = CALIBRATION_MODEL_NEEDED

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


def check_spec(spec: MethodSpec, known: dict[str, Metric]) -> None:
    """Refuse a malformed single-method row; ``known``: the metrics the table already holds, by key."""
    if not SINGLE_NAME.fullmatch(spec.name):
        raise InputError(f"expected a method name of lowercase letters, digits and -, got {spec.name!r}")
    unknown = set(spec.engines) - set(ENGINES)
    if unknown or not spec.engines:
        raise InputError(f"expected the engines of method {spec.name!r} among {tuple(ENGINES)}, got {spec.engines!r}")
    if not spec.metrics:
        raise InputError(f"expected method {spec.name!r} to declare its metrics, got none")
    needs = (CALIBRATION_MODEL_NEEDED, CALIBRATION_MODEL_WITHOUT_MEMBERS, CALIBRATION_MODEL_NOT_NEEDED)
    if spec.calibration_model not in needs:
        raise InputError(
            f"expected the calibration_model of method {spec.name!r} in {needs}, got {spec.calibration_model!r}"
        )
    undeclared = sorted(set(spec.trail) - {metric.key for metric in spec.metrics})
    if undeclared:
        raise InputError(f"expected the trail numbers of method {spec.name!r} among its metrics, got {undeclared}")
    for metric in spec.metrics:
        if known.get(metric.key, metric) != metric:
            raise InputError(
                f"expected metric {metric.key!r} of method {spec.name!r} to mean what the table says "
                f"({known[metric.key]}), got {metric}; give a new metric a new name"
            )


def check_combination(combination: Combination, table: Mapping[str, Method]) -> None:
    """Refuse a malformed combination of ``table``'s rows."""
    if not COMBINED_NAME.fullmatch(combination.name):
        raise InputError(f"expected a method name of lowercase letters, digits, - and +, got {combination.name!r}")
    for part in combination.parts:
        if not isinstance(table.get(part), MethodSpec):
            raise InputError(
                f"expected the parts of {combination.name!r} to be single methods of the table, got {part!r}"
            )
