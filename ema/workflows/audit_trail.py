"""An audit's record on the model version it audited: every method's answer and the options behind it.

The record's layout, and how ``ema compare --model NAME --query Q`` reads it back, is
:mod:`ema.tracking.trail`'s; here an audit's configuration, session and tags become its options.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ema.auditors.reference_record import AUTO_MARGIN
from ema.auditors.result import AuditResult
from ema.data.shifts import AUGMENT_NONE
from ema.data.tables import DEFAULT_LABEL_COLUMN
from ema.tracking import keys
from ema.tracking.registry import RegisteredVersion, set_version_tags
from ema.tracking.trail import CERTIFIED_BY, answer, trail_record
from ema.workflows.audit_config import AuditConfig
from ema.workflows.audit_session import AuditSession
from ema.workflows.methods import method_spec

if TYPE_CHECKING:
    from ema.workflows.audit import AuditOutcome

#: AuditConfig's defaults, by field name.
AUDIT_DEFAULTS = {field.name: field.default for field in dataclasses.fields(AuditConfig)}


def trail_options(
    config: AuditConfig, session: AuditSession, tags: Mapping[str, str], results: Mapping[str, AuditResult]
) -> dict[str, object]:
    """The options that change a verdict, as the audit resolved them (None where unset or not used).

    ``tags`` are the run's: the calibration source and route and the references appear there
    only when a method of the audit used them. The margin and the certify level are those a method
    of the audit certified with (``results``): a margin of ``auto`` is shown with the value it took.
    """
    certified = certified_with(results)
    method, margin, level = certified if certified is not None else (None, None, None)
    return {
        "input": session.target.transform.describe(),
        "pixel_order": non_default(config, "pixel_order"),
        "calibration": tags.get(keys.TAG_CALIBRATION_SOURCE),
        "route": tags.get(keys.TAG_CALIBRATED_ROUTE),
        "members": tags.get(keys.TAG_MEMBER_REFERENCE),
        "nonmembers": tags.get(keys.TAG_NONMEMBER_REFERENCE),
        "margin": f"{AUTO_MARGIN} {margin:.3g}" if margin is not None and config.margin == AUTO_MARGIN else margin,
        "level": level,
        CERTIFIED_BY: method,
        "strict": config.strict,
        "label_column": config.label_column if config.label_column != DEFAULT_LABEL_COLUMN else None,
        "allow_missing": non_default(config, "allow_missing"),
        "calibration_file": config.calibration_file,
        "image_size": config.image_size,
        "augment": config.augment if config.augment != AUGMENT_NONE else None,
        **{name: non_default(config, name) for name in SETTINGS},
    }


#: Settings of EMA's tests and thresholds and of the calibration that change a verdict: recorded where not default.
SETTINGS = ("alpha", "test", "k", "threshold_mode", "cal_seed")


def non_default(config: AuditConfig, name: str) -> object:
    """``config``'s value of the field ``name``, or None where it is the default (the trail shows only changes)."""
    value = getattr(config, name)
    return None if value == AUDIT_DEFAULTS[name] else value


def certified_with(results: Mapping[str, AuditResult]) -> tuple[str, float, float] | None:
    """The first certifying method of an audit, and the margin and one-sided level it used; None when none certified.

    The calibrated auditor records them in ``thresholds["certify"]``; on its transfer route, the margin
    and the two-sided level of the interval whose upper end it compares with it; the marks auditor its
    margin as the metric ``mark_margin``.
    """
    for method, result in results.items():
        thresholds = result.thresholds
        if "certify" in thresholds:
            return method, float(thresholds["certify"]["margin_used"]), float(thresholds["certify"]["certify_level"])
        if "mark_margin" in result.metrics:
            return method, float(result.metrics["mark_margin"]), float(thresholds["certify_level"])
        if "margin" in thresholds and "confidence_level" in thresholds:
            return method, float(thresholds["margin"]), (1.0 + float(thresholds["confidence_level"])) / 2.0
    return None


def record_on_version(
    config: AuditConfig,
    outcome: AuditOutcome,
    fingerprint: str,
    version: RegisteredVersion,
    options: Mapping[str, object],
) -> None:
    """Add the audit to the version's trail: a tag of its own (never overwriting an earlier audit's), and last_audit.

    The trail tag is ``ema.audit.<query>.<UTC time>.<run id prefix>``, so that audits of the
    same query, even in the same second from two processes, each keep their record.
    """
    when = time.gmtime()
    answers = [
        answer(name, result.verdict, result.metrics, method_spec(name).trail_numbers)
        for name, result in outcome.results.items()
    ]
    first = outcome.primary.metrics
    record = trail_record(outcome.query, fingerprint, outcome.method, answers, first, options, outcome.run_id, when)
    query_key = config.query if config.query is not None else f"file-{fingerprint}"
    trail_key = f"{keys.TAG_AUDIT_PREFIX}{query_key}.{time.strftime('%Y%m%dT%H%M%SZ', when)}.{outcome.run_id[:8]}"
    set_version_tags(version, {trail_key: record, keys.TAG_LAST_AUDIT: record})
