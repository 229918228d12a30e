"""Loaders for image sets a user keeps on disk, one class per format; nothing is downloaded.

==================  =========================  ===========================================
name                class                      files under ``root``
==================  =========================  ===========================================
``mnist``           :class:`MNIST`             ``MNIST/raw/*-idx?-ubyte[.gz]``
``fashion``         :class:`FashionMNIST`      ``*-idx?-ubyte[.gz]`` (Debian default root)
``svhn``            :class:`SVHN`              ``{train,test}_32x32.mat``
``chest-xray``      :class:`ChestXRay`         ``chest_xray/{train,test}/{NORMAL,PNEUMONIA}/``
``covidx``          :class:`COVIDx`            ``{train,test}.txt`` and ``{train,test}/``
``pneumoniamnist``  :class:`PneumoniaMNIST`    ``pneumoniamnist.npz``
==================  =========================  ===========================================
"""

from __future__ import annotations

from pathlib import Path

from ema.data.sources.base import IMAGE_SIDE, SOURCE_CHANNELS, ImageFormat, ImageSource
from ema.data.sources.covidx import COVIDx
from ema.data.sources.folder import ChestXRay
from ema.data.sources.idx import MNIST, FashionMNIST, read_idx
from ema.data.sources.medmnist import PneumoniaMNIST
from ema.data.sources.svhn import SVHN
from ema.validation import check_choice

#: Every loader, by the name a user gives.
LOADERS: dict[str, type[ImageSource]] = {
    loader.name: loader for loader in (MNIST, FashionMNIST, SVHN, ChestXRay, COVIDx, PneumoniaMNIST)
}


def open_source(
    name: str, root: str | Path | None = None, *, image_size: int | None = None, channels: int | None = None
) -> ImageSource:
    """The loader called ``name``, reading under ``root`` (or its default root), at ``image_size`` in ``channels``
    (defaults: see :class:`ImageSource`)."""
    return LOADERS[check_choice("data source", name, LOADERS)](root, image_size=image_size, channels=channels)


__all__ = [
    "IMAGE_SIDE",
    "LOADERS",
    "MNIST",
    "SOURCE_CHANNELS",
    "SVHN",
    "COVIDx",
    "ChestXRay",
    "FashionMNIST",
    "ImageFormat",
    "ImageSource",
    "PneumoniaMNIST",
    "open_source",
    "read_idx",
]
