"""`ema train`: train the target on the training folds and register it."""

import click

from ema.workflows.options import DEFAULT_DATA, TARGET_ALIAS
from ema_cli.options import (
    data_option,
    data_seed_option,
    device_option,
    empty_is_none,
    given_fields,
    image_options,
    label_column_option,
    max_params_option,
    model_name_option,
    parse_folds,
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
@recipe_option
@data_option
@root_option
@image_options
@click.option(
    "--data-file",
    type=click.Path(dir_okay=False),
    callback=empty_is_none,
    help=(
        "Train on your own set file instead of --data: a .csv or .parquet table (labels in --label-column) or an "
        ".npz, split by --data-seed into five member folds (5 x n//9), calibration (2n//9) and held out (the rest)."
    ),
)
@click.option(
    "--fold",
    "folds",
    multiple=True,
    callback=parse_folds,
    metavar="FOLD=FILE",
    help=(
        "Train on your own set file in place of a training fold, e.g. --fold M1=marked.npz (a marked copy from "
        "`ema mark`); repeatable. The version's lineage records the file's fingerprint, never a key."
    ),
)
@label_column_option
@data_seed_option
@model_name_option
@click.option(
    "--alias",
    default=TARGET_ALIAS,
    show_default=True,
    help="Alias set on the new version, moved from the version it pointed at (the command says so).",
)
@device_option
@max_params_option
@timeout_option(None)
@progress_option
@workflow_command
def train(
    data_name,
    root,
    image,
    data_file,
    label_column,
    data_seed,
    model_name,
    alias,
    recipe_file,
    device,
    progress,
    folds,
    **spec_options,
):
    """Train the target model f_D and register it.

    Images are trained with the network the options give, or --recipe NAME|FILE (options given on the command
    line replace its fields); a table (--data breast-cancer, or a .csv/.parquet --data-file) with --recipe
    (scikit-learn or torch), default extremely randomized trees.
    """
    from ema.workflows.train import FILE_SOURCE, recipe_with, train_target

    if data_file is not None and (root is not None or data_name != DEFAULT_DATA):
        raise click.UsageError("give either --data-file FILE or --data NAME (with --root), not both")
    spec = spec_from_options(**spec_options)
    outcome = train_target(
        recipe_with(recipe_file, given_fields(spec, spec_options)) if recipe_file else spec,
        data=FILE_SOURCE if data_file is not None else data_name,
        data_root=data_file if data_file is not None else root,
        image=image,
        label_column=label_column,
        data_seed=data_seed,
        model_name=model_name,
        alias=alias,
        progress=progress,
        device=device,
        folds=folds,
    )
    click.echo(
        f"registered {outcome.version.uri} (alias {alias}); train accuracy {outcome.train_accuracy:.4f}, "
        f"held-out accuracy {outcome.held_out_accuracy:.4f}; run {outcome.run_id}"
    )
