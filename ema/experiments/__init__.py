"""Experiments: the paper's grids and the tables and figures they produce, and validity studies.

The paper's grids (``ema grid NAME``):

- :mod:`ema.experiments.grids`: what each grid is (k values, query sets, methods, query
  sizes, recipe, tables) and the cells it plans; pure values.
- :mod:`ema.experiments.tables`: the paper's table layout (rows k, columns query sets),
  error colouring, Markdown / HTML / CSV; pure pandas.
- :mod:`ema.experiments.figures`: the paper's Fig. 2 and Fig. 3 as PNG bytes (matplotlib, Agg).
- :mod:`ema.experiments.resume`: finding the finished cells of earlier runs of a grid.
- :mod:`ema.experiments.runner`: one parent run per grid, one child run per cell.

The validity study of the auditors' error rates: :mod:`ema.experiments.validity` and
:mod:`ema.experiments.validity_plots`.
"""
