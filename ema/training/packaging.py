"""Our models as MLflow pyfunc models: torch ones as a network name, a state dict and code that needs no ``ema``.

MLflow's ``pt2`` format (``torch.export``) took 1.68 s to log the demo's two models (under the
profiler) and added 225 MB to a fresh process that loaded the target (benchmarks/RESULTS.md,
memory, store's first use included; 60 MB now): the exported graph drags in the export machinery.
Our models need none of it: a :class:`~ema.training.spec.TrainSpec` (in the model's
``model_config``) rebuilds the network, and the weights are a state dict read with
``torch.load(weights_only=True)``, which refuses pickled code. The model is logged as
MLflow "models from code": what MLflow runs on load is :mod:`ema.training.pyfunc_code`,
with :mod:`ema.training.networks` stored beside the weights, and neither imports ``ema``.

A torch model takes raw uint8 images as they are stored ((n, H, W) grey, (n, H, W, C)
colour) and scales them itself, so that a request to a scoring server carries small
integers instead of float pixels (benchmarks/RESULTS.md).
A recipe that scales its inputs otherwise (``InputTransform``) keeps float32 pixel inputs,
scaled by the caller, as before.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import mlflow.pyfunc
import numpy as np
import torch

from ema.errors import InputError
from ema.inputs import InputTransform, to_model_inputs
from ema.model_package import FLAVOR_PYFUNC_CODE, FLAVOR_SKLEARN, ModelPackage
from ema.training import networks
from ema.training.architectures import ProbabilityModel
from ema.training.fit import on_cpu, predict_proba
from ema.training.networks import INPUT_SHAPE

# Models logged by earlier versions load their class from here (their code file imports it from this module).
from ema.training.pyfunc_code import DEVICE, NETWORKS, WEIGHTS, TorchStateDictModel
from ema.training.spec import TrainSpec

#: The file MLflow stores with the model and runs to load it.
MODEL_CODE = Path(__file__).with_name("pyfunc_code.py")

__all__ = [
    "MODEL_CODE",
    "NETWORKS",
    "WEIGHTS",
    "TorchStateDictModel",
    "load_torch_model",
    "package_classifier",
    "package_torch_model",
]


@contextmanager
def package_classifier(classifier, images: np.ndarray) -> Iterator[ModelPackage]:
    """A package of a classifier we trained (torch or scikit-learn), its example being ``images[:2]`` (or a table's).

    A scikit-learn classifier fitted on a table's named columns gets a DataFrame example, so
    its signature names the columns.

    The torch weights live in a scratch folder for as long as the context is open.
    """
    from ema.training.recipes import SklearnClassifier

    if isinstance(classifier, SklearnClassifier):
        import sklearn

        example = classifier.features(to_model_inputs(images[:2]))
        import skops

        from ema.training.helper_loading import sklearn_types

        yield ModelPackage(
            FLAVOR_SKLEARN,
            example,
            classifier.estimator.predict_proba(example),
            (f"scikit-learn=={sklearn.__version__}", f"skops=={skops.__version__}"),
            estimator=classifier.estimator,
            skops_trusted_types=tuple(sorted(sklearn_types(classifier.estimator))),
        )
        return
    with package_torch_model(classifier.model, images, classifier.transform) as package:
        yield package


@contextmanager
def package_torch_model(
    model: ProbabilityModel, images: np.ndarray, transform: InputTransform = InputTransform()
) -> Iterator[ModelPackage]:
    """A package of one of our torch models, its example being ``images[:2]`` (uint8 (n, H, W[, C]) images, or a
    table's rows).

    The model takes uint8 images when ``transform`` is the identity, else float32 pixels
    (n, C, H, W) scaled by ``transform`` (the caller scales them). Its weights are saved from the
    CPU, wherever it was trained, so that it loads on any machine.
    """
    model = on_cpu(model)
    example = images[:2] if transform.is_identity else transform.apply(to_model_inputs(images[:2]))
    requirements = [f"torch=={torch.__version__.split('+')[0]}"]
    if model.spec.arch == "resnet18":
        import torchvision

        requirements.append(f"torchvision=={torchvision.__version__.split('+')[0]}")
    with tempfile.TemporaryDirectory() as folder:
        yield ModelPackage(
            FLAVOR_PYFUNC_CODE,
            np.ascontiguousarray(example),
            predict_proba(model, transform.apply(to_model_inputs(images[:2]))),
            tuple(requirements),
            python_model=str(MODEL_CODE),
            artifacts={
                WEIGHTS: str(save_weights(model, Path(folder) / "weights.pt")),
                NETWORKS: networks.__file__,
            },
            model_config=model_config(model),
        )


def model_config(model: ProbabilityModel) -> dict:
    """What :class:`TorchStateDictModel` needs besides the weights to rebuild ``model`` (its input shape
    included), and where it scores.

    ``scoring_device`` is ``cpu`` as logged; a caller moves the model by loading it with
    ``mlflow.pyfunc.load_model(uri, model_config={"scoring_device": "cuda:0"})``, as MLflow's pytorch flavor
    takes ``device`` (a key MLflow would log as a param beside ``mlflow run``'s own ``device``: see
    :data:`~ema.training.pyfunc_code.DEVICE`).
    """
    return {
        "spec": model.spec.to_dict(),
        "n_classes": model.n_classes,
        "input_shape": list(model.input_shape),
        DEVICE: "cpu",
    }


def save_weights(model: ProbabilityModel, path: Path) -> Path:
    torch.save(model.state_dict(), path)
    return path


def load_torch_model(model_uri: str, *, device: str = "cpu") -> ProbabilityModel:
    """The torch model behind ``model_uri``, on ``device``, when it is one of ours (from :func:`package_torch_model`).

    Approximate unlearning changes the weights, so it needs them, not only the model's outputs.

    Raises
    ------
    InputError
        If the model is not one of the workbench's torch models (another framework or flavor).
    """
    try:
        loaded = mlflow.pyfunc.load_model(model_uri)
        python_model = loaded.unwrap_python_model()
    except mlflow.exceptions.MlflowException:
        loaded = python_model = None  # not a python_model pyfunc (e.g. scikit-learn's flavor): refused below
    # the class comes from the model's own copy of pyfunc_code.py, so it is recognised by what it holds
    config = (loaded.model_config or {}) if loaded is not None else {}
    if not isinstance(getattr(python_model, "network", None), torch.nn.Module) or "spec" not in config:
        raise InputError(
            f"expected one of the workbench's torch models (logged by `ema train`) at {model_uri}, got "
            f"{type(python_model).__name__ if python_model is not None else 'another flavor'}: approximate "
            "unlearning changes the weights; --method retrain needs only the recipe"
        )
    model = ProbabilityModel(
        TrainSpec.from_dict(config["spec"]), int(config["n_classes"]), tuple(config.get("input_shape", INPUT_SHAPE))
    )
    model.network.load_state_dict(python_model.network.state_dict())
    return model.to(device).eval()
