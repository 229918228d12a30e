"""A grid parent's report page: the tables' HTML and the figures inline."""

from __future__ import annotations

from ema.reports.grid import render_grid_report
from tests.experiments.test_figures import PNG_MAGIC


def test_render_grid_report_holds_tables_figures_and_notes():
    png = PNG_MAGIC + b"rest"
    page = render_grid_report(
        "ema grid benchmark",
        tables_html="<h2>Table 2(a)</h2><table class=ema-grid></table>",
        tables_style=".ema-grid{color:red}",
        figures={"fig2_signals.png": png},
        notes={"cells": 14, "reused": "<none>"},
    )
    assert "<h2>Table 2(a)</h2>" in page and ".ema-grid{color:red}" in page
    assert page.count("<img ") == 1 and "fig2_signals.png" in page
    assert "cells: 14" in page and "&lt;none&gt;" in page


def test_render_grid_report_says_when_there_are_no_figures():
    assert "No figures." in render_grid_report("g", tables_html="", figures={})
