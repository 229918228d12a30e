"""Table layout, verdict rules and colouring: pure pandas, milliseconds."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from ema.errors import InputError
from ema.experiments.paper.tables import (
    CELL_COLUMNS,
    MISSING,
    RULE_KS_RATIO,
    RULE_PVALUE,
    WRONGLY_MEMORIZED,
    WRONGLY_REMOVED,
    TableSpec,
    build_tables,
    error_marks,
    format_value,
    layout,
    tables_html,
    tables_markdown,
    to_html,
    to_markdown,
    verdicts,
)

EMA_SPEC = TableSpec("t", "rho_EMA", "rho_ema", RULE_PVALUE, ("both", "ema"))
KS_SPEC = TableSpec("r", "rho_KS", "rho_ks", RULE_KS_RATIO, ("both", "ks-ratio"))


def cells(rows: list[dict]) -> pd.DataFrame:
    defaults = {
        "method": "both",
        "size": "full",
        "n_query": 10,
        "rho_ema": np.nan,
        "rho_ema_ks": np.nan,
        "rho_ks": np.nan,
        "flag_rate": 1.0,
        "verdict": "",
        "run_id": "r",
        "reused": False,
    }
    return pd.DataFrame([{**defaults, **row} for row in rows], columns=list(CELL_COLUMNS))


def test_layout_rows_k_in_given_order_columns_queries_in_given_order():
    frame = cells(
        [
            {"k": 60, "query": "S", "rho_ema": 0.0},
            {"k": 100, "query": "M1", "rho_ema": 1.0},
            {"k": 60, "query": "M1", "rho_ema": 0.5},
            {"k": 100, "query": "S", "rho_ema": 0.01},
        ]
    )
    table = layout(frame, EMA_SPEC, ks=(100, 60), queries=("M1", "M6", "S"))
    assert list(table.index) == [100, 60] and list(table.columns) == ["M1", "M6", "S"]
    assert table.loc[100, "M1"] == 1.0 and table.loc[60, "M1"] == 0.5 and table.loc[60, "S"] == 0.0
    assert np.isnan(table.loc[100, "M6"])  # not run


def test_layout_keeps_only_the_spec_methods_and_size():
    frame = cells(
        [
            {"k": 100, "query": "M1", "method": "ks-ratio", "rho_ks": 0.9},
            {"k": 100, "query": "M1", "method": "ema", "size": "50", "rho_ema": 0.3},
            {"k": 100, "query": "M1", "method": "ema", "size": "full", "rho_ema": 1.0},
        ]
    )
    assert layout(frame, EMA_SPEC, ks=(100,), queries=("M1",)).loc[100, "M1"] == 1.0
    sized = TableSpec("s", "50", "rho_ema", RULE_PVALUE, ("ema",), "50")
    assert layout(frame, sized, ks=(100,), queries=("M1",)).loc[100, "M1"] == 0.3
    assert layout(frame, KS_SPEC, ks=(100,), queries=("M1",)).loc[100, "M1"] == 0.9


def test_layout_of_no_matching_cells_is_all_missing():
    table = layout(cells([]), EMA_SPEC, ks=(100, 90), queries=("M1", "S"))
    assert table.shape == (2, 2) and table.isna().all().all()


def test_layout_missing_columns_raises():
    with pytest.raises(InputError, match="missing"):
        layout(pd.DataFrame({"k": [100]}), EMA_SPEC, ks=(100,), queries=("M1",))


def test_verdicts_pvalue_rule_alpha_is_not_memorized():
    values = pd.DataFrame({"M1": [0.1, 0.11, np.nan]}, index=[100, 90, 80])
    assert list(verdicts(values, RULE_PVALUE, 0.1)["M1"]) == ["not_memorized", "memorized", ""]


def test_verdicts_ks_ratio_rule_one_and_inf_are_not_memorized():
    values = pd.DataFrame({"M1": [1.0, 0.99, math.inf]}, index=[100, 90, 80])
    assert list(verdicts(values, RULE_KS_RATIO, 0.1)["M1"]) == ["not_memorized", "memorized", "not_memorized"]


def test_verdicts_unknown_rule_raises():
    with pytest.raises(InputError, match="expected rule"):
        verdicts(pd.DataFrame({"M1": [1.0]}), "vote", 0.1)


def test_error_marks_member_removed_and_nonmember_memorized():
    # Paper Table 2(a), k = 60: rho_KS 1.02 on M1 (red), 0.99 on M2 (fine), 0.90 on M6 (blue), 4.74 on S (fine).
    values = pd.DataFrame({"M1": [1.02], "M2": [0.99], "M6": [0.90], "S": [4.74]}, index=[60])
    marks = error_marks(values, RULE_KS_RATIO, 0.1)
    assert marks.loc[60].tolist() == [WRONGLY_REMOVED, "", WRONGLY_MEMORIZED, ""]


def test_error_marks_ema_pvalues_as_in_paper_table5():
    # Table 5, |D_q| = 200, k = 60: M6 0.32 is a wrong "memorized" (blue); S 0.00 is right.
    values = pd.DataFrame({"M1": [1.0], "M5": [0.05], "M6": [0.32], "S": [0.0]}, index=[60])
    assert error_marks(values, RULE_PVALUE, 0.1).loc[60].tolist() == ["", WRONGLY_REMOVED, WRONGLY_MEMORIZED, ""]


def test_format_value_two_decimals_inf_and_missing():
    assert format_value(0.004) == "0.00" and format_value(1.0) == "1.00" and format_value(23.765) == "23.77"
    assert format_value(math.inf) == "inf" and format_value(float("nan")) == MISSING


def test_to_markdown_colours_wrong_cells_red_bold_and_blue_italic():
    values = pd.DataFrame({"M1": [1.02], "M6": [0.82], "S": [2.34]}, index=pd.Index([100], name="k"))
    text = to_markdown(values, error_marks(values, RULE_KS_RATIO, 0.1), labels={"M1": "C1"})
    lines = text.splitlines()
    assert lines[0] == "| k | C1 | M6 | S |" and lines[1] == "|---|---|---|---|"
    assert (
        lines[2] == '| 100 | <span style="color:red">**1.02**</span> | <span style="color:blue">*0.82*</span> | 2.34 |'
    )


def test_to_html_styles_wrong_cells_and_escapes():
    values = pd.DataFrame({"M1": [0.05], "S": [0.5]}, index=pd.Index([100], name="k"))
    text = to_html(values, error_marks(values, RULE_PVALUE, 0.1), caption="a < b")
    assert '<td style="color:red;font-weight:bold">0.05</td>' in text
    assert '<td style="color:blue;font-style:italic">0.50</td>' in text
    assert "<caption>a &lt; b</caption>" in text and text.count("<tr>") == 2


def test_build_tables_counts_errors_and_documents_render_every_table():
    frame = cells(
        [
            {"k": 100, "query": "M1", "rho_ema": 1.0, "rho_ks": 1.2},
            {"k": 100, "query": "M6", "rho_ema": 0.0, "rho_ks": 0.8},
        ]
    )
    tables = build_tables(frame, [KS_SPEC, EMA_SPEC], ks=(100,), queries=("M1", "M6"), alpha=0.1)
    assert [(t.n_wrongly_removed, t.n_wrongly_memorized) for t in tables] == [(1, 1), (0, 0)]
    markdown = tables_markdown(tables, title="grid", alpha=0.1)
    assert (
        markdown.startswith("# grid")
        and "## rho_KS" in markdown
        and "## rho_EMA" in markdown
        and "Red bold" in markdown
    )
    page = tables_html(tables, title="grid", alpha=0.1)
    assert page.startswith("<!DOCTYPE html>") and page.count("<table") == 2


def test_table_spec_refuses_unknown_rule():
    with pytest.raises(InputError, match="expected rule"):
        TableSpec("x", "x", "rho_ema", "majority", ("ema",))
