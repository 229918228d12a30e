"""The network a ``TrainSpec`` names, wrapped so that its output is probabilities."""

from __future__ import annotations

import torch
from torch import nn

from ema.errors import InputError
from ema.training.networks import INPUT_SHAPE, N_CLASSES, build_network
from ema.training.spec import TrainSpec

#: The most dimensions of one sample: images (channels, height, width).
MAX_SAMPLE_DIMS = 3
#: Channel counts our image networks take.
NETWORK_CHANNELS = (1, 2, 3, 4)


class ProbabilityModel(nn.Module):
    """The network ``spec`` names, with a forward that returns class probabilities (softmax of the logits).

    It keeps ``spec``, ``n_classes`` and ``input_shape`` (one sample's shape after the batch:
    (channels, height, width), or (features,) for a table): with the weights, they are all it
    takes to rebuild it (see :mod:`ema.training.packaging`).
    """

    def __init__(self, spec: TrainSpec, n_classes: int = N_CLASSES, input_shape: tuple[int, ...] = INPUT_SHAPE) -> None:
        super().__init__()
        self.input_shape = check_input_shape(spec.arch, input_shape)
        self.spec, self.n_classes = spec, n_classes
        self.network = build_network(spec.arch, spec.hidden, n_classes, self.input_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.network(x), dim=1)


def check_input_shape(arch: str, input_shape: tuple[int, ...]) -> tuple[int, ...]:
    """``input_shape`` as a tuple of ints that ``arch`` can take; refused in one line otherwise.

    Raises
    ------
    InputError
        If it is not one to three positive sizes, or ``cnn`` / ``resnet18`` get anything but
        images (channels, height, width) with 1 to 4 channels.
    """
    shape = tuple(input_shape)
    if not 1 <= len(shape) <= MAX_SAMPLE_DIMS or any(isinstance(d, bool) or not isinstance(d, int) for d in shape):
        raise InputError(f"expected one sample's shape as 1 to 3 integers, got {shape!r}")
    if any(d < 1 for d in shape):
        raise InputError(f"expected one sample's shape of positive sizes, got {shape!r}")
    if arch != "mlp" and (len(shape) != MAX_SAMPLE_DIMS or shape[0] not in NETWORK_CHANNELS):
        what = f"a table of {shape[0]} features" if len(shape) == 1 else f"samples of shape {shape}"
        raise InputError(
            f"expected images (channels, height, width) with 1 to 4 channels for --arch {arch}, got {what}; "
            "use --arch mlp for a table"
        )
    return shape
