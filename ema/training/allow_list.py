"""The recipe allow-list: what a recipe (file or registry tag) may name, and nothing else.

A security boundary. Recipes are written by whoever can write a file or a registry tag,
so they are data, checked here before anything is built from them:

- a torch recipe takes only the fields of :class:`~ema.training.spec.TrainSpec`
  (:data:`TORCH_FIELD_TYPES`), each of its JSON type, counts bounded by
  :data:`TORCH_FIELD_MAXIMA` (the model's size is bounded separately by ``--max-params``);
- a scikit-learn recipe names a classifier of scikit-learn's own registry
  (:func:`sklearn.utils.discovery.all_estimators`) by class name or public import path
  (:func:`sklearn_classifiers`, :func:`resolve_classifier`); its parameters are names the
  class's constructor knows, with JSON scalars or (nested) lists of scalars as values
  (:func:`check_sklearn_params`);
- a recipe's ``"input"`` mapping takes only :data:`INPUT_FIELDS`.

Why: a name read from a recipe is never imported and a value is never a callable or an
object, so a recipe cannot run code of its author's choosing (a shell helper reached by
import path, a pickled object, a YAML tag). Everything outside this list is refused with
one line naming what was expected and what arrived. The recipe values built from checked
data live in :mod:`ema.training.recipes`.
"""

from __future__ import annotations

import inspect
import math
import sys
from functools import lru_cache

from ema.errors import InputError
from ema.training.spec import MAX_BATCH_SIZE, MAX_EPOCHS, MAX_HIDDEN_LAYERS, MAX_WIDTH

#: Torch recipe fields and the JSON type each takes ("widths": a non-empty list of integers).
TORCH_FIELD_TYPES = {
    "arch": "string",
    "hidden": "widths",
    "optimizer": "string",
    "lr": "number",
    "momentum": "number",
    "weight_decay": "number",
    "lr_decay": "number",
    "epochs": "integer",
    "batch_size": "integer",
    "seed": "integer",
}
#: Upper bounds on the counts a torch recipe may ask for (its model's size is bounded by ``--max-params``).
TORCH_FIELD_MAXIMA = {"hidden": MAX_WIDTH, "epochs": MAX_EPOCHS, "batch_size": MAX_BATCH_SIZE, "seed": (1 << 63) - 1}
#: Input representation fields of a recipe's ``"input"`` mapping.
INPUT_FIELDS = ("scale", "mean", "std")


def describe(value: object) -> str:
    """A short description of a value read from a recipe, for error messages."""
    text = repr(value)
    return f"{text[:80]}{'...' if len(text) > 80 else ''} ({type(value).__name__})"


@lru_cache(maxsize=1)
def sklearn_classifiers() -> dict[str, type]:
    """The allow-list: scikit-learn's registered classifiers, by class name and by each public import path.

    A public path is ``package.Class`` for every package on the way to the class's module
    whose name has no leading underscore and that exports the class itself
    (``sklearn.linear_model.LogisticRegression``). Built from scikit-learn's registry; no
    name read from a recipe is ever imported.
    """
    from sklearn.utils.discovery import all_estimators

    allowed = {}
    for name, cls in all_estimators(type_filter="classifier"):
        allowed[name] = cls
        parts = cls.__module__.split(".")
        for depth in range(1, len(parts) + 1):
            if parts[depth - 1].startswith("_"):
                break
            package = ".".join(parts[:depth])
            if getattr(sys.modules.get(package), name, None) is cls:
                allowed[f"{package}.{name}"] = cls
    return allowed


