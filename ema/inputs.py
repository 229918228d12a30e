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
