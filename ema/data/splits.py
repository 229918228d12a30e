"""Seeded, disjoint splits of an in-domain pool into the paper's roles, plus an other-domain set.

=============  ======================  ==================================================
split          size                    role
=============  ======================  ==================================================
M1 .. M5       5 x ``sizes.fold``      training folds of the target (members)
calibration    ``sizes.calibration``   disjoint from training; halves train / test f_cal
M6             ``sizes.held_out``      held out, same domain (non-members)
S              ``sizes.other_domain``  drawn from another pool (non-members, other domain);
                                       none for a table (no other pool has its columns)
=============  ======================  ==================================================

The paper draws 5 x 2,000 / 1,000 / 2,000 from MNIST (:data:`PAPER_SIZES`). The embedded
MNIST sample holds only 10,000 images, so :func:`make_splits` scales them down to
5 x 1,000 / 1,000 / 2,000 with 1,000 scikit-learn digits as S (:data:`EMBEDDED_SIZES`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass

import numpy as np

from ema.data.arrays import ArraySet, in_query_layout
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
        Other-domain images (S), drawn from a second pool; 0 for a source without one (a table).
    reference : int
        In-domain images no other role uses, kept as the non-member reference of the
        calibrated auditor (a larger reference lowers the floor of what it can certify); 0
        (default): none, the calibration set is the reference.
    """

    fold: int
    calibration: int
    held_out: int
    other_domain: int
    reference: int = 0

    def __post_init__(self) -> None:
        for role, size in asdict(self).items():
            least = 0 if role in ("other_domain", "reference") else 1
            if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or size < least:
                raise InputError(f"expected a positive integer number of {role} images, got {size!r}")

    @property
    def in_domain(self) -> int:
        """Images drawn from the in-domain pool: folds, calibration, held out and the reference."""
        return N_FOLDS * self.fold + self.calibration + self.held_out + self.reference

    def scaled(self, factor: float) -> SplitSizes:
        """Every size times ``factor``, rounded down (at least one image each; a role of none keeps none)."""
        return SplitSizes(*(max(1, int(size * factor)) if size else 0 for size in asdict(self).values()))

    @classmethod
    def for_pool(cls, n_rows: int) -> SplitSizes:
        """Sizes for a pool with no other domain (a table, a user's file): folds of ``n // 9``, calibration ``2n // 9``,
        held out the rest; no S.

        Every row is used. The calibration set holds two folds' worth, so each of its halves
        (f_cal's training data and the threshold non-members) is as large as a member query
        (one fold); the held-out query is about two folds, as in the MNIST demo (2,000 vs
        1,000). Breast Cancer's 569 rows give 5 x 63, 126 and 128.
        """
        fold = n_rows // (2 * N_FOLDS - 1)
        if fold < 2:
            raise InputError(
                f"expected at least {2 * (2 * N_FOLDS - 1)} samples to split into five member folds, a "
                f"calibration and a held-out set, got {n_rows}"
            )
        calibration = 2 * n_rows // (2 * N_FOLDS - 1)
        return cls(fold=fold, calibration=calibration, held_out=n_rows - N_FOLDS * fold - calibration, other_domain=0)


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
    other_domain: ArraySet | None
    seed: int
    reference: ArraySet | None = None

    @property
    def train(self) -> ArraySet:
        """All training folds together: the target's training data."""
        return ArraySet(
            "train",
            np.concatenate([f.x for f in self.folds]),
            np.concatenate([f.y for f in self.folds]),
            np.concatenate([f.index for f in self.folds]),
            self.folds[0].features,
        )

    @property
    def query_names(self) -> tuple[str, ...]:
        """The named query sets these splits hold: :data:`QUERY_NAMES`, without ``S`` for a table."""
        return QUERY_NAMES if self.other_domain is not None else QUERY_NAMES[:-1]

    def query(self, name: str) -> ArraySet:
        """A named query set: ``M1``..``M5`` (members), ``M6`` (held out), ``S`` (other domain, not for a table)."""
        check_choice("query set", name, QUERY_NAMES)
        if name == "S" and self.other_domain is None:
            raise InputError(
                "expected a query set of these splits, got 'S': a table has no other-domain set; query M1..M6 or "
                "give --query-file"
            )
        sets = {**{f.name: f for f in self.folds}, "M6": self.held_out, "S": self.other_domain}
        return sets[name]

    def with_fold(self, name: str, data: ArraySet) -> Splits:
        """These splits with the training fold ``name`` (``M1``..``M5``) replaced by ``data`` (an owner's file).

        Raises
        ------
        InputError
            If ``name`` is not a fold, or ``data``'s inputs are not of the folds' kind and shape.
        """
        check_choice("fold", name, MEMBER_NAMES)
        data = in_query_layout(data, self.folds[0], role=f"fold {name} file")
        position = MEMBER_NAMES.index(name)
        replaced = ArraySet(name, data.x, data.y, data.index, data.features)
        return dataclasses.replace(self, folds=(*self.folds[:position], replaced, *self.folds[position + 1 :]))

    def as_dict(self) -> dict[str, ArraySet]:
        """Every split by file stem, named as the queries are: ``M1``..``M5``, ``M6``, ``S`` (if any), calibration,
        and the non-member reference (if any)."""
        out = dict(zip(MEMBER_NAMES, self.folds, strict=True))
        out.update(calibration=self.calibration, M6=self.held_out)
        if self.other_domain is not None:
            out["S"] = self.other_domain
        if self.reference is not None:
            out["reference"] = self.reference
        return out


def draw_splits(pool: ArraySet, other_pool: ArraySet | None, sizes: SplitSizes, *, seed: int = 0) -> Splits:
    """Draw disjoint splits from ``pool`` and the other-domain set from ``other_pool``.

    One seeded permutation of ``pool`` is cut into the five folds, the calibration set,
    the held-out set and (``sizes.reference`` > 0) the non-member reference, in that order, so
    that a reference leaves the other splits as they were; S is a seeded draw without replacement from
    ``other_pool``. Each split's ``index`` keeps the images' positions in their pool.

    Parameters
    ----------
    pool : ArraySet
        In-domain images; must hold at least ``sizes.in_domain``.
    other_pool : ArraySet or None
        Other-domain images; must hold at least ``sizes.other_domain``. None (a table): no S.
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
        if data is not None and len(data) < needed:
            raise InputError(f"expected at least {needed} {role} images in {data.name!r} for {sizes}, got {len(data)}")
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(pool))
    bounds = np.cumsum([sizes.fold] * N_FOLDS + [sizes.calibration, sizes.held_out, sizes.reference])
    parts = np.split(order, bounds)
    other = (
        None
        if other_pool is None
        else other_pool.take(rng.choice(len(other_pool), size=sizes.other_domain, replace=False), name="S")
    )
    return Splits(
        folds=tuple(pool.take(parts[i], name=MEMBER_NAMES[i]) for i in range(N_FOLDS)),
        calibration=pool.take(parts[N_FOLDS], name="calibration"),
        held_out=pool.take(parts[N_FOLDS + 1], name="M6"),
        other_domain=other,
        seed=seed,
        reference=pool.take(parts[N_FOLDS + 2], name="reference") if sizes.reference else None,
    )


def make_splits(seed: int = 0) -> Splits:
    """The embedded MNIST sample's splits (:data:`EMBEDDED_SIZES`), S from scikit-learn's digits."""
    return draw_splits(load_mnist_embedded(), load_digits_28(), EMBEDDED_SIZES, seed=seed)
