"""The paper's tables: rows k, columns query sets, wrong verdicts coloured as in the paper.

A grid's cells form one long frame (:data:`CELL_COLUMNS`, one row per audited cell); a
table is one metric of some of those cells laid out with one row per calibration quality
k (in the order given, the paper's 100 down to 50) and one column per query set (M1..M5,
M6, S). Pure pandas: no MLflow, no models.

Colours follow the paper's own usage (Tables 2 to 6), where a *positive* is a claimed
removal:

- red, bold: a member set (M1..M5) called *not memorized*: the paper's "false positive"
  (e.g. Liu & Tsaftaris's rho_KS >= 1 on M1 at k = 60 in Table 2(a)).
- blue, italic: a non-member set (M6, S) called *memorized*: the paper's "false negative"
  (e.g. rho_KS = 0.82 on M6 in Table 2(a), rho_EMA = 0.32 on M6 in Table 5).
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

import pandas as pd

from ema.auditors.ema import pvalue_verdict
from ema.auditors.ks_ratio import RATIO_THRESHOLD, ratio_verdict
from ema.auditors.result import MEMORIZED, NOT_MEMORIZED
from ema.data.splits import MEMBER_NAMES
from ema.errors import InputError
from ema.validation import check_choice

#: rho is a p-value (EMA): rho <= alpha means "not memorized".
RULE_PVALUE = "p-value"
#: rho is Liu & Tsaftaris's KS ratio: rho >= 1 means "not memorized" (forgotten).
RULE_KS_RATIO = "ks-ratio"
RULES = (RULE_PVALUE, RULE_KS_RATIO)
#: rho_KS at or above this means "forgotten" (the paper's threshold).

#: A member set called not memorized: a removal claimed that did not happen (the paper's false positive).
WRONGLY_REMOVED = "wrongly_removed"
#: A non-member set called memorized: a removal missed (the paper's false negative).
WRONGLY_MEMORIZED = "wrongly_memorized"


@dataclass(frozen=True)
class Style:
    colour: str
    weight: str
    meaning: str


#: How each kind of wrong verdict is drawn; the paper's colours.
STYLES = {
    WRONGLY_REMOVED: Style("red", "bold", "a member set (M1..M5) called not memorized: the paper's false positive"),
    WRONGLY_MEMORIZED: Style("blue", "italic", "a non-member set (M6, S) called memorized: the paper's false negative"),
}
#: Shown for a cell that was not run or whose value is undefined.
MISSING = "—"
#: The size label of a full query set.
FULL = "full"

#: One row per cell of a grid.
CELL_COLUMNS = (
    "k",
    "query",
    "method",
    "size",
    "n_query",
    "rho_ema",
    "rho_ema_ks",
    "rho_ks",
    "flag_rate",
    "verdict",
    "run_id",
    "reused",
)


@dataclass(frozen=True)
class TableSpec:
    """One table of a grid.

    Attributes
    ----------
    name : str
        File-safe identifier, e.g. ``"table2a"``.
    title : str
        What the table shows, with the paper's table number.
    metric : str
        The cell column shown: ``rho_ema``, ``rho_ema_ks`` or ``rho_ks``.
    rule : {"p-value", "ks-ratio"}
        How a value becomes a verdict (see :func:`verdicts`).
    methods : tuple of str
        Cells of these audit methods carry the metric.
    size : str
        ``"full"`` or a query size as text: which cells the table shows.
    """

    name: str
    title: str
    metric: str
    rule: str
    methods: tuple[str, ...]
    size: str = FULL

    def __post_init__(self) -> None:
        check_choice("rule", self.rule, RULES)


def size_label(size: int | None) -> str:
    """``"full"`` for the whole query set, else the size as text."""
    return FULL if size is None else str(int(size))


def layout(cells: pd.DataFrame, spec: TableSpec, *, ks, queries) -> pd.DataFrame:
    """The spec's metric with rows ``ks`` (in that order) and columns ``queries``; NaN where not run.

    Parameters
    ----------
    cells : DataFrame
        Columns :data:`CELL_COLUMNS` (at least ``k``, ``query``, ``method``, ``size`` and the metric).
    spec : TableSpec
    ks : sequence of int
    queries : sequence of str
    """
    missing = {"k", "query", "method", "size", spec.metric} - set(cells.columns)
    if missing:
        raise InputError(f"expected cell columns {sorted(CELL_COLUMNS)}, missing {sorted(missing)}")
    chosen = cells[cells["method"].isin(spec.methods) & (cells["size"].astype(str) == spec.size)]
    chosen = chosen.drop_duplicates(subset=["k", "query"], keep="last")
    values = chosen.pivot(index="k", columns="query", values=spec.metric) if len(chosen) else pd.DataFrame()
    table = values.reindex(index=list(ks), columns=list(queries)).astype(float)
    table.index.name, table.columns.name = "k", None
    return table


def verdicts(values: pd.DataFrame, rule: str, alpha: float) -> pd.DataFrame:
    """Each value's verdict: ``memorized``, ``not_memorized``, or ``""`` where the value is NaN.

    ``p-value``: rho <= alpha is not memorized (EMA). ``ks-ratio``: rho >= 1 is not
    memorized (Liu & Tsaftaris; inf counts as >= 1).
    """
    check_choice("rule", rule, RULES)
    array = values.to_numpy(dtype=float)
    out = pvalue_verdict(array, alpha) if rule == RULE_PVALUE else ratio_verdict(array)
    return pd.DataFrame(out, index=values.index, columns=values.columns)


def error_marks(values: pd.DataFrame, rule: str, alpha: float, *, members=MEMBER_NAMES) -> pd.DataFrame:
    """:data:`WRONGLY_REMOVED`, :data:`WRONGLY_MEMORIZED` or ``""`` for each cell.

    Columns named in ``members`` are member sets; every other column is a non-member set.
    """
    called = verdicts(values, rule, alpha)
    marks = pd.DataFrame("", index=values.index, columns=values.columns)
    for column in values.columns:
        if column in members:
            marks.loc[called[column] == NOT_MEMORIZED, column] = WRONGLY_REMOVED
        else:
            marks.loc[called[column] == MEMORIZED, column] = WRONGLY_MEMORIZED
    return marks


def format_value(value: float) -> str:
    """Two decimals as in the paper; ``inf``; :data:`MISSING` for NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.2f}"


