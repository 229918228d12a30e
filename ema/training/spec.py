"""``TrainSpec``: everything that defines the training algorithm A, as a plain value.

Kept free of torch so that the tracking layer can read and write recipes cheaply.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields

from ema.errors import InputError
from ema.validation import check_choice, check_finite, check_momentum, check_positive_int, check_seed

ARCHITECTURES = ("mlp", "cnn", "resnet18")
OPTIMIZERS = ("sgd", "adam")
#: Upper bounds of a recipe's counts, whoever wrote it (a flag, a file, a registry tag). The
#: model's size is bounded separately, by ``--max-params`` (:mod:`ema.training.sizes`), and
#: its time by ``--timeout`` (:mod:`ema.limits`); these only keep each count sane.
MAX_WIDTH, MAX_HIDDEN_LAYERS, MAX_EPOCHS, MAX_BATCH_SIZE = 1 << 16, 64, 100_000, 1 << 20


@dataclass(frozen=True, kw_only=True)
class TrainSpec:
    """A training recipe. Defaults are the paper's MNIST benchmark recipe.

    Attributes
    ----------
    arch : {"mlp", "cnn", "resnet18"}
        ``"mlp"``: 784 -> hidden -> 10 with ReLU; ``"cnn"``: two conv blocks and a linear head;
        ``"resnet18"``: torchvision's ResNet-18 with a one-channel stem (the paper's medical model).
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
        """Refuse a recipe that could not train: every field checked before any work (NaN and inf included)."""
        check_choice("arch", self.arch, ARCHITECTURES)
        check_choice("optimizer", self.optimizer, OPTIMIZERS)
        if isinstance(self.hidden, str | bytes) or not self.hidden:
            raise InputError(f"expected hidden to be a non-empty list of widths, got {self.hidden!r}")
        _check_at_most("the number of hidden layers", len(self.hidden), MAX_HIDDEN_LAYERS)
        object.__setattr__(self, "hidden", tuple(_bounded_count("hidden width", h, MAX_WIDTH) for h in self.hidden))
        check_finite("lr", self.lr, minimum=0.0, open_minimum=True)
        check_momentum("momentum", self.momentum)
        check_finite("weight_decay", self.weight_decay, minimum=0.0)
        check_finite("lr_decay", self.lr_decay, minimum=0.0)
        _bounded_count("epochs", self.epochs, MAX_EPOCHS)
        _bounded_count("batch_size", self.batch_size, MAX_BATCH_SIZE)
        check_seed("seed", self.seed)

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


def _check_at_most(name: str, value: int, maximum: int) -> int:
    if value > maximum:
        raise InputError(f"expected {name} to be at most {maximum:,}, got {value:,}")
    return value


def _bounded_count(name: str, value: object, maximum: int) -> int:
    """``value`` as an int from 1 to ``maximum``."""
    return _check_at_most(name, check_positive_int(name, value), maximum)
