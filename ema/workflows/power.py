"""How large a query set the calibrated auditor needs, given the measured reference and member behaviour."""

from __future__ import annotations

from ema.data.corruption import check_quality
from ema.data.limits import DEFAULT_MAX_QUERY
from ema.data.tables import DEFAULT_LABEL_COLUMN
from ema.stats import QuerySizeResult
from ema.tracking import keys
from ema.tracking.runs import log_metrics, log_params, set_tags, start_run
from ema.validation import check_open_unit
from ema.workflows.audit import fit_calibrated
from ema.workflows.calibrate import CalibrationPlan
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
    max_query: int = DEFAULT_MAX_QUERY,
    label_column: str = DEFAULT_LABEL_COLUMN,
    progress: bool = True,
) -> QuerySizeResult:
    """Calibrate the calibrated auditor for the target and solve for the query size; logged as a run."""
    with start_run(f"power {model_uri}"):
        check_open_unit("power", power)
        check_open_unit("alpha", alpha)
        check_quality(k)
        target = resolve_target(model_uri, recipe_file=recipe_file)
        plan = CalibrationPlan.for_target(target, k=k, cal_seed=cal_seed, model_name=keys.CALIBRATION_MODEL_NAME)
        oracle = target.oracle(outputs="probabilities")
        auditor, tags = fit_calibrated(
            target,
            oracle,
            plan,
            alpha=alpha,
            reference_file=reference_file,
            max_images=max_query,
            label_column=label_column,
            progress=progress,
        )
        result = auditor.required_query_size(power=power)
        log_params(
            {
                keys.PARAM_POWER: power,
                keys.PARAM_ALPHA: alpha,
                keys.PARAM_K: k,
                keys.PARAM_CAL_SEED: cal_seed,
                keys.PARAM_MODEL_URI: target.model_uri,
            }
        )
        set_tags(tags)
        log_metrics({keys.METRIC_N_REQUIRED: float(result.n_required or -1), keys.METRIC_POWER_REACHED: result.power})
    return result
