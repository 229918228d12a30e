"""check_auditor: every built-in auditor passes it; a minimal toy passes it; broken toys fail it by name.

The synthetic target draws each row from a Dirichlet law peaked on the sample's label:
members get a sharp peak, non-members a blunt one, so the auditors have something to tell apart.
"""

import dataclasses

import numpy as np
import pytest
from scipy import stats

from ema.auditors import (
    MEMORIZED,
    NOT_MEMORIZED,
    Auditor,
    AuditResult,
    CalibratedAuditor,
    CheckFailed,
    EMAAuditor,
    KSRatioAuditor,
    check_auditor,
)
from ema.auditors.base import check_calibrated, is_calibrated
from ema.auditors.marks import MarksAuditor
from ema.auditors.reference import ReferenceAuditor
from ema.errors import InputError, NotCalibratedError

N_CLASSES = 4
#: Dirichlet weight added to the label's class: a sharp peak for members, a blunt one for non-members.
MEMBER_PEAK, NONMEMBER_PEAK = 20.0, 2.0


def dirichlet_rows(rng: np.random.Generator, labels: np.ndarray, peak: float) -> np.ndarray:
    """(n, N_CLASSES) probabilities: Dirichlet(1, ..., 1 + peak at the label, ..., 1) per row."""
    concentration = np.ones((labels.size, N_CLASSES))
    concentration[np.arange(labels.size), labels] += peak
    draws = rng.gamma(concentration)
    return draws / draws.sum(axis=1, keepdims=True)


def labelled(rng: np.random.Generator, n: int, peak: float) -> tuple[np.ndarray, np.ndarray]:
    labels = rng.integers(0, N_CLASSES, n)
    return dirichlet_rows(rng, labels, peak), labels


@pytest.fixture(scope="module")
def arrays() -> dict[str, tuple[np.ndarray, ...]]:
    """Named calibration inputs, each a tuple of arrays, and the query (half members, half non-members)."""
    rng = np.random.default_rng(0)
    query_labels = rng.integers(0, N_CLASSES, 80)
    halves = (dirichlet_rows(rng, query_labels[:40], MEMBER_PEAK), dirichlet_rows(rng, query_labels[40:], 2.0))
    return {
        "member": labelled(rng, 300, MEMBER_PEAK),
        "nonmember": labelled(rng, 300, NONMEMBER_PEAK),
        "reference": labelled(rng, 300, NONMEMBER_PEAK),
        "query_model": (dirichlet_rows(rng, query_labels, MEMBER_PEAK),),
        "calibration_model": (dirichlet_rows(rng, query_labels, NONMEMBER_PEAK),),
        "query": (np.concatenate(halves), query_labels),
    }


def run_check(auditor: Auditor, inputs: tuple[str, ...], arrays: dict) -> None:
    """check_auditor with the named calibration inputs, in order, and the query."""
    calibration_args = [array for name in inputs for array in arrays[name]]
    query_proba, query_labels = arrays["query"]
    check_auditor(auditor, calibration_args=calibration_args, query_proba=query_proba, query_labels=query_labels)


#: Every built-in auditor, with the calibration inputs it takes: one line per auditor.
BUILT_IN_AUDITORS = [
    pytest.param(EMAAuditor(), ("member", "nonmember"), id="ema"),
    pytest.param(EMAAuditor(threshold_mode="per-class", test="ks"), ("member", "nonmember"), id="ema-per-class-ks"),
    pytest.param(KSRatioAuditor(), ("query_model", "calibration_model"), id="ks-ratio"),
    pytest.param(CalibratedAuditor(n_draws=500), ("reference", "member", "nonmember"), id="calibrated"),
    pytest.param(ReferenceAuditor(n_permutations=500, n_power_resamples=100), ("member", "nonmember"), id="reference"),
    pytest.param(MarksAuditor(1), ("query_model",), id="marks"),
]


@pytest.mark.parametrize(("auditor", "inputs"), BUILT_IN_AUDITORS)
def test_check_auditor_passes_every_built_in(auditor, inputs, arrays):
    run_check(auditor, inputs, arrays)
    assert not is_calibrated(auditor), "check_auditor must work on copies, not on the auditor given"


@pytest.mark.parametrize(("auditor", "inputs"), BUILT_IN_AUDITORS)
def test_built_in_auditors_refuse_audit_before_calibrate_with_not_calibrated_error(auditor, inputs, arrays):
    name = type(auditor).__name__
    with pytest.raises(NotCalibratedError, match=rf"this {name} is not calibrated yet: call calibrate\(\) first"):
        auditor.audit(*arrays["query"])


