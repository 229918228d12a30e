"""Tables and the figure of ``ema grid unlearning``, from its frames (pure pandas and matplotlib; no models).

Frames: ``versions`` (method, seed, version, accuracies on the retained data, the forget set
and held-out test data, unlearning seconds), ``audits`` (one row per version, query set and
auditor: verdict, the auditor's number, the calibrated auditor's ``p_too_forgotten`` and
retained interval), ``traces`` (one row per trace-sweep draw: whether retention and
over-unlearning were detected), ``redraws`` (with ``--reference-seeds``: one row per version and
reference seed: the whole forget set's verdict against that redrawn non-member reference, at the
grid's margin and at the audit's certifiable margin, with :data:`REDRAW_METRICS`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ema.auditors.reference_record import AUTO_MARGIN
from ema.auditors.result import INCONCLUSIVE, MEMORIZED, NOT_MEMORIZED
from ema.reports.page import esc, page, section, table

#: The three query sets, by role, and the verdict a correct auditor gives each on an unlearned version.
SET_ROLES = ("forget", "retained", "held-out")
EXPECTED = {"forget": NOT_MEMORIZED, "retained": MEMORIZED, "held-out": NOT_MEMORIZED}
#: What the trace sweep looks for on the forget set.
TRACE_KINDS = ("retention", "over-unlearning")
#: Share of draws at which a trace counts as detected at a size (the power the auditor states elsewhere).
DETECTION_RATE = 0.9
SHORT = {MEMORIZED: "mem", NOT_MEMORIZED: "nm", INCONCLUSIVE: "inc"}
#: The calibrated auditor's numbers each redrawn-reference audit records.
REDRAW_METRICS = (
    "p_removed",
    "p_retained",
    "retained_upper_bound",
    "certifiable_margin",
    "information",
    "information_lower",
    "n_query",
)
ACCURACIES = {"retain_accuracy": "retained acc.", "forget_accuracy": "forget acc.", "test_accuracy": "test acc."}


@dataclass(frozen=True)
class RenderedTables:
    """The grid's tables as one Markdown text, one HTML page, and the HTML fragment the report embeds."""

    markdown: str
    html_page: str
    html_fragment: str
    style: str = ""


def accuracy_table(versions: pd.DataFrame) -> pd.DataFrame:
    """Per method: mean ± sd over seeds of each accuracy, and the mean unlearning time in seconds."""
    grouped = versions.groupby("method", sort=False)
    out = pd.DataFrame(index=pd.Index(list(grouped.groups), name="method"))
    for column, label in ACCURACIES.items():
        mean, sd = grouped[column].mean(), grouped[column].std(ddof=0)
        out[label] = [f"{m:.3f} ± {s:.3f}" for m, s in zip(mean, sd.fillna(0.0), strict=True)]
    seconds = grouped["unlearn_seconds"].mean() if "unlearn_seconds" in versions else pd.Series(dtype=float)
    out["time (s)"] = [f"{seconds.get(m, np.nan):.1f}" if pd.notna(seconds.get(m, np.nan)) else "—" for m in out.index]
    out["seeds"] = grouped.size().astype(int).tolist()
    return out.reset_index()


def verdict_table(audits: pd.DataFrame) -> pd.DataFrame:
    """Per method: each (query set, auditor)'s verdicts tallied over seeds, e.g. ``nm 3`` or ``mem 1, inc 2``."""
    tally = audits.groupby(["method", "set", "auditor"], sort=False)["verdict"].agg(_tally).reset_index()
    tally["column"] = tally["set"] + " · " + tally["auditor"]
    wide = tally.pivot(index="method", columns="column", values="verdict")
    columns = [f"{s} · {a}" for s in SET_ROLES for a in dict.fromkeys(audits["auditor"])]
    columns = [c for c in columns if c in wide.columns]  # the marks auditor audits the forget set's mark only
    return wide.reindex(index=list(dict.fromkeys(audits["method"])), columns=columns).reset_index()


