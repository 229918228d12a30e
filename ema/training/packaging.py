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

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import mlflow.pyfunc
import numpy as np
import torch

from ema.errors import EMAError
from ema.training.architectures import ProbabilityModel
from ema.training.fit import predict_proba, to_tensor
from ema.training.model_package import FLAVOR_PYFUNC_CODE, FLAVOR_SKLEARN, ModelPackage
from ema.training.spec import TrainSpec

#: The file MLflow stores with the model and runs to load it.
MODEL_CODE = Path(__file__).with_name("pyfunc_code.py")
#: Artifact key of the state dict.
WEIGHTS = "weights"


@contextmanager
def package_classifier(classifier, pixels: np.ndarray) -> Iterator[ModelPackage]:
    """A package of a classifier we trained (torch or scikit-learn), its example being ``pixels[:2]``.

    The torch weights live in a scratch folder for as long as the context is open.
    """
    from ema.training.recipes import SklearnClassifier, flatten

    example = classifier.transform.apply(pixels[:2])
    if isinstance(classifier, SklearnClassifier):
        import sklearn

        flat = flatten(example)
        yield ModelPackage(
            FLAVOR_SKLEARN,
            flat,
            classifier.estimator.predict_proba(flat),
            (f"scikit-learn=={sklearn.__version__}",),
            estimator=classifier.estimator,
        )
        return
    with package_torch_model(classifier.model, example) as package:
        yield package


@contextmanager
def package_torch_model(model: ProbabilityModel, example: np.ndarray) -> Iterator[ModelPackage]:
    """A package of one of our torch models; ``example`` is float32 input as the model takes it."""
    with tempfile.TemporaryDirectory() as folder:
        yield ModelPackage(
            FLAVOR_PYFUNC_CODE,
            np.ascontiguousarray(example, dtype=np.float32),
            predict_proba(model, example),
            (f"torch=={torch.__version__.split('+')[0]}",),
            python_model=str(MODEL_CODE),
            artifacts={WEIGHTS: str(save_weights(model, Path(folder) / "weights.pt"))},
            model_config=model_config(model),
        )


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


def load_torch_model(model_uri: str) -> ProbabilityModel:
    """The torch model behind ``model_uri``, when it is one of ours (logged by :func:`package_torch_model`).

    Approximate unlearning changes the weights, so it needs them, not only the model's outputs.

    Raises
    ------
    EMAError
        If the model is not one of the workbench's torch models (another framework or flavor).
    """
    python_model = None
    try:
        python_model = mlflow.pyfunc.load_model(model_uri).unwrap_python_model()
    except mlflow.exceptions.MlflowException:
        pass  # not a python_model pyfunc (e.g. scikit-learn's flavor): refused below
    if not isinstance(python_model, TorchStateDictModel):
        raise EMAError(
            f"expected one of the workbench's torch models (logged by `ema train`) at {model_uri}, got "
            f"{type(python_model).__name__ if python_model is not None else 'another flavor'}: approximate "
            "unlearning changes the weights; --method retrain needs only the recipe"
        )
    return python_model.model
