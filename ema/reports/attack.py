"""The report's attack-strength section: each known-membership ROC curve the results carry, as a table and a figure.

EMA's results carry one curve per signal on the calibration model's halves
(``thresholds["signals"][signal]["attack"]``); the member-reference auditor's carry one for its
score on the member and non-member references (``thresholds["attack"]``). Nothing is recomputed.
"""

from __future__ import annotations

from collections.abc import Mapping

from ema.auditors.attack import RESOLVED_NONMEMBERS, AttackStrength
from ema.auditors.result import AuditResult
from ema.reports import svg
from ema.reports.figures import roc_curves
from ema.reports.page import image, number, table

#: The ROC figure's file name, under ``figures/``.
ROC_FIGURE = "attack_roc.svg"


def attack_curves(results: Mapping[str, AuditResult]) -> dict[str, AttackStrength]:
    """Every attack-strength record in ``results``, labelled by method, score and where it was measured."""
    curves = {}
    for method, result in results.items():
        for signal, entry in result.thresholds.get("signals", {}).items():
            if isinstance(entry, dict) and "attack" in entry:
                curves[f"{method}: {signal} (calibration model's halves)"] = AttackStrength.from_dict(entry["attack"])
        if "attack" in result.thresholds:
            curves[f"{method}: its score (member and non-member references)"] = AttackStrength.from_dict(
                result.thresholds["attack"]
            )
    return curves


def roc_figure(curves: Mapping[str, AttackStrength], query: str) -> dict[str, bytes]:
    """``{ROC_FIGURE: svg}`` when there is a curve to draw, else nothing."""
    if not curves:
        return {}
    drawn = {label: (attack.fpr, attack.tpr) for label, attack in curves.items()}
    return {ROC_FIGURE: roc_curves(drawn, title=f"attack strength where membership is known ({query})")}


def attack_section(curves: Mapping[str, AttackStrength], figures: Mapping[str, bytes]) -> str:
    """The section's HTML: what the numbers measure, one row per curve, and the ROC figure."""
    if not curves:
        return (
            '<p class="muted">No attack strength was recorded: the thresholds were calibrated before it was '
            "measured, or no members and non-members were known.</p>"
        )
    rows = [
        (
            label,
            number(attack.auc),
            number(attack.tpr_at_fpr_1pct) + _unresolved(attack.resolves_1pct, attack.n_nonmembers),
            number(attack.tpr_at_fpr_0_1pct) + _unresolved(attack.resolves_0_1pct, attack.n_nonmembers),
            attack.n_members,
            attack.n_nonmembers,
        )
        for label, attack in curves.items()
    ]
    parts = [
        "<p>How well each score separates samples whose membership is known: ROC AUC (0.5 is chance) and the "
        "share of members found at 1% and 0.1% false positives, as membership-inference papers report them. "
        f"The 0.1% point needs at least {RESOLVED_NONMEMBERS:,} non-members to rest on one false positive, the 1% "
        f"point {RESOLVED_NONMEMBERS // 10}.</p>",
        table(
            ("score", "AUC", "TPR at 1% FPR", "TPR at 0.1% FPR", "members", "non-members"),
            rows,
            numeric=(1, 2, 3, 4, 5),
        ),
    ]
    if ROC_FIGURE in figures:
        parts.append(
            image(
                figures[ROC_FIGURE],
                alt="ROC curves, log-scale false-positive rate",
                caption=f"figures/{ROC_FIGURE}",
                mime=svg.MIME,
            )
        )
    return "".join(parts)


def _unresolved(resolved: bool, n_nonmembers: int) -> str:
    return "" if resolved else f" (not resolved: {n_nonmembers} non-members)"
