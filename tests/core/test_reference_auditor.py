"""ReferenceAuditor and its statistics on synthetic probability matrices: validity, power, ties, shift, gates.

The synthetic "target" gives the true class a probability drawn from a Beta law, higher for
members than for non-members, and spreads the rest over the other classes.
"""

import math

import numpy as np
import pytest
from scipy import optimize, special

from ema.auditors import INCONCLUSIVE, MEMORIZED, NOT_MEMORIZED, CalibratedAuditor
from ema.auditors.reference import ReferenceAuditor, decide_reference_verdict
from ema.auditors.reference_gates import label_order_warning, query_accuracy_warning, reference_gate_warnings
from ema.auditors.reference_record import evidence_note
from ema.errors import InputError
from ema.stats.binned_tests import class_mix_pvalue, removal_test, retention_test
from ema.stats.certify import certifiable_margin
from ema.stats.mixture import mixture_profile_loglik, resampled_power, retained_fraction

N_CLASSES = 10
#: Labels of a reference with every class equally common: chance is 1 / N_CLASSES.
BALANCED = np.repeat(np.arange(N_CLASSES), 10)
ALPHA = 0.1
#: Monte Carlo slack over alpha for rates measured on N_DRAWS draws (3 standard errors at 0.1).
MC_SLACK = 0.12
N_DRAWS = 60
#: A target that separates members from non-members well, and one that barely does.
STRONG = {"member": (30.0, 0.5), "nonmember": (2.0, 1.0)}
WEAK = {"member": (6.0, 0.35), "nonmember": (4.0, 0.5)}
N_MEMBERS, N_NONMEMBERS = 2000, 1000


def make_proba(rng, n, law, n_classes=N_CLASSES, dtype=np.float64):
    """(n, n_classes) probabilities and labels: true class ~ Beta(law), the rest spread at random."""
    labels = rng.integers(0, n_classes, n)
    rows = np.arange(n)
    true_class = rng.beta(*law, n)
    others = rng.gamma(1.0, size=(n, n_classes))
    others[rows, labels] = 0.0
    proba = others / others.sum(axis=1, keepdims=True) * (1.0 - true_class)[:, None]
    proba[rows, labels] = true_class
    return proba.astype(dtype), labels


def calibrated(laws, seed=0, **config):
    rng = np.random.default_rng(seed)
    members = make_proba(rng, N_MEMBERS, laws["member"])
    nonmembers = make_proba(rng, N_NONMEMBERS, laws["nonmember"])
    return ReferenceAuditor(**config).calibrate(*members, *nonmembers)


@pytest.fixture(scope="module")
def strong():
    return calibrated(STRONG, n_permutations=1000, n_power_resamples=100)


@pytest.fixture(scope="module")
def weak():
    return calibrated(WEAK, n_permutations=1000, n_power_resamples=100)


# --------------------------------------------------------------------------- API
def test_calibrate_returns_self_and_sets_fitted_attributes(strong):
    assert strong.n_classes_ == N_CLASSES
    assert strong.member_counts_.sum() == N_MEMBERS and strong.nonmember_counts_.sum() == N_NONMEMBERS
    assert strong.weights_.shape == (len(strong.levels) + 1,)
    assert strong.weights_[0] < 0 < strong.weights_[-1]
    assert set(strong.diagnostics_) == {
        "member_accuracy",
        "reference_accuracy",
        "auc",
        "balanced_accuracy",
        "nonmember_flag_rate",
    }
    assert strong.warnings_ == []


def test_audit_before_calibrate_refuses():
    with pytest.raises(InputError, match="not calibrated yet: call calibrate"):
        ReferenceAuditor().audit(np.full((2, 2), 0.5), np.array([0, 1]))


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"signal": "correctness"}, "expected a continuous signal"),
        ({"signal": "nope"}, "expected distinct signal names"),
        ({"alpha": 1.5}, "expected alpha in"),
        ({"margin": 0.0}, "expected margin in"),
        ({"confidence_level": 1.0}, "expected confidence_level in"),
        ({"n_permutations": 10}, "expected n_permutations to be an integer >= 100"),
        ({"n_power_resamples": 5}, "expected n_power_resamples to be an integer >= 100"),
        ({"levels": (0.5, 0.2)}, "expected bin levels strictly increasing"),
    ],
)
def test_calibrate_invalid_config_raises(config, message):
    rng = np.random.default_rng(0)
    with pytest.raises(InputError, match=message):
        ReferenceAuditor(**config).calibrate(*make_proba(rng, 50, (5, 1)), *make_proba(rng, 50, (2, 1)))


