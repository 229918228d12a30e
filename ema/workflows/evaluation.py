"""The ``ema`` MLflow evaluator: ``mlflow.models.evaluate(..., evaluators=["ema"])`` runs the audit workflow.

:class:`EMAEvaluator` is what the ``mlflow.model_evaluator`` entry point names. Its MLflow
glue (finding the registered version, reading the evaluation table, logging on the
evaluation run) is inherited from :class:`ema.tracking.evaluator.AuditEvaluator`; here
the evaluator config becomes an :class:`~ema.workflows.audit.AuditConfig` and the audit
runs through :func:`ema.workflows.audit.audit`, the same function ``ema audit`` calls.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path

from ema.data.arrays import ArraySet
from ema.data.files import write_set
from ema.errors import InputError
from ema.tracking.evaluator import GLUE_KEYS, AuditEvaluator
from ema.workflows.audit import AuditConfig, SuppliedCalibration, audit
from ema.workflows.target import transform_from_options

#: Evaluator config keys that are AuditConfig fields of the same name (see `ema audit --help`).
SAME_NAME = (
    "method",
    "test",
    "alpha",
    "k",
    "cal_seed",
    "threshold_mode",
    "outputs",
    "calibration_name",
    "margin",
    "max_query",
    "strict",
)
#: Evaluator config keys named as `ema audit`'s options -> AuditConfig fields.
RENAMED = {"recipe": "recipe_file", "reference": "reference_file", "members": "members_file"}
#: The three keys of an already-trained calibration model: all or none.
CALIBRATION_KEYS = ("calibration_model", "calibration_members", "calibration_nonmembers")
#: Keys read here: input representation, where to keep the query file, progress bars.
OWN_KEYS = ("input_scale", "normalize", "query_file", "progress")
CONFIG_KEYS = (*GLUE_KEYS, *SAME_NAME, *RENAMED, *CALIBRATION_KEYS, *OWN_KEYS)


def audit_config(model_uri: str, query_file: str, config: Mapping[str, object]) -> AuditConfig:
    """The AuditConfig an evaluator config asks for, validated.

    Raises
    ------
    InputError
        On an unknown key (a typo would otherwise be ignored silently), an incomplete
        calibration triple, or any option AuditConfig refuses.
    """
    unknown = sorted(set(config) - set(CONFIG_KEYS))
    if unknown:
        raise InputError(f"unknown ema evaluator config keys {unknown}; expected some of {sorted(CONFIG_KEYS)}")
    supplied = tuple(config.get(key) for key in CALIBRATION_KEYS)
    if any(supplied) and not all(supplied):
        raise InputError(
            f"expected all of {list(CALIBRATION_KEYS)} or none, got {dict(zip(CALIBRATION_KEYS, supplied))}"
        )
    return AuditConfig(
        model_uri=model_uri,
        query_file=query_file,
        transform=transform_from_options(config.get("input_scale"), config.get("normalize")),
        calibration=SuppliedCalibration(*map(str, supplied)) if all(supplied) else None,
        **{key: config[key] for key in SAME_NAME if key in config},
        **{field: config[key] for key, field in RENAMED.items() if key in config},
    ).validate()


class EMAEvaluator(AuditEvaluator):
    """``evaluators=["ema"]``: audit the evaluation table as a query set, as ``ema audit --query-file`` does.

    Evaluator config (``evaluator_config={"ema": {...}}``), every key optional:
    ``method``, ``test``, ``alpha``, ``k``, ``cal_seed``, ``threshold_mode``, ``outputs``,
    ``calibration_name``, ``recipe``, ``reference``, ``members``, ``margin``, ``max_query``, ``strict``,
    ``input_scale``, ``normalize``, and
    ``calibration_model`` with ``calibration_members`` and ``calibration_nonmembers``:
    as the `ema audit` options of the same names. ``model_uri``: the registered version to
    audit when the loaded model's cannot be told. ``query_file``: where to keep the table
    as a query ``.npz``, so that the report's command can rerun the audit (default: a
    temporary file, deleted afterwards). ``progress``: show progress bars (default False).
    """

    def run_audit(self, model_uri: str, query: ArraySet, config: Mapping[str, object]) -> str:
        keep = config.get("query_file")
        with tempfile.TemporaryDirectory() as tmp:
            path = write_set(query, Path(str(keep)) if keep else Path(tmp) / f"{query.name}.npz")
            outcome = audit(audit_config(model_uri, str(path), config), progress=bool(config.get("progress", False)))
        return outcome.run_id
