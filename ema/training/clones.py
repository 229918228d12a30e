"""Calibration models with the target's own architecture, untrained: clones of a model loaded in-process.

A recipe can only train our own architectures, so a model built elsewhere got a calibration
model of another architecture, which generalises otherwise and misleads EMA's thresholds.
When the target is loaded in-process (loading it already runs its code), its own
architecture is at hand:

- scikit-learn: :func:`sklearn.base.clone` of the loaded estimator or Pipeline
  (hyperparameters kept, fitted state dropped);
- torch: the loaded ``nn.Module`` with every parameter re-initialised (seeded), trained with
  a :class:`~ema.training.spec.TrainSpec`'s optimizer settings (its ``arch`` is not used).

Both recipes quack like :data:`~ema.training.recipes.Recipe`: ``fit``, ``to_dict`` (for the
cache key; the architecture enters as a digest), ``transform``.
"""

from __future__ import annotations

import importlib
import inspect
import json
import logging
from contextlib import AbstractContextManager
from dataclasses import dataclass

import numpy as np

from ema.errors import InputError, TimeLimitExceeded
from ema.image_shapes import DEFAULT_PIXEL_ORDER
from ema.inputs import InputSpec, InputTransform, to_model_inputs
from ema.limits import interruptible
from ema.run_warnings import FOR_THE_RECORD
from ema.training.recipes import Classifier, SklearnClassifier, transform_dict
from ema.training.spec import TrainSpec
from ema.validation import short_hash

#: What a user whose model cannot be cloned can do instead.
OTHER_CALIBRATION = "for an audit, pass --recipe FILE, or a calibration model of yours with --calibration-model"


def class_name(kind: type) -> str:
    """``module.QualifiedName``: where the class is looked up when a saved model is loaded."""
    return f"{kind.__module__}.{kind.__qualname__}"


def estimator_classes(estimator: object) -> list[type]:
    """The classes of ``estimator`` and of every estimator among its parameters (a Pipeline's steps)."""
    from sklearn.base import BaseEstimator

    nested = [value for value in estimator.get_params(deep=True).values() if isinstance(value, BaseEstimator)]
    return list(dict.fromkeys(type(item) for item in [estimator, *nested]))


def importable_by_name(kind: type) -> bool:
    """Whether ``kind`` is found again by its module and qualified name, as skops and pickle find it on loading.

    A class defined in a script's ``__main__`` is not, even in that script: the calibration model
    is saved for later processes, whose ``__main__`` is another.
    """
    if kind.__module__ == "__main__":
        return False
    try:
        found = importlib.import_module(kind.__module__)
    except ImportError:
        return False
    for part in kind.__qualname__.split("."):
        found = getattr(found, part, None)
    return found is kind


def takes_any_keywords(kind: type) -> bool:
    """Whether ``kind.__init__`` takes ``**kwargs``: scikit-learn then sees no parameters; a clone keeps no settings."""
    parameters = inspect.signature(kind.__init__).parameters.values()
    return any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters)


@dataclass(frozen=True)
class SklearnCloneRecipe:
    """Train a clone of a loaded scikit-learn estimator or Pipeline on flattened pixels, or on a table.

    ``columns`` are the names of the target's declared input columns: the clone is then fitted
    on a DataFrame of them, as the target was, so that steps which pick columns by name (a
    ColumnTransformer) find them. ``pixel_order``: how colour images are flattened, as the
    target gets them (:mod:`ema.image_shapes`), so that steps which see the pixels' places do alike.
    """

    template: object
    transform: InputTransform = InputTransform()
    columns: tuple[str, ...] | None = None
    pixel_order: str = DEFAULT_PIXEL_ORDER
    framework: str = "sklearn-clone"

    def to_dict(self) -> dict:
        params = json.dumps(self.template.get_params(deep=True), default=repr, sort_keys=True)
        return {
            "framework": self.framework,
            "estimator": type(self.template).__name__,
            "params": short_hash(params),
            "input": transform_dict(self.transform),
            **({"columns": short_hash(json.dumps(list(self.columns)))} if self.columns else {}),
            **pixel_order_entry(self.pixel_order),
        }

    @property
    def takes_text(self) -> bool:
        """Whether the clone is fitted on a table's text columns: only where the target names its columns (a
        signature that declares some text); a target that names none takes numbers, and so does its clone."""
        return self.columns is not None

    def check_cloneable(self) -> None:
        """Refuse a template whose clone could not be saved; warn for each class whose clone would keep no settings.

        Raises
        ------
        InputError
            If a class of the template (or of a Pipeline's step) cannot be imported by its name, as
            skops must import it to save a clone (a class defined in a script's ``__main__``).
        """
        classes = estimator_classes(self.template)
        unsaved = [class_name(kind) for kind in classes if not importable_by_name(kind)]
        if unsaved:
            raise InputError(
                "expected the target's classes to be importable by name (a clone, a calibration model or a retrained "
                f"version, is saved with skops, which finds them so), got {', '.join(unsaved)}, which this Python "
                "cannot import: define them in a module on PYTHONPATH (log the model with code_paths=[...]); "
                f"{OTHER_CALIBRATION}"
            )
        for kind in filter(takes_any_keywords, classes):
            logging.getLogger(__name__).warning(
                "the target's %s takes **kwargs in __init__, so scikit-learn's clone keeps none of its settings: a "
                "clone's %s (a calibration model, a retrained version) has its defaults; %s",
                class_name(kind),
                kind.__name__,
                OTHER_CALIBRATION,
                extra=FOR_THE_RECORD,
            )

    def fit(
        self,
        pixels: np.ndarray,
        labels: np.ndarray,
        *,
        progress: bool = True,
        device: str = "cpu",
        n_classes: int | None = None,
    ) -> Classifier:
        """Train a clone of the template on flattened pixels (a DataFrame of ``columns``, when named).

        On the CPU, as scikit-learn trains (``device`` unused; ``n_classes`` too: the clone has a
        column per class it was fitted on), in one ``fit`` call that the command's ``--timeout`` interrupts
        (:func:`ema.limits.interruptible`).
        """
        from sklearn.base import clone

        self.check_cloneable()
        name = class_name(type(self.template))
        try:  # the estimator's own code runs here, whatever it raises; the command's --timeout stops it
            classifier = SklearnClassifier(
                clone(self.template), self.transform, self.columns, self.takes_text, self.pixel_order
            )
            with interruptible(f"train a clone of {name}"):
                classifier.estimator.fit(classifier.features(pixels), labels)
        except TimeLimitExceeded:
            raise
        except Exception as exc:
            raise InputError(
                f"a clone of the target's {name} could not be made and trained on {len(labels)} rows: "
                f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}; {OTHER_CALIBRATION}"
            ) from exc
        if not hasattr(classifier.estimator, "predict_proba"):
            raise InputError(
                f"expected the target's {name} to have predict_proba (the auditor reads a clone's "
                f"probabilities), got none; {OTHER_CALIBRATION}"
            )
        return classifier


