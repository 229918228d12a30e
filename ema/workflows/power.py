"""How large a query set the calibrated auditor needs, given the measured reference and member behaviour."""

from __future__ import annotations

import mlflow

from ema.stats import QuerySizeResult
from ema.tracking import keys
from ema.tracking.runs import start_run
from ema.workflows.audit import AuditRequest, fit_calibrated
from ema.workflows.target import resolve_target


def query_size_for_power(
    model_uri: str,
    *,
    power: float = 0.9,
    alpha: float = 0.1,
    k: int = 100,
    cal_seed: int = 0,
    recipe_file: str | None = None,
    reference_file: str | None = None,
    progress: bool = True,
) -> QuerySizeResult:
    """Calibrate the calibrated auditor for the target and solve for the query size; logged as a run."""
    with start_run(f"power {model_uri}"):
        target = resolve_target(model_uri, recipe_file=recipe_file)
        request = AuditRequest(
            target, None, target.oracle(outputs="probabilities"), alpha, "t", k, cal_seed, "global",
            keys.CALIBRATION_MODEL_NAME, None, reference_file, progress,
        )
        auditor, tags = fit_calibrated(request)
        result = auditor.required_query_size(power=power)
        mlflow.log_params({"power": power, "alpha": alpha, "k": k, "cal_seed": cal_seed, "model_uri": target.model_uri})
        mlflow.set_tags(tags)
        mlflow.log_metrics({"n_required": float(result.n_required or -1), "power_reached": result.power})
    return result
