"""A labelled set (images or a table) as arrays, with a content fingerprint."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ema.errors import InputError
from ema.inputs import cells_as_text, input_kind, listed_names, missing_cells, to_model_inputs

#: The embedded data's images are square, IMAGE_SIZE pixels a side: (n, 28, 28) uint8 as stored.
IMAGE_SIZE = 28
IMAGE_SHAPE = (IMAGE_SIZE, IMAGE_SIZE)
#: The shape of float32 pixels as models of the embedded data take them (ours take uint8 images (-1, 28, 28)).
MODEL_INPUT_SHAPE = (-1, 1, *IMAGE_SHAPE)

#: Number of hex digits of the sha256 kept in a fingerprint.
FINGERPRINT_LENGTH = 16


def class_count(labels: np.ndarray) -> int:
    """The classes a network trained on ``labels`` outputs: ``0 .. max label``, at least two.

    A two-class X-ray set trains a two-output network, not one of the digits' ten: the
    audit's chance level and a calibration model's outputs follow the target's classes
    (:func:`ema.training.fit.fit`; a calibration model is cached under its count).
    """
    return max(2, int(labels.max()) + 1)


def canonical_nan(x: np.ndarray) -> np.ndarray:
    """``x`` with every NaN (a table's missing cell) as numpy's one NaN, whatever its sign and payload bits (pandas,
    Arrow and arithmetic write several): tables that hold the same values and gaps then have the same bytes, to hash
    and to compare. Arrays without NaN are returned as they are, uncopied."""
    if x.dtype.kind != "f":
        return x
    missing = np.isnan(x)
    return np.where(missing, np.nan, x).astype(x.dtype, copy=False) if missing.any() else x


def fingerprint(*arrays: np.ndarray) -> str:
    """A short content hash of arrays (their dtype, shape and bytes, NaN as :func:`canonical_nan`; a table with text
    columns as :func:`~ema.inputs.cells_as_text`), stable across runs."""
    digest = hashlib.sha256()
    for array in arrays:
        array = np.ascontiguousarray(cells_as_text(array) if array.dtype == object else canonical_nan(array))
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(array.reshape(-1).view(np.uint8))  # the array's own bytes, not a copy
    return digest.hexdigest()[:FINGERPRINT_LENGTH]


@dataclass(frozen=True)
class ArraySet:
    """Inputs with labels: images of any size, or a table of named features.

    Attributes
    ----------
    name : str
        What the set is (``"M1"``, ``"calibration"``, a file name).
    x : ndarray
        Images: uint8 of shape (n, H, W) (grey) or (n, H, W, C), values 0-255. Tables: numbers of
        shape (n, d). See :func:`ema.inputs.input_kind`.
    y : ndarray of shape (n,), int64
        Class labels.
    index : ndarray of shape (n,), int64
        Each sample's position in the source it was drawn from.
    features : tuple of str or None
        A table's column names (``x0``, ``x1``, ... when the source names none); None for images.
    source : str or None
        The set file it was read from, as the user gave it (``data/patients.csv``), which messages name (:attr:`where`);
        None for a set not read from one.
    """

    name: str
    x: np.ndarray
    y: np.ndarray
    index: np.ndarray
    features: tuple[str, ...] | None = None
    source: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        check_set(self.x, self.y, self.index, where=self.name)
        if self.kind == "table":
            names = self.features if self.features is not None else tuple(f"x{i}" for i in range(self.x.shape[1]))
            if len(names) != self.x.shape[1] or len(set(names)) != len(names):
                raise InputError(
                    f"{self.name}: expected {self.x.shape[1]} distinct feature names, got {len(names)} "
                    f"({len(set(names))} distinct)"
                )
            object.__setattr__(self, "features", tuple(map(str, names)))
        elif self.features is not None:
            raise InputError(f"{self.name}: expected feature names only for a table, got them for images")

    @property
    def where(self) -> str:
        """How messages name the set: its file as the user gave it (``data/patients.csv``, where :attr:`name` is
        ``patients``), else its name."""
        return self.name if self.source is None else self.source

    @property
    def kind(self) -> str:
        """``"image"`` or ``"table"``."""
        return input_kind(self.x)

    def __len__(self) -> int:
        return int(self.y.size)

    @cached_property
    def fingerprint(self) -> str:
        if self.kind == "table":
            return fingerprint(self.x, self.y, np.array(self.features))
        return fingerprint(self.x, self.y)

    @cached_property
    def missing_cells(self) -> int:
        """How many of a table's numbers are missing (NaN, read with ``--allow-missing``); 0 for images."""
        return missing_cells(self.x)

    def take(self, positions: np.ndarray, name: str | None = None) -> ArraySet:
        """The subset at ``positions`` (positions within this set)."""
        return ArraySet(name or self.name, self.x[positions], self.y[positions], self.index[positions], self.features)

    def model_inputs(self) -> np.ndarray:
        """What our own models take: images as float32 (n, C, H, W) in [0, 1], tables as float32 (n, d)."""
        return to_model_inputs(self.x)

    @property
    def layout(self) -> tuple[str, tuple[int, ...]]:
        """What a model takes from one sample: ``("table", (features,))`` or ``("image", (C, H, W))``, a grey
        image's channel axis or its absence alike."""
        if self.kind == "table":
            return "table", self.x.shape[1:]
        height, width, *channels = self.x.shape[1:]
        return "image", (channels[0] if channels else 1, height, width)

    def describe(self) -> str:
        """The kind and size, for messages and tags: ``image 64x64x3``, ``table of 30 features``."""
        if self.kind == "table":
            return f"table of {self.x.shape[1]} features"
        return "image " + "x".join(map(str, self.x.shape[1:]))


def check_set(x: np.ndarray, y: np.ndarray, index: np.ndarray, *, where: str) -> None:
    """Refuse inputs of no known kind, and labels or indices that are not int64 of one per sample."""
    try:
        input_kind(x)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    for name, array in (("y", y), ("index", index)):
        if not isinstance(array, np.ndarray) or array.dtype != np.int64 or array.shape != (x.shape[0],):
            raise InputError(
                f"{where}: expected `{name}` as int64 of shape ({x.shape[0]},), got "
                f"{getattr(array, 'dtype', type(array).__name__)} of shape {getattr(array, 'shape', None)}"
            )


def in_query_layout(data: ArraySet, query: ArraySet, *, role: str) -> ArraySet:
    """``data`` (the ``role``, e.g. a calibration file) laid out as ``query`` is: refused unless its inputs are of
    ``query``'s kind and shape; a table holding the query's columns (in another order, or with others the query
    does not have, such as an ID) is returned with the query's columns in the query's order.

    Raises
    ------
    InputError
        Naming both kinds, and for tables the columns that differ.
    """
    if (
        data.kind == query.kind == "table"
        and data.features != query.features
        and set(data.features) >= set(query.features)
    ):
        order = [data.features.index(name) for name in query.features]
        data = ArraySet(data.name, data.x[:, order], data.y, data.index, query.features)
    if data.kind == query.kind == "image" and data.layout == query.layout:  # a grey image's axis or its absence
        data = ArraySet(data.name, data.x.reshape(len(data.x), *query.x.shape[1:]), data.y, data.index)
    if data.kind == query.kind and data.x.shape[1:] == query.x.shape[1:] and data.features == query.features:
        return data
    detail = ""
    if data.kind == query.kind == "table" and data.features != query.features:
        missing = [name for name in query.features if name not in data.features]
        extra = [name for name in data.features if name not in query.features]
        detail = f" (missing {listed_names(missing) or 'none'}; extra {listed_names(extra) or 'none'})"
    raise InputError(
        f"{role} {data.where}: expected inputs like the query's ({query.describe()}), got {data.describe()}{detail}; "
        f"{_layout_advice(data, query, role)}"
    )


def _layout_advice(data: ArraySet, query: ArraySet, role: str) -> str:
    """What makes ``data`` (the ``role``) like ``query``: the query's columns, its channels, or its image size."""
    if query.kind == "table" or data.kind != query.kind:
        return f"give a {role} with the query's {'columns' if query.kind == 'table' else 'kind of inputs'}"
    (channels, height, width), (own_channels, *_) = query.layout[1], data.layout[1]
    if own_channels != channels:
        return f"give a {role} of {channels}-channel images, as the query's"
    if height != width:
        return f"give a {role} of {height}x{width} images, as the query's"
    return f"resize it with --image-size {height}, as the query's"


def check_within_classes(data: ArraySet, n_classes: int, *, role: str) -> None:
    """Refuse ``data`` (the ``role``) when it has labels outside the ``n_classes`` classes the model outputs.

    Raises
    ------
    InputError
        Naming how many labels are outside, the first one and its row, and the model's classes; for labels of as many
        distinct values as the model has classes (a model fitted on 1, 2, 3), how they would be numbered.
    """
    outside = (data.y < 0) | (data.y >= n_classes)
    if not outside.any():
        return
    first = int(np.argmax(outside))
    rows = np.array_equal(data.index, np.arange(len(data)))  # else a part of its source, named by index
    where = f"data row {first}, counted from 0" if rows else f"the sample of index {int(data.index[first])}"
    classes = np.unique(data.y)
    advice = (
        f"number them 0..{n_classes - 1} in the order of the model's outputs ({sorted_codes(classes.tolist())}"
        f"{_shift(classes)})"
        if classes.size == n_classes
        else f"give a {role} of the model's classes only, numbered as its outputs are"
    )
    raise InputError(
        f"{role} {data.name}: expected labels of the model's {n_classes} classes (0..{n_classes - 1}), got "
        f"{int(outside.sum())} outside (first {int(data.y[first])}, {where}; labels from "
        f"{int(data.y.min())} to {int(data.y.max())}); {advice}"
    )


def _shift(classes: np.ndarray) -> str:
    """``"; subtract 1"`` for the sorted ``classes`` 1..k (any consecutive run but 0..k-1), else nothing."""
    start = int(classes[0])
    if start == 0 or not np.array_equal(classes, np.arange(start, start + classes.size)):
        return ""
    return f"; subtract {start}" if start > 0 else f"; add {-start}"


def sorted_codes(classes: list, most: int = 6) -> str:
    """How ``classes`` (text or whole numbers) would be numbered in sorted order, as scikit-learn orders a fitted
    model's ``classes_``."""
    classes = sorted(set(classes))
    codes = ", ".join(f"{label!r} = {code}" for code, label in enumerate(classes[:most]))
    more = f" and {len(classes) - most} more" if len(classes) > most else ""
    return f"a scikit-learn model fitted on these labels sorts them: {codes}{more}"


def check_has_classes(data: ArraySet, classes: np.ndarray, *, role: str, of_what: str) -> None:
    """Refuse ``data`` (the ``role``, e.g. a calibration file) unless it has samples of each of ``classes`` (those the
    model outputs, ``of_what`` in words): a model trained on it must learn every class the target predicts.

    Raises
    ------
    InputError
        Naming the classes it lacks.
    """
    missing = np.setdiff1d(classes, data.y)
    if missing.size:
        raise InputError(
            f"{role} {data.name}: expected samples of each of {of_what}, got none of class "
            f"{listed_names(missing.tolist())}; give a {role} with every class"
        )
