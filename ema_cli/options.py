"""Click options shared by several commands, defined once."""

from __future__ import annotations

import functools
import traceback
from collections.abc import Callable
from pathlib import Path

import click

from ema.workflows.options import (
    ARCHITECTURES,
    AUDIT_BYTES_PER_IMAGE,
    AUGMENT_NONE,
    AUGMENTATIONS,
    AUTO_MARGIN,
    DATA_SOURCES,
    DEFAULT_DATA,
    DEFAULT_EXPERIMENT,
    DEFAULT_LABEL_COLUMN,
    DEFAULT_MAX_PARAMS,
    DEFAULT_MAX_QUERY,
    DEFAULT_TARGET_URI,
    DEVICE_FORMS,
    MAX_IMAGE_SIDE,
    N_SHIFT_VIEWS,
    OPTIMIZERS,
    QUERY_NAMES,
    TARGET_MODEL_NAME,
    EMAError,
    ImageFormat,
    InputError,
    TrainSpec,
    command_limits,
    configure,
    parse_device,
    redact_url,
    store_unreachable,
)
from ema_cli.cli import STARTED
from ema_cli.exit_codes import exit_code
from ema_cli.param_types import MarginType, OpenRangeType

DEFAULTS = TrainSpec()


def compose(*decorators: Callable) -> Callable:
    def apply(fn: Callable) -> Callable:
        for decorator in reversed(decorators):
            fn = decorator(fn)
        return fn

    return apply


experiment_option = click.option(
    "--experiment-name",
    default=DEFAULT_EXPERIMENT,
    show_default=True,
    help="MLflow experiment for the runs (ignored under `mlflow run`, which picks its own).",
)
verbose_option = click.option(
    "--verbose",
    is_flag=True,
    help=(
        "On failure, print the error's full traceback (with the Spark executor's, under --engine spark) before its "
        "one-line message. Default: the one line only."
    ),
)
k_option = click.option(
    "--k",
    "k",
    type=click.IntRange(0, 100),
    default=100,
    show_default=True,
    help="Calibration quality: percent of calibration images left clean.",
)
cal_seed_option = click.option(
    "--cal-seed", type=int, default=0, show_default=True, help="Seed of the calibration split and corruption."
)


certify_level_option = click.option(
    "--certify-level",
    type=OpenRangeType(0.5, 1),
    default=None,
    help="One-sided level of the retained share's upper bound that certifies not_memorized (default: 1 - alpha / 2).",
)


alpha_option = click.option(
    "--alpha",
    type=OpenRangeType(0, 1),
    default=0.1,
    show_default=True,
    help="Significance level: rho <= alpha means not memorized.",
)
model_option = click.option(
    "--model",
    "model_uri",
    default=DEFAULT_TARGET_URI,
    show_default=True,
    help="The model: models:/NAME@ALIAS, models:/NAME/VERSION, runs:/RUN/PATH or a local path.",
)
recipe_option = click.option(
    "--recipe",
    "recipe_file",
    type=click.Path(dir_okay=False),
    help=(
        "JSON or YAML training recipe, or a named one (paper-medical: ResNet-18, Adam lr 2e-5, 30 epochs, weight "
        "decay 1e-7). For `ema audit` and `ema calibrate`: for a model not trained by `ema train` (default: the "
        "version's tag); for `ema train`: the recipe, whose fields the training options given override."
    ),
)
progress_option = click.option("--progress/--no-progress", default=True, show_default=True, help="Show progress bars.")
data_option = click.option(
    "--data",
    "data_name",
    type=click.Choice(DATA_SOURCES),
    default=DEFAULT_DATA,
    show_default=True,
    help="Data source to draw the splits from.",
)
root_option = click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder holding the source's files (default: none; fashion then reads /usr/share/datasets/fashion-mnist).",
)
query_option = click.option(
    "--query",
    type=click.Choice(QUERY_NAMES),
    help="A named query set: M1..M5 (members), M6 (held out), S (other domain).",
)
query_file_option = click.option(
    "--query-file",
    type=click.Path(dir_okay=False),
    help=(
        "A set file: .npz with arrays x (uint8 images (N, H, W[, C]), or numbers (N, features)), y and optional "
        "index; or a .csv or .parquet table, one column per feature and a label column (--label-column)."
    ),
)


