"""Recipes: how the calibration model is trained (algorithm A), for our torch models and for scikit-learn.

A recipe file (JSON or YAML) names either one of our torch architectures with its
hyperparameters::

    {"framework": "torch", "arch": "mlp", "epochs": 50, "lr": 0.05}

or a scikit-learn estimator by import path with its parameters::

    {"framework": "sklearn", "estimator": "sklearn.neural_network.MLPClassifier",
     "params": {"hidden_layer_sizes": [128], "max_iter": 200, "random_state": 0}}

and optionally the input representation the model takes,
``"input": {"scale": 1.0, "mean": 0.0, "std": 1.0}`` (pixels in [0, 1] are mapped to
``(p * scale - mean) / std``). Only estimators under ``sklearn.`` are imported.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from ema.errors import InputError
from ema.inputs import InputTransform
from ema.training.spec import TrainSpec

FRAMEWORKS = ("torch", "sklearn")
SKLEARN_PREFIX = "sklearn."


class Classifier(Protocol):
    """A fitted model we hold ourselves (the calibration model)."""

    def predict_proba(self, pixels: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class TorchRecipe:
    """One of our torch architectures, trained by :func:`ema.training.fit.fit`."""

    spec: TrainSpec
    transform: InputTransform = InputTransform()
    framework: str = "torch"

    def to_dict(self) -> dict:
        return {"framework": self.framework, **self.spec.to_dict(), "input": _transform_dict(self.transform)}

    def fit(self, pixels: np.ndarray, labels: np.ndarray, *, progress: bool = True) -> Classifier:
        from ema.training.fit import TorchClassifier, fit

        return TorchClassifier(
            fit(self.spec, self.transform.apply(pixels), labels, progress=progress, desc="train calibration"),
            self.transform,
        )


@dataclass(frozen=True)
class SklearnRecipe:
    """A scikit-learn estimator trained on flattened pixels."""

    estimator: str
    params: dict = field(default_factory=dict)
    transform: InputTransform = InputTransform()
    framework: str = "sklearn"

    def __post_init__(self) -> None:
        if not self.estimator.startswith(SKLEARN_PREFIX):
            raise InputError(
                f"expected a scikit-learn estimator path starting with {SKLEARN_PREFIX!r}, got {self.estimator!r}"
            )

    def to_dict(self) -> dict:
        return {
            "framework": self.framework,
            "estimator": self.estimator,
            "params": self.params,
            "input": _transform_dict(self.transform),
        }

    def build(self):
        module_name, _, class_name = self.estimator.rpartition(".")
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError) as exc:
            raise InputError(f"expected an importable scikit-learn estimator, got {self.estimator!r}: {exc}") from exc
        try:
            return cls(**self.params)
        except TypeError as exc:
            raise InputError(f"invalid parameters for {self.estimator}: {exc}") from exc

    def fit(self, pixels: np.ndarray, labels: np.ndarray, *, progress: bool = True) -> Classifier:
        estimator = self.build().fit(flatten(self.transform.apply(pixels)), labels)
        return SklearnClassifier(estimator, self.transform)


@dataclass(frozen=True)
class SklearnClassifier:
    estimator: object
    transform: InputTransform

    def predict_proba(self, pixels: np.ndarray) -> np.ndarray:
        return self.estimator.predict_proba(flatten(self.transform.apply(pixels)))


Recipe = TorchRecipe | SklearnRecipe


def flatten(pixels: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(pixels, dtype=np.float32).reshape(len(pixels), -1)


def _transform_dict(transform: InputTransform) -> dict:
    return {"scale": transform.scale, "mean": transform.mean, "std": transform.std}


def recipe_from_dict(data: dict) -> Recipe:
    """Build a recipe from its dictionary form (a recipe file, or a model version's tag)."""
    if not isinstance(data, dict):
        raise InputError(f"expected a recipe as a mapping, got {type(data).__name__}")
    data = dict(data)
    framework = data.pop("framework", "torch")
    transform = InputTransform(**data.pop("input", {}))
    if framework == "torch":
        return TorchRecipe(TrainSpec.from_dict(data), transform)
    if framework == "sklearn":
        unknown = sorted(set(data) - {"estimator", "params"})
        if unknown or "estimator" not in data:
            raise InputError(
                f"expected a sklearn recipe with 'estimator' and optional 'params', got keys {sorted(data)}"
            )
        return SklearnRecipe(data["estimator"], dict(data.get("params", {})), transform)
    raise InputError(f"expected framework in {FRAMEWORKS}, got {framework!r}")


def recipe_from_json(text: str) -> Recipe:
    try:
        return recipe_from_dict(json.loads(text))
    except json.JSONDecodeError as exc:
        raise InputError(f"expected a recipe as JSON, got {text[:60]!r}: {exc}") from exc


def load_recipe(path: str | Path) -> Recipe:
    """Read a recipe file, JSON or YAML (by extension ``.yaml`` / ``.yml``)."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise InputError(f"recipe file {path} does not exist")
    text = path.read_text()
    if path.suffix in (".yaml", ".yml"):
        try:
            return recipe_from_dict(yaml.safe_load(text))
        except yaml.YAMLError as exc:
            raise InputError(f"{path}: expected a YAML recipe: {exc}") from exc
    return recipe_from_json(text)


def recipe_to_json(recipe: Recipe) -> str:
    return json.dumps(recipe.to_dict(), sort_keys=True)
