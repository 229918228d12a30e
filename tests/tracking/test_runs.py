"""Opening runs and logging to them: MLflow's notebook probe does not import IPython into a process that never
did; a batched run logs once, when it ends, failed or not."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from ema.data.arrays import ArraySet
from ema.tracking.runs import configure, log_batch, log_dataset, start_run

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


@pytest.fixture
def store_calls(monkeypatch) -> list[str]:
    """The run ids of every ``MlflowClient.log_batch`` call from here on, in order."""
    calls = []
    real = MlflowClient.log_batch

    def spy(self, run_id, *args, **kwargs):
        calls.append(run_id)
        return real(self, run_id, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "log_batch", spy)
    return calls


def test_a_batched_run_logs_everything_in_one_store_call_when_it_ends(configured, store_calls):
    with start_run("batched", batched=True) as run:
        log_batch(params={"a": 1}, tags={"t": "first"})
        log_batch(metrics={"m": 0.5}, tags={"t": "second"})
        log_batch(params={"a": 1, "b": "x"}, metrics={"m": 0.25})
        assert store_calls == []  # nothing reaches the store while the run is open
        assert MlflowClient().get_run(run.info.run_id).data.params == {}
    assert store_calls == [run.info.run_id]
    data = MlflowClient().get_run(run.info.run_id).data
    assert data.params == {"a": "1", "b": "x"}
    assert data.metrics == {"m": 0.25}  # the last value logged
    assert data.tags["t"] == "second"


def test_a_failed_batched_run_still_logs_what_it_held_and_is_marked_failed(configured):
    with pytest.raises(RuntimeError, match="refused"):
        with start_run("batched", batched=True) as run:
            log_batch(params={"model_uri": "models:/m/1"}, tags={"mlflow.runName": "audit M1"})
            raise RuntimeError("refused")
    logged = MlflowClient().get_run(run.info.run_id)
    assert logged.info.status == "FAILED"
    assert logged.data.params == {"model_uri": "models:/m/1"}
    assert logged.info.run_name == "audit M1"


def test_a_batched_run_refuses_a_param_changed_at_once(configured):
    with start_run("batched", batched=True):
        log_batch(params={"a": 1})
        with pytest.raises(MlflowException, match=r"a='1', now '2'"):
            log_batch(params={"a": 2})


def test_a_plain_run_logs_at_once_and_a_nested_one_keeps_its_own_batch(configured, store_calls):
    with start_run("parent", batched=True) as parent:
        log_batch(params={"p": 1})
        with start_run("child") as child:
            log_batch(params={"c": 2})
            assert store_calls == [child.info.run_id]  # the child is not batched: logged at once
        assert MlflowClient().get_run(child.info.run_id).data.params == {"c": "2", "p": "1"}
    assert MlflowClient().get_run(parent.info.run_id).data.params == {"p": "1"}
