"""The networks our recipes name, and the scaling of raw images into them: torch only, nothing from ``ema``.

Every torch model we log carries a copy of this file, which the model's code
(:mod:`ema.training.pyfunc_code`) loads by path: a logged model then loads and serves
where mlflow and torch are installed but ``ema`` is not (``mlflow models serve
--env-manager virtualenv``, a Spark executor, another team's machine).
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import torch
from torch import nn

#: Our images: one grey channel, 28 pixels a side; ten classes.
CHANNELS, SIZE, N_CLASSES = 1, 28, 10
#: Pixel values of a uint8 image run from 0 to this.
PIXEL_MAX = 255.0


def build_network(arch: str, hidden: tuple[int, ...] = (), n_classes: int = N_CLASSES) -> nn.Module:
    """A freshly initialised network: ``"mlp"`` (layers of widths ``hidden``), ``"cnn"`` or ``"resnet18"``.

    Seed torch's RNG first for determinism.
    """
    if arch == "resnet18":
        return one_channel_resnet18(n_classes)
    if arch == "mlp":
        widths = (CHANNELS * SIZE * SIZE, *hidden)
        layers: list[nn.Module] = [nn.Flatten()]
        for n_in, n_out in pairwise(widths):
            layers += [nn.Linear(n_in, n_out), nn.ReLU()]
        layers.append(nn.Linear(widths[-1], n_classes))
        return nn.Sequential(*layers)
    if arch == "cnn":
        return nn.Sequential(
            nn.Conv2d(CHANNELS, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(64 * (SIZE // 4) ** 2, 128),
            nn.ReLU(),
            nn.Linear(128, n_classes),
        )
    raise ValueError(f"expected an architecture among mlp, cnn, resnet18, got {arch!r}")


def one_channel_resnet18(n_classes: int) -> nn.Module:
    """torchvision's ResNet-18 (the paper's medical architecture), untrained, for small grey images.

    The stem is one-channel and keeps the resolution (3x3 convolution, stride 1, no max
    pooling): ImageNet's 7x7 stride-2 stem and pooling would shrink a 28x28 image to 7x7
    before the first block. No pretrained weights (nothing is downloaded).
    """
    from torchvision.models import resnet18

    network = resnet18(weights=None, num_classes=n_classes)
    network.conv1 = nn.Conv2d(CHANNELS, 64, kernel_size=3, stride=1, padding=1, bias=False)
    network.maxpool = nn.Identity()
    return network


def image_inputs(images: np.ndarray) -> torch.Tensor:
    """Images (n, 28, 28) of pixel values 0-255 as the network's float32 input (n, 1, 28, 28) in [0, 1].

    uint8 as a signature declares them, or any numeric type holding the same values (a Spark
    UDF hands over float arrays): the same float32 arithmetic as the pixels the network was
    trained on (``ema.data.arrays.to_model_inputs``), so the model predicts bitwise what it predicts
    on those pixels. Other types are converted into a copy that is then scaled in place (one
    pass fewer over the batch); float32 is scaled into a new tensor, leaving the caller's array as it is.
    """
    images = np.asarray(images)
    if images.dtype == np.float32:
        return torch.from_numpy(np.require(images, np.float32, ["C", "W"])).unsqueeze(1) / PIXEL_MAX
    return torch.from_numpy(images.astype(np.float32, order="C")).div_(PIXEL_MAX).unsqueeze(1)
