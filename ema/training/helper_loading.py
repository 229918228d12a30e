"""The auditor's own helper models loaded as data: weights into architectures it builds, never code from the store.

A helper (calibration model, the KS ratio's query and calibration-set models) is trained
with the target's recipe, logged and registered, and read back on a later audit. Reading it
back must run nothing that the registry holds: whoever can write the registry could have put
a model there whose loader runs code. So a helper is rebuilt from the *recipe* the auditor
already holds (its own allow-listed architectures, or a clone of the target it loaded
itself) and only its numbers are read from the stored files:

- our torch architectures: the state dict ``artifacts/weights.pt``, read with
  ``torch.load(weights_only=True)`` into :class:`~ema.training.architectures.ProbabilityModel`
  built from the recipe's spec (the class count and input shape from ``MLmodel``, parsed with
  ``yaml.safe_load``);
- torch clones: the state dict stored beside the ``pt2`` graph, read the same way into a
  fresh copy of the target's module;
- scikit-learn: the skops file, loaded with an explicit list of trusted types
  (:data:`TRUSTED_SKLEARN_TYPES`, plus for a clone the types of the target's own estimator,
  already loaded by the user's choice); the file's own list of types is never used.

A file that does not fit (missing, other shapes, other types) raises
:class:`HelperLoadError`: the caller treats the entry as foreign and trains anew.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
import yaml

from ema.errors import StoreError
from ema.training.allow_list import resolve_classifier
from ema.training.architectures import MAX_SAMPLE_DIMS, ProbabilityModel
from ema.training.clones import SklearnCloneRecipe, TorchCloneRecipe
from ema.training.fit import TorchClassifier
from ema.training.networks import INPUT_SHAPE
from ema.training.recipes import SklearnClassifier, SklearnRecipe, TorchRecipe
from ema.training.torch_clone import CLONE_WEIGHTS_NAME, ProbabilityOutputs, TorchCloneClassifier

#: Where a torch helper's state dict lies in its model folder (our pyfunc-code package).
TORCH_WEIGHTS = Path("artifacts", "weights.pt")
#: The skops file of MLflow's scikit-learn flavor.
SKOPS_FILE = "model.skops"
#: The most classes a helper's ``MLmodel`` may declare.
MAX_CLASSES = 100_000
#: The largest size of one dimension of a helper's declared input shape (a side of an image, a table's width).
MAX_INPUT_SIDE = 1 << 16
#: Types inside fitted scikit-learn classifiers that skops does not trust by itself, trusted here by name.
#: Found by dumping every classifier of the recipe allow-list fitted with its defaults
#: (``tests/training/test_helper_loading.py`` checks that each loads); all are scikit-learn's own.
TRUSTED_SKLEARN_TYPES = frozenset(
    {
        "sklearn.calibration._CalibratedClassifier",
        "sklearn.calibration._SigmoidCalibration",
        "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
        "sklearn.gaussian_process._gpc._BinaryGaussianProcessClassifierLaplace",
        "sklearn.gaussian_process.kernels.ConstantKernel",
        "sklearn.gaussian_process.kernels.Product",
        "sklearn.gaussian_process.kernels.RBF",
        "sklearn.metrics._dist_metrics.EuclideanDistance64",
        "sklearn.neighbors._ball_tree.BallTree",
        "sklearn.neighbors._kd_tree.KDTree",
        "sklearn.neural_network._stochastic_optimizers.AdamOptimizer",
        "sklearn.neural_network._stochastic_optimizers.SGDOptimizer",
        "sklearn.tree._tree.Tree",
    }
)


class HelperLoadError(StoreError):
    """A helper's stored files do not hold what its recipe builds (foreign or tampered)."""


