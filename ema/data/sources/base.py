"""What every on-disk loader shares: a root, named splits, and a check that lists missing files."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from ema.data.arrays import IMAGE_SIZE, ArraySet
from ema.data.sources.images import (
    CHANNEL_MODES,
    decode_image_files,
    largest_wide_value,
    resize_images,
    to_channels,
    wide_depth,
)
from ema.errors import InputError
from ema.validation import check_choice

#: Side of the square grey images the array sources (IDX, SVHN, MedMNIST) return by default.
IMAGE_SIDE = IMAGE_SIZE
#: Channel counts a source can return: grey (n, H, W) or colour (n, H, W, 3).
SOURCE_CHANNELS = tuple(CHANNEL_MODES)
#: The largest side an image may be resized to.
MAX_IMAGE_SIDE = 4096


@dataclass(frozen=True)
class ImageFormat:
    """How images are read from a source: ``size`` (a side, None: the source's default) and ``channels`` (1 or 3,
    None: grey)."""

    size: int | None = None
    channels: int | None = None

    @property
    def is_default(self) -> bool:
        return self.size is None and self.channels is None

    def describe(self) -> str:
        """The options that give it: ``--image-size 64 --channels 3``."""
        given = (("--image-size", self.size), ("--channels", self.channels))
        return " ".join(f"{flag} {value}" for flag, value in given if value is not None)

    def to_tags(self, size_key: str, channels_key: str) -> dict[str, str]:
        """The format as registry tags under the given keys (none for the default)."""
        given = ((size_key, self.size), (channels_key, self.channels))
        return {key: str(value) for key, value in given if value is not None}

    @classmethod
    def from_tags(cls, tags: dict[str, str], size_key: str, channels_key: str) -> ImageFormat:
        """The format a version's tags record (see :meth:`to_tags`); refused when they are not integers."""
        values = []
        for key in (size_key, channels_key):
            text = tags.get(key)
            if text is not None and not text.isdigit():
                raise InputError(f"expected tag {key!r} as a positive integer, got {text[:40]!r}")
            values.append(int(text) if text is not None else None)
        return cls(*values)


