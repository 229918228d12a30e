"""The input pipeline, in one place: from stored arrays to what a model takes, for any kind of input.

A labelled set stores its inputs as they come (:class:`ema.data.arrays.ArraySet`):

- **images**: uint8 of shape (n, H, W) or (n, H, W, C), values 0-255, any size;
- **tables**: shape (n, d), one column per named feature: numbers, or an object array when some
  columns hold text (categories such as ``"north"``), which go to the model as text.

:func:`to_model_inputs` turns them into what our own models take (images as float32
(n, C, H, W) in [0, 1], as torchvision's ``ToTensor`` does; tables as float32), and
:func:`prepare_inputs` into what a logged model declares (its :class:`InputSpec`: dtype, shape,
channel order, named columns), scaled by an :class:`InputTransform`. Training, the oracles and
the engines all go through these two functions, so a model is scored on exactly the inputs it
was trained on.

Adding an input kind: teach :func:`input_kind` to recognise its arrays, :func:`to_model_inputs`
what a model takes for it, and the readers in :mod:`ema.data.files` its file format.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ema.errors import InputError
from ema.image_shapes import DEFAULT_PIXEL_ORDER, PIXEL_ORDERS, fit_shape, images_shape, integer_pixels
from ema.input_transform import IMAGE_CHANNELS, InputTransform
from ema.validation import check_choice

#: The kinds of input a labelled set can hold.
INPUT_KINDS = ("image", "table")


def input_kind(x: np.ndarray) -> str:
    """``"image"`` for uint8 (n, H, W) or (n, H, W, C), ``"table"`` for numbers (or objects: text and numbers) of
    shape (n, d).

    Raises
    ------
    InputError
        For anything else, naming what arrived.
    """
    dtype = getattr(x, "dtype", None)
    shape = getattr(x, "shape", None)
    if isinstance(x, np.ndarray) and dtype.kind in "uifO" and x.ndim == 2:
        return "table"
    if (
        isinstance(x, np.ndarray)
        and dtype == np.uint8
        and (x.ndim == 3 or (x.ndim == 4 and x.shape[3] in IMAGE_CHANNELS))
    ):
        return "image"
    raise InputError(
        "expected `x` as uint8 images of shape (n, height, width) or (n, height, width, channels), or a table of "
        f"numbers (or text) of shape (n, features), got {dtype if dtype is not None else type(x).__name__} of shape "
        f"{shape}"
    )


def to_model_inputs(x: np.ndarray) -> np.ndarray:
    """What our own models take: images as float32 (n, C, H, W) in [0, 1], tables as float32 (n, d).

    Images are scaled as torchvision's ``ToTensor`` does, in one copy; float pixels already
    of shape (n, C, H, W) pass unchanged; a table with text columns passes as it is (a
    scikit-learn pipeline of the user's encodes them; our own recipes take numbers only).
    """
    x = np.asarray(x)
    if x.dtype == object:
        return x
    if x.dtype != np.uint8 or x.ndim == 2:
        return np.asarray(x, dtype=np.float32)
    channels_first = x[:, None, :, :] if x.ndim == 3 else x.transpose(0, 3, 1, 2)
    pixels = channels_first.astype(np.float32)
    pixels /= np.float32(255.0)
    return pixels


#: Input dtypes a model may declare for its pixels: integers get 0-255, floats get scaled pixels.
INPUT_DTYPES = ("uint8", "int32", "int64", "float32", "float64")
#: The dtype of a column of text in a column-based signature (MLflow's ``string``).
TEXT_DTYPE = "str"
#: Sizes of the last axis that make a tensor signature of variable height and width, (-1, -1, -1, C), channels last.
LAST_AXIS_CHANNELS = (1, 3, 4)


def _check_text_of_words(x: np.ndarray, names: Sequence[str], *, where: str, taker: str) -> None:
    """Refuse a text column holding numbers among its words, for ``taker`` (a model, a recipe) that takes numbers
    only: a column of numbers with a stray word ("unknown") is broken, not a category to leave out.

    Raises
    ------
    InputError
        Naming the first such column, the first cell that is not a number and its row.
    """
    for column in np.flatnonzero(text_columns(x)):
        numbers = pd.to_numeric(pd.Series(x[:, column]), errors="coerce").notna().to_numpy()
        if not numbers.any():
            continue
        row = int(np.argmin(numbers))
        found = (
            f"{int((~numbers).sum())} cell(s) of text among them, such as {x[row, column]!r} (data row {row}, counted "
            "from 0)"
            if not numbers.all()
            else "a column read as text whose cells here are all numbers: another row of its file holds text"
        )
        raise InputError(
            f"{where}: expected numbers in column {names[column]!r} ({taker} takes numbers), got {found}; correct "
            "or remove the text (nothing is filled in)"
        )


def numeric_columns(
    x: np.ndarray, names: Sequence[str], *, where: str, taker: str, advice: str = "encode them as numbers"
) -> tuple[np.ndarray, tuple[str, ...], list[str]]:
    """A table's numeric columns (float64 when it had text), their names, and the names of the text columns left out,
    for ``taker`` (a model, a recipe) that takes numbers; a table without text as it is.

    Raises
    ------
    InputError
        If a text column holds numbers among its words (:func:`_check_text_of_words`), or every column holds text
        (``advice`` says what to do).
    """
    text = text_columns(x)
    if not text.any():
        return x, tuple(names), []
    _check_text_of_words(x, names, where=where, taker=taker)
    if text.all():
        raise InputError(f"{where}: expected numbers for {taker}, got only text columns ({listed_names(list(names))}); "
                         f"{advice}")  # fmt: skip
    kept = ~text
    return (
        x[:, kept].astype(np.float64),
        tuple(name for name, k in zip(names, kept, strict=True) if k),
        [str(name) for name, t in zip(names, text, strict=True) if t],
    )


def cells_as_text(x: np.ndarray) -> np.ndarray:
    """A table with text columns as one array of text: its numbers as float64 text, so that 3 and 3.0 (an integer
    column of a CSV, the same column read back from an ``.npz``) read alike."""
    text = text_columns(x)
    cells = np.empty(x.shape, dtype=object)
    cells[:, text] = x[:, text]
    cells[:, ~text] = x[:, ~text].astype(np.float64).astype(str)
    return cells.astype(str)


def missing_cells(x: np.ndarray) -> int:
    """How many numbers of a table ``x`` (n, d) are missing (NaN: a cell read with ``--allow-missing``); 0 for a table
    of integers, and for images (uint8, or float pixels of more than two axes)."""
    return int(missing_mask(x).sum())


def missing_mask(x: np.ndarray) -> np.ndarray:
    """Which numbers of a table ``x`` (n, d) are missing (NaN), as booleans (n, d_numbers) over its number columns;
    (n, 0) for a table of integers and for images, which have none."""
    if x.ndim != 2 or x.dtype.kind not in "fO":
        return np.zeros((*x.shape[:1], 0), dtype=bool)
    numbers = x[:, ~text_columns(x)].astype(np.float64) if x.dtype == object else x
    return np.isnan(numbers)


def text_columns(x: np.ndarray) -> np.ndarray:
    """Which columns of a table hold text (its first row decides: a table's columns each hold one kind)."""
    if x.dtype != object or len(x) == 0:
        return np.zeros(x.shape[1], dtype=bool)
    return np.array([isinstance(value, str) for value in x[0]], dtype=bool)


@dataclass(frozen=True)
class InputSpec:
    """What a model's inputs look like, as its signature (or input example) declares them.

    Attributes
    ----------
    shape : tuple of int or None
        ``(-1, ...)``: images are reshaped to it, e.g. (-1, 784), (-1, 28, 28), (-1, 1, 28, 28),
        (-1, 28, 28, 1). None: as the images come, (n, 1, 28, 28).
    dtype : str
        One of :data:`INPUT_DTYPES`. Integer dtypes receive the raw pixel values 0-255 (the
        model scales them itself); float dtypes receive pixels in [0, 1] after the input transform.
    columns : tuple of str or None
        A column-based signature: a DataFrame with one column per feature (or pixel), named so.
    column_dtypes : tuple of str or None
        Each column's dtype, when a column-based signature mixes them (``dtype`` is then the
        widest number, or :data:`TEXT_DTYPE` when every column holds text); None: every column
        has ``dtype``. Only columns may hold text.
    tensor_name : str or None
        The name a tensor signature gives its input, if any (a Parquet request names its column so).
    types_declared : bool
        False for columns known by name alone (a scikit-learn model's ``feature_names_in_``, no
        signature): each column then takes what the table holds, text as text, numbers as ``dtype``.
    channels_last : int or None
        The channel count of a tensor signature of variable height and width that puts channels
        last, (-1, -1, -1, C) with C in :data:`LAST_AXIS_CHANNELS` (``shape`` is then None): images
        go channels last at their own size. None: images go as ``shape`` says.
    pixel_order : {"chw", "hwc"}
        How a colour image's values are ordered where it is flattened (or reshaped) to fit
        ``shape`` or the columns: channel by channel, or pixel by pixel (:mod:`ema.image_shapes`).
    """

    shape: tuple[int, ...] | None = None
    dtype: str = "float32"
    columns: tuple[str, ...] | None = None
    column_dtypes: tuple[str, ...] | None = None
    tensor_name: str | None = None
    types_declared: bool = True
    channels_last: int | None = None
    pixel_order: str = DEFAULT_PIXEL_ORDER

    def __post_init__(self) -> None:
        check_choice("pixel order", self.pixel_order, PIXEL_ORDERS)
        allowed = INPUT_DTYPES if self.columns is None else (*INPUT_DTYPES, TEXT_DTYPE)
        for dtype in (self.dtype, *(self.column_dtypes or ())):
            if dtype not in allowed:
                raise InputError(f"expected model inputs of a dtype in {allowed}, got {dtype!r}")
        if self.column_dtypes is not None and (self.columns is None or len(self.column_dtypes) != len(self.columns)):
            raise InputError(
                f"expected one dtype per declared column, got {self.column_dtypes!r} for columns {self.columns!r}"
            )
        if self.shape is not None:
            if not self.shape or any(isinstance(d, bool) or not isinstance(d, int) for d in self.shape):
                raise InputError(f"expected an input shape as integers (-1, ...), got {self.shape!r}")
            if any(d < 1 for d in self.shape[1:]):
                raise InputError(f"expected an input shape with fixed sizes after the batch, got {self.shape!r}")
        if self.channels_last is not None and (
            self.channels_last not in LAST_AXIS_CHANNELS or self.shape is not None or self.columns is not None
        ):
            raise InputError(
                f"expected channels_last among {LAST_AXIS_CHANNELS} for a tensor of variable height and width (no "
                f"shape, no columns), got {self.channels_last!r} with shape {self.shape!r}"
            )
        if self.columns is not None:
            object.__setattr__(self, "shape", (-1, len(self.columns)))

    @property
    def takes_integers(self) -> bool:
        return np.dtype(self.dtype).kind in "iu"

    def declared_text(self) -> np.ndarray:
        """Which declared columns take text (none for a tensor)."""
        if self.columns is None:
            return np.zeros(0, dtype=bool)
        return np.array([dtype == TEXT_DTYPE for dtype in self.column_dtypes or (self.dtype,) * len(self.columns)])

    def describe(self) -> str:
        """In a few words, for messages and tags: ``float64 (-1, 784)``, ``784 float64 columns (x0, ...)``, ``32
        columns (mean_radius, ...) of 30 float64 and 2 text``."""
        if self.columns is not None:
            declared = self.column_dtypes or (self.dtype,) * len(self.columns)
            kinds = {kind: "text" if kind == TEXT_DTYPE else kind for kind in declared}  # in the columns' order
            if len(kinds) == 1:
                return f"{len(self.columns)} {kinds[declared[0]]} columns ({self.columns[0]}, ...)"
            counts = [f"{declared.count(kind)} {word}" for kind, word in kinds.items()]
            return f"{len(self.columns)} columns ({self.columns[0]}, ...) of {', '.join(counts[:-1])} and {counts[-1]}"
        if self.channels_last is not None:
            return f"{self.dtype} (-1, height, width, {self.channels_last})"
        return f"{self.dtype} {self.shape if self.shape is not None else '(-1, channels, height, width)'}"


def prepare_inputs(x: np.ndarray, transform: InputTransform, spec: InputSpec) -> np.ndarray | pd.DataFrame:
    """``x`` as the model declares its inputs: dtype, shape (channel order included), named columns.

    Images (uint8 (n, H, W) or (n, H, W, C), or float pixels (n, C, H, W) in [0, 1]) go to a
    model that takes floats as pixels in [0, 1] scaled by ``transform``, and to one that takes
    integers as their values 0-255 (it scales them itself). They are then shaped as ``spec``
    declares: channels first or last, flattened, or reshaped to the same number of values, their
    values in ``spec.pixel_order`` (channel by channel, as torch's ``Flatten``, or pixel by pixel,
    as numpy's reshape of (n, H, W, C) images); never resized. Float pixels are not copied only to
    reorder memory: colour images come channels-first in shape and channels-last in memory
    (``torch.channels_last``), as :func:`to_model_inputs` makes them; integers come C-ordered.
    Tables go as their numbers, cast to the declared dtypes, in the declared columns (see
    :func:`align_columns` for names).

    A function of its arguments alone (no model), so that a Spark job prepares batches on its
    executors exactly as the in-process oracle does.
    """
    x = np.asarray(x)
    if x.ndim == 2:
        inputs = _table_inputs(x, transform, spec)
    else:
        inputs = _image_inputs(x, transform, spec)
    if spec.columns is not None:
        return _typed_frame(inputs, spec)
    return inputs


def _typed_frame(inputs: np.ndarray, spec: InputSpec) -> pd.DataFrame:
    """A table's inputs as a DataFrame of the declared columns, each cast to its declared dtype (text stays text).

    A table with text is built column by column from one cast of all its numbers: pandas' cast of
    object columns one by one made the text table score at 0.52x the rows/s of the same table as codes,
    against 0.72x so built (``python -m benchmarks --only text_tables``, before and after).
    """
    if inputs.dtype != object:
        frame = pd.DataFrame(inputs, columns=list(spec.columns))
        if spec.column_dtypes is None:
            return frame
        _check_whole_columns(inputs, spec)
        return frame.astype(dict(zip(spec.columns, spec.column_dtypes, strict=True)))
    dtypes = spec.column_dtypes or (spec.dtype,) * len(spec.columns)
    numeric = ~spec.declared_text() if spec.types_declared else ~text_columns(inputs)
    numbers = inputs[:, numeric].astype(np.float64)
    if spec.column_dtypes is not None:
        _check_whole_columns(numbers, spec)
    values = iter(numbers.T)
    return pd.DataFrame(
        {
            name: next(values).astype(dtype) if number else inputs[:, position]
            for position, (name, dtype, number) in enumerate(zip(spec.columns, dtypes, numeric, strict=True))
        }
    )


def _check_whole_columns(values: np.ndarray, spec: InputSpec) -> None:
    """Refuse fractional values in a column the signature declares integer: the cast would cut them off silently."""
    numeric = [dtype for dtype in spec.column_dtypes if dtype != TEXT_DTYPE]  # ``values`` holds these columns
    names = [name for name, dtype in zip(spec.columns, spec.column_dtypes, strict=True) if dtype != TEXT_DTYPE]
    integer = np.flatnonzero([np.dtype(dtype).kind in "iu" for dtype in numeric])
    if values.dtype.kind != "f" or integer.size == 0:
        return
    missing = np.isnan(values[:, integer]).any(axis=0)
    if missing.any():
        name, dtype = names[integer[np.argmax(missing)]], numeric[integer[np.argmax(missing)]]
        raise InputError(
            f"expected a number in every cell of column {name!r} (the model's signature declares {dtype}, which "
            "holds no missing value), got missing cells: a column with gaps is declared double (float64) by a model "
            "that takes them"
        )
    fractional = values[:, integer] != np.rint(values[:, integer])
    if fractional.any():
        row, column = np.argwhere(fractional)[0]
        name, dtype = names[integer[column]], numeric[integer[column]]
        raise InputError(
            f"expected whole numbers in column {name!r} (the model's signature declares {dtype}), got "
            f"values such as {values[row, integer[column]]:g}: give the values the model was trained on"
        )


def _table_inputs(x: np.ndarray, transform: InputTransform, spec: InputSpec) -> np.ndarray:
    if spec.shape is not None and spec.shape[1:] != x.shape[1:]:
        raise InputError(
            f"expected {spec.shape[1]} features for the model's declared inputs {spec.describe()}, got a table of "
            f"{x.shape[1]} columns"
        )
    if x.dtype == object and not text_columns(x).any():  # its text columns left out: numbers
        x = x.astype(np.float64)
    if x.dtype == object:  # text columns: sent as they are, checked against the declared ones by the oracle
        if not transform.is_identity:
            raise InputError(
                f"expected no input scaling for a table with text columns, got {transform.describe()}: text cannot be "
                "scaled; leave out --input-scale and --normalize"
            )
        return x
    values = transform.apply(x) if not transform.is_identity else x
    if spec.takes_integers and missing_cells(values):
        raise InputError(
            f"expected a number in every cell for a model that takes {spec.describe()} (integers hold no missing "
            f"value), got {missing_cells(values)} missing cells; a model that takes them declares floats"
        )
    if spec.takes_integers and values.dtype.kind == "f" and not np.array_equal(values, np.rint(values)):
        raise InputError(
            f"expected whole numbers for a model that takes {spec.describe()}, got fractional values "
            "(give the model a signature of float columns, or --input-dtype float64)"
        )
    return np.ascontiguousarray(values, dtype=spec.dtype)


def _image_inputs(x: np.ndarray, transform: InputTransform, spec: InputSpec) -> np.ndarray:
    if x.dtype == np.uint8:
        input_kind(x)  # refuses uint8 arrays of no known shape
    shape = images_shape(x, spec.shape, spec.channels_last)
    if spec.takes_integers:
        if x.dtype == np.uint8 and shape is None:
            return np.ascontiguousarray(x, dtype=spec.dtype)  # as stored: the model shapes them itself
        return np.ascontiguousarray(fit_shape(integer_pixels(x), shape, spec.pixel_order), dtype=spec.dtype)
    pixels = to_model_inputs(x) if x.dtype == np.uint8 else np.asarray(x, dtype=np.float32)
    if transform.channels not in (None, pixels.shape[1]) and shape is not None:
        fit_shape(pixels, shape)  # images of other channels than the model's: say so, with how to convert them
    # float pixels keep their memory order: stored (n, H, W, C) images become channels-first pixels
    # that are channels-last in memory, on which torch's CPU convolutions run about 25% faster than
    # on a C-ordered copy (and the copy itself is saved)
    return fit_shape(transform.apply(pixels), shape, spec.pixel_order).astype(spec.dtype, copy=False)


def align_columns(x: np.ndarray, features: Sequence[str], spec: InputSpec, *, where: str) -> tuple[np.ndarray, list]:
    """A table's columns in the order a column-based signature names them, and the extra columns left out.

    Raises
    ------
    InputError
        If the table lacks a column the signature names (all missing ones are listed).
    """
    if spec.columns is None:
        return x, []
    positions, extra = column_order(features, spec, where=where)
    return x[:, positions], extra


def column_order(features: Sequence[str], spec: InputSpec, *, where: str) -> tuple[list[int], list[str]]:
    """Where each column a column-based signature names sits among ``features``, and the columns it leaves out.

    A tensor signature takes every column in the table's order. Names match as text: a model fitted
    on ``pd.DataFrame(X)`` names its columns 0, 1, ..., a file's header '0', '1', .... The Spark
    engine asks this of a table's schema, :func:`align_columns` of a set's array: one rule, one message.

    Raises
    ------
    InputError
        If ``features`` lacks a column the signature names (all missing ones are listed).
    """
    if spec.columns is None:
        return list(range(len(features))), []
    position = {name: i for i, name in enumerate(features)}  # a file's names are text; a signature's may be 0, 1...
    missing = [name for name in spec.columns if str(name) not in position]
    if missing:
        raise InputError(
            f"{where}: expected the columns the model's signature names, missing {len(missing)}: "
            f"{listed_names(missing)} (the file has {listed_names(list(features))})"
        )
    named = set(map(str, spec.columns))
    return [position[str(name)] for name in spec.columns], [name for name in features if name not in named]


def listed_names(names: list[str], most: int = 8) -> str:
    shown = ", ".join(map(repr, names[:most]))
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")
