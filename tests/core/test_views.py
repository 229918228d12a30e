"""Several views of each sample: validation, the contrast score, and the reference auditor on views."""

from __future__ import annotations

import numpy as np
import pytest

from ema.auditors.reference import ReferenceAuditor
from ema.auditors.reference_record import reference_advice
from ema.auditors.views import SHIFT_CONTRAST, check_view_probabilities, view_score, view_score_name
from ema.errors import InputError
from ema.signals import log_odds_score
from ema.stats.certify import reference_floor
from tests.core.test_reference_auditor import make_proba

N_VIEWS = 9
MEMBER, NONMEMBER = (30.0, 0.5), (2.0, 1.0)


def views(rng, n, identity_law, shifted_law):
    """(N_VIEWS, n, C) probabilities: the identity drawn from one law, the shifted views from another."""
    identity, labels = make_proba(rng, n, identity_law)
    shifted = []
    for _ in range(N_VIEWS - 1):
        proba, _ = make_proba(rng, n, shifted_law)
        # the same labels as the identity's: move each row's true-class mass to its label
        rows = np.arange(n)
        true_mass = proba.max(axis=1)
        proba[rows, proba.argmax(axis=1)], proba[rows, labels] = proba[rows, labels], true_mass
        shifted.append(proba)
    return np.stack([identity, *shifted]), labels


def test_view_score_is_the_identity_minus_the_contrast_times_the_shifted_mean():
    rng = np.random.default_rng(0)
    proba, labels = views(rng, 50, MEMBER, NONMEMBER)
    per_view = np.stack([log_odds_score(p, labels) for p in proba])
    expected = per_view[0] - SHIFT_CONTRAST * per_view[1:].mean(axis=0)
    np.testing.assert_allclose(view_score(log_odds_score, proba, labels), expected)
    np.testing.assert_array_equal(view_score(log_odds_score, proba[0], labels), per_view[0])
    assert view_score_name("log_odds", 1) == "log_odds" and view_score_name("log_odds", 9) != "log_odds"


def test_check_view_probabilities_refuses_a_single_view_stack_and_bad_rows():
    rng = np.random.default_rng(0)
    proba, labels = views(rng, 20, MEMBER, NONMEMBER)
    with pytest.raises(InputError, match=r"at least 2 views, got shape \(1, 20, 10\)"):
        check_view_probabilities(proba[:1], labels)
    broken = proba.copy()
    broken[4, 3] = 2.0
    with pytest.raises(InputError):
        check_view_probabilities(broken, labels)


def test_reference_auditor_on_views_reports_the_single_view_information_and_margin():
    rng = np.random.default_rng(1)
    # members: confident on the identity, ordinary on the shifts; non-members: ordinary on all views
    auditor = ReferenceAuditor(n_permutations=200, n_power_resamples=200).calibrate(
        *views(rng, 1000, MEMBER, NONMEMBER), *views(rng, 1000, NONMEMBER, NONMEMBER)
    )
    assert auditor.n_views_ == N_VIEWS and auditor.to_dict()["n_views"] == N_VIEWS
    result = auditor.audit(*views(rng, 100, NONMEMBER, NONMEMBER))
    metrics = result.metrics
    assert {"information_single_view", "certifiable_margin_single_view"} <= set(metrics)
    assert metrics["information_single_view"] > 0 and metrics["certifiable_margin"] <= 1
    assert list(result.scores) == [view_score_name("log_odds", N_VIEWS)]


def test_reference_auditor_refuses_a_query_with_other_views_than_the_references():
    rng = np.random.default_rng(2)
    auditor = ReferenceAuditor(n_permutations=200, n_power_resamples=200).calibrate(
        *views(rng, 300, MEMBER, NONMEMBER), *views(rng, 300, NONMEMBER, NONMEMBER)
    )
    with pytest.raises(InputError, match=r"expected the 9 view\(s\) of each sample the references had, got 1"):
        auditor.audit(*make_proba(rng, 50, NONMEMBER))
    with pytest.raises(InputError, match="with the same views of each sample, got 9 and 1"):
        ReferenceAuditor().calibrate(*views(rng, 300, MEMBER, NONMEMBER), *make_proba(rng, 300, NONMEMBER))


