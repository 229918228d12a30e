"""What a model returned, turned into validated probabilities: output kinds, numbers only, labels one-hot."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
from scipy.special import softmax

from ema.errors import InputError
from ema.signals import ROW_SUM_TOLERANCE, check_probabilities, probability_rows
from ema.validation import check_choice

#: What a model may return. ``auto`` accepts probabilities and labels, and refuses logits with advice.
OUTPUT_KINDS = ("auto", "probabilities", "logits", "labels")
ACCESS_PROBABILITIES = "probabilities"
ACCESS_LABEL_ONLY = "label-only"
#: The most classes a label-only model may name (its labels are one-hot encoded: an absurd label would be huge).
MAX_LABEL_CLASSES = 10_000
#: A class written as a string: an integer, as JSON writes a map's integer keys.
INTEGER_KEY = re.compile(r"-?\d+")


@dataclass(frozen=True)
class Predictions:
    """Validated model outputs.

    Attributes
    ----------
    proba : ndarray of shape (n_samples, n_classes)
        Probabilities; one-hot rows when the model returns only labels.
    access : {"probabilities", "label-only"}
    detected : str
        How the output kind was decided, for the run's tags.
    """

    proba: np.ndarray
    access: str
    detected: str

    def with_classes(self, n_classes: int) -> Predictions:
        """Label-only predictions one-hot encoded over ``n_classes`` (those of the calibration)."""
        if self.access != ACCESS_LABEL_ONLY or self.proba.shape[1] == n_classes:
            return self
        labels = self.proba.argmax(axis=1)
        if labels.max() >= n_classes:
            raise InputError(f"expected labels in 0..{n_classes - 1}, got a label {labels.max()}")
        return Predictions(np.eye(n_classes)[labels], self.access, self.detected)


def _looks_like_labels(outputs: np.ndarray) -> bool:
    flat = outputs.reshape(len(outputs), -1)
    return flat.shape[1] == 1 and np.isfinite(flat).all() and np.array_equal(flat, np.rint(flat))


def interpret_outputs(outputs: np.ndarray, kind: str = "auto") -> Predictions:
    """Turn raw model outputs into validated probabilities.

    Parameters
    ----------
    outputs : ndarray
        (n, C) probabilities or logits, or (n,) / (n, 1) integer labels.
    kind : {"auto", "probabilities", "logits", "labels"}
        What the outputs are; ``auto`` detects probabilities and labels and refuses
        anything else, suggesting ``--outputs logits``.

    Raises
    ------
    InputError
        If the outputs are not of the declared or detected kind, or are booleans (see
        :func:`refuse_booleans`), whatever the kind.
    """
    check_choice("outputs", kind, OUTPUT_KINDS)
    outputs = np.asarray(outputs)
    refuse_booleans(outputs, "the model")
    if outputs.ndim == 0 or len(outputs) == 0:
        raise InputError(f"expected model outputs for at least one sample, got shape {outputs.shape}")
    if kind == "labels" or (kind == "auto" and _looks_like_labels(outputs)):
        return _labels_to_predictions(
            outputs, "declared labels" if kind == "labels" else "one integer per sample: labels"
        )
    outputs = outputs.astype(np.float64)
    if outputs.ndim == 1 or (outputs.ndim == 2 and outputs.shape[1] == 1):
        values = outputs.reshape(-1)
        example = next(iter(values[values != np.rint(values)]), values[0])
        looks = (
            "one class's probability only? return every class's (predict_proba)"
            if np.isfinite(values).all() and values.min() >= 0 and values.max() <= 1
            else "a regressor's outputs? the audit needs a classifier"
        )
        raise InputError(
            "expected class probabilities of shape (n_samples, n_classes) or one integer label per sample, got one "
            f"number per sample (shape {outputs.shape}, such as {example:.6g}): {looks}"
        )
    if outputs.ndim != 2:
        raise InputError(f"expected model outputs of shape (n_samples, n_classes), got shape {outputs.shape}")
    if kind == "logits":
        if not np.isfinite(outputs).all():
            raise InputError("expected finite logits, got NaN or inf")
        return Predictions(softmax(outputs, axis=1), ACCESS_PROBABILITIES, "declared logits: softmax applied")
    detected = (
        "declared probabilities"
        if kind == "probabilities"
        else "rows of non-negative values summing to 1: probabilities"
    )
    if kind == "auto" and np.isfinite(outputs).all():
        if not probability_rows(outputs).all():
            sums = outputs.sum(axis=1)
            raise InputError(
                "expected class probabilities (rows of non-negative values summing to 1), got rows summing to "
                f"{sums.min():.4g}..{sums.max():.4g} with values in {outputs.min():.4g}..{outputs.max():.4g}: "
                "these look like logits; pass --outputs logits to apply softmax"
            )
    return Predictions(check_probabilities(outputs)[0], ACCESS_PROBABILITIES, detected)


def _labels_to_predictions(outputs: np.ndarray, detected: str) -> Predictions:
    """One-hot rows over the classes seen so far; :meth:`Predictions.with_classes` widens them to the calibration's."""
    labels = outputs.reshape(len(outputs), -1)
    if labels.shape[1] != 1:
        raise InputError(
            f"expected one integer label per sample (--outputs labels), got outputs of shape {outputs.shape}: "
            "several numbers per sample are scores; give --outputs auto (probabilities are detected), probabilities "
            "or logits"
        )
    if not np.array_equal(labels, np.rint(labels)) or np.abs(labels).max() >= 2**62:
        fractional = labels[labels != np.rint(labels)]
        example = f" such as {fractional[0]:.6g}" if fractional.size else ""
        raise InputError(
            f"expected one integer class label per sample, got non-integer values{example} (a regressor, or "
            "scores, not a classifier's labels)"
        )
    labels = labels[:, 0].astype(np.int64)
    if labels.min() < 0 or labels.max() >= MAX_LABEL_CLASSES:
        raise InputError(
            f"expected class labels in 0..{MAX_LABEL_CLASSES - 1}, got values from {labels.min()} to {labels.max()}"
        )
    return Predictions(np.eye(int(labels.max()) + 1)[labels], ACCESS_LABEL_ONLY, detected)