def test_calibrate_class_count_mismatch_raises():
    rng = np.random.default_rng(0)
    with pytest.raises(InputError, match="over the same classes, got 10 and 3 columns"):
        ReferenceAuditor().calibrate(*make_proba(rng, 50, (5, 1)), *make_proba(rng, 50, (2, 1), n_classes=3))


@pytest.mark.parametrize(("n_members", "n_nonmembers"), [(3, 50), (50, 2)])
def test_calibrate_refuses_a_reference_too_small_to_cross_fit_naming_both_sizes(n_members, n_nonmembers):
    rng = np.random.default_rng(0)
    with pytest.raises(InputError, match=f"at least 4 samples in each reference .* got {n_members} members and "
                                         f"{n_nonmembers} non-members"):  # fmt: skip
        ReferenceAuditor().calibrate(*make_proba(rng, n_members, (5, 1)), *make_proba(rng, n_nonmembers, (2, 1)))


def test_audit_class_count_mismatch_raises(strong):
    rng = np.random.default_rng(0)
    with pytest.raises(InputError, match="calibrated 10 classes, got 3 columns"):
        strong.audit(*make_proba(rng, 20, (2, 1), n_classes=3))


def test_audit_metrics_and_warnings_location(strong):
    result = strong.audit(*make_proba(np.random.default_rng(1), 200, STRONG["nonmember"]))
    assert {
        "p_removed",
        "p_retained",
        "p_too_forgotten",
        "retained_fraction",
        "retained_ci_low",
        "retained_ci_high",
        "power_retained",
        "min_detectable_fraction",
        "p_class_mix",
        "p_mixture_fit",
        "n_query",
    } <= set(result.metrics)
    assert result.method == "reference"
    assert result.thresholds["warnings"] == []
    assert (
        result.metrics["retained_ci_low"] <= result.metrics["retained_fraction"] <= result.metrics["retained_ci_high"]
    )
    assert result.membership.shape == (200,)


def test_audit_is_reproducible_under_random_state(weak):
    query = make_proba(np.random.default_rng(2), 100, WEAK["member"])
    assert weak.audit(*query).metrics == weak.audit(*query).metrics


def test_decide_reference_verdict_rules():
    assert decide_reference_verdict(0.05, 1.0, 1.0, alpha=0.1, margin=0.1) == MEMORIZED
    assert decide_reference_verdict(0.5, 0.1, 0.1, alpha=0.1, margin=0.1) == NOT_MEMORIZED
    assert decide_reference_verdict(0.5, 0.1, 0.11, alpha=0.1, margin=0.1) == INCONCLUSIVE
    assert decide_reference_verdict(0.5, 0.11, 0.05, alpha=0.1, margin=0.1) == INCONCLUSIVE
    assert decide_reference_verdict(0.5, 0.01, 0.05, alpha=0.1, margin=0.1, bound_counts=False) == INCONCLUSIVE


def test_a_query_unlike_references_that_carry_no_information_is_not_certified_removed():
    """Members and non-members scored alike (no information: nothing below 1 certifiable) and a query far less
    member-like than both: its mixture fit is rejected and its bound sits at the mixture's edge, tight (0.01)
    and meaningless; before, that certified "at most 0.10 retained"."""
    rng = np.random.default_rng(0)
    references = (*make_proba(rng, N_MEMBERS, (4.0, 1.0)), *make_proba(rng, N_NONMEMBERS, (4.0, 1.0)))
    auditor = ReferenceAuditor(n_permutations=1000, n_power_resamples=100).calibrate(*references)
    result = auditor.audit(*make_proba(rng, 200, (1.0, 3.0)))
    m = result.metrics
    assert m["certifiable_margin"] == 1.0 and m["p_mixture_fit"] < 0.01 and m["retained_upper_bound"] < 0.1
    assert result.verdict == INCONCLUSIVE
    assert "certifies nothing: the query fits no mix of the references" in result.thresholds["evidence"]


def test_a_bound_below_the_margin_certifies_nothing_while_the_whole_set_retained_is_not_ruled_out():
    """The evidence note of that case says which test fell short, not that the bound exceeds the margin."""
    note = note_of(INCONCLUSIVE, p_retained=0.14, upper_bound=0.05, certifiable_margin=1.0)
    assert "p_retained=0.14 > alpha: the whole set being retained is not ruled out" in note
    assert "> margin" not in note


