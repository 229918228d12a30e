"""`ema history` and `ema compare`: read audits back from the tracking store."""

import click
import pandas as pd

from ema.workflows.history import audit_history, compare_runs
from ema.workflows.options import VERDICTS
from ema_cli.options import workflow_command


@click.command("history")
@click.option("--model", "model_name", required=True, help="Registered model name.")
@click.option("--query", help="Only audits of this query set.")
@click.option("--verdict", type=click.Choice(VERDICTS), help="Only audits with this verdict.")
@click.option(
    "--all",
    "include_all",
    is_flag=True,
    help="Also failed and unfinished audits (a RUNNING one whose process is gone shows as STALE).",
)
@workflow_command
def history(model_name, query, verdict, include_all):
    """List the finished audits of a model across runs and versions, newest first."""
    table = audit_history(model_name, query=query, verdict=verdict, include_all=include_all)
    if table.empty:
        click.echo(f"no audits of {model_name!r} found")
        return
    with pd.option_context("display.width", 200, "display.max_columns", None):
        click.echo(table.to_string(index=False))


@click.command("compare")
@click.argument("run_ids", nargs=-1, required=True)
@workflow_command
def compare(run_ids):
    """Print audit runs side by side: params, metrics, verdict."""
    with pd.option_context("display.width", 200, "display.max_columns", None, "display.max_colwidth", 60):
        click.echo(compare_runs(list(run_ids)).to_string())
