"""The network a ``TrainSpec`` names, wrapped so that its output is probabilities."""

from __future__ import annotations

import torch
from torch import nn

from ema.training.networks import N_CLASSES, build_network
from ema.training.spec import TrainSpec


class ProbabilityModel(nn.Module):
    """The network ``spec`` names, with a forward that returns class probabilities (softmax of the logits).

    It keeps ``spec`` and ``n_classes``: with the weights, they are all it takes to rebuild it
    (see :mod:`ema.training.packaging`).
    """

    def __init__(self, spec: TrainSpec, n_classes: int = N_CLASSES) -> None:
        super().__init__()
        self.spec, self.n_classes = spec, n_classes
        self.network = build_network(spec.arch, spec.hidden, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.network(x), dim=1)
