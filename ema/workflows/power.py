"""How large a query set the calibrated auditor needs, given the measured reference and member behaviour.

Two questions: how many samples to *detect* a member set (:func:`query_size_for_power`: the
member-reference auditor's own power where members are known, as ``ema audit --method
calibrated`` then runs it, else the transfer route's tail tests), and how many to *certify* that
at most a margin of a removed set is retained (:func:`certification_plan`, the member-reference
auditor's interval).
"""

from __future__ import annotations

import dataclasses
import logging
import math

import numpy as np

from ema.auditors.reference import ReferenceAuditor
from ema.data.corruption import check_quality
from ema.data.limits import DEFAULT_MAX_QUERY
from ema.data.shifts import AUGMENT_NONE
from ema.data.tables import DEFAULT_LABEL_COLUMN
from ema.errors import InputError
from ema.oracle import Oracle
from ema.run_warnings import FOR_THE_RECORD
from ema.stats import QuerySizeResult
from ema.stats.certify import PLAN_PROBABILITY, CertifyPlan, level_text, plan_certification
from ema.stats.power import smallest_size
from ema.tracking import keys
from ema.tracking.runs import log_metrics, log_params, set_tags, start_run
from ema.validation import check_open_unit
from ema.workflows.audit import SuppliedCalibration, fit_calibrated
from ema.workflows.calibrate import CalibrationPlan, planned_helper
from ema.workflows.references import (
    Reference,
    check_disjoint,
    member_reference,
    nonmember_reference,
    of_kind,
    scored,
)
from ema.workflows.target import Target, resolve_target
from ema.workflows.views import announce_cost, check_members_known, check_shiftable, shift_view_proba

#: Appended to a plan's metric names for the identity view's own plan under ``--augment shifts``.
SINGLE_VIEW_SUFFIX = "_single_view"
#: The largest query size :func:`reference_query_size` searches.
MAX_PLANNED_QUERY = 100_000


def query_size_for_power(
    model_uri: str,
    *,
    power: float = 0.9,
    alpha: float = 0.1,
    k: int = 100,
    cal_seed: int = 0,
    recipe_file: str | None = None,
    reference_file: str | None = None,
    members_file: str | None = None,
    max_query: int = DEFAULT_MAX_QUERY,
    label_column: str = DEFAULT_LABEL_COLUMN,
    allow_missing: bool = False,
    calibration: SuppliedCalibration | None = None,
    augment: str = AUGMENT_NONE,
    progress: bool = True,
) -> QuerySizeResult:
    """Calibrate the auditor an audit of the target would run and solve for the query size; logged as a run.

    With a member reference known (``members_file``, else the target's recorded training data) that
    is the member-reference auditor, whose resampled ``power_retained`` the size reaches; else the
    transfer route's calibrated auditor and its tail tests (tag ``ema.power_route``), whose calibration
    model is ``calibration`` (``--calibration-model``) when given, else the one the workbench trains.
    ``allow_missing``: the missing numbers of the tables read go to the target as NaN (``--allow-missing``).
    ``augment``: ``shifts`` plans an audit with ``--augment shifts`` (the references' 9 views; images and a
    member reference needed, :mod:`ema.workflows.views`).
    """
    with start_run(f"power {model_uri}"):
        check_open_unit("power", power)
        check_open_unit("alpha", alpha)
        check_quality(k)
        target = resolve_target(model_uri, recipe_file=recipe_file, allow_missing=allow_missing)
        oracle = target.oracle(outputs="probabilities")
        members = member_reference(
            target, None, members_file, max_images=max_query, label_column=label_column, unheld_query=""
        )
        if members is not None:
            check_shiftable(augment, members.data)
            nonmembers = of_kind(
                nonmember_reference(target, reference_file, max_images=max_query, label_column=label_column),
                members.data,
                "the member reference",
            )
            check_disjoint(members, nonmembers)
            auditor, tags = _reference_auditor(oracle, members, nonmembers, augment, alpha=alpha, power=power)
            result = reference_query_size(auditor)
            tags[keys.TAG_POWER_ROUTE] = f"member reference ({members.description})"
            if calibration is not None:
                logging.getLogger(__name__).warning(
                    "--calibration-model %s changed nothing: members are known (%s), so the power is the "
                    "member-reference auditor's, which reads no calibration model",
                    calibration.model_uri,
                    members.description,
                    extra=FOR_THE_RECORD,
                )
        else:
            check_model_shiftable(augment, target, oracle)  # a table model is refused as one, then shifts need members
            check_members_known(augment, False, target.label)
            if calibration is None:
                check_transfer_data(target, oracle)
                plan = CalibrationPlan.for_target(
                    target, k=k, cal_seed=cal_seed, model_name=keys.CALIBRATION_MODEL_NAME
                )
                helper = planned_helper(plan, progress=progress)
            else:
                helper = calibration.helper(target, max_images=max_query, label_column=label_column)
            reference = nonmember_reference(target, reference_file, max_images=max_query, label_column=label_column)
            auditor, tags = fit_calibrated(oracle, helper, reference, alpha=alpha)
            result, tags[keys.TAG_POWER_ROUTE] = auditor.required_query_size(power=power), "transfer (no members known)"
        log_params(
            {
                keys.PARAM_POWER: power,
                keys.PARAM_ALPHA: alpha,
                keys.PARAM_K: k,
                keys.PARAM_CAL_SEED: cal_seed,
                keys.PARAM_MODEL_URI: target.model_uri,
                keys.PARAM_ALLOW_MISSING: allow_missing,
                keys.PARAM_AUGMENT: augment,
            }
        )
        set_tags(tags)
        log_metrics({keys.METRIC_N_REQUIRED: float(result.n_required or -1), keys.METRIC_POWER_REACHED: result.power})
    return result


