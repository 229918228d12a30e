"""Train the calibration model f_cal with the target's recipe and pick EMA's thresholds; cached.

The cache is the model registry: a calibration version tagged with its cache key (recipe,
calibration data, k, seed, corruption). Processes that need the same calibration at once
train it once (:func:`ema.tracking.single_flight.single_flight`); a cached version whose
``calibration.json`` can no longer be read is trained again, and the run says why.

The ``calibration`` alias is moved only by an explicit ``ema calibrate`` (:func:`calibrate`):
audits, the demo, power analyses and grids calibrate through :func:`ensure_plan`, which
registers without an alias, so a setting that relies on ``@calibration`` never sees it move
under it because someone audited with another k.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from ema.auditors.ema import EMAAuditor
from ema.data.arrays import ArraySet, class_count
from ema.data.corruption import DEFAULT_CORRUPTION, apply_corruption, check_quality, corruption_as_applied
from ema.errors import InputError
from ema.inputs import listed_names, text_columns
from ema.oracle import Oracle
from ema.run_warnings import FOR_THE_RECORD
from ema.signals import SIGNALS
from ema.tracking import keys
from ema.tracking.helper_cache import TrustedEntry, record_entry
from ema.tracking.registry import RegisteredVersion, log_and_register, set_alias
from ema.tracking.runs import (
    MissingArtifact,
    log_artifacts_atomically,
    log_metrics,
    log_params,
    read_json_artifact,
    set_tags,
    start_run,
)
from ema.tracking.single_flight import single_flight
from ema.training.clones import CloneRecipe, package_trained
from ema.training.devices import CPU, describe_device, resolve_device
from ema.training.recipes import Recipe, proba_over_classes, recipe_to_json
from ema.validation import check_model_name, check_seed, redact_url, short_hash
from ema.workflows.cached_models import helper_oracle, usable_entry
from ema.workflows.target import Target, resolve_target

#: Tag values of ``ema.calibration_cache``; a stale cache says ``stale: <why>``.
CACHE_HIT, CACHE_MISS, CACHE_STALE = "hit", "miss", "stale"
#: Longest reason kept in a stale tag.
MAX_REASON = 400
#: Rows of each class a calibration file should hold at least: the calibration model trains on one half of them and
#: EMA's thresholds are picked on the other (one per class with ``--threshold-mode per-class``), so a class of fewer
#: leaves each half at most a handful (even the demo's 50 + 50 per class make per-class thresholds noisy).
MIN_CALIBRATION_PER_CLASS = 10


@dataclass(frozen=True)
class CalibrationOutcome:
    """A calibration version (an entry the auditor made), its thresholds (``calibration.json``), how the cache answered.

    ``cache`` is ``hit``, ``miss``, or ``stale: <reason>`` when a cached version was found
    but could not be used, and was trained again.
    """

    entry: TrustedEntry
    thresholds: dict
    cached: bool
    cache: str = ""

    def __post_init__(self) -> None:
        if not self.cache:
            object.__setattr__(self, "cache", CACHE_HIT if self.cached else CACHE_MISS)

    @property
    def version(self) -> RegisteredVersion:
        return self.entry.version


#: Why a small class matters, and the remedy, for the workbench's own calibration set.
OWN_CALIBRATION_ADVICE = (
    "the calibration model trains on one half of the set and EMA's thresholds are picked on the other (one per "
    "class with --threshold-mode per-class), so such a class is barely learnt and its thresholds rest on a handful "
    "of rows; give --calibration-file FILE with more of each class"
)
#: The same for a supplied calibration model's members or non-members (``--calibration-members``, ``-nonmembers``).
SUPPLIED_CALIBRATION_ADVICE = (
    "EMA's thresholds are picked on the supplied model's members and non-members (one per class with "
    "--threshold-mode per-class), so such a class's thresholds rest on a handful of rows; give "
    "--calibration-members and --calibration-nonmembers files with more of each class"
)


def warn_small_classes(calibration: ArraySet, described: str, advice: str = OWN_CALIBRATION_ADVICE) -> None:
    """Warn, for the record, of the classes of a calibration set (``described`` in words) with fewer than
    :data:`MIN_CALIBRATION_PER_CLASS` rows; ``advice`` says why that matters and what to give instead.

    A calibration file without a class the model outputs is refused (the in-process engine); a class
    of a few rows only warns: the audit still runs, and its record says how little the class rests on.
    """
    classes, counts = np.unique(calibration.y, return_counts=True)
    small = [f"class {c}: {n}" for c, n in zip(classes, counts, strict=True) if n < MIN_CALIBRATION_PER_CLASS]
    if small:
        logging.getLogger(__name__).warning(
            "%s: expected at least %d rows of each class, got fewer in %d of %d classes (%s): %s",
            described,
            MIN_CALIBRATION_PER_CLASS,
            len(small),
            classes.size,
            ", ".join(small[:8]) + (f" and {len(small) - 8} more" if len(small) > 8 else ""),
            advice,
            extra=FOR_THE_RECORD,
        )


def warn_text_left_out(calibration: ArraySet, recipe: Recipe | CloneRecipe, described: str) -> None:
    """Warn, for the record (every audit that uses the model, trained now or found in the cache), of the text columns
    of a calibration set (``described`` in words) that a recipe of ours leaves out of the calibration model."""
    text = text_columns(calibration.x) if calibration.kind == "table" else np.zeros(0, dtype=bool)
    if text.any() and not getattr(recipe, "takes_text", False):
        logging.getLogger(__name__).warning(
            "%s: %d column(s) of text left out of the calibration model, as the recipe that trains it takes numbers: "
            "%s; a calibration model that sees them (a clone of a scikit-learn target, or --calibration-model) "
            "behaves more like the target",
            described, int(text.sum()), listed_names([f for f, t in zip(calibration.features, text, strict=True) if t]),
            extra=FOR_THE_RECORD,
        )  # fmt: skip


def calibration_halves(calibration: ArraySet, seed: int) -> tuple[ArraySet, ArraySet]:
    """Split the calibration set in two seeded halves: f_cal's training data, and held-out data."""
    order = np.random.default_rng(seed).permutation(len(calibration))
    half = len(calibration) // 2
    return calibration.take(order[:half], "calibration-train"), calibration.take(order[half:], "calibration-test")


