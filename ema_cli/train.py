"""`ema train`: train the target on the training folds and register it."""

import click

from ema.workflows.options import TARGET_ALIAS, TARGET_MODEL_NAME
from ema_cli.options import (
    data_option,
    data_seed_option,
    device_option,
    max_params_option,
    progress_option,
    root_option,
    spec_from_options,
    timeout_option,
    train_spec_options,
    workflow_command,
)


@click.command("train")
@train_spec_options
@data_option
@root_option
@data_seed_option
@click.option("--model-name", default=TARGET_MODEL_NAME, show_default=True, help="Registered model name.")
@click.option("--alias", default=TARGET_ALIAS, show_default=True, help="Alias set on the new version.")
@device_option
@max_params_option
@timeout_option(None)
@progress_option
@workflow_command
def train(data_name, root, data_seed, model_name, alias, device, progress, **spec_options):
    """Train the target model f_D with the recipe given by the options, and register it."""
    from ema.workflows.train import train_target

    outcome = train_target(
        spec_from_options(**spec_options),
        data=data_name,
        data_root=root,
        data_seed=data_seed,
        model_name=model_name,
        alias=alias,
        progress=progress,
        device=device,
    )
    click.echo(
        f"registered {outcome.version.uri} (alias {alias}); train accuracy {outcome.train_accuracy:.4f}, "
        f"held-out accuracy {outcome.held_out_accuracy:.4f}; run {outcome.run_id}"
    )
