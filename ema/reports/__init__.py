"""HTML reports and figures from result values: the standard library, numpy and matplotlib, no recomputation.

- :func:`ema.reports.audit.render_audit_report`: one audit's ``report.html`` and its figures.
- :func:`ema.reports.grid.render_grid_report`: a grid parent run's ``report.html``.

Pages are self-contained (inline CSS, figures inline as base64 data URIs, no script, no link to
fetch), so they open from the MLflow UI's artifact view and can be filed as they are. An audit's
figures are SVG written by :mod:`ema.reports.svg` (no matplotlib: see its docstring for why); the
experiments' figures are matplotlib's, drawn by :mod:`ema.reports.canvas` and imported only then.
"""