def calibrated_forget_table(audits: pd.DataFrame) -> pd.DataFrame:
    """Per method, the calibrated auditor on the whole forget set: median p-values, mean upper bound of pi."""
    rows = audits[(audits["set"] == "forget") & (audits["auditor"] == "calibrated")]
    grouped = rows.groupby("method", sort=False)
    return pd.DataFrame(
        {
            "p_removed (median)": grouped["value"].median().map("{:.3g}".format),
            "p_too_forgotten (median)": grouped["p_too_forgotten"].median().map("{:.3g}".format),
            "retained share, upper bound (mean)": grouped["retained_ci_high"].mean().map("{:.2f}".format),
        }
    ).reset_index()


def redraw_table(redraws: pd.DataFrame, *, margin: float | str) -> pd.DataFrame:
    """Per method, over (seed, reference seed) pairs: how often the forget set was called ``memorized`` and
    ``not_memorized`` (at ``margin`` and, when that is a number, at the certifiable margin), the certifiable
    margins' range, the median p_removed, |D_q| and the reference's size.
    """
    grouped = redraws.groupby("method", sort=False)
    pairs = grouped.size()

    def count(column: str, verdict: str) -> list[str]:
        hits = grouped[column].agg(lambda v: int((v == verdict).sum()))
        return [f"{hits[m]} / {pairs[m]}" for m in pairs.index]

    out = pd.DataFrame({"method": list(pairs.index), "pairs": pairs.tolist()})
    out[MEMORIZED] = count("verdict", MEMORIZED)
    out[f"{NOT_MEMORIZED} (margin {margin})"] = count("verdict", NOT_MEMORIZED)
    if margin != AUTO_MARGIN:
        out[f"{NOT_MEMORIZED} (margin {AUTO_MARGIN})"] = count("verdict_auto", NOT_MEMORIZED)
    low, high = grouped["certifiable_margin"].min(), grouped["certifiable_margin"].max()
    out["certifiable margin"] = [f"{low[m]:.3f} - {high[m]:.3f}" for m in pairs.index]
    out["p_removed (median)"] = grouped["p_removed"].median().map("{:.3g}".format).tolist()
    out["upper bound (median)"] = grouped["retained_upper_bound"].median().map("{:.3f}".format).tolist()
    out["query size"] = grouped["n_query"].max().astype(int).tolist()
    out["reference"] = grouped["n_reference"].max().astype(int).tolist()
    return out


def summarise_traces(traces: pd.DataFrame) -> pd.DataFrame:
    """Per method and |D_q|: the rate of draws with retention, with over-unlearning, and with either."""
    either = traces[list(TRACE_KINDS)].any(axis=1)
    return (
        traces.assign(trace=either)
        .groupby(["method", "size"], sort=False)[[*TRACE_KINDS, "trace"]]
        .mean()
        .reset_index()
    )


def detected_from(summary: pd.DataFrame, column: str = "trace") -> dict[str, int | None]:
    """Per method, the smallest |D_q| from which on every size detects a trace in at least DETECTION_RATE of draws."""
    found = {}
    for method, rows in summary.groupby("method", sort=False):
        rows = rows.sort_values("size")
        below = rows[rows[column] < DETECTION_RATE]
        above = rows[rows["size"] > below["size"].max()] if len(below) else rows
        found[method] = int(above["size"].min()) if len(above) else None
    return found


def trace_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Per method, each size's retention and over-unlearning rates, and the size from which a trace is detected."""
    summary = summary.assign(
        cell=[f"r {r:.2f} / o {o:.2f}" for r, o in zip(*(summary[k] for k in TRACE_KINDS), strict=True)]
    )
    wide = summary.pivot(index="method", columns="size", values="cell")
    wide.columns = [f"n = {c}" for c in wide.columns]  # no "|" in a Markdown table's cells
    wide = wide.reindex(list(dict.fromkeys(summary["method"])))
    found = detected_from(summary)
    wide[f"trace in >= {DETECTION_RATE:.0%} from"] = [
        f"n = {found[m]}" if found[m] is not None else "never" for m in wide.index
    ]
    return wide.reset_index()


