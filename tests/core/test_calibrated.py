"""CalibratedAuditor on synthetic probability matrices: error rates, power, coverage, errors.

The synthetic "model" gives the true class a probability drawn from a Beta law, higher for
members than for non-members, and spreads the rest over the other classes. Target and
calibration model share the laws, so the transfer assumption holds here by construction.
"""

import json

import numpy as np
import pytest

from ema.auditors import INCONCLUSIVE, MEMORIZED, NOT_MEMORIZED, VERDICTS, CalibratedAuditor
from ema.auditors.calibrated import ASSUMPTIONS, decide_verdict
from ema.auditors.reference_record import DEFAULT_MARGIN
from ema.errors import InputError
from ema.stats import QuerySizeResult

N_CLASSES = 10
#: Beta(a, b) of the true-class probability: a well-trained model, confident on most samples
#: either way; members differ in the low tail (about 1% of members fall below the non-members'
#: 5% quantile, 29% below their median).
NONMEMBER_LAW = (4.0, 0.5)
MEMBER_LAW = (6.0, 0.35)
N_REFERENCE, N_CALIBRATION_HALF = 1000, 500
ALPHA = 0.1
#: Monte Carlo slack over alpha for rates measured on N_DRAWS draws.
MC_SLACK = 0.05
N_DRAWS = 60
SIZES = (5, 50, 1000)


def make_proba(rng, n, law, n_classes=N_CLASSES):
    """(n, n_classes) probabilities and labels: true class ~ Beta(law), the rest spread at random."""
    labels = rng.integers(0, n_classes, n)
    rows = np.arange(n)
    true_class = rng.beta(*law, n)
    others = rng.gamma(1.0, size=(n, n_classes))
    others[rows, labels] = 0.0
    proba = others / others.sum(axis=1, keepdims=True) * (1.0 - true_class)[:, None]
    proba[rows, labels] = true_class
    return proba, labels


def make_mixture(rng, n, share):
    members, nonmembers = (
        make_proba(rng, int(n * share), MEMBER_LAW),
        make_proba(rng, n - int(n * share), NONMEMBER_LAW),
    )
    return np.vstack([members[0], nonmembers[0]]), np.concatenate([members[1], nonmembers[1]])


def calibrated_auditor(rng, **config):
    reference = make_proba(rng, N_REFERENCE, NONMEMBER_LAW)  # the target on data it never saw
    members = make_proba(rng, N_CALIBRATION_HALF, MEMBER_LAW)  # the calibration model's training half
    nonmembers = make_proba(rng, N_CALIBRATION_HALF, NONMEMBER_LAW)  # and its held-out half
    return CalibratedAuditor(**config).calibrate(*reference, *members, *nonmembers)


@pytest.fixture(scope="module")
def simulation():
    """Verdicts and intervals over N_DRAWS independent calibrations, each auditing fresh query sets."""
    rng = np.random.default_rng(2021)
    verdicts = {(kind, n): [] for kind in ("members", "nonmembers") for n in SIZES}
    verdicts[("half", 1000)] = []
    verdicts[("half", 5)] = []
    intervals = []
    lower_bounds = []
    for _ in range(N_DRAWS):
        auditor = calibrated_auditor(rng, alpha=ALPHA, n_draws=400)
        for n in SIZES:
            verdicts[("members", n)].append(auditor.audit(*make_proba(rng, n, MEMBER_LAW)).verdict)
            verdicts[("nonmembers", n)].append(auditor.audit(*make_proba(rng, n, NONMEMBER_LAW)).verdict)
        verdicts[("half", 5)].append(auditor.audit(*make_mixture(rng, 6, 0.5)).verdict)
        half = auditor.audit(*make_mixture(rng, 1000, 0.5))
        verdicts[("half", 1000)].append(half.verdict)
        intervals.append((half.metrics["retained_ci_low"], half.metrics["retained_ci_high"]))
        lower_bounds.append(half.metrics["retained_lower_bound_target_only"])
    return (
        {key: np.array(value) for key, value in verdicts.items()},
        np.array(intervals),
        np.array(lower_bounds),
    )


# ---------------------------------------------------------------- error rates, power, coverage
@pytest.mark.parametrize("n", SIZES)
def test_calibrated_auditor_member_sets_rarely_called_not_memorized(simulation, n):
    verdicts, _, _ = simulation
    assert np.mean(verdicts[("members", n)] == NOT_MEMORIZED) <= ALPHA + MC_SLACK


