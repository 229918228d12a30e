"""`ema grid STUDY`: one study (the paper's grids, the auditors' error rates, unlearning), each its own command.

Each study is a subcommand with only the options it reads: ``ema grid paper [NAME]``,
``ema grid errors``, ``ema grid unlearning``. The old ``ema grid NAME`` of a paper grid is
refused with the command that replaced it.
"""

from pathlib import Path

import click

from ema.experiments.errors.validity import ErrorGridConfig, study_targets
from ema.experiments.paper.grids import GRID_NAMES, get_grid, parse_ks, parse_queries, parse_sizes
from ema.experiments.unlearning.config import UnlearningGridConfig
from ema.workflows.options import DATA_SOURCES, DEFAULT_DATA, InputError
from ema_cli.options import (
    alpha_option,
    cal_seed_option,
    data_seed_option,
    margin_option,
    mark_key_option,
    max_params_option,
    progress_option,
    root_option,
    workflow_command,
)

#: The paper grid ``ema grid paper`` runs without NAME (Table 2, as MLproject's ``grid`` entry point).
DEFAULT_PAPER_GRID = "benchmark"
ERROR_DEFAULTS = ErrorGridConfig()
UNLEARNING_DEFAULTS = UnlearningGridConfig()


class StudyGroup(click.Group):
    """The studies as subcommands; a paper grid's name where a study belongs says which command replaced it."""

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple:
        if args and args[0] in GRID_NAMES:
            raise click.UsageError(
                f"`ema grid {args[0]}` is now `ema grid paper {args[0]}`: expected a study "
                f"({', '.join(self.list_commands(ctx))}), got {args[0]!r}",
                ctx,
            )
        return super().resolve_command(ctx, args)


@click.group("grid", cls=StudyGroup)
def grid():
    """Run a study (paper, errors, unlearning): audits in child runs of one parent run, tables, figures."""


def data_option(default: str) -> click.Option:
    """``--data``: the data source of the study's own target (``default``: which source it takes when not given)."""
    return click.option(
        "--data",
        "data_name",
        type=click.Choice(DATA_SOURCES),
        default=None,
        help=f"Data source of the target's splits. Default: {default}.",
    )


def model_option(use: str) -> click.Option:
    """``--model``: a registered target the study ``use``s instead of training its own."""
    return click.option(
        "--model",
        "model_uri",
        help=f"{use} this registered target (models:/NAME@ALIAS) instead of training the grid's.",
    )


def epochs_option(paper_epochs: str) -> click.Option:
    """``--epochs`` of the study's own target; 0 keeps the paper's (``paper_epochs``)."""
    return click.option(
        "--epochs",
        type=click.IntRange(min=0),
        default=0,
        show_default=True,
        help=f"Training epochs of the target and of every model trained with its recipe; 0 keeps the paper's "
        f"({paper_epochs}).",
    )


def sample_seed_option(what: str) -> click.Option:
    """``--sample-seed``: the seed of the study's query subsamples (``what``)."""
    return click.option("--sample-seed", type=int, default=0, show_default=True, help=f"Seed of {what}.")


def sizes_option(default: str, what: str) -> click.Option:
    """``--sizes``: the study's query sizes |D_q| (``what``: the help sentence)."""
    return click.option("--sizes", default=default, show_default=True, help=what)


def draws_option(default: int, what: str) -> click.Option:
    """``--draws``: how many seeded query sets the study audits (``what``)."""
    return click.option("--draws", "n_draws", type=click.IntRange(min=1), default=default, show_default=True, help=what)


