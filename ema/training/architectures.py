"""The architectures a ``TrainSpec`` names, and the wrapper whose output is probabilities."""

from __future__ import annotations

import torch
from torch import nn

from ema.data.arrays import MODEL_INPUT_SHAPE
from ema.training.spec import TrainSpec

IMAGE_SHAPE = MODEL_INPUT_SHAPE[1:]
N_CLASSES = 10


def build_network(spec: TrainSpec, n_classes: int = N_CLASSES) -> nn.Module:
    """A freshly initialised network for ``spec`` (seed the RNG first for determinism)."""
    if spec.arch == "resnet18":
        return one_channel_resnet18(n_classes)
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


def one_channel_resnet18(n_classes: int) -> nn.Module:
    """torchvision's ResNet-18 (the paper's medical architecture), untrained, for small grey images.

    The stem is one-channel and keeps the resolution (3x3 convolution, stride 1, no max
    pooling): ImageNet's 7x7 stride-2 stem and pooling would shrink a 28x28 image to 7x7
    before the first block. No pretrained weights (nothing is downloaded).
    """
    from torchvision.models import resnet18

    network = resnet18(weights=None, num_classes=n_classes)
    network.conv1 = nn.Conv2d(IMAGE_SHAPE[0], 64, kernel_size=3, stride=1, padding=1, bias=False)
    network.maxpool = nn.Identity()
    return network


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
