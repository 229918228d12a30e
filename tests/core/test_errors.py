"""The error tree: each kind's place in it, and each kind raised by a real site of the workbench."""

from __future__ import annotations

import importlib
import socket
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tomllib

from ema import errors
from ema.auditors import EMAAuditor
from ema.errors import (
    RETRYABLE,
    EMAError,
    InputError,
    MissingDependencyError,
    ModelAccessError,
    NotCalibratedError,
    StoreBusyError,
    StoreError,
    TimeLimitExceeded,
    pip_command,
)
from ema.limits import check_deadline, command_limits
from ema.oracle import HttpOracle, PyfuncOracle, ScoringTimeout
from ema.tracking import store as tracking_store
from ema.tracking.runs import MissingArtifact, download_artifact
from ema.tracking.single_flight import ClaimTimeout
from ema.training.helper_loading import HelperLoadError

ROOT = Path(__file__).resolve().parents[2]
IMAGES = np.zeros((3, 28, 28), np.uint8)

TREE = {
    InputError: (EMAError, ValueError),
    NotCalibratedError: (InputError,),
    ModelAccessError: (EMAError,),
    ScoringTimeout: (ModelAccessError,),
    MissingDependencyError: (EMAError,),
    StoreError: (EMAError,),
    StoreBusyError: (StoreError,),
    ClaimTimeout: (StoreBusyError,),
    MissingArtifact: (StoreError,),
    HelperLoadError: (StoreError,),
    TimeLimitExceeded: (EMAError,),
}


@pytest.mark.parametrize("kind", list(TREE), ids=lambda kind: kind.__name__)
def test_error_tree_each_kind_has_its_bases(kind):
    assert kind.__bases__ == TREE[kind]


def test_error_tree_is_drawn_in_the_docstring_with_every_kind():
    drawn = errors.__doc__
    assert all(kind.__name__ in drawn for kind in TREE)


def test_error_tree_retryable_kinds_are_model_access_and_a_busy_store_only():
    assert issubclass(ScoringTimeout, RETRYABLE) and issubclass(ClaimTimeout, RETRYABLE)
    for final in (
        InputError,
        NotCalibratedError,
        MissingDependencyError,
        StoreError,
        MissingArtifact,
        TimeLimitExceeded,
    ):
        assert not issubclass(final, RETRYABLE), final


def test_error_tree_kinds_survive_a_worker_process_as_pickles_do():
    import pickle

    for kind in TREE:
        again = pickle.loads(pickle.dumps(kind("one line")))
        assert type(again) is kind and str(again) == "one line"


def test_pip_command_names_the_extra_that_pyproject_defines():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for module, extra in errors.EXTRA_OF_MODULE.items():
        assert pip_command(module) == f"pip install 'ema-audit[{extra}]'"
        wanted = {"psycopg2": "psycopg2-binary", "py4j": "pyspark"}.get(module, module)  # py4j comes with pyspark
        assert any(requirement.startswith(wanted) for requirement in extras[extra]), (module, extras[extra])
    assert pip_command("pymysql.cursors") == "pip install pymysql"


# --- each kind, raised by a real site ---------------------------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_http_oracle_against_a_closed_port_raises_model_access_error():
    oracle = HttpOracle(f"http://127.0.0.1:{closed_port()}/invocations", retries=0)
    with pytest.raises(ModelAccessError, match=r"failed after 1 attempts; last: ConnectionError") as info:
        oracle.predict(IMAGES)
    assert isinstance(info.value, RETRYABLE) and not isinstance(info.value, InputError)


def test_pyfunc_oracle_of_a_local_path_with_nothing_there_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match=r"expected a model directory .* at .*nothing, found nothing there"):
        PyfuncOracle(str(tmp_path / "nothing"))


def test_pyfunc_oracle_of_a_folder_that_holds_no_model_raises_an_input_error(tmp_path):
    """It fails the same way every time: exit 3, not the retryable ModelAccessError's 4."""
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=r"could not load model '.*empty'") as raised:
        PyfuncOracle(str(tmp_path / "empty"))
    assert not isinstance(raised.value, ModelAccessError)


def test_pyfunc_oracle_without_the_flavors_runtime_raises_missing_dependency_with_the_pip_command(
    tmp_path, monkeypatch
):
    import mlflow.onnx

    to_onnx = pytest.importorskip("skl2onnx").to_onnx
    from sklearn.linear_model import LogisticRegression

    x = np.random.default_rng(0).random((20, 4), dtype=np.float32)
    mlflow.onnx.save_model(to_onnx(LogisticRegression().fit(x, np.arange(20) % 2), x[:1]), tmp_path / "model")
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if the onnx extra were not installed
    expected = r"'.*model': it needs onnxruntime, which is not installed: pip install 'ema-audit\[onnx\]'$"
    with pytest.raises(MissingDependencyError, match=expected):
        PyfuncOracle(str(tmp_path / "model"))


