"""How large a recipe's model grows, estimated from its size parameters before anything is built.

A recipe is data from whoever wrote it (a file, a registry tag): hidden widths of 65,536,
a scikit-learn ``hidden_layer_sizes`` of [200000, 200000] or ``n_estimators`` of 1e9 would
ask for tens or hundreds of gigabytes. Every training entry (:func:`ema.training.fit.fit`
for our torch architectures, :meth:`ema.training.recipes.SklearnRecipe.fit`) first calls
:func:`check_size` with an estimate from this module, and a recipe over the command's
``--max-params`` (:mod:`ema.limits`) is refused in one line naming the parameter.

The estimates are upper bounds of the order of magnitude, counted in values:

- torch: the parameters from the layer widths and the input's shape (ten classes); memory in
  float32 is each parameter with its gradient and optimizer state (SGD momentum: one
  value, Adam: two), plus one batch's activations and their gradients.
- scikit-learn: a rule per estimator, from the documented size parameters and the
  training set's size (``n`` samples, ``d`` features, ``k`` classes): a fitted tree has at
  most ``2 * leaves - 1`` nodes (leaves bounded by ``n``, ``2 ** max_depth`` and
  ``max_leaf_nodes``), each node eight values and its class counts, times
  ``n_estimators`` (or ``max_iter``) trees; an MLP its weight matrices; k-NN and SVC a copy
  of the training data; Gaussian processes and label propagation an ``n x n`` kernel; linear
  models and naive Bayes ``k x d``. Values are counted as float64. A classifier with no
  rule here is refused: a recipe can name any classifier of scikit-learn's registry, and
  one whose size nobody estimated is not trained on a recipe's word.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise

from ema.errors import InputError
from ema.limits import BYTES_PER_PARAM, Limits, current_limits
from ema.training.spec import TrainSpec

#: Our networks' default input (one 28x28 grey image: channels, height, width) and classes.
INPUT_SHAPE, N_CLASSES = (1, 28, 28), 10
#: Fixed architectures on the default input: parameters, and activations per image of one forward
#: pass (every module's output), counted from :func:`ema.training.networks.build_network` (a test
#: recounts them, and the estimates for other shapes).
FIXED_ARCHITECTURES = {"cnn": (421_642, 88_074), "resnet18": (11_172_810, 1_444_874)}
#: ResNet-18's first convolution: weights per input channel with the small-image stem (3x3) and ImageNet's (7x7).
RESNET_STEM_WEIGHTS = {"small": 64 * 3 * 3, "imagenet": 64 * 7 * 7}
#: Side from which ResNet-18 gets ImageNet's stem (:data:`ema.training.networks.SMALL_IMAGE_SIDE`).
SMALL_IMAGE_SIDE = 64
#: ResNet-18's activations per image outside the blocks' resolution (global pooling and the classifier).
RESNET_HEAD_VALUES = 512 + N_CLASSES
#: Values the optimizer keeps per parameter besides the weight and its gradient.
OPTIMIZER_STATES = {"sgd": 1, "adam": 2}
TORCH_VALUE_BYTES, SKLEARN_VALUE_BYTES = 4, 8
#: Values of one tree node besides its class counts (scikit-learn's ``Node`` record: children,
#: feature, threshold, impurity, sample counts, missing-value side).
NODE_VALUES = 8
#: Copies of an estimator's parameters while it trains (weights, gradients, Adam's moments).
SKLEARN_TRAINING_COPIES = 4
#: MLPClassifier's batch size under ``batch_size="auto"``.
MLP_AUTO_BATCH = 200
#: Distinct values a CategoricalNB feature may take on uint8 pixels.
PIXEL_LEVELS = 256


@dataclass(frozen=True)
class SizeEstimate:
    """A model's estimated size: what it is, its parameters, the bytes its training holds, and why.

    ``parameters_from`` and ``memory_from`` name the recipe fields (with their values) that set
    the parameter count and the memory, for the refusal's message.
    """

    model: str
    parameters: int
    memory_bytes: int
    parameters_from: str
    memory_from: str


def check_size(estimate: SizeEstimate, limits: Limits | None = None) -> None:
    """Refuse a model over the command's ``--max-params`` or the memory that allows, in one line.

    Raises
    ------
    InputError
        If ``estimate.parameters > limits.max_params`` or ``estimate.memory_bytes > limits.max_bytes``.
    """
    limits = limits or current_limits()
    if estimate.parameters > limits.max_params:
        raise InputError(
            f"expected a recipe of at most {limits.max_params:,} parameters (--max-params), got "
            f"{estimate.parameters_from}: {estimate.parameters:,} parameters for {estimate.model} "
            f"(about {_gigabytes(estimate.memory_bytes)} to train); shrink it or raise --max-params"
        )
    if estimate.memory_bytes > limits.max_bytes:
        raise InputError(
            f"expected a recipe whose training holds at most {_gigabytes(limits.max_bytes)} (--max-params "
            f"{limits.max_params:,} x {BYTES_PER_PARAM} bytes), got {estimate.memory_from}: about "
            f"{_gigabytes(estimate.memory_bytes)} for {estimate.model}; shrink it or raise --max-params"
        )


def _gigabytes(n_bytes: int) -> str:
    return f"{n_bytes / 1e9:,.1f} GB"


def _shown(value: object) -> str:
    text = repr(list(value) if isinstance(value, tuple) else value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def torch_size(spec: TrainSpec, n_samples: int, input_shape: tuple[int, ...] = INPUT_SHAPE) -> SizeEstimate:
    """The size of training ``spec``'s network on ``n_samples`` samples of ``input_shape`` (a batch holds at most
    all of them); images are (channels, height, width)."""
    if spec.arch in FIXED_ARCHITECTURES:
        parameters, per_image = _image_network_size(spec.arch, tuple(input_shape))
        on = "" if tuple(input_shape) == INPUT_SHAPE else " on " + "x".join(map(str, input_shape))
        model, sized_by = spec.arch, f"arch {spec.arch!r}{on}"
    else:
        widths = (math.prod(input_shape), *spec.hidden, N_CLASSES)
        parameters = sum((n_in + 1) * n_out for n_in, n_out in pairwise(widths))
        per_image = 2 * sum(spec.hidden) + N_CLASSES  # each layer's output and its ReLU's
        model, sized_by = "the MLP", f"hidden {_shown(spec.hidden)}"
    weights = parameters * (2 + OPTIMIZER_STATES[spec.optimizer]) * TORCH_VALUE_BYTES
    activations = 2 * min(spec.batch_size, n_samples) * per_image * TORCH_VALUE_BYTES
    memory_from = f"batch_size {spec.batch_size} with {sized_by}" if activations > weights else sized_by
    return SizeEstimate(model, parameters, weights + activations, sized_by, memory_from)


def _image_network_size(arch: str, input_shape: tuple[int, ...]) -> tuple[int, int]:
    """Parameters and activations per image of ``cnn`` or ``resnet18`` on images (channels, height, width).

    Exact for the cnn; for ResNet-18, activations scale with the pixels its blocks see (a
    quarter a side behind ImageNet's stem, plus the stem's own outputs).
    """
    if input_shape == INPUT_SHAPE:
        return FIXED_ARCHITECTURES[arch]
    channels, height, width = input_shape
    default_channels, default_height, default_width = INPUT_SHAPE
    base_parameters, base_activations = FIXED_ARCHITECTURES[arch]
    if arch == "cnn":
        conv1 = (channels * 9 + 1) * 32
        features = 64 * (height // 4) * (width // 4)
        parameters = conv1 + (32 * 9 + 1) * 64 + (features + 1) * 128 + 129 * N_CLASSES
        pixels, quarter = height * width, (height // 2) * (width // 2)
        activations = 2 * 32 * pixels + 32 * quarter + 2 * 64 * quarter + 2 * features + 2 * 128 + N_CLASSES
        return parameters, activations
    per_pixel = (base_activations - RESNET_HEAD_VALUES) / (default_height * default_width)
    small_stem = base_parameters - default_channels * RESNET_STEM_WEIGHTS["small"]
    if min(height, width) < SMALL_IMAGE_SIDE:
        parameters = small_stem + channels * RESNET_STEM_WEIGHTS["small"]
        return parameters, math.ceil(per_pixel * height * width) + RESNET_HEAD_VALUES
    parameters = small_stem + channels * RESNET_STEM_WEIGHTS["imagenet"]
    stem = 3 * 64 * (height // 2) * (width // 2)  # convolution, normalisation, ReLU at half the side
    return parameters, stem + math.ceil(per_pixel * (height // 4) * (width // 4)) + RESNET_HEAD_VALUES


# scikit-learn: each rule maps (params, n, d, k) to (parameters, memory in bytes beyond them, which params set it)
Rule = Callable[[dict, int, int, int], tuple[int, int, tuple[str, ...]]]


def _leaves(params: dict, n_samples: int, default_depth: int | None = None) -> int:
    """The most leaves one fitted tree can have."""
    leaves = n_samples
    depth = params.get("max_depth", default_depth)
    if depth is not None:
        leaves = min(leaves, 2 ** min(int(depth), 63))
    if params.get("max_leaf_nodes") is not None:
        leaves = min(leaves, int(params["max_leaf_nodes"]))
    return max(leaves, 1)


def _trees(count: int, params: dict, n: int, values: int, default_depth: int | None = None) -> int:
    return count * (2 * _leaves(params, n, default_depth) - 1) * (NODE_VALUES + values)


def _forest(p: dict, n: int, d: int, k: int) -> tuple[int, int, tuple[str, ...]]:
    return _trees(p["n_estimators"], p, n, k), 0, ("n_estimators", "max_depth", "max_leaf_nodes")


def _tree(p: dict, n: int, d: int, k: int) -> tuple[int, int, tuple[str, ...]]:
    return _trees(1, p, n, k), 0, ("max_depth", "max_leaf_nodes")


def _gradient_boosting(p: dict, n: int, d: int, k: int) -> tuple[int, int, tuple[str, ...]]:
    trees = p["n_estimators"] * (k if k > 2 else 1)  # one regression tree per class and stage
    return _trees(trees, p, n, 1), 0, ("n_estimators", "max_depth", "max_leaf_nodes")


def _hist_gradient_boosting(p: dict, n: int, d: int, k: int) -> tuple[int, int, tuple[str, ...]]:
    trees = p["max_iter"] * (k if k > 2 else 1)
    return _trees(trees, p, n, 1), n * d, ("max_iter", "max_depth", "max_leaf_nodes")  # + the binned data, 1 byte each


def _ada_boost(p: dict, n: int, d: int, k: int) -> tuple[int, int, tuple[str, ...]]:
    return _trees(p["n_estimators"], {"max_depth": 1}, n, k), 0, ("n_estimators",)  # decision stumps


def _bagging(p: dict, n: int, d: int, k: int) -> tuple[int, int, tuple[str, ...]]:
    return _trees(p["n_estimators"], {}, n, k), 0, ("n_estimators",)  # unpruned trees


def _mlp(p: dict, n: int, d: int, k: int) -> tuple[int, int, tuple[str, ...]]:
    hidden = p["hidden_layer_sizes"]
    hidden = [hidden] if isinstance(hidden, int) else list(hidden)
    widths = [d, *hidden, k if k > 2 else 1]
    parameters = sum((n_in + 1) * n_out for n_in, n_out in pairwise(widths))
    if p.get("solver") == "lbfgs":
        batch = n  # full batch
    else:
        batch = min(MLP_AUTO_BATCH if p["batch_size"] == "auto" else int(p["batch_size"]), n)
    activations = 2 * batch * sum(widths) * SKLEARN_VALUE_BYTES  # activations and their deltas
    extra = (SKLEARN_TRAINING_COPIES - 1) * parameters * SKLEARN_VALUE_BYTES + activations
    return parameters, extra, ("hidden_layer_sizes", "batch_size")


def _stored_data(p: dict, n: int, d: int, k: int) -> tuple[int, int, tuple[str, ...]]:
    return n * (d + k), int(p.get("cache_size", 0) * 2**20), ("cache_size",) if "cache_size" in p else ()


def _kernel(p: dict, n: int, d: int, k: int) -> tuple[int, int, tuple[str, ...]]:
    if p.get("kernel") == "knn":
        return n * p["n_neighbors"], 0, ("kernel", "n_neighbors")
    copies = k if k > 2 and p.get("multi_class", "one_vs_rest") == "one_vs_rest" else 1
    return copies * n * n, 0, ("kernel",)  # an n x n kernel matrix (one per class, one-vs-rest)


def _linear(factor: Callable[[dict], int]) -> Rule:
    return lambda p, n, d, k: (factor(p) * k * (d + 1), 0, ())


def _count(value: object, default: int) -> int:
    """A count given as an int or as the list it counts (``Cs``, ``cv``), else ``default``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return len(value) if isinstance(value, list) else default


