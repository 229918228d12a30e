"""What every on-disk loader shares: a root, named splits, and a check that lists missing files."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar

import numpy as np

from ema.data.arrays import IMAGE_SIZE, ArraySet
from ema.data.sources.images import resize_images
from ema.errors import InputError
from ema.validation import check_choice

#: Side of the square grey images every loader returns by default.
IMAGE_SIDE = IMAGE_SIZE


class ImageSource(ABC):
    """Labelled images stored in one on-disk format under ``root``; nothing is downloaded.

    Subclasses name their files as class data, say which of them a split needs
    (:meth:`_required`), and turn those files into an :class:`ArraySet` (:meth:`_load`).

    Parameters
    ----------
    root : str or Path, optional
        The folder the source's files sit under (each subclass draws its tree); defaults
        to :attr:`default_root` where the source has one.
    image_size : int, default 28
        Side of the square grey images returned; images of another size are resized.
    """

    #: The name a user gives on the command line.
    name: ClassVar[str]
    #: The splits the files hold.
    splits: ClassVar[tuple[str, ...]]
    #: Class names, by label.
    classes: ClassVar[tuple[str, ...]]
    #: Where the files are when no root is given (None: a root is required).
    default_root: ClassVar[Path | None] = None

    def __init__(self, root: str | Path | None = None, *, image_size: int = IMAGE_SIDE) -> None:
        if root is None and self.default_root is None:
            raise InputError(f"{self.name}: expected a root folder holding its files, got none")
        if image_size < 1:
            raise InputError(f"{self.name}: expected image_size >= 1, got {image_size}")
        self.root = Path(root if root is not None else self.default_root)
        self.image_size = image_size

    def __repr__(self) -> str:
        return f"{type(self).__name__}(root={str(self.root)!r}, image_size={self.image_size})"

    def load(self, split: str) -> ArraySet:
        """The images of one split, as uint8 (n, image_size, image_size) with int64 labels.

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
        """Images ``x`` resized to ``image_size``, labels ``y`` as int64, ``index`` the position in the split."""
        labels = y.astype(np.int64)
        index = np.arange(labels.size, dtype=np.int64)
        return ArraySet(f"{self.name}-{split}", resize_images(x, self.image_size), labels, index)

    @abstractmethod
    def _required(self, split: str) -> tuple[Path, ...]:
        """The files and folders (under ``root``) that ``split`` is read from."""

    @abstractmethod
    def _load(self, split: str) -> ArraySet:
        """Read ``split``; its files exist."""