@dataclass(frozen=True)
class TorchCloneRecipe:
    """Train a re-initialised copy of a loaded torch module with ``spec``'s optimizer settings.

    ``input_shape`` and ``input_dtype`` are what the module takes, (-1, ...) and its element type (its
    signature's): the clone gets its inputs as the target does (:func:`ema.inputs.prepare_inputs`),
    pixels in [0, 1] scaled by ``transform`` or values 0-255 for an integer dtype, channels first
    or last, or flattened (in ``pixel_order``), as the shape says.
    """

    template: object
    spec: TrainSpec = TrainSpec()
    input_shape: tuple[int, ...] | None = None
    transform: InputTransform = InputTransform()
    framework: str = "torch-clone"
    input_dtype: str = "float32"
    channels_last: int | None = None
    pixel_order: str = DEFAULT_PIXEL_ORDER

    @property
    def input_spec(self) -> InputSpec:
        """The module's inputs as :func:`ema.inputs.prepare_inputs` lays them out (``channels_last`` and
        ``pixel_order``: see :class:`~ema.inputs.InputSpec`)."""
        return InputSpec(
            shape=self.input_shape,
            dtype=self.input_dtype,
            channels_last=self.channels_last,
            pixel_order=self.pixel_order,
        )

    def to_dict(self) -> dict:
        from ema.training.torch_clone import architecture_digest

        training = {k: v for k, v in self.spec.to_dict().items() if k not in ("arch", "hidden")}
        return {
            "framework": self.framework,
            "architecture": architecture_digest(self.template),
            "input_shape": list(self.input_shape) if self.input_shape else None,
            "input_dtype": self.input_dtype,
            "channels_last": self.channels_last,
            **training,
            "input": transform_dict(self.transform),
            **pixel_order_entry(self.pixel_order),
        }

    def fit(
        self,
        pixels: np.ndarray,
        labels: np.ndarray,
        *,
        progress: bool = True,
        device: str = "cpu",
        n_classes: int | None = None,
    ) -> Classifier:
        """Train a re-initialised copy of the template on ``device`` (its outputs are the template's: ``n_classes``
        unused)."""
        from ema.training.torch_clone import fit_clone

        return fit_clone(self, pixels, labels, progress=progress, device=device)


CloneRecipe = SklearnCloneRecipe | TorchCloneRecipe


def pixel_order_entry(pixel_order: str) -> dict[str, str]:
    """A clone's pixel order for its cache key: only where it is not the default, so that the keys of clones cached
    before there was a choice still find them."""
    return {"pixel_order": pixel_order} if pixel_order != DEFAULT_PIXEL_ORDER else {}


def package_trained(classifier: Classifier, images: np.ndarray) -> AbstractContextManager:
    """A context giving the :class:`~ema.model_package.ModelPackage` of a classifier we trained.

    ``images`` are uint8 (n, 28, 28), the example its first two. A torch clone packages itself
    (MLflow's pytorch flavor, on float pixels); our own architectures and scikit-learn models
    (recipes and clones) are packaged by :func:`ema.training.packaging.package_classifier`.
    """
    package = getattr(classifier, "package", None)
    if package is not None:
        return package(to_model_inputs(images))
    from ema.training.packaging import package_classifier  # torch: only when a model is logged

    return package_classifier(classifier, images)
