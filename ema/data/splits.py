"""Seeded, disjoint splits of an in-domain pool into the paper's roles, plus an other-domain set.

=============  ======================  ==================================================
split          size                    role
=============  ======================  ==================================================
M1 .. M5       5 x ``sizes.fold``      training folds of the target (members)
calibration    ``sizes.calibration``   disjoint from training; halves train / test f_cal
M6             ``sizes.held_out``      held out, same domain (non-members)
S              ``sizes.other_domain``  drawn from another pool (non-members, other domain)
=============  ======================  ==================================================

The paper draws 5 x 2,000 / 1,000 / 2,000 from MNIST (:data:`PAPER_SIZES`). The embedded
MNIST sample holds only 10,000 images, so :func:`make_splits` scales them down to
5 x 1,000 / 1,000 / 2,000 with 1,000 scikit-learn digits as S (:data:`EMBEDDED_SIZES`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ema.data.arrays import ArraySet
from ema.data.embedded import load_digits_28, load_mnist_embedded
from ema.errors import InputError
from ema.validation import check_choice

N_FOLDS = 5
MEMBER_NAMES = tuple(f"M{i}" for i in range(1, N_FOLDS + 1))
QUERY_NAMES = (*MEMBER_NAMES, "M6", "S")
#: The verdict a correct auditor gives each named query set.
EXPECTED_VERDICTS = {**{name: "memorized" for name in MEMBER_NAMES}, "M6": "not_memorized", "S": "not_memorized"}


@dataclass(frozen=True)
class SplitSizes:
    """How many images each role gets.

    Attributes
    ----------
    fold : int
        Images per training fold (there are five, M1..M5).
    calibration : int
        Calibration images.
    held_out : int
        Held-out in-domain images (M6).
    other_domain : int
        Other-domain images (S), drawn from a second pool.
    """

    fold: int
    calibration: int
    held_out: int
    other_domain: int

    def __post_init__(self) -> None:
        for role, size in asdict(self).items():
            if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or size < 1:
                raise InputError(f"expected a positive integer number of {role} images, got {size!r}")

    @property
    def in_domain(self) -> int:
        """Images drawn from the in-domain pool: folds, calibration and held out."""
        return N_FOLDS * self.fold + self.calibration + self.held_out

    def scaled(self, factor: float) -> SplitSizes:
        """Every size times ``factor``, rounded down (at least one image each)."""
        return SplitSizes(*(max(1, int(size * factor)) for size in asdict(self).values()))


#: The paper's benchmark sizes: 10,000 training images in five folds, 1,000 calibration, 2,000 held out.
PAPER_SIZES = SplitSizes(fold=2_000, calibration=1_000, held_out=2_000, other_domain=2_000)
#: The paper's sizes scaled to the 10,000 embedded MNIST images.
EMBEDDED_SIZES = SplitSizes(fold=1_000, calibration=1_000, held_out=2_000, other_domain=1_000)


@dataclass(frozen=True)
class Splits:
    """The target's training folds, the calibration set and the query sets."""

    folds: tuple[ArraySet, ...]
    calibration: ArraySet
    held_out: ArraySet
    other_domain: ArraySet
    seed: int

    @property
    def train(self) -> ArraySet:
        """All training folds together: the target's training data."""
        return ArraySet(
            "train",
            np.concatenate([f.x for f in self.folds]),
            np.concatenate([f.y for f in self.folds]),
            np.concatenate([f.index for f in self.folds]),
        )

    def query(self, name: str) -> ArraySet:
        """A named query set: ``M1``..``M5`` (members), ``M6`` (held out), ``S`` (other domain)."""
        sets = {**{f.name: f for f in self.folds}, "M6": self.held_out, "S": self.other_domain}
        return sets[check_choice("query set", name, QUERY_NAMES)]

    def as_dict(self) -> dict[str, ArraySet]:
        """Every split by file stem, named as the queries are: ``M1``..``M5``, ``M6``, ``S``, and ``calibration``."""
        out = dict(zip(MEMBER_NAMES, self.folds, strict=True))
        out.update(calibration=self.calibration, M6=self.held_out, S=self.other_domain)
        return out


def draw_splits(pool: ArraySet, other_pool: ArraySet, sizes: SplitSizes, *, seed: int = 0) -> Splits:
    """Draw disjoint splits from ``pool`` and the other-domain set from ``other_pool``.

    One seeded permutation of ``pool`` is cut into the five folds, the calibration set and
    the held-out set, in that order; S is a seeded draw without replacement from
    ``other_pool``. Each split's ``index`` keeps the images' positions in their pool.

    Parameters
    ----------
    pool : ArraySet
        In-domain images; must hold at least ``sizes.in_domain``.
    other_pool : ArraySet
        Other-domain images; must hold at least ``sizes.other_domain``.
    sizes : SplitSizes
        How many images each role gets.
    seed : int, default 0
        Seeds the permutation and the draw.

    Returns
    -------
    Splits

    Raises
    ------
    InputError
        If a pool is too small for the sizes asked for.
    """
    for role, data, needed in (("in-domain", pool, sizes.in_domain), ("other-domain", other_pool, sizes.other_domain)):
        if len(data) < needed:
            raise InputError(f"expected at least {needed} {role} images in {data.name!r} for {sizes}, got {len(data)}")
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(pool))
    bounds = np.cumsum([sizes.fold] * N_FOLDS + [sizes.calibration, sizes.held_out])
    parts = np.split(order, bounds)
    other = other_pool.take(rng.choice(len(other_pool), size=sizes.other_domain, replace=False), name="S")
    return Splits(
        folds=tuple(pool.take(parts[i], name=MEMBER_NAMES[i]) for i in range(N_FOLDS)),
        calibration=pool.take(parts[N_FOLDS], name="calibration"),
        held_out=pool.take(parts[N_FOLDS + 1], name="M6"),
        other_domain=other,
        seed=seed,
    )


def make_splits(seed: int = 0) -> Splits:
    """The embedded MNIST sample's splits (:data:`EMBEDDED_SIZES`), S from scikit-learn's digits."""
    return draw_splits(load_mnist_embedded(), load_digits_28(), EMBEDDED_SIZES, seed=seed)
