"""An audit whose query is a Parquet table scored on Spark: the engine half of ``ema audit --engine spark``.

The driver resolves the target, scores the (small) references in-process as every audit does
(they give EMA's warnings and tell what the model returns), and calibrates EMA. The executors
score the query table and flag each sample (:mod:`ema.engines.spark`); the driver gets counts
back and decides with :meth:`ema.auditors.EMAAuditor.audit_counts`, so the metrics, tags and
verdict equal the in-process audit's on the same data. A row of the engine table
(:mod:`ema.workflows.engines`): :func:`check_spark` is its option check, and it runs the methods
whose ``MethodSpec.engines`` name it (EMA); the audit refuses the rest.
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tqdm.auto import tqdm

from ema.engines.batches import AuditBatch
from ema.errors import InputError, MissingDependencyError, pip_command
from ema.inputs import column_order
from ema.oracle import Oracle, PyfuncOracle, log_left_out
from ema.tracking import keys
from ema.tracking.runs import log_batch
from ema.workflows.audit_config import AuditConfig
from ema.workflows.audit_in_process import in_model_columns
from ema.workflows.audit_methods import ema_auditor
from ema.workflows.audit_session import AuditSession, Scored, audit_target, log_audit_params

#: How a Spark master URL may start, besides ``yarn`` (what spark-submit accepts): checked before a JVM starts.
SPARK_MASTER_PREFIXES = ("local", "spark://", "k8s://")


def check_spark(config: AuditConfig) -> None:
    """What the Spark engine can do: a query table, through a pyfunc UDF, on a master spark-submit accepts.

    Raises
    ------
    InputError
        Naming the option and the fix.
    """
    if config.query_table is None:
        raise InputError("expected a query table (--query-table URI) with --engine spark; `ema data export` writes one")
    if config.model_uri is None or config.model_url is not None:
        raise InputError(
            "expected a pyfunc model URI (--model) and no --model-url with --engine spark: executors load the model"
        )
    master = config.spark_master or ""
    if master and not (master == "yarn" or master.startswith(SPARK_MASTER_PREFIXES)):
        raise InputError(
            f"expected --spark-master local[N], spark://HOST:PORT, k8s://URL or yarn (what spark-submit "
            f"accepts), got {master!r}"
        )
    if config.membership_out is None and master and not master.startswith("local"):
        raise InputError(
            f"expected --membership-out URI (a filesystem every executor and the driver reach) with "
            f"--spark-master {master}: the executors cannot write to the driver's scratch folder"
        )


@contextmanager
def score_on_spark(config: AuditConfig, oracle: Oracle | None, progress: bool) -> Iterator[Scored]:
    """Score ``config.query_table`` on Spark and audit it with EMA; the membership table stays on disk.

    Yields while the membership table written to a scratch folder (no ``--membership-out``)
    still exists, so that the caller logs it as the ``membership.parquet`` artifact.

    Raises
    ------
    MissingDependencyError
        If pyspark is not installed.
    EMAError
        If the table is missing or malformed, or the Spark job fails.
    """
    spark_engine = _spark_engine()
    target = audit_target(config)  # config.validate refused --model-url with --engine spark
    log_audit_params(config, target)
    oracle = oracle or target.oracle(outputs=config.outputs)
    if not isinstance(oracle, PyfuncOracle):
        raise InputError(f"expected a pyfunc model for --engine spark, got {type(oracle).__name__}")
    if target.calibration_data is not None:  # in the model's columns, as the in-process engine lays it out
        calibration = in_model_columns(target.calibration_data, oracle.input_spec)
        target = dataclasses.replace(target, calibration_data=calibration)
    with tempfile.TemporaryDirectory(prefix="ema-spark-") as scratch:
        out_uri = config.membership_out or str(Path(scratch) / keys.ARTIFACT_MEMBERSHIP_PARQUET)
        with spark_engine.spark_session(config.spark_master) as spark:
            table = spark_engine.read_query(spark, config.query_table, label_column=config.label_column)
            kind = "table" if table.image_shape is None else "image"
            log_batch(params={keys.PARAM_SPARK_MASTER: spark.sparkContext.master, **config.query_params(target, kind)})
            session = AuditSession(config, target, None, oracle.with_progress(progress), progress)
            reference = session.nonmember_predictions
            auditor, tags = ema_auditor(session, reference.access)
            model = spark_engine.ship_model(spark, oracle)
            batch = _audit_batch(table, model, auditor, target, where=config.query_table, name=config.query_name)
            if progress:  # Spark's own console progress is off: one line says what the wait is for
                tqdm.write(scoring_line(config.query_table, table, spark.sparkContext.master), file=sys.stderr)
            counts = spark_engine.audit_table(table, batch=batch, out_uri=out_uri)
        log_batch(params={keys.PARAM_QUERY_FINGERPRINT: counts.fingerprint})
        result = auditor.audit_counts(counts.n_flagged, counts.n_query)
        if config.membership_out is not None:
            tags[keys.TAG_MEMBERSHIP_URI] = config.membership_out
        membership = {} if config.membership_out else {keys.ARTIFACT_MEMBERSHIP_PARQUET: Path(out_uri)}
        yield Scored(
            session,
            {result.method: result},
            tags,
            reference.access,
            reference.detected,
            counts.fingerprint,
            membership,
            query_missing_cells=counts.missing_cells,
        )


def scoring_line(uri: str, table, master: str) -> str:
    """What an audit on Spark waits for, said before its one job runs: the table, the master and the partitions the
    executors score (a :class:`ema.engines.spark.QueryTable`; counting its rows would cost a job of its own)."""
    partitions = table.frame.rdd.getNumPartitions()
    return f"scoring {uri} on Spark ({master}, {partitions} partition(s)); the verdict follows when the job ends"


def _audit_batch(table, model, auditor, target, *, where: str, name: str) -> AuditBatch:
    """How each batch of ``table`` (a :class:`ema.engines.spark.QueryTable` at ``where``) is scored and flagged.

    ``model`` loads the model on an executor. Images are resized as ``target`` resizes them
    (``--image-size``). A table's features go in the order a column-based signature names them
    (the extra columns left out and logged, a missing one refused, as in-process, by the
    table's ``name``), else all of them in the table's order; their missing numbers go as NaN where the target
    allows them (``--allow-missing``).

    Raises
    ------
    InputError
        If the table lacks a column the model's signature names, or options that act on pixels
        are given for a table of features: the in-process engine's line.
    """
    if table.image_shape is not None:
        shape, size = table.image_shape, target.image_size
        return AuditBatch(model, auditor, auditor.n_classes_, where, image_shape=shape, image_size=size)
    target.refuse_pixel_options(name, f"table of {len(table.inputs)} features")
    positions, extra = column_order(table.inputs, model.input_spec, where=name)
    log_left_out(name, extra)
    features = tuple(table.inputs[i] for i in positions)
    return AuditBatch(model, auditor, auditor.n_classes_, where, features=features, allow_missing=target.allow_missing)


def _spark_engine():
    """:mod:`ema.engines.spark`, or a one-line error saying how to install pyspark."""
    try:
        from ema.engines import spark
    except ImportError as exc:
        raise MissingDependencyError(
            f"--engine spark needs pyspark and pyarrow ({exc}): {pip_command('pyspark')} (and Java 17+)"
        ) from exc
    return spark