# --------------------------------------------------------------------------- verdicts
def test_audit_strong_target_gives_both_verdicts(strong):
    rng = np.random.default_rng(3)
    assert strong.audit(*make_proba(rng, 200, STRONG["member"])).verdict == MEMORIZED
    removed = strong.audit(*make_proba(rng, 200, STRONG["nonmember"]))
    assert removed.verdict == NOT_MEMORIZED
    assert removed.metrics["retained_ci_high"] <= 0.1


def test_audit_error_rates_within_alpha(weak):
    rng = np.random.default_rng(4)
    members = [weak.audit(*make_proba(rng, 50, WEAK["member"])).verdict for _ in range(N_DRAWS)]
    nonmembers = [weak.audit(*make_proba(rng, 50, WEAK["nonmember"])).verdict for _ in range(N_DRAWS)]
    assert members.count(NOT_MEMORIZED) == 0
    assert nonmembers.count(MEMORIZED) / N_DRAWS <= ALPHA + MC_SLACK


def test_audit_power_is_stated_and_grows_with_size(weak):
    small = weak.audit(*make_proba(np.random.default_rng(5), 5, WEAK["member"])).metrics
    large = weak.audit(*make_proba(np.random.default_rng(5), 1000, WEAK["member"])).metrics
    assert 0.0 <= small["power_retained"] < large["power_retained"] <= 1.0
    assert np.isnan(small["min_detectable_fraction"])
    assert 0.0 < large["min_detectable_fraction"] <= 1.0


def test_audit_probabilities_tied_at_one_do_not_crash():
    """Float32 saturation: every row one-hot, so every score ties; the auditor answers, and warns."""
    rng = np.random.default_rng(6)
    labels = rng.integers(0, N_CLASSES, 600)
    one_hot = np.eye(N_CLASSES, dtype=np.float32)[labels]
    auditor = ReferenceAuditor(n_permutations=200, n_power_resamples=100).calibrate(
        one_hot[:300], labels[:300], one_hot[300:], labels[300:]
    )
    result = auditor.audit(one_hot[:50], labels[:50])
    assert result.verdict == INCONCLUSIVE
    # says whose score barely separates: with ema+calibrated, EMA's signals warn apart, of numbers of their own
    assert any(
        "barely separate on the target (the calibrated auditor's member-reference score: balanced accuracy" in warning
        for warning in result.thresholds["warnings"]
    )


def test_audit_partly_tied_probabilities_resolve_through_log_odds():
    """Half the outputs round to 1.0 in float32; log-odds still orders them, the verdict still comes out."""
    rng = np.random.default_rng(7)
    members = make_proba(rng, 2000, (60.0, 0.02), dtype=np.float32)
    nonmembers = make_proba(rng, 1000, (3.0, 1.0), dtype=np.float32)
    assert (members[0].max(axis=1) == 1.0).mean() > 0.3
    auditor = ReferenceAuditor(n_permutations=500, n_power_resamples=100).calibrate(*members, *nonmembers)
    assert auditor.audit(*make_proba(rng, 100, (60.0, 0.02), dtype=np.float32)).verdict == MEMORIZED


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_calibrated_auditor_survives_probabilities_tied_at_one():
    """Outputs saturated at 1.0 once gave negative Beta parameters, then NaN p-values and a crash."""
    rng = np.random.default_rng(0)

    def tied(n, tied_share):
        labels = rng.integers(0, N_CLASSES, n)
        confidence = np.where(rng.random(n) < tied_share, 1.0, rng.uniform(0.5, 0.999, n))
        proba = np.repeat(((1.0 - confidence) / (N_CLASSES - 1))[:, None], N_CLASSES, axis=1)
        proba[np.arange(n), labels] = confidence
        return proba.astype(np.float32), labels

    reference, members, nonmembers, query = tied(500, 0.7), tied(250, 0.95), tied(250, 0.6), tied(50, 0.7)
    result = CalibratedAuditor().calibrate(*reference, *members, *nonmembers).audit(*query)
    assert result.verdict in (MEMORIZED, NOT_MEMORIZED, INCONCLUSIVE)
    assert 0.0 <= result.metrics["p_removed"] <= 1.0 and 0.0 <= result.metrics["p_retained"] <= 1.0