@grid.command("paper")
@click.argument("name", type=click.Choice(GRID_NAMES), default=DEFAULT_PAPER_GRID, metavar="[NAME]")
@data_option("the grid's (mnist-embedded; pneumoniamnist for medical)")
@root_option
@data_seed_option
@model_option("Audit")
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
@sizes_option(
    "all", "Query sizes |D_q| of query-size and medical, comma-separated (e.g. full,50,5), or all of the grid's."
)
@epochs_option("50, medical 30")
@cal_seed_option
@alpha_option
@sample_seed_option("the query subsamples (query-size, medical)")
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
def paper(
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
    workers,
    progress,
):
    """The paper's grids (benchmark, ks-vs-t, query-size, medical).

    Grid NAME (default benchmark): one parent run with one child audit run per cell, the
    paper's tables and figures on the parent (docs/REPRODUCTION.md).
    """
    from ema.experiments.paper.config import GridConfig
    from ema.experiments.paper.runner import run_grid

    spec = get_grid(name)
    try:
        narrowed = {"ks": parse_ks(ks, spec), "queries": parse_queries(queries), "sizes": parse_sizes(sizes, spec)}
    except InputError as exc:
        raise click.UsageError(str(exc)) from exc
    config = GridConfig(
        name=name,
        **target_fields(data_name, root, data_seed, model_uri, epochs),
        cal_seed=cal_seed,
        alpha=alpha,
        sample_seed=sample_seed,
        workers=workers,
        **narrowed,
    )
    outcome = run_grid(config, progress=progress)
    echo_outcome(outcome, f"{len(outcome.cells)} cells ({outcome.n_audited} audited, {outcome.n_reused} reused)")


@grid.command("errors")
@data_option("the three targets of docs/VALIDITY.md (two on mnist-embedded, one on fashion)")
@root_option
@sizes_option(",".join(map(str, ERROR_DEFAULTS.sizes)), "Query sizes |D_q| of the seeded query sets, comma-separated.")
@draws_option(ERROR_DEFAULTS.n_draws, "Seeded query sets per kind and size.")
@click.option(
    "--ks-draws",
    "n_ks_draws",
    type=click.IntRange(min=0),
    default=ERROR_DEFAULTS.n_ks_draws,
    show_default=True,
    help="How many of them the KS ratio audits (it trains a model per draw).",
)
@cal_seed_option
@alpha_option
@sample_seed_option("the query sets' draws")
@max_params_option
@progress_option
@workflow_command
def errors(data_name, root, sizes, n_draws, n_ks_draws, cal_seed, alpha, sample_seed, progress):
    """Every auditor's error rates on query sets of known membership.

    The validity study (docs/VALIDITY.md): its targets on the embedded data and
    Fashion-MNIST, or with --data one target, the source's default recipe on its splits
    (breast-cancer: the default table recipe; a table has no other-domain set S);
    --draws seeded query sets per kind and size.
    """
    from ema.experiments.errors.plots import rates_table
    from ema.experiments.errors.study import run_error_grid

    if root is not None and data_name is None:
        raise click.UsageError(f"expected --root only with --data (the source it holds), got --root {root}")
    config = ErrorGridConfig(
        alpha=alpha, seed=sample_seed, n_draws=n_draws, n_ks_draws=n_ks_draws, sizes=comma_list(sizes, int)
    )
    targets = study_targets(data_name, str(root) if root else None)
    summary = run_error_grid(config, targets=targets, cal_seed=cal_seed, progress=progress)
    click.echo(rates_table(summary, kinds=config.kinds))


