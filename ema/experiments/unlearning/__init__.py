"""The unlearning grid (``ema grid unlearning``, docs/UNLEARNING.md): every removal method, seeded, audited.

- :mod:`ema.experiments.unlearning.config`: what the grid is asked to do (a value the command
  line builds without importing the grid).
- :mod:`ema.experiments.unlearning.runner`: the target, its unlearned versions, their audits, logged.
- :mod:`ema.experiments.unlearning.tables`: its tables and figure from its frames.
"""
