"""EMA audit workbench: was this data used to train this model, or has it been removed?

Implements "EMA: Auditing Data Removal from Trained Models" (Huang, Li, Li; MICCAI 2021)
as an MLflow-tracked workbench. The auditing core (``signals``, ``thresholds``, ``stats``,
``auditors``) works on numpy arrays and imports neither torch nor mlflow.

The names a user needs first are reachable from here::

    import ema

    auditor = ema.EMAAuditor().calibrate(member_proba, member_labels, nonmember_proba, nonmember_labels)
    result = auditor.audit(query_proba, query_labels)  # an ema.AuditResult, from arrays alone
    outcome = ema.audit(ema.AuditConfig(model_uri="models:/target@target", query="M6"))  # a tracked run

They load on first use (PEP 562's module ``__getattr__``): ``import ema`` imports no
submodule, so the command line (``ema --help``) and the numpy-only core stay fast, and
mlflow and torch load only when ``ema.audit`` or ``ema.AuditConfig`` is first touched.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

#: Public name -> the module it lives in; loaded on first access.
_FACADE = {
    "audit": "ema.workflows.audit",
    "AuditConfig": "ema.workflows.audit",
    "AuditResult": "ema.auditors",
    "CalibratedAuditor": "ema.auditors",
    "EMAAuditor": "ema.auditors",
    "KSRatioAuditor": "ema.auditors",
    "check_auditor": "ema.auditors",
    "EMAError": "ema.errors",
    "InputError": "ema.errors",
    "NotCalibratedError": "ema.errors",
    "ModelAccessError": "ema.errors",
    "MissingDependencyError": "ema.errors",
    "StoreError": "ema.errors",
    "StoreBusyError": "ema.errors",
    "TimeLimitExceeded": "ema.errors",
}

__all__ = ["__version__", *_FACADE]


def __getattr__(name: str) -> object:
    """Import the module that defines a facade name on first access, and keep the name here."""
    module = _FACADE.get(name)
    if module is None:
        raise AttributeError(f"module 'ema' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_FACADE})
