"""``thresholds``: our ROC-sweep threshold search against the reference's loop over candidates.

The reference implementation (Song & Mittal's ``_thre_setting``, which EMA's code copies)
tries every observed score as a threshold and computes the balanced accuracy with numpy
comparisons over all samples: O(n) work per candidate, O(n^2) in all. Ours
(:func:`ema.thresholds.select_threshold`) is one sort and cumulative counts.

Thresholds can differ where several reach the same balanced accuracy (ties), so the two
are compared on the balanced accuracy they reach, not on the threshold.
"""

from __future__ import annotations

import numpy as np

from benchmarks._common import Config, median_time, progress, row, spread

NAME = "thresholds"
#: Calibration sizes (members + non-members) at which both are timed.
SIZES = (1_000, 10_000, 100_000)
#: The size at which only ours is held to a wall-clock goal (the loop is extrapolated).
BIG_SIZE = 1_000_000
#: Above this many candidates the loop is timed on a subset of candidates and extrapolated.
FULL_LOOP_MAX = 20_000
#: Candidates the loop is timed on when extrapolating (full run, --quick).
SUBSET_CANDIDATES = (2_000, 500)
#: Share of samples whose score is saturated at one common value (ties, as confidence = 1.0 gives).
TIED_SHARE = 0.1
#: The performance goals.
SPEEDUP_GOAL_AT = 100_000
SPEEDUP_GOAL = 100.0
BIG_SECONDS_GOAL = 1.0


