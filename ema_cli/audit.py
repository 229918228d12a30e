"""`ema audit`: audit a query set against a model reached as a black box."""

import click

from ema.workflows.options import (
    AUC_METRIC,
    CALIBRATION_MODEL_NAME,
    DEFAULT_MARGIN,
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_TARGET_URI,
    DEFAULT_TIMEOUT,
    EMA_TESTS,
    ENGINE_IN_PROCESS,
    ENGINES,
    HTTP_FORMATS,
    INPUT_DTYPES,
    MAX_IMAGE_SIDE,
    METHODS,
    METRIC_N_QUERY,
    OUTPUT_KINDS,
    PIXEL_ORDERS,
    QUERY_NAMES,
    THRESHOLD_MODES,
    engine_help,
    is_attack_metric,
    method_help,
    shown_run_warnings,
)
from ema_cli.options import (
    allow_missing_option,
    alpha_option,
    augment_option,
    cal_seed_option,
    certify_level_option,
    device_option,
    empty_is_none,
    k_option,
    label_column_option,
    margin_option,
    mark_key_option,
    max_params_option,
    max_query_option,
    progress_option,
    query_file_option,
    recipe_option,
    timeout_option,
    workflow_command,
)
from ema_cli.param_types import ChoiceOrEmpty
from ema_cli.supplied_calibration import supplied_calibration, supplied_calibration_options

#: MLproject's ``query`` left at its default (an empty ``--query``): M1, unless ``-P query_file`` or ``query_table``
#: names the query (MLproject passes ``--query {query}`` always).
PROJECT_DEFAULT_QUERY = ""


