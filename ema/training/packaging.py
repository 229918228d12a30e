"""Our torch models as MLflow pyfunc models: the architecture by name, the weights as a state dict.

MLflow's ``pt2`` format (``torch.export``) took 1.68 s to log the demo's two models (under the
profiler) and added 225 MB to a fresh process that loaded the target (benchmarks/RESULTS.md,
memory, store's first use included; 60 MB now): the exported graph drags in the export machinery.
Our models need none of it: a :class:`~ema.training.spec.TrainSpec` (in the model's
``model_config``) rebuilds the network, and the weights are a state dict read with
``torch.load(weights_only=True)``, which refuses pickled code. The model is logged as
MLflow "models from code": what MLflow runs on load is :mod:`ema.training.pyfunc_code`,
which needs the ``ema`` package where the model is loaded or served.
"""

from __future__ import annotations

from pathlib import Path

import mlflow.pyfunc
import numpy as np
import torch

from ema.training.fit import to_tensor
from ema.training.models import ProbabilityModel
from ema.training.spec import TrainSpec

#: The file MLflow stores with the model and runs to load it.
MODEL_CODE = Path(__file__).with_name("pyfunc_code.py")
#: Artifact key of the state dict.
WEIGHTS = "weights"


def model_config(model: ProbabilityModel) -> dict:
    """What :class:`TorchStateDictModel` needs besides the weights to rebuild ``model``."""
    return {"spec": model.spec.to_dict(), "n_classes": model.n_classes}


def save_weights(model: ProbabilityModel, path: Path) -> Path:
    torch.save(model.state_dict(), path)
    return path


class TorchStateDictModel(mlflow.pyfunc.PythonModel):
    """Rebuilds a :class:`ProbabilityModel` from its spec and state dict; predicts probabilities."""

    def load_context(self, context) -> None:
        config = context.model_config
        model = ProbabilityModel(TrainSpec.from_dict(config["spec"]), int(config["n_classes"]))
        model.load_state_dict(torch.load(context.artifacts[WEIGHTS], map_location="cpu", weights_only=True))
        self.model = model.eval()

    def predict(self, context, model_input: np.ndarray, params=None) -> np.ndarray:
        with torch.inference_mode():
            return self.model(to_tensor(model_input)).numpy()