def load_helper(
    recipe: TorchRecipe | SklearnRecipe | TorchCloneRecipe | SklearnCloneRecipe, folder: Path, *, device: str = "cpu"
):
    """The helper model stored in ``folder``, rebuilt from ``recipe``; no code from ``folder`` runs.

    Returns a classifier with ``predict_proba(pixels)``, pixels float32 in [0, 1] of shape
    (n, 1, H, W), as the recipe's ``fit`` returns it; a torch helper on ``device`` (its weights
    are read onto the CPU, then moved), a scikit-learn one on the CPU.

    Raises
    ------
    HelperLoadError
        If the files are missing or hold weights or types the recipe does not build.
    """
    folder = Path(folder)
    if isinstance(recipe, TorchRecipe):
        config = _declared_config(folder)
        model = ProbabilityModel(recipe.spec, _declared_classes(config, folder), _declared_input_shape(config, folder))
        _load_state(model, _read_weights(folder / TORCH_WEIGHTS), folder / TORCH_WEIGHTS)
        return TorchClassifier(model.to(device).eval(), recipe.transform)
    if isinstance(recipe, TorchCloneRecipe):
        stored = _read_weights(folder / "extra_files" / CLONE_WEIGHTS_NAME)
        if not isinstance(stored, dict) or not isinstance(stored.get("logits"), bool):
            raise HelperLoadError(f"expected a torch clone's weights and output kind in {folder}, got another file")
        model = ProbabilityOutputs(copy.deepcopy(recipe.template).cpu(), stored["logits"])
        _load_state(model, stored.get("state_dict"), folder)
        return TorchCloneClassifier(model.to(device), recipe)
    expected = type(recipe.template) if isinstance(recipe, SklearnCloneRecipe) else resolve_classifier(recipe.estimator)
    extra = sklearn_types(recipe.template) if isinstance(recipe, SklearnCloneRecipe) else frozenset()
    estimator = load_skops(folder / SKOPS_FILE, TRUSTED_SKLEARN_TYPES | extra)
    if type(estimator) is not expected:
        raise HelperLoadError(f"expected a fitted {expected.__name__} in {folder}, got {type(estimator).__name__}")
    if isinstance(recipe, SklearnCloneRecipe):
        return SklearnClassifier(estimator, recipe.transform, recipe.columns, recipe.takes_text, recipe.pixel_order)
    return SklearnClassifier(estimator, recipe.transform, takes_text=False)  # our recipes take numbers


def sklearn_types(estimator: object) -> frozenset[str]:
    """The types skops would not trust by itself in ``estimator`` (an object this process already holds)."""
    import skops.io

    return frozenset(skops.io.get_untrusted_types(data=skops.io.dumps(estimator)))


def load_skops(path: Path, trusted: frozenset[str]) -> object:
    """A skops file's object, if every type in it that skops does not trust by itself is in ``trusted``."""
    import skops.io

    if not path.is_file():
        raise HelperLoadError(f"expected a scikit-learn model saved with skops at {path}, got no such file")
    try:
        found = set(skops.io.get_untrusted_types(file=path))
    except Exception as exc:  # skops reads a zip of JSON: whatever it raises means the file is not one of ours
        raise HelperLoadError(f"could not read the skops file {path}: {type(exc).__name__}") from exc
    untrusted = sorted(found - trusted)
    if untrusted:
        raise HelperLoadError(f"expected only trusted scikit-learn types in {path}, got {untrusted[:5]}")
    try:
        return skops.io.load(path, trusted=sorted(found))
    except (ImportError, AttributeError) as exc:  # a type saved by name that this Python cannot find
        raise HelperLoadError(f"could not load the skops file {path}: {type(exc).__name__}: {exc}") from exc


def _declared_config(folder: Path) -> dict:
    """The model config our torch package records in ``MLmodel`` (read as YAML data)."""
    try:
        model = yaml.safe_load((folder / "MLmodel").read_text())
        config = model["flavors"]["python_function"]["config"]
    except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        raise HelperLoadError(f"expected one of our torch packages in {folder}, got no model config") from exc
    if not isinstance(config, dict):
        raise HelperLoadError(f"expected one of our torch packages in {folder}, got a {type(config).__name__} config")
    return config


def _declared_classes(config: dict, folder: Path) -> int:
    """The class count in a torch package's config."""
    n_classes = config.get("n_classes")
    if isinstance(n_classes, bool) or not isinstance(n_classes, int) or not 2 <= n_classes <= MAX_CLASSES:
        raise HelperLoadError(f"expected a class count from 2 to {MAX_CLASSES} in {folder}, got {n_classes!r}")
    return n_classes


def _declared_input_shape(config: dict, folder: Path) -> tuple[int, ...]:
    """The input shape in a torch package's config ((1, 28, 28), as earlier packages took, when absent)."""
    shape = config.get("input_shape", list(INPUT_SHAPE))
    if (
        not isinstance(shape, list)
        or not 1 <= len(shape) <= MAX_SAMPLE_DIMS
        or not all(type(d) is int and 1 <= d <= MAX_INPUT_SIDE for d in shape)
    ):
        raise HelperLoadError(
            f"expected an input shape of 1 to {MAX_SAMPLE_DIMS} sizes from 1 to {MAX_INPUT_SIDE} in {folder}, "
            f"got {shape!r}"
        )
    return tuple(shape)


def _read_weights(path: Path) -> object:
    if not path.is_file():
        raise HelperLoadError(f"expected a state dict at {path}, got no such file")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # weights_only refuses anything but tensors and plain containers
        raise HelperLoadError(f"could not read {path} as weights only: {type(exc).__name__}") from exc


def _load_state(model: torch.nn.Module, state: object, where: Path) -> None:
    """Put a stored state dict into ``model``; refuse one of other keys or shapes."""
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise HelperLoadError(f"expected a state dict of tensors in {where}, got {type(state).__name__}")
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise HelperLoadError(f"the weights in {where} do not fit the recipe's network: {first}") from exc
