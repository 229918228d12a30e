import numpy as np
import pytest

from ema.errors import InputError
from ema.thresholds import select_class_thresholds, select_threshold


def brute_force_best_ba(members: np.ndarray, nonmembers: np.ndarray) -> float:
    """The reference implementation's O(n^2) search over every observed value."""
    best = 0.0
    for tau in np.unique(np.concatenate([members, nonmembers])):
        ba = ((members >= tau).mean() + (nonmembers < tau).mean()) / 2
        best = max(best, ba)
    return best


@pytest.mark.parametrize("seed", range(20))
def test_select_threshold_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    n_m, n_n = rng.integers(1, 80, size=2)
    # rounded values create ties, as real confidences saturate
    members = np.round(rng.beta(5, 2, n_m), 2)
    nonmembers = np.round(rng.beta(2, 2, n_n), 2)
    result = select_threshold(members, nonmembers)
    assert result.balanced_accuracy == pytest.approx(brute_force_best_ba(members, nonmembers))
    reached = ((members >= result.threshold).mean() + (nonmembers < result.threshold).mean()) / 2
    assert reached == pytest.approx(result.balanced_accuracy)


def test_select_threshold_separable_sets_reach_balanced_accuracy_one():
    result = select_threshold(np.array([0.9, 0.8, 0.7]), np.array([0.2, 0.6]))
    assert result.balanced_accuracy == 1.0
    assert result.threshold == 0.7


def test_select_threshold_correctness_picks_one():
    members = np.ones(50)
    nonmembers = np.r_[np.ones(40), np.zeros(10)]
    assert select_threshold(members, nonmembers).threshold == 1.0


def test_select_threshold_rejects_empty_input():
    with pytest.raises(InputError, match=r"member_scores.*non-empty"):
        select_threshold(np.array([]), np.array([0.1]))


def test_select_class_thresholds_fits_each_class_and_falls_back_for_missing():
    members = np.array([0.9, 0.8, 0.4, 0.35])
    member_labels = np.array([0, 0, 1, 1])
    nonmembers = np.array([0.5, 0.6, 0.1, 0.2])
    nonmember_labels = np.array([0, 0, 1, 1])
    with pytest.warns(UserWarning, match=r"classes \[2\]"):
        thresholds = select_class_thresholds(members, member_labels, nonmembers, nonmember_labels, n_classes=3)
    assert thresholds[0] == 0.8
    assert thresholds[1] == 0.35
    assert thresholds[2] == select_threshold(members, nonmembers).threshold