def make_scores(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Member and non-member scores (n // 2 and n - n // 2), overlapping, with ties.

    Members ~ N(0.8, 1), non-members ~ N(0, 1); a share of each is set to one common value
    (like the saturated confidence of a memorised sample), so candidate ties occur.
    """
    rng = np.random.default_rng(seed)
    members = rng.normal(0.8, 1.0, n // 2)
    nonmembers = rng.normal(0.0, 1.0, n - n // 2)
    for scores in (members, nonmembers):
        scores[rng.random(scores.size) < TIED_SHARE] = 3.0
    return members, nonmembers


def balanced_accuracy_at(members: np.ndarray, nonmembers: np.ndarray, threshold: float) -> float:
    """Balanced accuracy of flagging scores >= ``threshold`` as members (the reference's formula)."""
    return 0.5 * (float(np.mean(members >= threshold)) + float(np.mean(nonmembers < threshold)))


def loop_threshold(
    members: np.ndarray, nonmembers: np.ndarray, candidates: np.ndarray | None = None
) -> tuple[float, float]:
    """The reference's search: every candidate value, balanced accuracy over all samples each time.

    Parameters
    ----------
    candidates : ndarray, optional
        Values to try; every distinct observed score by default.

    Returns
    -------
    (threshold, balanced accuracy) of the first candidate reaching the best balanced accuracy.
    """
    if candidates is None:
        candidates = np.unique(np.concatenate([members, nonmembers]))
    best_threshold, best_ba = float("nan"), -1.0
    for value in candidates:
        tpr = np.sum(members >= value) / (len(members) + 0.0)
        tnr = np.sum(nonmembers < value) / (len(nonmembers) + 0.0)
        ba = 0.5 * (tpr + tnr)
        if ba > best_ba:
            best_threshold, best_ba = float(value), float(ba)
    return best_threshold, best_ba


def _label(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 and n % 1_000_000 == 0 else f"{n // 1000}k" if n >= 1000 else str(n)


def _time_loop(members, nonmembers, *, full_loop_max: int, subset: int, repeats: int, seed: int):
    """(seconds for the whole loop, balanced accuracy it reached, note, exact?)."""
    candidates = np.unique(np.concatenate([members, nonmembers]))
    if candidates.size <= full_loop_max:
        seconds, times, (_, ba) = median_time(lambda: loop_threshold(members, nonmembers, candidates), repeats)
        return seconds, ba, f"loop over all {candidates.size} candidates ({spread(times)})", True
    picked = np.sort(np.random.default_rng(seed).choice(candidates, size=min(subset, candidates.size), replace=False))
    seconds, times, (_, ba) = median_time(lambda: loop_threshold(members, nonmembers, picked), repeats)
    total = seconds * candidates.size / picked.size
    note = (
        f"loop EXTRAPOLATED: timed on {picked.size} of {candidates.size} candidates "
        f"({seconds:.3g} s median), scaled linearly x{candidates.size / picked.size:.0f}"
    )
    return total, ba, note, False


def measure(
    config: Config,
    *,
    sizes: tuple[int, ...] = SIZES,
    big_size: int | None = BIG_SIZE,
    full_loop_max: int = FULL_LOOP_MAX,
    seed: int = 0,
) -> list[dict]:
    """Time ours and the loop at ``sizes`` and ours at ``big_size``; compare balanced accuracies.

    Extra row keys: ``n``, ``ba_ours``, ``ba_loop`` (the loop's best over the candidates it
    tried: all of them, or the timed subset when extrapolated), ``ba_match`` (ours equals
    the loop's best when the loop was exhaustive; ours is at least the subset's best
    otherwise), ``loop_exhaustive``.
    """
    from ema.thresholds import select_threshold

    subset = SUBSET_CANDIDATES[1] if config.quick else SUBSET_CANDIDATES[0]
    rows = []
    all_sizes = [*sizes] + ([big_size] if big_size else [])
    for n in all_sizes:
        members, nonmembers = make_scores(n, seed)
        progress(f"thresholds: n={n}: ours")
        ours, ours_times, result = median_time(
            lambda m=members, nm=nonmembers: select_threshold(m, nm), config.cheap_repeats(), warmup=1
        )
        # Check ours against the reference formula at the threshold it chose.
        ba_ours = balanced_accuracy_at(members, nonmembers, result.threshold)
        is_big = n == big_size
        progress(f"thresholds: n={n}: loop")
        loop_repeats = config.cheap_repeats() if n <= 10_000 else 3
        loop_seconds, ba_loop, note, exhaustive = _time_loop(
            members,
            nonmembers,
            full_loop_max=full_loop_max,
            subset=min(subset, 100) if is_big else subset,
            repeats=loop_repeats,
            seed=seed,
        )
        match = abs(ba_ours - ba_loop) < 1e-12 if exhaustive else ba_ours >= ba_loop - 1e-12
        ratio = loop_seconds / ours
        if is_big:
            goal, met = f"ours < {BIG_SECONDS_GOAL:g} s", ours < BIG_SECONDS_GOAL
        elif n == SPEEDUP_GOAL_AT:
            goal, met = f">= {SPEEDUP_GOAL:g}x", ratio >= SPEEDUP_GOAL
        else:
            goal, met = "", None
        ba_text = (
            f"BA ours {ba_ours:.6f} {'==' if match else '!='} loop {ba_loop:.6f}"
            if exhaustive
            else f"BA ours {ba_ours:.6f} {'>=' if match else '<'} best of sampled candidates {ba_loop:.6f}"
        )
        rows.append(
            {
                **row(
                    NAME,
                    f"n={_label(n)}",
                    ours=ours,
                    baseline=loop_seconds,
                    unit="s",
                    baseline_label="loop over candidates",
                    ratio=ratio,
                    ratio_label="loop / ours (speedup)",
                    goal=goal,
                    met=met,
                    repeats=len(ours_times),
                    note=f"{ba_text}; ours {spread(ours_times)}; {note}",
                ),
                "n": n,
                "ba_ours": ba_ours,
                "ba_reported": result.balanced_accuracy,
                "ba_loop": ba_loop,
                "ba_match": bool(match),
                "loop_exhaustive": exhaustive,
                "baseline_extrapolated": not exhaustive,
            }
        )
    return rows
