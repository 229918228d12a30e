"""KSRatioAuditor: Liu & Tsaftaris's rho_KS on flattened probability matrices."""

import numpy as np
import pytest
from scipy import stats

from ema.auditors import INCONCLUSIVE, MEMORIZED, NOT_MEMORIZED, KSRatioAuditor
from ema.auditors.ks_ratio import ks_statistic
from ema.errors import InputError

# Three query samples, two classes. Flattened:
#   target       0.9 0.1 0.6 0.4 0.2 0.8
#   query model  0.95 0.05 0.7 0.3 0.1 0.9
#   cal. model   0.5 0.5 0.4 0.6 0.45 0.55
# By hand: KS(target, query model) = 1/6 (the ECDFs never differ by more than one of six
# steps); KS(cal. model, query model) = 1/2 (at 0.3 the query model has 3/6 of its mass below,
# the calibration model none). rho_KS = (1/6) / (1/2) = 1/3.
TARGET = np.array([[0.9, 0.1], [0.6, 0.4], [0.2, 0.8]])
QUERY_MODEL = np.array([[0.95, 0.05], [0.7, 0.3], [0.1, 0.9]])
CALIBRATION_MODEL = np.array([[0.5, 0.5], [0.4, 0.6], [0.45, 0.55]])
LABELS = np.array([0, 0, 1])


def test_ks_ratio_audit_matches_hand_computed_value():
    result = KSRatioAuditor().calibrate(QUERY_MODEL, CALIBRATION_MODEL).audit(TARGET, LABELS)
    assert result.metrics["ks_target"] == pytest.approx(1 / 6)
    assert result.metrics["ks_calibration"] == pytest.approx(1 / 2)
    assert result.metrics["rho_ks"] == pytest.approx(1 / 3)
    assert result.verdict == MEMORIZED
    assert result.method == "ks-ratio"


def test_ks_ratio_audit_matches_scipy_ks_2samp_on_flattened_matrices():
    rng = np.random.default_rng(0)
    target, query_model, calibration_model = (rng.dirichlet(np.ones(4), size=50) for _ in range(3))
    result = KSRatioAuditor().calibrate(query_model, calibration_model).audit(target)
    numerator = stats.ks_2samp(target.ravel(), query_model.ravel()).statistic
    denominator = stats.ks_2samp(calibration_model.ravel(), query_model.ravel()).statistic
    assert result.metrics["rho_ks"] == pytest.approx(numerator / denominator)
    assert result.metrics["n_query"] == 50
    assert ks_statistic(target, query_model) == pytest.approx(numerator)


def test_ks_ratio_audit_target_like_calibration_model_is_not_memorized():
    result = KSRatioAuditor().calibrate(QUERY_MODEL, CALIBRATION_MODEL).audit(CALIBRATION_MODEL)
    assert result.metrics["rho_ks"] == pytest.approx(1.0)
    assert result.verdict == NOT_MEMORIZED  # rho_KS >= 1 means forgotten
    assert result.metrics["flag_rate"] == 0.0  # every row is closer to the calibration model's


def test_ks_ratio_audit_threshold_decides_verdict():
    auditor = KSRatioAuditor(threshold=0.3).calibrate(QUERY_MODEL, CALIBRATION_MODEL)
    assert auditor.audit(TARGET).verdict == NOT_MEMORIZED  # 1/3 >= 0.3


def test_ks_ratio_audit_membership_flags_rows_closer_to_query_model():
    target = np.vstack([TARGET[:2], CALIBRATION_MODEL[2:]])
    result = KSRatioAuditor().calibrate(QUERY_MODEL, CALIBRATION_MODEL).audit(target)
    np.testing.assert_array_equal(result.membership, [1, 1, 0])
    assert result.metrics["flag_rate"] == pytest.approx(2 / 3)
    np.testing.assert_allclose(result.scores["tv_to_query_model"], [0.05, 0.1, 0.35])
    np.testing.assert_allclose(result.scores["tv_to_calibration_model"], [0.4, 0.2, 0.0])


def test_ks_ratio_audit_identical_calibration_and_query_models_gives_inf_with_warning():
    auditor = KSRatioAuditor().calibrate(QUERY_MODEL, QUERY_MODEL)
    with pytest.warns(RuntimeWarning, match=r"KS\(f_Dcal, f_Dq\) = 0"):
        result = auditor.audit(TARGET)
    assert result.metrics["rho_ks"] == np.inf
    assert result.metrics["ks_calibration"] == 0.0
    assert result.verdict == NOT_MEMORIZED


def test_ks_ratio_audit_all_models_identical_is_inconclusive_with_warning():
    auditor = KSRatioAuditor().calibrate(QUERY_MODEL, QUERY_MODEL)
    with pytest.warns(RuntimeWarning, match="all three models agree"):
        result = auditor.audit(QUERY_MODEL)
    assert np.isnan(result.metrics["rho_ks"])
    assert result.verdict == INCONCLUSIVE


def test_ks_ratio_audit_before_calibrate_refused():
    with pytest.raises(InputError, match=r"not calibrated yet: call calibrate\(\) first"):
        KSRatioAuditor().audit(TARGET)


def test_ks_ratio_calibrate_shape_mismatch_refused():
    with pytest.raises(InputError, match=r"equal shapes, got \(3, 2\) and \(2, 2\)"):
        KSRatioAuditor().calibrate(QUERY_MODEL, CALIBRATION_MODEL[:2])


def test_ks_ratio_audit_target_shape_mismatch_refused():
    auditor = KSRatioAuditor().calibrate(QUERY_MODEL, CALIBRATION_MODEL)
    with pytest.raises(InputError, match=r"of shape \(3, 2\), got \(2, 2\)"):
        auditor.audit(TARGET[:2])


def test_ks_ratio_rejects_non_probabilities():
    with pytest.raises(InputError, match="summing to 1"):
        KSRatioAuditor().calibrate(QUERY_MODEL * 2, CALIBRATION_MODEL)
    auditor = KSRatioAuditor().calibrate(QUERY_MODEL, CALIBRATION_MODEL)
    with pytest.raises(InputError, match="shape \\(n_samples, n_classes\\)"):
        auditor.audit(TARGET.ravel())


def test_ks_ratio_audit_validates_labels():
    auditor = KSRatioAuditor().calibrate(QUERY_MODEL, CALIBRATION_MODEL)
    with pytest.raises(InputError, match=r"labels in 0..1"):
        auditor.audit(TARGET, np.array([0, 1, 2]))


@pytest.mark.parametrize("threshold", [0, -1.0, float("inf"), "1"])
def test_ks_ratio_rejects_bad_threshold(threshold):
    with pytest.raises(InputError, match="expected a finite threshold > 0"):
        KSRatioAuditor(threshold=threshold).calibrate(QUERY_MODEL, CALIBRATION_MODEL)


def test_equal_statistics_but_for_float_rounding_give_a_ratio_of_exactly_one():
    """9/200 reached by two computations: the ratio must not read 0.9999999999999988 and flip the verdict."""
    from ema.auditors.ks_ratio import _ks_ratio

    assert 0.044999999999999984 / 0.04500000000000004 < 1
    assert _ks_ratio(0.044999999999999984, 0.04500000000000004) == 1.0
    assert _ks_ratio(0.044, 0.045) < 1
