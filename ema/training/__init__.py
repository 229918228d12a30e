"""The training algorithm A as a value (``TrainSpec``) and one ``fit``. Only this package imports torch."""

from ema.training.spec import ARCHITECTURES, OPTIMIZERS, TrainSpec

__all__ = ["ARCHITECTURES", "OPTIMIZERS", "TrainSpec"]