def test_spark_engine_without_pyspark_raises_missing_dependency_with_the_pip_command(monkeypatch):
    import ema.engines
    from ema.workflows import audit_spark

    monkeypatch.delattr(ema.engines, "spark", raising=False)
    monkeypatch.setitem(sys.modules, "ema.engines.spark", None)
    with pytest.raises(
        MissingDependencyError, match=r"--engine spark needs pyspark .*: pip install 'ema-audit\[spark\]'"
    ):
        audit_spark._spark_engine()


def test_store_without_its_database_driver_raises_missing_dependency_with_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg2", None)
    with pytest.raises(MissingDependencyError, match=r"needs a database driver .*; pip install 'ema-audit\[server\]'$"):
        with tracking_store.opened("postgresql+psycopg2://user@127.0.0.1:1/nothing"):
            pass


def test_a_corrupt_store_raises_store_error_that_is_not_retried(tmp_path):
    (tmp_path / "mlflow.db").write_bytes(bytes(range(256)) * 16)
    with pytest.raises(StoreError, match=r"is not a usable sqlite database") as info:
        with tracking_store.opened(f"sqlite:///{tmp_path / 'mlflow.db'}"):
            pass
    assert not isinstance(info.value, RETRYABLE)


def test_a_store_held_by_another_process_raises_store_busy_error(tmp_path):
    with tracking_store.store_lock(tmp_path / "mlflow.db"):
        with pytest.raises(StoreBusyError, match=r"waited 0 s for another process setting up"):
            with tracking_store.store_lock(tmp_path / "mlflow.db", timeout=0.01):
                pass


def test_an_artifact_of_a_run_that_is_gone_raises_missing_artifact_a_store_error(store, tmp_path):
    with pytest.raises(StoreError, match=r"calibration\.json of run 0+ cannot be read") as info:
        download_artifact("0" * 32, "calibration.json", tmp_path)
    assert isinstance(info.value, MissingArtifact)


def test_audit_before_calibrate_raises_not_calibrated_error_an_input_error():
    with pytest.raises(InputError, match=r"not calibrated yet: call calibrate\(\) first") as info:
        EMAAuditor().audit(np.full((4, 2), 0.5), np.zeros(4, int))
    assert isinstance(info.value, NotCalibratedError)


def test_a_command_past_its_timeout_raises_time_limit_exceeded():
    with command_limits(timeout=0.01):
        time.sleep(0.02)
        with pytest.raises(TimeLimitExceeded, match=r"raise --timeout SECONDS$"):
            check_deadline("step")


def test_a_model_whose_class_module_is_gone_is_missing_dependency_naming_it_and_code_paths(tmp_path, monkeypatch):
    """A user's class pickled by reference: loading imports its module, which this Python lacks (not on its path)."""
    import mlflow.sklearn

    from ema.oracle.model_info import load_native_model

    (tmp_path / "users_models.py").write_text(
        "from sklearn.linear_model import LogisticRegression\nclass UsersModel(LogisticRegression):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    users_model = importlib.import_module("users_models").UsersModel
    x = np.random.default_rng(0).random((20, 4))
    model = users_model().fit(x, np.arange(20) % 2)
    mlflow.sklearn.save_model(model, tmp_path / "model", serialization_format="cloudpickle")
    monkeypatch.setitem(sys.modules, "users_models", None)  # as in a process without the user's code
    expected = (
        r"'.*model': it needs the module users_models, which this Python cannot import: if it is your own code, put "
        r"it on PYTHONPATH or log the model with code_paths=\[\.\.\.\]; if it is a package, pip install users_models$"
    )
    with pytest.raises(MissingDependencyError, match=expected):
        load_native_model(str(tmp_path / "model"), "sklearn")
    with pytest.raises(MissingDependencyError, match=expected):
        PyfuncOracle(str(tmp_path / "model"))


def test_a_model_whose_loading_imports_a_name_its_module_lacks_is_an_input_error_not_a_missing_module(
    tmp_path, monkeypatch
):
    """``from users_lib import NoSuchThing`` where users_lib is there: nothing to install; the model is at fault."""
    import mlflow.pyfunc

    (tmp_path / "users_lib.py").write_text("THING = 1\n")
    (tmp_path / "users_pyfunc.py").write_text(
        "import mlflow.pyfunc\n"
        "class Model(mlflow.pyfunc.PythonModel):\n"
        "    def load_context(self, context):\n"
        "        from users_lib import NoSuchThing\n"
        "    def predict(self, context, model_input):\n"
        "        return model_input\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    model = importlib.import_module("users_pyfunc").Model()
    mlflow.pyfunc.save_model(tmp_path / "model", python_model=model)
    with pytest.raises(
        InputError, match=r"could not load model '.*model': ImportError: cannot import name 'NoSuchThing'"
    ):
        PyfuncOracle(str(tmp_path / "model"))
