"""``TrainSpec``: everything that defines the training algorithm A, as a plain value.

Kept free of torch so that the tracking layer can read and write recipes cheaply.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields

from ema.errors import InputError

ARCHITECTURES = ("mlp", "cnn")
OPTIMIZERS = ("sgd", "adam")


@dataclass(frozen=True)
class TrainSpec:
    """A training recipe. Defaults are the paper's MNIST benchmark recipe.

    Attributes
    ----------
    arch : {"mlp", "cnn"}
        ``"mlp"``: 784 -> hidden -> 10 with ReLU; ``"cnn"``: two conv blocks and a linear head.
    hidden : tuple of int
        Hidden layer widths of the MLP, (256, 256) in the paper.
    optimizer : {"sgd", "adam"}
    lr : float
        Learning rate, 0.05 in the paper.
    momentum : float
        SGD momentum, 0.9 as in the reference code.
    weight_decay : float
        L2 penalty, 1e-4: the reference code's reading of the paper's "decay 1e-4".
    lr_decay : float
        Inverse-time decay per step: lr_t = lr / (1 + lr_decay * t). 0 keeps lr fixed.
    epochs : int
        Passes over the training data, 50 in the paper.
    batch_size : int
    seed : int
        Seeds the initial weights and the batch order.
    """

    arch: str = "mlp"
    hidden: tuple[int, ...] = (256, 256)
    optimizer: str = "sgd"
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 1e-4
    lr_decay: float = 0.0
    epochs: int = 50
    batch_size: int = 64
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        problems = []
        if self.arch not in ARCHITECTURES:
            problems.append(f"arch in {ARCHITECTURES}, got {self.arch!r}")
        if self.optimizer not in OPTIMIZERS:
            problems.append(f"optimizer in {OPTIMIZERS}, got {self.optimizer!r}")
        if not self.hidden or min(self.hidden) < 1:
            problems.append(f"hidden widths >= 1, got {self.hidden}")
        for name in ("epochs", "batch_size"):
            if getattr(self, name) < 1:
                problems.append(f"{name} >= 1, got {getattr(self, name)}")
        for name in ("lr", "momentum", "weight_decay", "lr_decay"):
            if getattr(self, name) < 0:
                problems.append(f"{name} >= 0, got {getattr(self, name)}")
        if problems:
            raise InputError("invalid training recipe: expected " + "; ".join(problems))

    def to_dict(self) -> dict:
        data = asdict(self)
        data["hidden"] = list(self.hidden)
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict) -> TrainSpec:
        """Build a spec from :meth:`to_dict` output; unknown keys are refused."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InputError(f"unknown training recipe fields {unknown}; expected a subset of {sorted(known)}")
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> TrainSpec:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"expected a training recipe as JSON, got {text[:60]!r}: {exc}") from exc
        return cls.from_dict(data)
