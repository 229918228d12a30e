"""Remove a forget set from a registered model by some method, and register the result as a new version.

The new version of the same registered model records its lineage, so that an audit knows the
forget set is no longer a member: ``ema.role`` = ``unlearned``, ``ema.unlearned_from`` (the
version it came from), ``ema.unlearn.method`` and ``ema.unlearn.spec``, ``ema.forget`` and
``ema.forget_fingerprint``, and ``ema.data_fingerprint`` of the retained data. The run logs
the forget set as an input dataset and as ``forget.npz``, from which the member reference is
rebuilt (:func:`ema.workflows.references.training_data`). The target's recipe, data source
and split seed are carried over, so calibration models are shared with the target.

Unlike audits, unlearning needs the training data and, for the approximate methods, the
target's weights: it is the data owner's side of a removal request, not the auditor's.
"""

from __future__ import annotations

import dataclasses
import json
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ema.auditors.reference_gates import chance_accuracy
from ema.data.arrays import ArraySet
from ema.data.files import read_set, write_set
from ema.data.limits import DEFAULT_MAX_QUERY
from ema.data.splits import QUERY_NAMES
from ema.data.tables import DEFAULT_LABEL_COLUMN
from ema.errors import EMAError, InputError
from ema.inputs import InputSpec
from ema.oracle.model_info import declared_input_spec
from ema.tracking import keys
from ema.tracking.helper_cache import find_entry, record_entry
from ema.tracking.registry import MODELS_URI, RegisteredVersion, log_and_register
from ema.tracking.runs import log_artifacts_atomically, log_batch, log_dataset, run_metrics, start_run
from ema.tracking.single_flight import single_flight
from ema.training.clones import package_trained
from ema.training.devices import CPU, describe_device, resolve_device
from ema.training.helper_loading import load_helper
from ema.training.recipes import Classifier, SklearnRecipe, TorchRecipe, recipe_to_json
from ema.training.unlearn_spec import DEFAULT_RETAIN_MARGIN, UnlearnSpec
from ema.validation import check_alias, check_finite, check_positive_int, short_hash
from ema.workflows.audit_in_process import in_model_columns
from ema.workflows.references import contains_all, training_data, without_query
from ema.workflows.target import Target, resolve_target
from ema.workflows.unlearn_methods import resolved_spec, run_method

#: How missing ``--forget`` and ``--retain`` files are named (:func:`ema.data.files.read_set`).
FORGET_ROLE = "forget file (--forget)"
RETAIN_ROLE = "retain file (--retain)"


@dataclass(frozen=True, kw_only=True)
class UnlearnConfig:
    """What ``ema unlearn`` is asked to do.

    Attributes
    ----------
    model_uri : str
        A registered version, ``models:/NAME@ALIAS`` or ``models:/NAME/VERSION``; the result is a
        new version of ``NAME``.
    forget : str
        A training fold of the target's splits (``M1`` .. ``M5``) or a set file (``.npz``, ``.csv``,
        ``.parquet``) of samples to remove.
    spec : UnlearnSpec
        The method and its hyperparameters.
    alias : str or None
        Pointed at the new version; None points none (a grid's versions).
    retain_file : str, optional
        The retained data, for a model whose training data is not recorded.
    min_retain_accuracy : float, optional
        The accuracy on the retained data below which the result is refused and nothing is
        registered; None: chance (:func:`~ema.auditors.reference_gates.chance_accuracy`) plus
        :data:`DEFAULT_RETAIN_MARGIN`.
    max_query : int
        The most images the forget and ``retain_file`` sets (and a logged training set) may hold,
        checked from their headers before they are read.
    label_column : str
        The label column of the forget and ``retain_file`` sets when they are tables.
    device : str
        Where torch trains: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``, resolved before the run
        starts (:func:`ema.training.devices.resolve_device`) and recorded as its ``device`` param.
    """

    model_uri: str
    forget: str
    spec: UnlearnSpec
    alias: str | None = keys.UNLEARNED_ALIAS
    retain_file: str | None = None
    min_retain_accuracy: float | None = None
    max_query: int = DEFAULT_MAX_QUERY
    label_column: str = DEFAULT_LABEL_COLUMN
    device: str = CPU

    @property
    def forget_name(self) -> str:
        """The forget set's name in runs and tags: the fold, or the file's name."""
        return self.forget if self.forget in QUERY_NAMES else Path(self.forget).name

    def validate(self) -> UnlearnConfig:
        """Check the options before any work; returns ``self``."""
        if not isinstance(self.model_uri, str) or not MODELS_URI.match(self.model_uri):
            raise InputError(
                "expected a registered model models:/NAME@ALIAS or models:/NAME/VERSION (the result is its new "
                f"version), got {self.model_uri!r}"
            )
        if self.alias is not None:
            check_alias("alias", self.alias)
        if self.min_retain_accuracy is not None:
            check_finite("min retain accuracy", self.min_retain_accuracy, minimum=0.0)
            if self.min_retain_accuracy > 1:
                raise InputError(f"expected min retain accuracy in [0, 1], got {self.min_retain_accuracy!r}")
        check_positive_int("max query", self.max_query)
        return self


