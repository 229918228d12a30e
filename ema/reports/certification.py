"""The report's "What the calibrated audit can certify" section: the certifiable margin first, then the margin
used, the bound, what shifted queries bought (or may buy) and how strong a ``memorized`` is."""

from __future__ import annotations

import math
from collections.abc import Mapping

from ema.auditors.result import AuditResult
from ema.reports.page import UNSAFE, esc, number, section
from ema.stats.certify import level_text


def certification_section(results: Mapping[str, AuditResult], query_kind: str | None) -> str:
    """What each calibrated result could certify (fixed before its query was scored) and how strong its evidence is."""
    parts = []
    for method, result in results.items():
        margin = result.metrics.get("certifiable_margin")
        if margin is None:
            continue
        certify = result.thresholds.get("certify", {})
        used, asked = certify.get("margin_used", math.nan), certify.get("margin")
        level = float(certify.get("certify_level", math.nan))
        nothing = " (nothing below 1: too little information for this size)" if margin >= 1 else ""
        augment = _augment_words(result, query_kind)
        parts.append(
            f'<p id="certifiable-margin-{esc(UNSAFE.sub("-", method))}"><b>Certifiable margin: '
            f"{esc(number(margin))}</b>{esc(nothing)}: the smallest retained share that {esc(method)} certifies "
            f"(says not_memorized) with probability 0.85 if these {result.n_query} records were in fact removed, "
            f"computed from the query and reference sizes and {esc(_margin_information(result.metrics))} before the "
            "query was scored.</p>"
            f"<p>Margin used: <b>{esc(number(used))}</b>{' (auto: the certifiable margin)' if asked == 'auto' else ''}"
            f"; upper bound on the retained share (one-sided {level_text(level)}): "
            f"<b>{esc(number(result.metrics.get('retained_upper_bound', math.nan)))}</b>.</p>"
            + (f"<p>{esc(augment)}</p>" if augment else "")
            + (f"<p>Reference: {esc(certify['advice'])}.</p>" if certify.get("advice") else "")
        )
        if "evidence" in result.thresholds:
            parts.append(
                f"<p><b>How strong the evidence is</b> ({esc(method)}): {esc(result.thresholds['evidence'])}.</p>"
            )
    return section("What the calibrated audit can certify", "".join(parts), anchor="certify") if parts else ""


def _augment_words(result: AuditResult, kind: str | None) -> str:
    """What the shifted queries bought (the certifiable margin with and without them, each from its information's
    lower bound), or that they may buy more on images; nothing for a table, which they do not apply to."""
    single = result.metrics.get("certifiable_margin_single_view")
    if single is None:
        if kind == "table":
            return ""
        return (
            "Shifted queries (--augment shifts: each sample and its 8 one-pixel shifts, 9x the queries) may lower "
            "the certifiable margin on images; what they buy on this target must be measured with --augment shifts."
        )
    with_them = _at_least(_information(result.metrics), lead="an information of ")
    without = _at_least(_information(result.metrics, "_single_view"))
    return (
        f"With shifted queries (--augment shifts): certifiable margin {number(result.metrics['certifiable_margin'])}, "
        f"from {with_them}; without them: {number(single)}, from {without}. Each margin also depends on how fast its "
        "score's binned likelihood drops out to the margin, so the smaller margin need not come with the larger "
        "information."
    )


#: The report's words for an information the references could not estimate (its metrics are NaN, not logged).
NOT_ESTIMABLE = "not estimable on these references (the margin assumed none)"


def _margin_information(metrics: Mapping[str, float]) -> str:
    """What the certifiable margin was computed from: the information's lower bound and estimate, or that it was not
    estimable."""
    information = _information(metrics)
    if information is None:
        return f"the score's information, {NOT_ESTIMABLE},"
    lower, estimate = information
    return f"the lower bound of the score's information ({lower} per sample; estimate {estimate})"


def _at_least(information: tuple[str, str] | None, *, lead: str = "") -> str:
    """``lead`` "at least X (estimate Y)", or that the information was not estimable."""
    if information is None:
        return f"an information {NOT_ESTIMABLE}"
    return f"{lead}at least {information[0]} (estimate {information[1]})"


def _information(metrics: Mapping[str, float], suffix: str = "") -> tuple[str, str] | None:
    """The score's information as text, its lower bound and its estimate; None where it was not estimable (both NaN:
    the references' held-out scores did not vary)."""
    lower, estimate = metrics.get(f"information{suffix}_lower", math.nan), metrics.get(f"information{suffix}", math.nan)
    if math.isnan(lower) and math.isnan(estimate):
        return None
    return number(lower), number(estimate)