class ImageSource(ABC):
    """Labelled images stored in one on-disk format under ``root``; nothing is downloaded.

    Subclasses name their files as class data, say which of them a split needs
    (:meth:`_required`), and turn those files into an :class:`ArraySet` (:meth:`_load`).

    Parameters
    ----------
    root : str or Path, optional
        The folder the source's files sit under (each subclass draws its tree); defaults
        to :attr:`default_root` where the source has one.
    image_size : int, optional
        Side of the square images returned; images of another size are resized. Default: 28
        for the array sources (IDX, SVHN, MedMNIST); the images' own size for image folders
        (:attr:`native_size`), which must then all share it.
    channels : {1, 3}, default 1
        Grey (n, H, W) or colour (n, H, W, 3) images; colour is turned grey by luma, grey
        into colour by repeating it.
    """

    #: The name a user gives on the command line.
    name: ClassVar[str]
    #: The splits the files hold.
    splits: ClassVar[tuple[str, ...]]
    #: Class names, by label.
    classes: ClassVar[tuple[str, ...]]
    #: Where the files are when no root is given (None: a root is required).
    default_root: ClassVar[Path | None] = None
    #: Whether images keep their own size unless ``image_size`` is given (image folders).
    native_size: ClassVar[bool] = False

    def __init__(
        self, root: str | Path | None = None, *, image_size: int | None = None, channels: int | None = None
    ) -> None:
        if root is None and self.default_root is None:
            raise InputError(f"{self.name}: expected a root folder holding its files, got none")
        if image_size is not None and (
            isinstance(image_size, bool) or not isinstance(image_size, int) or not 1 <= image_size <= MAX_IMAGE_SIDE
        ):
            raise InputError(f"{self.name}: expected --image-size from 1 to {MAX_IMAGE_SIDE}, got {image_size!r}")
        if channels is not None and channels not in SOURCE_CHANNELS:
            raise InputError(f"{self.name}: expected --channels among {SOURCE_CHANNELS}, got {channels!r}")
        self.root = Path(root if root is not None else self.default_root)
        self.image_size = image_size if image_size is not None or self.native_size else IMAGE_SIDE
        self.channels = channels or 1

    def __repr__(self) -> str:
        return f"{type(self).__name__}(root={str(self.root)!r}, image_size={self.image_size}, channels={self.channels})"

    def load(self, split: str) -> ArraySet:
        """The images of one split, as uint8 (n, image_size, image_size[, 3]) with int64 labels.

        ``index`` is each image's position in the split's file (or listing).

        Raises
        ------
        InputError
            If ``split`` is unknown, a file the split needs is missing (the message lists
            which files were expected where), or a file is not in the expected format.
        """
        self._check_split(split)
        self._check_exists(split)
        return self._load(split)

    def available(self, split: str) -> bool:
        """Whether every file ``split`` is read from is under ``root``."""
        self._check_split(split)
        return all(self._exists(path) for path in self._required(split))

    def _check_split(self, split: str) -> None:
        check_choice(f"{self.name} split", split, self.splits)

    def _check_exists(self, split: str) -> None:
        """Refuse a split whose files are not all under ``root``, naming every one expected."""
        required = self._required(split)
        missing = [path for path in required if not self._exists(path)]
        if missing:
            raise InputError(
                f"{self.name} ({split}): expected {self._describe(required)} under {self.root.resolve()}, "
                f"missing {self._describe(missing)}; nothing is downloaded: put the files there or pass another root"
            )

    def _exists(self, path: Path) -> bool:
        return path.exists()

    def _describe(self, paths: list[Path] | tuple[Path, ...]) -> str:
        return ", ".join(str(path.relative_to(self.root)) for path in paths)

    def _array_set(self, split: str, x: np.ndarray, y: np.ndarray) -> ArraySet:
        """Images ``x`` in :attr:`channels`, resized to ``image_size`` (if any), labels ``y`` as int64, ``index`` the
        position in the split."""
        labels = y.astype(np.int64)
        index = np.arange(labels.size, dtype=np.int64)
        images = to_channels(x, self.channels)
        if self.image_size is not None:
            images = resize_images(images, self.image_size)
        return ArraySet(f"{self.name}-{split}", images, labels, index)

    @abstractmethod
    def _required(self, split: str) -> tuple[Path, ...]:
        """The files and folders (under ``root``) that ``split`` is read from."""

    @abstractmethod
    def _load(self, split: str) -> ArraySet:
        """Read ``split``; its files exist."""


class ImageFileSource(ImageSource):
    """An :class:`ImageSource` of image files (PNG, JPEG), each split a list of files and labels (:meth:`_listing`).

    Grey images of more than 8 bits (16-bit PNGs of 12-bit X-ray values) are scaled to 0-255 by
    one bit depth for the whole source: the smallest usual depth (:func:`~ema.data.sources.images.wide_depth`)
    that holds the largest raw value of any file of any split present, as the files hold it
    (before ``image_size`` resizes them). So splits read apart, by one object or by separate
    commands, share one scale, and no option changes it. For that, the first split read of such
    a source has the files of the other splits decoded once (8-bit sources read headers only).
    """

    native_size = True

    def __init__(
        self, root: str | Path | None = None, *, image_size: int | None = None, channels: int | None = None
    ) -> None:
        super().__init__(root, image_size=image_size, channels=channels)
        self._maxima: dict[str, int | None] = {}  # split -> largest raw value of its files (None: 8-bit)

    def _load(self, split: str) -> ArraySet:
        files, labels = self._listing(split)
        decoded = decode_image_files(files, self.image_size, channels=self.channels)
        self._maxima[split] = decoded.raw_maximum
        depth = self._wide_depth() if decoded.raw_maximum is not None else None
        return self._array_set(split, decoded.to_uint8(depth), labels)

    def _wide_depth(self) -> int:
        """The source's bit depth, from the largest raw value of every split present (each decoded at most once)."""
        for split in self.splits:
            if split not in self._maxima and self.available(split):
                self._maxima[split] = largest_wide_value(self._listing(split)[0])
        return wide_depth(max(maximum for maximum in self._maxima.values() if maximum is not None))

    @abstractmethod
    def _listing(self, split: str) -> tuple[list[Path], np.ndarray]:
        """The image files of ``split`` (its files exist) and their labels, in the split's order."""
