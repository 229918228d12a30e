"""The built-in methods' runners: each calibrates its auditor for one audit and audits the target's predictions.

Each returns its :class:`~ema.auditors.result.AuditResult` and the run tags saying what it used.
The method table (:mod:`ema.workflows.methods`) names them, and checks before any runner starts
that the model returns what each needs (class probabilities). :func:`run_on_references` makes
the runner of any auditor that calibrates on the target's member and non-member references.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from ema.auditors.base import Auditor
from ema.auditors.calibrated import CalibratedAuditor
from ema.auditors.ema import EMAAuditor
from ema.auditors.ks_ratio import KSRatioAuditor
from ema.auditors.marks import MarksAuditor
from ema.auditors.reference import ReferenceAuditor
from ema.auditors.reference_record import AUTO_MARGIN, DEFAULT_MARGIN
from ema.auditors.result import AuditResult
from ema.data.arrays import ArraySet
from ema.data.marks import MarkKey, read_key
from ema.data.shifts import AUGMENT_NONE
from ema.errors import InputError
from ema.oracle import ACCESS_LABEL_ONLY, Oracle, Predictions
from ema.run_warnings import FOR_THE_RECORD
from ema.signals import LABEL_ONLY_SIGNALS, PAPER_SIGNALS
from ema.tracking import keys
from ema.workflows.audit_config import AuditConfig
from ema.workflows.audit_session import PLAN_OPTIONS, AuditSession
from ema.workflows.cached_models import cached_model
from ema.workflows.calibrate import CalibrationHelper
from ema.workflows.mark_audit import audit_key
from ema.workflows.method_rows import Runner
from ema.workflows.methods import method_plan
from ema.workflows.references import Reference
from ema.workflows.target import Target

#: How the calibrated auditor knew how members behave.
ROUTE_MEMBER_REFERENCE = "member reference scored on the target"
ROUTE_TRANSFER = "transfer from the calibration model"
#: The options of EMA's calibration (option -> AuditConfig field) that the calibrated auditor reads on its
#: transfer route only, and the other built-in methods that read each (EMA's thresholds; the calibration model
#: EMA and the KS ratio train on the corrupted calibration set, split and corrupted with --cal-seed).
TRANSFER_OPTIONS = {"--threshold-mode": "threshold_mode", **PLAN_OPTIONS}
_CALIBRATION_READERS = (EMAAuditor.method, KSRatioAuditor.method)
_READ_BY = {
    "--threshold-mode": (EMAAuditor.method,),
    **dict.fromkeys(("--k", "--cal-seed", "--corruption"), _CALIBRATION_READERS),
}


def ema_auditor(session: AuditSession, access: str) -> tuple[EMAAuditor, dict[str, str]]:
    """The paper's auditor, calibrated for this audit; correctness alone when the model returns labels only."""
    thresholds, tags = session.thresholds()
    signals = LABEL_ONLY_SIGNALS if access == ACCESS_LABEL_ONLY else PAPER_SIGNALS
    config = session.config
    auditor = EMAAuditor.from_dict(
        thresholds, signals=signals, threshold_mode=config.threshold_mode, test=config.test, alpha=config.alpha
    )
    return auditor, tags


def run_ema(session: AuditSession, predictions: Predictions) -> tuple[AuditResult, dict[str, str]]:
    """The paper's auditor on the query's predictions."""
    auditor, tags = ema_auditor(session, predictions.access)
    predictions = predictions.with_classes(auditor.n_classes_)
    return auditor.audit(predictions.proba, session.data.y), tags


def run_ks_ratio(session: AuditSession, predictions: Predictions) -> tuple[AuditResult, dict[str, str]]:
    """Liu & Tsaftaris: compare the target with models trained on the query set and on the calibration set."""
    calibration_set, n_classes = session.calibration_plan.corrupted(), predictions.proba.shape[1]
    query_model, query_cached = cached_model(
        session.target, "query-model", session.data, n_classes=n_classes, progress=session.progress
    )
    calset_model, calset_cached = cached_model(
        session.target, "calset-model", calibration_set, n_classes=n_classes, progress=session.progress
    )
    auditor = KSRatioAuditor().calibrate(
        query_model.predict_proba(session.data), calset_model.predict_proba(session.data)
    )
    tags = {
        keys.TAG_KS_RATIO_CACHE: f"query-model {'hit' if query_cached else 'miss'}, calset-model "
        f"{'hit' if calset_cached else 'miss'}"
    }
    return auditor.audit(predictions.proba, session.data.y), tags


