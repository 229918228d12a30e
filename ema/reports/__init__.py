"""HTML reports and figures from result values: matplotlib and the standard library, no recomputation.

- :func:`ema.reports.audit.render_audit_report`: one audit's ``report.html`` and its figures.
- :func:`ema.reports.grid.render_grid_report`: a grid parent run's ``report.html``.

Pages are self-contained (inline CSS, figures inline as base64 PNG, no script, no link to
fetch), so they open from the MLflow UI's artifact view and can be filed as they are.
matplotlib is imported only when a figure is drawn.
"""