def calibration_cache_key(
    recipe: Recipe | CloneRecipe, calibration: ArraySet, k: int, cal_seed: int, corruption: str = DEFAULT_CORRUPTION
) -> str:
    """Same recipe, same clean calibration data, same quality k, seed and corruption: same calibration model.

    The class count (the calibration model's outputs) is part of the key although the data
    fixes it: models cached before it followed the data (ten outputs whatever the classes) are
    not found under it.
    """
    return short_hash(
        {
            "recipe": recipe.to_dict(),
            "data": calibration.fingerprint,
            "classes": class_count(calibration.y),
            "k": k,
            "cal_seed": cal_seed,
            "corruption": corruption,
        }
    )


def balanced_accuracy_metrics(thresholds: dict) -> dict[str, float]:
    """The metrics ``calibration_ba_<signal>`` of a ``calibration.json`` (validated thresholds): each signal's
    balanced accuracy on the calibration model's halves, as a run that trains or reuses the calibration logs them."""
    return {f"{keys.METRIC_CALIBRATION_BA_PREFIX}{m}": e["balanced_accuracy"] for m, e in thresholds["signals"].items()}


def fit_thresholds(classifier, members: ArraySet, nonmembers: ArraySet, n_classes: int | None = None) -> EMAAuditor:
    """Fit every metric's thresholds on a calibration model's members and non-members.

    With ``n_classes``, a scikit-learn model has a column for each of them, whatever classes its half
    held (:func:`~ema.training.recipes.proba_over_classes`: a class of two samples may fall in one half).
    """

    def proba(data: ArraySet) -> np.ndarray:
        if n_classes is None:
            return classifier.predict_proba(data.model_inputs())
        return proba_over_classes(classifier, data.model_inputs(), n_classes)

    return EMAAuditor(signals=tuple(SIGNALS)).calibrate(proba(members), members.y, proba(nonmembers), nonmembers.y)


