"""The Spark engine: score a Parquet query table on executors and bring back counts, never per-sample arrays.

One audit is two Spark steps:

1. :func:`read_query` opens the table (``label``, ``index``, ``pixels``; :mod:`ema.data.parquet`)
   and checks its columns;
2. :func:`audit_table` prepares each batch of images as the in-process oracle does, scores
   it through ``mlflow.pyfunc.spark_udf`` (the two chained in one Python worker), computes
   each sample's signals, flags and M on the executors, and writes the membership table (one
   row per sample) as Parquet; while it writes, Spark sums the table's row hashes, the
   samples and the flagged samples. The driver decides from these
   counts (:meth:`ema.auditors.EMAAuditor.audit_counts`), exactly as the in-process audit does.

The driver holds the session, the model's UDF and a handful of numbers, whatever the table's size.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pandas as pd
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.functions import pandas_udf
from pyspark.sql.types import ArrayType, ByteType, DoubleType, FloatType, LongType, StructField, StructType

from ema.data.parquet import check_columns
from ema.engines.batches import FlagBatch, PrepareBatch
from ema.errors import EMAError, InputError
from ema.oracle import pyfunc_spark_udf

#: The master when none is given: two local cores, no cluster.
DEFAULT_MASTER = "local[2]"
#: Settings of a session this module starts in local mode: bound to loopback, no UI, few shuffle partitions.
LOCAL_SETTINGS = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.showConsoleProgress": "false",
}
#: File splits per core in a local session: a table of a few large files is read in enough splits that
#: every core stays busy to the end (a 1,000,000-image table was 5 splits on 2 cores: the last ran alone).
SPLITS_PER_CORE = 4
#: Rows per Arrow batch handed to the Python UDFs (Spark's default is 10,000): the model sees batches this size.
ROWS_PER_BATCH = 4096


@dataclass(frozen=True)
class TableCounts:
    """What the driver gets back from a scored query table.

    Attributes
    ----------
    fingerprint : str
        A content hash of the table: the sum of every row's 64-bit hash (of label, index and
        pixels), in hex; independent of row order and partitioning, and not the in-process
        fingerprint (a sha256 of the arrays).
    n_query : int
        Rows in the table.
    n_flagged : int
        Rows with M = 1 (flagged by any signal).
    """

    fingerprint: str
    n_query: int
    n_flagged: int


@contextmanager
def spark_session(master: str | None = None) -> Iterator[SparkSession]:
    """The active Spark session, or one started on ``master`` (default ``local[2]``) and stopped afterwards.

    A local session is bound to 127.0.0.1 and runs no UI; a cluster master (``spark://``,
    ``yarn``, ``k8s://``) gets the settings spark-submit or the cluster gives it.
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    master = master or DEFAULT_MASTER
    builder = SparkSession.builder.master(master).appName("ema-audit")
    builder = builder.config("spark.sql.execution.arrow.maxRecordsPerBatch", str(ROWS_PER_BATCH))
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        for key, value in LOCAL_SETTINGS.items():
            builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    if master.startswith("local"):
        splits = SPLITS_PER_CORE * session.sparkContext.defaultParallelism
        session.conf.set("spark.sql.files.minPartitionNum", str(splits))
    try:
        yield session
    finally:
        session.stop()


def read_query(spark: SparkSession, uri: str) -> DataFrame:
    """The query table at ``uri`` (any path or URI Spark reads), its columns checked.

    Raises
    ------
    InputError
        If nothing readable as Parquet is there, or a column is missing or of the wrong type.
    """
    try:
        table = spark.read.parquet(uri)
    except AnalysisException as exc:
        raise InputError(f"could not read query table {uri!r} as Parquet: {_first_line(exc)}") from exc
    check_columns({field.name: field.dataType.simpleString() for field in table.schema}, where=uri)
    return table.select("index", "label", "pixels")


def audit_table(
    table: DataFrame, *, model_uri: str, prepare: PrepareBatch, flag: FlagBatch, out_uri: str
) -> TableCounts:
    """Score ``table`` through the model's Spark UDF, write one row per sample to ``out_uri`` (Parquet), and count.

    The rows are those of the in-process ``membership.csv``: index, label, each signal, each
    signal's flag, M. The table's fingerprint and the counts are observed while the rows are
    written (``DataFrame.observe``): one pass over the table, nothing per sample collected.

    Raises
    ------
    EMAError
        If the model's UDF cannot be made, or a batch fails on an executor (bad pixels,
        outputs that are not probabilities, the model's own error), as one line.
    InputError
        If the table has no rows.
    """
    inputs = pandas_udf(_prepared(prepare), ArrayType(FloatType()))
    model = pyfunc_spark_udf(table.sparkSession, model_uri, result_type="array<float>")
    read, counted = Observation("query"), Observation("flags")
    row_hash = F.xxhash64("label", "index", "pixels").cast("decimal(38,0)")
    scored = table.observe(read, F.sum(row_hash).alias("hash")).select(
        "index", "label", model(inputs("pixels")).alias("outputs")
    )
    flagged = scored.mapInPandas(flag, _membership_schema(flag.auditor.signals)).observe(
        counted,
        F.count(F.lit(1)).alias("n"),
        F.sum(F.col("M").cast("long")).alias("M"),
    )
    try:
        flagged.write.parquet(out_uri)  # refuses an existing path: a membership table is never overwritten
    except Exception as exc:  # a failed Spark job: its cause is the executor's Python error, deep in the message
        raise EMAError(f"the Spark audit failed: {_executor_cause(exc)}") from exc
    counts = counted.get
    if not counts["n"]:
        raise InputError("expected at least one image to score, got a query table with no rows")
    return TableCounts(
        fingerprint=format(int(read.get["hash"]) % 2**64, "016x"), n_query=int(counts["n"]), n_flagged=int(counts["M"])
    )


def _prepared(prepare: PrepareBatch):
    """``prepare`` as a function with the type hints ``pandas_udf`` reads (an iterator of batches, in and out)."""

    def prepared(batches: Iterator[pd.Series]) -> Iterator[pd.Series]:
        return prepare(batches)

    return prepared


def _membership_schema(signals: tuple[str, ...]) -> StructType:
    return StructType(
        [StructField("index", LongType()), StructField("label", LongType())]
        + [StructField(name, DoubleType()) for name in signals]
        + [StructField(f"flag_{name}", ByteType()) for name in signals]
        + [StructField("M", ByteType())]
    )


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:500] if lines else type(exc).__name__


def _executor_cause(exc: BaseException) -> str:
    """The last Python exception line in a failed Spark job's message (the executor's own error), else the first."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    causes = [line for line in lines if line.startswith(("ema.errors.", "mlflow.exceptions.")) or "Error: " in line]
    cause = causes[-1] if causes else (lines[0] if lines else type(exc).__name__)
    return cause.removeprefix("ema.errors.InputError: ").removeprefix("ema.errors.EMAError: ")[:500]
