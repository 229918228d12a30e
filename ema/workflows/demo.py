"""The demo: train, calibrate and audit every named query set, as runs nested under one parent."""

from __future__ import annotations

import pandas as pd

from ema.data.corruption import check_quality
from ema.data.presets import DEFAULT_DATA, load_splits
from ema.tracking import keys
from ema.tracking.runs import log_artifacts_atomically, log_metrics, log_params, start_run
from ema.training.devices import CPU, describe_device, resolve_device
from ema.training.spec import TrainSpec
from ema.validation import check_choice, check_open_unit
from ema.workflows.audit import AuditConfig, AuditOutcome, audit
from ema.workflows.calibrate import ensure_calibration
from ema.workflows.target import resolve_target
from ema.workflows.train import train_target

SUMMARY_COLUMNS = (
    "query",
    "n_query",
    "flag_rate",
    "rho_ema",
    "rho_ema_ks",
    "verdict",
    "calibrated",
    "retained",
    "warnings",
    "expected",
)
#: The demo's audits: EMA, whose verdict the run carries, and the calibrated auditor beside it.
DEMO_METHOD = "ema+calibrated"


def summary_table(outcomes: list[AuditOutcome]) -> pd.DataFrame:
    """One row per audit: |D_q|, EMA's flag rate, p-values and verdict; the calibrated verdict and retained share."""
    rows = []
    for o in outcomes:
        ema, calibrated = o.results["ema"], o.results["calibrated"]
        low, high = calibrated.metrics["retained_ci_low"], calibrated.metrics["retained_ci_high"]
        rows.append(
            {
                "query": o.query,
                "n_query": ema.n_query,
                "flag_rate": round(ema.flag_rate, 4),
                "rho_ema": round(ema.metrics[keys.METRIC_RHO_EMA], 4),
                "rho_ema_ks": round(ema.metrics[keys.METRIC_RHO_EMA_KS], 4),
                "verdict": ema.verdict,
                "calibrated": calibrated.verdict,
                "retained": f"[{low:.2f}, {high:.2f}]",
                "warnings": len(o.warnings),
                "expected": o.expected_verdict or "",
            }
        )
    return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))


def run_demo(
    spec: TrainSpec,
    *,
    data: str = DEFAULT_DATA,
    k: int = 100,
    cal_seed: int = 0,
    alpha: float = 0.1,
    data_seed: int = 0,
    model_name: str = keys.TARGET_MODEL_NAME,
    queries: tuple[str, ...] | None = None,
    progress: bool = True,
    device: str = CPU,
) -> pd.DataFrame:
    """Train and register a target on ``data``, calibrate, audit each query set; log and return the summary.

    ``spec`` trains images (a table gets :func:`~ema.workflows.train.recipe_for`'s recipe);
    ``queries`` None: every named set the splits hold (M1..M6 and S; no S for a table).
    Training, calibration and scoring run on ``device`` (``auto``, ``cpu``, ``cuda[:N]``), resolved
    before the first run starts.
    """
    device = resolve_device(device)
    with start_run("demo"):
        check_open_unit("alpha", alpha)
        check_quality(k)
        splits = load_splits(data, data_seed)
        queries = splits.query_names if queries is None else queries
        for query in queries:
            check_choice("query set", query, splits.query_names)
        log_params(
            {
                **(spec.to_dict() if splits.held_out.kind == "image" else {}),
                keys.PARAM_DATA: data,
                keys.PARAM_K: k,
                keys.PARAM_ALPHA: alpha,
                keys.PARAM_DATA_SEED: data_seed,
                keys.PARAM_DEVICE: describe_device(device),
            }
        )
        trained = train_target(
            spec, data=data, data_seed=data_seed, model_name=model_name, progress=progress, device=device
        )
        target = resolve_target(trained.version.uri, device=device)
        ensure_calibration(target, k=k, cal_seed=cal_seed, progress=progress)
        oracle = target.oracle()
        outcomes = [
            audit(
                AuditConfig(
                    model_uri=trained.version.uri,
                    query=q,
                    method=DEMO_METHOD,
                    alpha=alpha,
                    k=k,
                    cal_seed=cal_seed,
                    device=device,
                ),
                oracle=oracle,
                progress=progress,
            )
            for q in queries
        ]
        table = summary_table(outcomes)
        log_metrics(
            {
                keys.METRIC_N_CORRECT_VERDICTS: float((table["verdict"] == table["expected"]).sum()),
                keys.METRIC_N_CORRECT_CALIBRATED: float((table["calibrated"] == table["expected"]).sum()),
            }
        )
        log_artifacts_atomically(
            {keys.ARTIFACT_SUMMARY: table, keys.ARTIFACT_SUMMARY_TXT: table.to_string(index=False)}
        )
    return table