@pytest.mark.parametrize("n", SIZES)
def test_calibrated_auditor_nonmember_sets_rarely_called_memorized(simulation, n):
    verdicts, _, _ = simulation
    assert np.mean(verdicts[("nonmembers", n)] == MEMORIZED) <= ALPHA + MC_SLACK


def test_calibrated_auditor_large_member_sets_called_memorized(simulation):
    verdicts, _, _ = simulation
    assert np.mean(verdicts[("members", 1000)] == MEMORIZED) >= 0.9


@pytest.fixture(scope="module")
def removed_audits():
    """Non-member sets of 1,000 audited at the default margin and at 0.3: verdicts, interval ends, p_retained."""
    rng = np.random.default_rng(2022)
    rows = []
    for _ in range(30):
        auditor = calibrated_auditor(rng, alpha=ALPHA, n_draws=400)
        query = make_proba(rng, 1000, NONMEMBER_LAW)
        result = auditor.audit(*query)
        auditor.margin = 0.3
        rows.append(
            (
                result.verdict,
                auditor.audit(*query).verdict,
                result.metrics["retained_ci_high"],
                result.metrics["p_retained"],
            )
        )
    default, loose, high, p_retained = map(np.array, zip(*rows, strict=True))
    return default, loose, high.astype(float), p_retained.astype(float)


def test_calibrated_auditor_large_nonmember_sets_reject_retained_but_certify_only_below_the_margin(removed_audits):
    default, loose, high, p_retained = removed_audits
    assert np.mean(p_retained <= ALPHA) >= 0.8  # "all of it retained" is rejected...
    assert np.all(high[default == NOT_MEMORIZED] <= DEFAULT_MARGIN)  # ...but not_memorized needs the bound
    assert np.all(default[(p_retained <= ALPHA) & (high > DEFAULT_MARGIN)] == INCONCLUSIVE)
    assert np.mean(default == NOT_MEMORIZED) < 0.5 <= np.mean(high > DEFAULT_MARGIN)
    assert np.mean(loose == NOT_MEMORIZED) >= 0.8  # a margin these intervals reach is certified


def test_calibrated_auditor_half_mixture_interval_covers_half(simulation):
    _, intervals, _ = simulation
    low, high = intervals.T
    assert np.mean((low <= 0.5) & (0.5 <= high)) >= 0.85
    assert np.mean(high - low) < 0.6  # and it says something


def test_calibrated_auditor_target_only_lower_bound_below_truth(simulation):
    _, _, lower_bounds = simulation
    assert np.mean(lower_bounds <= 0.5) >= 0.9


def test_calibrated_auditor_tiny_query_sets_inconclusive(simulation):
    verdicts, _, _ = simulation
    for key in (("members", 5), ("half", 5)):
        assert np.mean(verdicts[key] == INCONCLUSIVE) >= 0.8
        assert not np.any(verdicts[key] == MEMORIZED)


def test_calibrated_auditor_half_mixture_of_1000_is_not_called_removed(simulation):
    verdicts, _, _ = simulation
    # Half the set is still memorized: H0 "removed" is rejected; the verdict is memorized or inconclusive.
    assert np.mean(verdicts[("half", 1000)] == NOT_MEMORIZED) <= ALPHA + MC_SLACK


# ---------------------------------------------------------------- the result
def test_calibrated_auditor_result_contents():
    rng = np.random.default_rng(0)
    auditor = calibrated_auditor(rng)
    query = make_proba(rng, 300, MEMBER_LAW)
    result = auditor.audit(*query)
    assert result.method == "calibrated"
    assert result.verdict in VERDICTS
    assert set(result.metrics) == {
        "p_removed",
        "p_retained",
        "retained_fraction",
        "retained_ci_low",
        "transfer_gap",
        "retained_ci_high",
        "retained_lower_bound_target_only",
        "n_query",
        "flag_rate",
    }
    assert 0.0 <= result.metrics["retained_ci_low"] <= result.metrics["retained_ci_high"] <= 1.0
    assert result.metrics["n_query"] == 300
    assert set(result.scores) == set(result.flags) == {"confidence", "negative_entropy", "modified_entropy"}
    assert result.membership.shape == (300,)
    np.testing.assert_array_equal(result.membership, result.flags["confidence"])
    assert result.flag_rate == pytest.approx(result.metrics["flag_rate"])
    thresholds = result.thresholds
    assert thresholds["assumptions"] == ASSUMPTIONS
    assert {"p_removed", "p_retained", "retained_lower_bound_target_only", "retained_ci_high"} <= set(ASSUMPTIONS)
    assert "transfer" in ASSUMPTIONS["p_retained"] and "target only" in ASSUMPTIONS["p_removed"]
    assert len(thresholds["tests"]) == 3 * 5
    assert len(thresholds["signals"]["confidence"]["cutoffs"]) == 5
    # Holm: the family p-value is the smallest adjusted one.
    assert result.metrics["p_removed"] == pytest.approx(min(t["p_removed_adjusted"] for t in thresholds["tests"]))
    assert set(thresholds["diagnostics"]) == {
        "target_reference_accuracy",
        "calibration_member_accuracy",
        "calibration_nonmember_accuracy",
        "transfer_gap",
        "transfer_tolerance",
        "transfer_trusted",
    }
    json.dumps(thresholds)  # thresholds.json


