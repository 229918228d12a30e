"""Where more information about the retained share is: ``python -m ema.experiments.errors.learned_views``.

Part of the ``errors`` study (issue 26). ``--augment shifts`` reduces each sample's 9 log-odds (the
identity and its 8 one-pixel shifts) to one fixed contrast (:mod:`ema.auditors.views`). This study
asks how much of the 9 views' information that contrast leaves behind: a gradient-boosted classifier
learns the members-to-non-members likelihood ratio from the 9 log-odds and the contrast, and its
log-odds becomes the score, binned and measured exactly as the auditor measures its own
(:func:`ema.stats.information.binned_information`).

A score learned on the references cannot be scored on the samples it learned from: a member the
classifier was fitted on looks more member-like than a new one, so the references would not describe
a query. Each reference sample is therefore scored by a classifier fitted on the other folds
(:data:`FOLDS`), and a new sample by one of those classifiers drawn at random: given the classifiers,
a new non-member's score then has the non-member reference's distribution exactly (equal folds), which
is what the auditor's test needs. The study checks that property on samples no classifier saw (M1
for members, M6 for non-members) with a two-sample Kolmogorov-Smirnov test against the references'
cross-fitted scores.

The sets are the certification grid's (:mod:`ema.experiments.errors.reference_pools`, split seed 0):
members M2..M5, non-members the calibration set, every image scored on its 9 views.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ema.experiments.errors.reference_pools import DEFAULT_CACHE, TARGETS
from ema.experiments.errors.shift_information import GOAL_SIZE

#: Folds of the cross-fitted score: each reference sample is scored by a classifier fitted on the other four.
FOLDS = 5
#: The learner: shallow, shrunk trees with a fixed number of rounds (no early stopping: its validation split
#: would be one more random choice, and its stopping point one more thing fitted to the references).
LEARNER_PARAMS = {
    "max_iter": 200,
    "max_leaf_nodes": 7,
    "learning_rate": 0.03,
    "min_samples_leaf": 40,
    "l2_regularization": 1.0,
    "early_stopping": False,
}
COMMAND = "python -m ema.experiments.errors.learned_views"


def view_features(log_odds: np.ndarray) -> np.ndarray:
    """The learner's features of samples' log-odds on their views, shape (n, n_views) with the identity first: the
    log-odds and the auditor's contrast.

    >>> view_features(np.array([[4.0] + [2.0] * 8])).tolist()
    [[4.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 3.0]]
    """
    from ema.auditors.views import SHIFT_CONTRAST

    contrast = log_odds[:, 0] - SHIFT_CONTRAST * log_odds[:, 1:].mean(axis=1)
    return np.column_stack([log_odds, contrast])


@dataclass(frozen=True)
class CrossFittedScore:
    """A learned score, cross-fitted: the references' out-of-fold scores and the classifiers that give them."""

    member_scores: np.ndarray
    nonmember_scores: np.ndarray
    classifiers: tuple

    def score_new(self, features: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Scores of samples no classifier saw, each by one classifier drawn at random (so that their
        distribution is the references' when they are drawn like them)."""
        chosen = rng.integers(len(self.classifiers), size=len(features))
        scores = np.empty(len(features))
        for fold, classifier in enumerate(self.classifiers):  # FOLDS classifiers
            scores[chosen == fold] = classifier.decision_function(features[chosen == fold])
        return scores


def cross_fitted_score(members: np.ndarray, nonmembers: np.ndarray, seed: int) -> CrossFittedScore:
    """Fit :data:`FOLDS` classifiers, each on all folds but one, with the two sides weighted equally."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    rng = np.random.default_rng(seed)
    member_folds, nonmember_folds = rng.permutation(len(members)) % FOLDS, rng.permutation(len(nonmembers)) % FOLDS
    member_scores, nonmember_scores = np.empty(len(members)), np.empty(len(nonmembers))
    classifiers = []
    for fold in range(FOLDS):  # a handful of folds
        train_m, train_n = members[member_folds != fold], nonmembers[nonmember_folds != fold]
        weights = np.concatenate([np.full(len(train_m), 0.5 / len(train_m)), np.full(len(train_n), 0.5 / len(train_n))])
        classifier = HistGradientBoostingClassifier(random_state=seed, **LEARNER_PARAMS).fit(
            np.vstack([train_m, train_n]),
            np.concatenate([np.ones(len(train_m)), np.zeros(len(train_n))]),
            sample_weight=weights * (len(train_m) + len(train_n)),
        )
        member_scores[member_folds == fold] = classifier.decision_function(members[member_folds == fold])
        nonmember_scores[nonmember_folds == fold] = classifier.decision_function(nonmembers[nonmember_folds == fold])
        classifiers.append(classifier)
    return CrossFittedScore(member_scores, nonmember_scores, tuple(classifiers))


def view_log_odds_features(proba: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """:func:`view_features` of samples' probabilities on their views, (n_views, n, n_classes), the identity first."""
    from ema.signals import log_odds_score

    return view_features(np.column_stack([log_odds_score(view, labels) for view in proba]))


def learned_information(members: np.ndarray, nonmembers: np.ndarray, seeds: tuple[int, ...]) -> np.ndarray:
    """The learned score's (information, lower bound, certifiable margin at :data:`GOAL_SIZE`) from the members' and
    non-members' features, cross-fitted (:func:`cross_fitted_score`) and averaged over ``seeds``."""
    rows = []
    for seed in seeds:  # a few seeds of the folds and the learner
        fitted = cross_fitted_score(members, nonmembers, seed)
        rows.append(information_and_margin(fitted.member_scores, fitted.nonmember_scores, seed))
    return np.mean(rows, axis=0)


def information_and_margin(members: np.ndarray, nonmembers: np.ndarray, seed: int) -> tuple[float, float, float]:
    """A score's cross-fitted information, its one-standard-error lower bound, and the certifiable margin at
    :data:`GOAL_SIZE`, as the auditor computes them for its own score."""
    from ema.stats.binned_tests import DEFAULT_BIN_LEVELS
    from ema.stats.certify import certifiable_margin
    from ema.stats.information import binned_information

    estimate, counts = binned_information(members, nonmembers, np.asarray(DEFAULT_BIN_LEVELS), random_state=seed)
    margin = certifiable_margin(GOAL_SIZE, nonmembers.size, estimate.lower_bound(), binned_references=counts)
    return estimate.estimate, estimate.lower_bound(), float(min(margin, 1.0))


def measure(name: str, seeds: tuple[int, ...], cache: Path) -> dict[str, object]:
    """The identity's, the contrast's and the learned score's information and margins on target ``name`` (means over
    ``seeds``), and the Kolmogorov-Smirnov p-values (median and lowest over ``seeds``) of new members and non-members
    against the references' cross-fitted scores."""
    from scipy.stats import ks_2samp

    from ema.experiments.errors.reference_pools import member_reference, score_pools

    pools = score_pools(name, cache, threads=1, augment="shifts")

    members, nonmembers = view_log_odds_features(*member_reference(pools)), view_log_odds_features(*pools["cal"])
    new_members, new_nonmembers = view_log_odds_features(*pools["M1"]), view_log_odds_features(*pools["M6"])
    single_view, contrast = (
        np.mean([information_and_margin(members[:, column], nonmembers[:, column], seed) for seed in seeds], axis=0)
        for column in (0, -1)
    )
    learned, ks_members, ks_nonmembers = [], [], []
    for seed in seeds:  # a few seeds of the folds and the learner
        fitted = cross_fitted_score(members, nonmembers, seed)
        learned.append(information_and_margin(fitted.member_scores, fitted.nonmember_scores, seed))
        rng = np.random.default_rng(seed)
        ks_members.append(ks_2samp(fitted.score_new(new_members, rng), fitted.member_scores).pvalue)
        ks_nonmembers.append(ks_2samp(fitted.score_new(new_nonmembers, rng), fitted.nonmember_scores).pvalue)
    learned = np.mean(learned, axis=0)
    return {
        "sizes": (len(members), len(nonmembers), len(new_members), len(new_nonmembers)),
        "single_view": single_view,
        "contrast": contrast,
        "learned": learned,
        "ks_members": (float(np.median(ks_members)), min(ks_members)),
        "ks_nonmembers": (float(np.median(ks_nonmembers)), min(ks_nonmembers)),
    }


def p_text(p_values: tuple[float, float]) -> str:
    """``median (lowest)`` of a test's p-values over the seeds.

    >>> p_text((0.52, 0.031))
    '0.52 (0.03)'
    """
    return f"{p_values[0]:.2f} ({p_values[1]:.2f})"


HEADER = (
    "| target | references (members / non-members) | information: 1 view / contrast / learned (lower bounds) "
    f"| learned / contrast | certifiable margin at {GOAL_SIZE}: 1 view / contrast / learned "
    "| new samples against the references, Kolmogorov-Smirnov p, median (lowest) over the seeds: "
    "members / non-members |"
)


def table_row(name: str, row: dict) -> str:
    """One target's line of the table under :data:`HEADER`, from :func:`measure`'s result."""
    scores = (row["single_view"], row["contrast"], row["learned"])
    information, lower, margin = (
        " / ".join(f"{score[i]:.{digits}f}" for score in scores) for i, digits in enumerate((3, 3, 2))
    )
    n_members, n_nonmembers, n_new_members, n_new_nonmembers = row["sizes"]
    return (
        f"| {name} | {n_members:,} / {n_nonmembers:,} | {information} ({lower}) "
        f"| {row['learned'][0] / row['contrast'][0]:.2f}x | {margin} | {p_text(row['ks_members'])} ({n_new_members:,} "
        f"M1) / {p_text(row['ks_nonmembers'])} ({n_new_nonmembers:,} M6) |"
    )


def main(argv: list[str] | None = None) -> None:
    """Print the identity's, the contrast's and the learned score's information on every target as a Markdown table."""
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--targets", nargs="+", choices=tuple(TARGETS), default=tuple(TARGETS))
    parser.add_argument("--seeds", type=int, default=5, help="Seeds of the folds and the learner averaged (default 5).")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="Folder of the scored pools.")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error(f"expected --seeds of at least 1, got {args.seeds}")
    print(HEADER)
    print("|---|---|---|---|---|---|")
    for name in args.targets:  # three targets
        started = time.perf_counter()
        row = measure(name, tuple(range(args.seeds)), args.cache)
        print(f"{table_row(name, row)}  <!-- {time.perf_counter() - started:.0f} s -->", flush=True)


if __name__ == "__main__":
    main()
