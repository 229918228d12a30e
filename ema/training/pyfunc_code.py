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
#: The ``model_config`` key naming where the model scores (``cpu`` as logged; ``cuda:0`` given at load time). Not
#: ``device``, MLflow's pytorch flavor's key: MLflow logs a model's config as its run's params, and ``mlflow run``
#: logs the MLproject's ``device`` param (``auto``) first, which a changed value would collide with.
DEVICE = "scoring_device"


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

    Inputs are images (n, H, W) or (n, H, W, C) of pixel values 0-255 (uint8 as the signature
    declares, or floats holding them, as a Spark UDF passes them), scaled to [0, 1] inside; or
    float32 pixels (n, C, H, W) for a model whose recipe scales its inputs otherwise (and models
    logged by earlier versions of the workbench), or a table's rows (n, d). ``model_config``'s
    ``input_shape`` (one sample, channels first; (1, 28, 28) when absent, as earlier versions
    logged) tells the two apart: raw images are those of any other shape with its pixels.

    The network scores on the device ``model_config`` names (``cpu`` as logged, and for models
    logged before the key existed); a batch goes there and its probabilities come back as numpy.
    """

    def load_context(self, context) -> None:
        config = context.model_config
        self.networks = load_networks(context.artifacts.get(NETWORKS))
        self.device = torch.device(config.get(DEVICE) or "cpu")
        spec = config["spec"]
        # models logged before the input shape was recorded took 28x28 grey images (and their networks file
        # builds no other)
        shape = {"input_shape": tuple(config["input_shape"])} if "input_shape" in config else {}
        self.input_shape = shape.get("input_shape", (1, 28, 28))
        network = self.networks.build_network(
            spec["arch"], tuple(spec.get("hidden", ())), int(config["n_classes"]), **shape
        )
        state = torch.load(context.artifacts[WEIGHTS], map_location=self.device, weights_only=True)
        network.load_state_dict({key.removeprefix("network."): value for key, value in state.items()})
        self.network = network.to(self.device).eval()

    def predict(self, context, model_input: np.ndarray, params=None) -> np.ndarray:
        if self._takes_raw_images(np.shape(model_input)):  # pixel values 0-255, scaled here
            inputs = self.networks.image_inputs(model_input)
        else:
            inputs = torch.from_numpy(np.require(model_input, np.float32, ["C", "W"]))
        with torch.inference_mode():
            return torch.softmax(self.network(inputs.to(self.device)), dim=1).cpu().numpy()

    def _takes_raw_images(self, shape: tuple[int, ...]) -> bool:
        """Whether inputs of ``shape`` are stored images ((n, H, W) or (n, H, W, C)), not the network's own input."""
        if len(self.input_shape) != 3 or tuple(shape[1:]) == tuple(self.input_shape):
            return False
        channels, height, width = self.input_shape
        return tuple(shape[1:]) in ((height, width), (height, width, channels))


if __name__ != "ema.training.pyfunc_code":  # MLflow runs this file under a module name of its own
    set_model(TorchStateDictModel())
