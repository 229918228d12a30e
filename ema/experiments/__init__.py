"""Experiments: the paper's grids and the tables and figures they produce, and validity studies.

The paper's grids (``ema grid NAME``):

- :mod:`ema.experiments.grids`: what each grid is (k values, query sets, methods, query
  sizes, recipe, tables) and the cells it plans; pure values.
- :mod:`ema.experiments.tables`: the paper's table layout (rows k, columns query sets),
  error colouring, Markdown / HTML / CSV; pure pandas.
- :mod:`ema.experiments.figures`: the paper's Fig. 2 and Fig. 3 as PNG bytes (matplotlib, Agg).
- :mod:`ema.experiments.resume`: finding the finished cells of earlier runs of a grid.
- :mod:`ema.experiments.grid_config`: what ``ema grid NAME`` is asked to do.
- :mod:`ema.experiments.grid_cells`: one cell audited in a child run (its query subsample, its numbers).
- :mod:`ema.experiments.grid_workers`: the cells audited here or by worker processes.
- :mod:`ema.experiments.runner`: one parent run per grid, one child run per cell.
- The grids' targets are trained once and cached by :mod:`ema.workflows.grid_targets`.

The validity study of the auditors' error rates (``ema grid errors``): :mod:`ema.experiments.validity`,
:mod:`ema.experiments.validity_study` and :mod:`ema.experiments.validity_plots`; the member-reference
auditor's own study, run as ``python -m ema.experiments.validity_reference`` (report in
docs/REFERENCE_AUDITOR.md), and whether reference models would lift its information limit,
``python -m ema.experiments.validity_reference_models``.
"""
