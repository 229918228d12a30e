import json

import numpy as np
import pytest

from ema.errors import InputError
from ema.inputs import InputTransform
from ema.training.fit import fit, predict_proba
from ema.training.recipes import (
    SklearnRecipe,
    TorchRecipe,
    load_recipe,
    recipe_from_dict,
    recipe_from_json,
    recipe_to_json,
)
from ema.training.spec import TrainSpec


@pytest.fixture(scope="module")
def tiny():
    rng = np.random.default_rng(0)
    return rng.random((64, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, 64)


def test_fit_is_deterministic_under_seed(tiny):
    pixels, labels = tiny
    first = predict_proba(fit(TrainSpec(epochs=2, seed=3), pixels, labels, progress=False), pixels)
    again = predict_proba(fit(TrainSpec(epochs=2, seed=3), pixels, labels, progress=False), pixels)
    other = predict_proba(fit(TrainSpec(epochs=2, seed=4), pixels, labels, progress=False), pixels)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    np.testing.assert_allclose(first.sum(axis=1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("arch", ["mlp", "cnn"])
def test_fit_learns_a_small_set(tiny, arch):
    pixels, labels = tiny
    model = fit(TrainSpec(arch=arch, epochs=30, lr=0.01, batch_size=8), pixels, labels, progress=False)
    assert (predict_proba(model, pixels).argmax(1) == labels).mean() > 0.9


def test_train_spec_refuses_bad_values():
    with pytest.raises(InputError, match=r"arch in \('mlp', 'cnn'\), got 'rnn'.*epochs >= 1, got 0"):
        TrainSpec(arch="rnn", epochs=0)


def test_train_spec_round_trips_json():
    spec = TrainSpec(hidden=(32,), epochs=3)
    assert TrainSpec.from_json(spec.to_json()) == spec


def test_recipe_round_trips_through_json():
    recipe = TorchRecipe(TrainSpec(epochs=3), InputTransform(scale=255.0))
    assert recipe_from_json(recipe_to_json(recipe)) == recipe


def test_load_recipe_yaml_sklearn(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("framework: sklearn\nestimator: sklearn.linear_model.LogisticRegression\nparams: {max_iter: 50}\n")
    recipe = load_recipe(path)
    assert isinstance(recipe, SklearnRecipe) and recipe.params == {"max_iter": 50}


def test_sklearn_recipe_fits_flattened_pixels(tiny):
    pixels, labels = tiny
    recipe = recipe_from_dict(
        {"framework": "sklearn", "estimator": "sklearn.linear_model.LogisticRegression", "params": {"max_iter": 200}}
    )
    proba = recipe.fit(pixels, labels).predict_proba(pixels)
    assert proba.shape == (64, 10)


def test_recipe_refuses_non_sklearn_import_path():
    with pytest.raises(InputError, match="expected 'estimator' to name a scikit-learn classifier.*got 'os.system'"):
        recipe_from_dict({"framework": "sklearn", "estimator": "os.system"})


def test_recipe_refuses_unknown_framework_and_fields(tmp_path):
    with pytest.raises(InputError, match="framework in"):
        recipe_from_dict({"framework": "jax"})
    with pytest.raises(InputError, match=r"unknown training recipe fields \['epoch'\]"):
        recipe_from_dict({"framework": "torch", "epoch": 3})
    (tmp_path / "r.json").write_text(
        json.dumps({"framework": "sklearn", "estimator": "sklearn.svm.SVC", "params": {"nope": 1}})
    )
    with pytest.raises(InputError, match=r"unknown parameters \['nope'\] for SVC"):
        load_recipe(tmp_path / "r.json")