def run_calibrated(session: AuditSession, predictions: Predictions) -> tuple[AuditResult, dict[str, str]]:
    """The calibrated auditor: against a member reference scored on the target where one is known, else by transfer.

    With members known (``--members``, or a workbench target's other training folds), both
    hypotheses are tested against references scored on the target itself
    (:class:`~ema.auditors.reference.ReferenceAuditor`). Otherwise member behaviour is
    transferred from the calibration model (:class:`~ema.auditors.calibrated.CalibratedAuditor`),
    trusted only when that model generalises like the target.
    """
    config, labels = session.config, session.data.y
    if session.members is not None:
        member_proba, nonmember_proba, query_proba, tags = _reference_inputs(session, predictions)
        auditor = ReferenceAuditor(
            alpha=config.alpha, margin=config.resolved_margin, certify_level=config.certify_level
        ).calibrate(member_proba, session.members.data.y, nonmember_proba, session.nonmembers.data.y)
        tags.update({**session.reference_tags(), keys.TAG_CALIBRATED_ROUTE: ROUTE_MEMBER_REFERENCE})
        warn_unused_transfer_options(config, session.members.description)
        return auditor.audit(query_proba, labels), tags
    check_transfer_options(config)
    auditor, tags = fit_calibrated(
        session.oracle,
        session.calibration_helper,
        session.nonmembers,
        alpha=config.alpha,
        margin=config.resolved_margin,
        threshold_mode=config.threshold_mode,
    )
    tags.update({**session.reference_tags(), keys.TAG_CALIBRATED_ROUTE: ROUTE_TRANSFER})
    return auditor.audit(predictions.proba, labels), tags


def warn_unused_transfer_options(config: AuditConfig, members: str) -> None:
    """Warn, for the record, of options of the calibration (:data:`TRANSFER_OPTIONS`) given (not at their default) on
    the member-reference route, where the calibrated auditor reads none, when no other method of the audit reads them.

    ``members``: the member reference the route used, in words. EMA (``--method ema+calibrated``) reads
    them all, the KS ratio all but ``--threshold-mode``: alongside them nothing is warned.
    """
    others = set(method_plan(config.method)) - {CalibratedAuditor.method}
    warned = PLAN_OPTIONS if config.calibration is not None else {}  # by warn_unread_plan_options
    unused = {
        flag: value
        for flag, value in config.changed(TRANSFER_OPTIONS).items()
        if not others & set(_READ_BY[flag]) and flag not in warned
    }
    if unused:
        given = " ".join(f"{flag} {value}" for flag, value in unused.items())
        logging.getLogger(__name__).warning(
            "%s changed nothing: the calibrated auditor tested the query against a member reference scored on the "
            "target (%s), and %s only to EMA's calibration and thresholds (--method ema+calibrated), the KS "
            "ratio's calibration, and the calibrated auditor's transfer route (no members known)",
            given,
            members,
            " and ".join(unused) + (" apply" if len(unused) > 1 else " applies"),
            extra=FOR_THE_RECORD,
        )


def check_transfer_options(config: AuditConfig) -> None:
    """Refuse ``--margin auto`` and ``--certify-level`` on the transfer route, which has no use for them.

    Without a member reference the calibrated auditor's interval comes from the calibration model's
    behaviour at its own level, and it states no certifiable margin: ``not_memorized`` there needs
    the interval's upper end at most a numeric ``--margin``.

    Raises
    ------
    InputError
        Naming the option given and the fix (a member reference).
    """
    given = {flag: value for flag, value in config.certify_options.items() if flag != "--margin"}
    if config.margin == AUTO_MARGIN:
        given["--margin"] = AUTO_MARGIN
    if given:
        raise InputError(
            f"expected a numeric --margin and no --certify-level on the calibrated auditor's transfer route (no "
            f"member reference: it states no certifiable margin), got {' '.join(f'{k} {v}' for k, v in given.items())}"
            "; give --members FILE (samples the model was trained on) to certify at a level or at --margin auto"
        )


def _reference_inputs(
    session: AuditSession, predictions: Predictions
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, str]]:
    """The member, non-member and query probabilities the reference auditor takes: one view each, or under
    ``--augment shifts`` their 9 views (its cost said on stderr first, and tagged).
    """
    if session.config.augment == AUGMENT_NONE:
        return session.member_proba, session.nonmember_proba, predictions.proba, {}
    tags = session.announce_augment_cost()
    query_views = session.views(session.data, predictions.proba)
    return session.member_views, session.nonmember_views, query_views, tags


