"""`ema demo`: the whole pipeline on the embedded data, printed as a table."""

import click

from ema_cli.options import (
    alpha_option,
    cal_seed_option,
    data_option,
    data_seed_option,
    device_option,
    k_option,
    model_name_option,
    progress_option,
    spec_from_options,
    train_spec_options,
    workflow_command,
)


@click.command("demo")
@train_spec_options
@data_option
@k_option
@cal_seed_option
@alpha_option
@data_seed_option
@model_name_option
@device_option
@progress_option
@workflow_command
def demo(data_name, k, cal_seed, alpha, data_seed, model_name, device, progress, **spec_options):
    """Train, register, calibrate and audit the query sets M1..M6 and S (a table has no S).

    The network options train images; a table (--data breast-cancer) is trained by extremely randomized trees.
    """
    from ema.workflows.demo import run_demo

    table = run_demo(
        spec_from_options(**spec_options),
        data=data_name,
        k=k,
        cal_seed=cal_seed,
        alpha=alpha,
        data_seed=data_seed,
        model_name=model_name,
        progress=progress,
        device=device,
    )
    click.echo(table.to_string(index=False))
