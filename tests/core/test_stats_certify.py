"""What an audit can certify: the cross-fitted information, the certifiable margin and the sizes, checked by simulation.

Scores are synthetic: non-members N(0, 1), members N(0.6, 1). Each simulated audit redraws
both references and a removed query (drawn like the non-members), computes the margin or the
plan from the references alone, then runs the member-reference auditor's own interval
(:func:`ema.stats.mixture.retained_fraction`) and counts how often it certifies.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ema.errors import InputError
from ema.stats.binned_tests import DEFAULT_BIN_LEVELS, bin_counts, quantile_edges
from ema.stats.certify import certifiable_margin, likelihood_drop_ratio, plan_certification
from ema.stats.information import (
    InformationEstimate,
    cross_fit_information,
    cross_fitted_information,
    cross_fitted_information_estimate,
)
from ema.stats.mixture import retained_fraction

LEVELS = np.array(DEFAULT_BIN_LEVELS)
SHIFT, N_MEMBERS, N_REFERENCE = 0.6, 4000, 1000
#: The 95% one-sided bound: the upper end of the auditor's two-sided 90% interval.
CERTIFY_LEVEL = 0.95


def references(rng, n_reference=N_REFERENCE):
    return rng.normal(SHIFT, 1.0, N_MEMBERS), rng.normal(0.0, 1.0, n_reference)


def upper_bound(rng, members, nonmembers, n_query):
    """The auditor's one-sided 95% upper bound on the retained share of a removed query of ``n_query``."""
    query = rng.normal(0.0, 1.0, n_query)
    edges = quantile_edges(nonmembers, LEVELS)
    counts = (bin_counts(query, edges), bin_counts(members, edges), bin_counts(nonmembers, edges))
    return retained_fraction(*counts, confidence_level=2 * CERTIFY_LEVEL - 1).high


def binomial_floor(rate, n, sds=2.5):
    """``rate`` less ``sds`` Monte Carlo standard errors of a share over ``n`` draws."""
    return rate - sds * math.sqrt(rate * (1 - rate) / n)


def test_certifiable_margin_certifies_removed_queries_in_085_of_draws_and_not_below_it():
    rng = np.random.default_rng(0)
    n_query, draws = 200, 200
    certified, certified_at_half = 0, 0
    for draw in range(draws):  # each draw: new references, a margin from them alone, then a removed query
        members, nonmembers = references(rng)
        information = cross_fitted_information(members, nonmembers, LEVELS, random_state=draw)
        margin = certifiable_margin(n_query, N_REFERENCE, information, certify_level=CERTIFY_LEVEL)
        high = upper_bound(rng, members, nonmembers, n_query)
        certified += high <= margin
        certified_at_half += high <= margin / 2
    assert certified / draws >= binomial_floor(0.85, draws)
    assert certified_at_half / draws < 0.6  # well below the margin, clearly fewer


def test_cross_fitted_information_standard_error_is_near_the_spread_over_redrawn_references():
    """The delta method leaves out the fold assignment and the ratio's fitting: 0.72 of the spread here."""
    rng = np.random.default_rng(1)
    estimates = [cross_fitted_information_estimate(*references(rng), LEVELS, random_state=draw) for draw in range(60)]
    spread = np.std([e.estimate for e in estimates])
    assert 0.55 < np.mean([e.standard_error for e in estimates]) / spread < 1.2
    members, nonmembers = references(np.random.default_rng(2))
    estimate = cross_fitted_information_estimate(members, nonmembers, LEVELS)
    assert estimate.estimate == cross_fitted_information(members, nonmembers, LEVELS)


def test_certifiable_margin_from_the_lower_bound_keeps_the_promise_where_the_estimate_breaks_it():
    """Nearly separable scores and a small reference (as the breast-cancer table): the estimate's spread is
    heavy-tailed, a margin from the estimate itself certifies about 0.65 of removed queries, from its lower
    bound about 0.98."""
    rng = np.random.default_rng(0)
    n_members, n_reference, n_query, draws = 250, 126, 50, 150
    certified = {"estimate": 0, "lower_bound": 0}
    for draw in range(draws):
        members, nonmembers = rng.normal(3.0, 1.0, n_members), rng.normal(0.0, 1.0, n_reference)
        information = cross_fitted_information_estimate(members, nonmembers, LEVELS, random_state=draw)
        query = rng.normal(0.0, 1.0, n_query)
        edges = quantile_edges(nonmembers, LEVELS)
        counts = (bin_counts(query, edges), bin_counts(members, edges), bin_counts(nonmembers, edges))
        high = retained_fraction(*counts, confidence_level=2 * CERTIFY_LEVEL - 1).high
        for name, value in (("estimate", information.estimate), ("lower_bound", information.lower_bound())):
            certified[name] += high <= certifiable_margin(n_query, n_reference, value, certify_level=CERTIFY_LEVEL)
    assert certified["lower_bound"] / draws >= binomial_floor(0.85, draws)
    assert certified["estimate"] / draws < 0.8


