"""Recipes: how the calibration model is trained (algorithm A), for our torch models and for scikit-learn.

A recipe file (JSON or YAML) names either one of our torch architectures with its
hyperparameters::

    {"framework": "torch", "arch": "mlp", "epochs": 50, "lr": 0.05}

or a scikit-learn classifier by class name or public import path, with its parameters::

    {"framework": "sklearn", "estimator": "sklearn.neural_network.MLPClassifier",
     "params": {"hidden_layer_sizes": [128], "max_iter": 200, "random_state": 0}}

or the name of a recipe of :data:`NAMED_RECIPES` (``paper-medical``: the paper's chest X-ray
target), and optionally the input representation the model takes,
``"input": {"scale": 1.0, "mean": 0.0, "std": 1.0}`` (pixels in [0, 1] are mapped to
``(p * scale - mean) / std``).

Recipes come from files and from registry tags, written by whoever can write them: they
are data, checked against the allow-list of :mod:`ema.training.allow_list` (the security
boundary: which torch fields, which scikit-learn classifiers and parameter values) and
never executed; YAML is read with ``yaml.safe_load``. This module builds recipe values
from checked data and trains them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from ema.errors import InputError
from ema.image_shapes import DEFAULT_PIXEL_ORDER, flatten_images
from ema.inputs import InputTransform, listed_names, numeric_columns, text_columns
from ema.limits import interruptible
from ema.training.allow_list import (
    check_input_fields,
    check_sklearn_params,
    check_torch_fields,
    describe,
    resolve_classifier,
)
from ema.training.forest_growth import fit_estimator
from ema.training.sizes import check_size, sklearn_size
from ema.training.spec import TrainSpec

FRAMEWORKS = ("torch", "sklearn")
SKLEARN_PACKAGE = "sklearn"
#: The most a recipe file may hold; a recipe is a few lines.
MAX_RECIPE_BYTES = 1 << 20
#: Recipes by name (``--recipe NAME``); a name is taken before a file of that name.
#: ``paper-medical``: the paper's chest X-ray target (section 4.2): ResNet-18, Adam, learning rate
#: 2e-5, 30 epochs, weight decay 1e-7. The paper gives no batch size: the workbench's default, 64.
NAMED_RECIPES: dict[str, dict] = {
    "paper-medical": {
        "framework": "torch",
        "arch": "resnet18",
        "optimizer": "adam",
        "lr": 2e-5,
        "weight_decay": 1e-7,
        "epochs": 30,
        "batch_size": 64,
    },
}


class Classifier(Protocol):
    """A fitted model we hold ourselves (the calibration model)."""

    def predict_proba(self, pixels: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class TorchRecipe:
    """One of our torch architectures, trained by :func:`ema.training.fit.fit`.

    ``names_architecture`` is False for a recipe that gives only training settings (no
    ``arch``): a torch target loaded in-process then trains a clone of its own architecture
    with them (:mod:`ema.training.clones`), and anything else trains the default ``arch``.
    """

    spec: TrainSpec
    transform: InputTransform = InputTransform()
    framework: str = "torch"
    names_architecture: bool = True

    def to_dict(self) -> dict:
        return {"framework": self.framework, **self.spec.to_dict(), "input": transform_dict(self.transform)}

    def fit(
        self,
        pixels: np.ndarray,
        labels: np.ndarray,
        *,
        progress: bool = True,
        device: str = "cpu",
        n_classes: int | None = None,
    ) -> Classifier:
        """Train the architecture on ``pixels`` (scaled by the transform) and ``labels``, on ``device``, with
        ``n_classes`` outputs (None: one per class of ``labels``, :func:`~ema.data.arrays.class_count`).

        Raises
        ------
        InputError
            For a table with text columns: a network takes numbers.
        """
        from ema.training.fit import TorchClassifier, fit

        text = np.flatnonzero(text_columns(pixels))
        if text.size:
            raise InputError(
                f"expected numbers for a torch recipe ({self.spec.arch}), got a table with text columns "
                f"{listed_names(text.astype(str).tolist())} (by position): encode them as numbers, or train a "
                "scikit-learn recipe, whose text columns are left out"
            )

        return TorchClassifier(
            fit(
                self.spec,
                self.transform.apply(pixels),
                labels,
                progress=progress,
                desc="train calibration",
                device=device,
                n_classes=n_classes,
            ),
            self.transform,
        )


@dataclass(frozen=True)
class SklearnRecipe:
    """A scikit-learn classifier trained on flattened pixels.

    Parameters
    ----------
    estimator : str
        A classifier of scikit-learn's registry with ``predict_proba``, by class name
        (``"LogisticRegression"``) or public import path (``"sklearn.linear_model.LogisticRegression"``).
    params : dict
        Constructor parameters the class's ``get_params()`` knows; values are JSON scalars
        or lists (possibly nested) of scalars.
    transform : InputTransform

    Raises
    ------
    InputError
        If the estimator is not such a classifier, or a parameter is unknown, of another
        type, or refused by scikit-learn's own parameter validation.
    """

    estimator: str
    params: dict = field(default_factory=dict)
    transform: InputTransform = InputTransform()
    framework: str = "sklearn"

    def __post_init__(self) -> None:
        self.build()  # validates the class, the parameter names, types and values; builds nothing that runs

    def to_dict(self) -> dict:
        return {
            "framework": self.framework,
            "estimator": self.estimator,
            "params": self.params,
            "input": transform_dict(self.transform),
        }

    def build(self):
        """An unfitted estimator; only classes of the allow-list are instantiated."""
        cls = resolve_classifier(self.estimator)
        params = check_sklearn_params(cls, self.params)
        try:
            estimator = cls(**params)
            validate = getattr(estimator, "_validate_params", None)  # scikit-learn's own checks, as fit runs them
            if validate is not None:
                validate()
        except (TypeError, ValueError) as exc:
            raise InputError(f"invalid parameters for {self.estimator}: {_one_line(exc)}") from exc
        if not hasattr(estimator, "predict_proba"):
            raise InputError(
                f"expected a classifier with predict_proba, got {self.estimator} with parameters {params} "
                "that has none: the audit needs class probabilities"
            )
        return estimator

    def fit(
        self,
        pixels: np.ndarray,
        labels: np.ndarray,
        *,
        progress: bool = True,
        columns: tuple[str, ...] | None = None,
        device: str = "cpu",
        n_classes: int | None = None,
    ) -> Classifier:
        """Train the estimator on flattened pixels (or a table), within the command's limits (:mod:`ema.limits`).

        ``columns`` names a table's features: the estimator is then fitted on a DataFrame of
        them, as a user fits one, so that it takes a DataFrame with those names (a target
        registered with a column signature).

        scikit-learn trains on the CPU: ``device`` is taken, as every recipe takes it, and not used;
        ``n_classes`` too (the estimator has a column per class it was fitted on). With ``progress``, a
        forest says on stderr how many of its trees are grown (:mod:`ema.training.forest_growth`); other
        estimators say nothing.

        Raises
        ------
        InputError
            If the estimator cannot be trained on them, or would be larger than ``--max-params`` allows
            (checked before it is built).
        TimeLimitExceeded
            If the command's ``--timeout`` passes while it trains.
        """
        estimator = self.build()
        pixels, columns = numbers_only(pixels, columns, what=self.estimator)
        n_features = math.prod(pixels.shape[1:])
        check_size(sklearn_size(estimator, len(pixels), n_features, len(np.unique(labels))))
        try:
            with interruptible(what := f"train {self.estimator}"):
                classifier = SklearnClassifier(estimator, self.transform, columns, takes_text=False)
                fit_estimator(estimator, classifier.features(pixels), labels, what=what, progress=progress)
        except (TypeError, ValueError) as exc:
            if isinstance(exc, InputError):
                raise
            raise InputError(f"{self.estimator} could not be trained: {_one_line(exc)}") from exc
        return classifier


@dataclass(frozen=True)
class SklearnClassifier:
    """A fitted scikit-learn estimator, the transform of its inputs, and the column names it was fitted on (tables).

    ``takes_text``: whether it was fitted on a table's text columns too (a clone of the user's
    pipeline, which encodes them), or on its numbers alone (our own recipes: the text columns of
    what it scores are left out, as they were when it was trained). ``pixel_order``: how it
    takes colour images flattened (a clone: as the target, :mod:`ema.image_shapes`).
    """

    estimator: object
    transform: InputTransform
    columns: tuple[str, ...] | None = None
    takes_text: bool = True
    pixel_order: str = DEFAULT_PIXEL_ORDER

    def features(self, pixels: np.ndarray):
        """What the estimator takes: flattened, transformed inputs; a DataFrame of ``columns`` when it has names
        (a table's text columns in it as text, its numbers as numbers)."""
        if pixels.dtype == object and not self.takes_text:
            pixels = pixels[:, ~text_columns(pixels)].astype(np.float64)
        if pixels.dtype == object:  # a table with text: not scaled (the transform is the identity for tables)
            import pandas as pd

            return pd.DataFrame(pixels, columns=list(self.columns or range(pixels.shape[1]))).infer_objects()
        flat = flatten(self.transform.apply(pixels), self.pixel_order)
        if self.columns is None:
            return flat
        import pandas as pd

        return pd.DataFrame(flat, columns=list(self.columns))

    def predict_proba(self, pixels: np.ndarray) -> np.ndarray:
        return self.estimator.predict_proba(self.features(pixels))


def numbers_only(
    pixels: np.ndarray, columns: tuple[str, ...] | None, *, what: str
) -> tuple[np.ndarray, tuple[str, ...] | None]:
    """A table's numeric columns (and their names), for a recipe of ours that takes numbers; images and tables
    without text as they are. Whoever hands a recipe a table with text says which columns it leaves out, by name
    (``ema train``'s data file, a calibration set: :func:`ema.workflows.calibrate.warn_text_left_out`).

    Raises
    ------
    InputError
        If every column holds text, or a text column holds numbers among its words (named by position, counted
        from 0, where the recipe is given no names).
    """
    if not text_columns(pixels).any():
        return pixels, columns
    names = columns if columns is not None else [f"at position {i}" for i in range(pixels.shape[1])]
    numbers, kept, _ = numeric_columns(pixels, names, where="the training table", taker=what)
    return numbers, kept if columns is not None else None


def proba_over_classes(classifier: Classifier, pixels: np.ndarray, n_classes: int) -> np.ndarray:
    """``classifier``'s probabilities on ``pixels`` with one column per class ``0 .. n_classes - 1``.

    A scikit-learn estimator has a column only for the classes it was fitted on: one fitted on
    a set missing some (a query set of five rows, all of one class) gets probability 0 for the
    others, so that its outputs compare with the target's. A torch network has an output per
    class already; its probabilities are returned as they are.
    """
    proba = classifier.predict_proba(pixels)
    if not isinstance(classifier, SklearnClassifier) or proba.shape[1] == n_classes:
        return proba
    widened = np.zeros((len(proba), n_classes), dtype=proba.dtype)
    widened[:, classifier.estimator.classes_] = proba
    return widened


Recipe = TorchRecipe | SklearnRecipe

#: The recipe ``ema train`` and the demo use for a table when none is given: extremely randomized trees (no
#: feature scaling needed). Grown on every training row (no bootstrap), each tree puts each member in a pure
#: leaf, so members get probability 1 while one random feature per split spreads held-out rows' votes: EMA and
#: the calibrated auditor tell them apart on Breast Cancer's 63-row folds (a random forest's bootstrap leaves
#: the calibrated auditor inconclusive on the held-out set there; docs/VALIDITY.md).
DEFAULT_TABLE_RECIPE = {
    "framework": "sklearn",
    "estimator": "ExtraTreesClassifier",
    "params": {"n_estimators": 200, "max_features": 1, "random_state": 0},
}


def flatten(pixels: np.ndarray, pixel_order: str = DEFAULT_PIXEL_ORDER) -> np.ndarray:
    """Pixels (n, C, H, W) as float32 rows in ``pixel_order`` (a table's rows as they are)."""
    return np.ascontiguousarray(flatten_images(pixels, pixel_order), dtype=np.float32)


def transform_dict(transform: InputTransform) -> dict:
    return {"scale": transform.scale, "mean": transform.mean, "std": transform.std}


def _one_line(exc: BaseException) -> str:
    """An exception's message on one line."""
    return " ".join(str(exc).split()) or type(exc).__name__


def recipe_from_dict(data: dict) -> Recipe:
    """Build a recipe from its dictionary form (a recipe file, or a model version's tag).

    Raises
    ------
    InputError
        If the mapping is not a recipe of a known framework with fields of the expected types,
        or names a scikit-learn estimator outside the allow-list (see the module's docstring).
    """
    if not isinstance(data, dict):
        raise InputError(f"expected a recipe as a mapping, got {type(data).__name__}")
    if not all(isinstance(key, str) for key in data):
        raise InputError(f"expected a recipe with string keys, got keys {[describe(key) for key in data]}")
    data = dict(data)
    framework = data.pop("framework", "torch")
    transform = InputTransform(**check_input_fields(data.pop("input", {})))
    if framework == "torch":
        return TorchRecipe(TrainSpec.from_dict(check_torch_fields(data)), transform, names_architecture="arch" in data)
    if framework == "sklearn":
        unknown = sorted(set(data) - {"estimator", "params"})
        if unknown or "estimator" not in data:
            raise InputError(
                f"expected a sklearn recipe with 'estimator' and optional 'params', got keys {sorted(data)}"
            )
        params = data.get("params", {})
        return SklearnRecipe(data["estimator"], dict(params) if isinstance(params, dict) else params, transform)
    raise InputError(f"expected framework in {FRAMEWORKS}, got {describe(framework)}")


def recipe_from_json(text: str) -> Recipe:
    """Build a recipe from JSON text (a recipe file, or a model version's ``ema.recipe`` tag)."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise InputError(f"expected a recipe as JSON, got {text[:60]!r}: {_one_line(exc)}") from exc
    return recipe_from_dict(data)


def load_recipe(path: str | Path) -> Recipe:
    """A named recipe (:data:`NAMED_RECIPES`), or a recipe file, JSON or YAML (by extension ``.yaml`` / ``.yml``;
    YAML through ``safe_load``).

    Raises
    ------
    InputError
        If the file is missing, too large, not UTF-8 text, not JSON/YAML, or not a valid recipe.
    """
    import yaml

    if str(path) in NAMED_RECIPES:
        return recipe_from_dict(NAMED_RECIPES[str(path)])
    path = Path(path)
    if not path.is_file():
        # a pipe (<(...)) exists but has no size to bound it by before reading
        found = "is not a regular file (a pipe or a folder)" if path.exists() else "does not exist"
        raise InputError(f"recipe file {path} {found} (named recipes: {', '.join(NAMED_RECIPES)})")
    size = path.stat().st_size
    if size > MAX_RECIPE_BYTES:
        raise InputError(f"{path}: expected a recipe file of at most {MAX_RECIPE_BYTES} bytes, got {size} bytes")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: expected a recipe as UTF-8 text (JSON or YAML), got bytes: {exc}") from exc
    if path.suffix in (".yaml", ".yml"):
        try:
            data = yaml.safe_load(text)
        except (yaml.YAMLError, RecursionError) as exc:
            raise InputError(f"{path}: expected a YAML recipe of plain mappings and values: {_one_line(exc)}") from exc
        return recipe_from_dict(data)
    return recipe_from_json(text)


def recipe_to_json(recipe: Recipe) -> str:
    return json.dumps(recipe.to_dict(), sort_keys=True)
