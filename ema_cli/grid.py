"""`ema grid NAME`: regenerate one of the paper's tables as a parent run with one child run per cell."""

import click

from ema.experiments.grids import GRID_NAMES, get_grid, parse_ks, parse_queries, parse_sizes
from ema.experiments.runner import GridConfig, run_grid
from ema.experiments.validity import ErrorGridConfig
from ema.experiments.validity_plots import rates_table
from ema.experiments.validity_study import run_error_grid
from ema.workflows.options import DATA_SOURCES, InputError
from ema_cli.options import (
    alpha_option,
    cal_seed_option,
    data_seed_option,
    progress_option,
    root_option,
    workflow_command,
)

#: The validity study runs under `ema grid` too.
VALIDITY_GRID = "errors"
#: Options only the validity study reads, and options only the paper's grids read.
VALIDITY_ONLY = ("n_draws", "n_ks_draws")
PAPER_GRIDS_ONLY = ("data_name", "root", "data_seed", "model_uri", "ks", "queries", "epochs", "workers")
DEFAULTS = ErrorGridConfig()


@click.command("grid")
@click.argument("name", type=click.Choice((*GRID_NAMES, VALIDITY_GRID)))
@click.option(
    "--data",
    "data_name",
    type=click.Choice(DATA_SOURCES),
    default=None,
    help="Data source of the target's splits. Default: the grid's (mnist-embedded; pneumoniamnist for medical).",
)
@root_option
@data_seed_option
@click.option(
    "--model", "model_uri", help="Audit this registered target (models:/NAME@ALIAS) instead of training the grid's."
)
@click.option(
    "--k",
    "ks",
    default="all",
    show_default=True,
    help="Calibration qualities k, comma-separated (e.g. 100,60), or all of the grid's.",
)
@click.option(
    "--queries",
    default="all",
    show_default=True,
    help="Query sets, comma-separated (e.g. M1,M6), or all (M1..M5, M6, S).",
)
@click.option(
    "--sizes",
    default="all",
    show_default=True,
    help="Query sizes |D_q| for query-size and medical, e.g. full,50,5; all is full,500,200,50,20,5.",
)
@click.option(
    "--epochs",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help=(
        "Training epochs of the target and of every model trained with its recipe; 0 keeps the paper's "
        "(50, medical 30)."
    ),
)
@cal_seed_option
@alpha_option
@click.option(
    "--sample-seed", type=int, default=0, show_default=True, help="Seed of the query subsamples (query-size, medical)."
)
@click.option(
    "--draws",
    "n_draws",
    type=click.IntRange(min=1),
    default=DEFAULTS.n_draws,
    show_default=True,
    help="errors only: seeded query sets per kind and size.",
)
@click.option(
    "--ks-draws",
    "n_ks_draws",
    type=click.IntRange(min=0),
    default=DEFAULTS.n_ks_draws,
    show_default=True,
    help="errors only: how many of them the KS ratio audits (it trains a model per draw).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Processes that audit the cells at once; each model is still trained once, and cells.csv is the same.",
)
@progress_option
@workflow_command
def grid(
    name,
    data_name,
    root,
    data_seed,
    model_uri,
    ks,
    queries,
    sizes,
    epochs,
    cal_seed,
    alpha,
    sample_seed,
    n_draws,
    n_ks_draws,
    workers,
    progress,
):
    """Run grid NAME (benchmark, ks-vs-t, query-size, medical, errors): audits, tables, figures; resumes finished cells.

    ``errors`` is the validity study (docs/VALIDITY.md): two targets on the embedded data,
    --draws seeded query sets per kind and size, every auditor's error rates.
    """
    refuse_ignored(VALIDITY_ONLY if name != VALIDITY_GRID else PAPER_GRIDS_ONLY, name)
    if name == VALIDITY_GRID:
        config = ErrorGridConfig(
            alpha=alpha, seed=sample_seed, n_draws=n_draws, n_ks_draws=n_ks_draws, **error_sizes(sizes)
        )
        click.echo(rates_table(run_error_grid(config, cal_seed=cal_seed, progress=progress)))
        return
    spec = get_grid(name)
    try:
        narrowed = {"ks": parse_ks(ks, spec), "queries": parse_queries(queries), "sizes": parse_sizes(sizes, spec)}
    except InputError as exc:
        raise click.UsageError(str(exc)) from exc
    config = GridConfig(
        name=name,
        data=data_name,
        data_root=str(root) if root else None,
        data_seed=data_seed,
        model_uri=model_uri,
        epochs=epochs or None,
        cal_seed=cal_seed,
        alpha=alpha,
        sample_seed=sample_seed,
        workers=workers,
        **narrowed,
    )
    outcome = run_grid(config, progress=progress)
    click.echo(outcome.markdown)
    click.echo(
        f"parent run {outcome.run_id}; target {outcome.target_uri}; {len(outcome.cells)} cells "
        f"({outcome.n_audited} audited, {outcome.n_reused} reused); {outcome.wall_seconds:.0f} s"
    )


def refuse_ignored(names: tuple[str, ...], grid_name: str) -> None:
    """A usage error naming every option given on the command line that grid ``grid_name`` does not read."""
    context = click.get_current_context()
    given = [
        next(p.opts[0] for p in context.command.params if p.name == name)
        for name in names
        if context.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT
    ]
    if given:
        raise click.UsageError(f"grid {grid_name!r} does not use {', '.join(given)}; leave them out")


def error_sizes(text: str) -> dict:
    """``--sizes`` for the errors grid: ``all`` keeps the default sizes, else comma-separated positive integers."""
    if text.strip().lower() == "all":
        return {}
    try:
        sizes = tuple(int(v) for v in text.split(","))
    except ValueError as exc:
        raise click.BadParameter(
            f"expected comma-separated integers or 'all', got {text!r}", param_hint="--sizes"
        ) from exc
    if min(sizes) < 1:
        raise click.BadParameter(f"expected sizes of at least 1, got {text!r}", param_hint="--sizes")
    return {"sizes": sizes}
