"""Clones of a target's architecture: re-initialised (also a torch.export graph, which has no layers to reset); a
scikit-learn class that cannot be cloned, trained or saved is one clear error."""

from __future__ import annotations

import math
import re
import sys

import numpy as np
import pytest
import torch
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from torch import nn

from ema.data.presets import load_splits
from ema.errors import InputError, TimeLimitExceeded
from ema.inputs import InputSpec, InputTransform, prepare_inputs, to_model_inputs
from ema.limits import command_limits
from ema.training import torch_clone
from ema.training.clones import SklearnCloneRecipe, TorchCloneRecipe, importable_by_name
from ema.training.spec import TrainSpec
from ema.training.torch_clone import reinitialise

RNG = np.random.default_rng(0)
PIXELS = RNG.random((40, 1, 28, 28), dtype=np.float32)
LABELS = np.arange(40) % 4


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 5, stride=4)
        self.norm = nn.LayerNorm(72)
        self.head = nn.Linear(72, 4)

    def forward(self, x):
        return self.head(self.norm(self.conv(x).flatten(1)))


def exported() -> nn.Module:
    """The module as `mlflow.pytorch.load_model` returns a pt2 model: a graph whose layers cannot reset."""
    batch = {0: torch.export.Dim("batch")}
    module = torch.export.export(Tiny().eval(), (torch.zeros(2, 1, 28, 28),), dynamic_shapes=(batch,)).module()
    assert not any(hasattr(layer, "reset_parameters") for layer in module.modules())
    return module


def test_reinitialise_redraws_every_parameter_of_an_exported_graph_seeded():
    graph = exported()
    before = {name: p.detach().clone() for name, p in graph.named_parameters()}
    first = {name: p.detach().clone() for name, p in reinitialise(graph, seed=3).named_parameters()}
    again = {name: p.detach().clone() for name, p in reinitialise(exported(), seed=3).named_parameters()}
    assert all(not torch.equal(before[name], first[name]) for name in before if not name.startswith("norm"))
    assert all(torch.equal(first[name], again[name]) for name in first)
    assert torch.equal(first["norm.weight"], torch.ones(72)) and torch.equal(first["norm.bias"], torch.zeros(72))
    assert first["head.bias"].abs().max() <= 1 / math.sqrt(72)


def test_torch_clone_trains_the_targets_own_architecture_and_gives_probabilities():
    recipe = TorchCloneRecipe(exported(), TrainSpec(epochs=3, lr=0.01), (-1, 1, 28, 28))
    classifier = recipe.fit(PIXELS, LABELS, progress=False)
    proba = classifier.predict_proba(PIXELS)
    assert proba.shape == (40, 4)
    np.testing.assert_allclose(proba.sum(axis=1), 1, rtol=1e-5)
    assert recipe.to_dict()["architecture"] == TorchCloneRecipe(exported()).to_dict()["architecture"]


def test_torch_clone_refuses_labels_beyond_the_targets_outputs_before_training():
    """The preset's ten digit classes for a model of four outputs: one line, not an index error from the loss."""
    with pytest.raises(InputError, match=r"target's 4 classes \(0..3\), got labels up to 9: give --calibration-file"):
        TorchCloneRecipe(Tiny(), TrainSpec(epochs=1)).fit(PIXELS, np.arange(40) % 10, progress=False)


#: Real colour images: embedded digits, each grey digit put in a colour of its class, (n, H, W, C) uint8.
COLOUR = load_splits().query("M1").take(np.arange(40))
COLOUR_IMAGES = np.stack(
    [COLOUR.x * (0.4 + 0.2 * (COLOUR.y % 3) == c)[:, None, None] for c in (0, 1, 2)], axis=-1
).astype(np.uint8)


class MeanOfChannels(nn.Module):
    """A head over the mean of each channel; pixel values 0-255 in when ``integers``, as a model that scales them
    itself takes them (its exported graph refuses anything else)."""

    def __init__(self, channels_last: bool, integers: bool) -> None:
        super().__init__()
        self.channels_last, self.integers = channels_last, integers
        self.head = nn.Linear(3, 4)

    def forward(self, x):
        pixels = x.float() / 255 if self.integers else x
        return self.head(pixels.mean(dim=(1, 2) if self.channels_last else (2, 3)))


def recording(seen: dict, name: str, original, position: int):
    """``original``, keeping under ``name`` in ``seen`` the argument at ``position`` it was last called with."""

    def call(*args, **options):
        seen[name] = args[position]
        return original(*args, **options)

    return call