SKLEARN_RULES: dict[str, Rule] = {
    "RandomForestClassifier": _forest,
    "ExtraTreesClassifier": _forest,
    "DecisionTreeClassifier": _tree,
    "ExtraTreeClassifier": _tree,
    "GradientBoostingClassifier": _gradient_boosting,
    "HistGradientBoostingClassifier": _hist_gradient_boosting,
    "AdaBoostClassifier": _ada_boost,
    "BaggingClassifier": _bagging,
    "MLPClassifier": _mlp,
    "KNeighborsClassifier": _stored_data,
    "RadiusNeighborsClassifier": _stored_data,
    "SVC": _stored_data,
    "NuSVC": _stored_data,
    "GaussianProcessClassifier": _kernel,
    "LabelPropagation": _kernel,
    "LabelSpreading": _kernel,
    "LogisticRegression": _linear(lambda p: 1),
    "LogisticRegressionCV": _linear(lambda p: _count(p["Cs"], 10) * _count(p["cv"], 5)),
    "CalibratedClassifierCV": _linear(lambda p: _count(p["cv"], 5)),
    "SGDClassifier": _linear(lambda p: 1),
    "Perceptron": _linear(lambda p: 1),
    "PassiveAggressiveClassifier": _linear(lambda p: 1),
    "RidgeClassifier": _linear(lambda p: 1),
    "RidgeClassifierCV": _linear(lambda p: 1),
    "LinearSVC": _linear(lambda p: 1),
    "GaussianNB": _linear(lambda p: 2),
    "BernoulliNB": _linear(lambda p: 2),
    "MultinomialNB": _linear(lambda p: 2),
    "ComplementNB": _linear(lambda p: 2),
    "CategoricalNB": _linear(lambda p: PIXEL_LEVELS),
    "NearestCentroid": _linear(lambda p: 1),
    "DummyClassifier": _linear(lambda p: 0),
    "LinearDiscriminantAnalysis": lambda p, n, d, k: (d * d + k * d, 0, ()),
    "QuadraticDiscriminantAnalysis": lambda p, n, d, k: (k * d * d, 0, ()),
}


def sklearn_size(estimator: object, n_samples: int, n_features: int, n_classes: int) -> SizeEstimate:
    """The size of fitting the unfitted ``estimator`` on ``n_samples`` x ``n_features`` with ``n_classes``.

    Raises
    ------
    InputError
        If the estimator's class has no rule in :data:`SKLEARN_RULES`.
    """
    name = type(estimator).__name__
    rule = SKLEARN_RULES.get(name)
    if rule is None:
        raise InputError(
            f"expected a scikit-learn classifier whose size can be estimated before training, got {name}, which "
            f"has no size rule: choose one of {', '.join(sorted(SKLEARN_RULES))}"
        )
    params = estimator.get_params(deep=False)
    parameters, extra_bytes, sized_by = rule(params, n_samples, n_features, n_classes)
    fields = ", ".join(f"{key} {_shown(params.get(key))}" for key in sized_by) or f"{name} with any parameters"
    model = f"{name} on {n_samples} samples of {n_features} features"
    memory = parameters * SKLEARN_VALUE_BYTES + extra_bytes
    return SizeEstimate(model, parameters, memory, fields, fields)
