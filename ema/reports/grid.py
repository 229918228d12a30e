"""A grid parent run's ``report.html``: its tables and figures on one page."""

from __future__ import annotations

from collections.abc import Mapping

from ema.reports.page import esc, image, page, section


def render_grid_report(
    title: str,
    *,
    tables_html: str,
    figures: Mapping[str, bytes],
    tables_style: str = "",
    notes: Mapping[str, object] | None = None,
) -> str:
    """The grid's page.

    Parameters
    ----------
    title : str
    tables_html : str
        The tables as HTML, already escaped (:func:`ema.experiments.paper.tables.tables_fragment`).
    figures : mapping of str to bytes
        File name -> PNG, drawn inline in this order under their file names.
    tables_style : str
        CSS the tables need.
    notes : mapping of str to object, optional
        Label -> value lines shown above the tables (target, cells audited, reused...).
    """
    lines = "".join(f"<li>{esc(k)}: {esc(v)}</li>" for k, v in (notes or {}).items())
    pictures = "".join(image(png, alt=name, caption=name) for name, png in figures.items())
    body = (
        (f"<ul>{lines}</ul>" if lines else "")
        + section("Tables", tables_html, anchor="tables")
        + section("Figures", pictures or '<p class="muted">No figures.</p>', anchor="figures")
    )
    return page(title, body, extra_style=tables_style)
