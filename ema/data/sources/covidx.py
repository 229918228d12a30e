"""COVIDx chest X-rays: image folders plus split files that label each image."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ema.data.sources.base import ImageFileSource
from ema.errors import InputError

#: Fields of a split-file line: patient_id filename label data_source.
COVIDX_FIELDS = 4
FILENAME_FIELD, LABEL_FIELD = 1, 2
#: Binary labels: pneumonia of any cause (COVID-19 included) is 1, a normal/negative X-ray is 0.
COVIDX_LABELS = {"negative": 0, "normal": 0, "positive": 1, "pneumonia": 1, "covid-19": 1}
#: Missing image files named in an error message before the rest are counted.
MAX_LISTED = 5


class COVIDx(ImageFileSource):
    """COVIDx (Wang et al., COVID-Net) as its archive lays it out::

        ROOT/train.txt      one line per image: patient_id filename label data_source
        ROOT/test.txt
        ROOT/train/<filename>
        ROOT/test/<filename>

    Labels are made binary, so that every COVIDx release reads the same way: ``positive``
    (COVIDx v9 and later), ``pneumonia`` and ``COVID-19`` (earlier three-class releases)
    are 1; ``negative`` and ``normal`` are 0 (compared case-insensitively). Images are
    converted to grey (or colour with ``channels=3``) and kept at their own size, which must
    be the same for all; with ``image_size``, centre-cropped to a square and resized to it.
    ``index`` is the line's position among the split file's entries (blank lines skipped).
    """

    name = "covidx"
    splits = ("train", "test")
    classes = ("negative", "positive")

    def _required(self, split: str) -> tuple[Path, ...]:
        return (self.root / f"{split}.txt", self.root / split)

    def _listing(self, split: str) -> tuple[list[Path], np.ndarray]:
        listing, folder = self._required(split)
        filenames, labels = self._read_listing(listing)
        files = [folder / filename for filename in filenames]
        missing = [path.name for path in files if not path.is_file()]
        if missing:
            more = f" and {len(missing) - MAX_LISTED} more" if len(missing) > MAX_LISTED else ""
            raise InputError(
                f"{listing}: expected every listed image under {folder}, missing {len(missing)}: "
                f"{', '.join(missing[:MAX_LISTED])}{more}"
            )
        return files, labels

    @staticmethod
    def _read_listing(listing: Path) -> tuple[list[str], np.ndarray]:
        """File names and binary labels of a split file."""
        filenames, labels = [], []
        for line_number, line in enumerate(listing.read_text().splitlines(), start=1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) != COVIDX_FIELDS:
                raise InputError(
                    f"{listing}, line {line_number}: expected {COVIDX_FIELDS} fields "
                    f"(patient_id filename label data_source), got {len(fields)}: {line!r}"
                )
            label = fields[LABEL_FIELD].lower()
            if label not in COVIDX_LABELS:
                raise InputError(
                    f"{listing}, line {line_number}: expected a label from {sorted(COVIDX_LABELS)}, "
                    f"got {fields[LABEL_FIELD]!r}"
                )
            filenames.append(fields[FILENAME_FIELD])
            labels.append(COVIDX_LABELS[label])
        if not filenames:
            raise InputError(f"{listing}: expected at least one image line, got none")
        return filenames, np.array(labels, dtype=np.int64)
