"""`ema grid errors`: the validity study of every auditor's error rates."""

import click

from ema.experiments.error_plots import rates_table
from ema.experiments.errors import ErrorGridConfig
from ema.workflows.errors import run_error_grid
from ema_cli.options import alpha_option, cal_seed_option, k_option, progress_option, workflow_command


@click.command("errors")
@click.option("--sizes", default="5,20,50,200,1000", show_default=True, help="Query-set sizes |D_q|, comma-separated.")
@click.option("--draws", "n_draws", type=click.IntRange(min=1), default=200, show_default=True, help="Seeded query sets per kind and size.")
@click.option("--ks-draws", "n_ks_draws", type=click.IntRange(min=0), default=5, show_default=True, help="Of those, how many the KS ratio audits (it trains a model per draw).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the draws.")
@alpha_option
@k_option
@cal_seed_option
@progress_option
@workflow_command
def errors(sizes, n_draws, n_ks_draws, seed, alpha, k, cal_seed, progress):
    """Error rates of EMA (t, KS), the KS ratio and the calibrated auditor on two targets."""
    try:
        size_values = tuple(int(s) for s in sizes.split(","))
    except ValueError as exc:
        raise click.BadParameter(f"expected comma-separated integers, got {sizes!r}", param_hint="--sizes") from exc
    config = ErrorGridConfig(sizes=size_values, n_draws=n_draws, n_ks_draws=n_ks_draws, alpha=alpha, seed=seed)
    summary = run_error_grid(config, k=k, cal_seed=cal_seed, progress=progress)
    click.echo(rates_table(summary))