# --------------------------------------------------------------------------- toys
class ToyAuditor:
    """A minimal auditor that passes: flags labels' confidences above the non-members' median, binomial test."""

    method = "toy"

    def __init__(self, *, alpha: float = 0.1) -> None:
        self.alpha = alpha

    def calibrate(self, member_proba, member_labels, nonmember_proba, nonmember_labels):
        self.threshold_ = float(np.median(nonmember_proba[np.arange(nonmember_labels.size), nonmember_labels]))
        return self

    def audit(self, proba, labels):
        check_calibrated(self)
        return self._decide(proba, labels, self.threshold_)

    def _decide(self, proba, labels, threshold):
        confidence = proba[np.arange(labels.size), labels]
        flags = confidence > threshold
        p_flagged = float(stats.binomtest(int(flags.sum()), flags.size, 0.5, alternative="greater").pvalue)
        return AuditResult(
            method=self.method,
            scores={"confidence": confidence},
            flags={"confidence": flags},
            membership=flags.astype(np.int8),
            metrics={"p_flagged": p_flagged, "flag_rate": float(flags.mean())},
            verdict=MEMORIZED if p_flagged <= self.alpha else NOT_MEMORIZED,
            alpha=self.alpha,
            thresholds={"method": self.method, "threshold": threshold},
        )

    def to_dict(self):
        check_calibrated(self)
        return {"method": self.method, "threshold": self.threshold_}


class SortsQueryInPlace(ToyAuditor):
    def audit(self, proba, labels):
        proba.sort(axis=1)
        return super().audit(proba, labels)


class UnknownVerdict(ToyAuditor):
    def audit(self, proba, labels):
        return dataclasses.replace(super().audit(proba, labels), verdict="retained")


class AuditsUncalibrated(ToyAuditor):
    def audit(self, proba, labels):  # no check_calibrated: a default threshold instead
        return self._decide(proba, labels, getattr(self, "threshold_", 0.5))


class ForgetsSelf(ToyAuditor):
    def calibrate(self, *arrays):
        super().calibrate(*arrays)


class Unseeded(ToyAuditor):
    def audit(self, proba, labels):
        result = super().audit(proba, labels)
        return dataclasses.replace(result, metrics={**result.metrics, "p_draw": np.random.default_rng().uniform()})


class PvalueAboveOne(ToyAuditor):
    def audit(self, proba, labels):
        result = super().audit(proba, labels)
        return dataclasses.replace(result, metrics={**result.metrics, "p_flagged": 1.5})


class ExportsArrays(ToyAuditor):
    def to_dict(self):
        return {**super().to_dict(), "threshold": np.array([self.threshold_])}


def test_check_auditor_passes_a_minimal_toy(arrays):
    run_check(ToyAuditor(), ("member", "nonmember"), arrays)


@pytest.mark.parametrize(
    ("toy", "message"),
    [
        (SortsQueryInPlace, r"SortsQueryInPlace fails check_auditor's 'inputs_not_mutated' check: .*\['query_proba'\]"),
        (UnknownVerdict, r"UnknownVerdict fails check_auditor's 'verdict_in_vocabulary' check: verdict 'retained'"),
        (AuditsUncalibrated, r"AuditsUncalibrated fails .*'refuses_before_calibrate' check: audit\(\) .*did not raise"),
        (ForgetsSelf, r"ForgetsSelf fails check_auditor's 'calibrate_returns_self' check: .* returned NoneType"),
        (Unseeded, r"Unseeded fails check_auditor's 'deterministic' check"),
        (PvalueAboveOne, r"PvalueAboveOne fails check_auditor's 'pvalues_in_unit_interval' check: .*'p_flagged': 1.5"),
        (ExportsArrays, r"ExportsArrays fails check_auditor's 'json_serialisable' check: json.dumps\(to_dict\(\)\)"),
    ],
)
def test_check_auditor_fails_broken_toys_naming_the_check(toy, message, arrays):
    with pytest.raises(CheckFailed, match=message) as failure:
        run_check(toy(), ("member", "nonmember"), arrays)
    assert isinstance(failure.value, AssertionError)


def test_check_auditor_fails_an_object_without_the_protocol(arrays):
    with pytest.raises(CheckFailed, match=r"object fails check_auditor's 'protocol' check"):
        run_check(object(), ("member", "nonmember"), arrays)


def test_check_auditor_refuses_a_calibrated_auditor(arrays):
    auditor = ToyAuditor().calibrate(*arrays["member"], *arrays["nonmember"])
    with pytest.raises(InputError, match="expected an auditor not yet calibrated, got a calibrated ToyAuditor"):
        run_check(auditor, ("member", "nonmember"), arrays)


def test_is_calibrated_after_calibrate_and_after_from_dict(arrays):
    auditor = EMAAuditor().calibrate(*arrays["member"], *arrays["nonmember"])
    assert is_calibrated(auditor) and is_calibrated(EMAAuditor.from_dict(auditor.to_dict()))


def test_ks_ratio_to_dict_is_the_audit_thresholds(arrays):
    auditor = KSRatioAuditor().calibrate(*arrays["query_model"], *arrays["calibration_model"])
    assert auditor.audit(*arrays["query"]).thresholds == auditor.to_dict()
