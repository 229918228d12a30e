"""Issue 26's grid: ``python -m ema.experiments.errors.reference --certification [--augment shifts]``.

Part of the member-reference auditor's validity study (:mod:`ema.experiments.errors.reference`),
on its cached pools. Every draw redraws the references AND the query, so each rate is the
auditor's unconditional error, the one a test can control:

- the query fold F is drawn from M1..M5 and the member reference is the other four folds;
- the non-member reference (as large as the calibration set, or ``nonmember_reference`` images:
  ``--nonmember-reference``) is drawn from the calibration set and M6 together, and the query's
  non-members from what is left;
- a query of each size and retained share holds ``round(share * size)`` members of F and
  non-members for the rest, and is audited by :class:`~ema.auditors.reference.ReferenceAuditor`
  calibrated on that draw's references (verdict at margin 0.1 and, from the same result, at the
  audit's certifiable margin, ``--margin auto``).

With ``--augment shifts`` the pools hold every image's 9 views, (9, n, C)
(:func:`ema.experiments.errors.reference_pools.score_pools`), and the auditor reduces them as
``ema audit --augment shifts`` does (:mod:`ema.auditors.views`); the information of each row is
then the shifted score's, and the identity view's alone is kept beside it. A pool too small for a
cell (the table target's folds of 63 rows cannot make a member query of 75) leaves that cell out
(:func:`carried_cells`).

Each draw also records what the information allows (:mod:`ema.stats.certify`), from the
information cross-fitted on that draw's references: the mean upper bound of a removed query,
and the width of a half-retained query's interval, so the auditor's efficiency is measured
against its own score's bound.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import integrate, stats

from ema.auditors.reference import ReferenceAuditor
from ema.auditors.reference_record import bound_counts, decide_reference_verdict
from ema.auditors.result import MEMORIZED, NOT_MEMORIZED
from ema.errors import InputError
from ema.experiments.errors.reference_pools import Pool, join_pools
from ema.stats.information import cross_fitted_information
from ema.stats.mixture import DetectionPower

#: Retained shares of the grid's queries (issue 26: coverage at 0, 0.1, 0.25, 0.5, 1; false certification at 0.1, 0.2).
SHARES: tuple[float, ...] = (0.0, 0.1, 0.2, 0.25, 0.5, 1.0)
#: Query sizes of the grid (issue 26: 20 to 1,000; memorized at 50 and 75 on the generalising target).
SIZES: tuple[int, ...] = (20, 50, 75, 200, 1000)
#: Permutations of each test (the auditor's default is 10,000): the p-value stays exact, its Monte Carlo
#: error near alpha = 0.1 is 0.007, and an audit costs half as much.
GRID_PERMUTATIONS = 2000
#: The margin of issue 26's row "margin 0.3 at 200 samples, overfit with shifts" (verdicts at it are kept too).
WIDE_MARGIN = 0.3


class _UnstatedPowerAuditor(ReferenceAuditor):
    """The reference auditor without its stated power, which this grid does not measure.

    Resampling the power is two thirds of an audit's cost on a redrawn reference (100 resampled
    tests of 1,000 permutations per size and draw); the verdicts, intervals and certifiable
    margin do not depend on it. ``power_retained`` and ``min_detectable_fraction`` are NaN.
    """

    def detection_power(self, n_query: int) -> DetectionPower:
        return DetectionPower(
            n=int(n_query),
            power_retained=math.nan,
            min_detectable_fraction=math.nan,
            power=self.power,
            alpha=self.alpha,
        )


def expected_upper_bound(n_query: float, n_reference: float, information: float, *, certify_level: float) -> float:
    """Mean one-sided upper bound on pi of a removed query that the information allows (profile likelihood, pi >= 0).

    With pi_hat ~ N(0, s^2), s = sqrt((1/n_q + 1/n_ref) / I), the bound is s (Z + z_L) for
    Z = pi_hat / s >= 0 and s (Z + sqrt(Z^2 + z_L^2)) below (see
    :func:`ema.stats.certify.certifiable_margin`); this is its mean over Z.
    """
    if information <= 0:
        return math.inf
    z = stats.norm.ppf(certify_level)
    scale = math.sqrt((1.0 / n_query + 1.0 / n_reference) / information)
    below, _ = integrate.quad(lambda t: (t + math.sqrt(t * t + z * z)) * stats.norm.pdf(t), -np.inf, 0.0)
    above = stats.norm.pdf(0.0) + 0.5 * z  # E[(Z + z) 1{Z >= 0}]
    return scale * (below + above)


def certification_rate_bound(
    n_query: float, n_reference: float, information: float, *, margin: float, alpha: float, certify_level: float
) -> float:
    """The most often a removed query can be called ``not_memorized`` at ``margin`` that the information allows.

    With Z = pi_hat / s as in :func:`expected_upper_bound`, the profile bound s h(Z) is at most
    ``margin`` for Z <= h^-1(margin / s) (h(Z) = Z + z_L above 0, Z + sqrt(Z^2 + z_L^2) below), and
    a test of H0 "removed" at level alpha leaves Z <= z_(1 - alpha) un-rejected; the rate is
    Phi of the smaller. It is 1 - alpha at most, whatever the information.
    """
    if information <= 0:
        return 0.0
    z = stats.norm.ppf(certify_level)
    b = margin / math.sqrt((1.0 / n_query + 1.0 / n_reference) / information)
    certified_below = b - z if b >= z else (b * b - z * z) / (2.0 * b)
    return float(stats.norm.cdf(min(certified_below, stats.norm.ppf(1.0 - alpha))))


def mixture_width_bound(
    n_query: float, n_members: float, n_nonmembers: float, information: float, *, confidence_level: float
) -> float:
    """Width of the interval of a half-retained query that the information I(0.5) allows.

    pi_hat of an efficient estimator varies by (1/n_q + 1/(4 n_mem) + 1/(4 n_non)) / I(0.5) (the
    references' shares enter with weight pi^2 and (1 - pi)^2; their score variance is taken as
    I); the width is twice the two-sided normal quantile times its square root.
    """
    if information <= 0:
        return math.inf
    z = stats.norm.ppf(0.5 + confidence_level / 2.0)
    return 2.0 * z * math.sqrt((1.0 / n_query + 0.25 / n_members + 0.25 / n_nonmembers) / information)


def _take(pool: Pool, index: np.ndarray) -> Pool:
    """The samples ``index`` of a pool of one view (n, C) or of several (n_views, n, C)."""
    return np.take(pool[0], index, axis=-2), pool[1][index]


def _redrawn_references(
    pools: dict[str, Pool], rng: np.random.Generator, n_reference: int
) -> tuple[int, Pool, Pool, Pool]:
    """(query fold, member reference, non-member reference of ``n_reference``, non-members left for queries) of one
    draw."""
    fold = int(rng.integers(1, 6))
    members = join_pools([pools[f"M{i}"] for i in range(1, 6) if i != fold])
    nonmembers = join_pools([pools["cal"], pools["M6"]])
    order = rng.permutation(nonmembers[1].size)
    return fold, members, _take(nonmembers, order[:n_reference]), _take(nonmembers, order[n_reference:])


def _query(members: Pool, nonmembers: Pool, size: int, share: float, rng: np.random.Generator) -> Pool:
    """``round(share * size)`` members and the rest non-members, drawn without replacement."""
    n_members = round(share * size)
    chosen_m = rng.choice(members[1].size, n_members, replace=False)
    chosen_n = rng.choice(nonmembers[1].size, size - n_members, replace=False)
    return join_pools([_take(members, chosen_m), _take(nonmembers, chosen_n)])


def carried_cells(
    pools: dict[str, Pool], sizes, shares, nonmember_reference: int | None = None
) -> list[tuple[int, float]]:
    """The (size, share) cells the pools can fill: at most one fold of members, and the non-members a draw leaves.

    A draw's members come from one fold (the smallest counts) and its non-members from the
    calibration set and M6 less the non-member reference (:func:`nonmember_reference_size`).
    """
    fold = min(pools[f"M{i}"][1].size for i in range(1, 6))
    nonmembers = pools["cal"][1].size + pools["M6"][1].size - nonmember_reference_size(pools, nonmember_reference)
    return [
        (size, share)
        for size in sizes
        for share in shares
        if round(share * size) <= fold and size - round(share * size) <= nonmembers
    ]


def nonmember_reference_size(pools: dict[str, Pool], requested: int | None) -> int:
    """The non-member reference's size: ``requested``, or the calibration set's by default.

    Raises
    ------
    InputError
        If ``requested`` leaves fewer than one of the calibration set and M6 for the queries, or is below 2.
    """
    available = pools["cal"][1].size + pools["M6"][1].size
    if requested is None:
        return pools["cal"][1].size
    if not 2 <= requested < available:
        raise InputError(
            f"expected a non-member reference of 2 to {available - 1} (the calibration set and M6 hold {available}, "
            f"and queries need what it leaves), got {requested}"
        )
    return requested


def certification_draws(
    pools: dict[str, Pool],
    *,
    sizes=SIZES,
    shares=SHARES,
    n_draws: int = 200,
    alpha: float = 0.1,
    seed: int = 0,
    nonmember_reference: int | None = None,
) -> pd.DataFrame:
    """One row per draw and carried cell: verdicts at margin 0.1, 0.3 and auto, the interval, the bounds.

    Every draw redraws the query fold, the member reference, the non-member reference and each
    query (module docstring); the auditor is the default one with :data:`GRID_PERMUTATIONS`
    permutations, less its stated power (:class:`_UnstatedPowerAuditor`). Pools of several views
    are audited on all of them; ``information_single_view`` is then the identity view's (else NaN).
    Cells the pools cannot fill are left out (:func:`carried_cells`). ``nonmember_reference``: the
    non-member reference's size (:func:`nonmember_reference_size`; the calibration set's by default).
    """
    rng = np.random.default_rng(seed)
    n_reference = nonmember_reference_size(pools, nonmember_reference)
    cells = carried_cells(pools, sizes, shares, n_reference)
    rows = []
    for index in range(n_draws):
        fold, members, reference, rest = _redrawn_references(pools, rng, n_reference)
        auditor = _UnstatedPowerAuditor(alpha=alpha, n_permutations=GRID_PERMUTATIONS, random_state=index)
        auditor.calibrate(*members, *reference)
        level = auditor.resolved_certify_level()
        half = cross_fitted_information(
            auditor.member_scores_, auditor.nonmember_scores_, auditor.levels_, retained_share=0.5, random_state=index
        )
        for size, share in cells:
            result = auditor.audit(*_query(pools[f"M{fold}"], rest, size, share, rng))
            m = result.metrics
            rows.append(
                {
                    "draw": index,
                    "size": size,
                    "share": share,
                    "truth": round(share * size) / size,
                    "verdict": result.verdict,
                    "verdict_wide": decide_reference_verdict(
                        m["p_removed"],
                        m["p_retained"],
                        m["retained_upper_bound"],
                        alpha=alpha,
                        margin=WIDE_MARGIN,
                        bound_counts=bound_counts(
                            m["certifiable_margin"], m["p_mixture_fit"], shift_alpha=auditor.shift_alpha
                        ),
                    ),
                    "verdict_auto": decide_reference_verdict(
                        m["p_removed"],
                        m["p_retained"],
                        m["retained_upper_bound"],
                        alpha=alpha,
                        margin=m["certifiable_margin"],
                    ),
                    "p_retained": m["p_retained"],
                    "low": m["retained_ci_low"],
                    "high": m["retained_ci_high"],
                    "upper_bound": m["retained_upper_bound"],
                    "certifiable_margin": m["certifiable_margin"],
                    "information": m["information"],
                    "information_lower": m["information_lower"],
                    "information_single_view": m.get("information_single_view", math.nan),
                    "information_half": half,
                    "n_views": auditor.n_views_,
                    "n_members": members[1].size,
                    "n_reference": reference[1].size,
                    "certify_level": level,
                    "confidence_level": auditor.confidence_level,
                }
            )
    return pd.DataFrame(rows)


def summarize_certification(draws: pd.DataFrame, *, alpha: float = 0.1) -> pd.DataFrame:
    """Per size and share: verdict rates, coverage, mean width and upper bound, and the information's bounds.

    ``reachable`` is the share of draws whose certifiable margin is below 1 (a margin of 1
    certifies nothing, by construction), and ``not_memorized_auto_reachable`` the rate of
    ``not_memorized`` at ``--margin auto`` among them. The bounds (``upper_bound_limit``,
    ``width_limit``, and ``not_memorized_wide_limit``, the rate of ``not_memorized`` at margin
    :data:`WIDE_MARGIN` a removed query of the cell's size can reach at ``alpha``) come from the
    mean cross-fitted information of the cell's draws: one draw's estimate can be 0, and its bound
    infinite.
    """
    tolerance = 1e-12
    reachable = draws["certifiable_margin"] < 1.0
    frame = draws.assign(
        memorized=draws["verdict"] == MEMORIZED,
        not_memorized=draws["verdict"] == NOT_MEMORIZED,
        not_memorized_auto=draws["verdict_auto"] == NOT_MEMORIZED,
        not_memorized_wide=draws["verdict_wide"] == NOT_MEMORIZED,
        reachable=reachable,
        not_memorized_auto_reachable=(draws["verdict_auto"] == NOT_MEMORIZED).where(reachable),
        covered=(draws["low"] <= draws["truth"] + tolerance) & (draws["truth"] <= draws["high"] + tolerance),
        width=draws["high"] - draws["low"],
    )
    columns = [
        "memorized",
        "not_memorized",
        "not_memorized_auto",
        "not_memorized_wide",
        "reachable",
        "not_memorized_auto_reachable",
        "covered",
        "width",
        "upper_bound",
        "certifiable_margin",
        "information",
        "information_lower",
        "information_single_view",
    ]
    cells = frame.groupby(["size", "share"])
    summary = cells[columns].mean()
    sizes = cells[["information_half", "n_members", "n_reference", "certify_level", "confidence_level"]].mean()
    summary["upper_bound_limit"] = [
        expected_upper_bound(size, row.n_reference, info, certify_level=row.certify_level)
        for (size, _), row, info in zip(sizes.index, sizes.itertuples(), summary["information"], strict=True)
    ]
    summary["not_memorized_wide_limit"] = [
        certification_rate_bound(
            size, row.n_reference, info, margin=WIDE_MARGIN, alpha=alpha, certify_level=row.certify_level
        )
        for (size, _), row, info in zip(sizes.index, sizes.itertuples(), summary["information"], strict=True)
    ]
    summary["width_limit"] = [
        mixture_width_bound(
            size, row.n_members, row.n_reference, row.information_half, confidence_level=row.confidence_level
        )
        for (size, _), row in zip(sizes.index, sizes.itertuples(), strict=True)
    ]
    return summary.reset_index()


def _ratio(measured: float, bound: float) -> float:
    return measured / bound if bound > 0 and math.isfinite(bound) else math.nan


def certification_goals(summary: pd.DataFrame) -> list[tuple[str, float, str]]:
    """Issue 26's goals measured on one target's :func:`summarize_certification`: (measure, value, goal).

    A goal whose cells the grid did not run (``--sizes``, ``--shares``, a pool too small) is left out.
    """
    s = summary.set_index(["size", "share"])
    shares = set(s.index.get_level_values("share"))
    rows = [
        (
            f"{label} called `not_memorized` at margin 0.1 (worst size)",
            s.xs(share, level="share")["not_memorized"].max(),
            "<= 0.05",
        )
        for label, share in (("members", 1.0), ("10% retained", 0.1), ("20% retained", 0.2))
        if share in shares
    ]
    coverage = s["covered"].drop(index=[0.2], level="share", errors="ignore")
    worst = coverage.idxmin()
    rows.append((f"interval coverage, worst cell (size {worst[0]}, share {worst[1]:g})", coverage.min(), ">= 0.86"))
    pooled = coverage.groupby(level="share").mean()
    rows.append((f"interval coverage, worst share over all sizes ({pooled.idxmin():g})", pooled.min(), ">= 0.86"))
    rows += _efficiency_rows(s)
    if 0.0 in shares:
        rows += _removed_rows(s)
    for size, goal in ((50, ">= 0.70"), (75, ">= 0.80")):
        if (size, 1.0) in s.index:
            rows.append((f"members called `memorized` at {size}", s.loc[(size, 1.0), "memorized"], goal))
    if (1000, 0.5) in s.index:
        rows.append(("50% mixture of 1,000: mean interval width", s.loc[(1000, 0.5), "width"], "<= 0.42"))
    return rows


def _efficiency_rows(s: pd.DataFrame) -> list[tuple[str, float, str]]:
    """The mean upper bound at share 0 and the mean width at share 0.5 over their bounds, at 200 and 1,000."""
    rows = []
    for size in (200, 1000):
        if (size, 0.0) in s.index:
            removed = s.loc[(size, 0.0)]
            ratio = _ratio(removed["upper_bound"], removed["upper_bound_limit"])
            rows.append((f"mean upper bound at share 0 over its bound, {size}", ratio, "<= 1.15"))
        if (size, 0.5) in s.index:
            half = s.loc[(size, 0.5)]
            rows.append(
                (
                    f"mean width at share 0.5 over its bound, {size}",
                    _ratio(half["width"], half["width_limit"]),
                    "<= 1.15",
                )
            )
    return rows


def _removed_rows(s: pd.DataFrame) -> list[tuple[str, float, str]]:
    """Removed sets' verdicts: `not_memorized` at `--margin auto` (where reachable), `memorized`, at margin 0.3."""
    removed = s.xs(0.0, level="share")
    rows = []
    reachable = removed[removed["reachable"] > 0]
    if len(reachable):
        worst = reachable["not_memorized_auto_reachable"].idxmin()
        rows.append(
            (
                "removed sets called `not_memorized` at `--margin auto`, draws with a margin below 1 "
                f"(worst of sizes {', '.join(map(str, reachable.index))}: {worst}, where "
                f"{reachable.loc[worst, 'reachable']:.1%} of draws have such a margin)",
                reachable.loc[worst, "not_memorized_auto_reachable"],
                ">= 0.85",
            )
        )
    rows.append(("removed sets called `memorized` (mean over sizes)", removed["memorized"].mean(), "<= 0.10"))
    if 200 in removed.index:
        rows.append(
            (
                f"removed sets called `not_memorized` at margin {WIDE_MARGIN:g}, 200 (the information allows "
                f"{removed.loc[200, 'not_memorized_wide_limit']:.2f})",
                removed.loc[200, "not_memorized_wide"],
                ">= 0.90",
            )
        )
    return rows


def _met(value: float, goal: str) -> str:
    op, bound = goal.split()
    if not math.isfinite(value):
        return "-"
    return "met" if (value <= float(bound) if op == "<=" else value >= float(bound)) else "NOT met"


def certification_report(results: dict[str, pd.DataFrame], *, command: str, n_draws: int, elapsed: float) -> str:
    """Markdown: per target, issue 26's goals (measure, goal, measured, met) and the cells behind them."""
    lines = [
        f"Written by `{command}` in {elapsed:.0f} s ({n_draws} draws per cell; query, member and non-member",
        "references redrawn every draw; alpha 0.1; certify level 0.95).",
        "",
    ]
    for name, summary in results.items():
        lines += [f"#### {name}", "", "| measure | goal | measured | |", "|---|---|---|---|"]
        lines += [
            f"| {label} | {goal} | {value:.3f} | {_met(value, goal)} |"
            for label, value, goal in certification_goals(summary)
        ]
        table = (
            summary.dropna(axis="columns", how="all")  # one view: no identity-only information
            .rename(
                columns={
                    "not_memorized": "not_memorized (0.1)",
                    "not_memorized_wide": f"not_memorized ({WIDE_MARGIN:g})",
                    "not_memorized_auto": "not_memorized (auto)",
                }
            )
            .astype({"size": str, "share": str})
        )
        lines += ["", table.to_markdown(index=False, floatfmt=".3f"), ""]
    return "\n".join(lines)
