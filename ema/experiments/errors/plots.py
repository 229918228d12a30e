"""Figures and tables of the validity study (`ema grid errors`)."""

from __future__ import annotations

import pandas as pd

from ema.experiments.errors.validity import KINDS, METHODS

#: One colour per method in every panel, so a panel with a single line still reads right.
METHOD_COLOURS = {method: f"C{i}" for i, method in enumerate(METHODS)}
PANELS = (
    ("members", "error", "members called not memorized"),
    ("same-domain", "error", "held-out called memorized"),
    ("other-domain", "error", "other domain called memorized"),
    ("mixture", "covered", "50% mixture: interval covers 0.5"),
)
#: Under the table of a target whose splits have no S.
NO_OTHER_DOMAIN = "No other-domain rows: this target's data has no other-domain set S to draw them from."


def plot_error_rates(summary: pd.DataFrame, *, alpha: float) -> bytes:
    """PNG: one row of panels per target, each method's error rate (or coverage) against |D_q|."""
    from matplotlib.figure import Figure

    from ema.reports.canvas import png

    targets = list(dict.fromkeys(summary["target"]))
    fig = Figure(figsize=(4 * len(PANELS), 3.2 * len(targets)))
    axes = fig.subplots(len(targets), len(PANELS), squeeze=False)
    for row, target in enumerate(targets):
        for col, (kind, column, title) in enumerate(PANELS):
            ax = axes[row][col]
            cell = summary[(summary["target"] == target) & (summary["kind"] == kind)]
            if cell.empty:
                ax.text(0.5, 0.5, "no query sets of this kind", ha="center", va="center", transform=ax.transAxes)
            for method, lines in cell.groupby("method", sort=False):
                if lines[column].notna().any():
                    ax.plot(lines["size"], lines[column], marker="o", label=method, color=METHOD_COLOURS.get(method))
            ax.axhline(alpha if column == "error" else 0.9, color="grey", linestyle="--", linewidth=1)
            ax.set_xscale("log")
            ax.set_ylim(-0.03, 1.03)
            ax.set_title(title, fontsize=9)
            ax.set_xlabel("|D_q|")
            if col == 0:
                ax.set_ylabel(target, fontsize=8)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return png(fig)


def rates_table(summary: pd.DataFrame, *, kinds: tuple[str, ...] = KINDS) -> str:
    """Markdown: per target, kind and size, each method's error rate, inconclusive rate and interval coverage.

    ``kinds`` are those the study asked for: a target without rows of ``other-domain`` had no
    other-domain set S to draw them from (a table), and its block says so.
    """
    blocks = []
    for target, part in summary.groupby("target", sort=False):
        table = part.assign(cell=lambda d: d.apply(_cell_text, axis=1)).pivot_table(
            index=["kind", "size"], columns="method", values="cell", aggfunc="first", sort=False
        )
        block = f"### {target}\n\n" + table.reset_index().to_markdown(index=False)
        if "other-domain" in kinds and "other-domain" not in set(part["kind"]):
            block += f"\n\n{NO_OTHER_DOMAIN}"
        blocks.append(block)
    return "\n\n".join(blocks)


def _cell_text(row: pd.Series) -> str:
    text = f"err {row['error']:.2f}" if pd.notna(row["error"]) else f"mem {row['memorized']:.2f}"
    if row["inconclusive"] > 0:
        text += f", inc {row['inconclusive']:.2f}"
    if "covered" in row and pd.notna(row.get("covered")):
        text += f", cover {row['covered']:.2f} (w {row['width']:.2f})"
    return text + f" [n={int(row['n'])}]"
