"""`ema grid NAME`: regenerate one of the paper's tables as a parent run with one child run per cell."""

import click

from ema.experiments.errors.validity import ErrorGridConfig
from ema.experiments.paper.grids import GRID_NAMES, get_grid, parse_ks, parse_queries, parse_sizes
from ema.experiments.unlearning.config import UNLEARNING_GRID, UnlearningGridConfig
from ema.workflows.options import DATA_SOURCES, InputError
from ema_cli.options import (
    alpha_option,
    cal_seed_option,
    data_seed_option,
    max_params_option,
    progress_option,
    root_option,
    workflow_command,
)

#: The validity study runs under `ema grid` too.
VALIDITY_GRID = "errors"
#: Options only the validity study reads, only the paper's grids read, only the unlearning grid reads.
VALIDITY_ONLY = ("n_draws", "n_ks_draws")
PAPER_GRIDS_ONLY = ("data_name", "root", "data_seed", "model_uri", "ks", "queries", "epochs", "workers")
UNLEARNING_ONLY = ("methods", "seeds")
#: Options each grid leaves unread (the paper's grids: every grid name not listed).
UNREAD = {
    VALIDITY_GRID: (*PAPER_GRIDS_ONLY, *UNLEARNING_ONLY),
    UNLEARNING_GRID: ("ks", "queries", "n_ks_draws", "workers"),
}
PAPER_UNREAD = (*VALIDITY_ONLY, *UNLEARNING_ONLY)
#: Options that say how the unlearning grid trains its own target: with --model, the version's tags say it.
UNLEARNING_TARGET_OPTIONS = ("data_name", "root", "data_seed", "epochs")
DEFAULTS = ErrorGridConfig()
UNLEARNING_DEFAULTS = UnlearningGridConfig()


@click.command("grid")
@click.argument("name", type=click.Choice((*GRID_NAMES, VALIDITY_GRID, UNLEARNING_GRID)))
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
    help="Query sizes |D_q| for query-size and medical, e.g. full,50,5; all is full,500,200,50,20,5 "
    "(errors: 5,20,50,200,1000; unlearning, the forget-set subsets: 20,50,100,200,500).",
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
    default=None,
    help="errors and unlearning: seeded query sets per kind (forget-set subsets per seed) and size "
    f"(default {DEFAULTS.n_draws}; unlearning {UNLEARNING_DEFAULTS.n_draws}).",
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
    "--methods",
    default="all",
    show_default=True,
    help="unlearning only: removal methods, comma-separated, or all (retrain is always run: the baseline).",
)
@click.option(
    "--seeds",
    default=",".join(map(str, UNLEARNING_DEFAULTS.seeds)),
    show_default=True,
    help="unlearning only: seeds of each method, comma-separated.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Processes that audit the cells at once; each model is still trained once, and cells.csv is the same.",
)
@max_params_option
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
    methods,
    seeds,
    workers,
    progress,
):
    """Run grid NAME (benchmark, ks-vs-t, query-size, medical, errors, unlearning): audits, tables, figures.

    ``errors`` is the validity study (docs/VALIDITY.md): two targets on the embedded data,
    --draws seeded query sets per kind and size, every auditor's error rates. ``unlearning``
    removes M1 by every method and seed and audits each version (docs/UNLEARNING.md).
    """
    refuse_ignored(UNREAD.get(name, PAPER_UNREAD), name)
    if name == UNLEARNING_GRID:
        if model_uri is not None:
            refuse_ignored(
                UNLEARNING_TARGET_OPTIONS,
                name,
                qualifier=" with --model",
                why="the target's recipe and data come from the version's tags",
            )
        config = UnlearningGridConfig(
            methods=UNLEARNING_DEFAULTS.methods if methods.strip().lower() == "all" else comma_list(methods, str),
            seeds=comma_list(seeds, int),
            **({"sizes": comma_list(sizes, int)} if sizes.strip().lower() != "all" else {}),
            **({"n_draws": n_draws} if n_draws is not None else {}),
            model_uri=model_uri,
            epochs=epochs or None,
            data=data_name,
            data_root=str(root) if root else None,
            data_seed=data_seed if model_uri is None else None,
            alpha=alpha,
            cal_seed=cal_seed,
            sample_seed=sample_seed,
        )
        from ema.experiments.unlearning.runner import run_unlearning_grid

        outcome = run_unlearning_grid(config, progress=progress)
        click.echo(outcome.markdown)
        click.echo(
            f"parent run {outcome.run_id}; target {outcome.target_uri}; {len(outcome.versions) - 1} unlearned versions "
            f"({outcome.n_reused} reused); {outcome.wall_seconds:.0f} s"
        )
        return
    if name == VALIDITY_GRID:
        from ema.experiments.errors.plots import rates_table
        from ema.experiments.errors.study import run_error_grid

        config = ErrorGridConfig(
            alpha=alpha,
            seed=sample_seed,
            n_draws=n_draws or DEFAULTS.n_draws,
            n_ks_draws=n_ks_draws,
            **error_sizes(sizes),
        )
        click.echo(rates_table(run_error_grid(config, cal_seed=cal_seed, progress=progress)))
        return
    from ema.experiments.paper.config import GridConfig
    from ema.experiments.paper.runner import run_grid

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


def refuse_ignored(names: tuple[str, ...], grid_name: str, *, qualifier: str = "", why: str = "") -> None:
    """A usage error naming every option given on the command line that grid ``grid_name`` does not read.

    One line: the options, when (``qualifier``) and why (``why``) they do not apply, what was expected and what arrived
    (``grid 'errors' does not use --data, --k: expected them left out, got --data fashion --k 60``).
    """
    context = click.get_current_context()
    params = {p.name: p for p in context.command.params}
    given = [name for name in names if context.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT]
    if given:
        flags = [params[name].opts[0] for name in given]
        arrived = " ".join(f"{flag} {context.params[name]}" for flag, name in zip(flags, given, strict=True))
        raise click.UsageError(
            f"grid '{grid_name}'{qualifier} does not use {', '.join(flags)}{f' ({why})' if why else ''}: "
            f"expected {'them' if len(flags) > 1 else 'it'} left out, got {arrived}"
        )


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


def comma_list(text: str, kind: type) -> tuple:
    """``"a,b"`` as a tuple of ``kind``; a usage error naming the text when an item does not convert."""
    try:
        return tuple(kind(v.strip()) for v in text.split(",") if v.strip())
    except ValueError as exc:
        raise click.UsageError(f"expected comma-separated {kind.__name__} values, got {text!r}") from exc
