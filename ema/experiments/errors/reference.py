"""Validity of the member-reference auditor (issue 12): ``python -m ema.experiments.errors.reference``.

Part of the ``errors`` study (:mod:`ema.experiments.errors.validity`), for the auditor that
``ema audit --method calibrated`` runs. Trains the targets with the workbench's own recipe code
(``ema.training.fit``), scores every pool once and caches the probabilities (``--cache``), then
audits seeded query sets (:mod:`ema.experiments.errors.reference_pools`):

- members: drawn from fold M1; the member reference is folds M2..M5 (never the query's own samples);
- same-domain: drawn from the held-out set M6; other-domain: scikit-learn digits (MNIST
  targets) or the preset's S (Fashion-MNIST: embedded MNIST images); mixture: half M1, half M6;
- the non-member reference is the clean calibration set, scored on the target.

It writes ``docs/REFERENCE_AUDITOR.md`` (:mod:`ema.experiments.errors.reference_report`): the
targets, a comparison of candidate tests of H0 "removed" (measured power at measured error,
:mod:`ema.experiments.errors.reference_candidates`), the chosen auditor's verdict rates per
kind and size, the issue's goal table, an unconditional check with redrawn references, and the
information limit that bounds what any test can reach. About 26 minutes on two cores.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from ema.auditors.reference import ReferenceAuditor
from ema.auditors.result import INCONCLUSIVE, MEMORIZED, NOT_MEMORIZED
from ema.data.shifts import AUGMENT_NONE, AUGMENT_SHIFTS, AUGMENTATIONS
from ema.errors import EMAError
from ema.experiments.errors.certification import (
    SHARES,
    certification_draws,
    certification_report,
    summarize_certification,
)
from ema.experiments.errors.certification import SIZES as CERTIFICATION_SIZES
from ema.experiments.errors.reference_candidates import compare_tests
from ema.experiments.errors.reference_pools import (
    DEFAULT_CACHE,
    KINDS,
    TABLE_TARGETS,
    TARGETS,
    Pool,
    draw,
    member_reference,
    score_pools,
    truth,
)
from ema.experiments.errors.reference_report import COMMAND, write_report

OUTPUT = Path("docs") / "REFERENCE_AUDITOR.md"
#: torch threads the targets train and score with: float sums differ with the thread count, so it is fixed.
DEFAULT_THREADS = 2


def audit_draws(auditor: ReferenceAuditor, pools: dict[str, Pool], sizes, n_draws: int, seed: int) -> pd.DataFrame:
    """One row per seeded query of every kind and size: the auditor's verdict, interval and stated power."""
    rng = np.random.default_rng(seed)
    rows = []
    for kind in KINDS:
        for size in sizes:
            for index in range(n_draws):
                proba, labels = draw(pools, kind, size, rng)
                result = auditor.audit(proba, labels)
                m = result.metrics
                rows.append(
                    {
                        "kind": kind,
                        "size": size,
                        "draw": index,
                        "verdict": result.verdict,
                        "truth": truth(kind, size),
                        "low": m["retained_ci_low"],
                        "high": m["retained_ci_high"],
                        "power_retained": m["power_retained"],
                        "min_detectable_fraction": m["min_detectable_fraction"],
                        "p_removed": m["p_removed"],
                        "p_retained": m["p_retained"],
                        "shift_warned": len(result.thresholds["warnings"]) > len(auditor.warnings_),
                    }
                )
    return pd.DataFrame(rows)


def summarize(draws: pd.DataFrame) -> pd.DataFrame:
    """Verdict rates, interval coverage and width, and the stated power per kind and size, from ``audit_draws``."""
    grouped = draws.assign(
        memorized=draws["verdict"] == MEMORIZED,
        not_memorized=draws["verdict"] == NOT_MEMORIZED,
        inconclusive=draws["verdict"] == INCONCLUSIVE,
        covered=(draws["low"] <= draws["truth"] + 1e-12) & (draws["truth"] <= draws["high"] + 1e-12),
        width=draws["high"] - draws["low"],
        retained_rejected=draws["p_retained"] <= 0.1,
    ).groupby(["kind", "size"], sort=False)
    return (
        grouped[
            [
                "memorized",
                "not_memorized",
                "inconclusive",
                "covered",
                "width",
                "high",
                "retained_rejected",
                "shift_warned",
                "power_retained",
                "min_detectable_fraction",
            ]
        ]
        .mean()
        .reset_index()
    )