def takes_table(target: Target, oracle: Oracle) -> bool:
    """Whether the model takes table rows: its calibration set is a table, or its signature names columns that are
    not the calibration images' pixels (a DataFrame of 784 columns takes 28x28 images)."""
    calibration, spec = target.calibration_set(), oracle.input_spec
    if calibration.kind == "table":
        return True
    return spec is not None and spec.columns is not None and len(spec.columns) != math.prod(calibration.x.shape[1:])


def check_model_shiftable(augment: str, target: Target, oracle: Oracle) -> None:
    """Refuse ``augment`` for a model of table inputs where no set of its own is read yet (the transfer route), so
    that a table model is refused as one before ``--members`` is asked for.

    Raises
    ------
    InputError
        Naming the model's inputs.
    """
    if augment != AUGMENT_NONE and takes_table(target, oracle):
        raise InputError(
            f"expected a model of image inputs with --augment {augment} (it moves pixels), got a model of table "
            f"inputs ({oracle.input_spec.describe() if oracle.input_spec else target.calibration_set().describe()}); "
            f"use --augment none for tables"
        )


def _reference_auditor(
    oracle: Oracle, members: Reference, nonmembers: Reference, augment: str, **options
) -> tuple[ReferenceAuditor, dict[str, str]]:
    """The member-reference auditor (``options``) calibrated on both references through the target, on their views
    under ``augment`` (the cost said on stderr before the shifts are scored, and returned as a tag)."""
    member_proba = scored(oracle, members.data, role="member reference").proba
    nonmember_proba = scored(oracle, nonmembers.data, role="non-member reference").proba
    tags = {}
    if augment != AUGMENT_NONE:
        tags = announce_cost({"members": len(members.data), "non-members": len(nonmembers.data)})
        member_proba = shift_view_proba(oracle, members.data, member_proba)
        nonmember_proba = shift_view_proba(oracle, nonmembers.data, nonmember_proba)
    auditor = ReferenceAuditor(**options).calibrate(member_proba, members.data.y, nonmember_proba, nonmembers.data.y)
    return auditor, tags


def check_transfer_data(target: Target, oracle: Oracle) -> None:
    """Refuse to plan by transfer for a model of table inputs whose calibration set is the preset's images (a user's
    model without recorded training data): the calibration model could not take them, and would not stand for it.
    A model whose columns are the images' pixels (a DataFrame of 784 columns) takes them.

    Raises
    ------
    InputError
        Naming the model's inputs, the calibration set, and ``--members`` / ``--reference``.
    """
    calibration = target.calibration_set()
    if calibration.kind != "table" and takes_table(target, oracle):
        raise InputError(
            f"expected --members FILE for ema power on a model of table inputs ({oracle.input_spec.describe()}) "
            f"without recorded training data, got none: without a member reference the power is planned on a "
            f"calibration model trained on the {target.describe_calibration()} ({calibration.describe()}), which the "
            "model does not take; give --members FILE (rows it was trained on) and --reference FILE (rows it never saw)"
        )


def reference_query_size(auditor: ReferenceAuditor, *, max_n: int = MAX_PLANNED_QUERY) -> QuerySizeResult:
    """The smallest |D_q| whose resampled ``power_retained`` reaches the auditor's ``power`` (seeded), which an
    audit of that size then states (:func:`~ema.stats.power.smallest_size`)."""
    n_required = smallest_size(lambda n: auditor.detection_power(n).power_retained >= auditor.power, max_n)
    return QuerySizeResult(
        n_required=n_required,
        power=auditor.detection_power(n_required or max_n).power_retained,  # cached per size
        target_power=auditor.power,
        alpha=auditor.alpha,
        n_tests=1,
        level=float("nan"),  # no tail test: the auditor's permutation test of its likelihood ratio
        signal_index=0,
    )


