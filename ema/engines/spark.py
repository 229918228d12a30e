"""The Spark engine: score a Parquet query table on executors and bring back counts, never per-sample arrays.

One audit is two Spark steps:

1. :func:`read_query` opens the table (images with their shape, or features; :mod:`ema.data.parquet`),
   checks its columns and finds its images' one shape;
2. :func:`audit_table` scores and flags each batch of images or features in one Python pass on
   the executors (:class:`ema.engines.batches.AuditBatch`): the model, its folder shipped with the
   job as an archive (:func:`ship_model`) and loaded once per worker as the in-process oracle loads it,
   gets the inputs the in-process oracle gives it, and each sample's signals, flags and M are
   computed beside it; the membership table (one row per sample) is written as Parquet, and
   while it is written Spark sums the table's row hashes, the samples and the flagged samples.
   The driver decides from these counts (:meth:`ema.auditors.EMAAuditor.audit_counts`), exactly
   as the in-process audit does.

The driver holds the session, the model and a handful of numbers, whatever the table's size.

A failure is one line (an :class:`~ema.errors.EMAError`), the Spark exception chained behind
it: a table Spark cannot read is worded as the in-process engine words it, an executor's
Python error by its last line (an ``ema.errors`` error raised on an executor stays of its kind,
with the in-process message: an ``InputError`` exits 3, a ``ModelAccessError`` 4). A session this module starts keeps
Spark's console log off (log4j2 at ``error`` while the JVM starts, then ``OFF``), so that no
Java or executor traceback reaches the screen; the chained exception carries them for whoever
asks (``ema audit --verbose``).
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import os
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from py4j.protocol import Py4JError
from pyspark import SparkFiles
from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ByteType, DoubleType, LongType, NumericType, StructField, StructType

import ema.errors as error_kinds
from ema.data.parquet import LEGACY_IMAGE_SHAPE, SHAPE_COLUMNS, check_columns, image_shape, unreadable_table
from ema.data.tables import DEFAULT_LABEL_COLUMN, INDEX_COLUMN
from ema.engines.batches import AuditBatch
from ema.engines.spark_start import MAX_REASON_CHARS, check_can_start, java_cause, java_causes, start_error
from ema.errors import EMAError, InputError
from ema.inputs import InputSpec, InputTransform
from ema.oracle import PyfuncOracle

# pyspark 4.3 warns, at every session start and pandas UDF, that pandas 3 is not "fully" supported: five
# warnings per audit on the screen. The engine's tests check its results against the in-process audit's.
warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)

#: The master when none is given: two local cores, no cluster.
DEFAULT_MASTER = "local[2]"
#: Spark's Python daemon in a local session this module starts: it loads the scoring code before it forks workers.
DAEMON_MODULE = "ema.engines.spark_daemon"
#: Settings of a session this module starts in local mode: bound to loopback, no UI, few shuffle partitions, and
#: whole Python tracebacks from executors (Spark's simplified ones drop an error's cause: a model's own frames,
#: behind the oracle's one-line error, which ``--verbose`` shows).
LOCAL_SETTINGS = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled": "false",
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
#: How the model's archive is named among the job's files (a unique suffix follows): one session may audit several.
MODEL_FOLDER_PREFIX = "ema-model-"
#: Where a Parquet row sits in its file (Spark's hidden file metadata): a table without ``index`` is numbered so.
ROW_INDEX = "_metadata.row_index"


@dataclass(frozen=True)
class QueryTable:
    """A query table as Spark reads it, checked.

    Attributes
    ----------
    frame : DataFrame
        ``index``, ``label``, then :attr:`inputs`.
    inputs : tuple of str
        ``pixels`` (and the shape columns, if the table has them), or the feature columns in the table's order.
    image_shape : tuple of int or None
        The images' (height, width, channels); None for a table of features.
    """

    frame: DataFrame
    inputs: tuple[str, ...]
    image_shape: tuple[int, int, int] | None


@dataclass(frozen=True)
class TableCounts:
    """What the driver gets back from a scored query table.

    Attributes
    ----------
    fingerprint : str
        A content hash of the table: the sum of every row's 64-bit hash (of label, index and
        the input columns: pixels and shape, or features), in hex; independent of row order and
        partitioning, and not the in-process fingerprint (a sha256 of the arrays).
    n_query : int
        Rows in the table.
    n_flagged : int
        Rows with M = 1 (flagged by any signal).
    missing_cells : int
        A table's missing numbers (null or NaN, sent as NaN with ``--allow-missing``) in the columns the model takes,
        as the in-process audit counts its query's; 0 for images.
    """

    fingerprint: str
    n_query: int
    n_flagged: int
    missing_cells: int


@contextmanager
def spark_session(master: str | None = None) -> Iterator[SparkSession]:
    """The active Spark session, or one started on ``master`` (default ``local[2]``) and stopped afterwards.

    A local session is bound to 127.0.0.1, runs no UI, starts its JVM with :data:`QUIET_LOG4J`
    and forks its Python workers from :data:`DAEMON_MODULE`, which has loaded the scoring code once
    (a cluster's executors keep Spark's own daemon: ema may reach them only as ``--py-files``);
    a cluster master (``spark://``, ``yarn``, ``k8s://``) gets the settings spark-submit or the
    cluster gives it. A session started here logs nothing to the console (:data:`SESSION_LOG_LEVEL`);
    an active one is used as it is.

    Raises
    ------
    ModelAccessError
        If a ``spark://`` master accepts no connection, or never accepts the application (retryable).
    EMAError
        If the session cannot start otherwise (no Java at ``JAVA_HOME`` or on PATH, a master that does not
        parse), as one line (:mod:`ema.engines.spark_start`).
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    master = master or DEFAULT_MASTER
    check_can_start(master)
    builder = SparkSession.builder.master(master).appName("ema-audit")
    builder = builder.config("spark.sql.execution.arrow.maxRecordsPerBatch", str(ROWS_PER_BATCH))
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        daemon = {"spark.python.daemon.module": DAEMON_MODULE}
        for key, value in {**LOCAL_SETTINGS, **daemon, "spark.driver.extraJavaOptions": _log4j_option()}.items():
            builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except (PySparkException, Py4JError) as exc:
        raise start_error(master, exc, java_cause(exc)) from exc
    session.sparkContext.setLogLevel(SESSION_LOG_LEVEL)
    if master.startswith("local"):
        splits = SPLITS_PER_CORE * session.sparkContext.defaultParallelism
        session.conf.set("spark.sql.files.minPartitionNum", str(splits))
    try:
        yield session
    finally:
        session.stop()


def read_query(spark: SparkSession, uri: str, *, label_column: str = DEFAULT_LABEL_COLUMN) -> QueryTable:
    """The query table at ``uri`` (any path or URI Spark reads), its columns checked.

    An image table's shape columns are read (a small job over three integer columns) for its one
    shape; a table without them holds 28 x 28 grey images. A table of features has its labels in
    ``label_column``; without an ``index`` column its rows are numbered from 0 in file order, as
    the in-process engine numbers them, which needs the table to be one file.

    Raises
    ------
    InputError
        If nothing readable as Parquet is there (no file, not Parquet, a corrupt footer), a
        column is missing or of the wrong type, its images are of several shapes, or a table
        of features of several files has no ``index``.
    """
    try:
        table = spark.read.parquet(uri)
    except (PySparkException, Py4JError) as exc:
        raise unreadable_table(uri, _read_reason(exc)) from exc
    types = {field.name: field.dataType.simpleString() for field in table.schema}
    if check_columns(types, where=uri, label_column=label_column) == "table":
        return _feature_table(table, uri, label_column)
    if SHAPE_COLUMNS[0] not in types:
        return QueryTable(table.select("index", "label", "pixels"), ("pixels",), LEGACY_IMAGE_SHAPE)
    try:
        shapes = table.select(*SHAPE_COLUMNS).distinct().limit(2).collect()
    except (PySparkException, Py4JError) as exc:  # a file Spark could not read past its footer
        raise _job_error(exc, uri=uri) from exc
    inputs = ("pixels", *SHAPE_COLUMNS)
    return QueryTable(table.select("index", "label", *inputs), inputs, image_shape(map(tuple, shapes), where=uri))


def _feature_table(table: DataFrame, uri: str, label_column: str) -> QueryTable:
    """A checked table of features as ``index``, ``label`` and the feature columns."""
    features = tuple(name for name in table.columns if name not in (label_column, INDEX_COLUMN))
    if INDEX_COLUMN in table.columns:
        index = _column(INDEX_COLUMN)
    elif len(table.inputFiles()) == 1:
        index = F.col(ROW_INDEX)
    else:
        raise InputError(
            f"{uri}: expected an {INDEX_COLUMN!r} column in a table of features of {len(table.inputFiles())} files "
            "(rows of several files have no one order to number them by); add one, or write the table as one file"
        )
    frame = table.select(
        index.cast("long").alias("index"),
        _column(label_column).cast("long").alias("label"),
        *(_column(name) for name in features),
    )
    return QueryTable(frame, features, None)


def _column(name: str) -> Column:
    """A column by its literal name (dots, spaces and backticks in it taken as they are)."""
    return F.col("`" + name.replace("`", "``") + "`")


@dataclass(frozen=True)
class ShippedModel:
    """The target model as an executor loads it: its folder, shipped with the job, as an in-process oracle.

    ``folder`` is the name of the folder's archive among the job's files (:func:`ship_model`),
    which Spark unpacks on each executor under the same name; the oracle takes the driver's
    input scaling, declared inputs, output kind and output name, and names the model by
    ``model_uri`` in its errors. Called on an executor; loaded once per Python worker.
    """

    folder: str
    model_uri: str
    outputs: str
    transform: InputTransform
    input_spec: InputSpec
    output_name: str | None = None

    def __call__(self) -> PyfuncOracle:
        if self not in _LOADED:
            _LOADED.clear()  # one model per worker: a long session's later audits do not pile up earlier models
            _LOADED[self] = PyfuncOracle(
                SparkFiles.get(self.folder),
                copy_of=self.model_uri,
                outputs=self.outputs,
                transform=self.transform,
                input_spec=self.input_spec,
                output_name=self.output_name,
                batch_size=ROWS_PER_BATCH,
            )
        return _LOADED[self]


#: The model this Python worker loaded last (a worker runs many tasks of a job, and the jobs after it).
_LOADED: dict[ShippedModel, PyfuncOracle] = {}


#: The archives this process made of its models' folders, by the folder's content digest; kept until the process
#: exits, since a session's executors may fetch an archive at any later job (one that joins late, or restarts).
_ARCHIVES: dict[str, Path] = {}
#: (application id, archive name) of the archives each Spark application of this process was given.
_SHIPPED: set[tuple[str, str]] = set()


def ship_model(spark: SparkSession, oracle: PyfuncOracle) -> ShippedModel:
    """Add ``oracle``'s model folder to the session as an archive, once per model; how executors load it.

    Executors never talk to the tracking store: Spark hands each the archive, unpacked
    (``SparkContext.addArchive``: a folder cannot be added on a cluster), and read the model's
    outputs as ``oracle`` does (the same ``outputs`` kind and ``output_name``). An archive added to
    a session stays one of its files for the session's life, and any later job may fetch it, so it
    lives in a folder of this process that is removed when the process exits
    (:func:`model_archive`), and a model folder audited again in the session (the same files, byte
    for byte) is not added again.

    Raises
    ------
    EMAError
        If Spark refuses the archive, as one line.
    """
    archive = model_archive(oracle)
    shipped = (spark.sparkContext.applicationId, archive.name)
    if shipped not in _SHIPPED:
        try:
            spark.sparkContext.addArchive(str(archive))
        except (PySparkException, Py4JError) as exc:
            raise EMAError(f"could not ship model {oracle.model_uri!r} to the executors: {java_cause(exc)}") from exc
        _SHIPPED.add(shipped)
    return ShippedModel(
        archive.name, oracle.model_uri, oracle.outputs, oracle.transform, oracle.input_spec, oracle.output_name
    )


def model_archive(oracle: PyfuncOracle) -> Path:
    """A zip of ``oracle``'s model folder, made once per content in a folder removed at exit (again if deleted)."""
    key = folder_digest(Path(oracle.local_path))
    if key not in _ARCHIVES or not _ARCHIVES[key].is_file():
        name = _archive_folder() / f"{MODEL_FOLDER_PREFIX}{uuid.uuid4().hex}"
        _ARCHIVES[key] = Path(shutil.make_archive(str(name), "zip", root_dir=oracle.local_path))
    return _ARCHIVES[key]


def folder_digest(folder: Path) -> str:
    """SHA-256 of every file's path (relative to ``folder``) and bytes: equal folders, equal digests."""
    digest = hashlib.sha256()
    for path in sorted(item for item in folder.rglob("*") if item.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        with path.open("rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()


@functools.cache
def _archive_folder() -> Path:
    """This process's folder for model archives, made on first use and removed when the process exits."""
    folder = Path(tempfile.mkdtemp(prefix="ema-spark-models-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def audit_table(table: QueryTable, *, batch: AuditBatch, out_uri: str) -> TableCounts:
    """Score and flag ``table`` on the executors (``batch``), write its rows to ``out_uri`` (Parquet), and count.

    The rows are those of the in-process ``membership.csv``: index, label, each signal, each
    signal's flag, M. The table's fingerprint and the counts are observed while the rows are
    written (``DataFrame.observe``): one pass over the table, nothing per sample collected.

    Raises
    ------
    EMAError
        If the model cannot be loaded on an executor, or a batch fails there (outputs that are
        not probabilities, the model's own error), as one line.
    InputError
        If the table has no rows, a file of it cannot be read (corrupt pages), its pixels are
        not the bytes its shape says, or they or its features do not fit the model's
        signature: the in-process engine's message.
    """
    read, counted = Observation("query"), Observation("flags")
    row_hash = F.xxhash64("label", "index", *(_column(name) for name in table.inputs)).cast("decimal(38,0)")
    missing = F.sum(_missing_numbers(table, batch.features or ())).alias("missing")
    batches = table.frame.observe(read, F.sum(row_hash).alias("hash"), missing).select(
        "index", "label", *(_column(name) for name in batch.input_columns)
    )
    flagged = batches.mapInPandas(batch, _membership_schema(batch.auditor.signals)).observe(
        counted,
        F.count(F.lit(1)).alias("n"),
        F.sum(F.col("M").cast("long")).alias("M"),
    )
    try:
        flagged.write.parquet(out_uri)  # refuses an existing path: a membership table is never overwritten
    except (PySparkException, Py4JError) as exc:  # a failed Spark job: an executor's error, deep in the message
        raise _job_error(exc, uri=batch.where) from exc
    counts = counted.get
    if not counts["n"]:
        raise InputError(f"{batch.where}: expected at least one row, got an empty table")
    observed = read.get
    fingerprint = format(int(observed["hash"]) % 2**64, "016x")
    return TableCounts(fingerprint, int(counts["n"]), int(counts["M"]), missing_cells=int(observed["missing"]))


def _missing_numbers(table: QueryTable, features: tuple[str, ...]) -> Column:
    """How many of a row's numbers in ``features`` (those the model takes; none for images) are missing (null or NaN);
    text columns are left out (a missing text cell is refused, never sent)."""
    types = {field.name: field.dataType for field in table.frame.schema}
    numbers = [_column(name).cast("double") for name in features if isinstance(types[name], NumericType)]
    if not numbers:
        return F.lit(0)
    return F.size(F.filter(F.array(*numbers), lambda value: value.isNull() | F.isnan(value)))


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
        error = getattr(error_kinds, kind.removeprefix("ema.errors."), None) if kind.startswith("ema.errors.") else None
        if isinstance(error, type) and issubclass(error, EMAError):  # the in-process kind: its exit code, its retry
            return error(message[:MAX_REASON_CHARS])
        return EMAError(f"the Spark audit failed: {python}")
    if _unreadable_file(exc) is not None:
        return unreadable_table(uri, _read_reason(exc))
    return EMAError(f"the Spark audit failed: {java_cause(exc)}")


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
    reason, path = java_cause(exc), _unreadable_file(exc)
    return reason if path is None or path in reason else f"{path}: {reason}"[:MAX_REASON_CHARS]


def _unreadable_file(exc: BaseException) -> str | None:
    """The file of a ``FAILED_READ_FILE`` error in ``exc``'s Java causes, else None."""
    for cause in java_causes(exc):
        try:
            if cause.getCondition().startswith(FAILED_READ_FILE):
                return str(cause.getMessageParameters().get("path"))
        except Py4JError:  # a Java exception that is not one of Spark's (no condition)
            continue
    return None
