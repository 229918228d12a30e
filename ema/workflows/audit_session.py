"""The per-audit state that does what an ``AuditConfig`` asks (``AuditSession``): the target it resolves to, the
references scored once, the calibration thresholds made on demand; the run's name and params; what an engine hands back.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ema.auditors.ks_ratio import KSRatioAuditor
from ema.auditors.marks import MarksAuditor
from ema.auditors.result import AuditResult
from ema.data.arrays import ArraySet
from ema.data.shifts import AUGMENT_NONE
from ema.data.tables import TABLE_SUFFIXES
from ema.errors import InputError
from ema.oracle import Oracle, Predictions
from ema.run_warnings import FOR_THE_RECORD
from ema.tracking import keys
from ema.tracking.runs import log_batch
from ema.training.clones import SklearnCloneRecipe, TorchCloneRecipe
from ema.workflows.audit_config import AuditConfig
from ema.workflows.calibrate import (
    CalibrationHelper,
    CalibrationPlan,
    ensure_plan,
    fit_thresholds,
    outcome_tags,
    planned_helper,
)
from ema.workflows.methods import METHODS, method_plan, needs_calibration_model
from ema.workflows.references import Reference, check_disjoint, member_reference, nonmember_reference, scored
from ema.workflows.target import Target, resolve_target
from ema.workflows.views import announce_cost, check_members_known, check_shiftable, shift_view_proba


def audit_target(config: AuditConfig) -> Target:
    """The target the audit names, as both engines resolve it (:func:`found_target`), with ``--calibration-file`` read
    as its calibration set (:func:`read_calibration_file`)."""
    return read_calibration_file(config, found_target(config))


def found_target(config: AuditConfig) -> Target:
    """The target the audit names, its ``--calibration-file`` not read yet; refused at once when a method of the audit
    needs a calibration model and nothing can train one (no recipe, no clone and no supplied calibration model),
    before any scoring."""
    target = resolve_target(
        config.model_uri,
        model_url=config.model_url,
        recipe_file=config.recipe_file,
        transform=config.transform,
        input_shape=config.input_shape,
        input_dtype=config.input_dtype,
        pixel_order=config.pixel_order,
        image_size=config.image_size,
        allow_missing=config.allow_missing,
        device=config.device,
    )
    if config.calibration is not None:
        warn_unread_plan_options(config)
    elif needs_calibration_model(config.method, members_file=config.members_file is not None):
        target.require_recipe()
    return target


def read_calibration_file(config: AuditConfig, target: Target) -> Target:
    """``target`` with ``--calibration-file`` read as its calibration set (its missing cells kept as NaN with
    ``--allow-missing``, unless one of the workbench's own recipes would train on them:
    :func:`refuse_recipe_on_missing`), before any scoring; as it is without one."""
    if config.calibration_file is None:
        return target
    calibration = target.read_set(
        config.calibration_file,
        role="calibration file (--calibration-file)",
        max_images=config.max_query,
        label_column=config.label_column,
    )
    refuse_recipe_on_missing(config, target, calibration)
    return dataclasses.replace(target, calibration_data=calibration)


def refuse_recipe_on_missing(config: AuditConfig, target: Target, calibration: ArraySet) -> None:
    """Refuse, before any scoring, a calibration file with missing cells (read with ``--allow-missing``) that one of
    the workbench's own recipes (``--recipe``, or the one ``ema train`` recorded on the version) or a clone of a torch
    target would train the calibration model on: they train on numbers and fill nothing in, and imputing for them
    would change the data. A scikit-learn clone is the target's own pipeline, which takes what the target takes.

    Raises
    ------
    InputError
        Naming the recipe, how many cells are missing, and the methods that need no calibration model.
    """
    trains = (
        needs_calibration_model(config.method, members_file=config.members_file is not None)
        if config.calibration is None
        else KSRatioAuditor.method in method_plan(config.method)  # the KS ratio trains on the calibration set
    )
    recipe = target.recipe
    if not calibration.missing_cells or not trains or recipe is None or isinstance(recipe, SklearnCloneRecipe):
        return
    if isinstance(recipe, TorchCloneRecipe):
        named = f"a clone of {target.label}'s own torch module"
    elif config.recipe_file is not None:
        named = f"the {recipe.framework} recipe {config.recipe_file} (--recipe)"
    else:
        named = f"the {recipe.framework} recipe {target.label} was trained with (ema train)"
    raise InputError(
        f"calibration file {config.calibration_file}: expected no missing cells for the workbench to train the "
        f"calibration model of --method {config.method} on with {named}, got {calibration.missing_cells} missing: its "
        "recipes fill nothing in; use a method that needs no calibration model "
        f"({', '.join(methods_without_calibration_model())}), or your own --calibration-model with its members and "
        "non-members, or a calibration file without missing cells"
    )


def methods_without_calibration_model() -> list[str]:
    """The ``--method`` choices (with ``--members FILE`` where that is what spares it) that train no calibration
    model, for a table: the marks method, which stamps images, is left out."""
    return [
        f"--method {name}" + (" --members FILE" if needs_calibration_model(name, members_file=False) else "")
        for name in METHODS
        if not needs_calibration_model(name, members_file=True) and MarksAuditor.method not in method_plan(name)
    ]


#: The options (option -> AuditConfig field) of the calibration set the workbench's calibration model trains on.
PLAN_OPTIONS = {"--k": "k", "--cal-seed": "cal_seed", "--corruption": "corruption"}


def warn_unread_plan_options(config: AuditConfig) -> None:
    """Warn, for the record, of :data:`PLAN_OPTIONS` given with a supplied calibration model, when no method of
    the audit reads them: EMA and the calibrated auditor then read the user's model, and only the KS ratio trains
    a model on the corrupted calibration set."""
    given = config.changed(PLAN_OPTIONS)
    if not given or KSRatioAuditor.method in method_plan(config.method):
        return
    logging.getLogger(__name__).warning(
        "%s changed nothing: the calibration model was yours (--calibration-model %s, with its own members and "
        "non-members), so no calibration set was split or corrupted; %s only to the workbench's own calibration "
        "model and the KS ratio's (--method ks-ratio)",
        " ".join(f"{flag} {value}" for flag, value in given.items()),
        config.calibration.model_uri,
        " and ".join(given) + (" apply" if len(given) > 1 else " applies"),
        extra=FOR_THE_RECORD,
    )


def log_audit_params(config: AuditConfig, target: Target, **extra: object) -> None:
    """The audit run's name and params: the options, the target as resolved, and ``extra`` (an engine's own).

    The built-in engines log them as soon as the target is found, before any data is read, so that
    an audit refused on its data is still named and listed among its model's audits
    (``ema history --all``).
    """
    log_batch(
        tags={keys.TAG_RUN_NAME: audit_run_name(config.query_name, config.method, target.label)},
        params={**config.params(target), **extra},
    )


#: The most characters of the query's name an audit's run name keeps (the MLflow UI cuts names at about 30).
RUN_NAME_QUERY_CHARS = 12
#: The suffixes of set files (:func:`ema.data.files.read_set`) a run name leaves out of the query's name.
RUN_NAME_DROPPED_SUFFIXES = (".npz", *TABLE_SUFFIXES)
#: Letters each method of a combination keeps in a run name (``ema+calibrated`` -> ``ema+cal``).
RUN_NAME_METHOD_CHARS = 3


def audit_run_name(query: str, method: str, model: str) -> str:
    """An audit run's name, short enough for the MLflow UI's columns: ``M1 · ema+cal · ema-target v4``.

    The query's name loses its folder and a set file's suffix first (``data/bc_q_members.csv`` ->
    ``bc_q_members``: :func:`query_stem`), then is cut to :data:`RUN_NAME_QUERY_CHARS`, its middle
    left out (``heldo…M6-300``: names that differ at the end, as numbered files do, stay apart); a
    combination's methods to their first :data:`RUN_NAME_METHOD_CHARS` letters; the model's label
    is kept whole (its version tells audits of one model apart). The run's ``query`` param keeps
    the whole name.
    """
    query = query_stem(query)
    if len(query) > RUN_NAME_QUERY_CHARS:
        head = (RUN_NAME_QUERY_CHARS - 1) // 2
        query = query[:head] + "…" + query[len(query) - (RUN_NAME_QUERY_CHARS - 1 - head) :]
    if "+" in method:
        method = "+".join(part[:RUN_NAME_METHOD_CHARS] for part in method.split("+"))
    return f"{query} · {method} · {model}"


def query_stem(query: str) -> str:
    """A query's name without its folder and without a set file's suffix (:data:`RUN_NAME_DROPPED_SUFFIXES`).

    The suffix says nothing the run's params do not, and cutting the name in the middle kept it
    while losing the part that told two files apart (``v_tex…um.csv``). Another suffix is part
    of the name (``heldout.v2`` stays), and a name that is only a suffix is kept whole.

    >>> query_stem("data/bc_q_members.csv"), query_stem("out/query.parquet/"), query_stem("M1")
    ('bc_q_members', 'query', 'M1')
    """
    name = query.rstrip("/").rsplit("/", 1)[-1] or query
    for suffix in RUN_NAME_DROPPED_SUFFIXES:
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


@dataclass(frozen=True)
class AuditSession:
    """One audit's state: its configuration, what that resolved to (the target, the query data, the
    oracle), and the work done for it, done at most once.

    A session is made per audit and not shared: its cached properties score the target on the
    references once (every method of the audit reads the same scores), and :meth:`thresholds`
    trains the calibration model, or loads it from the registry, only when a method asks for it.
    Frozen, so that the configuration and the target cannot change under the cached work.

    ``data`` is None when the query is a table scored by Spark: it never comes to this process.
    """

    config: AuditConfig
    target: Target
    data: ArraySet | None
    oracle: Oracle
    progress: bool

    @cached_property
    def calibration_plan(self) -> CalibrationPlan:
        """Made once per audit: every method of the audit shares it; refused for a query unlike the calibration set."""
        return CalibrationPlan.for_target(
            self.target,
            k=self.config.k,
            cal_seed=self.config.cal_seed,
            model_name=self.config.calibration_name,
            corruption=self.config.corruption,
            like=self.data,
        )

    @cached_property
    def nonmembers(self) -> Reference:
        """Samples the target never saw: ``--reference``, else its clean calibration set (a supplied calibration
        model's non-members, when no ``--calibration-file`` is given)."""
        reference_file = self.config.reference_file
        if reference_file is None and self.config.calibration is not None and self.target.calibration_data is None:
            reference_file = self.config.calibration.nonmembers_file
        return nonmember_reference(
            self.target,
            reference_file,
            query=self.data,
            max_images=self.config.max_query,
            label_column=self.config.label_column,
        )

    @cached_property
    def nonmember_predictions(self) -> Predictions:
        """The target's predictions on the non-member reference (scored once per audit).

        Label-only predictions are one-hot over every class the reference's labels name: a model
        that never predicts the highest classes on it is still audited against those labels.
        """
        predictions = scored(self.oracle, self.nonmembers.data, role="non-member reference")
        return predictions.with_classes(max(predictions.proba.shape[1], int(self.nonmembers.data.y.max()) + 1))

    @cached_property
    def nonmember_proba(self) -> np.ndarray:
        """The target's probabilities on the non-member reference (scored once per audit)."""
        return self.nonmember_predictions.proba

    @cached_property
    def members(self) -> Reference | None:
        """Samples known to be in the target's training data, the query's own left out; None when unknown."""
        return member_reference(
            self.target,
            self.data,
            self.config.members_file,
            max_images=self.config.max_query,
            label_column=self.config.label_column,
        )

    @cached_property
    def member_proba(self) -> np.ndarray | None:
        """The target's probabilities on the member reference (scored once per audit), once the non-member
        reference is known not to be mostly its samples (:func:`~ema.workflows.references.check_disjoint`)."""
        if self.members is None:
            return None
        check_disjoint(self.members, self.nonmembers)
        return scored(self.oracle, self.members.data, role="member reference").proba

    @cached_property
    def member_views(self) -> np.ndarray | None:
        """The target's probabilities on the member reference and its shifts, (9, n, C) (scored once per audit)."""
        return None if self.members is None else self.views(self.members.data, self.member_proba)

    @cached_property
    def nonmember_views(self) -> np.ndarray:
        """The target's probabilities on the non-member reference and its shifts, (9, n, C) (scored once per audit)."""
        return self.views(self.nonmembers.data, self.nonmember_proba)

    def views(self, data: ArraySet, identity: np.ndarray) -> np.ndarray:
        """``identity`` (the target's probabilities on ``data``) and those on its 8 one-pixel shifts, (9, n, C)
        (:func:`~ema.workflows.views.shift_view_proba`)."""
        return shift_view_proba(self.oracle, data, identity)

    def check_augment(self) -> None:
        """Refuse ``--augment shifts`` where it cannot run, before anything is scored or trained: a query that is
        not images first, then no member reference known (:mod:`ema.workflows.views`)."""
        check_shiftable(self.config.augment, self.data)
        if self.config.augment != AUGMENT_NONE:
            check_members_known(self.config.augment, self.members is not None, self.target.label)

    def announce_augment_cost(self) -> dict[str, str]:
        """Say what ``--augment shifts`` costs the calibrated auditor in oracle queries (before scoring); its tag."""
        return announce_cost(
            {"query": len(self.data), "members": len(self.members.data), "non-members": len(self.nonmembers.data)}
        )

    def missing_cells(self) -> dict[str, int]:
        """How many numbers were missing (NaN, with ``--allow-missing``) in each set the audit read, by set (query,
        calibration, members, nonmembers); a set never read here (a Spark query: :meth:`Scored.missing_cells` adds
        it, a reference no method asked for) is left out."""
        read = {
            "query": self.data,
            "calibration": self.target.calibration_data,
            "members": getattr(self.__dict__.get("members"), "data", None),  # cached properties already evaluated
            "nonmembers": getattr(self.__dict__.get("nonmembers"), "data", None),
        }
        return {name: data.missing_cells for name, data in read.items() if data is not None}

    def reference_tags(self) -> dict[str, str]:
        """Which references the audit used, in words."""
        members = self.members.description if self.members is not None else "none known"
        return {keys.TAG_MEMBER_REFERENCE: members, keys.TAG_NONMEMBER_REFERENCE: self.nonmembers.description}

    def thresholds(self) -> tuple[dict, dict[str, str]]:
        """EMA's thresholds and the tags saying where they came from."""
        if self.config.calibration is not None:
            helper = self.calibration_helper
            return fit_thresholds(helper.model, helper.members, helper.nonmembers).to_dict(), helper.tags
        outcome = ensure_plan(self.calibration_plan, progress=self.progress)
        return outcome.thresholds, outcome_tags(outcome, self.calibration_plan)

    @cached_property
    def calibration_helper(self) -> CalibrationHelper:
        """The calibration model member behaviour is read from: the one supplied (``--calibration-model``, scored on
        its own members and non-members, returning ``--calibration-outputs``), else the plan's. Made once per audit:
        EMA's thresholds and the calibrated auditor share it (the model loaded and its files read once); it shows
        its scoring's progress as the target's oracle does."""
        supplied, config = self.config.calibration, self.config
        if supplied is None:
            helper = planned_helper(self.calibration_plan, progress=self.progress)
        else:
            helper = supplied.helper(
                self.target, config.calibration_outputs or config.outputs, config.max_query, config.label_column
            )
        return dataclasses.replace(helper, model=helper.model.with_progress(self.progress))


@dataclass(frozen=True)
class Scored:
    """What an engine hands back to the audit: the audit's session, each auditor's result and what it scored.

    Attributes
    ----------
    session : AuditSession
    results : dict of str to AuditResult
        By method, in the order of the method's plan (:func:`ema.workflows.methods.method_plan`).
    tags : dict of str to str
        The tags the auditors and the engine produced.
    access, detected : str
        What the model returns, and how that was decided (for the run's tags).
    fingerprint : str
        The query's content hash (params and the version's audit record).
    membership : dict
        The per-sample table as artifacts: ``membership.csv``, a ``membership.parquet`` folder,
        or nothing when it was written elsewhere.
    query_correct : int, optional
        How many query samples the target classified right (the query gate,
        :func:`~ema.auditors.reference_gates.query_accuracy_warning`); None where the query's
        predictions never come to this process (Spark).
    query_missing_cells : int, optional
        The query's missing cells, counted where it was scored when it never comes to this process (Spark); None
        where the session holds the query.
    """

    session: AuditSession
    results: dict[str, AuditResult]
    tags: dict[str, str]
    access: str
    detected: str
    fingerprint: str
    membership: dict[str, object]
    query_correct: int | None = None
    query_missing_cells: int | None = None

    def missing_cells(self) -> dict[str, int]:
        """How many numbers were missing in each set the audit read, by set: the session's
        (:meth:`AuditSession.missing_cells`), with the query's counted on Spark."""
        missing = self.session.missing_cells()
        return missing if self.query_missing_cells is None else {"query": self.query_missing_cells, **missing}