def test_calibrated_auditor_reproducible_with_random_state():
    rng = np.random.default_rng(1)
    auditor = calibrated_auditor(rng, random_state=7)
    query = make_mixture(rng, 400, 0.5)
    first, second = auditor.audit(*query), auditor.audit(*query)
    assert first.metrics == second.metrics


def test_calibrated_auditor_bonferroni_never_rejects_more_than_holm():
    rng = np.random.default_rng(2)
    reference, members, nonmembers = (make_proba(rng, 500, law) for law in (NONMEMBER_LAW, MEMBER_LAW, NONMEMBER_LAW))
    query = make_proba(rng, 200, MEMBER_LAW)
    holm = CalibratedAuditor().calibrate(*reference, *members, *nonmembers).audit(*query)
    bonferroni = CalibratedAuditor(correction="bonferroni").calibrate(*reference, *members, *nonmembers).audit(*query)
    assert bonferroni.metrics["p_removed"] == pytest.approx(holm.metrics["p_removed"])
    holm_tests = np.array([t["p_removed_adjusted"] for t in holm.thresholds["tests"]])
    bonferroni_tests = np.array([t["p_removed_adjusted"] for t in bonferroni.thresholds["tests"]])
    assert np.all(bonferroni_tests >= holm_tests - 1e-12)


def test_calibrated_auditor_per_class_mode():
    rng = np.random.default_rng(3)
    auditor = calibrated_auditor(rng, threshold_mode="per-class", margin=0.5)
    assert auditor.cutoffs_["confidence"].shape == (N_CLASSES, 5)
    assert auditor.audit(*make_proba(rng, 1000, MEMBER_LAW)).verdict == MEMORIZED
    result = auditor.audit(*make_proba(rng, 1000, NONMEMBER_LAW))
    assert result.verdict == NOT_MEMORIZED and result.metrics["retained_ci_high"] <= 0.5
    assert np.asarray(result.thresholds["signals"]["confidence"]["cutoffs"]).shape == (N_CLASSES, 5)


def test_calibrated_auditor_per_class_warns_on_class_missing_from_reference():
    rng = np.random.default_rng(4)
    reference_proba, reference_labels = make_proba(rng, 500, NONMEMBER_LAW)
    keep = reference_labels != 3
    members, nonmembers = make_proba(rng, 300, MEMBER_LAW), make_proba(rng, 300, NONMEMBER_LAW)
    auditor = CalibratedAuditor(threshold_mode="per-class")
    with pytest.warns(UserWarning, match=r"classes \[3\] have no reference samples"):
        auditor.calibrate(reference_proba[keep], reference_labels[keep], *members, *nonmembers)
    # The missing class is compared with the whole reference: its cut-offs are the global ones.
    global_auditor = CalibratedAuditor().calibrate(reference_proba[keep], reference_labels[keep], *members, *nonmembers)
    np.testing.assert_array_equal(auditor.cutoffs_["confidence"][3], global_auditor.cutoffs_["confidence"][0])
    assert auditor.stratum_reference_sizes_[3] == keep.sum()
    assert auditor.audit(*make_proba(rng, 200, NONMEMBER_LAW)).verdict in VERDICTS


def test_calibrated_auditor_required_query_size():
    rng = np.random.default_rng(5)
    auditor = calibrated_auditor(rng)
    result = auditor.required_query_size(power=0.9)
    assert isinstance(result, QuerySizeResult)
    assert 10 < result.n_required < 1000
    assert result.n_tests == 15
    # Member sets of that size are called memorized with about that power (at least power - alpha).
    verdicts = [auditor.audit(*make_proba(rng, result.n_required, MEMBER_LAW)).verdict for _ in range(40)]
    assert np.mean(np.array(verdicts) == MEMORIZED) >= 0.9 - ALPHA - MC_SLACK