def test_cross_fitted_information_averaged_over_fold_assignments_moves_less_with_the_assignment():
    """On fixed references the estimate still moves with the seed of its folds; five assignments cut that
    spread by more than a third without moving the mean or the standard error."""
    members, nonmembers = references(np.random.default_rng(3))

    def over_seeds(n_repeats):
        return [
            cross_fitted_information_estimate(members, nonmembers, LEVELS, n_repeats=n_repeats, random_state=seed)
            for seed in range(30)
        ]

    one, five = over_seeds(1), over_seeds(5)
    assert np.std([e.estimate for e in five]) < 0.6 * np.std([e.estimate for e in one])
    assert np.mean([e.estimate for e in five]) == pytest.approx(np.mean([e.estimate for e in one]), rel=0.1)
    assert np.mean([e.standard_error for e in five]) == pytest.approx(np.mean([e.standard_error for e in one]), rel=0.1)


def table_like_references(rng, n_members=252, n_reference=126, top_share=0.08):
    """The breast-cancer table's shape: every member at the top score, as are ``top_share`` of non-members."""
    nonmembers = np.where(rng.random(n_reference) < top_share, 10.0, rng.normal(0.0, 1.0, n_reference))
    return np.full(n_members, 10.0), nonmembers


def test_likelihood_drop_ratio_is_one_for_small_margins_below_where_members_crowd_and_above_where_they_never_go():
    weak_members, weak_nonmembers = np.array([0.3, 0.7]), np.array([0.25, 0.75])
    assert likelihood_drop_ratio(weak_members, weak_nonmembers, 1e-4) == pytest.approx(1.0, abs=1e-3)
    assert likelihood_drop_ratio(weak_members, weak_nonmembers, 0.5) == pytest.approx(1.0, abs=0.1)
    crowded_members, crowded_nonmembers = np.array([0.98, 0.02]), np.array([0.08, 0.92])
    assert 0.4 < likelihood_drop_ratio(crowded_members, crowded_nonmembers, 0.2) < 0.6
    # a tenth of non-members where members never go (the overfit target's lowest bins): it drops faster
    empty_members, spread_nonmembers = np.array([0.0001, 0.5999, 0.4]), np.array([0.1, 0.6, 0.3])
    assert likelihood_drop_ratio(empty_members, spread_nonmembers, 0.6) > 1.3
    assert likelihood_drop_ratio(weak_nonmembers, weak_nonmembers, 0.3) == 1.0


def test_likelihood_drop_ratio_stays_exact_at_margins_where_the_logarithm_would_cancel():
    crowded_members, crowded_nonmembers = np.array([0.98, 0.02]), np.array([0.08, 0.92])
    for margin in (1e-17, 1e-12, 1e-8, 1e-5):
        assert likelihood_drop_ratio(crowded_members, crowded_nonmembers, margin) == pytest.approx(1.0, abs=1e-3)
    # an information far beyond any reference's (once estimated from a few one-bin references): a margin, no error
    assert 0 < certifiable_margin(12, 6, 4.7e27, binned_references=(np.array([12, 0]), np.array([1, 5]))) < 1e-12


def test_cross_fitted_information_of_references_whose_held_out_scores_do_not_vary_is_no_estimate():
    """Six non-members all in one bin leave no variance to divide by: the lower bound is 0, never an overflow."""
    members = np.linspace(1.0, 2.0, 12)
    nonmembers = np.full(6, -1.0)
    with np.errstate(all="raise"):
        estimate = cross_fitted_information_estimate(members, nonmembers, LEVELS)
    assert estimate.standard_error == math.inf and estimate.lower_bound() == 0.0 and not estimate.estimable
    assert certifiable_margin(12, 6, estimate.lower_bound()) == math.inf
    assert cross_fitted_information_estimate(members, np.linspace(-1.0, 1.0, 12), LEVELS).estimable


