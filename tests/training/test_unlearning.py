"""Removal methods as values: the spec's checks and defaults; the approximate methods on a tiny model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ema.data.embedded import load_mnist_embedded
from ema.errors import EMAError, InputError
from ema.training.fit import fit, predict_proba
from ema.training.spec import TrainSpec
from ema.training.unlearn_spec import APPROXIMATE_METHODS, METHOD_DEFAULTS, UnlearnSpec
from ema.training.unlearning import unlearn_model


@pytest.fixture(scope="module")
def tiny():
    """A small MLP that fits 300 MNIST images exactly; the first 60 are the forget set."""
    pool = load_mnist_embedded()
    data = pool.take(np.random.default_rng(0).choice(len(pool), size=300, replace=False))
    pixels, labels = data.model_inputs(), data.y
    model = fit(TrainSpec(hidden=(64,), epochs=40, batch_size=32), pixels, labels, progress=False)
    return model, (pixels[60:], labels[60:]), (pixels[:60], labels[:60])


def _accuracy(model, data) -> float:
    return float((predict_proba(model, data[0]).argmax(1) == data[1]).mean())


def _confidence(model, data) -> float:
    """Mean probability of the true class: the membership signal the auditors read."""
    return float(predict_proba(model, data[0])[np.arange(len(data[1])), data[1]].mean())


def test_unlearn_spec_refuses_bad_options_with_the_field_named():
    with pytest.raises(InputError, match=r"expected unlearning method in \('retrain'"):
        UnlearnSpec(method="forget-harder")
    with pytest.raises(InputError, match=r"expected ascent_weight in \(0, 1\), got 1\.5"):
        UnlearnSpec(method="neggrad", ascent_weight=1.5)
    with pytest.raises(InputError, match="expected lr to be a finite number > 0, got nan"):
        UnlearnSpec(method="scrub", lr=float("nan"))


def test_resolved_takes_the_recipe_for_retrain_and_the_method_defaults_otherwise():
    assert UnlearnSpec(method="retrain").resolved(50, 0.05) == UnlearnSpec(method="retrain", epochs=50, lr=0.05)
    assert UnlearnSpec(method="retrain", epochs=3).resolved(50, 0.05).epochs == 3
    for method in APPROXIMATE_METHODS:
        resolved = UnlearnSpec(method=method).resolved(50, 0.05)
        assert (resolved.epochs, resolved.lr) == (METHOD_DEFAULTS[method]["epochs"], METHOD_DEFAULTS[method]["lr"])
    assert UnlearnSpec(method="scrub", lr=0.2).resolved().lr == 0.2


@pytest.mark.parametrize("method", APPROXIMATE_METHODS)
def test_unlearn_model_is_seeded_and_leaves_the_original_untouched(tiny, method):
    model, retain, forget = tiny
    before = {k: v.clone() for k, v in model.state_dict().items()}
    spec = UnlearnSpec(method=method, epochs=2, lr=0.01)
    first, second = (unlearn_model(model, spec, retain, forget, progress=False) for _ in range(2))
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key])
    for a, b in zip(first.parameters(), second.parameters(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("method", ["neggrad", "random-labels", "scrub"])
def test_methods_that_use_the_forget_set_are_less_sure_of_it_than_fine_tuning(tiny, method):
    model, retain, forget = tiny
    assert _accuracy(model, forget) == 1.0
    options = {"epochs": 5, "lr": 0.05, "batch_size": 16}  # SCRUB needs a few max-steps on 60 samples
    finetuned = unlearn_model(model, UnlearnSpec(method="finetune", **options), retain, forget, progress=False)
    removed = unlearn_model(model, UnlearnSpec(method=method, **options), retain, forget, progress=False)
    assert _confidence(removed, forget) < _confidence(finetuned, forget)
    assert _confidence(removed, forget) - _confidence(removed, retain) < _confidence(model, forget) - _confidence(
        model, retain
    )


def test_unlearn_model_refuses_retrain_and_a_diverging_run(tiny):
    model, retain, forget = tiny
    with pytest.raises(InputError, match="expected approximate unlearning method"):
        unlearn_model(model, UnlearnSpec(method="retrain", epochs=1, lr=0.1), retain, forget)
    diverging = UnlearnSpec(method="neggrad", epochs=3, lr=1e30, clip_norm=1e30)
    with pytest.raises(EMAError, match=r"unlearning diverged: expected a finite loss.*lower --lr"):
        unlearn_model(model, diverging, retain, forget, progress=False)
