"""How ``ema unlearn`` runs its method on a target: the spec resolved against the target's recipe, then an
exact retrain by that recipe (re-seeded) or an approximate change of the target's weights.

Only this step makes the new model (and, for an approximate method, loads the target's weights);
:mod:`ema.workflows.unlearn` reads the data, checks the result and registers it.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from ema.data.arrays import ArraySet, class_count
from ema.errors import InputError
from ema.training.clones import SklearnCloneRecipe, TorchCloneRecipe
from ema.training.recipes import Classifier, SklearnRecipe, TorchRecipe
from ema.training.unlearn_spec import UnlearnSpec
from ema.workflows.target import Target


def resolved_spec(spec: UnlearnSpec, target: Target) -> UnlearnSpec:
    """The spec with the method's defaults; ``retrain`` of a torch recipe defaults to the recipe's epochs and rate.

    Any other model is retrained by its recipe (or a clone of its own architecture) as it
    stands: approximate methods, ``--epochs`` and ``--lr`` are refused, and so is a seed other
    than 0 where the estimator has no ``random_state`` to take it (its training is deterministic).
    """
    recipe = target.require_recipe(
        f"retrain {target.label} without the forget set",
        "ema unlearn retrains versions `ema train` registered (their recipe tag), scikit-learn estimators and torch "
        "modules (a clone of their own architecture); retrain this model with its own code, register the result "
        "as a new version and audit it with ema audit",
    )
    if isinstance(recipe, TorchRecipe):
        return spec.resolved(recipe.spec.epochs, recipe.spec.lr)
    scikit = isinstance(recipe, (SklearnRecipe, SklearnCloneRecipe))
    kind = "a scikit-learn model" if scikit else "not one of the workbench's torch models"
    if not spec.is_exact:
        raise InputError(
            f"{target.label} is {kind}: approximate unlearning needs one of the workbench's torch models; "
            "use --method retrain"
        )
    if spec.epochs is not None or spec.lr is not None:
        raise InputError(f"expected no --epochs or --lr for {target.label} ({kind}): its recipe trains it, got them")
    if scikit and spec.seed != 0 and not _random_states(_estimator(recipe)):
        raise InputError(
            f"expected --seed 0 for {target.label}: its {type(_estimator(recipe)).__name__} takes no random_state, "
            f"so retraining it is deterministic; got --seed {spec.seed}"
        )
    return spec


def _retrain_recipe(recipe, spec: UnlearnSpec):
    """The target's recipe with the spec's seed (and, for a torch recipe, its epochs and rate).

    A scikit-learn estimator gets the seed as every ``random_state`` it has (a Pipeline's steps' too).
    """
    if isinstance(recipe, TorchRecipe):
        return dataclasses.replace(
            recipe, spec=dataclasses.replace(recipe.spec, epochs=spec.epochs, lr=spec.lr, seed=spec.seed)
        )
    if isinstance(recipe, TorchCloneRecipe):
        return dataclasses.replace(recipe, spec=dataclasses.replace(recipe.spec, seed=spec.seed))
    if isinstance(recipe, SklearnRecipe):
        seeded = dict.fromkeys(_random_states(recipe.build()), spec.seed)
        return dataclasses.replace(recipe, params={**recipe.params, **seeded})
    if isinstance(recipe, SklearnCloneRecipe):
        from sklearn.base import clone

        template = clone(recipe.template)
        return dataclasses.replace(
            recipe, template=template.set_params(**dict.fromkeys(_random_states(template), spec.seed))
        )
    return recipe


def _estimator(recipe):
    """The (unfitted) scikit-learn estimator a scikit-learn recipe or clone trains."""
    return recipe.build() if isinstance(recipe, SklearnRecipe) else recipe.template


def _random_states(estimator) -> list[str]:
    """The estimator's ``random_state`` parameters, a Pipeline's steps' included (``mlp__random_state``)."""
    return [name for name in estimator.get_params(deep=True) if name.split("__")[-1] == "random_state"]


def run_method(
    target: Target, spec: UnlearnSpec, retain: ArraySet, forget: ArraySet, progress: bool
) -> tuple[Classifier, float]:
    """Retrain with the target's recipe (exact), or change the target's weights (approximate), on the target's device.

    Returns the new classifier and the method's wall time in seconds (loading the target's weights not counted).
    """
    recipe = target.require_recipe()
    if spec.is_exact:
        recipe = _retrain_recipe(recipe, spec)
        started = time.monotonic()
        # every class of the target's training data: a forget set of a whole class leaves an output for it
        n_classes = class_count(np.concatenate([retain.y, forget.y]))
        classifier = recipe.fit(
            retain.model_inputs(), retain.y, progress=progress, device=target.device, n_classes=n_classes
        )
        return classifier, time.monotonic() - started
    from ema.training.fit import TorchClassifier  # torch: only when a model is changed
    from ema.training.packaging import load_torch_model
    from ema.training.unlearning import unlearn_model

    model, transform = load_torch_model(target.model_uri, device=target.device), recipe.transform
    started = time.monotonic()
    changed = unlearn_model(
        model,
        spec,
        (transform.apply(retain.model_inputs()), retain.y),
        (transform.apply(forget.model_inputs()), forget.y),
        progress=progress,
    )
    return TorchClassifier(changed, transform), time.monotonic() - started
