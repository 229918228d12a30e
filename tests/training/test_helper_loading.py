"""Helper models read back as data: skops with an explicit trusted-type list, torch weights into our own networks."""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import skops.io
import torch

from ema.training.allow_list import sklearn_classifiers
from ema.training.helper_loading import (
    SKOPS_FILE,
    TORCH_WEIGHTS,
    TRUSTED_SKLEARN_TYPES,
    HelperLoadError,
    load_helper,
    load_skops,
)
from ema.training.recipes import SklearnRecipe, TorchRecipe
from ema.training.spec import TrainSpec

RNG = np.random.default_rng(0)
X, Y = RNG.random((60, 6)).astype(np.float32), np.arange(60) % 3


def fitted_classifiers() -> list[object]:
    """Every classifier of the recipe allow-list that fits with its defaults, fitted on a tiny set."""
    fitted, seen = [], set()
    for cls in sklearn_classifiers().values():
        if cls in seen:
            continue
        seen.add(cls)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fitted.append(cls().fit(X, Y))
        except (TypeError, ValueError):  # needs arguments of its own (e.g. an estimator to wrap)
            continue
    return fitted


def test_load_skops_reads_every_allow_listed_classifier_with_the_explicit_list(tmp_path):
    classifiers = fitted_classifiers()
    assert len(classifiers) > 20
    for estimator in classifiers:
        path = tmp_path / f"{type(estimator).__name__}.skops"
        skops.io.dump(estimator, path)
        loaded = load_skops(path, TRUSTED_SKLEARN_TYPES)
        assert type(loaded) is type(estimator)
        if hasattr(estimator, "predict_proba"):
            np.testing.assert_array_equal(loaded.predict_proba(X), estimator.predict_proba(X))


def test_load_skops_refuses_a_type_outside_the_list(tmp_path):
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import FunctionTransformer

    path = tmp_path / "model.skops"
    skops.io.dump(Pipeline([("f", FunctionTransformer(os.system))]), path)
    with pytest.raises(HelperLoadError, match=r"expected only trusted scikit-learn types .*, got \['posix.system'\]"):
        load_skops(path, TRUSTED_SKLEARN_TYPES)


def test_load_helper_refuses_another_estimator_than_the_recipe_names(tmp_path):
    from sklearn.naive_bayes import GaussianNB

    skops.io.dump(GaussianNB().fit(X, Y), tmp_path / SKOPS_FILE)
    with pytest.raises(HelperLoadError, match="expected a fitted LogisticRegression"):
        load_helper(SklearnRecipe("LogisticRegression"), tmp_path)


def torch_package(folder: Path, state: object, n_classes: object = 10) -> Path:
    (folder / TORCH_WEIGHTS).parent.mkdir(parents=True)
    torch.save(state, folder / TORCH_WEIGHTS)
    (folder / "MLmodel").write_text(f"flavors:\n  python_function:\n    config:\n      n_classes: {n_classes}\n")
    return folder


class Payload:
    """Pickled into a weights file: unpickling it would call os.system."""

    def __reduce__(self):
        return os.system, ("echo planted",)


def test_load_helper_reads_torch_weights_into_the_recipes_network(tmp_path):
    from ema.training.architectures import ProbabilityModel

    spec = TrainSpec(hidden=(8,))
    model = ProbabilityModel(spec, 10)
    loaded = load_helper(TorchRecipe(spec), torch_package(tmp_path, model.state_dict()))
    pixels = RNG.random((4, 1, 28, 28)).astype(np.float32)
    with torch.inference_mode():
        expected = model(torch.from_numpy(pixels)).numpy()
    np.testing.assert_array_equal(loaded.predict_proba(pixels), expected)


@pytest.mark.parametrize(
    ("state", "n_classes", "message"),
    [
        ({"w": Payload()}, 10, "as weights only"),
        ({"network.layers.0.weight": torch.zeros(3, 3)}, 10, "do not fit the recipe's network"),
        ({}, "[10]", "class count"),
        ({}, 10**9, "class count"),
    ],
)
def test_load_helper_refuses_torch_files_that_are_not_the_recipes_weights(tmp_path, state, n_classes, message):
    with pytest.raises(HelperLoadError, match=message):
        load_helper(TorchRecipe(TrainSpec(hidden=(8,))), torch_package(tmp_path, state, n_classes))


def test_load_skops_of_a_trusted_type_this_python_cannot_find_is_a_helper_load_error(tmp_path, monkeypatch):
    """A calibration clone saved by a script whose class lived in its ``__main__``: a later process lacks it."""
    from sklearn.linear_model import LogisticRegression

    script_class = type("ScriptLR", (LogisticRegression,), {"__module__": "__main__"})
    monkeypatch.setattr(sys.modules["__main__"], "ScriptLR", script_class, raising=False)
    path = tmp_path / "model.skops"
    skops.io.dump(script_class().fit(X, Y), path)
    monkeypatch.delattr(sys.modules["__main__"], "ScriptLR")  # as in the next process
    with pytest.raises(HelperLoadError, match=r"could not load the skops file .*: AttributeError: .*ScriptLR"):
        load_skops(path, TRUSTED_SKLEARN_TYPES | {"__main__.ScriptLR"})
