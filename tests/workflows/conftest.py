"""A store with a quickly trained, registered target, shared by the tests of a module."""

from __future__ import annotations

import pytest

from ema.training.spec import TrainSpec
from ema.workflows.train import train_target
from tests.conftest import module_store

#: 20 epochs (~4 s) overfit the 5,000 training images, as the paper's 50 do.
QUICK_SPEC = TrainSpec(epochs=20)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, template_db):
    """(store URI, TrainOutcome) for a target trained with QUICK_SPEC; cwd and MLFLOW_TRACKING_URI restored after."""
    with module_store(tmp_path_factory, template_db) as uri:
        yield uri, train_target(QUICK_SPEC, progress=False)