def empty_is_none(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """An optional path given as "" (an MLproject parameter's default) is not given."""
    return value or None


def parse_folds(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    """``--fold FOLD=FILE`` (repeatable) as ``{FOLD: FILE}``; a fold named twice, or no ``=``, is a usage error."""
    folds: dict[str, str] = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not path or name in folds:
            raise click.BadParameter(f"expected FOLD=FILE with each fold once, e.g. M1=marked.npz, got {value!r}")
        folds[name] = path
    return folds


label_column_option = click.option(
    "--label-column",
    default=DEFAULT_LABEL_COLUMN,
    show_default=True,
    help=(
        "The label column of every .csv or .parquet set this command reads; an 'index' column, if present, gives "
        "positions, every other column is a feature."
    ),
)
allow_missing_option = click.option(
    "--allow-missing",
    type=click.BOOL,
    is_flag=False,
    flag_value=True,
    default=False,
    metavar="[true|false]",
    help=(
        "Keep the missing numbers (empty cells, nulls, NaN) of every table this command reads (.csv, .parquet, "
        ".npz, a query table) and send them to the model as NaN, for a model whose own pipeline imputes them. "
        "Given alone it means true; it also takes a value (true, false), as MLproject's allow_missing parameter "
        "passes it. Default: false, such a table is refused. Infinite numbers and missing text are refused either way."
    ),
)
max_params_option = click.option(
    "--max-params",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_PARAMS,
    show_default=True,
    help=(
        "The most parameters a model this command trains may have, estimated from its recipe before anything is "
        "built; its training may also hold at most 16 bytes per such parameter. The default takes about 8 GB to "
        "train (float32 weight, gradient and Adam's two moments): a third of a 24 GB machine."
    ),
)


def augment_option(use: str) -> Callable:
    """``--augment``: score each image as itself and its one-pixel shifts (``shifts``) or not; ``use``: what for."""
    return click.option(
        "--augment",
        type=click.Choice(AUGMENTATIONS),
        default=AUGMENT_NONE,
        show_default=True,
        help=f"With shifts, each image is scored as {N_SHIFT_VIEWS} (itself and its 8 one-pixel shifts, "
        f"{N_SHIFT_VIEWS}x the queries): {use}.",
    )


def margin_option(default: float | str, use: str, *, unset: bool = False) -> Callable:
    """``--margin``: the retained share ``not_memorized`` must be certified below, or ``auto``; ``use``: where.

    ``unset``: the option's value is None unless given (``default`` is then what the help names), so that
    a command can refuse it where it would change nothing.
    """
    return click.option(
        "--margin",
        type=MarginType(),
        default=None if unset else default,
        show_default=not unset,
        help=(
            f"{use}: not_memorized only if the retained share's upper bound is at most this; {AUTO_MARGIN}: the "
            "audit's certifiable_margin (certified with probability 0.85 if the query was removed, from the query "
            "and reference sizes, fixed before the query is scored)." + (f" Default: {default}." if unset else "")
        ),
    )


def mark_key_option(use: str) -> Callable:
    """``--mark-key FILE``: the key file ``ema mark`` wrote, read inside the run and never logged; ``use``: what for."""
    return click.option(
        "--mark-key", type=click.Path(dir_okay=False), help=f"{use} (read inside the run, never logged)."
    )


def timeout_option(default: float | None) -> Callable:
    """``--timeout``: seconds the whole command may take (``default`` None: no limit)."""
    return click.option(
        "--timeout",
        type=float,  # checked by command_limits, with the workbench's message
        default=default,
        show_default=default is not None,
        help=(
            "Seconds of wall time the whole command may take from the program's start, imports, training and "
            "scoring included; past them it stops, "
            "its run is FAILED and nothing more is registered." + (" Default: no limit." if default is None else "")
        ),
    )


max_query_option = click.option(
    "--max-query",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_QUERY,
    show_default=True,
    help=(
        "The most images a set read from a file or table may hold (query, references, calibration members, "
        "retained and forget sets), checked from its header before it is read. An audit holds about "
        f"{AUDIT_BYTES_PER_IMAGE // 1000} KB per image at its peak (measured), so the default needs about "
        f"{DEFAULT_MAX_QUERY * AUDIT_BYTES_PER_IMAGE / 1e9:.0f} GB beside the process's own 1 GB: a fifth of a "
        "24 GB machine."
    ),
)


def image_options(fn: Callable) -> Callable:
    """``--image-size`` and ``--channels`` of an image-folder source, passed on as ``image`` (an ImageFormat)."""

    @click.option(
        "--image-size",
        type=click.IntRange(1, MAX_IMAGE_SIDE),
        help=(
            "Resize the source's images to N x N (centre-cropped to a square, bilinear, with Pillow). Default: their "
            "own size, which they must then share (chest-xray, covidx); 28 for pneumoniamnist. MNIST-like sources "
            "stay 28x28."
        ),
    )
    @click.option(
        "--channels",
        type=click.Choice(["1", "3"]),
        help="Read the source's images as grey (1) or colour (3, grey repeated). Default: 1.",
    )
    @functools.wraps(fn)
    def wrapper(image_size, channels, **kwargs):
        return fn(image=ImageFormat(image_size, int(channels) if channels else None), **kwargs)

    return wrapper


def _device_form(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """``--device`` checked for its form only (the machine is asked when the command runs, before its run starts)."""
    try:
        return parse_device(value)
    except InputError as exc:
        raise click.BadParameter(str(exc)) from exc


device_option = click.option(
    "--device",
    default="auto",
    show_default=True,
    callback=_device_form,
    help=(
        f"Where torch trains and scores in this process: {DEVICE_FORMS}; auto is CUDA when available, else the "
        "CPU. The run records it; models are registered with CPU tensors either way, so they load anywhere."
    ),
)
data_seed_option = click.option("--data-seed", type=int, default=0, show_default=True, help="Seed of the data splits.")
model_name_option = click.option(
    "--model-name",
    default=TARGET_MODEL_NAME,
    show_default=True,
    help=(
        "Registered model name of the target. Its alias moves to each new version, which every command that names "
        "models:/NAME@target then reaches: give a target of other data a name of its own."
    ),
)

train_spec_options = compose(
    click.option(
        "--arch", type=click.Choice(ARCHITECTURES), default=DEFAULTS.arch, show_default=True, help="Architecture."
    ),
    click.option(
        "--hidden",
        default=",".join(map(str, DEFAULTS.hidden)),
        show_default=True,
        help="MLP hidden widths, comma-separated.",
    ),
    click.option(
        "--optimizer", type=click.Choice(OPTIMIZERS), default=DEFAULTS.optimizer, show_default=True, help="Optimizer."
    ),
    click.option("--lr", type=float, default=DEFAULTS.lr, show_default=True, help="Learning rate."),
    click.option("--momentum", type=float, default=DEFAULTS.momentum, show_default=True, help="SGD momentum."),
    click.option(
        "--weight-decay", type=float, default=DEFAULTS.weight_decay, show_default=True, help="L2 weight decay."
    ),
    click.option(
        "--lr-decay",
        type=float,
        default=DEFAULTS.lr_decay,
        show_default=True,
        help="Inverse-time learning-rate decay per step.",
    ),
    click.option(
        "--epochs", type=click.IntRange(min=1), default=DEFAULTS.epochs, show_default=True, help="Training epochs."
    ),
    click.option(
        "--batch-size", type=click.IntRange(min=1), default=DEFAULTS.batch_size, show_default=True, help="Batch size."
    ),
    click.option("--seed", type=int, default=DEFAULTS.seed, show_default=True, help="Seed of weights and batch order."),
)


def spec_from_options(
    arch, hidden, optimizer, lr, momentum, weight_decay, lr_decay, epochs, batch_size, seed
) -> TrainSpec:
    """A TrainSpec from the shared training options."""
    try:
        widths = tuple(int(h) for h in str(hidden).split(",") if h.strip())
    except ValueError as exc:
        raise click.BadParameter(f"expected comma-separated integers, got {hidden!r}", param_hint="--hidden") from exc
    return TrainSpec(
        arch=arch,
        hidden=widths,
        optimizer=optimizer,
        lr=lr,
        momentum=momentum,
        weight_decay=weight_decay,
        lr_decay=lr_decay,
        epochs=epochs,
        batch_size=batch_size,
        seed=seed,
    )


def given_fields(spec: TrainSpec, spec_options: dict) -> dict:
    """The fields of ``spec`` whose training options were given on the command line (not left at their default)."""
    context = click.get_current_context()
    given = [
        name
        for name in spec_options
        if context.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT)
    ]
    return {name: getattr(spec, name) for name in given}


#: Options the command runs under (``ema.limits.command_limits``) rather than passes on.
LIMIT_OPTIONS = ("max_params", "timeout")


def workflow_command(fn: Callable) -> Callable:
    """Configure tracking from --experiment-name, run under --max-params and --timeout (where the command has
    them), and turn EMAError into a one-line error without secrets (after its traceback under --verbose).

    The message is the screen's last boundary: any URL it quotes is shown with its
    credentials as ``***`` (:func:`ema.validation.redact_url`). The command exits with its
    kind's code (:mod:`ema_cli.exit_codes`).
    """
    return experiment_option(_tracked(fn, select_experiment=True))


def reading_command(fn: Callable) -> Callable:
    """As :func:`workflow_command`, for a command that only reads the store (``history``, ``compare``): it takes
    no --experiment-name and creates no experiment."""
    return _tracked(fn, select_experiment=False)


def _tracked(fn: Callable, *, select_experiment: bool) -> Callable:
    @verbose_option
    @functools.wraps(fn)
    def wrapper(verbose: bool, **kwargs):
        experiment = kwargs.pop("experiment_name", DEFAULT_EXPERIMENT)
        limits = {name: kwargs.pop(name) for name in LIMIT_OPTIONS if name in kwargs}
        started = (click.get_current_context().find_root().obj or {}).get(STARTED)
        try:
            with command_limits(**limits, started=started):
                configure(experiment, select_experiment=select_experiment)
                return fn(**kwargs)
        except Exception as exc:
            error = exc if isinstance(exc, EMAError) else store_unreachable(exc)  # the store went down mid-command
            if error is None:
                raise
            if verbose:
                click.echo(redact_url("".join(traceback.format_exception(exc))), err=True, nl=False)
            raise one_line_error(error) from exc

    return wrapper


def one_line_error(exc: Exception) -> click.ClickException:
    """``exc`` as click shows it: its message without secrets, exiting with the code of its kind."""
    error = click.ClickException(redact_url(str(exc)))
    error.exit_code = exit_code(exc)
    return error