@dataclass(frozen=True)
class UnlearnOutcome:
    """The unlearn run, the version it registered and the one it came from, and what the run measured.

    ``files``: the version's files as the auditor's own run recorded them (checked), which an audit
    scores as weights rebuilt with the source's recipe (:attr:`ema.workflows.target.Target.own_files`).
    """

    run_id: str
    version: RegisteredVersion
    source: RegisteredVersion
    spec: UnlearnSpec
    metrics: dict[str, float]
    files: Path


def unlearn(config: UnlearnConfig, *, progress: bool = True) -> UnlearnOutcome:
    """Remove the forget set from the model by the configured method; register the result with its lineage.

    Every check runs inside the unlearn run, before any training, so bad input leaves a
    FAILED run and registers nothing. The new version carries its cache key
    (:func:`unlearn_cache_key`, recorded as the auditor's own entry), so that
    :func:`unlearn_cached` (``ema grid unlearning``) reuses it instead of unlearning again.

    Raises
    ------
    EMAError
        If the model is not a registered version, the forget set is empty or not (wholly) in the
        training data, the training data is neither recorded nor given (``retain_file``), or the
        result's accuracy on the retained data is below the floor (``config.min_retain_accuracy``).
    """
    device = resolve_device(config.device)
    with start_run(f"unlearn {config.spec.method} {config.forget_name}") as run:
        config.validate()
        target = resolve_target(config.model_uri, device=device)
        forget = _forget_set(target, config.forget, config.max_query, config.label_column)
        retain = _retained_data(target, forget, config.retain_file, config.max_query, config.label_column)
        spec = resolved_spec(config.spec, target)
        log_batch(
            tags={keys.TAG_RUN_NAME: f"unlearn {spec.method} {config.forget_name} {target.label}"},
            params={
                **{f"{keys.PARAM_UNLEARN_PREFIX}{k}": v for k, v in spec.to_dict().items()},
                keys.PARAM_MODEL_URI: target.model_uri,
                keys.PARAM_FORGET: config.forget_name,
                keys.PARAM_FORGET_FINGERPRINT: forget.fingerprint,
                keys.PARAM_N_FORGET: len(forget),
                keys.PARAM_N_RETAIN: len(retain),
                keys.PARAM_DEVICE: describe_device(device),
            },
        )
        log_dataset(forget, name=f"forget {config.forget_name}", context="forget")
        # MLflow keeps one record per dataset name and digest in an experiment: a file gets a name of its own
        source = str(Path(config.retain_file).resolve()) if config.retain_file else None
        log_dataset(retain, name=f"retained {source or ''}".strip(), context="training", source=source)
        kept, removed = (in_target_columns(target, data) for data in (retain, forget))
        classifier, seconds = run_method(target, spec, kept, removed, progress)
        held_out = target.splits().held_out  # a model of other inputs than its splits' (no lineage): not measured
        metrics = {
            keys.METRIC_RETAIN_ACCURACY: accuracy(classifier, kept),
            keys.METRIC_FORGET_ACCURACY: accuracy(classifier, removed),
            keys.METRIC_TEST_ACCURACY: accuracy(classifier, held_out) if held_out.layout == kept.layout else math.nan,
            keys.METRIC_UNLEARN_SECONDS: seconds,
        }
        log_batch(metrics=metrics)
        _check_retained(metrics[keys.METRIC_RETAIN_ACCURACY], kept, spec, config.min_retain_accuracy)
        log_artifacts_atomically({keys.ARTIFACT_FORGET: _npz_bytes(forget)})
        cache_key = unlearn_cache_key(target, forget, spec, retain.fingerprint if config.retain_file else None)
        with package_trained(classifier, kept.x) as package:
            version = log_and_register(
                package,
                name=target.version.name,
                alias=config.alias,
                tags={
                    **_lineage_tags(target, spec, config.forget_name, forget, retain, metrics),
                    keys.TAG_CACHE_KEY: cache_key,
                },
            )
        entry = record_entry(version, cache_key)
    return UnlearnOutcome(run.info.run_id, version, target.version, spec, metrics, entry.path)


