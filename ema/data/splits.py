"""Seeded, disjoint splits of the embedded MNIST sample into the paper's roles.

Scaled down from the paper (which has 70,000 MNIST images to draw from) to fit the
10,000 embedded ones:

=============  ===========  =====================================================
split          size         role
=============  ===========  =====================================================
M1 .. M5       5 x 1,000    training folds of the target (members)
calibration    1,000        disjoint from training; halves train / test f_cal
M6             2,000        held-out MNIST (non-members, same domain)
S              1,000        scikit-learn digits at 28x28 (non-members, other domain)
=============  ===========  =====================================================
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ema.data.arrays import ArraySet
from ema.data.embedded import load_digits_28, load_mnist_embedded
from ema.errors import InputError

N_FOLDS = 5
FOLD_SIZE = 1_000
CALIBRATION_SIZE = 1_000
HELD_OUT_SIZE = 2_000
OTHER_DOMAIN_SIZE = 1_000
MEMBER_NAMES = tuple(f"M{i}" for i in range(1, N_FOLDS + 1))
QUERY_NAMES = (*MEMBER_NAMES, "M6", "S")
#: The verdict a correct auditor gives each named query set.
EXPECTED_VERDICTS = {**{name: "memorized" for name in MEMBER_NAMES}, "M6": "not_memorized", "S": "not_memorized"}


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
        if name not in sets:
            raise InputError(f"expected a query set name from {list(QUERY_NAMES)}, got {name!r}")
        return sets[name]

    def as_dict(self) -> dict[str, ArraySet]:
        """Every split by file stem: ``train_fold1``.., ``calibration``, ``M6``, ``S``."""
        out = {f"train_fold{i}": fold for i, fold in enumerate(self.folds, start=1)}
        out.update(calibration=self.calibration, M6=self.held_out, S=self.other_domain)
        return out


def make_splits(seed: int = 0) -> Splits:
    """Draw the disjoint splits from the embedded data with a seeded permutation."""
    rng = np.random.default_rng(seed)
    mnist = load_mnist_embedded()
    order = rng.permutation(len(mnist))
    bounds = np.cumsum([FOLD_SIZE] * N_FOLDS + [CALIBRATION_SIZE, HELD_OUT_SIZE])
    parts = np.split(order, bounds)
    folds = tuple(mnist.take(parts[i], name=MEMBER_NAMES[i]) for i in range(N_FOLDS))
    digits = load_digits_28()
    other = digits.take(rng.choice(len(digits), size=OTHER_DOMAIN_SIZE, replace=False), name="S")
    return Splits(
        folds=folds,
        calibration=mnist.take(parts[N_FOLDS], name="calibration"),
        held_out=mnist.take(parts[N_FOLDS + 1], name="M6"),
        other_domain=other,
        seed=seed,
    )