@pytest.mark.parametrize(
    ("shape", "dtype", "channels_last"),
    [
        ((-1, 28, 28, 3), "float32", None),
        ((-1, 3, 28, 28), "uint8", None),
        ((-1, 28, 28, 3), "uint8", None),
        (None, "float32", 3),
    ],
    ids=["channels last", "integers", "integers, channels last", "any size, channels last"],
)
def test_torch_clone_trains_and_scores_on_the_inputs_the_target_gets(shape, dtype, channels_last, monkeypatch):
    """Colour images moved channels last (not reshaped into scrambled pixels, nor left channels first for a
    signature of any size), and pixel values 0-255 for a model that takes integers (not floats in [0, 1], which an
    exported graph refuses and a plain module divides again)."""
    last = channels_last is not None or shape[-1] == 3
    module = MeanOfChannels(channels_last=last, integers=dtype == "uint8").eval()
    example = torch.zeros((2, 28, 28, 3) if last else (2, 3, 28, 28), dtype=getattr(torch, dtype))
    graph = torch.export.export(module, (example,), dynamic_shapes=({0: torch.export.Dim("batch")},)).module()
    seen = {}
    for step, position in (("train_network", 2), ("predict_proba", 1)):
        monkeypatch.setattr(torch_clone, step, recording(seen, step, getattr(torch_clone, step), position))
    spec = InputSpec(shape=shape, dtype=dtype, channels_last=channels_last)
    recipe = TorchCloneRecipe(
        graph, TrainSpec(epochs=1, lr=0.01), shape, input_dtype=dtype, channels_last=channels_last
    )
    classifier = recipe.fit(to_model_inputs(COLOUR_IMAGES), COLOUR.y % 4, progress=False)
    classifier.predict_proba(to_model_inputs(COLOUR_IMAGES))
    target_inputs = prepare_inputs(COLOUR_IMAGES, InputTransform(), spec)
    assert target_inputs.shape[1:] == ((28, 28, 3) if last else (3, 28, 28))
    for step, inputs in seen.items():
        assert inputs.dtype == target_inputs.dtype, step
        np.testing.assert_array_equal(inputs, target_inputs, err_msg=step)


def test_torch_clone_of_an_exported_graph_trains_its_batch_norms_and_dropouts():
    """An exported graph is traced in eval mode: the clone trains with batch statistics (its running statistics
    move from their reset values), and scores with them back in eval mode (deterministically, dropout off)."""
    module = nn.Sequential(
        nn.Conv2d(1, 4, 5, stride=4), nn.BatchNorm2d(4), nn.Flatten(), nn.Dropout(0.5), nn.Linear(144, 4)
    ).eval()
    graph = torch.export.export(
        module, (torch.zeros(2, 1, 28, 28),), dynamic_shapes=({0: torch.export.Dim("batch")},)
    ).module()
    classifier = TorchCloneRecipe(graph, TrainSpec(epochs=2, lr=0.01), (-1, 1, 28, 28)).fit(
        PIXELS, LABELS, progress=False
    )
    buffers = dict(classifier.model.network.named_buffers())
    assert not torch.equal(buffers["1.running_mean"], torch.zeros(4))
    assert not torch.equal(buffers["1.running_var"], torch.ones(4))
    np.testing.assert_array_equal(classifier.predict_proba(PIXELS), classifier.predict_proba(PIXELS))


class SeesItsInputs(nn.Module):
    """A flat or channels-last model of colour 8x8 images that keeps the last inputs it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(8 * 8 * 3, 4)

    def forward(self, x):
        self.seen = x.detach().clone()
        return self.head(x.flatten(1))


#: Colour 8x8 images as stored, and as the clones get them: float32 (n, 3, 8, 8) in [0, 1].
SMALL_COLOUR = RNG.integers(0, 256, (40, 8, 8, 3), dtype=np.uint8)
SMALL_COLOUR_PIXELS = to_model_inputs(SMALL_COLOUR)


@pytest.mark.parametrize(
    ("input_shape", "pixel_order", "expected"),
    [
        ((-1, 192), "hwc", SMALL_COLOUR.reshape(40, -1)),  # as numpy flattens the stored images
        ((-1, 192), "chw", SMALL_COLOUR.transpose(0, 3, 1, 2).reshape(40, -1)),  # as torch's Flatten
        ((-1, 8, 8, 3), "chw", SMALL_COLOUR),  # channels moved last, not reshaped there
    ],
)
def test_torch_clone_flattens_colour_images_in_the_targets_pixel_order(input_shape, pixel_order, expected):
    recipe = TorchCloneRecipe(SeesItsInputs(), TrainSpec(epochs=1), input_shape, pixel_order=pixel_order)
    classifier = recipe.fit(SMALL_COLOUR_PIXELS, LABELS, progress=False)
    classifier.predict_proba(SMALL_COLOUR_PIXELS)
    target = prepare_inputs(SMALL_COLOUR, InputTransform(), InputSpec(input_shape, pixel_order=pixel_order))
    np.testing.assert_allclose(classifier.model.network.seen.numpy(), target, rtol=1e-6)
    np.testing.assert_allclose(target, expected / 255.0, rtol=1e-6)


def test_sklearn_clone_is_fitted_on_pixels_flattened_in_the_targets_order():
    fitted = LogisticRegression(max_iter=50).fit(SMALL_COLOUR.reshape(40, -1) / 255.0, LABELS)
    recipe = SklearnCloneRecipe(fitted, pixel_order="hwc")
    classifier = recipe.fit(SMALL_COLOUR_PIXELS, LABELS)
    np.testing.assert_allclose(
        classifier.features(SMALL_COLOUR_PIXELS), SMALL_COLOUR.reshape(40, -1) / 255.0, rtol=1e-6
    )
    assert recipe.to_dict() != SklearnCloneRecipe(fitted).to_dict(), "a clone cached in one order is not the other's"
    assert "pixel_order" not in SklearnCloneRecipe(fitted).to_dict(), "clones cached before the option keep their keys"


def test_sklearn_clone_keeps_hyperparameters_and_drops_the_fit():
    fitted = make_pipeline(StandardScaler(), LogisticRegression(C=0.5, max_iter=50)).fit(PIXELS.reshape(40, -1), LABELS)
    classifier = SklearnCloneRecipe(fitted).fit(PIXELS, LABELS)
    assert classifier.estimator is not fitted
    assert classifier.estimator.get_params()["logisticregression__C"] == 0.5
    assert classifier.predict_proba(PIXELS).shape == (40, 4)


class ChangesItsParams(RandomForestClassifier):
    """Breaks scikit-learn's rule that __init__ stores its arguments as given: ``clone`` refuses it."""

    def __init__(self, n_estimators: int = 5) -> None:
        super().__init__(n_estimators=n_estimators * 2)