def numeric_outputs(raw: object, source: str = "the model", output_name: str | None = None) -> np.ndarray:
    """A model's raw outputs as a numeric array; strings, objects, ``None`` and ragged lists are refused.

    Accepts what a pyfunc ``predict`` returns: an ndarray, a list, a pandas DataFrame or
    Series (a single column whose cells are vectors is stacked), a mapping of equal-length
    columns, a mapping of named outputs (an ONNX model's ``{"label": ..., "probabilities": ...}``:
    ``output_name``, else the probability-like one, see :func:`select_output`), or a list of
    ``{class: probability}`` maps (scikit-learn models converted to ONNX with ``zipmap``).

    Raises
    ------
    InputError
        Naming ``source`` and what came back, when the outputs are not numbers.
    """
    if hasattr(raw, "to_dict") and hasattr(raw, "to_numpy"):  # pandas DataFrame or Series
        raw = raw.to_dict(orient="list") if hasattr(raw, "columns") else raw.to_numpy()
    if isinstance(raw, dict):
        raw = select_output(raw, source, output_name)
    elif output_name is not None:
        raise InputError(
            f"expected {source} to return named outputs with {output_name!r}, got {_describe_outputs(raw)}"
        )
    if _is_class_maps(raw):
        raw = _stack_class_maps(raw)
    try:
        outputs = np.asarray(raw)
    except (ValueError, TypeError, OverflowError) as exc:
        raise InputError(
            f"expected {source} to return numbers (probabilities, logits or labels), got {_describe_outputs(raw)} "
            f"that do not form an array: {' '.join(str(exc).split())[:200]}"
        ) from exc
    refuse_booleans(outputs, source)
    if outputs.dtype.kind in "iuf":
        return outputs
    if outputs.dtype == object and outputs.ndim > 0:
        try:
            converted = outputs.astype(np.float64)
        except (ValueError, TypeError, OverflowError):
            converted = None
        if converted is not None and all(_is_number(v) for v in outputs.reshape(-1)[:1000]):
            return converted
    raise InputError(
        f"expected {source} to return numbers (probabilities, logits or labels), got {_describe_outputs(outputs)}"
    )