def render_tables(
    versions: pd.DataFrame,
    audits: pd.DataFrame,
    traces: pd.DataFrame,
    *,
    config,
    title: str,
    wall_seconds: float,
    redraws: pd.DataFrame | None = None,
) -> RenderedTables:
    """Every table with its caption, as Markdown and HTML; the redrawn-reference table when ``redraws`` has rows."""
    alpha = config.alpha
    parts = [
        (
            "Accuracy and time",
            "Mean ± sd over seeds; time is the method's own (loading not counted).",
            accuracy_table(versions),
        ),
        (
            "Verdicts on whole query sets",
            f"Verdicts tallied over seeds ({', '.join(f'{v} = {k}' for k, v in SHORT.items())}). A correct auditor "
            f"says {EXPECTED['forget']} on the forget set ({config.forget}) and held-out data ({config.held_out}), "
            f"{EXPECTED['retained']} on the retained fold ({config.retained}), once the forget set is removed; "
            f"before removal, the forget set is a member. alpha = {alpha}.",
            verdict_table(audits),
        ),
        (
            "Calibrated auditor on the whole forget set",
            "p_removed small: retention; p_too_forgotten small: over-unlearning (less member-like than unseen data).",
            calibrated_forget_table(audits),
        ),
        (
            "Traces on forget-set subsets",
            f"Share of {config.n_draws} seeded subsets of n samples per seed in which the calibrated auditor detects "
            "retention (r, "
            f"p_removed <= {alpha / 2:g}) or over-unlearning (o, p_too_forgotten <= {alpha / 2:g}); the last column "
            f"is the smallest n from which on either is detected in at least {DETECTION_RATE:.0%} of draws. "
            "Retraining shows the false detection rate.",
            trace_table(summarise_traces(traces)),
        ),
    ]
    if redraws is not None and len(redraws):
        parts.append(_redraw_part(redraws, config))
    header = f"# {title}\n\nWall time of the grid: {wall_seconds:.0f} s.\n"
    markdown = header + "".join(
        f"\n## {name}\n\n{caption}\n\n{frame.to_markdown(index=False)}\n" for name, caption, frame in parts
    )
    fragment = "".join(
        section(name, f"<p>{esc(caption)}</p>" + table(frame.columns, frame.itertuples(index=False)), anchor=f"t{i}")
        for i, (name, caption, frame) in enumerate(parts)
    )
    return RenderedTables(markdown, page(title, fragment), fragment)


def _redraw_part(redraws: pd.DataFrame, config) -> tuple[str, str, pd.DataFrame]:
    """The redrawn-reference table with its name and caption."""
    return (
        "Forget set against redrawn references",
        f"The whole forget set ({config.forget}) audited by the calibrated auditor once per version seed and "
        f"reference seed ({', '.join(map(str, config.reference_seeds))}): each time against a non-member reference "
        f"of the usual size drawn by the reference seed from the usual reference and the held-out set "
        f"({config.held_out}) together. Counts over (seed, reference seed) pairs; alpha = {config.alpha}. On "
        "retraining, every memorized is a false one, and not_memorized at margin auto is expected in 85% of pairs.",
        redraw_table(redraws, margin=config.margin),
    )


def trace_figure(summary: pd.DataFrame, *, alpha: float) -> bytes:
    """PNG: per method, the share of forget-set subsets with retention and with over-unlearning against |D_q|."""
    from matplotlib.figure import Figure

    from ema.reports.canvas import png

    fig = Figure(figsize=(10, 3.6))
    axes = fig.subplots(1, len(TRACE_KINDS), sharey=True)
    for ax, kind in zip(axes, TRACE_KINDS, strict=True):
        for i, (method, rows) in enumerate(summary.groupby("method", sort=False)):
            ax.plot(rows["size"], rows[kind], marker="o", label=method, color=f"C{i}")
        ax.axhline(alpha / 2, color="grey", linestyle="--", linewidth=1)
        ax.axhline(DETECTION_RATE, color="grey", linestyle=":", linewidth=1)
        ax.set_xscale("log")
        ax.set_xticks(sorted(summary["size"].unique()), [str(n) for n in sorted(summary["size"].unique())])
        ax.minorticks_off()
        ax.set_ylim(-0.03, 1.03)
        ax.set_xlabel("|D_q| (subsets of the forget set)")
        ax.set_title(f"{kind} detected", fontsize=10)
    axes[0].set_ylabel("share of draws")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return png(fig)


def _tally(verdicts: pd.Series) -> str:
    counts = verdicts.value_counts()
    return ", ".join(f"{SHORT.get(v, v)} {counts[v]}" for v in (MEMORIZED, NOT_MEMORIZED, INCONCLUSIVE) if v in counts)
