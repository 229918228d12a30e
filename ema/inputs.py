"""The pixel representation a model takes, as a value shared by oracles and recipes."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ema.errors import InputError


@dataclass(frozen=True)
class InputTransform:
    """How the model expects its pixels: ``(pixels_in_[0,1] * scale - mean) / std``."""

    scale: float = 1.0
    mean: float = 0.0
    std: float = 1.0

    def __post_init__(self) -> None:
        values = {"scale": self.scale, "mean": self.mean, "std": self.std}
        for name, value in values.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise InputError(f"expected input {name} as a finite number, got {value!r} ({type(value).__name__})")
        if self.scale <= 0 or self.std <= 0:
            raise InputError(f"expected input scale > 0 and std > 0, got scale={self.scale}, std={self.std}")

    @property
    def is_identity(self) -> bool:
        return self == InputTransform()

    def apply(self, pixels: np.ndarray) -> np.ndarray:
        pixels = np.asarray(pixels, dtype=np.float32)
        if self.is_identity:
            return pixels
        return ((pixels * np.float32(self.scale) - np.float32(self.mean)) / np.float32(self.std)).astype(np.float32)


#: Input dtypes a model may declare for its pixels: integers get 0-255, floats get scaled pixels.
INPUT_DTYPES = ("uint8", "int32", "int64", "float32", "float64")


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
        A column-based signature: a DataFrame with one column per pixel, named so.
    tensor_name : str or None
        The name a tensor signature gives its input, if any (a Parquet request names its column so).
    """

    shape: tuple[int, ...] | None = None
    dtype: str = "float32"
    columns: tuple[str, ...] | None = None
    tensor_name: str | None = None

    def __post_init__(self) -> None:
        if self.dtype not in INPUT_DTYPES:
            raise InputError(f"expected model inputs of a dtype in {INPUT_DTYPES}, got {self.dtype!r}")
        if self.shape is not None:
            if not self.shape or any(isinstance(d, bool) or not isinstance(d, int) for d in self.shape):
                raise InputError(f"expected an input shape as integers (-1, ...), got {self.shape!r}")
            if any(d < 1 for d in self.shape[1:]):
                raise InputError(f"expected an input shape with fixed sizes after the batch, got {self.shape!r}")
        if self.columns is not None:
            object.__setattr__(self, "shape", (-1, len(self.columns)))

    @property
    def takes_integers(self) -> bool:
        return np.dtype(self.dtype).kind in "iu"

    def describe(self) -> str:
        """In a few words, for messages and tags: ``float64 (-1, 784)``, ``784 float64 columns``."""
        if self.columns is not None:
            return f"{len(self.columns)} {self.dtype} columns ({self.columns[0]}, ...)"
        return f"{self.dtype} {self.shape if self.shape is not None else '(-1, 1, 28, 28)'}"


def parse_input_shape(text: str) -> tuple[int, ...]:
    """``--input-shape``: sizes after the batch, comma-separated (``784``, ``28,28``, ``1,28,28``, ``28,28,1``).

    A leading ``-1`` (the batch) is accepted. Returns ``(-1, ...)``.

    >>> parse_input_shape("28,28,1")
    (-1, 28, 28, 1)
    """
    try:
        sizes = [int(part) for part in str(text).replace(" ", "").split(",")]
    except ValueError as exc:
        raise InputError(
            f"expected --input-shape as comma-separated sizes after the batch (e.g. 784 or 1,28,28), got {text!r}"
        ) from exc
    if sizes and sizes[0] == -1:
        sizes = sizes[1:]
    if not sizes or any(size < 1 for size in sizes):
        raise InputError(
            f"expected --input-shape as positive sizes after the batch (e.g. 784 or 1,28,28), got {text!r}"
        )
    return (-1, *sizes)
