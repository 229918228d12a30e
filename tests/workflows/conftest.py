"""A store with a quickly trained, registered target, shared by the tests of a module."""

from __future__ import annotations

import os

import mlflow
import pytest

from ema.tracking.runs import configure
from ema.training.spec import TrainSpec
from ema.workflows.train import train_target
from tests.conftest import open_store

#: 20 epochs (~4 s) overfit the 5,000 training images, as the paper's 50 do.
QUICK_SPEC = TrainSpec(epochs=20)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, template_db):
    """(store URI, TrainOutcome) for a target trained with QUICK_SPEC; cwd and MLFLOW_TRACKING_URI restored after."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", "")
        patch.chdir(os.getcwd())
        uri = open_store(tmp_path_factory.mktemp("store"), template_db)
        configure()
        outcome = train_target(QUICK_SPEC, progress=False)
        yield uri, outcome
        while mlflow.active_run():
            mlflow.end_run()
