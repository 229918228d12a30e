"""How a model expects its pixels: scaled, and normalised with one mean and std or one per channel.

:class:`InputTransform` turns pixels in [0, 1] into what a model was trained on (``--input-scale``,
``--normalize``, a recipe's ``"input"``); :func:`parse_normalize` reads ``--normalize``. The
input pipeline (:mod:`ema.inputs`) applies it before shaping images as the model declares.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ema.errors import InputError

#: Channel counts an image may have in its last axis (grey, grey + alpha, colour, colour + alpha).
IMAGE_CHANNELS = (1, 2, 3, 4)

#: ``--normalize imagenet``: the per-channel mean and std of torchvision's ImageNet models (RGB order).
IMAGENET_NORMALIZE = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
#: How ``--normalize`` is written, for messages.
NORMALIZE_FORMS = (
    "MEAN,STD, one mean per channel then one std per channel (e.g. 0.485,0.456,0.406,0.229,0.224,0.225), or imagenet"
)

#: One number for every channel, or one per channel.
Channelwise = float | tuple[float, ...]


@dataclass(frozen=True)
class InputTransform:
    """How the model expects its pixels: ``(pixels_in_[0,1] * scale - mean) / std``.

    ``mean`` and ``std`` are one number for every channel, or one per channel (tuples of one
    length, as torchvision's ``Normalize(mean, std)`` takes them; lists are taken as tuples).
    """

    scale: float = 1.0
    mean: Channelwise = 0.0
    std: Channelwise = 1.0

    def __post_init__(self) -> None:
        for name in ("mean", "std"):
            value = getattr(self, name)
            if isinstance(value, list):  # a recipe's JSON
                value = tuple(value)
            if isinstance(value, tuple) and len(value) == 1:  # one channel's: the number for every channel
                value = value[0]
            object.__setattr__(self, name, value)
        per_channel = [isinstance(value, tuple) for value in (self.mean, self.std)]
        if any(per_channel) and (not all(per_channel) or len(self.mean) != len(self.std) or not self.mean):
            raise InputError(
                f"expected the input mean and std as one number each, or one per channel for as many channels, got "
                f"mean={self.mean!r}, std={self.std!r}"
            )
        values = {"scale": [self.scale], "mean": self._listed(self.mean), "std": self._listed(self.std)}
        for name, numbers in values.items():
            for value in numbers:
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                    raise InputError(
                        f"expected input {name} as a finite number, got {value!r} ({type(value).__name__})"
                    )
        if self.scale <= 0 or min(values["std"]) <= 0:
            raise InputError(f"expected input scale > 0 and std > 0, got scale={self.scale}, std={self.std}")

    @staticmethod
    def _listed(value: Channelwise) -> list:
        return list(value) if isinstance(value, tuple) else [value]

    @property
    def is_identity(self) -> bool:
        return self == InputTransform()

    @property
    def channels(self) -> int | None:
        """How many channels a per-channel normalisation is for; None for one mean and std for all."""
        return len(self.mean) if isinstance(self.mean, tuple) else None

    def normalize_text(self, *, exact: bool = False) -> str | None:
        """``--normalize`` as it selects this transform (``M,S`` or ``M1,M2,M3,S1,S2,S3``); None when it does not.

        Six significant digits, for messages; ``exact``: every digit, for a command that reruns it.
        """
        if (self.mean, self.std) == (0.0, 1.0):
            return None
        shown = repr if exact else "{:g}".format
        return ",".join(shown(float(value)) for value in (*self._listed(self.mean), *self._listed(self.std)))

    def describe(self, *, exact: bool = False) -> str:
        """How pixels in [0, 1] reach the model, in a few characters: ``x255``, ``x1 norm 0.1307,0.3081`` (per channel,
        the means then the stds, as ``--normalize`` takes them); ``exact``: every digit (a run's param, which
        ``ema compare`` sets side by side)."""
        scale = repr(float(self.scale)) if exact else f"{self.scale:g}"
        normalize = self.normalize_text(exact=exact)
        return f"x{scale}" if normalize is None else f"x{scale} norm {normalize}"

    def as_options(self) -> list[str]:
        """The ``ema audit`` options that select it: ``--input-scale S``, and ``--normalize ...`` when it normalises."""
        words = ["--input-scale", str(self.scale)]
        if (normalize := self.normalize_text(exact=True)) is not None:
            words += ["--normalize", normalize]
        return words

    def acting_options(self) -> list[str]:
        """:meth:`as_options` without ``--input-scale 1.0``, which leaves pixels as they are (and is what ``ema audit``
        takes when ``--input-scale`` is not given): for messages, which name only the options that change pixels."""
        words = self.as_options()
        return words[2:] if self.scale == 1 else words

    def apply(self, pixels: np.ndarray) -> np.ndarray:
        """``pixels`` scaled and normalised; a per-channel normalisation takes images (n, C, H, W) of its C channels.

        Raises
        ------
        InputError
            If a per-channel normalisation meets inputs of another channel count, or a table.
        """
        pixels = np.asarray(pixels, dtype=np.float32)
        if self.is_identity:
            return pixels
        if self.channels is None:
            mean, std = np.float32(self.mean), np.float32(self.std)
        else:
            if pixels.ndim != 4 or pixels.shape[1] != self.channels:
                got = f"{pixels.shape[1]}-channel images" if pixels.ndim == 4 else f"inputs of shape {pixels.shape[1:]}"
                raise InputError(
                    f"expected {self.channels}-channel images for --normalize {self.normalize_text()} (one mean and "
                    f"std per channel), got {got}"
                )
            mean = np.asarray(self.mean, dtype=np.float32).reshape(1, -1, 1, 1)
            std = np.asarray(self.std, dtype=np.float32).reshape(1, -1, 1, 1)
        return ((pixels * np.float32(self.scale) - mean) / std).astype(np.float32)


def parse_normalize(text: str) -> tuple[Channelwise, Channelwise]:
    """``--normalize``: ``MEAN,STD``, one mean per channel then one std per channel, or ``imagenet``.

    >>> parse_normalize("0.5,0.5,0.5,0.25,0.25,0.25")
    ((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))
    """
    if str(text).strip().lower() == "imagenet":
        return IMAGENET_NORMALIZE
    shown = repr(text) if len(str(text)) <= 80 else f"{str(text)[:80]!r}..."
    try:
        if "_" in str(text):  # float() reads "1_0" as 10
            raise ValueError(text)
        numbers = [float(part) for part in str(text).split(",")]
    except ValueError as exc:
        raise InputError(f"expected --normalize {NORMALIZE_FORMS}; got {shown}") from exc
    half = len(numbers) // 2
    if len(numbers) == 2:
        return numbers[0], numbers[1]
    if len(numbers) % 2 or not 2 <= half <= max(IMAGE_CHANNELS):
        count = f"{len(numbers)} number{'s' if len(numbers) != 1 else ''}"
        raise InputError(f"expected --normalize {NORMALIZE_FORMS}; got {count} in {shown}")
    return tuple(numbers[:half]), tuple(numbers[half:])
