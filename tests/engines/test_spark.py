"""The Spark engine in local[2]: an audit of a Parquet query table equals the in-process audit of the same table."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from mlflow.tracking import MlflowClient

from ema.data.arrays import ArraySet
from ema.data.files import write_set
from ema.data.presets import load_splits
from ema.errors import EMAError, InputError, ModelAccessError
from ema.inputs import InputSpec, InputTransform
from ema.tracking import keys
from ema.workflows.audit import AuditConfig, audit
from ema.workflows.data import export_query
from tests.workflows.conftest import trained  # noqa: F401 (the module's registered target)
from tests.workflows.test_pipeline import artifacts_of, failed_runs

spark_engine = pytest.importorskip(
    "ema.engines.spark", reason="the Spark engine needs pyspark (pip install '.[spark]')"
)


@pytest.fixture(scope="session")
def spark():
    """One local[2] session for every test; audits find it active and leave it running."""
    with spark_engine.spark_session("local[2]") as session:
        yield session


@pytest.fixture(scope="module")
def tables(trained, tmp_path_factory):  # noqa: F811
    """M6 (held out) and M1 (members) of the target's splits, exported as Parquet query tables."""
    root = tmp_path_factory.mktemp("tables")
    return {name: str(export_query(root / name, query=name) and root / name) for name in ("M6", "M1")}


@pytest.fixture(scope="module")
def old_table(tables, tmp_path_factory) -> str:
    """M6 as tables were written before the shape columns: label, index, pixels."""
    path = tmp_path_factory.mktemp("old") / "m6-old"
    path.mkdir()
    pq.write_table(pq.read_table(tables["M6"]).select(["label", "index", "pixels"]), path / "part-0.parquet")
    return str(path)


def assert_same_membership(parquet, local) -> None:
    """The membership table at ``parquet`` (a Spark audit's) holds the in-process audit ``local``'s rows, by index."""
    expected = pd.read_csv(MlflowClient().download_artifacts(local.run_id, keys.ARTIFACT_MEMBERSHIP))
    pd.testing.assert_frame_equal(
        pd.read_parquet(parquet).sort_values("index", ignore_index=True),
        expected.sort_values("index", ignore_index=True),
        check_dtype=False,
    )


@pytest.mark.slow
def test_spark_audit_of_a_table_without_shape_columns_equals_in_process(trained, spark, old_table):  # noqa: F811
    _, outcome = trained
    local = audit(AuditConfig(model_uri=outcome.version.uri, query_table=old_table), progress=False)
    on_spark = audit(AuditConfig(model_uri=outcome.version.uri, query_table=old_table, engine="spark"), progress=False)
    assert (on_spark.primary.metrics, on_spark.primary.n_query) == (local.primary.metrics, 2000)
    assert_same_membership(MlflowClient().download_artifacts(on_spark.run_id, keys.ARTIFACT_MEMBERSHIP_PARQUET), local)