def resolve_classifier(estimator: object) -> type:
    """The scikit-learn classifier class a recipe names; refuses everything outside :func:`sklearn_classifiers`.

    Raises
    ------
    InputError
        If ``estimator`` is not a string naming a registered scikit-learn classifier.
    """
    if not isinstance(estimator, str):
        raise InputError(
            "expected 'estimator' as the name or public import path of a scikit-learn classifier, "
            f"got {describe(estimator)}"
        )
    allowed = sklearn_classifiers()
    cls = allowed.get(estimator)
    if cls is None:
        raise InputError(
            "expected 'estimator' to name a scikit-learn classifier from sklearn.utils.discovery.all_estimators "
            f"by class name or public import path (e.g. 'LogisticRegression', "
            f"'sklearn.linear_model.LogisticRegression'), got {estimator[:120]!r}"
        )
    return cls


def _check_param_value(name: str, value: object, depth: int = 0) -> object:
    """A parameter value as JSON scalars and (nested) lists of scalars; anything else is refused."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise InputError(f"expected parameter {name!r} as a finite number, got {value!r}")
        return value
    if isinstance(value, list) and depth < 2:
        return [_check_param_value(name, item, depth + 1) for item in value]
    raise InputError(
        f"expected parameter {name!r} as a JSON scalar (number, string, boolean, null) or a list of them, "
        f"got {describe(value)}"
    )


def check_sklearn_params(cls: type, params: object) -> dict:
    """Validated constructor parameters for ``cls``: known names, JSON scalar or list values.

    Raises
    ------
    InputError
        If ``params`` is not a mapping, names a parameter ``cls().get_params()`` does not know,
        or holds a value that is not a JSON scalar or list of scalars.
    """
    if not isinstance(params, dict):
        raise InputError(f"expected 'params' as a mapping of parameter names to values, got {describe(params)}")
    known = sorted(
        name
        for name, parameter in inspect.signature(cls).parameters.items()
        if parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
    )  # what get_params() reports, read without building an instance
    unknown = sorted(str(name) for name in params if name not in known)
    if unknown:
        raise InputError(f"unknown parameters {unknown} for {cls.__name__}; expected a subset of {known}")
    return {name: _check_param_value(name, value) for name, value in params.items()}


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_torch_fields(data: dict) -> dict:
    """Torch recipe fields of their JSON types and within bounds, ready for :class:`TrainSpec`.

    Raises
    ------
    InputError
        If a field is not one of :data:`TORCH_FIELD_TYPES`, not of its JSON type, or above its
        :data:`TORCH_FIELD_MAXIMA` bound.
    """
    unknown = sorted(str(name) for name in data if name not in TORCH_FIELD_TYPES)
    if unknown:
        raise InputError(f"unknown training recipe fields {unknown}; expected a subset of {sorted(TORCH_FIELD_TYPES)}")
    problems = []
    for name, value in data.items():
        kind, maximum = TORCH_FIELD_TYPES[name], TORCH_FIELD_MAXIMA.get(name)
        if kind == "string":
            ok, expected = isinstance(value, str), "a string"
        elif kind == "number":
            ok = _is_number(value) and math.isfinite(value)
            expected = "a finite number"
        elif kind == "integer":
            ok = _is_integer(value) and (maximum is None or value <= maximum)
            expected = f"an integer <= {maximum}"
        else:
            ok = (
                isinstance(value, list)
                and 0 < len(value) <= MAX_HIDDEN_LAYERS
                and all(_is_integer(width) and 1 <= width <= maximum for width in value)
            )
            expected = f"a list of 1 to {MAX_HIDDEN_LAYERS} integer widths in 1..{maximum}"
        if not ok:
            problems.append(f"{name} as {expected}, got {describe(value)}")
    if problems:
        raise InputError("invalid training recipe: expected " + "; ".join(problems))
    return data


def check_input_fields(data: object) -> dict:
    """A recipe's ``"input"`` mapping, checked to hold only :data:`INPUT_FIELDS`.

    Raises
    ------
    InputError
        If ``data`` is not a mapping or names a key outside :data:`INPUT_FIELDS`.
    """
    if not isinstance(data, dict) or any(name not in INPUT_FIELDS for name in data):
        raise InputError(f"expected 'input' as a mapping with keys among {list(INPUT_FIELDS)}, got {describe(data)}")
    return data
