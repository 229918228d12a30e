"""The marks auditor: the exact sign test, the certified bound on the trigger's effect, power, and what stays secret."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from ema.auditors.marks import MarksAuditor, clopper_pearson_upper, detecting_count
from ema.errors import InputError

N_CLASSES, TARGET = 10, 3


def one_hot(labels: np.ndarray) -> np.ndarray:
    """Near one-hot probabilities (0.91 on the label)."""
    proba = np.full((labels.size, N_CLASSES), 0.01)
    proba[np.arange(labels.size), labels] = 0.91
    return proba


def paired(n_query: int, to_target: int, elsewhere: int, seed: int = 0):
    """(clean proba, stamped proba, labels): clean predictions are the labels (none is TARGET); the trigger moves
    ``to_target`` images to TARGET and ``elsewhere`` to the next class."""
    rng = np.random.default_rng(seed)
    labels = rng.choice([c for c in range(N_CLASSES) if c != TARGET], n_query)
    stamped = labels.copy()
    stamped[:to_target] = TARGET
    moved = slice(to_target, to_target + elsewhere)
    stamped[moved] = np.where((labels[moved] + 1) % N_CLASSES == TARGET, labels[moved] + 2, labels[moved] + 1)
    return one_hot(labels), one_hot(stamped % N_CLASSES), labels


def audit(to_target: int, elsewhere: int, n_query: int = 200, **options):
    clean, stamped, labels = paired(n_query, to_target, elsewhere)
    return MarksAuditor(TARGET, **options).calibrate(clean).audit(stamped, labels)


def test_marks_audit_finds_a_mark_with_an_exact_sign_test():
    result = audit(to_target=40, elsewhere=3)
    assert result.verdict == "memorized"
    assert result.metrics["p_mark"] == pytest.approx(stats.binomtest(40, 43, 0.5, alternative="greater").pvalue)
    assert result.metrics["p_mark"] < 1e-6
    assert result.membership.sum() == 40 and result.metrics["moved_elsewhere"] == 3


def test_marks_audit_certifies_removal_below_the_margin():
    result = audit(to_target=0, elsewhere=4, margin=0.05)
    assert result.verdict == "not_memorized"
    assert result.metrics["mark_effect_upper_bound"] == pytest.approx(1 - (1 - 0.95) ** (1 / 200))
    assert result.metrics["mark_effect_upper_bound"] == result.metrics["mark_certifiable_margin"] <= 0.05


def test_marks_audit_is_inconclusive_when_the_bound_exceeds_the_margin():
    result = audit(to_target=2, elsewhere=2, n_query=40, margin=0.05)
    assert result.verdict == "inconclusive"
    assert result.metrics["p_mark"] > 0.1 and result.metrics["mark_effect_upper_bound"] > 0.05


def test_moves_to_other_classes_alone_never_read_as_a_mark():
    result = audit(to_target=0, elsewhere=150)
    assert result.metrics["p_mark"] == 1.0 and result.verdict != "memorized"


def test_images_of_the_target_class_are_not_counted():
    clean, stamped, labels = paired(100, to_target=0, elsewhere=0)
    labels[:50] = TARGET  # the trigger cannot move what is already the target class
    stamped[:50] = one_hot(np.full(50, TARGET))
    result = MarksAuditor(TARGET).calibrate(clean).audit(stamped, labels)
    assert result.metrics["n_eligible"] == 50 and result.metrics["moved_to_target"] == 0


def test_power_and_min_detectable_effect_follow_the_binomial():
    result = audit(to_target=0, elsewhere=0, margin=0.05)
    needed = detecting_count(0.1)
    assert needed == 4 and 0.5**needed <= 0.1 < 0.5 ** (needed - 1)
    assert result.metrics["power_mark"] == pytest.approx(stats.binom.sf(needed - 1, 200, 0.05))
    effect = result.metrics["mark_min_detectable_effect"]
    assert stats.binom.sf(needed - 1, 200, effect) == pytest.approx(0.9)


def test_clopper_pearson_upper_is_exact():
    assert clopper_pearson_upper(5, 5, 0.95) == 1.0
    bound = clopper_pearson_upper(3, 50, 0.95)
    assert stats.binom.cdf(3, 50, bound) == pytest.approx(0.05)


def test_the_target_class_stays_out_of_the_export():
    auditor = MarksAuditor(7).calibrate(one_hot(np.arange(20) % N_CLASSES))
    exported = json.dumps(auditor.to_dict())
    assert "target" not in exported and "7" not in exported.replace("n_classes", "")


def test_a_key_class_outside_the_model_is_refused():
    with pytest.raises(InputError, match="target class among the model's 10 classes"):
        MarksAuditor(12).calibrate(one_hot(np.arange(20) % N_CLASSES))


def test_stamped_probabilities_must_pair_with_the_clean_ones():
    auditor = MarksAuditor(TARGET).calibrate(one_hot(np.arange(20) % N_CLASSES))
    with pytest.raises(InputError, match="one row per clean image"):
        auditor.audit(one_hot(np.arange(10) % N_CLASSES), np.arange(10) % N_CLASSES)


def test_moves_that_a_control_trigger_makes_too_are_not_the_marks_effect():
    """A class that pulls any noise pattern's images is not the mark: only the key's own moves count."""
    clean, stamped, labels = paired(200, to_target=6, elsewhere=6)
    auditor = MarksAuditor(TARGET, margin=0.05).calibrate(clean)
    moved = auditor.moved_to_target(stamped, labels)
    assert moved.sum() == 6
    alone = auditor.audit(stamped, labels)
    controls = np.tile(labels[moved], (4, 1))
    controls[1, :5] = TARGET  # one control moves five of the six images to the target class too
    with_controls = auditor.audit(stamped, labels, controls)
    assert alone.verdict == "inconclusive" and alone.metrics["mark_effect_upper_bound"] > 0.05
    assert with_controls.verdict == "not_memorized"
    assert with_controls.metrics["mark_effect"] == pytest.approx(1 / alone.metrics["n_eligible"])
    assert with_controls.metrics["moved_by_controls_too"] == 5 and with_controls.metrics["n_controls"] == 4
    assert with_controls.metrics["p_mark"] == pytest.approx(stats.binomtest(1, 7, 0.5, alternative="greater").pvalue)
    assert with_controls.membership.sum() == 1 and with_controls.flags["moved_to_target"].sum() == 6


def test_a_mark_the_controls_do_not_share_keeps_its_whole_effect():
    clean, stamped, labels = paired(200, to_target=40, elsewhere=0)
    auditor = MarksAuditor(TARGET).calibrate(clean)
    controls = np.tile(labels[auditor.moved_to_target(stamped, labels)], (4, 1))
    result = auditor.audit(stamped, labels, controls)
    assert result.verdict == "memorized" and result.metrics["mark_effect"] == pytest.approx(40 / 200)


@pytest.mark.parametrize(
    "controls",
    [np.zeros((4, 5), np.int64), np.zeros(6, np.int64), np.zeros((4, 6), np.float64)],
    ids=["one column short", "not one row per control", "not classes"],
)
def test_control_predictions_must_pair_with_the_moved_images(controls):
    clean, stamped, labels = paired(50, to_target=6, elsewhere=0)
    auditor = MarksAuditor(TARGET).calibrate(clean)
    with pytest.raises(InputError, match=r"integers of shape \(n_controls, 6\)"):
        auditor.audit(stamped, labels, controls)