def redrawn_reference_check(pools: dict[str, Pool], sizes, n_draws: int, seed: int, alpha: float) -> pd.DataFrame:
    """Same-domain and mixture queries with the non-member reference redrawn every time (the tests' actual level)."""
    rng = np.random.default_rng(seed)
    mem_p, mem_y = member_reference(pools)
    non_p = np.concatenate([pools["cal"][0], pools["M6"][0]])
    non_y = np.concatenate([pools["cal"][1], pools["M6"][1]])
    n_reference = pools["cal"][1].size
    rows = []
    for size in sizes:
        for _ in range(n_draws):
            order = rng.permutation(non_y.size)
            ref, rest = order[:n_reference], order[n_reference:]
            auditor = ReferenceAuditor(alpha=alpha).calibrate(mem_p, mem_y, non_p[ref], non_y[ref])
            query = rest[:size]
            result = auditor.audit(non_p[query], non_y[query])
            half = size // 2
            members = rng.choice(pools["M1"][1].size, half, replace=False)
            mix_p = np.concatenate([pools["M1"][0][members], non_p[rest[: size - half]]])
            mix_y = np.concatenate([pools["M1"][1][members], non_y[rest[: size - half]]])
            mixture = auditor.audit(mix_p, mix_y).metrics
            rows.append(
                {
                    "size": size,
                    "memorized": result.verdict == MEMORIZED,
                    "not_memorized": result.verdict == NOT_MEMORIZED,
                    "mixture_covered": mixture["retained_ci_low"] <= half / size <= mixture["retained_ci_high"],
                    "mixture_width": mixture["retained_ci_high"] - mixture["retained_ci_low"],
                }
            )
    return pd.DataFrame(rows).groupby("size").mean().reset_index()


def fold_verdicts(pools: dict[str, Pool], alpha: float) -> list[str]:
    """Each whole training fold audited against the other four as the member reference."""
    verdicts = []
    for fold in range(1, 6):
        others = [pools[f"M{i}"] for i in range(1, 6) if i != fold]
        members = tuple(np.concatenate([part[j] for part in others]) for j in (0, 1))
        auditor = ReferenceAuditor(alpha=alpha).calibrate(*members, *pools["cal"])
        verdicts.append(auditor.audit(*pools[f"M{fold}"]).verdict)
    return verdicts


def wrong_scale_warnings(pools: dict[str, Pool], alpha: float) -> tuple[float, list[str]]:
    """The gates on references scored with inverted pixels: (reference accuracy, warnings)."""
    wrong = {name: pools[f"{name}-wrong-scale"] for name in ("cal", *(f"M{i}" for i in range(2, 6)))}
    members = tuple(np.concatenate([wrong[f"M{i}"][j] for i in range(2, 6)]) for j in (0, 1))
    auditor = ReferenceAuditor(alpha=alpha).calibrate(*members, *wrong["cal"])
    return auditor.diagnostics_["reference_accuracy"], auditor.warnings_


def information_limit(auditor: ReferenceAuditor, sizes) -> dict[str, float]:
    """Fisher information per query sample about pi (binned) and the upper bound a removed query can hope for.

    For a removed query (pi = 0) the best interval's half-width is about z sqrt((1/n_q + 1/n_r) / I(0)),
    I(0) = sum (P_mem - P_non)^2 / P_non; the non-member reference's own term bounds it for every n_q.
    """
    member = auditor.member_counts_ / auditor.member_counts_.sum()
    nonmember = auditor.nonmember_counts_ / auditor.nonmember_counts_.sum()
    info0 = float(np.sum((member - nonmember) ** 2 / nonmember))
    half = 0.5 * (member + nonmember)
    info_half = float(np.sum((member - nonmember) ** 2 / half))
    z = stats.norm.ppf(0.5 + auditor.confidence_level / 2)
    n_ref = auditor.nonmember_counts_.sum()
    out = {"I(0)": info0, "I(0.5)": info_half}
    for size in sizes:
        out[f"bound at {size}"] = float(z * np.sqrt((1 / size + 1 / n_ref) / info0))
    out["bound as n_q -> inf"] = float(z * np.sqrt(1 / (n_ref * info0)))
    out["mixture width at 1000"] = float(2 * z * np.sqrt((1 / 1000 + 0.25 / n_ref) / info_half))
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The study's options, with ``targets`` and ``sizes`` parsed into a list and a tuple."""
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n")[0])
    parser.add_argument(
        "--targets",
        default=None,
        help="Comma-separated targets (default: the three image targets; with --certification also "
        f"{', '.join(TABLE_TARGETS)}).",
    )
    parser.add_argument(
        "--sizes",
        default=None,
        help="Query sizes (default: 5,20,50,200,1000; with --certification, "
        f"{','.join(map(str, CERTIFICATION_SIZES))}).",
    )
    parser.add_argument("--draws", type=int, default=200, help="Seeded draws per cell (default: 200).")
    parser.add_argument(
        "--redraws", type=int, default=100, help="Draws per size with redrawn references (default: 100)."
    )
    parser.add_argument("--no-compare", action="store_true", help="Skip the comparison of candidate tests.")
    parser.add_argument("--alpha", type=float, default=0.1, help="Level of the tests (default: 0.1).")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the draws (default: 0).")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"Scored pools (default: {DEFAULT_CACHE}).")
    parser.add_argument(
        "--output", type=Path, default=None, help=f"Report (default: {OUTPUT}; with --certification, stdout only)."
    )
    parser.add_argument(
        "--certification",
        action="store_true",
        help="Run issue 26's grid instead (query and references redrawn every draw; "
        "ema.experiments.errors.certification) and print its Markdown tables.",
    )
    parser.add_argument(
        "--augment",
        choices=AUGMENTATIONS,
        default=AUGMENT_NONE,
        help="With --certification: score every pool image with its 9 views (shifts; the image targets only) "
        f"and audit as `ema audit --augment shifts` does (default: {AUGMENT_NONE}).",
    )
    parser.add_argument(
        "--shares",
        default=None,
        help=f"With --certification: retained shares of the queries (default: {','.join(map(str, SHARES))}).",
    )
    parser.add_argument(
        "--nonmember-reference",
        type=int,
        default=None,
        help="With --certification: images in each draw's non-member reference, drawn from the calibration set and "
        "M6 (default: as many as the calibration set holds).",
    )
    parser.add_argument(
        "--threads", type=int, default=DEFAULT_THREADS, help=f"torch threads of training (default: {DEFAULT_THREADS})."
    )
    args = parser.parse_args(argv)
    known = {**TARGETS, **TABLE_TARGETS} if args.certification else TARGETS
    if args.targets is None:
        args.targets = ",".join(known)
    args.targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = [t for t in args.targets if t not in known]
    if unknown:
        parser.error(f"expected targets from {list(known)}, got {unknown}")
    if not args.certification and (args.augment != AUGMENT_NONE or args.shares or args.nonmember_reference is not None):
        parser.error(
            "expected --augment, --shares and --nonmember-reference with --certification only (the study audits one "
            "view, on fixed references)"
        )
    if args.nonmember_reference is not None and args.nonmember_reference < 2:
        parser.error(f"expected --nonmember-reference of at least 2 images, got {args.nonmember_reference}")
    args.shares = tuple(float(s) for s in args.shares.split(",")) if args.shares else SHARES
    default_sizes = CERTIFICATION_SIZES if args.certification else (5, 20, 50, 200, 1000)
    args.sizes = tuple(int(s) for s in args.sizes.split(",")) if args.sizes else default_sizes
    if args.output is None and not args.certification:
        args.output = OUTPUT
    return args