#: What an unlearn run measures, logged as its metrics (and, formatted, as the new version's tags).
UNLEARN_METRICS = (
    keys.METRIC_RETAIN_ACCURACY,
    keys.METRIC_FORGET_ACCURACY,
    keys.METRIC_TEST_ACCURACY,
    keys.METRIC_UNLEARN_SECONDS,
)


def unlearn_cached(config: UnlearnConfig, *, progress: bool = True) -> tuple[UnlearnOutcome, bool]:
    """The version :func:`unlearn` makes of ``config``, reused from the registry when it (``ema unlearn`` too) made it.

    The cache key (the version tag ``ema.cache_key``) holds everything that determines the
    result: the source version (name, number and the run that logged it), the forget set's
    fingerprint, the method with every hyperparameter resolved (seed included), and the
    ``retain_file``'s fingerprint when one is given. Processes that miss the same key at once
    unlearn once (:func:`ema.tracking.single_flight.single_flight`). A reused version keeps
    its own unlearn run, metrics and time; no alias is moved, so ``config.alias`` must be None.

    Returns
    -------
    (UnlearnOutcome, bool)
        The outcome, and whether the registry already held the version.

    Raises
    ------
    EMAError
        As :func:`unlearn`; and for ``config.alias`` other than None.
    """
    if config.alias is not None:
        raise InputError(
            f"expected no alias for a cached unlearned version (a reused one moves none), got {config.alias!r}"
        )
    config.validate()
    target = resolve_target(config.model_uri)
    spec = resolved_spec(config.spec, target)
    forget = _forget_set(target, config.forget, config.max_query, config.label_column)
    retain = (
        read_set(config.retain_file, role=RETAIN_ROLE, max_images=config.max_query, label_column=config.label_column)
        if config.retain_file
        else None
    )
    cache_key = unlearn_cache_key(target, forget, spec, retain.fingerprint if retain is not None else None)
    name = target.version.name

    def find() -> UnlearnOutcome | None:
        # used only if its weights load into the source's architecture: an audit scores them so, never its code
        entry = find_entry(name, cache_key, read=lambda entry: load_helper(target.require_recipe(), entry.path))
        version = entry.version if entry is not None else None
        metrics = run_metrics(version.run_id) if version is not None and version.run_id else {}
        if version is None or not set(UNLEARN_METRICS) <= set(metrics):
            return None
        stored = UnlearnSpec(**json.loads(version.tags[keys.TAG_UNLEARN_SPEC]))
        found = {k: metrics[k] for k in UNLEARN_METRICS}
        return UnlearnOutcome(version.run_id, version, target.version, stored, found, entry.path)

    outcome, built = single_flight(name, cache_key, find=find, build=lambda: unlearn(config, progress=progress))
    return outcome, not built


def unlearn_cache_key(target: Target, forget: ArraySet, spec: UnlearnSpec, retain_fingerprint: str | None) -> str:
    """The key of an unlearned version: source version, forget set, resolved method and hyperparameters, --retain.

    ``retain_fingerprint`` is that of the ``--retain`` file, None when the recorded training data is kept.
    ``ema unlearn`` and ``ema grid unlearning`` key a version alike, so each reuses what the other made.
    """
    return short_hash(
        {
            "source": target.version.uri,
            "source_run": target.version.run_id,
            "forget": forget.fingerprint,
            "spec": spec.to_dict(),
            "retain": retain_fingerprint,
        }
    )


def in_target_columns(target: Target, data: ArraySet) -> ArraySet:
    """A table in the columns the target takes, by name (those its clone is fitted on, else its signature's), as an
    audit lays its query out: a retained file's columns in another order, or beside others, train the right features.
    """
    if data.kind != "table":
        return data
    columns = getattr(target.recipe, "columns", None) or getattr(declared_input_spec(target.model_uri), "columns", None)
    return in_model_columns(data, InputSpec(dtype="float64", columns=columns)) if columns else data


def accuracy(classifier: Classifier, data: ArraySet) -> float:
    """Share of ``data`` the classifier labels right."""
    return float((classifier.predict_proba(data.model_inputs()).argmax(1) == data.y).mean())