def test_certifiable_margin_with_the_bins_keeps_the_promise_where_the_likelihood_drops_slowly():
    """Members all at one score, as are 8% of 126 non-members (the table target). Even the exactly known
    information certifies only about 0.62 of removed queries of 50 with the quadratic margin; the binned
    likelihood's drop raises that to about 0.8 (the rest is the small counts' skew: 4 query rows expected in
    the members' bin); the auditor's margin, from the cross-fitted lower bound and the bins, certifies about
    0.97 (the lower bound with the quadratic: about 0.84)."""
    rng = np.random.default_rng(7)
    n_query, draws, known = 50, 150, 1 / 0.08 - 1  # chi^2 of "at the top" against the rest
    certified = {"known, quadratic": 0, "known, bins": 0, "auditor": 0}
    for draw in range(draws):
        members, nonmembers = table_like_references(rng)
        edges = quantile_edges(nonmembers, LEVELS)
        member_counts, nonmember_counts = bin_counts(members, edges), bin_counts(nonmembers, edges)
        query = table_like_references(rng, n_reference=n_query)[1]
        counts = (bin_counts(query, edges), member_counts, nonmember_counts)
        high = retained_fraction(*counts, confidence_level=2 * CERTIFY_LEVEL - 1).high
        lower = cross_fitted_information_estimate(members, nonmembers, LEVELS, random_state=draw).lower_bound()
        options = {"certify_level": CERTIFY_LEVEL}
        binned = {"binned_references": (member_counts, nonmember_counts), **options}
        certified["known, quadratic"] += high <= certifiable_margin(n_query, nonmembers.size, known, **options)
        certified["known, bins"] += high <= certifiable_margin(n_query, nonmembers.size, known, **binned)
        certified["auditor"] += high <= certifiable_margin(n_query, nonmembers.size, lower, **binned)
    rates = {name: count / draws for name, count in certified.items()}
    assert rates["auditor"] >= binomial_floor(0.85, draws)
    assert rates["known, quadratic"] < 0.7
    assert rates["known, bins"] > rates["known, quadratic"] + 0.1


def test_plan_certification_with_the_bins_plans_the_margin_the_audit_then_states():
    members, nonmembers = table_like_references(np.random.default_rng(8))
    edges = quantile_edges(nonmembers, LEVELS)
    counts = (bin_counts(members, edges), bin_counts(nonmembers, edges))
    plan = plan_certification(0.3, 8.0, n_reference=nonmembers.size, binned_references=counts)
    quadratic = plan_certification(0.3, 8.0, n_reference=nonmembers.size)
    assert plan.reachable and plan.query_size > quadratic.query_size
    options = {"probability": plan.probability, "binned_references": counts}
    assert certifiable_margin(plan.query_size, plan.reference_size, 8.0, **options) <= 0.3
    assert certifiable_margin(plan.query_size - 1, plan.reference_size, 8.0, **options) > 0.3


def test_information_lower_bound_is_one_standard_error_below_and_never_negative():
    assert InformationEstimate(0.2, 0.05).lower_bound() == pytest.approx(0.15)
    assert InformationEstimate(0.2, 0.05).lower_bound(2.0) == pytest.approx(0.1)
    assert InformationEstimate(0.02, 0.05).lower_bound() == 0.0


def test_plan_certification_plans_from_the_lower_bound_when_given():
    plain = plan_certification(0.3, 0.2, n_reference=1000)
    lower = plan_certification(0.3, 0.2, n_reference=1000, information_lower=0.15)
    assert plain.information_lower == plain.information == 0.2
    assert lower.information == 0.2 and lower.information_lower == 0.15
    assert lower.query_size > plain.query_size and lower.smallest_reachable_margin > plain.smallest_reachable_margin


def test_certifiable_margin_gives_the_floor_of_the_issue_for_an_unbounded_query_at_even_odds():
    information, n_reference = 0.12, 1000
    floor = certifiable_margin(math.inf, n_reference, information, certify_level=0.95, probability=0.5)
    assert floor == pytest.approx(1.645 / math.sqrt(n_reference * information), rel=1e-3)
    # more query samples never beat it; asking for more certainty raises it
    assert certifiable_margin(10**9, n_reference, information, certify_level=0.95) > floor
    assert certifiable_margin(200, n_reference, information) > certifiable_margin(1000, n_reference, information)
    assert certifiable_margin(200, n_reference, 0.0) == math.inf


def test_cross_fitted_information_is_near_zero_without_a_difference_and_near_the_truth_with_one():
    rng = np.random.default_rng(1)
    same = cross_fitted_information(rng.normal(size=4000), rng.normal(size=1000), LEVELS)
    edges = quantile_edges(rng.normal(size=10**6), LEVELS)
    truth_m = np.diff(np.r_[0, stats.norm.cdf(edges, loc=SHIFT), 1])
    truth_n = np.diff(np.r_[0, stats.norm.cdf(edges), 1])
    binned = float(np.sum((truth_m - truth_n) ** 2 / truth_n))
    estimate = cross_fitted_information(*references(rng, n_reference=20_000), LEVELS)
    assert same < 0.01  # a plug-in chi-square on these sizes reads about 0.015 here
    assert 0.8 * binned <= estimate <= 1.05 * binned


def gaussian_ratio(train_members, train_nonmembers):
    """The members' N(SHIFT, 1) over the non-members' N(0, 1), known rather than fitted: the finest ratio there is."""
    return lambda x: np.exp(SHIFT * x - SHIFT**2 / 2)