@click.command("audit")
@click.option(
    "--model",
    "model_uri",
    help=(
        "The model: models:/NAME@ALIAS, models:/NAME/VERSION, runs:/RUN/PATH or a local path. "
        f"Default: {DEFAULT_TARGET_URI}, unless --model-url is given (then no registry lookup)."
    ),
)
@click.option(
    "--model-url",
    help=(
        "Score through a scoring server instead, e.g. http://127.0.0.1:5001/invocations; with --model, "
        "the registered model's signature gives the inputs."
    ),
)
@click.option(
    "--input-shape",
    help=(
        "The model's input shape after the batch, e.g. 784, 28,28, 1,28,28 or 28,28,1. Default: its signature's "
        "(else its input example's; over HTTP without --model, 1,28,28)."
    ),
)
@click.option(
    "--input-dtype",
    type=click.Choice(INPUT_DTYPES),
    help=(
        "The model's input type: integer types get the pixel values 0-255 (the workbench's own models take "
        "uint8), float types pixels in [0, 1]. Default: its signature's (over HTTP without --model, float32)."
    ),
)
@click.option(
    "--pixel-order",
    type=click.Choice(PIXEL_ORDERS),
    default=PIXEL_ORDERS[0],
    show_default=True,
    help=(
        "How colour images are flattened for a model that takes them flat (a (-1, H*W*C) signature, or H*W*C pixel "
        "columns), for it and its clone: chw channel by channel, as torch's Flatten of (n, C, H, W); hwc pixel by "
        "pixel, as numpy's x.reshape(n, -1) of (n, H, W, C) images (most scikit-learn models). Changes nothing for "
        "grey images or a model that takes them shaped (C, H, W) or (H, W, C)."
    ),
)
@click.option(
    "--image-size",
    type=click.IntRange(0, MAX_IMAGE_SIDE),
    default=0,
    show_default=True,
    help=(
        "Resize the images of every set the audit reads (query, --reference, --members, calibration members and "
        "non-members) to N x N (centre-cropped to a square, bilinear, with Pillow) before scoring. 0: never resize "
        "(images that do not fit the model's signature are refused)."
    ),
)
@click.option(
    "--query",
    type=ChoiceOrEmpty(QUERY_NAMES),
    help=(
        "A named query set: M1..M5 (members), M6 (held out), S (other domain). Empty (MLproject's default): M1, "
        "unless --query-file or --query-table names the query (`mlflow run -e audit -P query_file=FILE`)."
    ),
)
@query_file_option
@label_column_option
@allow_missing_option
@click.option(
    "--query-table",
    help=(
        "A Parquet query table, as `ema data export` writes: images (label, index, pixels, height, width, channels) "
        "or features (label, optional index, one column each, numbers or text); with --engine spark any URI Spark "
        "reads (hdfs://, s3a://)."
    ),
)
@click.option(
    "--engine",
    type=click.Choice(ENGINES),
    default=ENGINE_IN_PROCESS,
    show_default=True,
    help=engine_help(),
)
@click.option(
    "--spark-master",
    help="With --engine spark: the master URL, e.g. spark://host:7077. Default: the active session, else local[2].",
)
@click.option(
    "--membership-out",
    help=(
        "With --engine spark: write the per-sample membership table (Parquet) here instead of logging it as the "
        "run's membership.parquet artifact; required on a cluster."
    ),
)
@click.option(
    "--method",
    type=click.Choice(METHODS),
    default="ema",
    show_default=True,
    help=method_help(),
)
@click.option(
    "--test", type=click.Choice(EMA_TESTS), default="t", show_default=True, help="Test whose p-value gives the verdict."
)
@alpha_option
@k_option
@cal_seed_option
@click.option(
    "--threshold-mode",
    type=click.Choice(THRESHOLD_MODES),
    default="global",
    show_default=True,
    help="One threshold per metric, or per metric and class.",
)
@click.option(
    "--outputs",
    type=click.Choice(OUTPUT_KINDS),
    default="auto",
    show_default=True,
    help="What the model returns; auto accepts probabilities or labels and refuses logits with advice.",
)
@click.option(
    "--output-name",
    help="Which named output to read (e.g. an ONNX model's). Default: the probability-like one.",
)
@click.option(
    "--calibration-outputs",
    type=click.Choice(OUTPUT_KINDS),
    help="What the --calibration-model returns. Default: as --outputs.",
)
@recipe_option
@click.option(
    "--input-scale",
    type=float,
    help="Multiply [0, 1] pixels by this before the model (e.g. 255). Default: the recipe's, else 1.",
)
@click.option(
    "--normalize",
    help=(
        "MEAN,STD subtracted and divided after scaling; per channel, the means then the stds "
        "(0.485,0.456,0.406,0.229,0.224,0.225), or imagenet for those. Default: the recipe's, else none."
    ),
)
@click.option(
    "--calibration-file",
    type=click.Path(dir_okay=False),
    callback=empty_is_none,
    help=(
        "Your own data from the target's domain, disjoint from its training data (.npz, .csv or .parquet, of the "
        "query's kind and columns): the calibration model trains on half of it, thresholds are picked on the other "
        "half, and it is the default --reference. Default: the calibration split of the data the target was trained "
        "on (its registered data source)."
    ),
)
@supplied_calibration_options
@click.option(
    "--reference",
    "reference_file",
    type=click.Path(dir_okay=False),
    help=(
        "A set file (.npz, .csv, .parquet) of data the target never saw: the calibrated auditor's non-member "
        "reference, and what every method's warnings score the target on (default: --calibration-file, else "
        "--calibration-nonmembers with --calibration-model, else the data's calibration set)."
    ),
)
@click.option(
    "--members",
    "members_file",
    type=click.Path(dir_okay=False),
    help=(
        "With --method calibrated or ema+calibrated: a set file (.npz, .csv, .parquet) of samples the target was "
        "trained on "
        "(default: a workbench target's other training folds; none known: transfer from the calibration model)."
    ),
)
@augment_option(
    "with --method calibrated on images, the query and both references; it raises the score's information and "
    "lowers the certifiable margin; needs a member reference"
)
@margin_option(
    DEFAULT_MARGIN,
    "With --method calibrated (auto: with a member reference) or marks (the trigger's effect)",
    unset=True,
)
@mark_key_option(
    "With --method marks: the key file `ema mark` wrote. The trigger is stamped on the query's images, which "
    "should be your own clean images (e.g. --query M6), never the marked file"
)
@click.option(
    "--queries",
    type=click.IntRange(min=1),
    help="With --method marks: audit the first N images of the query, each scored clean and stamped. Default: 200.",
)
@certify_level_option
@max_query_option
@click.option(
    "--strict",
    is_flag=True,
    help="A warned audit gets the verdict inconclusive and the command exits non-zero.",
)
@click.option(
    "--figures/--no-figures",
    default=True,
    show_default=True,
    help="Draw report.html's figures (score distributions, ROC curves) and log them under figures/. "
    "--no-figures: the same verdict, numbers and report without them, and a shorter process (matplotlib "
    "is not imported).",
)
@timeout_option(DEFAULT_TIMEOUT)
@max_params_option
@click.option(
    "--request-timeout",
    type=float,
    default=DEFAULT_REQUEST_TIMEOUT,
    show_default=True,
    help="With --model-url: seconds one scoring request may take (wall time, retried up to 3 times).",
)
@click.option(
    "--http-concurrency",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="With --model-url: scoring requests in flight at once (helps a server with several workers).",
)
@click.option(
    "--http-format",
    type=click.Choice(HTTP_FORMATS),
    default="auto",
    show_default=True,
    help="With --model-url: request bodies as JSON or Parquet; auto: Parquet when --model's signature declares "
    "the inputs (JSON if the server refuses it), else JSON.",
)
@click.option(
    "--calibration-name",
    default=CALIBRATION_MODEL_NAME,
    show_default=True,
    help="Registered name of calibration models.",
)
@device_option
@progress_option
@workflow_command
def audit(
    model_uri,
    model_url,
    input_shape,
    image_size,
    query,
    query_file,
    input_scale,
    normalize,
    calibration_model,
    calibration_members,
    calibration_nonmembers,
    progress,
    **options,
):
    """Was this query set used to train the model? Logs rho_EMA, the verdict and per-sample flags."""
    from ema.workflows.audit import AuditConfig
    from ema.workflows.audit import audit as audit_workflow
    from ema.workflows.target import input_shape_from_option, transform_from_options

    if query == PROJECT_DEFAULT_QUERY:  # MLproject's `query` left as it is: a file or table named by -P, else M1
        query = None if query_file is not None or options["query_table"] is not None else QUERY_NAMES[0]
    if sum(v is not None for v in (query, query_file, options["query_table"])) != 1:
        raise click.UsageError("give exactly one of --query NAME, --query-file FILE or --query-table URI")
    config = AuditConfig(
        model_uri=model_uri if model_uri is not None or model_url is not None else DEFAULT_TARGET_URI,
        model_url=model_url,
        input_shape=input_shape_from_option(input_shape),
        image_size=image_size or None,
        query=query,
        query_file=query_file,
        transform=transform_from_options(input_scale, normalize),
        calibration=supplied_calibration(calibration_model, calibration_members, calibration_nonmembers),
        timeout=click.get_current_context().params["timeout"],  # the command's limit, recorded with the audit
        **options,
    )
    with shown_run_warnings() as shown:  # those shown as they arose are not printed again below
        outcome = audit_workflow(config, progress=progress)
    click.echo(f"{outcome.query}: |D_q|={outcome.primary.n_query} ({outcome.access}; run {outcome.run_id})")
    for method, result in outcome.results.items():
        headline = {k: v for k, v in result.metrics.items() if k != METRIC_N_QUERY and not is_attack_metric(k)}
        click.echo(f"  {method}: {' '.join(shown_metric(k, v) for k, v in headline.items())} -> {result.verdict}")
        aucs = {k.partition(".")[2]: v for k, v in result.metrics.items() if k.startswith(f"{AUC_METRIC}.")}
        if aucs:
            strength = ", ".join(f"{signal} {auc:.3g}" for signal, auc in aucs.items())
            click.echo(f"  {method}: attack AUC where membership is known: {strength}")
        if "evidence" in result.thresholds:
            click.echo(f"  {method}: {result.thresholds['evidence']}")
    for warning in outcome.warnings:
        if warning not in shown:
            click.echo(f"warning: {warning}", err=True)
    if outcome.withheld:
        raise click.ClickException(
            f"every verdict is withheld (inconclusive): the inputs do not reach the model as its training data did "
            f"({len(outcome.withheld)} warning(s) above say how; run {outcome.run_id})"
        )
    if config.strict and outcome.warnings:
        raise click.ClickException(
            f"--strict: the audit carries {len(outcome.warnings)} warning(s), so its verdict is inconclusive "
            f"(run {outcome.run_id})"
        )


def shown_metric(key: str, value: float) -> str:
    """``key value`` as the audit prints it; a NaN (not computed, not logged) as its metric calls it:
    ``information (not estimable)``, ``min_detectable_fraction (not reached)``."""
    from ema.workflows.methods import metric_vocabulary

    if value == value:
        return f"{key} {value:.4g}"
    vocabulary = metric_vocabulary()
    return f"{key} ({vocabulary[key].undefined if key in vocabulary else 'undefined'})"
