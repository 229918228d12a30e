"""Candidate tests of H0 "removed" for the member-reference auditor, compared by power at measured error.

Part of the validity study of the member-reference auditor
(:mod:`ema.experiments.errors.reference`): every candidate's p-value on the same seeded member
and same-domain queries, so that the rate of p <= alpha on members is its power and on
same-domain queries its error. The auditor kept the last one, the log-likelihood-ratio sum over
tail bins (:func:`ema.stats.binned_tests.removal_test`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from ema.experiments.errors.reference_pools import Pool, draw, member_reference
from ema.signals import SIGNALS
from ema.stats import adjust_pvalues, cutoff_ranks, placement_pvalues
from ema.stats.binned_tests import (
    DEFAULT_BIN_LEVELS,
    _permuted_sums,
    bin_counts,
    log_likelihood_ratio,
    quantile_edges,
    removal_test,
    tail_pvalues,
)

DECILES = tuple(np.round(np.arange(1, 10) / 10, 2))
#: Permutations per test in the comparison (the auditor keeps its default).
COMPARISON_PERMUTATIONS = 2_000
COMPARISON_METRICS = ("confidence", "log_odds", "modified_entropy", "negative_entropy")
#: Levels of the tail-placement test.
TAIL_LEVELS = (0.01, 0.05, 0.1, 0.25, 0.5)


def _class_levels(scores, labels, pool_scores, pool_labels) -> np.ndarray:
    """Mid-rank level of each score among the pool's scores of its class (a per-class difficulty calibration)."""
    out = np.empty(scores.size)
    for c in np.unique(labels):  # ten classes
        ref = np.sort(pool_scores[pool_labels == c])
        sel = labels == c
        low, high = np.searchsorted(ref, scores[sel], "left"), np.searchsorted(ref, scores[sel], "right")
        out[sel] = (low + high + 1) / 2 / (ref.size + 1)
    return out


def _lr_test(q, non, mem, levels, rng, linear=False) -> float:
    """P-value of the likelihood-ratio sum over bins at ``levels`` of the pooled query and non-member scores."""
    pool = np.concatenate([q, non])
    edges = quantile_edges(pool, np.asarray(levels))
    pool_counts = bin_counts(pool, edges)
    weights = log_likelihood_ratio(bin_counts(mem, edges), pool_counts)
    weights = np.exp(weights) if linear else weights
    statistic = float(bin_counts(q, edges) @ weights)
    permuted = _permuted_sums(q.size, pool_counts, weights, COMPARISON_PERMUTATIONS, rng)
    return tail_pvalues(statistic, permuted, ("greater",))["greater"]


def _tail_placement(q_by_metric, non_by_metric) -> float:
    """Holm-adjusted smallest p-value of the query's share below each tail level of the non-member scores."""
    levels = np.array(TAIL_LEVELS)
    pvalues = []
    for q, non in zip(q_by_metric, non_by_metric, strict=True):
        ordered = np.sort(non)
        ranks = cutoff_ranks(ordered.size, levels)
        counts = (q[:, None] <= ordered[ranks - 1]).sum(axis=0)
        pvalues.append(
            placement_pvalues(counts, np.array([q.size]), ranks[:, None], np.array([ordered.size]), alternative="less")
        )
    return float(adjust_pvalues(np.concatenate(pvalues)).min())


def candidate_tests(scores, labels, refs, rng) -> dict[str, float]:
    """Every candidate's p-value of H0 "removed" for one query; ``refs`` holds the references' scores and labels."""
    lo, non_lo, mem_lo = scores["log_odds"], refs["non"]["log_odds"], refs["mem"]["log_odds"]
    pool_lo, pool_y = np.concatenate([non_lo, lo]), np.concatenate([refs["non_y"], labels])
    levels = {
        name: _class_levels(s, y, pool_lo, pool_y)
        for name, s, y in (("q", lo, labels), ("non", non_lo, refs["non_y"]), ("mem", mem_lo, refs["mem_y"]))
    }
    greater = {"alternative": "greater"}
    return {
        "rank-sum, confidence": stats.mannwhitneyu(scores["confidence"], refs["non"]["confidence"], **greater).pvalue,
        "rank-sum, log-odds": stats.mannwhitneyu(lo, non_lo, **greater).pvalue,
        "rank-sum, modified entropy": stats.mannwhitneyu(
            scores["modified_entropy"], refs["non"]["modified_entropy"], **greater
        ).pvalue,
        "rank-sum, per-class level of log-odds": stats.mannwhitneyu(levels["q"], levels["non"], **greater).pvalue,
        "mean shift (Welch t), log-odds": stats.ttest_ind(lo, non_lo, equal_var=False, **greater).pvalue,
        "tail placement, 3 metrics x 5 levels, Holm (calibrated auditor)": _tail_placement(
            [scores[m] for m in ("confidence", "negative_entropy", "modified_entropy")],
            [refs["non"][m] for m in ("confidence", "negative_entropy", "modified_entropy")],
        ),
        "LR sum, linear LR (locally most powerful at pi=0), tail bins": _lr_test(
            lo, non_lo, mem_lo, DEFAULT_BIN_LEVELS, rng, linear=True
        ),
        "LR sum, log LR, deciles": _lr_test(lo, non_lo, mem_lo, DECILES, rng),
        "LR sum, log LR, per-class levels, deciles": _lr_test(levels["q"], levels["non"], levels["mem"], DECILES, rng),
        "LR sum, log LR, tail bins (chosen)": removal_test(
            lo, non_lo, mem_lo, n_permutations=COMPARISON_PERMUTATIONS, random_state=rng
        )["greater"].pvalue,
    }


def compare_tests(pools: dict[str, Pool], sizes, n_draws: int, alpha: float, seed: int) -> pd.DataFrame:
    """One row per (kind, size, draw, candidate): whether the candidate rejected H0 "removed" at ``alpha``."""
    rng = np.random.default_rng(seed)
    mem_p, mem_y = member_reference(pools)
    non_p, non_y = pools["cal"]
    refs = {
        "non": {m: SIGNALS[m](non_p, non_y) for m in COMPARISON_METRICS},
        "mem": {m: SIGNALS[m](mem_p, mem_y) for m in COMPARISON_METRICS},
        "non_y": non_y,
        "mem_y": mem_y,
    }
    rows = []
    for kind in ("members", "same-domain"):
        for size in sizes:
            for _ in range(n_draws):
                proba, labels = draw(pools, kind, size, rng)
                scores = {m: SIGNALS[m](proba.astype(np.float64), labels) for m in COMPARISON_METRICS}
                for test, pvalue in candidate_tests(scores, labels, refs, rng).items():
                    rows.append({"kind": kind, "size": size, "test": test, "rejected": pvalue <= alpha})
    return pd.DataFrame(rows)
