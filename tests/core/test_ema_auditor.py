import numpy as np
import pytest

from ema.auditors import MEMORIZED, NOT_MEMORIZED, EMAAuditor
from ema.errors import InputError


def peaked(labels: np.ndarray, confidence: np.ndarray, n_classes: int = 3) -> np.ndarray:
    """Probabilities giving `confidence` to the label and the rest spread evenly."""
    proba = np.repeat(((1 - confidence) / (n_classes - 1))[:, None], n_classes, axis=1)
    proba[np.arange(len(labels)), labels] = confidence
    return proba


@pytest.fixture
def calibrated() -> EMAAuditor:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 200)
    members = peaked(labels, rng.uniform(0.9, 1.0, 200))
    nonmembers = peaked(labels, rng.uniform(0.2, 0.95, 200))
    return EMAAuditor().calibrate(members, labels, nonmembers, labels)


def test_ema_auditor_members_memorized_nonmembers_not(calibrated):
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 3, 100)
    member_result = calibrated.audit(peaked(labels, rng.uniform(0.96, 1.0, 100)), labels)
    assert member_result.verdict == MEMORIZED
    assert member_result.metrics["rho_ema"] == 1.0
    other_result = calibrated.audit(peaked(labels, rng.uniform(0.1, 0.5, 100)), labels)
    assert other_result.verdict == NOT_MEMORIZED
    assert other_result.metrics["rho_ema"] <= 0.1


def test_ema_auditor_membership_is_any_metric_flag(calibrated):
    rng = np.random.default_rng(2)
    labels = rng.integers(0, 3, 50)
    result = calibrated.audit(peaked(labels, rng.uniform(0.34, 1.0, 50)), labels)
    expected = np.logical_or.reduce([result.flags[m] for m in calibrated.signals])
    np.testing.assert_array_equal(result.membership, expected)
    assert result.flag_rate == pytest.approx(expected.mean())
    assert set(result.sample_columns()) == {*calibrated.signals, *(f"flag_{m}" for m in calibrated.signals), "M"}


def test_ema_auditor_round_trips_through_dict(calibrated):
    rebuilt = EMAAuditor.from_dict(calibrated.to_dict())
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 3, 40)
    proba = peaked(labels, rng.uniform(0.34, 1.0, 40))
    np.testing.assert_array_equal(rebuilt.audit(proba, labels).membership, calibrated.audit(proba, labels).membership)


def test_ema_auditor_per_class_mode_uses_class_thresholds(calibrated):
    calibrated.threshold_mode = "per-class"
    labels = np.array([0, 1, 2])
    result = calibrated.audit(peaked(labels, np.array([0.9, 0.9, 0.9])), labels)
    expected = 0.9 >= np.array([calibrated.class_thresholds_["confidence"][c] for c in labels])
    np.testing.assert_array_equal(result.flags["confidence"], expected)


def test_ema_auditor_refuses_audit_before_calibrate():
    with pytest.raises(InputError, match="not calibrated"):
        EMAAuditor().audit(peaked(np.array([0, 1]), np.array([0.9, 0.9])), np.array([0, 1]))


def test_ema_auditor_refuses_class_count_mismatch(calibrated):
    with pytest.raises(InputError, match="calibration model's 3 classes, got 2 columns"):
        calibrated.audit(np.array([[0.5, 0.5]]), np.array([0]))


def test_ema_auditor_rejects_bad_alpha():
    with pytest.raises(InputError, match=r"alpha in \(0, 1\)"):
        EMAAuditor(alpha=1.5).calibrate(np.eye(2), np.array([0, 1]), np.eye(2), np.array([0, 1]))


def test_ema_auditor_audit_counts_equals_audit_of_the_batches(calibrated):
    rng = np.random.default_rng(4)
    labels = rng.integers(0, 3, 300)
    proba = peaked(labels, rng.uniform(0.3, 1.0, 300))
    whole = calibrated.audit(proba, labels)
    flagged = sum(
        int(calibrated.flag(proba[i : i + 64], labels[i : i + 64]).membership.sum()) for i in range(0, 300, 64)
    )
    counted = calibrated.audit_counts(flagged, 300)
    assert (counted.metrics, counted.verdict, counted.thresholds) == (whole.metrics, whole.verdict, whole.thresholds)
    assert (counted.n_query, counted.flag_rate, counted.membership.size) == (300, whole.flag_rate, 0)