def test_single_view_audit_has_no_single_view_metrics_and_gives_reference_advice():
    rng = np.random.default_rng(3)
    auditor = ReferenceAuditor(n_permutations=200, n_power_resamples=200).calibrate(
        *make_proba(rng, 1000, MEMBER), *make_proba(rng, 1000, NONMEMBER)
    )
    result = auditor.audit(*make_proba(rng, 50, NONMEMBER))
    assert "information_single_view" not in result.metrics and auditor.n_views_ == 1
    assert result.thresholds["certify"]["advice"].startswith("a non-member reference of 4,000 samples would lower")


def test_the_advice_follows_the_auditors_binned_likelihood_not_the_quadratic():
    rng = np.random.default_rng(3)
    auditor = ReferenceAuditor(n_permutations=200, n_power_resamples=200).calibrate(
        *make_proba(rng, 1000, MEMBER), *make_proba(rng, 1000, NONMEMBER)
    )
    advice = auditor.audit(*make_proba(rng, 50, NONMEMBER)).thresholds["certify"]["advice"]
    counts = (auditor.member_counts_, auditor.nonmember_counts_)
    n_reference, information = auditor.nonmember_scores_.size, auditor.information_lower_
    binned, quadratic = (
        reference_floor(n_reference, information, binned_references=references) for references in (counts, None)
    )
    assert binned > 1.1 * quadratic, "members crowd the top bins here: the likelihood drops slower than a quadratic"
    assert f"(now {binned:.3f} with 1,000)" in advice


def test_the_floor_rises_where_members_crowd_a_bin_and_falls_where_non_members_fill_member_free_bins():
    quadratic = reference_floor(1000, 0.05)
    crowded = (np.array([980.0, 20.0]), np.array([80.0, 920.0]))
    member_free = (np.array([0.0, 500.0, 500.0]), np.array([100.0, 450.0, 450.0]))
    assert reference_floor(1000, 0.05, binned_references=crowded) > 1.1 * quadratic
    assert reference_floor(1000, 0.05, binned_references=member_free) < 0.95 * quadratic


def test_reference_advice_says_four_times_the_reference_halves_the_floor():
    advice = reference_advice(1000, 0.05, certify_level=0.95)
    now, then = reference_floor(1000, 0.05), reference_floor(4000, 0.05)
    assert then == pytest.approx(now / 2)
    assert advice == (
        f"a non-member reference of 4,000 samples would lower the floor to {then:.3f} (now {now:.3f} with 1,000): "
        "the floor is the margin that even an unbounded query certifies in only half of removed sets, so none "
        "below it is certifiable"
    )
    assert "no reference size" in reference_advice(1000, 0.0, certify_level=0.95)
    assert reference_floor(1000, 0.1) == pytest.approx(1.6448536 / np.sqrt(100))


def test_advice_whose_floors_are_above_one_says_nothing_below_one_is_certifiable_not_a_number():
    crowded = (np.array([980.0, 20.0]), np.array([80.0, 920.0]))
    assert reference_floor(400, 0.01, binned_references=crowded) > 1
    advice = reference_advice(100, 0.01, certify_level=0.95, binned_references=crowded)
    assert advice.startswith("even a non-member reference of 400 samples (now 100) would leave nothing below 1")
    then = reference_floor(400, 0.03, binned_references=crowded)
    assert reference_floor(100, 0.03, binned_references=crowded) > 1 > then
    assert reference_advice(100, 0.03, certify_level=0.95, binned_references=crowded).startswith(
        f"a non-member reference of 400 samples would lower the floor to {then:.3f} (now none below 1 with 100)"
    )
