"""EMA audit workbench: was this data used to train this model, or has it been removed?

Implements "EMA: Auditing Data Removal from Trained Models" (Huang, Li, Li; MICCAI 2021)
as an MLflow-tracked workbench. The auditing core (``signals``, ``thresholds``, ``stats``,
``auditors``) works on numpy arrays and imports neither torch nor mlflow.
"""

__version__ = "0.1.0"
