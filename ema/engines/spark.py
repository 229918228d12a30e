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

A failure is one line (:class:`~ema.errors.InputError` or :class:`~ema.errors.EMAError`), the
Spark exception chained behind it: a table Spark cannot read is worded as the in-process engine
words it, an executor's Python error by its last line (an ``InputError`` raised on an executor
stays an ``InputError``, with the in-process message). A session this module starts keeps
Spark's console log off (log4j2 at ``error`` while the JVM starts, then ``OFF``), so that no
Java or executor traceback reaches the screen; the chained exception carries them for whoever
asks (``ema audit --verbose``).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.functions import pandas_udf
from pyspark.sql.types import ArrayType, ByteType, DoubleType, FloatType, LongType, StructField, StructType

from ema.data.parquet import check_columns, unreadable_table
from ema.engines.batches import FlagBatch, PrepareBatch
from ema.errors import EMAError, InputError
from ema.oracle import pyfunc_spark_udf

# pyspark 4.3 warns, at every session start and pandas UDF, that pandas 3 is not "fully" supported: five
# warnings per audit on the screen. The engine's tests check its results against the in-process audit's.
warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)

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
#: log4j2 settings of the JVM a local session starts: errors only, and no banner or default-level note.
QUIET_LOG4J = Path(__file__).with_name("spark-log4j2.properties")
#: Spark's log level once a session this module started is up: its errors reach the caller as exceptions.
SESSION_LOG_LEVEL = "OFF"
#: The header of a Python traceback, which an executor's Python error carries in the Spark exception's message.
TRACEBACK_HEADER = "Traceback (most recent call last):"
#: Spark's error condition for a file it could not read (not Parquet, a bad footer, corrupt pages).
FAILED_READ_FILE = "FAILED_READ_FILE"
#: Longest error line passed on from Spark; Java causes at most this deep are followed.
MAX_REASON_CHARS = 500
MAX_CAUSES = 32


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

    A local session is bound to 127.0.0.1, runs no UI and starts its JVM with :data:`QUIET_LOG4J`;
    a cluster master (``spark://``, ``yarn``, ``k8s://``) gets the settings spark-submit or the
    cluster gives it. A session started here logs nothing to the console (:data:`SESSION_LOG_LEVEL`);
    an active one is used as it is.

    Raises
    ------
    EMAError
        If the session cannot start (no Java, a master that does not answer or parse), as one line.
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
        for key, value in {**LOCAL_SETTINGS, "spark.driver.extraJavaOptions": _log4j_option()}.items():
            builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except (PySparkException, Py4JError) as exc:
        raise EMAError(f"could not start a Spark session on {master}: {_java_cause(exc)}") from exc
    session.sparkContext.setLogLevel(SESSION_LOG_LEVEL)
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
        If nothing readable as Parquet is there (no file, not Parquet, a corrupt footer), or a
        column is missing or of the wrong type.
    """
    try:
        table = spark.read.parquet(uri)
    except (PySparkException, Py4JError) as exc:
        raise unreadable_table(uri, _read_reason(exc)) from exc
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
        If the model's UDF cannot be made, or a batch fails on an executor (outputs that are
        not probabilities, the model's own error), as one line.
    InputError
        If the table has no rows, a file of it cannot be read (corrupt pages), or its pixels
        are not 784 bytes: the in-process engine's message.
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
    except (PySparkException, Py4JError) as exc:  # a failed Spark job: an executor's error, deep in the message
        raise _job_error(exc, uri=prepare.where) from exc
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


def _log4j_option() -> str:
    """The JVM option that points log4j2 at :data:`QUIET_LOG4J` (as a URI: a path with spaces stays one word)."""
    return f"-Dlog4j2.configurationFile={QUIET_LOG4J.resolve().as_uri()}"


def _job_error(exc: BaseException, *, uri: str) -> EMAError:
    """A failed Spark job as one line: the executor's Python error, else the file it could not read, else the cause."""
    python = _python_error(str(exc))
    if python is not None:
        kind, _, message = python.partition(": ")
        if kind == "ema.errors.InputError":
            return InputError(message[:MAX_REASON_CHARS])
        return EMAError(f"the Spark audit failed: {message if kind.startswith('ema.errors.') else python}")
    if _unreadable_file(exc) is not None:
        return unreadable_table(uri, _read_reason(exc))
    return EMAError(f"the Spark audit failed: {_java_cause(exc)}")


def _python_error(text: str) -> str | None:
    """The exception line (``Kind: message``) of the last Python traceback in ``text``, or None if it has none.

    An executor's Python error reaches the driver as its formatted traceback inside the Spark
    exception's message; the exception line is the first unindented line after the header.
    """
    _, header, tail = text.rpartition(TRACEBACK_HEADER)
    if not header:
        return None
    lines = [line for line in tail.splitlines() if line.strip() and not line[0].isspace()]
    return lines[0].strip()[:MAX_REASON_CHARS] if lines else None


def _read_reason(exc: BaseException) -> str:
    """Why Spark could not read a table: the root cause, naming the file when the cause does not."""
    reason, path = _java_cause(exc), _unreadable_file(exc)
    return reason if path is None or path in reason else f"{path}: {reason}"[:MAX_REASON_CHARS]


def _unreadable_file(exc: BaseException) -> str | None:
    """The file of a ``FAILED_READ_FILE`` error in ``exc``'s Java causes, else None."""
    for cause in _java_causes(exc):
        try:
            if cause.getCondition().startswith(FAILED_READ_FILE):
                return str(cause.getMessageParameters().get("path"))
        except Py4JError:  # a Java exception that is not one of Spark's (no condition)
            continue
    return None


def _java_cause(exc: BaseException) -> str:
    """The first line of the innermost Java cause behind ``exc``; of ``exc``'s own message when it has none."""
    causes = _java_causes(exc)
    text = (causes[-1].getMessage() or causes[-1].toString()) if causes else str(exc)
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[0][:MAX_REASON_CHARS] if lines else type(exc).__name__


def _java_causes(exc: BaseException) -> list:
    """The Java exception behind a Py4J error and its causes, outermost first; none for other errors."""
    causes, cause = [], getattr(exc, "java_exception", None)
    while cause is not None and len(causes) < MAX_CAUSES:
        causes.append(cause)
        cause = cause.getCause()
    return causes
