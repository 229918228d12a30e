"""A torch CNN the workbench does not ship, logged with plain `mlflow.pytorch.log_model`: logits out, normalised inputs.

The calibration model is a clone of its own architecture (re-initialised, trained with the
paper's settings), so no recipe is needed.
"""

from __future__ import annotations

import json

import mlflow
import mlflow.pytorch
import numpy as np
import pytest
import torch
from mlflow.tracking import MlflowClient
from torch import nn

from ema.data.files import write_set
from ema.data.presets import load_splits
from ema.tracking import keys
from tests.foreign.conftest import MNIST_MEAN, MNIST_STD, ema_audit, run_of

pytestmark = pytest.mark.slow


class SmallResidualNet(nn.Module):
    """A user's own architecture: a strided stem, one residual block, a linear head; returns logits."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(1, 16, 5, stride=2)
        self.block = nn.Conv2d(16, 16, 3, padding=1)
        self.head = nn.Linear(16 * 12 * 12, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.stem(x))
        h = torch.relu(h + self.block(h))
        return self.head(h.flatten(1))


def normalised(images: np.ndarray) -> np.ndarray:
    return ((images.astype(np.float32)[:, None] / 255.0 - MNIST_MEAN) / MNIST_STD).astype(np.float32)


@pytest.fixture(scope="module")
def user_cnn(store, members):
    """Train on M1 as a user would (Adam, normalised inputs), log with pt2 (MLflow's default), register."""
    torch.manual_seed(0)
    model = SmallResidualNet()
    x, y = torch.from_numpy(normalised(members.x)), torch.tensor(members.y)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(15):
        for batch in torch.randperm(len(y)).split(64):
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
            optimizer.step()
    model.eval()
    with mlflow.start_run(run_name="a user's training"):
        mlflow.pytorch.log_model(
            model,
            name="model",
            input_example=normalised(members.x[:2]),
            registered_model_name="user-cnn",
            pip_requirements=["torch"],
        )
    return "models:/user-cnn/1"


#: What a user of this model passes: it returns logits and was trained on normalised pixels.
OPTIONS = ("--outputs", "logits", "--normalize", f"{MNIST_MEAN},{MNIST_STD}")


def test_foreign_cnn_training_fold_memorized_held_out_not(user_cnn):
    member_output, member = ema_audit("--model", user_cnn, *OPTIONS, "--query", "M1")
    held_out_output, held_out = ema_audit("--model", user_cnn, *OPTIONS, "--query", "M6")
    assert (member, held_out) == ("memorized", "not_memorized"), member_output + held_out_output
    tags = run_of(held_out_output).data.tags
    assert tags[keys.TAG_CALIBRATION_SOURCE] == "clone"
    name, version = tags[keys.TAG_CALIBRATION_VERSION].removeprefix("models:/").split("/")
    assert "pytorch" in mlflow.models.get_model_info(f"models:/{name}/{version}").flavors
    recipe = json.loads(MlflowClient().get_model_version(name, version).tags[keys.TAG_RECIPE])
    assert recipe["framework"] == "torch-clone"


def test_outputs_apply_to_a_supplied_calibration_model_without_recipe(user_cnn, members, tmp_path):
    """The user's own CNN as the calibration model: --outputs logits reaches it, and no recipe is asked for."""
    supplied = (
        "--calibration-model",
        user_cnn,
        "--calibration-members",
        str(write_set(members, tmp_path / "M1.npz")),
        "--calibration-nonmembers",
        str(write_set(load_splits().query("M6"), tmp_path / "M6.npz")),
    )
    output, verdict = ema_audit("--model", user_cnn, *OPTIONS, *supplied, "--query", "M1")
    assert verdict == "memorized", output
    assert run_of(output).data.tags[keys.TAG_CALIBRATION_SOURCE] == "supplied"


def test_torch_recipe_with_training_settings_only_trains_the_clone(user_cnn, tmp_path):
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"framework": "torch", "epochs": 5, "lr": 0.01}))
    output, _ = ema_audit("--model", user_cnn, *OPTIONS, "--recipe", str(recipe), "--query", "M6")
    tags = run_of(output).data.tags
    assert tags[keys.TAG_CALIBRATION_SOURCE] == "clone"
    name, version = tags[keys.TAG_CALIBRATION_VERSION].removeprefix("models:/").split("/")
    recorded = json.loads(MlflowClient().get_model_version(name, version).tags[keys.TAG_RECIPE])
    assert (recorded["framework"], recorded["epochs"], recorded["lr"]) == ("torch-clone", 5, 0.01)
