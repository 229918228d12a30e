import numpy as np
import pytest

from ema.errors import InputError
from ema.signals import (
    SIGNALS,
    check_probabilities,
    compute_scores,
    confidence_score,
    correctness_score,
    modified_entropy_score,
    negative_entropy_score,
)

PROBA = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8], [1.0, 0.0, 0.0]])
LABELS = np.array([0, 1, 0])


def test_correctness_score_marks_argmax_equal_label():
    np.testing.assert_array_equal(correctness_score(PROBA, LABELS), [1.0, 0.0, 1.0])


def test_confidence_score_reads_true_class_probability():
    np.testing.assert_allclose(confidence_score(PROBA, LABELS), [0.7, 0.1, 1.0])


def test_negative_entropy_score_matches_definition():
    expected = [sum(p * np.log(p) for p in row if p > 0) for row in PROBA]
    np.testing.assert_allclose(negative_entropy_score(PROBA), expected)


def test_negative_entropy_score_is_zero_for_one_hot_and_minus_log_c_for_uniform():
    scores = negative_entropy_score(np.array([[0.0, 1.0], [0.5, 0.5]]))
    np.testing.assert_allclose(scores, [0.0, -np.log(2)])


def test_modified_entropy_score_matches_song_mittal_definition():
    def mentr(row, y):
        total = -(1 - row[y]) * np.log(row[y])
        total -= sum(row[i] * np.log(1 - row[i]) for i in range(len(row)) if i != y)
        return total

    expected = [-mentr(row, y) for row, y in zip(PROBA[:2], LABELS[:2], strict=True)]
    np.testing.assert_allclose(modified_entropy_score(PROBA[:2], LABELS[:2]), expected)


@pytest.mark.parametrize("name", sorted(SIGNALS))
def test_metrics_rank_a_confident_correct_sample_above_a_wrong_one(name):
    proba = np.array([[0.98, 0.01, 0.01], [0.2, 0.5, 0.3]])
    scores = compute_scores(proba, np.array([0, 0]), [name])[name]
    assert scores.shape == (2,)
    assert scores[0] > scores[1]


def test_check_probabilities_rejects_wrong_rank():
    with pytest.raises(InputError, match=r"shape \(n_samples, n_classes\).*got shape \(3,\)"):
        check_probabilities(np.array([0.1, 0.2, 0.7]))


def test_check_probabilities_rejects_nan():
    with pytest.raises(InputError, match="NaN or inf in 1 of 3 rows"):
        check_probabilities(np.where(PROBA == 1.0, np.nan, PROBA))


def test_check_probabilities_suggests_logits_when_rows_do_not_sum_to_one():
    with pytest.raises(InputError, match="--outputs logits"):
        check_probabilities(PROBA * 3)


def test_check_probabilities_reads_float32_rounding_below_zero_as_zero_and_refuses_more():
    rounded = np.array([[1.0000001, -1.1920929e-07], [0.25, 0.75]])
    proba, _ = check_probabilities(rounded)
    assert proba.min() == 0.0
    np.testing.assert_array_equal(proba[1], [0.25, 0.75])
    with pytest.raises(InputError, match=r"1 of 2 rows that are not \(row 0 holds -0.001\)"):
        check_probabilities(np.array([[1.001, -0.001], [0.25, 0.75]]))


def test_check_probabilities_rejects_labels_outside_classes():
    with pytest.raises(InputError, match=r"labels in 0..2 .*got values from 0 to 5 \(first outside: 5 in row 1\)"):
        check_probabilities(PROBA, np.array([0, 5, 1]))


def test_compute_scores_rejects_unknown_signal():
    with pytest.raises(InputError, match="signal names"):
        compute_scores(PROBA, LABELS, ["loss"])
