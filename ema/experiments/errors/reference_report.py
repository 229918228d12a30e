"""The reference-auditor study's report: docs/REFERENCE_AUDITOR.md from the study's results.

Part of the validity study of the member-reference auditor
(:mod:`ema.experiments.errors.reference`): the targets, the comparison of candidate tests,
the chosen auditor's verdict rates, issue 12's goal table, the check with redrawn references and
the information limit, as Markdown. Pure formatting: every number comes from ``results``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from ema.auditors.reference import ReferenceAuditor
from ema.auditors.result import MEMORIZED
from ema.experiments.errors.reference_pools import TARGETS

#: The command that writes the report, named in its "Written by" line.
COMMAND = "python -m ema.experiments.errors.reference"
#: The heading of the reference-models section (:mod:`ema.experiments.errors.reference_models`), kept on a rewrite.
REFERENCE_MODELS_HEADING = "## Reference models, re-measured (issue 26)"


def rate(value: float) -> str:
    """A share with three decimals, or "-" where a cell has none."""
    return "-" if pd.isna(value) else f"{value:.3f}"


def goal_rows(name: str, res: dict, sizes) -> list[tuple[str, str, str, str]]:
    """Issue 12's goals for one target: (measure, measured value, goal, "met" or "NOT met")."""
    s = res["summary"].set_index(["kind", "size"])
    large = [size for size in sizes if size >= 200]
    rows = [
        ("members called not_memorized, any size", s.loc["members", "not_memorized"].max(), "<= 0.10", "max"),
        ("same-domain called memorized, any size", s.loc["same-domain", "memorized"].max(), "<= 0.10", "max"),
        (
            "same-domain called memorized, reference redrawn each time",
            res["redrawn"]["memorized"].mean(),
            "<= 0.10",
            "mean",
        ),
        (
            "same-domain called not_memorized at \\|D_q\\| >= 200",
            min(s.loc[("same-domain", size), "not_memorized"] for size in large),
            ">= 0.90",
            "min",
        ),
    ]
    if 50 in sizes:
        rows.append(("members called memorized at \\|D_q\\| = 50", s.loc[("members", 50), "memorized"], ">= 0.80", ""))
    if 1000 in sizes:
        rows.append(("50% mixtures of 1,000: interval covers 0.5", s.loc[("mixture", 1000), "covered"], ">= 0.90", ""))
        rows.append(("50% mixtures of 1,000: mean interval width", s.loc[("mixture", 1000), "width"], "<= 0.30", ""))
    rows.append(("member folds M1..M5 called memorized (share)", res["folds"].count(MEMORIZED) / 5, ">= 1.0", ""))
    near_chance = any("near chance" in warning for warning in res["wrong_scale"][1])
    rows.append(("references preprocessed unlike training: a chance-level warning", float(near_chance), ">= 1.0", ""))
    out = []
    for label, value, goal, how in rows:
        op, bound = goal.split()
        met = value <= float(bound) if op == "<=" else value >= float(bound)
        out.append(
            (
                f"{name}: {label}" + (f" ({how} over sizes)" if how else ""),
                f"{value:.3f}",
                goal,
                "met" if met else "NOT met",
            )
        )
    return out


def kept_section(path: Path, heading: str) -> str:
    """The text of ``path`` from the line ``heading`` on (another command's section), or "" when absent."""
    text = path.read_text() if path.exists() else ""
    start = text.find(f"\n{heading}\n")
    return "" if start < 0 else text[start:]