def certification_plan(
    model_uri: str,
    *,
    margin: float,
    certify_level: float | None = None,
    alpha: float = 0.1,
    probability: float = PLAN_PROBABILITY,
    recipe_file: str | None = None,
    reference_file: str | None = None,
    members_file: str | None = None,
    max_reference: int | None = None,
    max_query: int = DEFAULT_MAX_QUERY,
    label_column: str = DEFAULT_LABEL_COLUMN,
    allow_missing: bool = False,
    augment: str = AUGMENT_NONE,
) -> CertifyPlan:
    """The query and reference sizes that certify ``margin`` on this target with ``probability``; logged as a run.

    Scores the member reference (``--members``, else the target's recorded training data) and
    the non-member reference (``--reference``, else the calibration set) through the target,
    estimates the member-reference auditor's information from them, and solves, from the
    information's lower bound as an audit's certifiable margin uses it,
    :func:`ema.stats.certify.plan_certification`. ``max_reference``: the most non-member samples
    the user could gather (default: the reference's size). ``allow_missing``: the missing numbers of the
    tables read go to the target as NaN (``--allow-missing``). ``augment``: ``shifts`` plans an audit with
    ``--augment shifts`` from the references' 9 views; the plan then holds the identity view's own
    (``single_view``), as an audit's report gives the margin with and without the shifts.

    Raises
    ------
    InputError
        When no member reference is known, or on an invalid option.
    """
    with start_run(f"power --certify {model_uri}"):
        check_open_unit("margin", margin)
        check_open_unit("probability", probability)
        target = resolve_target(model_uri, recipe_file=recipe_file, allow_missing=allow_missing)
        members = member_reference(
            target, None, members_file, max_images=max_query, label_column=label_column, unheld_query=""
        )
        if members is None:
            raise InputError(
                f"ema power --certify needs samples the target was trained on, got none known for {target.label}; "
                "give --members FILE"
            )
        check_shiftable(augment, members.data)
        nonmembers = of_kind(
            nonmember_reference(target, reference_file, max_images=max_query, label_column=label_column),
            members.data,
            "the member reference",
        )
        check_disjoint(members, nonmembers)
        oracle = target.oracle(outputs="probabilities")
        auditor, tags = _reference_auditor(
            oracle, members, nonmembers, augment, alpha=alpha, certify_level=certify_level
        )

        plan_options = {
            "n_reference": len(nonmembers.data),
            "max_reference": max_reference,
            "certify_level": auditor.resolved_certify_level(),
            "probability": probability,
        }
        counts = (auditor.member_counts_, auditor.nonmember_counts_)
        plan = _planned(margin, auditor.information_estimate_, counts, **plan_options)
        metrics = _plan_metrics(plan)
        if auditor.n_views_ > 1:
            single_view = _planned(margin, auditor.single_view_estimate_, auditor.single_view_counts_, **plan_options)
            plan = dataclasses.replace(plan, views=auditor.n_views_, single_view=single_view)
            metrics |= _plan_metrics(single_view, SINGLE_VIEW_SUFFIX)
        set_tags(tags)
        log_params(
            {
                keys.PARAM_MARGIN: margin,
                keys.PARAM_CERTIFY_LEVEL: plan.certify_level,
                keys.PARAM_CERTIFY_PROBABILITY: probability,
                keys.PARAM_MAX_REFERENCE: max_reference or len(nonmembers.data),
                keys.PARAM_MODEL_URI: target.model_uri,
                keys.PARAM_ALLOW_MISSING: allow_missing,
                keys.PARAM_AUGMENT: augment,
            }
        )
        log_metrics({key: value for key, value in metrics.items() if not math.isnan(value)})
    return plan


def _planned(margin: float, estimate, counts: tuple[np.ndarray, np.ndarray], **options) -> CertifyPlan:
    """:func:`~ema.stats.certify.plan_certification` from an information ``estimate`` (its lower bound, as an
    audit's margin uses it) and the binned references ``counts``; an inestimable one leaves no measurement."""
    plan = plan_certification(
        margin, estimate.estimate, information_lower=estimate.lower_bound(), binned_references=counts, **options
    )
    if not estimate.estimable:  # planned with none: no measurement to report
        plan = dataclasses.replace(plan, information=math.nan, information_lower=math.nan)
    return plan


def _plan_metrics(plan: CertifyPlan, suffix: str = "") -> dict[str, float]:
    """A plan's metrics; the identity view's under ``--augment shifts`` with ``suffix`` :data:`SINGLE_VIEW_SUFFIX`,
    its information named as an audit names it (``information_single_view``, ``information_single_view_lower``)."""
    return {
        f"{keys.METRIC_INFORMATION}{suffix}": plan.information,
        f"{keys.METRIC_INFORMATION}{suffix}_lower": plan.information_lower,
        f"{keys.METRIC_CERTIFY_QUERY_SIZE}{suffix}": float(plan.query_size or -1),
        f"{keys.METRIC_CERTIFY_REFERENCE_SIZE}{suffix}": float(plan.reference_size),
        f"{keys.METRIC_SMALLEST_REACHABLE_MARGIN}{suffix}": plan.smallest_reachable_margin,
    }


__all__ = ["certification_plan", "level_text", "query_size_for_power"]