# --------------------------------------------------------------------------- shift and gates
def test_audit_other_domain_warns_and_stays_not_memorized(strong):
    rng = np.random.default_rng(8)
    result = strong.audit(*make_proba(rng, 200, (1.0, 8.0)))  # confidently wrong: another domain
    assert result.verdict == NOT_MEMORIZED
    warnings = " ".join(result.thresholds["warnings"])
    assert "fit no mix of members and non-members" in warnings
    assert "less member-like than never-seen data" in warnings
    assert result.metrics["p_too_forgotten"] <= ALPHA


def test_audit_class_mix_shift_warns(strong):
    proba, labels = make_proba(np.random.default_rng(9), 200, STRONG["nonmember"], n_classes=N_CLASSES)
    keep = labels < 3
    result = strong.audit(proba[keep], labels[keep])
    assert any("class mix differs" in warning for warning in result.thresholds["warnings"])


def test_an_overfit_target_whose_members_it_classifies_far_better_gets_no_warning():
    """Members at accuracy 1 against non-members well below: that gap is memorization, not a reference of another
    domain (a gate that read it so warned on every overfit target)."""
    overfit = calibrated({"member": (30.0, 0.5), "nonmember": (1.0, 2.0)}, n_permutations=200, n_power_resamples=100)
    assert overfit.diagnostics_["member_accuracy"] - overfit.diagnostics_["reference_accuracy"] > 0.2
    assert overfit.warnings_ == []


def test_calibrate_chance_level_reference_warns():
    rng = np.random.default_rng(10)
    members = make_proba(rng, 500, STRONG["member"])
    uniform = np.full((500, N_CLASSES), 1.0 / N_CLASSES)
    uniform[:, 0] += 1e-3
    uniform /= uniform.sum(axis=1, keepdims=True)
    auditor = ReferenceAuditor(n_permutations=200, n_power_resamples=100).calibrate(
        *members, uniform, rng.integers(0, N_CLASSES, 500)
    )
    assert any("near chance" in warning for warning in auditor.warnings_)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"reference_accuracy": 0.148}, "near chance (0.100, always answering its commonest class)"),
        ({"reference_accuracy": 0.9, "balanced_accuracy": 0.53, "auc": 0.54}, "barely separate"),
        (
            {"reference_accuracy": 0.9, "balanced_accuracy": 0.539, "separation_of": "EMA's signals"},
            "barely separate on the target (EMA's signals: balanced accuracy 0.539 < 0.55)",
        ),
        ({"reference_accuracy": 0.9, "nonmember_flag_rate": 0.97}, "flagged at a rate of 0.970 >= 0.95"),
    ],
)
def test_reference_gate_warnings_each_gate(kwargs, expected):
    warnings = reference_gate_warnings(N_CLASSES, BALANCED, **kwargs)
    assert len(warnings) == 1 and expected in warnings[0]


def test_chance_is_answering_the_references_commonest_class_on_imbalanced_data():
    """A model that answers one class only is 0.635 right on a 63.5% class: near chance, not 0.135 above it."""
    labels = np.array([1] * 127 + [0] * 73)
    (warning,) = reference_gate_warnings(2, labels, reference_accuracy=0.635)
    assert "0.635, near chance (0.635, always answering its commonest class)" in warning
    assert reference_gate_warnings(2, labels, reference_accuracy=0.9) == []
    (below,) = reference_gate_warnings(2, labels, reference_accuracy=0.03)
    assert "0.030, below chance (0.635" in below


def test_a_separation_that_is_the_limit_but_for_float_error_is_not_warned_about():
    assert (
        reference_gate_warnings(N_CLASSES, BALANCED, reference_accuracy=0.9, balanced_accuracy=0.5499999999999999) == []
    )
    assert reference_gate_warnings(N_CLASSES, BALANCED, reference_accuracy=0.9, balanced_accuracy=0.549) != []


