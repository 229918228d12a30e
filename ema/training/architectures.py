"""The architectures a ``TrainSpec`` names, and the wrapper whose output is probabilities."""

from __future__ import annotations

import torch
from torch import nn

from ema.training.spec import TrainSpec

IMAGE_SHAPE = (1, 28, 28)
N_CLASSES = 10


def build_network(spec: TrainSpec, n_classes: int = N_CLASSES) -> nn.Module:
    """A freshly initialised network for ``spec`` (seed the RNG first for determinism)."""
    if spec.arch == "mlp":
        widths = (IMAGE_SHAPE[0] * IMAGE_SHAPE[1] * IMAGE_SHAPE[2], *spec.hidden)
        layers: list[nn.Module] = [nn.Flatten()]
        for n_in, n_out in zip(widths[:-1], widths[1:]):
            layers += [nn.Linear(n_in, n_out), nn.ReLU()]
        layers.append(nn.Linear(widths[-1], n_classes))
        return nn.Sequential(*layers)
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 7 * 7, 128),
        nn.ReLU(),
        nn.Linear(128, n_classes),
    )


class ProbabilityModel(nn.Module):
    """The network ``spec`` names, with a forward that returns class probabilities (softmax of the logits).

    It keeps ``spec`` and ``n_classes``: with the weights, they are all it takes to rebuild it
    (see :mod:`ema.training.packaging`).
    """

    def __init__(self, spec: TrainSpec, n_classes: int = N_CLASSES) -> None:
        super().__init__()
        self.spec, self.n_classes = spec, n_classes
        self.network = build_network(spec, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.network(x), dim=1)