@grid.command("unlearning")
@data_option(DEFAULT_DATA)
@root_option
@click.option(
    "--data-seed", type=int, default=None, help="Seed of the data splits (default 0; with --model, the version's)."
)
@model_option("Unlearn from")
@click.option(
    "--methods",
    default="all",
    show_default=True,
    help="Removal methods, comma-separated, or all (retrain is always run: the baseline).",
)
@click.option(
    "--seeds",
    default=",".join(map(str, UNLEARNING_DEFAULTS.seeds)),
    show_default=True,
    help="Seeds of each method, comma-separated.",
)
@sizes_option(",".join(map(str, UNLEARNING_DEFAULTS.sizes)), "Sizes |D_q| of the forget-set subsets, comma-separated.")
@draws_option(UNLEARNING_DEFAULTS.n_draws, "Forget-set subsets per size, method and seed.")
@epochs_option("50")
@cal_seed_option
@alpha_option
@sample_seed_option("the forget-set subsets")
@mark_key_option(
    "With --model trained on this key's marked copy in place of M1 (ema train --fold M1=FILE): also audit every "
    "version with --method marks on the held-out images. Default: none"
)
@click.option(
    "--mark-queries",
    type=click.IntRange(min=1),
    help="With --mark-key: held-out images the marks auditor stamps, each scored clean and stamped. Default: 200.",
)
@margin_option(
    UNLEARNING_DEFAULTS.margin, "The calibrated auditor's margin in every audit of the grid (as ema audit --margin)"
)
@click.option(
    "--reference-seeds",
    default="",
    help=(
        "Seeds of redrawn non-member references, comma-separated (e.g. 0,1,2): per version and seed, the whole "
        "forget set is audited again by the calibrated auditor against a reference of the usual size drawn from "
        "the usual reference and the held-out set, and the verdicts are tallied over (seed, reference seed) pairs. "
        "Default: none."
    ),
)
@max_params_option
@progress_option
@workflow_command
def unlearning(
    data_name,
    root,
    data_seed,
    model_uri,
    methods,
    seeds,
    sizes,
    n_draws,
    epochs,
    cal_seed,
    alpha,
    sample_seed,
    mark_key,
    mark_queries,
    margin,
    reference_seeds,
    progress,
):
    """Every removal method and seed, audited before and after.

    Removes M1 from the target by every method and seed and audits each version
    (docs/UNLEARNING.md). With --model, the target's recipe and data come from the
    version's tags: --data, --root, --data-seed and --epochs are refused. With
    --mark-key, the marks auditor joins EMA, the KS ratio and the calibrated auditor
    (docs/MARKS.md). With --reference-seeds, the forget set is also audited against
    redrawn non-member references, one per (seed, reference seed) pair.
    """
    from ema.experiments.unlearning.runner import run_unlearning_grid

    config = UnlearningGridConfig(
        methods=UNLEARNING_DEFAULTS.methods if methods.strip().lower() == "all" else comma_list(methods, str),
        seeds=comma_list(seeds, int),
        sizes=comma_list(sizes, int),
        n_draws=n_draws,
        **target_fields(data_name, root, data_seed, model_uri, epochs),
        alpha=alpha,
        cal_seed=cal_seed,
        sample_seed=sample_seed,
        mark_key=mark_key,
        mark_queries=mark_queries,
        margin=margin,
        reference_seeds=comma_list(reference_seeds, int),
    )
    outcome = run_unlearning_grid(config, progress=progress)
    echo_outcome(outcome, f"{len(outcome.versions) - 1} unlearned versions ({outcome.n_reused} reused)")


def target_fields(
    data_name: str | None, root: Path | None, data_seed: int | None, model_uri: str | None, epochs: int
) -> dict:
    """The options that say which target a grid audits, as its config's fields (``--epochs 0``: the paper's)."""
    return {
        "data": data_name,
        "data_root": str(root) if root else None,
        "data_seed": data_seed,
        "model_uri": model_uri,
        "epochs": epochs or None,
    }


def echo_outcome(outcome, counts: str) -> None:
    """A grid's tables, then one line: its parent run, its target, what it did (``counts``), its wall time."""
    click.echo(outcome.markdown)
    click.echo(f"parent run {outcome.run_id}; target {outcome.target_uri}; {counts}; {outcome.wall_seconds:.0f} s")


def comma_list(text: str, kind: type) -> tuple:
    """``"a,b"`` as a tuple of ``kind``; a usage error naming the text when an item does not convert."""
    try:
        return tuple(kind(v.strip()) for v in text.split(",") if v.strip())
    except ValueError as exc:
        raise click.UsageError(f"expected comma-separated {kind.__name__} values, got {text!r}") from exc