def _header(values: pd.DataFrame, labels: dict[str, str] | None) -> list[str]:
    labels = labels or {}
    return ["k", *(labels.get(str(c), str(c)) for c in values.columns)]


def to_markdown(values: pd.DataFrame, marks: pd.DataFrame, *, labels: dict[str, str] | None = None) -> str:
    """A Markdown table; wrong verdicts wrapped in a coloured span, bold or italic as in the paper.

    Renderers that drop inline styles (GitHub) still show bold and italic.
    """
    lines = ["| " + " | ".join(_header(values, labels)) + " |", "|" + "---|" * (len(values.columns) + 1)]
    for k, row in values.iterrows():
        cells = [str(k)]
        for column, value in row.items():
            text = format_value(value)
            mark = marks.at[k, column]
            if mark:
                style = STYLES[mark]
                inner = f"**{text}**" if style.weight == "bold" else f"*{text}*"
                text = f'<span style="color:{style.colour}">{inner}</span>'
            cells.append(text)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def to_html(
    values: pd.DataFrame, marks: pd.DataFrame, *, caption: str = "", labels: dict[str, str] | None = None
) -> str:
    """An HTML table; wrong verdicts in red bold or blue italic."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in _header(values, labels))
    rows = []
    for k, row in values.iterrows():
        cells = [f"<th>{html.escape(str(k))}</th>"]
        for column, value in row.items():
            mark = marks.at[k, column]
            style = ""
            if mark:
                s = STYLES[mark]
                style = f' style="color:{s.colour};font-{"weight" if s.weight == "bold" else "style"}:{s.weight}"'
            cells.append(f"<td{style}>{html.escape(format_value(value))}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    caption_html = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return f'<table class="ema-grid">{caption_html}<thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def legend(alpha: float) -> str:
    """The rules and colours, in words."""
    return (
        f"Verdicts: rho_EMA <= {alpha:g} means not memorized; rho_KS >= {RATIO_THRESHOLD:g} means not memorized "
        f"(forgotten). Red bold: {STYLES[WRONGLY_REMOVED].meaning}. Blue italic: {STYLES[WRONGLY_MEMORIZED].meaning}. "
        f"{MISSING}: not run, or undefined."
    )


@dataclass(frozen=True)
class RenderedTable:
    spec: TableSpec
    values: pd.DataFrame
    marks: pd.DataFrame

    @property
    def n_wrongly_removed(self) -> int:
        return int((self.marks == WRONGLY_REMOVED).to_numpy().sum())

    @property
    def n_wrongly_memorized(self) -> int:
        return int((self.marks == WRONGLY_MEMORIZED).to_numpy().sum())


def build_tables(cells: pd.DataFrame, specs, *, ks, queries, alpha: float) -> list[RenderedTable]:
    """Every spec's table with its error marks."""
    tables = []
    for spec in specs:
        values = layout(cells, spec, ks=ks, queries=queries)
        tables.append(RenderedTable(spec, values, error_marks(values, spec.rule, alpha)))
    return tables


def tables_markdown(
    tables: list[RenderedTable], *, title: str, alpha: float, labels: dict[str, str] | None = None
) -> str:
    """All tables as one Markdown document: a heading per table, then the legend."""
    blocks = [f"# {title}"]
    for table in tables:
        blocks.append(f"## {table.spec.title}\n\n{to_markdown(table.values, table.marks, labels=labels)}")
    blocks.append(legend(alpha))
    return "\n\n".join(blocks) + "\n"


#: CSS of the tables' HTML (:func:`tables_fragment`).
TABLES_STYLE = (
    "table.ema-grid{border-collapse:collapse;margin-bottom:1em}.ema-grid th,.ema-grid "
    "td{border:1px solid #999;padding:2px 8px;text-align:right}"
)


def tables_fragment(tables: list[RenderedTable], *, alpha: float, labels: dict[str, str] | None = None) -> str:
    """All tables as escaped HTML to place in a page (with :data:`TABLES_STYLE`): titles, tables, legend."""
    body = "".join(f"<h2>{html.escape(t.spec.title)}</h2>{to_html(t.values, t.marks, labels=labels)}" for t in tables)
    return f"{body}<p>{html.escape(legend(alpha))}</p>"


def tables_html(tables: list[RenderedTable], *, title: str, alpha: float, labels: dict[str, str] | None = None) -> str:
    """All tables as one standalone HTML page."""
    return (
        f"<!DOCTYPE html><html><head><meta "
        f'charset="utf-8"><title>{html.escape(title)}</title><style>{TABLES_STYLE}</style></head>'
        f"<body><h1>{html.escape(title)}</h1>{tables_fragment(tables, alpha=alpha, labels=labels)}</body></html>\n"
    )