@pytest.mark.parametrize("agreement", [1.0, 0.6])
def test_label_order_warning_names_the_outputs_read_as_other_classes_and_only_then(agreement):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, 2000)
    predicted = np.where(rng.random(2000) < agreement, labels, rng.integers(0, 4, 2000))
    proba = np.eye(4)[predicted]
    assert label_order_warning(proba, labels) is None
    mismatch = label_order_warning(proba[:, [2, 1, 3, 0]], labels)  # output 0 is class 2, 2 is 3, 3 is 0
    warning = mismatch.warning
    assert "reading output 3 as class 0, output 0 as class 2, output 2 as class 3" in warning
    assert mismatch.gain > 0.4 and mismatch.decisive  # on 2,000 samples: the audit withholds its verdicts
    assert f"(accuracy {(predicted == labels).mean():.3f} " in warning
    assert label_order_warning(np.full((2000, 4), 0.25), labels) is None  # chance in every order: nothing to say
    assert label_order_warning(np.eye(2)[labels % 2], labels) is None  # labels beyond the outputs: not an order


def test_label_order_on_a_few_samples_is_warned_but_decides_nothing():
    """Three samples, one more right read the other way: a gain of 0.33, and no evidence (sign test p 0.5)."""
    labels = np.array([0, 1, 1])
    mismatch = label_order_warning(np.eye(2)[[1, 0, 1]], labels)
    assert mismatch.gain == pytest.approx(1 / 3) and mismatch.pvalue == pytest.approx(0.5)
    assert not mismatch.decisive


@pytest.mark.parametrize(
    ("correct", "n_query", "reference", "warned"),
    [
        (29, 100, 0.96, True),
        (3, 5, 0.85, False),
        (75, 100, 0.95, False),
        (700, 1000, 0.95, True),
        (980, 1000, 0.5, False),
    ],
)
def test_query_accuracy_warning_needs_a_large_and_unlikely_gap_below_the_reference(correct, n_query, reference, warned):
    """Far below (more than 0.2) and unlikely for non-members (binomial p < 0.001): 3 of 5 at 0.85 is 0.25 below
    but likely (p 0.16); 75 of 100 at 0.95 is only 0.2 below; a query above the reference is members' behaviour."""
    warning = query_accuracy_warning(correct, n_query, reference)
    assert (warning is not None) == warned
    if warned:
        assert warning.startswith(f"target accuracy on the query ({correct / n_query:.3f}) is far below its accuracy")


def test_reference_gate_warnings_none_when_healthy():
    assert (
        reference_gate_warnings(
            N_CLASSES,
            BALANCED,
            reference_accuracy=0.93,
            balanced_accuracy=0.6,
            auc=0.58,
            nonmember_flag_rate=0.8,
        )
        == []
    )


def test_class_mix_pvalue_detects_a_skewed_mix():
    rng = np.random.default_rng(11)
    reference = rng.integers(0, N_CLASSES, 1000)
    assert class_mix_pvalue(rng.integers(0, N_CLASSES, 300), reference, N_CLASSES) > 0.001
    assert class_mix_pvalue(np.zeros(300, dtype=np.int64), reference, N_CLASSES) < 1e-6
    assert class_mix_pvalue(np.zeros(5, dtype=np.int64), np.zeros(9, dtype=np.int64), N_CLASSES) == 1.0


# --------------------------------------------------------------------------- statistics
def test_removal_test_level_under_h0():
    rng = np.random.default_rng(12)
    members = rng.normal(1.0, 1.0, 2000)
    rejections = [
        removal_test(rng.normal(size=20), rng.normal(size=300), members, n_permutations=500, random_state=rng)[
            "greater"
        ].pvalue
        <= ALPHA
        for _ in range(200)
    ]
    assert np.mean(rejections) <= ALPHA + 0.05


def test_removal_test_heavy_ties_are_valid():
    rng = np.random.default_rng(13)
    members = np.where(rng.random(2000) < 0.8, 1.0, rng.random(2000))
    draw = lambda n: np.where(rng.random(n) < 0.6, 1.0, rng.random(n))  # noqa: E731
    pvalues = [
        removal_test(draw(30), draw(300), members, n_permutations=500, random_state=rng)["greater"].pvalue
        for _ in range(200)
    ]
    assert np.mean(np.array(pvalues) <= ALPHA) <= ALPHA + 0.05


def test_retention_test_level_under_h0_and_power():
    rng = np.random.default_rng(14)
    nonmembers = rng.normal(size=1000)
    members = rng.normal(1.0, 1.0, 2000)
    under_h0 = [
        retention_test(rng.normal(1.0, 1.0, 20), members, nonmembers, n_permutations=500, random_state=rng)[
            "less"
        ].pvalue
        <= ALPHA
        for _ in range(200)
    ]
    assert np.mean(under_h0) <= ALPHA + 0.05
    removed = retention_test(rng.normal(size=100), members, nonmembers, random_state=0)["less"]
    assert removed.pvalue < 0.01 and removed.alternative == "less" and removed.n == 100