@pytest.mark.parametrize(
    ("p_removed", "p_retained", "verdict"),
    [
        (0.01, 0.5, MEMORIZED),
        (0.5, 0.01, NOT_MEMORIZED),
        (0.5, 0.5, INCONCLUSIVE),
        (0.01, 0.01, INCONCLUSIVE),
        (0.1, 0.2, MEMORIZED),
    ],
)
def test_decide_verdict(p_removed, p_retained, verdict):
    assert decide_verdict(p_removed, p_retained, 0.1) == verdict


# ---------------------------------------------------------------- errors
def test_calibrated_auditor_audit_before_calibrate_refused():
    proba, labels = make_proba(np.random.default_rng(6), 10, MEMBER_LAW)
    with pytest.raises(InputError, match=r"not calibrated yet: call calibrate\(\) first"):
        CalibratedAuditor().audit(proba, labels)
    with pytest.raises(InputError, match="not calibrated yet"):
        CalibratedAuditor().required_query_size()


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"alpha": 1.5}, r"expected alpha in \(0, 1\)"),
        ({"quantiles": (0.5, 0.1)}, "increasing levels in"),
        ({"quantiles": (0.0, 0.1)}, "increasing levels in"),
        ({"correction": "bh"}, "expected correction in"),
        ({"threshold_mode": "per-sample"}, "expected threshold_mode in"),
        ({"confidence_level": 1.0}, r"expected confidence_level in \(0, 1\)"),
        ({"signals": ("confidence", "loss")}, "expected distinct signal names"),
        ({"n_draws": 10}, "n_draws to be an integer >= 100"),
    ],
)
def test_calibrated_auditor_rejects_bad_config(config, message):
    rng = np.random.default_rng(7)
    data = [make_proba(rng, 50, law) for law in (NONMEMBER_LAW, MEMBER_LAW, NONMEMBER_LAW)]
    with pytest.raises(InputError, match=message):
        CalibratedAuditor(**config).calibrate(*data[0], *data[1], *data[2])


def test_calibrated_auditor_rejects_class_count_mismatch():
    rng = np.random.default_rng(8)
    reference, members = make_proba(rng, 50, NONMEMBER_LAW), make_proba(rng, 50, MEMBER_LAW)
    nonmembers = make_proba(rng, 50, NONMEMBER_LAW, n_classes=3)
    with pytest.raises(
        InputError,
        match=r"same number of classes in every input, got \{'reference': 10, 'member': 10, 'nonmember': 3\}",
    ):
        CalibratedAuditor().calibrate(*reference, *members, *nonmembers)
    auditor = calibrated_auditor(rng)
    with pytest.raises(InputError, match="calibrated 10 classes, got 3 columns"):
        auditor.audit(*make_proba(rng, 20, MEMBER_LAW, n_classes=3))


def test_calibrated_auditor_rejects_bad_query():
    rng = np.random.default_rng(9)
    auditor = calibrated_auditor(rng)
    proba, labels = make_proba(rng, 20, MEMBER_LAW)
    with pytest.raises(InputError, match=r"labels of shape \(20,\)"):
        auditor.audit(proba, labels[:5])
    with pytest.raises(InputError, match="summing to 1"):
        auditor.audit(proba * 0.5, labels)


def test_calibrated_auditor_refuses_changed_quantiles_after_calibration():
    rng = np.random.default_rng(10)
    auditor = calibrated_auditor(rng)
    auditor.quantiles = (0.1, 0.2)
    with pytest.raises(InputError, match="calibrate again"):
        auditor.audit(*make_proba(rng, 20, MEMBER_LAW))


def test_calibrated_auditor_untrusted_transfer_never_calls_removed():
    """A calibration model that generalises worse than the target (its non-members are noisier)."""
    rng = np.random.default_rng(5)
    reference = make_proba(rng, N_REFERENCE, NONMEMBER_LAW)
    members = make_proba(rng, N_CALIBRATION_HALF, MEMBER_LAW)
    nonmembers = make_proba(rng, N_CALIBRATION_HALF, (1.0, 1.0))  # far less accurate than the target
    auditor = CalibratedAuditor(alpha=ALPHA).calibrate(*reference, *members, *nonmembers)
    assert not auditor.transfer_ok_ and auditor.transfer_gap_ > 0.02
    for n in (5, 50, 1000):
        result = auditor.audit(*make_proba(rng, n, NONMEMBER_LAW))
        assert result.metrics["p_retained"] == 1.0
        assert result.verdict != NOT_MEMORIZED
        assert result.metrics["retained_ci_high"] == 1.0
        assert result.metrics["retained_ci_low"] == result.metrics["retained_lower_bound_target_only"]
    assert auditor.to_dict()["diagnostics"]["transfer_trusted"] is False
