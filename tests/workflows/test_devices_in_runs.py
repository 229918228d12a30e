"""``--device`` through the commands: refused before any run, recorded on the runs, models registered on the CPU.

The GPU test runs where CUDA is available and is skipped, saying why, where it is not.
"""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

import mlflow
import mlflow.pytorch
import mlflow.sklearn
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from ema.data.embedded import load_mnist_embedded
from ema.oracle import PyfuncOracle
from ema.oracle.pyfunc import device_config
from ema.tracking import keys
from ema.training.devices import describe_device, resolve_device
from ema_cli.cli import main

#: A target that trains in a second: one small hidden layer, one epoch.
TINY = ("--hidden", "16", "--epochs", "1", "--no-progress")
NO_CUDA = "Error: expected --device cpu or auto on this machine (CUDA is not available), got 'cuda'"


def ema(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def all_runs() -> list:
    client = MlflowClient()
    return client.search_runs([e.experiment_id for e in client.search_experiments()])


def run_param(output: str, key: str = keys.PARAM_DEVICE) -> str:
    """A param of the run a command's output names first (``run <id>``)."""
    run_id = re.search(r"\brun ([0-9a-f]{32})\b", output)[1]
    return MlflowClient().get_run(run_id).data.params[key]


def report_command(output: str) -> str:
    """The command that reproduces the audit, as the report of the run a command's output names first shows it."""
    run_id = re.search(r"\brun ([0-9a-f]{32})\b", output)[1]
    report = mlflow.artifacts.load_text(f"runs:/{run_id}/{keys.ARTIFACT_REPORT}")
    return re.search(r"ema audit --model [^<]*", report)[0]


def test_the_report_reproduces_the_device_as_asked_not_as_resolved(store):
    """A report of an audit given ``--device auto`` said ``--device cpu``: on a GPU machine that reruns on the CPU."""
    assert ema("train", *TINY, "--device", "cpu").exit_code == 0
    audited = ema("audit", "--query", "M1", "--no-progress")
    assert audited.exit_code == 0, audited.output
    assert run_param(audited.output) == describe_device(resolve_device("auto"))  # the run records the device used
    assert report_command(audited.output).endswith("--device auto")


def registered_weights(uri: str) -> dict[str, torch.Tensor]:
    """The state dict a registered workbench model holds, read as stored (no map_location)."""
    folder = Path(mlflow.artifacts.download_artifacts(uri))
    return torch.load(folder / "artifacts" / "weights.pt", weights_only=True)


@pytest.mark.parametrize(
    "command",
    [
        ("train", *TINY),
        ("calibrate", "--no-progress"),
        ("audit", "--query", "M1", "--no-progress"),
        ("unlearn", "--forget", "M1", "--method", "retrain", "--no-progress"),
        ("demo", *TINY),
    ],
    ids=lambda command: command[0],
)
def test_cuda_without_cuda_is_one_line_and_no_run(store, monkeypatch, command):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = ema(*command, "--device", "cuda")
    assert result.exit_code == 3, result.output  # an InputError
    assert [line for line in result.output.splitlines() if line.startswith("Error")] == [NO_CUDA]
    assert "Traceback" not in result.output
    assert all_runs() == []


def test_device_of_another_form_is_a_usage_error_naming_the_forms(store):
    result = ema("train", *TINY, "--device", "gpu")
    assert result.exit_code == 2
    assert "expected --device auto, cpu, cuda or cuda:N (N a CUDA device's index), got 'gpu'" in result.output
    assert all_runs() == []


def test_runs_record_the_device_and_the_model_is_registered_on_the_cpu(store):
    trained = ema("train", *TINY, "--device", "auto")
    assert trained.exit_code == 0, trained.output
    assert run_param(trained.output) == describe_device(resolve_device("auto"))
    weights = registered_weights("models:/ema-target@target")
    assert weights and {tensor.device.type for tensor in weights.values()} == {"cpu"}
    audited = ema("audit", "--query", "M1", "--device", "cpu", "--no-progress")
    assert audited.exit_code == 0, audited.output
    assert run_param(audited.output) == "cpu"
    assert "--device cpu" in report_command(audited.output)
    calibration = next(r for r in all_runs() if r.info.run_name.startswith("calibrate"))
    assert calibration.data.params[keys.PARAM_DEVICE] == "cpu"
    unlearned = ema("unlearn", "--forget", "M1", "--method", "finetune", "--epochs", "1", "--device", "cpu")
    assert unlearned.exit_code == 0, unlearned.output
    assert run_param(unlearned.output) == "cpu"


def test_pyfunc_oracle_sets_the_device_only_of_models_that_take_one(store, tmp_path):
    assert ema("train", *TINY, "--device", "cpu").exit_code == 0
    ours = Path(mlflow.artifacts.download_artifacts("models:/ema-target@target"))
    assert device_config(str(ours), "cpu") == {"scoring_device": "cpu"}
    assert device_config(str(ours), None) is None
    older = Path(shutil.copytree(ours, tmp_path / "older"))  # logged under MLflow's pytorch flavor's key, `device`
    (older / "MLmodel").write_text((older / "MLmodel").read_text().replace("scoring_device:", "device:"))
    assert device_config(str(older), "cuda:0") == {"device": "cuda:0"}
    images = load_mnist_embedded().x[:20]
    expected = PyfuncOracle(str(ours)).predict_proba(images)
    np.testing.assert_array_equal(PyfuncOracle(str(ours), device="cpu").predict_proba(images), expected)
    from sklearn.linear_model import LogisticRegression

    mlflow.sklearn.save_model(LogisticRegression().fit(np.eye(3), [0, 1, 1]), tmp_path / "sklearn")
    assert device_config(str(tmp_path / "sklearn"), "cuda:0") is None  # MLflow would warn about an unknown key


def test_a_model_that_cannot_move_to_the_device_scores_on_the_cpu_with_a_warning(tmp_path, caplog):
    """A ``torch.export`` graph saved on the CPU stays there; the ``meta`` device stands in for a GPU here."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10), torch.nn.Softmax(dim=1)).eval()
    example = np.random.default_rng(0).random((2, 1, 28, 28), dtype=np.float32)
    mlflow.pytorch.save_model(module, tmp_path / "pt2", input_example=example, pip_requirements=["torch"])
    with caplog.at_level(logging.WARNING, logger="ema.oracle.pyfunc"):
        oracle = PyfuncOracle(str(tmp_path / "pt2"), device="meta")
    assert "could not be loaded on meta" in caplog.text and "scoring it on the CPU" in caplog.text
    probabilities = oracle.predict_proba(load_mnist_embedded().x[:5])
    assert probabilities.shape == (5, 10)


@pytest.mark.parametrize("device", [None, "cpu"])
@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine with a GPU loads a GPU-pickled model as it is")
def test_a_model_pickled_on_a_gpu_loads_and_scores_where_there_is_none(tmp_path, caplog, monkeypatch, device):
    """MLflow's pytorch flavor unpickles tensors onto the device they were saved from; a GPU-trained model's
    pickle names ``cuda:0``, written here by tagging the CPU's storages as a GPU's (what ``torch.save`` records)."""
    import torch.serialization

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10), torch.nn.Softmax(dim=1)).eval()
    images = load_mnist_embedded().x[:5]
    expected = module(torch.as_tensor(images, dtype=torch.float32).div(255).reshape(5, 1, 28, 28)).detach().numpy()
    with monkeypatch.context() as patched:
        patched.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
        mlflow.pytorch.save_model(module, tmp_path / "gpu", serialization_format="pickle", pip_requirements=["torch"])
    with pytest.raises(RuntimeError, match="Attempting to deserialize object on a CUDA device"):
        mlflow.pyfunc.load_model(str(tmp_path / "gpu"))  # as MLflow loads it
    with caplog.at_level(logging.INFO, logger="ema.oracle.pyfunc"):
        oracle = PyfuncOracle(str(tmp_path / "gpu"), device=device)
    assert "was pickled on a GPU, and there is none here: its tensors are loaded onto cpu" in caplog.text
    np.testing.assert_allclose(oracle.predict_proba(images), expected, rtol=1e-5)
    assert torch.load.__name__ == "load"  # the patch ends with the load


class MovesToCuda(mlflow.pyfunc.PythonModel):
    """A model whose author hard-coded their GPU: its predict moves the inputs to CUDA."""

    def predict(self, context, model_input, params=None):
        return torch.as_tensor(np.asarray(model_input, dtype=np.float32)).to("cuda").softmax(dim=1).cpu().numpy()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine with a GPU scores such a model")
def test_a_model_whose_code_needs_a_gpu_is_refused_as_input_not_retried(tmp_path):
    from ema.errors import RETRYABLE, InputError

    mlflow.pyfunc.save_model(tmp_path / "gpu-code", python_model=MovesToCuda(), pip_requirements=["torch"])
    oracle = PyfuncOracle(str(tmp_path / "gpu-code"), input_spec=None)
    with pytest.raises(InputError, match=r"whose code needs a CUDA GPU \(") as info:
        oracle.predict_proba(load_mnist_embedded().x[:4])
    assert not isinstance(info.value, RETRYABLE) and "--model-url" in str(info.value)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: trains and audits a model on the GPU")
def test_train_audit_and_unlearn_on_cuda(store):
    card = describe_device(resolve_device("cuda"))
    trained = ema("train", "--epochs", "20", "--device", "cuda", "--no-progress")  # overfits, as the paper's 50
    assert trained.exit_code == 0, trained.output
    assert run_param(trained.output) == card and card.startswith("cuda:")
    assert {tensor.device.type for tensor in registered_weights("models:/ema-target@target").values()} == {"cpu"}
    images = load_mnist_embedded().x[:256]
    on_gpu = PyfuncOracle("models:/ema-target@target", device="cuda:0")
    np.testing.assert_allclose(
        on_gpu.predict_proba(images), PyfuncOracle("models:/ema-target@target").predict_proba(images), atol=1e-5
    )
    audited = ema("audit", "--query", "M1", "--device", "cuda", "--no-progress")
    assert audited.exit_code == 0, audited.output
    assert run_param(audited.output) == card
    assert "-> memorized" in audited.output
    unlearned = ema("unlearn", "--forget", "M1", "--method", "finetune", "--epochs", "1", "--device", "cuda")
    assert unlearned.exit_code == 0, unlearned.output
    assert run_param(unlearned.output) == card
