"""Train the calibration model f_cal with the target's recipe and pick EMA's thresholds; cached."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ema.auditors.ema import EMAAuditor
from ema.data.arrays import ArraySet
from ema.data.corruption import DEFAULT_CORRUPTION, apply_corruption, check_quality
from ema.signals import SIGNALS
from ema.tracking import keys
from ema.tracking.registry import RegisteredVersion, find_cached_version, log_and_register, set_alias
from ema.tracking.runs import (
    log_artifacts_atomically,
    log_metrics,
    log_params,
    read_json_artifact,
    set_tags,
    start_run,
)
from ema.training.recipes import Recipe, recipe_to_json
from ema.validation import check_model_name, short_hash
from ema.workflows.target import Target, resolve_target


@dataclass(frozen=True)
class CalibrationOutcome:
    version: RegisteredVersion
    thresholds: dict
    cached: bool


def calibration_halves(calibration: ArraySet, seed: int) -> tuple[ArraySet, ArraySet]:
    """Split the calibration set in two seeded halves: f_cal's training data, and held-out data."""
    order = np.random.default_rng(seed).permutation(len(calibration))
    half = len(calibration) // 2
    return calibration.take(order[:half], "calibration-train"), calibration.take(order[half:], "calibration-test")


def calibration_cache_key(
    recipe: Recipe, calibration: ArraySet, k: int, cal_seed: int, corruption: str = DEFAULT_CORRUPTION
) -> str:
    """Same recipe, same clean calibration data, same quality k, seed and corruption: same calibration model."""
    return short_hash(
        {
            "recipe": recipe.to_dict(),
            "data": calibration.fingerprint,
            "k": k,
            "cal_seed": cal_seed,
            "corruption": corruption,
        }
    )


def fit_thresholds(classifier, members: ArraySet, nonmembers: ArraySet) -> EMAAuditor:
    """Fit every metric's thresholds on a calibration model's members and non-members."""
    return EMAAuditor(signals=tuple(SIGNALS)).calibrate(
        classifier.predict_proba(members.pixels()),
        members.y,
        classifier.predict_proba(nonmembers.pixels()),
        nonmembers.y,
    )


@dataclass(frozen=True, kw_only=True)
class CalibrationPlan:
    """What a calibration is made of, and the registered version it may already have."""

    target: Target
    clean: ArraySet
    k: int
    cal_seed: int
    cache_key: str
    model_name: str
    cached: RegisteredVersion | None
    corruption: str = DEFAULT_CORRUPTION

    @classmethod
    def for_target(
        cls, target: Target, *, k: int, cal_seed: int, model_name: str, corruption: str = DEFAULT_CORRUPTION
    ) -> CalibrationPlan:
        clean = target.splits().calibration
        cache_key = calibration_cache_key(target.recipe, clean, k, cal_seed, corruption)
        cached = find_cached_version(model_name, cache_key)
        return cls(
            target=target,
            clean=clean,
            k=k,
            cal_seed=cal_seed,
            cache_key=cache_key,
            model_name=model_name,
            cached=cached,
            corruption=corruption,
        )

    def params(self) -> dict:
        return {
            keys.PARAM_K: self.k,
            keys.PARAM_CAL_SEED: self.cal_seed,
            keys.PARAM_CORRUPTION: self.corruption,
            keys.PARAM_MODEL_URI: self.target.model_uri or self.target.model_url,
            keys.PARAM_RECIPE: recipe_to_json(self.target.recipe)[:500],
        }

    def reuse(self) -> CalibrationOutcome:
        return CalibrationOutcome(
            self.cached, read_json_artifact(self.cached.run_id, keys.ARTIFACT_CALIBRATION), cached=True
        )

    def halves(self) -> tuple[ArraySet, ArraySet]:
        """f_cal's training half (members) and held-out half (non-members), at quality k."""
        return calibration_halves(self.corrupted(), self.cal_seed)

    def corrupted(self) -> ArraySet:
        """The whole calibration set at quality k under the plan's corruption protocol."""
        return apply_corruption(self.corruption, self.clean, self.k, self.cal_seed)

    def train(self, *, progress: bool) -> CalibrationOutcome:
        """Train f_cal, fit thresholds and register the model, logging into the active run."""
        log_params(self.params())
        set_tags({keys.TAG_CACHE: "miss"})
        members, nonmembers = self.halves()
        classifier = self.target.recipe.fit(members.pixels(), members.y, progress=progress)
        thresholds = fit_thresholds(classifier, members, nonmembers).to_dict()
        log_metrics(
            {
                f"{keys.METRIC_CALIBRATION_BA_PREFIX}{m}": e["balanced_accuracy"]
                for m, e in thresholds["signals"].items()
            }
        )
        log_artifacts_atomically({keys.ARTIFACT_CALIBRATION: thresholds})
        from ema.training.packaging import package_classifier  # torch: only when a model is logged

        with package_classifier(classifier, members.pixels()) as package:
            version = log_and_register(
                package,
                name=self.model_name,
                alias=keys.CALIBRATION_ALIAS,
                tags={
                    keys.TAG_ROLE: "calibration",
                    keys.TAG_CACHE_KEY: self.cache_key,
                    keys.TAG_RECIPE: recipe_to_json(self.target.recipe),
                    keys.TAG_CALIBRATION_K: str(self.k),
                    keys.TAG_CALIBRATION_SEED: str(self.cal_seed),
                    keys.TAG_CORRUPTION: self.corruption,
                    keys.TAG_DATA_FINGERPRINT: self.clean.fingerprint,
                },
            )
        set_tags({keys.TAG_CALIBRATION_VERSION: version.uri})
        return CalibrationOutcome(version, thresholds, cached=False)

    @property
    def run_name(self) -> str:
        return f"calibrate k={self.k} {self.target.label}"