@dataclass(frozen=True, kw_only=True)
class CalibrationPlan:
    """What a calibration is made of, and the registered version it may already have."""

    target: Target
    clean: ArraySet
    k: int
    cal_seed: int
    cache_key: str
    model_name: str
    cached: TrustedEntry | None
    corruption: str = DEFAULT_CORRUPTION

    @classmethod
    def for_target(
        cls,
        target: Target,
        *,
        k: int,
        cal_seed: int,
        model_name: str,
        corruption: str = DEFAULT_CORRUPTION,
        like: ArraySet | None = None,
    ) -> CalibrationPlan:
        """The plan of ``target``'s calibration set, refused when ``like`` (an audit's query) is of another layout:
        a calibration model trained on the preset's digits would not take a colour model's or a table's inputs.
        A class of fewer than :data:`MIN_CALIBRATION_PER_CLASS` rows is warned of (:func:`warn_small_classes`).

        Raises
        ------
        InputError
            Naming both layouts and ``--calibration-file``.
        """
        clean = target.calibration_set()
        if like is not None and clean.layout != like.layout:
            raise InputError(
                f"expected a calibration set like the query ({like.describe()}), got the "
                f"{target.describe_calibration()} ({clean.describe()}): give --calibration-file FILE with samples "
                "like the query's, of every class the model outputs"
            )
        warn_small_classes(clean, target.describe_calibration())
        warn_text_left_out(clean, target.require_recipe(), target.describe_calibration())
        cache_key = calibration_cache_key(target.require_recipe(), clean, k, cal_seed, corruption)
        cached = usable_entry(model_name, cache_key, target)
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
            keys.PARAM_CORRUPTION: corruption_as_applied(self.corruption, self.clean.kind),
            keys.PARAM_MODEL_URI: redact_url(self.target.model_uri or self.target.model_url),
            keys.PARAM_RECIPE: recipe_to_json(self.target.require_recipe())[:500],
            keys.PARAM_DEVICE: describe_device(self.target.device),
        }

    def reuse(self) -> CalibrationOutcome:
        """The plan's cached version with its thresholds; raises MissingArtifact if they cannot be read."""
        return self.load(self.cached)

    def load(self, entry: TrustedEntry) -> CalibrationOutcome:
        """A registered calibration with its thresholds.

        Raises
        ------
        MissingArtifact
            If the version's run or its ``calibration.json`` is gone, or holds no thresholds.
        """
        run_id = entry.version.run_id
        thresholds = read_json_artifact(run_id, keys.ARTIFACT_CALIBRATION)
        if not isinstance(thresholds.get("signals"), dict):
            raise MissingArtifact(f"{keys.ARTIFACT_CALIBRATION} of run {run_id} holds no thresholds")
        return CalibrationOutcome(entry, thresholds, cached=True)

    def halves(self) -> tuple[ArraySet, ArraySet]:
        """f_cal's training half (members) and held-out half (non-members), at quality k."""
        return calibration_halves(self.corrupted(), self.cal_seed)

    def corrupted(self) -> ArraySet:
        """The whole calibration set at quality k under the plan's corruption protocol."""
        return apply_corruption(self.corruption, self.clean, self.k, self.cal_seed)

    def train(self, *, progress: bool, alias: str | None = None, cache: str = CACHE_MISS) -> CalibrationOutcome:
        """Train f_cal, fit thresholds and register the model, logging into the active run.

        Parameters
        ----------
        alias
            The alias to point at the new version; None (audits) leaves every alias where it is.
        cache
            Why it is trained, for the run's ``ema.calibration_cache`` tag: ``miss`` or ``stale: <reason>``.
        """
        log_params(self.params())
        set_tags({keys.TAG_CACHE: cache})
        members, nonmembers = self.halves()
        n_classes = class_count(self.clean.y)  # every class of the calibration set, whatever its half holds
        classifier = self.target.require_recipe().fit(
            members.model_inputs(), members.y, progress=progress, device=self.target.device, n_classes=n_classes
        )
        thresholds = fit_thresholds(classifier, members, nonmembers, n_classes).to_dict()
        log_metrics(balanced_accuracy_metrics(thresholds))
        log_artifacts_atomically({keys.ARTIFACT_CALIBRATION: thresholds})
        with package_trained(classifier, members.x) as package:
            version = log_and_register(
                package,
                name=self.model_name,
                alias=alias,
                tags={
                    keys.TAG_ROLE: "calibration",
                    keys.TAG_CACHE_KEY: self.cache_key,
                    keys.TAG_RECIPE: recipe_to_json(self.target.require_recipe()),
                    keys.TAG_CALIBRATION_K: str(self.k),
                    keys.TAG_CALIBRATION_SEED: str(self.cal_seed),
                    keys.TAG_CORRUPTION: self.corruption,
                    keys.TAG_DATA_FINGERPRINT: self.clean.fingerprint,
                },
            )
        set_tags({keys.TAG_CALIBRATION_VERSION: version.uri})
        return CalibrationOutcome(record_entry(version, self.cache_key), thresholds, cached=False, cache=cache)

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


