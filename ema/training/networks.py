"""The networks our recipes name, and the scaling of raw images into them: torch only, nothing from ``ema``.

Every torch model we log carries a copy of this file, which the model's code
(:mod:`ema.training.pyfunc_code`) loads by path: a logged model then loads and serves
where mlflow and torch are installed but ``ema`` is not (``mlflow models serve
--env-manager virtualenv``, a Spark executor, another team's machine).
"""

from __future__ import annotations

import math
from itertools import pairwise

import numpy as np
import torch
from torch import nn

#: The embedded images: one grey channel, 28 pixels a side; ten classes.
CHANNELS, SIZE, N_CLASSES = 1, 28, 10
#: What a network takes after the batch when nothing else is said: (channels, height, width).
INPUT_SHAPE = (CHANNELS, SIZE, SIZE)
#: Images smaller than this a side get ResNet-18 with a stem that keeps the resolution; larger
#: ones get ImageNet's stem (7x7 convolution of stride 2 and max pooling), as torchvision builds it.
SMALL_IMAGE_SIDE = 64
#: Pixel values of a uint8 image run from 0 to this.
PIXEL_MAX = 255.0


def build_network(
    arch: str, hidden: tuple[int, ...] = (), n_classes: int = N_CLASSES, input_shape: tuple[int, ...] = INPUT_SHAPE
) -> nn.Module:
    """A freshly initialised network: ``"mlp"`` (layers of widths ``hidden``), ``"cnn"`` or ``"resnet18"``.

    ``input_shape`` is what one sample is after the batch: images (channels, height, width),
    or (features,) for a table (``"mlp"`` only). The defaults build the 28x28 grey networks
    exactly as before (the same weights under the same seed). Seed torch's RNG first for determinism.
    """
    input_shape = tuple(int(d) for d in input_shape)
    if arch == "mlp":
        widths = (math.prod(input_shape), *hidden)
        layers: list[nn.Module] = [nn.Flatten()]
        for n_in, n_out in pairwise(widths):
            layers += [nn.Linear(n_in, n_out), nn.ReLU()]
        layers.append(nn.Linear(widths[-1], n_classes))
        return nn.Sequential(*layers)
    if arch not in ("cnn", "resnet18"):
        raise ValueError(f"expected an architecture among mlp, cnn, resnet18, got {arch!r}")
    if len(input_shape) != 3:
        raise ValueError(f"expected images (channels, height, width) for {arch}, got samples of shape {input_shape}")
    channels, height, width = input_shape
    if arch == "resnet18":
        if min(height, width) < SMALL_IMAGE_SIDE:
            return small_image_resnet18(n_classes, channels)
        return resnet18_for_channels(n_classes, channels)
    return nn.Sequential(
        nn.Conv2d(channels, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * (height // 4) * (width // 4), 128),
        nn.ReLU(),
        nn.Linear(128, n_classes),
    )


def small_image_resnet18(n_classes: int, channels: int = CHANNELS) -> nn.Module:
    """torchvision's ResNet-18 (the paper's medical architecture), untrained, for small images (28x28 grey).

    The stem takes ``channels`` and keeps the resolution (3x3 convolution, stride 1, no max
    pooling): ImageNet's 7x7 stride-2 stem and pooling would shrink a 28x28 image to 7x7
    before the first block. No pretrained weights (nothing is downloaded).
    """
    from torchvision.models import resnet18

    network = resnet18(weights=None, num_classes=n_classes)
    network.conv1 = nn.Conv2d(channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
    network.maxpool = nn.Identity()
    return network


def resnet18_for_channels(n_classes: int, channels: int) -> nn.Module:
    """torchvision's ResNet-18 as it is (ImageNet's stem), untrained, its first convolution taking ``channels``."""
    from torchvision.models import resnet18

    network = resnet18(weights=None, num_classes=n_classes)
    if channels != network.conv1.in_channels:
        network.conv1 = nn.Conv2d(channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
    return network


def image_inputs(images: np.ndarray) -> torch.Tensor:
    """Images (n, H, W) or (n, H, W, C) of pixel values 0-255 as the network's float32 input (n, C, H, W) in [0, 1].

    uint8 as a signature declares them, or any numeric type holding the same values (a Spark
    UDF hands over float arrays): the same float32 arithmetic as the pixels the network was
    trained on (``ema.inputs.to_model_inputs``), so the model predicts bitwise what it predicts
    on those pixels. Other types are converted into a copy that is then scaled in place (one
    pass fewer over the batch); float32 is scaled into a new tensor, leaving the caller's array as it is.
    """
    images = np.asarray(images)
    if images.dtype == np.float32:
        scaled = torch.from_numpy(np.require(images, np.float32, ["C", "W"])) / PIXEL_MAX
    else:
        scaled = torch.from_numpy(images.astype(np.float32, order="C")).div_(PIXEL_MAX)
    if scaled.ndim == 3:
        return scaled.unsqueeze(1)
    return scaled.permute(0, 3, 1, 2).contiguous()