def ensure_calibration(
    target: Target,
    *,
    k: int = 100,
    cal_seed: int = 0,
    model_name: str = keys.CALIBRATION_MODEL_NAME,
    progress: bool = True,
) -> CalibrationOutcome:
    """The calibration matching the target's recipe and calibration data, trained only when not cached."""
    return ensure_plan(
        CalibrationPlan.for_target(target, k=k, cal_seed=cal_seed, model_name=model_name), progress=progress
    )


def ensure_plan(plan: CalibrationPlan, *, progress: bool = True) -> CalibrationOutcome:
    """Reuse the plan's cached calibration, or train it in a run of its own.

    A plan made before its calibration was trained (by an earlier call with the same plan)
    looks the registry up again rather than training a second copy.
    """
    cached = plan.cached or find_cached_version(plan.model_name, plan.cache_key)
    if cached is not None:
        return dataclasses.replace(plan, cached=cached).reuse()
    with start_run(plan.run_name):
        return plan.train(progress=progress)


def calibrate(
    model_uri: str,
    *,
    k: int = 100,
    cal_seed: int = 0,
    model_name: str = keys.CALIBRATION_MODEL_NAME,
    recipe_file: str | None = None,
    progress: bool = True,
) -> CalibrationOutcome:
    """``ema calibrate``: one run that either trains the calibration or records the cache hit it reused."""
    with start_run(f"calibrate k={k} {model_uri}"):
        check_quality(k)
        check_model_name("calibration name", model_name)
        target = resolve_target(model_uri, recipe_file=recipe_file)
        set_tags({keys.TAG_RUN_NAME: f"calibrate k={k} {target.label}"})
        plan = CalibrationPlan.for_target(target, k=k, cal_seed=cal_seed, model_name=model_name)
        if plan.cached is None:
            return plan.train(progress=progress)
        outcome = plan.reuse()
        log_params(plan.params())
        set_tags({keys.TAG_CACHE: "hit", keys.TAG_CALIBRATION_VERSION: outcome.version.uri})
        log_artifacts_atomically({keys.ARTIFACT_CALIBRATION: outcome.thresholds})
        set_alias(outcome.version, keys.CALIBRATION_ALIAS)
        return outcome