def test_removal_test_invalid_input_raises():
    with pytest.raises(InputError, match="expected `query_scores` to be a non-empty 1-D array"):
        removal_test(np.array([]), np.ones(3), np.ones(3))
    with pytest.raises(InputError, match="expected alternative in"):
        removal_test(np.ones(3), np.ones(3), np.ones(3), alternatives=("two-sided",))


def test_mixture_profile_loglik_matches_direct_maximisation():
    query, member, nonmember = np.array([5.0, 20, 25]), np.array([10.0, 40, 150]), np.array([40.0, 30, 30])
    fraction = 0.3

    def negative(params):
        p = special.softmax(np.r_[0.0, params[:2]])
        q = special.softmax(np.r_[0.0, params[2:]])
        mix = fraction * p + (1 - fraction) * q
        return -(member @ np.log(p) + nonmember @ np.log(q) + query @ np.log(mix))

    direct = -optimize.minimize(
        negative, np.zeros(4), method="Nelder-Mead", options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 20000}
    ).fun
    assert mixture_profile_loglik(query, member, nonmember, np.array([fraction]))[0] == pytest.approx(direct, abs=1e-4)


def test_retained_fraction_covers_the_truth():
    rng = np.random.default_rng(15)
    member_share = np.array([0.01, 0.04, 0.15, 0.3, 0.5])
    nonmember_share = np.array([0.1, 0.15, 0.25, 0.25, 0.25])
    covered = []
    for _ in range(100):
        members = rng.multinomial(2000, member_share)
        nonmembers = rng.multinomial(1000, nonmember_share)
        query = rng.multinomial(500, 0.5 * member_share + 0.5 * nonmember_share)
        result = retained_fraction(query, members, nonmembers, confidence_level=0.9)
        covered.append(result.low <= 0.5 <= result.high)
    assert np.mean(covered) >= 0.9 - 0.08


def test_retained_fraction_invalid_counts_raise():
    with pytest.raises(InputError, match="expected three count vectors over the same >= 2 bins"):
        retained_fraction(np.array([1, 2]), np.array([1, 2, 3]), np.array([1, 2]))
    with pytest.raises(InputError, match="non-negative integer counts"):
        retained_fraction(np.array([0, 0]), np.array([1, 2]), np.array([1, 2]))


def test_resampled_power_matches_fresh_member_queries():
    rng = np.random.default_rng(16)
    members, nonmembers = rng.normal(0.4, 1.0, 3000), rng.normal(size=1000)
    stated = resampled_power(members, nonmembers, 30, n_resamples=150, random_state=0)
    measured = np.mean(
        [
            removal_test(rng.normal(0.4, 1.0, 30), nonmembers, members, n_permutations=500, random_state=rng)[
                "greater"
            ].pvalue
            <= ALPHA
            for _ in range(150)
        ]
    )
    assert stated.power_retained == pytest.approx(measured, abs=0.12)
    larger = resampled_power(members, nonmembers, 300, n_resamples=150, random_state=0)
    assert larger.power_retained > stated.power_retained
    assert 0.0 < larger.min_detectable_fraction <= 1.0


def test_resampled_power_invalid_size_raises():
    with pytest.raises(InputError, match="expected `n_query` to be a positive integer, got 0"):
        resampled_power(np.ones(10), np.ones(10), 0)


# --------------------------------------------------------------------------- evidence
def test_audit_memorized_on_a_p_value_near_alpha_says_the_evidence_is_weak(weak):
    # seed 17: a removed set (non-members) that the test calls memorized by chance, as the README's
    # retrain-then-audit flow did (p_removed 0.043); the verdict alone does not say how weak that is
    result = weak.audit(*make_proba(np.random.default_rng(17), 200, WEAK["nonmember"]))
    assert result.verdict == MEMORIZED and ALPHA / 10 < result.metrics["p_removed"] <= ALPHA
    evidence = result.thresholds["evidence"]
    assert evidence.startswith("weak evidence: a set the model never saw gets p_removed <= 0.029 in 2.9% of audits")
    assert "consistent with none of the set retained" in evidence  # its interval reaches 0


