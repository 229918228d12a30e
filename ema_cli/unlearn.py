"""`ema unlearn`: remove a forget set from a registered model by some method, and register the result."""

import click

from ema.workflows.options import DEFAULT_RETAIN_MARGIN, MEMBER_NAMES, UNLEARN_METHODS, UNLEARNED_ALIAS, UnlearnSpec
from ema_cli.options import (
    device_option,
    label_column_option,
    max_params_option,
    max_query_option,
    model_option,
    progress_option,
    timeout_option,
    workflow_command,
)


@click.command("unlearn")
@model_option
@click.option(
    "--forget",
    required=True,
    help=(
        f"What to remove: a training fold of the model's splits ({', '.join(MEMBER_NAMES)}) or a set file (.npz, "
        ".csv, .parquet)."
    ),
)
@click.option(
    "--method",
    type=click.Choice(UNLEARN_METHODS),
    required=True,
    help="retrain (exact: the recipe on the training data minus the forget set), finetune, neggrad (NegGrad+), "
    "random-labels or scrub (SCRUB).",
)
@click.option(
    "--epochs",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Epochs; 0 keeps the recipe's for retrain and the method's otherwise (docs/UNLEARNING.md).",
)
@click.option(
    "--lr",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Learning rate; 0 keeps the recipe's for retrain and the method's otherwise.",
)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of weights and batches.")
@click.option("--alias", default=UNLEARNED_ALIAS, show_default=True, help="Alias set on the new version.")
@click.option(
    "--retain",
    "retain_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="The data to keep (.npz, .csv, .parquet), for a model whose training data is not recorded.",
)
@label_column_option
@click.option(
    "--min-retain-accuracy",
    type=click.FloatRange(0, 1),
    default=None,
    help=(
        "Refuse to register a result whose accuracy on the retained data is below this. Default: chance (the "
        f"retained data's commonest class) + {DEFAULT_RETAIN_MARGIN}; 0 registers whatever comes out."
    ),
)
@max_query_option
@device_option
@max_params_option
@timeout_option(None)
@progress_option
@workflow_command
def unlearn_command(
    model_uri,
    forget,
    method,
    epochs,
    lr,
    seed,
    alias,
    retain_file,
    label_column,
    min_retain_accuracy,
    max_query,
    device,
    progress,
):
    """Remove --forget from --model by --method; register the result as a new version of the same model."""
    from ema.workflows.unlearn import UnlearnConfig, unlearn

    spec = UnlearnSpec(method=method, epochs=epochs or None, lr=lr or None, seed=seed)
    outcome = unlearn(
        UnlearnConfig(
            model_uri=model_uri,
            forget=forget,
            spec=spec,
            alias=alias,
            retain_file=retain_file,
            min_retain_accuracy=min_retain_accuracy,
            max_query=max_query,
            label_column=label_column,
            device=device,
        ),
        progress=progress,
    )
    m = outcome.metrics
    click.echo(
        f"registered {outcome.version.uri} (alias {alias}), {outcome.spec.method} of {forget} from "
        f"{outcome.source.uri}: accuracy retained {m['retain_accuracy']:.4f}, forget {m['forget_accuracy']:.4f}, "
        f"test {m['test_accuracy']:.4f}; {m['unlearn_seconds']:.1f} s; run {outcome.run_id}"
    )
