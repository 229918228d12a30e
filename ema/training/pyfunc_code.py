"""The code MLflow runs to load one of our torch models ("models from code"); it imports nothing from ``ema``.

A copy of this file is stored with every torch model we log, and the network definitions
(:mod:`ema.training.networks`) travel with it as an artifact: the model loads and serves
where mlflow and torch are installed, without the ``ema`` package.
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path
from types import ModuleType

import mlflow.pyfunc
import numpy as np
import torch
from mlflow.models import set_model

#: Artifact keys: the state dict, and the file that defines the networks.
WEIGHTS = "weights"
NETWORKS = "networks"
#: The ``model_config`` key naming where the model scores (``cpu`` as logged; ``cuda:0`` given at load time).
DEVICE = "device"


def load_networks(path: str | None) -> ModuleType:
    """The networks module stored with a model, loaded from its own file (under a name from its content)."""
    if path is None:  # a model logged before the definitions travelled with it: they come from ema
        import ema.training.networks

        return ema.training.networks
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    spec = importlib.util.spec_from_file_location(f"ema_model_networks_{digest}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TorchStateDictModel(mlflow.pyfunc.PythonModel):
    """Rebuilds the network from ``model_config`` and the stored state dict; predicts class probabilities.

    Inputs are images (n, 28, 28) of pixel values 0-255 (uint8 as the signature declares, or
    floats holding them, as a Spark UDF passes them), scaled to [0, 1] inside; or float32
    pixels (n, 1, 28, 28) for a model whose recipe scales its inputs otherwise (and models
    logged by earlier versions of the workbench).

    The network scores on the device ``model_config`` names (``cpu`` as logged, and for models
    logged before the key existed); a batch goes there and its probabilities come back as numpy.
    """

    def load_context(self, context) -> None:
        config = context.model_config
        self.networks = load_networks(context.artifacts.get(NETWORKS))
        self.device = torch.device(config.get(DEVICE) or "cpu")
        spec = config["spec"]
        network = self.networks.build_network(spec["arch"], tuple(spec.get("hidden", ())), int(config["n_classes"]))
        state = torch.load(context.artifacts[WEIGHTS], map_location=self.device, weights_only=True)
        network.load_state_dict({key.removeprefix("network."): value for key, value in state.items()})
        self.network = network.to(self.device).eval()

    def predict(self, context, model_input: np.ndarray, params=None) -> np.ndarray:
        if np.ndim(model_input) == 3:  # images (n, 28, 28): pixel values 0-255, scaled here
            inputs = self.networks.image_inputs(model_input)
        else:
            inputs = torch.from_numpy(np.require(model_input, np.float32, ["C", "W"]))
        with torch.inference_mode():
            return torch.softmax(self.network(inputs.to(self.device)), dim=1).cpu().numpy()


if __name__ != "ema.training.pyfunc_code":  # MLflow runs this file under a module name of its own
    set_model(TorchStateDictModel())