def test_cross_fit_information_with_the_exact_ratio_finds_the_full_information_the_bins_miss():
    rng = np.random.default_rng(5)
    members, nonmembers = references(rng, n_reference=20_000)
    exact = cross_fit_information(members, nonmembers, gaussian_ratio)
    binned = cross_fitted_information(members, nonmembers, LEVELS)
    assert exact == pytest.approx(math.expm1(SHIFT**2), rel=0.15)  # chi^2 of two unit normals: e^(d^2) - 1
    assert binned < exact


def test_cross_fitted_information_at_a_half_retained_share_matches_the_integral():
    rng = np.random.default_rng(6)
    grid = np.linspace(-8, 9, 20_001)
    f_mem, f_non = stats.norm.pdf(grid, loc=SHIFT), stats.norm.pdf(grid)
    truth = float(np.sum((f_mem - f_non) ** 2 / (0.5 * f_mem + 0.5 * f_non)) * (grid[1] - grid[0]))
    members, nonmembers = references(rng, n_reference=20_000)
    estimate = cross_fit_information(members, nonmembers, gaussian_ratio, retained_share=0.5)
    assert estimate == pytest.approx(truth, rel=0.15)
    assert estimate < cross_fit_information(members, nonmembers, gaussian_ratio)  # I(pi) falls as pi grows


def test_plan_certification_sizes_certify_the_margin_in_09_of_simulated_draws():
    rng = np.random.default_rng(2)
    margin = 0.3
    information = cross_fitted_information(*references(rng), LEVELS)
    plan = plan_certification(margin, information, n_reference=N_REFERENCE, certify_level=CERTIFY_LEVEL)
    assert plan.reachable and plan.reference_size >= N_REFERENCE and plan.query_size >= 1
    assert (
        certifiable_margin(
            plan.query_size, plan.reference_size, information, certify_level=CERTIFY_LEVEL, probability=0.9
        )
        <= margin
    )
    draws = 150
    certified = sum(
        upper_bound(rng, *references(rng, plan.reference_size), plan.query_size) <= margin for _ in range(draws)
    )
    assert certified / draws >= binomial_floor(0.9, draws)


def test_plan_certification_of_an_unreachable_margin_names_the_smallest_reachable_one():
    plan = plan_certification(0.1, 0.03, n_reference=1000, max_reference=2000)
    expected = (stats.norm.ppf(0.95) + stats.norm.ppf(0.9)) / math.sqrt(2000 * 0.03)
    assert not plan.reachable and plan.query_size is None and plan.reference_size == 2000
    assert plan.smallest_reachable_margin == pytest.approx(expected)
    reachable = plan_certification(plan.smallest_reachable_margin * 1.05, 0.03, n_reference=1000, max_reference=2000)
    assert reachable.reachable and reachable.reference_size == 2000


def test_plan_certification_reaching_no_margin_below_1_names_1_as_the_audit_does():
    """A retained share is at most 1: a floor of 5.3 (150 references, information 0.00084) is reported as 1, as the
    audit's certifiable_margin is, and no information reaches none either."""
    assert certifiable_margin(math.inf, 150, 0.00084) > 1
    for information in (0.00084, 0.0):
        plan = plan_certification(0.3, information, n_reference=150)
        assert not plan.reachable and plan.smallest_reachable_margin == 1.0


def test_plan_certification_keeps_a_reference_that_suffices_and_grows_one_that_does_not():
    kept = plan_certification(0.5, 1.0, n_reference=5000)
    assert kept.reference_size == 5000 and kept.query_size is not None
    grown = plan_certification(0.2, 0.2, n_reference=100, max_reference=50_000)
    assert grown.reachable and grown.reference_size == grown.query_size  # balanced: fewest samples in all


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: certifiable_margin(200, 1000, -0.1), "information to be a finite number >= 0"),
        (lambda: certifiable_margin(0, 1000, 0.1), "positive sizes"),
        (lambda: certifiable_margin(200, 1000, 0.1, probability=0.3), "at least 0.5"),
        (lambda: certifiable_margin(200, 1000, 0.1, certify_level=1.0), r"certify level in \(0.5, 1\)"),
        (lambda: certifiable_margin(200, 1000, 0.1, certify_level=0.5), r"certify level in \(0.5, 1\)"),
        (lambda: plan_certification(0.3, 0.1, n_reference=1000, certify_level=0.2), r"certify level in \(0.5, 1\)"),
        (lambda: plan_certification(1.5, 0.1, n_reference=1000), "margin"),
        (lambda: cross_fitted_information(np.ones(3), np.ones(100), LEVELS), "at least 2 samples per fold"),
        (
            lambda: cross_fitted_information(np.ones(50), np.ones(50), LEVELS, retained_share=1.0),
            "retained share in \\[0, 1\\)",
        ),
    ],
)
def test_certify_functions_refuse_bad_input(call, message):
    with pytest.raises(InputError, match=message):
        call()
