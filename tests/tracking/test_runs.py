"""Opening runs and logging datasets: MLflow's notebook probe does not import IPython into a process that never did;
a run that fails records why."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from ema.data.arrays import ArraySet
from ema.errors import InputError
from ema.tracking import keys
from ema.tracking.runs import ERROR_TAG_CHARS, configure, log_dataset, start_run

SOURCE_TYPE = "mlflow.source.type"


@pytest.fixture
def configured(store) -> str:
    """A fresh store with the workbench's experiment set (an earlier test may have left another one active)."""
    configure()
    return store


def source_type(run_id: str) -> str:
    return MlflowClient().get_run(run_id).data.tags[SOURCE_TYPE]


def test_start_run_outside_a_notebook_leaves_ipython_unimported(configured, monkeypatch):
    monkeypatch.delitem(sys.modules, "IPython", raising=False)  # as in a fresh `ema` process
    with start_run("plain") as run:
        assert "IPython" not in sys.modules  # neither imported by MLflow's probe nor left as None
    assert "IPython" not in sys.modules
    assert source_type(run.info.run_id) == "LOCAL"


def test_start_run_in_a_notebook_still_tags_the_notebook(configured, monkeypatch):
    shell = type("ZMQInteractiveShell", (), {"user_ns": {"__vsc_ipynb_file__": "/work/audit.ipynb"}})()
    fake = types.ModuleType("IPython")
    fake.get_ipython = lambda: shell
    monkeypatch.setitem(sys.modules, "IPython", fake)
    with start_run("in a notebook") as run:
        assert sys.modules["IPython"] is fake
    assert source_type(run.info.run_id) == "NOTEBOOK"


def test_start_run_removes_its_ipython_entry_when_the_run_fails(configured, monkeypatch):
    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    with pytest.raises(RuntimeError, match="inside the run"):
        with start_run("failing"):
            raise RuntimeError("inside the run")
    assert "IPython" not in sys.modules


def test_log_dataset_outside_a_notebook_leaves_ipython_unimported(configured, monkeypatch):
    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    data = ArraySet("tiny", np.zeros((3, 28, 28), np.uint8), np.arange(3), np.arange(3))
    with start_run("with a dataset") as run:
        log_dataset(data, name="query tiny", context="query")
    assert "IPython" not in sys.modules
    (logged,) = MlflowClient().get_run(run.info.run_id).inputs.dataset_inputs
    assert logged.dataset.name == "query tiny" and logged.dataset.digest == data.fingerprint


def test_params_beside_the_ones_mlflow_run_logged_keep_both(configured, monkeypatch):
    """``mlflow run -P input_shape=784`` logs '784' first; the audit's own '-1,784' cannot replace it."""
    from ema.tracking.runs import log_params

    client = MlflowClient()
    project_run = client.create_run(
        client.get_experiment_by_name("ema").experiment_id, tags={"mlflow.project.entryPoint": "audit"}
    )
    run_id = project_run.info.run_id
    client.log_param(run_id, "input_shape", "784")
    client.log_param(run_id, "alpha", "0.1")
    monkeypatch.setenv("MLFLOW_RUN_ID", run_id)
    with start_run("resumed") as run:
        assert run.info.run_id == run_id
        log_params({"input_shape": "-1,784", "alpha": 0.1, "method": "ema"})
    params = client.get_run(run_id).data.params
    assert params == {"input_shape": "784", "input_shape.resolved": "-1,784", "alpha": "0.1", "method": "ema"}


def run_record(run_id: str):
    return MlflowClient().get_run(run_id)


def test_start_run_tags_a_refused_run_and_its_parent_with_the_one_line_message(configured):
    with pytest.raises(InputError, match="expected a label column"):
        with start_run("parent") as parent, start_run("child") as child:
            raise InputError("q.csv: expected a label column 'label',\n  got columns 'a;b'")
    for run in (parent, child):
        record = run_record(run.info.run_id)
        assert record.info.status == "FAILED"
        assert record.data.tags[keys.TAG_ERROR] == "q.csv: expected a label column 'label', got columns 'a;b'"


def test_start_run_tags_another_exception_with_its_type_cut_at_mlflows_limit_and_without_secrets(configured):
    with pytest.raises(KeyError):
        with start_run("failing") as run:
            raise KeyError("http://me:pw@host/invocations " + "x" * 9000)
    error = run_record(run.info.run_id).data.tags[keys.TAG_ERROR]
    assert error.startswith("KeyError: 'http://me:***@host/invocations xxx")
    assert len(error) == ERROR_TAG_CHARS and error.endswith("…") and "pw" not in error


def test_start_run_tags_no_error_on_a_finished_run(configured):
    with start_run("fine") as run:
        pass
    record = run_record(run.info.run_id)
    assert record.info.status == "FINISHED" and keys.TAG_ERROR not in record.data.tags