def replace_section(path: Path, heading: str, section: str) -> None:
    """Write ``section`` (starting with ``heading``) at the end of ``path``, in place of its previous version."""
    text = path.read_text() if path.exists() else ""
    start = text.find(f"\n{heading}\n")
    kept = text if start < 0 else text[:start]
    path.write_text(kept.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n")


def write_report(path: Path, args, results: dict, elapsed: float) -> None:
    """Write the Markdown report of ``results`` (target name -> its measurements) to ``path``."""
    lines = [
        "# The member-reference auditor: measured validity and power (issue 12)",
        "",
        f"Written by `{' '.join([COMMAND, *sys.argv[1:]])}`",
        f"in {elapsed:.0f} s on this two-core machine (shared). Do not edit by hand: rerun the command.",
        f"alpha = {args.alpha}, margin = {ReferenceAuditor().margin}, confidence level "
        f"{ReferenceAuditor().confidence_level}, {args.draws} seeded draws per cell, seed {args.seed}.",
        "",
        "Member queries come from fold M1 and the member reference is folds M2..M5 (the query's own samples are",
        "never in the reference); the non-member reference is the clean calibration set; same-domain queries",
        "come from the held-out M6, other-domain from scikit-learn digits (MNIST targets) or embedded MNIST",
        "(Fashion-MNIST), mixtures are half M1, half M6. On the embedded-MNIST targets M1 holds 1,000 images, so",
        "member (and mixture) draws of 1,000 are all of M1 (500 of M1): their rows are one set, not 200.",
        "",
        "## Targets",
        "",
        "| target | recipe | member acc. | reference acc. | M6 acc. | AUC (log-odds) | balanced acc. | warnings |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, res in results.items():
        d = res["auditor"].diagnostics_
        lines.append(
            f"| {name} | {TARGETS[name][2]} | {d['member_accuracy']:.3f} | {d['reference_accuracy']:.3f} | "
            f"{res['m6_accuracy']:.3f} | {d['auc']:.3f} | {d['balanced_accuracy']:.3f} | "
            f"{len(res['auditor'].warnings_)} |"
        )
    lines += ["", "Calibration warnings, verbatim:", ""]
    for name, res in results.items():
        for warning in res["auditor"].warnings_:
            lines.append(f"- {name}: {warning}")
    lines += ["", "Whole training folds, each against the other four as the member reference:", ""]
    for name, res in results.items():
        lines.append(f"- {name}: " + ", ".join(f"M{i} {v}" for i, v in enumerate(res["folds"], start=1)))
    lines += [
        "",
        "The same references scored with inverted pixels, 1 - x (an oracle fed inputs preprocessed unlike",
        "training):",
        "",
    ]
    for name, res in results.items():
        accuracy, warnings = res["wrong_scale"]
        lines.append(f"- {name}: reference accuracy {accuracy:.3f}; warnings: " + ("; ".join(warnings) or "none"))
    lines += [
        "",
        '## Which test of H0 "removed": measured power at measured error',
        "",
        "Rate of p <= alpha per candidate: `members` is the power (higher is better), `same-domain` the error",
        "(the rate of a false `memorized`; at most alpha for a valid test, but see the redrawn check below: with",
        "ONE fixed reference, rates at large |D_q| reflect how that reference differs from M6 by chance).",
        "",
    ]
    for name, res in results.items():
        if res.get("comparison") is None:
            continue
        table = (
            res["comparison"]
            .groupby(["test", "kind", "size"])["rejected"]
            .mean()
            .unstack(["kind", "size"])
            .sort_index(axis=1)
        )
        table.columns = [f"{kind[:3]} {size}" for kind, size in table.columns]
        lines += [f"### {name}", "", table.map(rate).to_markdown(), ""]
    lines += [
        "## The chosen auditor: verdict rates",
        "",
        "`mem` / `not` / `inc`: share of `memorized` / `not_memorized` / `inconclusive`; `cover` / `width`: the",
        "retained-fraction interval against the true share (1, 0, 0.5); `high`: mean upper bound; `rej. ret.`:",
        'H0 "retained" rejected; `shift`: a shift warning raised; `power` / `mdf`: the stated power_retained and',
        "min_detectable_fraction (mean; NaN-free mean of mdf).",
        "",
    ]
    for name, res in results.items():
        table = res["summary"].rename(
            columns={
                "memorized": "mem",
                "not_memorized": "not",
                "inconclusive": "inc",
                "covered": "cover",
                "retained_rejected": "rej. ret.",
                "shift_warned": "shift",
                "power_retained": "power",
                "min_detectable_fraction": "mdf",
            }
        )
        lines += [f"### {name}", "", table.to_markdown(index=False, floatfmt=".3f"), ""]
    lines += ["## Goals of issue 12", "", "| measure | measured | goal | status |", "|---|---|---|---|"]
    for name, res in results.items():
        for row in goal_rows(name, res, args.sizes):
            lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        "## With the non-member reference redrawn every time",
        "",
        "Same-domain queries and 50% mixtures, the reference (1,000 images) and the query drawn afresh from",
        f"calibration + M6 on every one of {args.redraws} draws: the unconditional error the tests control.",
        "",
    ]
    for name, res in results.items():
        lines += [f"### {name}", "", res["redrawn"].to_markdown(index=False, floatfmt=".3f"), ""]
    lines += [
        "## The information limit",
        "",
        "Fisher information about the retained share per query sample, from the binned references (I(0) for a",
        "removed query, I(0.5) for a half-retained one), and what it allows at best: the upper confidence bound of",
        "a removed query (z sqrt((1/|D_q| + 1/n_ref) / I(0)), z at the interval's level) and the width of a 50%",
        "mixture's interval at 1,000. `not_memorized` needs that bound <= margin.",
        "",
    ]
    limits = pd.DataFrame({name: res["limit"] for name, res in results.items()}).T
    lines += [limits.to_markdown(floatfmt=".3f"), ""]
    path.write_text("\n".join(lines) + "\n" + kept_section(path, REFERENCE_MODELS_HEADING))
