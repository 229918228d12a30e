"""`ema grid errors`: how often each auditor errs, on many seeded query sets of known membership.

By default three targets (the paper's overfitting recipe and one that generalises on the
embedded MNIST, and the paper's recipe on Fashion-MNIST at the paper's sizes); with a data
source (``--data``), one target: that source's default recipe on its splits (a table's:
:data:`~ema.training.recipes.DEFAULT_TABLE_RECIPE`). Each is trained and registered;
every pool of candidate query samples is scored ONCE through the target's oracle; then many
seeded query sets are drawn from the pools and audited from those scores. EMA (t and KS),
the calibrated auditor (against the member reference scored on the target, as ``ema audit
--method calibrated`` runs it) and its transfer route (member behaviour from the calibration
model) are pure computations on the scores; the KS-ratio baseline must train a model on every
drawn query set, so it gets fewer draws (``n_ks_draws``).

Query kinds: ``members`` (drawn from fold M1; the member reference is folds M2..M5, so a
query's samples are never in it), ``same-domain`` (held-out M6), ``other-domain`` (the
target's S set; not drawn where the splits have none, as a table's), ``mixture`` (half M1,
half M6: truth "partly removed", retained fraction 0.5).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ema.auditors import KSRatioAuditor
from ema.auditors.ema import pvalue_verdict
from ema.auditors.result import INCONCLUSIVE, MEMORIZED, NOT_MEMORIZED
from ema.data.arrays import ArraySet
from ema.errors import InputError
from ema.training.spec import TrainSpec
from ema.validation import check_choice, check_open_unit, check_positive_int

if TYPE_CHECKING:  # the recipes import mlflow and scikit-learn: `ema grid --help` imports neither
    from ema.training.recipes import Recipe

KINDS = ("members", "same-domain", "other-domain", "mixture")
METHODS = ("ema-t", "ema-ks", "ks-ratio", "calibrated", "transfer")
#: Methods whose results carry a retained-fraction interval.
INTERVAL_METHODS = ("calibrated", "transfer")
#: The verdict that is an error for each kind; a mixture is partly retained, so neither verdict is wrong outright.
WRONG_VERDICT = {"members": NOT_MEMORIZED, "same-domain": MEMORIZED, "other-domain": MEMORIZED}


@dataclass(frozen=True)
class StudyTarget:
    """A target of the study: its recipe (None: the data source's default) and the data source of its splits."""

    spec: TrainSpec | Recipe | None
    data: str = "mnist-embedded"
    data_root: str | None = None


TARGETS = {
    "overfit (paper recipe)": StudyTarget(TrainSpec()),
    "generalising (5 epochs, weight decay 1e-3)": StudyTarget(TrainSpec(epochs=5, weight_decay=1e-3)),
    "Fashion-MNIST (paper recipe, paper sizes)": StudyTarget(TrainSpec(), data="fashion"),
}


def study_targets(data: str | None = None, root: str | None = None) -> dict[str, StudyTarget]:
    """The study's targets: :data:`TARGETS` without a data source, else one target, the source's default recipe."""
    if data is None:
        return TARGETS
    return {f"{data} (default recipe)": StudyTarget(None, data=data, data_root=root)}


@dataclass(frozen=True)
class ErrorGridConfig:
    sizes: tuple[int, ...] = (5, 20, 50, 200, 1000)
    n_draws: int = 200
    n_ks_draws: int = 2
    alpha: float = 0.1
    seed: int = 0
    kinds: tuple[str, ...] = KINDS

    def __post_init__(self) -> None:
        """Refuse a study that could not run, before any target is trained."""
        if not self.sizes:
            raise InputError("expected at least one query size, got none")
        for size in self.sizes:
            check_positive_int("query size", size)
        check_positive_int("draws", self.n_draws)
        if isinstance(self.n_ks_draws, bool) or not isinstance(self.n_ks_draws, int) or self.n_ks_draws < 0:
            raise InputError(f"expected KS-ratio draws to be a non-negative integer, got {self.n_ks_draws!r}")
        check_open_unit("alpha", self.alpha)
        for kind in self.kinds:
            check_choice("kind", kind, KINDS)


@dataclass
class ScoredPools:
    """The target's probabilities on every candidate query sample, and the samples themselves."""

    sets: dict[str, ArraySet]
    proba: dict[str, np.ndarray] = field(default_factory=dict)


#: What each kind draws from, in words, for the message refusing a size too large for it.
POOL_WORDS = {
    "members": "a member fold M1",
    "same-domain": "the held-out set M6",
    "other-domain": "the other-domain set S",
    "mixture": "a 50% mixture of M1 and M6",
}


def studied_kinds(kinds: tuple[str, ...], pools: Collection[str]) -> tuple[str, ...]:
    """``kinds`` less ``other-domain`` where the splits have no S (``pools``, the kinds with a pool, lack it: a
    table)."""
    return tuple(kind for kind in kinds if kind == "mixture" or kind in pools)


def largest_sizes(pool_sizes: dict[str, int], kinds: tuple[str, ...]) -> dict[str, int]:
    """The largest query each kind can draw without replacement from pools of ``pool_sizes``.

    ``pool_sizes`` maps ``members``, ``same-domain`` and (where the splits have S)
    ``other-domain`` to their sample counts; a mixture takes ``size // 2`` members and the
    rest held out.
    """
    fits = {kind: pool_sizes[kind] for kind in kinds if kind in pool_sizes}
    if "mixture" in kinds:
        fits["mixture"] = min(2 * pool_sizes["members"] + 1, 2 * pool_sizes["same-domain"])
    return fits


def check_sizes_fit(sizes: tuple[int, ...], pool_sizes: dict[str, int], kinds: tuple[str, ...], label: str) -> None:
    """Refuse, in one line naming the largest size that fits, a query size some kind cannot draw.

    Raises
    ------
    InputError
        If a size exceeds what the smallest pool (for ``kinds``) holds.
    """
    fits = largest_sizes(pool_sizes, studied_kinds(kinds, pool_sizes))
    kind = min(fits, key=fits.get)
    too_large = [size for size in sizes if size > fits[kind]]
    if too_large:
        raise InputError(
            f"expected query sizes of at most {fits[kind]}, the samples {POOL_WORDS[kind]} of target {label!r} "
            f"holds, got {', '.join(map(str, too_large))}; give --sizes up to {fits[kind]}"
        )


def draw_query(
    pools: ScoredPools, kind: str, size: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, ArraySet]:
    """(probabilities, labels, images) of one seeded query set of the given kind and size."""
    if kind == "mixture":
        n_members = size // 2
        parts = [("members", n_members), ("same-domain", size - n_members)]
    else:
        parts = [(kind, size)]
    probas, labels, sets = [], [], []
    for pool, n in parts:
        chosen = rng.choice(len(pools.sets[pool]), size=n, replace=False)
        probas.append(pools.proba[pool][chosen])
        labels.append(pools.sets[pool].y[chosen])
        sets.append(pools.sets[pool].take(chosen))
    images = ArraySet(kind, *(np.concatenate([getattr(s, a) for s in sets]) for a in ("x", "y", "index")))
    return np.concatenate(probas), np.concatenate(labels), images


def true_retained_fraction(kind: str, size: int) -> float:
    return {"members": 1.0, "mixture": (size // 2) / size}.get(kind, 0.0)


def audit_draws(
    pools: ScoredPools,
    auditors: dict,
    ks_models,
    config: ErrorGridConfig,
    *,
    progress: bool = True,
) -> pd.DataFrame:
    """One row per (kind, size, draw, method): the verdict, and the retained-fraction interval where given.

    ``auditors`` maps ``ema``, ``calibrated`` and ``transfer`` to calibrated auditors.
    ``ks_models`` is ``(fit_query_model, calset_model_proba_fn)``: a function training f_Dq on a
    drawn query set and returning its probabilities on it, and f_Dcal's probability function.
    """
    fit_query_model, calset_proba = ks_models
    rng = np.random.default_rng(config.seed)
    rows = []
    cells = [(kind, size) for kind in config.kinds for size in config.sizes]
    for kind, size in tqdm(cells, desc="error grid cells", unit="cell", disable=not progress, leave=False):
        truth = true_retained_fraction(kind, size)
        for draw in range(config.n_draws):
            proba, labels, images = draw_query(pools, kind, size, rng)
            results = {name: auditor.audit(proba, labels) for name, auditor in auditors.items()}
            verdicts = {
                "ema-t": results["ema"].verdict,
                "ema-ks": str(pvalue_verdict(results["ema"].metrics["rho_ema_ks"], config.alpha)),
                **{method: results[method].verdict for method in INTERVAL_METHODS},
            }
            if draw < config.n_ks_draws:
                pixels = images.model_inputs()
                ks = KSRatioAuditor().calibrate(fit_query_model(images), calset_proba(pixels)).audit(proba, labels)
                verdicts["ks-ratio"] = ks.verdict
            for method, verdict in verdicts.items():
                row = {"kind": kind, "size": size, "draw": draw, "method": method, "verdict": verdict, "truth": truth}
                if method in INTERVAL_METHODS:
                    metrics = results[method].metrics
                    row.update(
                        retained=metrics["retained_fraction"],
                        ci_low=metrics["retained_ci_low"],
                        ci_high=metrics["retained_ci_high"],
                    )
                rows.append(row)
    return pd.DataFrame(rows)


def summarize(draws: pd.DataFrame) -> pd.DataFrame:
    """Rates per (method, kind, size): memorized, not memorized, inconclusive, error; interval coverage and width."""
    grouped = draws.groupby(["method", "kind", "size"], sort=False)
    summary = (
        grouped["verdict"]
        .agg(
            n="size",
            memorized=lambda v: (v == MEMORIZED).mean(),
            not_memorized=lambda v: (v == NOT_MEMORIZED).mean(),
            inconclusive=lambda v: (v == INCONCLUSIVE).mean(),
        )
        .reset_index()
    )
    wrong = summary["kind"].map(WRONG_VERDICT)
    summary["error"] = np.select(
        [wrong == MEMORIZED, wrong == NOT_MEMORIZED], [summary["memorized"], summary["not_memorized"]], default=np.nan
    )
    if "ci_low" in draws:
        intervals = draws.dropna(subset=["ci_low"]).assign(
            covered=lambda d: (d["ci_low"] <= d["truth"] + 1e-12) & (d["truth"] <= d["ci_high"] + 1e-12),
            width=lambda d: d["ci_high"] - d["ci_low"],
        )
        coverage = intervals.groupby(["method", "kind", "size"])[["covered", "width"]].mean().reset_index()
        summary = summary.merge(coverage, on=["method", "kind", "size"], how="left")
    return summary
