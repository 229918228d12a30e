"""`ema calibrate`: train the calibration model with the target's recipe and pick thresholds."""

import click

from ema.workflows.options import CALIBRATION_MODEL_NAME
from ema_cli.options import (
    cal_seed_option,
    device_option,
    k_option,
    max_params_option,
    model_option,
    progress_option,
    recipe_option,
    timeout_option,
    workflow_command,
)


@click.command("calibrate")
@model_option
@k_option
@cal_seed_option
@recipe_option
@click.option(
    "--calibration-name",
    default=CALIBRATION_MODEL_NAME,
    show_default=True,
    help="Registered name of calibration models.",
)
@device_option
@max_params_option
@timeout_option(None)
@progress_option
@workflow_command
def calibrate(model_uri, k, cal_seed, recipe_file, calibration_name, device, progress):
    """Calibrate EMA for a registered target; reuses a cached calibration model when one matches."""
    from ema.workflows.calibrate import calibrate as calibrate_workflow

    outcome = calibrate_workflow(
        model_uri,
        k=k,
        cal_seed=cal_seed,
        model_name=calibration_name,
        recipe_file=recipe_file,
        progress=progress,
        device=device,
    )
    how = "reused cached" if outcome.cached else "trained and registered"
    click.echo(f"{how} calibration model {outcome.version.uri}")
    for signal, entry in outcome.thresholds["signals"].items():
        click.echo(
            f"  {signal:<17} threshold {entry['global']:.6g}  balanced accuracy {entry['balanced_accuracy']:.4f}"
        )