def log(message: str) -> None:
    """One timestamped progress line on stderr."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def installed_pools(args: argparse.Namespace) -> Iterator[tuple[str, dict[str, Pool]]]:
    """(name, pools) of every target in ``args.targets`` whose data is installed; the others are logged as skipped."""
    for name in args.targets:
        if args.augment == AUGMENT_SHIFTS and name in TABLE_TARGETS:
            log(f"{name}: skipped (--augment shifts moves pixels, and a table has none)")
            continue
        try:
            pools = score_pools(name, args.cache, threads=args.threads, augment=args.augment)
        except EMAError as exc:
            log(f"{name}: skipped ({exc})")
            continue
        log(f"{name}: pools ready")
        yield name, pools


def run_certification(args: argparse.Namespace) -> None:
    """Issue 26's grid on every installed target: print its Markdown; ``--output`` also gets it and every draw (CSV)."""
    start = time.perf_counter()
    results = {}
    for name, pools in installed_pools(args):
        draws = certification_draws(
            pools,
            sizes=args.sizes,
            shares=args.shares,
            n_draws=args.draws,
            alpha=args.alpha,
            seed=args.seed,
            nonmember_reference=args.nonmember_reference,
        )
        label = {**TARGETS, **TABLE_TARGETS}[name][2]
        results[label if args.augment == AUGMENT_NONE else f"{label}, --augment {args.augment}"] = (
            summarize_certification(draws, alpha=args.alpha)
        )
        if args.output is not None:  # every draw, to summarize again without rerunning
            draws.to_csv(args.output.with_name(f"{args.output.stem}-{name}-draws.csv"), index=False)
        log(f"{name}: certification grid done")
    command = " ".join([COMMAND, *sys.argv[1:]])
    text = certification_report(results, command=command, n_draws=args.draws, elapsed=time.perf_counter() - start)
    if args.output is not None:
        args.output.write_text(text + "\n")
    print(text)


def main(argv: list[str] | None = None) -> None:
    """Run the study on every target whose data is installed, write the report and print it."""
    args = parse_args(argv)
    if args.certification:
        run_certification(args)
        return
    start = time.perf_counter()
    results = {}
    for name, pools in installed_pools(args):
        auditor = ReferenceAuditor(alpha=args.alpha).calibrate(*member_reference(pools), *pools["cal"])
        res = {
            "auditor": auditor,
            "m6_accuracy": float((pools["M6"][0].argmax(1) == pools["M6"][1]).mean()),
            "limit": information_limit(auditor, args.sizes),
        }
        if not args.no_compare:
            res["comparison"] = compare_tests(pools, args.sizes, args.draws, args.alpha, args.seed)
            log(f"{name}: comparison done")
        draws = audit_draws(auditor, pools, args.sizes, args.draws, args.seed)
        res["summary"] = summarize(draws)
        log(f"{name}: audits done")
        res["redrawn"] = redrawn_reference_check(pools, args.sizes, args.redraws, args.seed, args.alpha)
        log(f"{name}: redrawn references done")
        res["folds"] = fold_verdicts(pools, args.alpha)
        res["wrong_scale"] = wrong_scale_warnings(pools, args.alpha)
        results[name] = res
    write_report(args.output, args, results, time.perf_counter() - start)
    print(args.output.read_text())


if __name__ == "__main__":
    main()