def _check_retained(accuracy: float, retain: ArraySet, spec: UnlearnSpec, floor: float | None) -> None:
    """Refuse, before anything is registered, a result that lost the data it was meant to keep.

    ``floor`` None: chance accuracy on the retained data plus :data:`DEFAULT_RETAIN_MARGIN`.
    """
    if floor is None:
        chance = chance_accuracy(retain.y)
        floor, why = chance + DEFAULT_RETAIN_MARGIN, f"chance {chance:.3f} + {DEFAULT_RETAIN_MARGIN}"
        advice = "the model lost what it learned; lower --lr or --epochs, or pass --min-retain-accuracy to accept it"
    else:  # the user's own floor: the model may well have kept what it learned
        why, advice = "--min-retain-accuracy", "lower --min-retain-accuracy to accept it"
    if accuracy < floor:
        settings = f" (lr {spec.lr:g}, epochs {spec.epochs})" if spec.lr is not None else ""
        raise EMAError(
            f"expected an accuracy on the retained data of at least {floor:.3f} ({why}), got {accuracy:.3f} after "
            f"{spec.method}{settings}: nothing was registered; {advice}"
        )


def _forget_set(target: Target, forget: str, max_images: int, label_column: str) -> ArraySet:
    """A named set of the target's splits, or a file of at most ``max_images`` samples (a table's labels in
    ``label_column``).
    """
    if forget in QUERY_NAMES:
        return target.splits().query(forget)
    return read_set(forget, role=FORGET_ROLE, max_images=max_images, label_column=label_column)


def _retained_data(
    target: Target, forget: ArraySet, retain_file: str | None, max_images: int, label_column: str
) -> ArraySet:
    """The training data minus the forget set, or ``retain_file``; refuses a forget set that is not training data."""
    known = training_data(target, max_images=max_images)
    if known is None and retain_file is None:
        raise InputError(
            f"{target.label} has no recorded training data (no `ema train` lineage, no logged training .npz): "
            "pass --retain FILE (.npz, .csv or .parquet) with the data to keep"
        )
    if known is not None:
        outside = int((~contains_all(known.data, forget)).sum())
        if outside:
            raise InputError(
                f"expected a forget set within the training data of {target.label}, got {forget.name} with "
                f"{outside} of {len(forget)} samples not in it ({known.description})"
            )
    if retain_file is None:
        return dataclasses.replace(without_query(known.data, forget), name="retained")
    retain = read_set(retain_file, role=RETAIN_ROLE, max_images=max_images, label_column=label_column)
    overlap = int(contains_all(forget, retain).sum())
    if overlap:
        raise InputError(
            f"expected --retain without the forget set, got {retain_file} holding {overlap} of its samples"
        )
    return retain


def _npz_bytes(data: ArraySet) -> bytes:
    with tempfile.TemporaryDirectory() as folder:
        return write_set(data, Path(folder) / keys.ARTIFACT_FORGET).read_bytes()


def _lineage_tags(
    target: Target, spec: UnlearnSpec, forget_name: str, forget: ArraySet, retain: ArraySet, metrics: dict[str, float]
) -> dict[str, str]:
    """The new version's tags: the target's recipe and data, and what was removed, how, with what result.

    A target reached through a clone of its own architecture has no recipe to record (a clone's
    description is a cache key, not a recipe): the new version, of the same flavor, is cloned in turn.
    The owner's files the target was trained on in place of folds (``ema train --fold``) are kept,
    so that the new version's splits, and its retained data, are the target's.
    """
    recipe = target.version.tags.get(keys.TAG_RECIPE)
    if recipe is None and isinstance(target.recipe, (TorchRecipe, SklearnRecipe)):
        recipe = recipe_to_json(target.recipe)
    return {
        keys.TAG_ROLE: keys.ROLE_UNLEARNED,
        **({keys.TAG_RECIPE: recipe} if recipe is not None else {}),
        keys.TAG_DATA_SOURCE: target.data,
        keys.TAG_DATA_SEED: str(target.data_seed),
        **({keys.TAG_DATA_ROOT: str(target.data_root)} if target.data_root else {}),
        **target.data_image.to_tags(keys.TAG_DATA_IMAGE_SIZE, keys.TAG_DATA_CHANNELS),
        **{
            name: value
            for name, value in target.version.tags.items()
            if name.startswith((keys.TAG_DATA_FOLD_PREFIX, keys.TAG_DATA_FOLD_FILE_PREFIX))
        },
        keys.TAG_DATA_FINGERPRINT: retain.fingerprint,
        keys.TAG_UNLEARNED_FROM: target.version.version,
        keys.TAG_UNLEARN_METHOD: spec.method,
        keys.TAG_UNLEARN_SPEC: spec.to_json(),
        keys.TAG_FORGET: forget_name,
        keys.TAG_FORGET_FINGERPRINT: forget.fingerprint,
        **{f"{keys.TAG_UNLEARN_PREFIX}{name}": f"{value:.6g}" for name, value in metrics.items()},
    }