def refuse_booleans(outputs: np.ndarray, source: str) -> None:
    """Refuse booleans, under every output kind: they are neither probabilities nor class labels.

    A bool matrix is a set of classes per sample (one-hot or several at once), not a
    distribution: read as probabilities it fakes full confidence, so that a label-only answer
    passes for probabilities and the confidence and entropy metrics measure nothing. A bool
    vector names no class (which one is True?). Reading one-hot rows as labels would be sound
    only for that one format; a model that answers labels can return their integers.

    Raises
    ------
    InputError
        If ``outputs`` is a boolean array.
    """
    if outputs.dtype == bool:
        raise InputError(
            f"expected {source} to return class probabilities or integer class labels, got booleans (shape "
            f"{outputs.shape}), which are neither: return predict_proba's probabilities, or the predicted classes "
            "as integers for a label-only audit"
        )


def select_output(outputs: dict, source: str, output_name: str | None = None) -> object:
    """One output of a mapping: ``output_name``; else columns of one value each; else the probability-like output.

    A mapping whose values all hold one number per sample is a DataFrame's columns (one per
    class, or a single label column) and becomes rows. Otherwise its values are named outputs
    of different kinds (an ONNX model's label and probabilities): the one whose rows are
    non-negative and sum to 1 is taken, else the only one with a value per class (logits).

    Raises
    ------
    InputError
        If ``output_name`` is not among the outputs, or no single output is probability-like.
    """
    names = [str(name) for name in outputs]
    if output_name is not None:
        if output_name not in outputs:
            raise InputError(f"expected {source} to return an output named {output_name!r}, got outputs {names}")
        return outputs[output_name]
    if len(outputs) == 1 or all(_is_scalar_column(value) for value in outputs.values()):
        return stack_columns(outputs, source)
    candidates = {name: _as_matrix(value) for name, value in outputs.items()}
    matrices = {name: m for name, m in candidates.items() if m is not None}
    probabilities = [name for name, m in matrices.items() if looks_like_probabilities(m)]
    chosen = probabilities if probabilities else list(matrices)
    if len(chosen) != 1:
        raise InputError(
            f"expected {source} to return one probability-like output among its outputs {names}, got "
            f"{len(chosen)}; pass --output-name NAME"
        )
    return matrices[chosen[0]]


def _is_scalar_column(value: object) -> bool:
    """A DataFrame column: a sequence (or 1-D array) of plain numbers."""
    if isinstance(value, np.ndarray):
        return value.ndim == 1 and value.dtype.kind in "biuf"
    return isinstance(value, (list, tuple)) and all(_is_number(v) or isinstance(v, bool) for v in value[:1000])


def _as_matrix(value: object) -> np.ndarray | None:
    """A named output as an (n, C > 1) float matrix, or None when it is not one."""
    if _is_class_maps(value):
        value = _stack_class_maps(value)
    try:
        matrix = np.asarray(value)
        if matrix.dtype == bool:  # a set of classes, never a candidate for probabilities
            return None
        matrix = matrix.astype(np.float64)
    except (ValueError, TypeError):
        return None
    return matrix if matrix.ndim == 2 and matrix.shape[1] > 1 else None