@pytest.mark.slow
def test_spark_audit_with_executors_in_processes_of_their_own_equals_in_process(trained, tables, tmp_path):  # noqa: F811
    """local-cluster: executors in JVMs and Pythons of their own get the model only as the job's archive.

    In a subprocess: the tests' local[2] session is active here, and an audit would use it.
    """
    _, outcome = trained
    out = tmp_path / "membership"
    command = ["audit", "--model", outcome.version.uri, "--query-table", tables["M6"], "--engine", "spark"]
    command += ["--spark-master", "local-cluster[2,1,1024]", "--membership-out", str(out), "--no-progress"]
    done = subprocess.run(
        [sys.executable, "-c", "from ema_cli.cli import run; run()", *command], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    local = audit(AuditConfig(model_uri=outcome.version.uri, query_table=tables["M6"]), progress=False)
    experiment = MlflowClient().get_run(local.run_id).info.experiment_id
    (on_cluster,) = MlflowClient().search_runs(
        [experiment],
        f"params.{keys.PARAM_SPARK_MASTER} = 'local-cluster[2,1,1024]' "
        f"and tags.`{keys.TAG_RUN_KIND}` = '{keys.RUN_KIND_AUDIT}'",
    )
    assert on_cluster.data.metrics == run_data(local.run_id).metrics
    assert_same_membership(out, local)


@pytest.mark.slow
def test_spark_audit_resizes_images_as_in_process(trained, spark, tmp_path):  # noqa: F811
    """--image-size: 32 x 32 copies of M6 (padded) audited by the 28 x 28 target, each engine resizing them."""
    _, outcome = trained
    m6 = load_splits().query("M6")
    padded = ArraySet("m6-32", np.pad(m6.x, ((0, 0), (2, 2), (2, 2))), m6.y, m6.index)
    table = tmp_path / "m6-32"
    export_query(table, query_file=write_set(padded, tmp_path / "m6-32.npz"))
    config = AuditConfig(model_uri=outcome.version.uri, query_table=str(table), image_size=28)
    local = audit(config, progress=False)
    on_spark = audit(AuditConfig(**{**config.__dict__, "engine": "spark"}), progress=False)
    assert on_spark.primary.metrics == local.primary.metrics
    assert_same_membership(MlflowClient().download_artifacts(on_spark.run_id, keys.ARTIFACT_MEMBERSHIP_PARQUET), local)


def run_data(run_id: str):
    return MlflowClient().get_run(run_id).data


@pytest.mark.parametrize(
    ("query", "options"),
    [
        ("M6", {}),
        ("M1", {"test": "ks", "threshold_mode": "per-class", "alpha": 0.05}),
    ],
)
def test_spark_audit_equals_in_process_audit_of_the_same_table(trained, spark, tables, query, options):  # noqa: F811
    _, outcome = trained
    config = AuditConfig(model_uri=outcome.version.uri, query_table=tables[query], **options)
    local = audit(config, progress=False)
    on_spark = audit(AuditConfig(**{**config.__dict__, "engine": "spark"}), progress=False)
    assert on_spark.primary.verdict == local.primary.verdict
    assert on_spark.primary.metrics == local.primary.metrics  # p-values to the bit
    assert on_spark.warnings == local.warnings
    local_run, spark_run = run_data(local.run_id), run_data(on_spark.run_id)
    assert spark_run.metrics == local_run.metrics
    differing = {
        k for k in local_run.tags.keys() | spark_run.tags.keys() if local_run.tags.get(k) != spark_run.tags.get(k)
    }
    assert differing <= {keys.TAG_ENGINE, keys.TAG_CACHE}  # the first audit trained the calibration model
    assert spark_run.tags[keys.TAG_CACHE] == "hit"
    assert (local_run.tags[keys.TAG_ENGINE], spark_run.tags[keys.TAG_ENGINE]) == ("in-process", "spark")
    assert spark_run.params[keys.PARAM_SPARK_MASTER] == "local[2]"
    assert_same_membership(MlflowClient().download_artifacts(on_spark.run_id, keys.ARTIFACT_MEMBERSHIP_PARQUET), local)
    assert_spark_report(on_spark, local)


def figures_of(run_id: str) -> set[str]:
    return {f.path for f in MlflowClient().list_artifacts(run_id, keys.ARTIFACT_FIGURES_DIR)}


def assert_spark_report(on_spark, local) -> None:
    """The Spark run files a report like the in-process one, less the query's figure (its scores stayed on Spark).

    Both keep the attack-strength ROC figure: it comes from the calibration halves, not from the query.
    """
    assert keys.ARTIFACT_REPORT in artifacts_of(on_spark.run_id)
    query_figure = f"{keys.ARTIFACT_FIGURES_DIR}/{on_spark.method}_scores.svg"
    assert query_figure in figures_of(local.run_id)
    assert query_figure not in figures_of(on_spark.run_id)
    html = Path(MlflowClient().download_artifacts(on_spark.run_id, keys.ARTIFACT_REPORT)).read_text()
    assert f"<code>{on_spark.primary.verdict}</code>" in html
    assert "per-sample scores stayed where they were computed" in html
    assert f"{on_spark.primary.n_query} samples" in html and "<td>spark</td>" in html


def test_spark_audit_writes_membership_to_the_uri_given(trained, spark, tables, tmp_path, capsys):  # noqa: F811
    """...and says, before its job runs, what the audit waits for (Spark's own console progress is off)."""
    _, outcome = trained
    out = str(tmp_path / "membership")
    config = AuditConfig(model_uri=outcome.version.uri, query_table=tables["M6"], engine="spark", membership_out=out)
    result = audit(config, progress=True)
    assert f"scoring {tables['M6']} on Spark (local[2], " in capsys.readouterr().err
    assert len(pd.read_parquet(out)) == result.primary.n_query == 2000
    assert run_data(result.run_id).tags[keys.TAG_MEMBERSHIP_URI] == out
    assert keys.ARTIFACT_MEMBERSHIP_PARQUET not in artifacts_of(result.run_id)
    html = Path(MlflowClient().download_artifacts(result.run_id, keys.ARTIFACT_REPORT)).read_text()
    assert f"<td>{out}</td>" in html  # the report's lineage says where the membership table is


def wrong_image_size(directory) -> str:
    directory.mkdir()
    pq.write_table(pa.table({"label": [1], "index": [0], "pixels": [b"\x00" * 100]}), directory / "part-0.parquet")
    return str(directory)


def not_parquet(directory) -> str:
    directory.mkdir()
    (directory / "part-0.parquet").write_text("label,index,pixels\n")
    return str(directory)


def wrong_columns(directory) -> str:
    directory.mkdir()
    pq.write_table(pa.table({"label": [1], "pixels": [b"x"]}), directory / "part-0.parquet")
    return str(directory)


@pytest.mark.parametrize(
    ("make_table", "options", "error", "message"),
    [
        (lambda d: str(d / "missing"), {}, InputError, "could not read query table .*PATH_NOT_FOUND"),
        (not_parquet, {}, InputError, r"could not read query table .*/t as Parquet: .* is not a Parquet file"),
        (wrong_columns, {}, InputError, r"expected columns label .* missing \['index'\]"),
        # options the engine refuses are checked before the run starts: they leave no run
        (wrong_columns, {"method": "both"}, InputError, "--engine spark runs --method ema only"),
        (wrong_image_size, {}, InputError, r"^/.*/t: expected `pixels` of 784 bytes .* got values of \[100\] bytes$"),
    ],
)
def test_spark_audit_bad_input_is_one_line_and_a_failed_run(
    trained,  # noqa: F811
    spark,
    tmp_path,
    make_table,
    options,
    error,
    message,
):
    _, outcome = trained
    before = {r.info.run_id for r in failed_runs()}
    config = AuditConfig(
        model_uri=outcome.version.uri, query_table=make_table(tmp_path / "t"), engine="spark", **options
    )
    with pytest.raises(error, match=message) as caught:
        audit(config, progress=False)
    assert "\n" not in str(caught.value)
    new = [r for r in failed_runs() if r.info.run_id not in before]
    refused_option = bool(options)
    assert len(new) == (0 if refused_option else 1) and all(artifacts_of(r.info.run_id) == set() for r in new)


def test_spark_audit_on_a_cluster_needs_membership_out(trained):  # noqa: F811
    _, outcome = trained
    config = AuditConfig(
        model_uri=outcome.version.uri, query_table="s3a://b/t", engine="spark", spark_master="spark://h:7077"
    )
    with pytest.raises(EMAError, match="expected --membership-out URI"):
        config.validate()


def test_spark_workers_fork_from_a_daemon_that_loaded_the_scoring_code(spark):
    """A worker's first batch finds MLflow's pyfunc, the batch code and MLflow's installed-package map in place."""
    from pyspark.sql.functions import udf

    def loaded(_: int) -> str:
        import sys

        requirements = sys.modules.get("mlflow.utils.requirements_utils")
        mapped = requirements is not None and requirements._PACKAGES_TO_MODULES is not None
        return f"{'mlflow.pyfunc' in sys.modules} {'ema.engines.batches' in sys.modules} {mapped}"

    rows = spark.range(4, numPartitions=2).select(udf(loaded)("id").alias("loaded")).collect()
    assert {row.loaded for row in rows} == {"True True True"}
    assert spark.conf.get("spark.python.daemon.module") == spark_engine.DAEMON_MODULE


def test_a_shipped_model_loads_from_its_own_folder_and_is_named_by_its_uri(trained, spark):  # noqa: F811
    """A model audited twice in one session is shipped once; it loads as the driver's model, named by its URI."""
    from ema.oracle import PyfuncOracle

    oracle = PyfuncOracle("models:/ema-target@target")
    first, second = (spark_engine.ship_model(spark, oracle) for _ in range(2))
    assert first.folder == second.folder and first.folder.startswith(spark_engine.MODEL_FOLDER_PREFIX)
    shipped = first()
    assert shipped is first() and shipped.model_uri == "models:/ema-target@target"
    assert shipped.source == "model 'models:/ema-target@target'"  # how its output errors name it
    images = np.random.default_rng(0).integers(0, 256, (8, 28, 28), dtype=np.uint8)
    np.testing.assert_array_equal(shipped.predict_proba(images), oracle.predict_proba(images))
    options = {
        "outputs": "probabilities",
        "output_name": "proba",
        "transform": InputTransform(scale=255.0),
        "input_spec": InputSpec(),  # float pixels, so that a transform is taken
    }
    copy = spark_engine.ship_model(spark, PyfuncOracle("models:/ema-target@target", **options))()
    assert {name: getattr(copy, name) for name in options} == options  # read as the driver's oracle reads it


def test_a_model_archive_is_made_once_per_folder_content_and_outlives_the_audit_that_made_it(tmp_path):
    """A session's executors may fetch an archive at any later job: it stays until the process exits. A folder whose
    files changed (new weights under the same MLmodel) is a new archive, and so is one whose zip was deleted."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "MLmodel").write_text("model_uuid: same")
        (tmp_path / name / "weights.pt").write_bytes(name.encode())
    model_a, model_b = (SimpleNamespace(local_path=str(tmp_path / name)) for name in ("a", "b"))
    archive = spark_engine.model_archive(model_a)
    assert spark_engine.model_archive(model_a) == archive and archive.exists()
    assert spark_engine.model_archive(model_b) != archive
    with zipfile.ZipFile(archive) as packed:
        assert packed.read("weights.pt") == b"a"
    (tmp_path / "a" / "weights.pt").write_bytes(b"retrained")
    retrained = spark_engine.model_archive(model_a)
    assert retrained != archive
    retrained.unlink()  # a temporary-folder cleaner
    assert spark_engine.model_archive(model_a).is_file()


@pytest.mark.parametrize("master", ["foo://bar", "mesos://h:5050", "spark:/h"])
def test_spark_audit_refuses_a_master_spark_submit_refuses_before_starting_java(master):
    config = AuditConfig(model_uri="models:/m@a", query_table="t", engine="spark", spark_master=master)
    with pytest.raises(InputError, match=rf"expected --spark-master local\[N\], .* or yarn .*got '{master}'"):
        config.validate()


class FakeJavaError:
    """A Java exception as Py4J hands it over: a message, a cause, and Spark's error condition if it is Spark's."""

    def __init__(self, message: str, cause=None, *, condition: str | None = None, path: str = ""):
        self.message, self.cause, self.condition, self.path = message, cause, condition, path

    def getMessage(self) -> str:  # Java's names
        return self.message

    def toString(self) -> str:
        return self.message

    def getCause(self):
        return self.cause

    def getCondition(self) -> str:
        if self.condition is None:
            raise spark_engine.Py4JError("An error occurred while calling getCondition")
        return self.condition

    def getMessageParameters(self) -> dict:
        return {"path": self.path}


class FakeJobFailure(Exception):
    """A failed Spark job as the driver sees it: a message (an executor's traceback in it), the Java exception."""

    def __init__(self, text: str, java: FakeJavaError | None = None):
        super().__init__(text)
        self.java_exception = java


WORKER_TRACEBACK = """Job aborted due to stage failure: Task 0 failed
Traceback (most recent call last):
  File "batches.py", line 37, in __call__
    raise _wrong_size(where, sorted(sizes))
{line}
\tat org.apache.spark.api.python.BasePythonRunner.handlePythonException(PythonRunner.scala:1)
Caused by: org.apache.spark.SparkException: [PYTHON_EXCEPTION] SQLSTATE: 38000"""
CHAINED_TRACEBACK = """Traceback (most recent call last):
  File "model.py", line 3, in predict
KeyError: 'weights'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "model.py", line 5, in predict
ValueError: the model exploded
  with a second line"""
UNREADABLE = FakeJavaError(
    "[FAILED_READ_FILE.NO_HINT] Encountered error while reading file file:/t/p.parquet.",
    FakeJavaError("can not read PageHeader", FakeJavaError("Required field 'compressed_page_size' was not found")),
    condition="FAILED_READ_FILE.NO_HINT",
    path="file:/t/p.parquet",
)


@pytest.mark.parametrize(
    ("failure", "error", "message"),
    [
        (
            FakeJobFailure(WORKER_TRACEBACK.format(line="ema.errors.InputError: /t: expected `pixels` of 784 bytes")),
            InputError,
            "/t: expected `pixels` of 784 bytes",
        ),
        (
            FakeJobFailure(WORKER_TRACEBACK.format(line="ema.errors.ModelAccessError: model 'm' failed: boom")),
            ModelAccessError,  # retryable, exit 4, as in-process
            "model 'm' failed: boom",
        ),
        (FakeJobFailure(CHAINED_TRACEBACK), EMAError, "the Spark audit failed: ValueError: the model exploded"),
        (
            FakeJobFailure("An error occurred while calling o39.parquet.\n: org.apache...", UNREADABLE),
            InputError,
            "could not read query table /t as Parquet: file:/t/p.parquet: Required field 'compressed_page_size' was "
            "not found",
        ),
        (
            FakeJobFailure("An error occurred", FakeJavaError("Job aborted", FakeJavaError("executor lost\n\tat x"))),
            EMAError,
            "the Spark audit failed: executor lost",
        ),
    ],
)
def test_job_error_is_one_line_of_the_kind_an_in_process_audit_raises(failure, error, message):
    translated = spark_engine._job_error(failure, uri="/t")
    assert type(translated) is error and str(translated) == message
