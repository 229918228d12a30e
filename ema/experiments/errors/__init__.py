"""The validity studies: how often the auditors err, on seeded query sets whose membership is known.

``ema grid errors`` (docs/VALIDITY.md): :mod:`ema.experiments.errors.validity` (the study's
targets, draws and error rates; pure values), :mod:`ema.experiments.errors.study` (the targets
trained, the pools scored once, the draws audited, all logged) and
:mod:`ema.experiments.errors.plots` (its table and figure).

The member-reference auditor's own study, ``python -m ema.experiments.errors.reference``
(report in docs/REFERENCE_AUDITOR.md; its pools, candidate tests and report in the
``reference_*`` modules), and whether reference models would lift its information limit,
``python -m ema.experiments.errors.reference_models``; what ``--augment shifts`` buys, whether a score learned
from its 9 views buys more, and whether other views do, ``python -m ema.experiments.errors.shift_information``,
``python -m ema.experiments.errors.learned_views`` and ``python -m ema.experiments.errors.view_families``.
"""
