"""Why a Spark session could not start: no Java, a master that does not answer; said before Java is launched."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from pyspark import SparkContext
from pyspark.sql import SparkSession

from benchmarks._serve import free_port
from ema.engines import spark_start
from ema.engines.spark import spark_session
from ema.errors import RETRYABLE, EMAError, ModelAccessError


@pytest.fixture
def no_session(monkeypatch):
    """As in a fresh process: no active session and no JVM yet, so spark_session would start both."""
    monkeypatch.setattr(SparkSession, "getActiveSession", staticmethod(lambda: None))
    monkeypatch.setattr(SparkContext, "_gateway", None)


def test_spark_session_on_a_master_nothing_listens_on_is_retryable_and_quick(no_session):
    """It ended after about 75 s in "Cannot call methods on a stopped SparkContext", exit 1."""
    master = f"spark://127.0.0.1:{free_port()}"
    with pytest.raises(
        ModelAccessError, match=rf"^could not reach the Spark master {master} \(127\.0\.0\.1:\d+: "
    ) as e:
        with spark_session(master):
            pass
    assert isinstance(e.value, RETRYABLE) and "Connection refused" in str(e.value)


def test_spark_session_with_a_java_home_that_holds_no_java_names_it(no_session, monkeypatch):
    """It failed with JAVA_GATEWAY_EXITED, naming neither Java nor JAVA_HOME."""
    monkeypatch.setenv("JAVA_HOME", "/nonexistent")
    with pytest.raises(EMAError) as refused:
        with spark_session("local[1]"):
            pass
    assert str(refused.value) == (
        "could not start a Spark session on local[1]: Java not found: JAVA_HOME=/nonexistent holds no bin/java; "
        "Spark needs Java 17 or 21: set JAVA_HOME to its folder, or put its java on PATH"
    )


def test_check_java_without_java_home_looks_on_path(monkeypatch, tmp_path):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(EMAError, match=r"Java not found \(no JAVA_HOME, no java on PATH\)"):
        spark_start.check_java("local[2]")


def test_start_error_names_java_for_a_gateway_that_exited_and_the_master_for_a_stopped_context(monkeypatch):
    monkeypatch.setenv("JAVA_HOME", "/opt/jdk")
    gateway = spark_start.start_error("local[2]", RuntimeError("[JAVA_GATEWAY_EXITED] Java gateway ..."), "x")
    assert type(gateway) is EMAError and "JAVA_HOME=/opt/jdk" in str(gateway) and "Java 17" in str(gateway)
    stopped = spark_start.start_error(
        "spark://h:7077", RuntimeError(), "Cannot call methods on a stopped SparkContext."
    )
    assert isinstance(stopped, ModelAccessError) and str(stopped).startswith("could not reach the Spark master")
    other = spark_start.start_error("yarn", RuntimeError(), "no YARN_CONF_DIR")
    assert type(other) is EMAError and str(other) == "could not start a Spark session on yarn: no YARN_CONF_DIR"
