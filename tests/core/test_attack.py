"""Attack strength on known members and non-members: ROC AUC and TPR at low FPR."""

from __future__ import annotations

import numpy as np
import pytest

from ema.auditors.attack import CURVE_POINTS, RESOLVED_NONMEMBERS, AttackStrength, attack_strength
from ema.auditors.ema import EMAAuditor
from ema.errors import InputError


def test_attack_strength_identical_distributions_is_chance():
    rng = np.random.default_rng(0)
    strength = attack_strength(rng.normal(size=5000), rng.normal(size=5000))
    assert strength.auc == pytest.approx(0.5, abs=0.02)
    assert 0.0 <= strength.tpr_at_fpr_0_1pct <= strength.tpr_at_fpr_1pct <= 0.05
    assert strength.resolves_0_1pct


def test_attack_strength_separated_scores_are_found_at_low_fpr():
    rng = np.random.default_rng(0)
    strength = attack_strength(rng.normal(6, 1, size=2000), rng.normal(0, 1, size=2000))
    assert strength.auc > 0.999
    assert strength.tpr_at_fpr_1pct > 0.99 and strength.tpr_at_fpr_0_1pct > 0.9


def test_attack_strength_few_nonmembers_do_not_resolve_the_0_1pct_point():
    strength = attack_strength(np.arange(10.0), np.arange(RESOLVED_NONMEMBERS - 1.0))
    assert not strength.resolves_0_1pct and strength.n_nonmembers == RESOLVED_NONMEMBERS - 1
    assert strength.resolves_1pct


@pytest.mark.parametrize(("n_nonmembers", "resolved"), [(40, False), (99, False), (100, True)])
def test_attack_strength_the_1pct_point_needs_a_hundred_nonmembers(n_nonmembers, resolved):
    from ema.reports.attack import attack_section

    strength = attack_strength(np.arange(10.0) + 100, np.arange(float(n_nonmembers)))
    assert strength.resolves_1pct is resolved
    page = attack_section({"confidence": strength}, {})
    assert (
        f"<td class=num>1 (not resolved: {n_nonmembers} non-members)</td><td class=num>1 (not" in page
    ) is not resolved


@pytest.mark.parametrize(
    ("n_nonmembers", "logged"),
    [
        (75, {"mia_auc", "mia_n_nonmembers"}),
        (99, {"mia_auc", "mia_n_nonmembers"}),
        (100, {"mia_auc", "tpr_at_fpr_1pct", "mia_n_nonmembers"}),
        (999, {"mia_auc", "tpr_at_fpr_1pct", "mia_n_nonmembers"}),
        (1000, {"mia_auc", "tpr_at_fpr_1pct", "tpr_at_fpr_0_1pct", "mia_n_nonmembers"}),
    ],
)
def test_attack_strength_metrics_leave_out_a_tpr_its_nonmembers_do_not_resolve(n_nonmembers, logged):
    """With 75 non-members the 0.1% point was logged as 0.0: a TPR at no false positive at all."""
    strength = attack_strength(np.arange(10.0) + 0.5, np.arange(float(n_nonmembers)))
    metrics = strength.metrics()
    assert set(metrics) == logged and metrics["mia_n_nonmembers"] == n_nonmembers
    assert strength.to_dict()["tpr_at_fpr_0_1pct"] == strength.tpr_at_fpr_0_1pct  # the report still has it


def test_attack_strength_curve_is_bounded_and_round_trips():
    rng = np.random.default_rng(1)
    strength = attack_strength(rng.normal(0.5, 1, size=20000), rng.normal(size=20000))
    assert len(strength.fpr) <= CURVE_POINTS + 1 and strength.fpr[-1] == strength.tpr[-1] == 1.0
    assert np.all(np.diff(strength.fpr) >= 0)
    assert AttackStrength.from_dict(strength.to_dict()) == strength


def test_attack_strength_refuses_empty_and_non_finite_scores():
    with pytest.raises(InputError, match="got 0 members and 3 non-members"):
        attack_strength(np.zeros(0), np.zeros(3))
    with pytest.raises(InputError, match="expected finite membership scores"):
        attack_strength(np.array([np.nan]), np.zeros(3))


def test_ema_auditor_logs_attack_metrics_per_signal():
    rng = np.random.default_rng(0)
    members = np.eye(3)[rng.integers(0, 3, 300)] * 0.9 + 0.1 / 3
    labels = members.argmax(axis=1)
    nonmembers = rng.dirichlet(np.ones(3), size=300)
    auditor = EMAAuditor().calibrate(members, labels, nonmembers, rng.integers(0, 3, 300))
    metrics = auditor.audit(nonmembers, labels).metrics
    for signal in auditor.signals:
        assert 0.0 <= metrics[f"mia_auc.{signal}"] <= 1.0 and 0.0 <= metrics[f"tpr_at_fpr_1pct.{signal}"] <= 1.0
        assert f"tpr_at_fpr_0_1pct.{signal}" not in metrics  # 300 non-members do not resolve 0.1%
        assert metrics[f"mia_n_nonmembers.{signal}"] == 300
    assert metrics["mia_auc.confidence"] > 0.9
    rebuilt = EMAAuditor.from_dict(auditor.to_dict())
    assert rebuilt.attack_metrics() == auditor.attack_metrics()


def test_reference_auditor_logs_the_attack_strength_of_its_score():
    from ema.auditors.reference import ReferenceAuditor

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 400)
    members = np.eye(3)[labels] * 0.9 + 0.1 / 3
    nonmembers = rng.dirichlet(np.ones(3), size=400)
    auditor = ReferenceAuditor().calibrate(members, labels, nonmembers, labels)
    result = auditor.audit(members[:100], labels[:100])
    assert 0.9 < result.metrics["mia_auc.calibrated"] <= 1.0
    assert 0.0 <= result.metrics["tpr_at_fpr_1pct.calibrated"] <= 1
    assert "tpr_at_fpr_0_1pct.calibrated" not in result.metrics  # 400 non-members do not resolve 0.1%
    assert result.metrics["mia_n_nonmembers.calibrated"] == 400
    assert result.thresholds["attack"]["auc"] == result.metrics["mia_auc.calibrated"]
