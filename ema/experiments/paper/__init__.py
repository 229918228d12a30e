"""The paper's grids (``ema grid paper NAME``): a parent run per grid, a child audit run per cell, tables and figures.

- :mod:`ema.experiments.paper.grids`: what each grid is (k values, query sets, methods, query
  sizes, recipe, tables) and the cells it plans; pure values.
- :mod:`ema.experiments.paper.tables`: the paper's table layout (rows k, columns query sets),
  error colouring, Markdown / HTML / CSV; pure pandas.
- :mod:`ema.experiments.paper.figures`: the paper's Fig. 2 and Fig. 3 as PNG bytes (matplotlib, Agg).
- :mod:`ema.experiments.paper.resume`: finding the finished cells of earlier runs of a grid.
- :mod:`ema.experiments.paper.config`: what ``ema grid paper NAME`` is asked to do.
- :mod:`ema.experiments.paper.cells`: one cell audited in a child run (its query subsample, its numbers).
- :mod:`ema.experiments.paper.workers`: the cells audited here or by worker processes.
- :mod:`ema.experiments.paper.runner`: one parent run per grid, one child run per cell.
"""