class _CacheLookup:
    """Finds a plan's cached calibration for :func:`single_flight`, remembering why a found one was unusable."""

    def __init__(self, plan: CalibrationPlan) -> None:
        self.plan, self.stale, self._asked = plan, "", False

    def find(self) -> CalibrationOutcome | None:
        """The usable cached calibration, or None; the first look reuses the plan's own lookup."""
        entry = self.plan.cached if not self._asked else None
        if entry is None:
            entry = usable_entry(self.plan.model_name, self.plan.cache_key, self.plan.target)
        self._asked = True
        if entry is None:
            return None
        try:
            return self.plan.load(entry)
        except MissingArtifact as exc:
            reason = f"{CACHE_STALE}: version {entry.version.version} of {entry.version.name}: {exc}"
            self.stale = reason[:MAX_REASON]
            return None

    @property
    def why_train(self) -> str:
        return self.stale or CACHE_MISS


def ensure_plan(plan: CalibrationPlan, *, progress: bool = True) -> CalibrationOutcome:
    """Reuse the plan's cached calibration, or train it in a run of its own.

    A plan made before its calibration was trained (by an earlier call with the same plan)
    looks the registry up again rather than training a second copy; processes that miss
    the same calibration at once train it once, the others wait and reuse it. A cached
    version whose thresholds cannot be read is trained again (run tag
    ``ema.calibration_cache`` = ``stale: <reason>``). Moves no alias.
    """
    lookup = _CacheLookup(plan)

    def build() -> CalibrationOutcome:
        with start_run(plan.run_name):
            return plan.train(progress=progress, cache=lookup.why_train)

    outcome, _ = single_flight(plan.model_name, plan.cache_key, find=lookup.find, build=build)
    return outcome


@dataclass(frozen=True)
class CalibrationHelper:
    """A calibration model as the calibrated auditor's transfer route reads it: the model, the samples it was and was
    not trained on, and the run tags that say which model it is."""

    model: Oracle
    members: ArraySet
    nonmembers: ArraySet
    tags: dict[str, str]


def planned_helper(plan: CalibrationPlan, *, progress: bool = True) -> CalibrationHelper:
    """The plan's calibration model (cached, or trained now) with its two halves."""
    outcome = ensure_plan(plan, progress=progress)
    members, nonmembers = plan.halves()
    return CalibrationHelper(
        helper_oracle(outcome.entry, plan.target), members, nonmembers, outcome_tags(outcome, plan)
    )


def outcome_tags(outcome: CalibrationOutcome, plan: CalibrationPlan) -> dict[str, str]:
    """The run tags that say which of the plan's calibration models an audit used, and whether it was cached."""
    return {
        keys.TAG_CACHE: outcome.cache,
        keys.TAG_CALIBRATION_VERSION: outcome.version.uri,
        keys.TAG_CALIBRATION_SOURCE: plan.target.calibration_source,
    }


def calibrate(
    model_uri: str,
    *,
    k: int = 100,
    cal_seed: int = 0,
    model_name: str = keys.CALIBRATION_MODEL_NAME,
    recipe_file: str | None = None,
    progress: bool = True,
    device: str = CPU,
) -> CalibrationOutcome:
    """``ema calibrate``: one run that either trains the calibration or records the cache hit it reused.

    The one place that moves the ``calibration`` alias: to the version it trained or reused.
    The calibration model trains on ``device`` (``auto``, ``cpu``, ``cuda[:N]``), resolved before the run starts.
    """
    check_seed("cal_seed", cal_seed)
    device = resolve_device(device)
    with start_run(f"calibrate k={k} {model_uri}"):
        check_quality(k)
        check_model_name("calibration name", model_name)
        target = resolve_target(model_uri, recipe_file=recipe_file, device=device)
        set_tags({keys.TAG_RUN_NAME: f"calibrate k={k} {target.label}"})
        plan = CalibrationPlan.for_target(target, k=k, cal_seed=cal_seed, model_name=model_name)
        lookup = _CacheLookup(plan)
        outcome, built = single_flight(
            plan.model_name,
            plan.cache_key,
            find=lookup.find,
            build=lambda: plan.train(progress=progress, alias=keys.CALIBRATION_ALIAS, cache=lookup.why_train),
        )
        if built:
            return outcome
        log_params(plan.params())
        set_tags({keys.TAG_CACHE: CACHE_HIT, keys.TAG_CALIBRATION_VERSION: outcome.version.uri})
        log_metrics(balanced_accuracy_metrics(outcome.thresholds))
        log_artifacts_atomically({keys.ARTIFACT_CALIBRATION: outcome.thresholds})
        set_alias(outcome.version, keys.CALIBRATION_ALIAS)
        return outcome
