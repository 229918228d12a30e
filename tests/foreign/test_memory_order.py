"""Colour pixels reach a pyfunc model channels-last in memory (torch's faster CPU layout), C-ordered if it needs.

The models are plain ``mlflow.pyfunc.PythonModel`` files with a tensor signature (-1, 3, 8, 8)
float32, saved to a folder: no store, no training.
"""

from __future__ import annotations

import logging

import mlflow.pyfunc
import numpy as np
import pytest
import torch
from mlflow.models import ModelSignature
from mlflow.types import Schema, TensorSpec

from ema.errors import ModelAccessError
from ema.oracle import PyfuncOracle
from ema.oracle.batching import MIN_BATCH

pytestmark = pytest.mark.filterwarnings("ignore:.*An input example was not provided")

#: RGB 8x8 images as a query file holds them.
IMAGES = np.random.default_rng(0).integers(0, 256, (10, 8, 8, 3), dtype=np.uint8)
SIGNATURE = ModelSignature(inputs=Schema([TensorSpec(np.dtype("float32"), (-1, 3, 8, 8))]))


class ReportsItsLayout(mlflow.pyfunc.PythonModel):
    """Answers [1, 0] for a batch whose channels are adjacent in memory (channels last), else [0, 1]."""

    def predict(self, context, model_input, params=None):
        channels_last = torch.from_numpy(model_input).is_contiguous(memory_format=torch.channels_last)
        return np.tile([1.0, 0.0] if channels_last else [0.0, 1.0], (len(model_input), 1))


class ViewsItsInput(mlflow.pyfunc.PythonModel):
    """Flattens its input with ``view``, as many hand-written torch models do: it needs C order."""

    def predict(self, context, model_input, params=None):
        flat = torch.from_numpy(model_input).view(len(model_input), -1)
        return torch.softmax(flat[:, :2], dim=1).numpy()


class AlwaysFails(mlflow.pyfunc.PythonModel):
    def predict(self, context, model_input, params=None):
        raise RuntimeError("weights file missing")


def saved(tmp_path, python_model: mlflow.pyfunc.PythonModel) -> str:
    path = tmp_path / type(python_model).__name__
    mlflow.pyfunc.save_model(path, python_model=python_model, signature=SIGNATURE, pip_requirements=[])
    return str(path)


def expected_view_outputs(images: np.ndarray) -> np.ndarray:
    """What :class:`ViewsItsInput` returns on C-ordered (n, 3, H, W) pixels of ``images``."""
    flat = (np.ascontiguousarray(images.transpose(0, 3, 1, 2)).astype(np.float32) / np.float32(255)).reshape(
        len(images), -1
    )
    return torch.softmax(torch.from_numpy(flat[:, :2]), dim=1).numpy()


def test_pyfunc_oracle_hands_colour_pixels_channels_last_in_memory(tmp_path):
    proba = PyfuncOracle(saved(tmp_path, ReportsItsLayout()), batch_size=4).predict_proba(IMAGES)
    np.testing.assert_array_equal(proba, np.tile([1.0, 0.0], (len(IMAGES), 1)))


def test_pyfunc_oracle_gives_a_model_that_needs_c_order_copies_from_the_batch_it_fails_on(tmp_path, caplog):
    oracle = PyfuncOracle(saved(tmp_path, ViewsItsInput()), batch_size=4)
    with caplog.at_level(logging.INFO, logger="ema.oracle.pyfunc"):
        proba = oracle.predict_proba(IMAGES)
    np.testing.assert_allclose(proba, expected_view_outputs(IMAGES), rtol=1e-6)
    retries = [r.getMessage() for r in caplog.records if "failed on channels-last pixels" in r.getMessage()]
    assert len(retries) == 1 and "RuntimeError" in retries[0], retries


def test_pyfunc_oracle_reports_a_model_failing_on_both_layouts_in_one_line(tmp_path):
    with pytest.raises(ModelAccessError) as excinfo:
        PyfuncOracle(saved(tmp_path, AlwaysFails())).predict_proba(IMAGES)
    assert excinfo.match(  # the first batch of an in-process model holds MIN_BATCH: its pace is not known yet
        rf"^model '.*' failed on a batch of {MIN_BATCH} inputs of shape \(3, 8, 8\): RuntimeError: "
        "weights file missing$"
    )