def looks_like_probabilities(outputs: np.ndarray) -> bool:
    """Whether numeric outputs are an (n, C > 1) matrix of finite rows of probabilities."""
    matrix = np.asarray(outputs, dtype=np.float64)
    return bool(
        matrix.ndim == 2 and matrix.shape[1] > 1 and np.isfinite(matrix).all() and probability_rows(matrix).all()
    )


#: The keys of a prediction record (a predicted label and its score), which is not a map of classes.
LABEL_SCORE_RECORD = frozenset({"label", "score"})


def _is_class_maps(value: object) -> bool:
    """A list of ``{class: probability}`` maps (ONNX ``ZipMap``) of two classes or more: integer classes (JSON writes
    them as strings), or the class names of a model fitted on text labels, whose values then sum to 1 (not records
    such as ``{"label": 3, "score": 0.9}``)."""
    if not (isinstance(value, (list, tuple)) and value and all(isinstance(row, dict) for row in value[:1000])):
        return False
    first = value[0]
    if len(first) < 2 or not all(isinstance(key, (int, np.integer, str)) and _is_number(p) for key, p in first.items()):
        return False
    named = not all(_is_integer_key(key) for key in first)
    if named and set(first) == LABEL_SCORE_RECORD:  # {"label": 0, "score": 1.0} sums to 1 too
        return False
    return not named or all(abs(sum(row.values()) - 1.0) <= ROW_SUM_TOLERANCE for row in value[:1000])


def _is_integer_key(key: object) -> bool:
    """An integer class, or one written as a string by JSON (``"3"``, ``"-1"``)."""
    return isinstance(key, (int, np.integer)) or (isinstance(key, str) and INTEGER_KEY.fullmatch(key) is not None)


def _class_order(classes: object) -> list:
    """Classes as a model's columns are ordered: integers by value; names sorted, as scikit-learn sorts ``classes_``."""
    keys = list(classes)
    return sorted(keys, key=int) if all(map(_is_integer_key, keys)) else sorted(keys, key=str)


def _stack_class_maps(maps: list[dict]) -> list[list]:
    """``{class: probability}`` maps as rows ordered by class."""
    classes = _class_order(maps[0])
    if any(set(row) != set(classes) for row in maps):
        raise InputError(f"expected every class-probability map to hold the classes {classes[:20]}, got another set")
    return [[row[c] for c in classes] for row in maps]


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _describe_outputs(outputs: object) -> str:
    """What a model returned, in a few words: kind, dtype, shape and a first value."""
    if not isinstance(outputs, np.ndarray):
        return f"a {type(outputs).__name__}"
    kinds = {
        "U": "strings",
        "S": "bytes",
        "O": "Python objects",
        "c": "complex numbers",
        "M": "dates",
        "m": "durations",
    }
    kind = kinds.get(outputs.dtype.kind, f"values of dtype {outputs.dtype}")
    first = repr(outputs.reshape(-1)[0])[:60] if outputs.size else "nothing"
    return f"{kind} (dtype {outputs.dtype}, shape {outputs.shape}), e.g. {first}"


def stack_columns(columns: dict, source: str) -> object:
    """Columns ``{name: [v, ...]}`` as rows; one column of vectors becomes those vectors.

    Used for a pyfunc's mapping and a scoring server's column reply alike; what is not a
    mapping of sequences is handed back for :func:`numeric_outputs` to refuse.
    """
    values = list(columns.values())
    if not values or not all(isinstance(v, (list, tuple, np.ndarray)) for v in values):
        return np.asarray(columns, dtype=object)  # refused by the caller with what came back
    if len({len(v) for v in values}) != 1:
        raise InputError(
            f"expected {source} to return columns of one value per sample, got columns of lengths "
            f"{ {str(k): len(v) for k, v in columns.items()} }"
        )
    if len(values) == 1:
        return values[0]  # one column: scalars per sample (labels) or a vector per sample (probabilities)
    return [list(row) for row in zip(*values, strict=True)]
