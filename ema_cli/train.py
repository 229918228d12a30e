"""`ema train`: train the target on the training folds and register it."""

import click

from ema.workflows.options import TARGET_ALIAS, TARGET_MODEL_NAME
from ema_cli.options import (
    data_option,
    data_seed_option,
    given_fields,
    image_options,
    max_params_option,
    progress_option,
    recipe_option,
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
@image_options
@recipe_option
@data_seed_option
@click.option("--model-name", default=TARGET_MODEL_NAME, show_default=True, help="Registered model name.")
@click.option("--alias", default=TARGET_ALIAS, show_default=True, help="Alias set on the new version.")
@max_params_option
@timeout_option(None)
@progress_option
@workflow_command
def train(data_name, root, image, recipe_file, data_seed, model_name, alias, progress, **spec_options):
    """Train the target model f_D with the recipe given by the options (or --recipe), and register it."""
    from ema.workflows.train import recipe_spec, train_target

    spec = spec_from_options(**spec_options)
    if recipe_file is not None:
        spec = recipe_spec(recipe_file, given_fields(spec, spec_options))
    outcome = train_target(
        spec,
        data=data_name,
        data_root=root,
        image=image,
        data_seed=data_seed,
        model_name=model_name,
        alias=alias,
        progress=progress,
    )
    click.echo(
        f"registered {outcome.version.uri} (alias {alias}); train accuracy {outcome.train_accuracy:.4f}, "
        f"held-out accuracy {outcome.held_out_accuracy:.4f}; run {outcome.run_id}"
    )
