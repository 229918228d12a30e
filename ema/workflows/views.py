"""The target's probabilities on each sample's views (``--augment shifts``), for an audit and a plan alike.

``ema audit --augment shifts`` and ``ema power --augment shifts`` score every reference sample (and
an audit every query sample) as itself and its 8 one-pixel shifts (:mod:`ema.data.shifts`); the
member-reference auditor then takes (9, n, n_classes) probabilities (:mod:`ema.auditors.views`).
"""

from __future__ import annotations

import sys

import numpy as np
from tqdm import tqdm

from ema.data.arrays import ArraySet
from ema.data.shifts import AUGMENT_NONE, AUGMENT_SHIFTS, N_SHIFT_VIEWS, shifted_set
from ema.errors import InputError
from ema.oracle import Oracle
from ema.tracking import keys


def shift_view_proba(oracle: Oracle, data: ArraySet, identity: np.ndarray) -> np.ndarray:
    """``identity`` (the target's probabilities on ``data``, scored already) and then those on its 8 one-pixel
    shifts, shape (9, len(data), n_classes): the shifts cost 8 queries a sample.

    Raises
    ------
    InputError
        If ``data`` is a table (:func:`~ema.data.shifts.shifted_set`).
    """
    shifted = oracle.predict_proba(shifted_set(data))
    return np.concatenate([identity[np.newaxis], shifted.reshape(N_SHIFT_VIEWS - 1, len(data), identity.shape[1])])


def check_shiftable(augment: str, data: ArraySet) -> None:
    """Refuse ``augment`` on ``data`` that is not images (a table has no pixels to shift), in one line.

    Raises
    ------
    InputError
        From :func:`~ema.data.shifts.shifted_set`.
    """
    if augment != AUGMENT_NONE and data.kind != "image":
        shifted_set(data)  # its one-line refusal


def check_members_known(augment: str, known: bool, target_label: str) -> None:
    """Refuse ``augment`` where no member reference is known: the transfer route's calibration model scores one view.

    Raises
    ------
    InputError
        Naming the target and ``--members``.
    """
    if augment != AUGMENT_NONE and not known:
        raise InputError(
            f"expected a member reference with --augment {augment} (the transfer route scores one view of each "
            f"sample), got none known for {target_label}; give --members FILE"
        )


def announce_cost(sizes: dict[str, int]) -> dict[str, str]:
    """Say on stderr what ``--augment shifts`` costs in oracle queries over the sets of ``sizes`` (name -> samples),
    before the shifts are scored; the same words as the run's tag (``ema.augment_cost``)."""
    plain = sum(sizes.values())
    parts = ", ".join(f"{name} {size:,}" for name, size in sizes.items())
    cost = (
        f"--augment {AUGMENT_SHIFTS}: {N_SHIFT_VIEWS} views of each sample ({parts}): "
        f"{N_SHIFT_VIEWS * plain:,} oracle queries instead of {plain:,}"
    )
    tqdm.write(cost, file=sys.stderr)
    return {keys.TAG_AUGMENT_COST: cost}