def run_marks(session: AuditSession, predictions: Predictions) -> tuple[AuditResult, dict[str, str]]:
    """The marks auditor: the query's images scored clean (``predictions``) and with the key's trigger stamped on.

    The query is the auditor's own clean images, never the owner's file. The key is read here,
    inside the run, and checked against the query's image shape and the target's lineage.
    """
    key = read_key(session.config.mark_key)
    data = session.data
    key.check_images(data, role="query")
    check_mark_lineage(key, session.target)
    stamped = session.oracle.predict(ArraySet(f"{data.name} stamped", key.stamp(data.x), data.y, data.index))
    n_classes = max(predictions.proba.shape[1], stamped.proba.shape[1], key.target_class + 1)
    if predictions.access != ACCESS_LABEL_ONLY:  # a model that returns probabilities names its classes itself
        n_classes = predictions.proba.shape[1]
    config = session.config
    auditor = MarksAuditor(
        key.target_class, alpha=config.alpha, margin=config.resolved_margin, certify_level=config.certify_level
    ).calibrate(predictions.with_classes(n_classes).proba)

    def predict_classes(x: np.ndarray) -> np.ndarray:
        controls = ArraySet(f"{data.name} controls", x, np.zeros(len(x), np.int64), np.arange(len(x), dtype=np.int64))
        return session.oracle.predict(controls).proba.argmax(axis=1)

    result = audit_key(auditor, key, data.x, data.y, stamped.with_classes(n_classes).proba, predict_classes)
    return result, {keys.TAG_MARKED_FINGERPRINT: key.fingerprint}


def check_mark_lineage(key: MarkKey, target: Target) -> None:
    """Refuse a key whose marked copy is not among the owner's files the target's lineage records it trained on.

    A target with no such record (trained elsewhere, or on the splits alone) is not checked: its
    lineage says nothing about the marked copy.

    Raises
    ------
    InputError
        When the lineage records owner's files and none is the key's marked copy (altered, or another file).
    """
    tags = target.version.tags if target.version is not None else {}
    recorded = {name: value for name, value in tags.items() if name.startswith(keys.TAG_DATA_FOLD_PREFIX)}
    if recorded and key.fingerprint not in recorded.values():
        folds = ", ".join(f"{name.removeprefix(keys.TAG_DATA_FOLD_PREFIX)} {value}" for name, value in recorded.items())
        raise InputError(
            f"expected {target.label} trained on the marked copy this key was made for (fingerprint "
            f"{key.fingerprint}), got a lineage of other files ({folds}): the marked images or labels were altered "
            "after marking, or the key is for another file; audit with the key of the file the model was trained on"
        )


def fit_calibrated(
    oracle: Oracle,
    helper: CalibrationHelper,
    reference: Reference,
    *,
    alpha: float = 0.1,
    margin: float = DEFAULT_MARGIN,
    threshold_mode: str = "global",
) -> tuple[CalibratedAuditor, dict[str, str]]:
    """Score the non-member ``reference`` through the target (``oracle``) and the calibration model's members and
    non-members through it, and calibrate; returns the auditor and the tags saying what it used.

    ``margin``: the most the retained share's interval may reach for ``not_memorized``.
    """
    auditor = CalibratedAuditor(threshold_mode=threshold_mode, alpha=alpha, margin=margin).calibrate(
        oracle.predict_proba(reference.data),
        reference.data.y,
        helper.model.predict_proba(helper.members),
        helper.members.y,
        helper.model.predict_proba(helper.nonmembers),
        helper.nonmembers.y,
    )
    return auditor, {**helper.tags, keys.TAG_REFERENCE: f"{reference.description}, scored on the target"}


def run_on_references(make_auditor: Callable[[AuditConfig], Auditor]) -> Runner:
    """The runner of an auditor calibrated on the target's member and non-member references, as scored for this audit.

    ``make_auditor(config)`` builds the uncalibrated auditor from the audit's options; it is
    calibrated with ``(member proba, member labels, non-member proba, non-member labels)``, as
    :class:`~ema.auditors.reference.ReferenceAuditor` is, then audits the query.

    Raises
    ------
    InputError
        (From the runner) when no member reference is known: give ``--members FILE``.
    """

    def run(session: AuditSession, predictions: Predictions) -> tuple[AuditResult, dict[str, str]]:
        if session.members is None:
            raise InputError(
                f"--method {session.config.method} needs samples the target was trained on, got none known; "
                "give --members FILE"
            )
        auditor = make_auditor(session.config).calibrate(
            session.member_proba, session.members.data.y, session.nonmember_proba, session.nonmembers.data.y
        )
        return auditor.audit(predictions.proba, session.data.y), session.reference_tags()

    return run