class FitNeedsPreparing(LogisticRegression):
    """A user's ``fit`` that raises on a fresh clone, with an error of its own kind."""

    def fit(self, x, y):
        raise RuntimeError("call prepare() before fit()")


class TakesAnyKeywords(LogisticRegression):
    def __init__(self, **settings) -> None:
        super().__init__(**settings)


@pytest.mark.parametrize(
    ("template", "reason"),
    [
        (ChangesItsParams(), "RuntimeError: Cannot clone object"),
        (FitNeedsPreparing(), r"RuntimeError: call prepare\(\) before fit\(\)"),
    ],
)
def test_sklearn_clone_that_cannot_be_made_or_trained_is_one_input_error_naming_the_class(template, reason):
    name = f"tests.foreign.test_clones.{type(template).__qualname__}"
    expected = rf"a clone of the target's {name} could not be made and trained on {len(LABELS)} rows: {reason}"
    with pytest.raises(InputError, match=expected) as refused:
        SklearnCloneRecipe(template).fit(PIXELS, LABELS, progress=False)
    assert str(refused.value).endswith(
        "for an audit, pass --recipe FILE, or a calibration model of yours with --calibration-model"
    )


def test_sklearn_clone_of_a_class_not_importable_by_name_is_refused_before_training(monkeypatch):
    made_in_a_script = type("MainRF", (LogisticRegression,), {"__module__": "__main__"})
    monkeypatch.setattr(made_in_a_script, "fit", lambda *a: pytest.fail("trained before the refusal"))
    inner = make_pipeline(StandardScaler(), made_in_a_script())
    with pytest.raises(InputError, match=r"got __main__\.MainRF, which this Python cannot import"):
        SklearnCloneRecipe(inner).fit(PIXELS, LABELS, progress=False)


def test_importable_by_name_finds_module_classes_and_not_script_ones(monkeypatch):
    assert importable_by_name(LogisticRegression) and importable_by_name(ChangesItsParams)
    script_class = type("MainRF", (LogisticRegression,), {"__module__": "__main__"})
    assert not importable_by_name(script_class)
    # nor in the script itself: the clone is saved for later processes, whose __main__ is another
    monkeypatch.setattr(sys.modules["__main__"], "MainRF", script_class, raising=False)
    assert not importable_by_name(script_class)
    assert not importable_by_name(type("Gone", (LogisticRegression,), {"__module__": "no_such_module_here"}))


def test_sklearn_clone_of_a_class_taking_any_keywords_warns_that_it_keeps_no_settings(caplog):
    classifier = SklearnCloneRecipe(TakesAnyKeywords(C=0.01)).fit(PIXELS, LABELS, progress=False)
    assert "TakesAnyKeywords takes **kwargs in __init__" in caplog.text
    assert classifier.predict_proba(PIXELS).shape == (40, 4)
    caplog.clear()
    SklearnCloneRecipe(make_pipeline(StandardScaler(), TakesAnyKeywords(C=0.01))).fit(PIXELS, LABELS, progress=False)
    assert "TakesAnyKeywords takes **kwargs in __init__" in caplog.text  # a Pipeline's step too
    caplog.clear()
    SklearnCloneRecipe(LogisticRegression(C=0.01)).fit(PIXELS, LABELS, progress=False)
    assert "kwargs" not in caplog.text


def test_sklearn_clone_training_is_stopped_by_the_commands_timeout_with_its_error():
    """A clone's ``fit`` is the estimator's own code: the deadline interrupts it, and it is not taken for a clone that
    cannot be trained (an InputError naming the class)."""
    slow = RandomForestClassifier(n_estimators=100_000, random_state=0)
    recipe = SklearnCloneRecipe(slow)
    step = re.escape("in step 'train a clone of sklearn.ensemble._forest.RandomForestClassifier'")
    with command_limits(timeout=0.3), pytest.raises(TimeLimitExceeded, match=step):
        recipe.fit(PIXELS, LABELS, progress=False)