def test_audit_evidence_of_each_verdict(strong, weak):
    members = strong.audit(*make_proba(np.random.default_rng(0), 50, STRONG["member"]))
    removed = strong.audit(*make_proba(np.random.default_rng(0), 200, STRONG["nonmember"]))
    small = weak.audit(*make_proba(np.random.default_rng(0), 30, WEAK["nonmember"]))
    assert [members.verdict, removed.verdict, small.verdict] == [MEMORIZED, NOT_MEMORIZED, INCONCLUSIVE]
    assert members.thresholds["evidence"].startswith("strong evidence: p_removed=")
    margin = removed.metrics["certifiable_margin"]
    assert removed.thresholds["evidence"].startswith("certified: at most 0.10 of the set is retained (one-sided 95%")
    assert removed.thresholds["evidence"].endswith(f"certifies in 85% of removed sets: {margin:.2f}")
    assert small.thresholds["evidence"].startswith("neither shown: p_removed=")


def note_of(verdict: str, **numbers: float) -> str:
    """The evidence sentence of ``verdict`` for a removed-looking query, ``numbers`` replacing the defaults."""
    defaults = {"p_removed": 0.5, "p_retained": 0.001, "alpha": 0.1, "retained_low": 0.0, "retained_high": 0.4}
    defaults |= {"upper_bound": 0.05}
    defaults |= {"margin": 0.1, "certifiable_margin": 0.3, "certify_level": 0.95}
    return evidence_note(verdict, **(defaults | numbers))


@pytest.mark.parametrize(("level", "written"), [(0.975, "97.5%"), (0.999, "99.9%")])
def test_evidence_writes_the_certify_level_with_its_digits(level, written):
    assert f"(one-sided {written} bound 0.05)" in note_of(NOT_MEMORIZED, certify_level=level)


def test_evidence_at_a_margin_of_one_says_nothing_is_certifiable_not_that_a_bound_exceeds_it():
    """``--margin auto`` where this size certifies nothing uses margin 1: "bound 0.74 > margin 1.00" was false."""
    note = note_of(INCONCLUSIVE, margin=1.0, upper_bound=0.74, certifiable_margin=1.0)
    assert "no share below 1 can be certified at this query size (one-sided 95% bound 0.74)" in note
    assert "> margin" not in note and note.endswith(": none below 1")


def test_weak_evidence_states_alpha_as_a_share_of_removed_sets():
    assert "(alpha 0.9 calls 90% of removed sets memorized)" in note_of(MEMORIZED, alpha=0.9)


def test_audit_states_its_certifiable_margin_from_the_information_lower_bound_and_the_bins(strong):
    result = strong.audit(*make_proba(np.random.default_rng(3), 200, STRONG["nonmember"]))
    m, certify = result.metrics, result.thresholds["certify"]
    assert 0 < m["information_lower"] < m["information"] == strong.information_
    counts = (strong.member_counts_, strong.nonmember_counts_)
    from_lower = certifiable_margin(
        200, N_NONMEMBERS, m["information_lower"], certify_level=0.95, binned_references=counts
    )
    assert m["certifiable_margin"] == pytest.approx(min(from_lower, 1.0))
    quadratic = certifiable_margin(200, N_NONMEMBERS, m["information_lower"], certify_level=0.95)
    assert m["certifiable_margin"] > quadratic > certifiable_margin(200, N_NONMEMBERS, m["information"])
    assert certify["margin_from"] == "information_lower" and certify["information_lower"] == m["information_lower"]
    assert strong.to_dict()["information_lower"] == strong.information_lower_


def test_audit_of_references_whose_scores_do_not_vary_states_no_information_rather_than_zero():
    """Every sample scored alike: no fold's held-out scores vary, so the references estimate no information.
    The metrics are NaN (not logged; "not estimable" in the report), not a 0 that reads as a measurement; the
    margin still plans with none (nothing below 1 certifiable)."""
    labels = np.random.default_rng(0).integers(0, N_CLASSES, 40)
    proba = np.full((40, N_CLASSES), 1 / N_CLASSES)
    auditor = ReferenceAuditor(n_permutations=100, n_power_resamples=100).calibrate(proba, labels, proba, labels)
    result = auditor.audit(proba[:20], labels[:20])
    assert not auditor.information_estimate_.estimable and auditor.information_lower_ == 0.0
    assert math.isnan(result.metrics["information"]) and math.isnan(result.metrics["information_lower"])
    assert result.metrics["certifiable_margin"] == 1.0
