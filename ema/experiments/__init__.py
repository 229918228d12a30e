"""Experiments: one subpackage per study, each its own ``ema grid`` command, with the tables and figures it produces.

- :mod:`ema.experiments.paper`: the paper's grids (``ema grid paper NAME``): Tables 2 to 6, Fig. 2 and 3.
- :mod:`ema.experiments.errors`: the auditors' error rates on seeded query sets of known membership
  (``ema grid errors``), and the member-reference auditor's own study (``python -m
  ema.experiments.errors.reference``).
- :mod:`ema.experiments.unlearning`: every removal method, seeded, audited before and after
  (``ema grid unlearning``).

What more than one study uses sits here: :mod:`ema.experiments.common` (the paper's benchmark
recipe) and :mod:`ema.experiments.parallel` (tasks in worker processes). A study imports no
other study, and nothing below the experiments imports them. The grids' targets are trained once
and cached by :mod:`ema.workflows.grid_targets`.
"""
