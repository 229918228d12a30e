"""`ema power`: how large a query set must be for the calibrated auditor to tell members apart."""

import click

from ema_cli.options import (
    alpha_option,
    cal_seed_option,
    k_option,
    label_column_option,
    max_query_option,
    model_option,
    progress_option,
    recipe_option,
    workflow_command,
)


@click.command("power")
@model_option
@click.option(
    "--power",
    "target_power",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=0.9,
    show_default=True,
    help="Wanted probability of calling a member set memorized.",
)
@alpha_option
@k_option
@cal_seed_option
@recipe_option
@click.option(
    "--reference",
    "reference_file",
    type=click.Path(dir_okay=False),
    help="A set file (.npz, .csv, .parquet) of data the target never saw (default: the calibration set).",
)
@label_column_option
@max_query_option
@progress_option
@workflow_command
def power(target_power, **options):
    """The smallest |D_q| at which the calibrated auditor calls a member set memorized with the given power."""
    from ema.workflows.power import query_size_for_power

    result = query_size_for_power(power=target_power, **options)
    if result.n_required is None:
        click.echo(f"no |D_q| up to the search limit reaches power {target_power} (reached {result.power:.3f})")
    else:
        click.echo(
            f"|D_q| >= {result.n_required} separates members from non-members at alpha {result.alpha} "
            f"with power {result.power:.3f} (test at the reference's {result.level:.0%} quantile)"
        )
