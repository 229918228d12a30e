"""Models trained, logged and registered in the tests the way each flavor's users do, in one store per module."""

from __future__ import annotations

import os

import mlflow
import numpy as np
import pytest
from click.testing import CliRunner

from ema.data.presets import load_splits
from ema.tracking.runs import configure
from ema_cli.cli import main
from tests.conftest import open_store

#: MNIST's usual normalisation, as torchvision tutorials apply it.
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081


@pytest.fixture(scope="module")
def store(tmp_path_factory, template_db):
    """A store of its own for the module; cwd and MLFLOW_TRACKING_URI restored after."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", "")
        patch.chdir(os.getcwd())
        uri = open_store(tmp_path_factory.mktemp("foreign"), template_db)
        configure()
        yield uri
        while mlflow.active_run():
            mlflow.end_run()


@pytest.fixture(scope="module")
def members():
    """Fold M1 of the embedded MNIST splits: what the foreign models are trained on."""
    return load_splits().query("M1")


def pixels(images: np.ndarray) -> np.ndarray:
    """uint8 images as the users' models take them: floats in [0, 1], one row of 784 per image."""
    return images.reshape(len(images), -1).astype(np.float64) / 255.0


def ema_audit(*options: str) -> tuple[str, str]:
    """Run `ema audit OPTIONS --no-progress`; its output and the verdict it printed for EMA."""
    result = CliRunner().invoke(main, ["audit", *options, "--no-progress"])
    assert result.exit_code == 0, result.output
    verdict = next(line for line in result.output.splitlines() if line.strip().startswith("ema:")).split("-> ")[-1]
    return result.output, verdict.strip()
