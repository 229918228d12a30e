"""Train a target model on the training folds and register it with its recipe."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ema.data.arrays import ArraySet
from ema.data.files import read_set, resolved_if_present
from ema.data.presets import DEFAULT_DATA, FILE_SOURCE, load_splits
from ema.data.sources import ImageFormat
from ema.data.tables import DEFAULT_LABEL_COLUMN
from ema.errors import InputError
from ema.tracking import keys
from ema.tracking.registry import RegisteredVersion, log_and_register
from ema.tracking.runs import log_dataset, log_metrics, log_params, start_run
from ema.training.devices import CPU, describe_device, resolve_device
from ema.training.recipes import (
    DEFAULT_TABLE_RECIPE,
    Classifier,
    Recipe,
    SklearnRecipe,
    TorchRecipe,
    load_recipe,
    recipe_from_dict,
    recipe_to_json,
)
from ema.training.spec import TrainSpec
from ema.validation import check_alias, check_model_name

__all__ = ["FILE_SOURCE", "TrainOutcome", "load_recipe", "recipe_for", "recipe_with", "train_target"]


def recipe_with(recipe_file: str, overrides: dict) -> Recipe:
    """The recipe named or stored in ``recipe_file`` (``paper-medical``, a file), a torch recipe's fields
    replaced by ``overrides`` (the training options given on the command line).

    Raises
    ------
    InputError
        If training options are given for a scikit-learn recipe, which has none of them.
    """
    recipe = load_recipe(recipe_file)
    if not overrides:
        return recipe
    if not isinstance(recipe, TorchRecipe):
        raise InputError(
            f"expected no network options ({', '.join(sorted(overrides))}) with the scikit-learn recipe "
            f"{recipe_file!r}; give its parameters in the recipe"
        )
    return dataclasses.replace(recipe, spec=dataclasses.replace(recipe.spec, **overrides))


@dataclass(frozen=True)
class TrainOutcome:
    run_id: str
    version: RegisteredVersion
    train_accuracy: float
    held_out_accuracy: float


def train_target(
    recipe: TrainSpec | Recipe | None,
    *,
    data: str = DEFAULT_DATA,
    data_seed: int = 0,
    data_root: str | Path | None = None,
    image: ImageFormat = ImageFormat(),
    label_column: str = DEFAULT_LABEL_COLUMN,
    model_name: str = keys.TARGET_MODEL_NAME,
    alias: str = keys.TARGET_ALIAS,
    progress: bool = True,
    device: str = CPU,
    folds: Mapping[str, str | Path] | None = None,
) -> TrainOutcome:
    """Train f_D on the five training folds on ``device``, log accuracies, register it under ``alias``.

    ``recipe`` is a torch or scikit-learn recipe, or a ``TrainSpec`` (see :func:`recipe_for`).
    ``data`` :data:`~ema.data.presets.FILE_SOURCE` trains on the set file ``data_root`` (a
    table's labels in ``label_column``). A scikit-learn model of a table is fitted on, and
    registered with, the table's named columns (a DataFrame signature). The version's tags
    record the recipe, the data source (with ``image``, the size and channels a binary source
    was read in) and the training data's fingerprint, so a calibration model can be trained with
    the same algorithm A on data of the same shape and the training folds found again
    (``--members`` from lineage). ``device`` (``auto``, ``cpu``, ``cuda[:N]``) is resolved before
    the run starts and recorded as its ``device`` param; the model is registered with CPU
    tensors whatever it trained on. ``folds`` maps training folds (``M1``..``M5``) to an owner's set
    files trained on in their place (a marked copy, :mod:`ema.data.marks`); the version's lineage
    records each file's fingerprint (tag ``ema.data_fold.<FOLD>``) and path (tag ``ema.data_fold_file.<FOLD>``,
    and a param), so that its training data is found again (``--members``, ``ema unlearn --forget FILE``).
    """
    device = resolve_device(device)
    if data == FILE_SOURCE and data_root is not None:
        data_root = resolved_if_present(data_root)
    splits = load_splits(data, data_seed, data_root, image, label_column=label_column)
    fold_files = {name: resolved_if_present(path) for name, path in (folds or {}).items()}
    for name, path in fold_files.items():
        fold = read_set(Path(path), role=f"fold file (--fold {name}=FILE)", label_column=label_column)
        splits = splits.with_fold(name, fold)
    fold_tags = {f"{keys.TAG_DATA_FOLD_PREFIX}{name}": splits.query(name).fingerprint for name in fold_files}
    fold_tags.update({f"{keys.TAG_DATA_FOLD_FILE_PREFIX}{name}": path for name, path in fold_files.items()})
    train, held_out = splits.train, splits.held_out
    recipe = recipe_for(recipe, train)
    with start_run(f"train {recipe_name(recipe)} {model_name}") as run:
        check_model_name("model name", model_name)
        check_alias("alias", alias)
        image_tags = image.to_tags(keys.TAG_DATA_IMAGE_SIZE, keys.TAG_DATA_CHANNELS)
        log_params(
            {
                **recipe_params(recipe),
                keys.PARAM_DATA: data,
                keys.PARAM_DATA_SEED: data_seed,
                **({keys.PARAM_LABEL_COLUMN: label_column} if train.kind == "table" else {}),
                **image_tags,
                keys.PARAM_DEVICE: describe_device(device),
                **{f"{keys.PARAM_FOLD_PREFIX}{name}": path for name, path in fold_files.items()},
            }
        )
        log_dataset(train, name=f"{data}/train", context="training")
        classifier = fit_target(recipe, train, progress=progress, device=device)
        train_acc = float((classifier.predict_proba(train.model_inputs()).argmax(1) == train.y).mean())
        held_acc = float((classifier.predict_proba(held_out.model_inputs()).argmax(1) == held_out.y).mean())
        log_metrics({keys.METRIC_TRAIN_ACCURACY: train_acc, keys.METRIC_HELD_OUT_ACCURACY: held_acc})
        from ema.training.packaging import package_classifier  # torch: only when a model is logged

        with package_classifier(classifier, train.x[:2]) as package:
            version = log_and_register(
                package,
                name=model_name,
                alias=alias,
                tags={
                    keys.TAG_ROLE: keys.ROLE_TARGET,
                    keys.TAG_RECIPE: recipe_to_json(recipe),
                    keys.TAG_DATA_SOURCE: data,
                    keys.TAG_DATA_SEED: str(data_seed),
                    **({keys.TAG_DATA_ROOT: str(data_root)} if data_root else {}),
                    **({keys.TAG_LABEL_COLUMN: label_column} if train.kind == "table" else {}),
                    **image_tags,
                    keys.TAG_DATA_FINGERPRINT: train.fingerprint,
                    **fold_tags,
                },
            )
    return TrainOutcome(run.info.run_id, version, train_acc, held_acc)


def recipe_for(recipe: TrainSpec | Recipe | None, train: ArraySet) -> Recipe:
    """The recipe that trains a target on ``train``.

    A recipe is used as given. A ``TrainSpec`` (the command line's network options) or None
    trains one of our torch networks on images (the default ``TrainSpec`` for None), and
    :data:`~ema.training.recipes.DEFAULT_TABLE_RECIPE` on a table: a table is trained by a
    recipe (``--recipe FILE``).
    """
    if isinstance(recipe, (TorchRecipe, SklearnRecipe)):
        return recipe
    if train.kind == "table":
        return recipe_from_dict(DEFAULT_TABLE_RECIPE)
    return TorchRecipe(recipe if recipe is not None else TrainSpec())


def fit_target(recipe: Recipe, train: ArraySet, *, progress: bool, device: str = CPU) -> Classifier:
    """The target trained on ``train`` (a torch one on ``device``): a scikit-learn model of a table on its named
    columns."""
    if isinstance(recipe, SklearnRecipe):
        return recipe.fit(train.model_inputs(), train.y, progress=progress, columns=train.features)
    from ema.training.fit import TorchClassifier, fit

    inputs = recipe.transform.apply(train.model_inputs())
    model = fit(recipe.spec, inputs, train.y, progress=progress, desc="train target", device=device)
    return TorchClassifier(model, recipe.transform)


def recipe_name(recipe: Recipe) -> str:
    """A recipe in one word, for run names: the torch architecture or the scikit-learn estimator."""
    return recipe.spec.arch if isinstance(recipe, TorchRecipe) else recipe.estimator.rsplit(".", 1)[-1]


def recipe_params(recipe: Recipe) -> dict:
    """The run's params of a recipe: a torch spec's fields, or a scikit-learn estimator and its parameters."""
    if isinstance(recipe, TorchRecipe):
        return recipe.spec.to_dict()
    return {"estimator": recipe.estimator, **{f"param.{k}": v for k, v in recipe.params.items()}}
