"""The model registry: logging and registering our models, resolving URIs, the calibration cache."""

from __future__ import annotations

import re
from dataclasses import dataclass

import mlflow
import numpy as np
from mlflow.entities.model_registry import ModelVersion
from mlflow.exceptions import MlflowException
from mlflow.models import ModelSignature
from mlflow.tracking import MlflowClient
from mlflow.types import Schema, TensorSpec

from ema.errors import EMAError, InputError
from ema.tracking import keys

MODELS_URI = re.compile(r"^models:/(?P<name>[^/@]+)(?:@(?P<alias>[^/]+)|/(?P<version>\d+))$")


@dataclass(frozen=True)
class RegisteredVersion:
    """A model version in the registry, with its tags."""

    name: str
    version: str
    run_id: str | None
    tags: dict[str, str]

    @property
    def uri(self) -> str:
        return f"models:/{self.name}/{self.version}"

    @classmethod
    def from_entity(cls, entity: ModelVersion) -> RegisteredVersion:
        return cls(entity.name, str(entity.version), entity.run_id, dict(entity.tags or {}))


def resolve_version(model_uri: str) -> RegisteredVersion:
    """The registered version behind ``models:/NAME@ALIAS`` or ``models:/NAME/VERSION``.

    Raises
    ------
    EMAError
        If the URI is not of that form, or the model, alias or version does not exist.
    """
    match = MODELS_URI.match(model_uri)
    if not match:
        raise InputError(
            f"expected a registered model URI models:/NAME@ALIAS or models:/NAME/VERSION, got {model_uri!r}"
        )
    client = MlflowClient()
    name, alias, version = match["name"], match["alias"], match["version"]
    try:
        registered = client.get_registered_model(name)
    except MlflowException as exc:
        known = sorted(m.name for m in client.search_registered_models())
        raise EMAError(
            f"registered model {name!r} does not exist in {mlflow.get_tracking_uri()}; known: {known}"
        ) from exc
    try:
        if alias:
            return RegisteredVersion.from_entity(client.get_model_version_by_alias(name, alias))
        return RegisteredVersion.from_entity(client.get_model_version(name, version))
    except MlflowException as exc:
        what = f"alias {alias!r}" if alias else f"version {version}"
        known = sorted(registered.aliases) if alias else "see `mlflow ui`"
        raise EMAError(f"registered model {name!r} has no {what}; known aliases: {known}") from exc


def image_signature(n_classes: int) -> ModelSignature:
    """float32 images (n, 1, 28, 28) in, float32 probabilities (n, n_classes) out."""
    return ModelSignature(
        inputs=Schema([TensorSpec(np.dtype(np.float32), (-1, 1, 28, 28))]),
        outputs=Schema([TensorSpec(np.dtype(np.float32), (-1, n_classes))]),
    )


def log_and_register_torch_model(
    model, input_example: np.ndarray, *, name: str, alias: str, tags: dict[str, str]
) -> RegisteredVersion:
    """Log one of our probability-returning torch models in the active run and register it.

    Logged as a pyfunc that rebuilds the network from its spec and a state dict
    (:mod:`ema.training.packaging`): cheap to save and to load, and no pickled code.
    Pip requirements are explicit, which skips MLflow's slow requirement inference.
    """
    import tempfile
    from pathlib import Path

    import mlflow.pyfunc
    import torch

    from ema.training.packaging import MODEL_CODE, WEIGHTS, model_config, save_weights

    with tempfile.TemporaryDirectory() as folder:
        info = mlflow.pyfunc.log_model(
            name=keys.MODEL_ARTIFACT,
            python_model=str(MODEL_CODE),
            artifacts={WEIGHTS: str(save_weights(model, Path(folder) / "weights.pt"))},
            model_config=model_config(model),
            signature=image_signature(model.n_classes),
            input_example=input_example[:2],
            pip_requirements=[f"torch=={torch.__version__.split('+')[0]}"],
        )
    return register(info.model_uri, name=name, alias=alias, tags=tags)


def log_and_register_sklearn_model(
    estimator, input_example: np.ndarray, *, name: str, alias: str, tags: dict[str, str]
) -> RegisteredVersion:
    """Log a scikit-learn classifier whose pyfunc returns ``predict_proba``, and register it."""
    import mlflow.sklearn
    import sklearn
    from mlflow.models import infer_signature

    info = mlflow.sklearn.log_model(
        estimator,
        name=keys.MODEL_ARTIFACT,
        signature=infer_signature(input_example, estimator.predict_proba(input_example)),
        input_example=input_example[:2],
        pyfunc_predict_fn="predict_proba",
        serialization_format=mlflow.sklearn.SERIALIZATION_FORMAT_CLOUDPICKLE,
        pip_requirements=[f"scikit-learn=={sklearn.__version__}"],
    )
    return register(info.model_uri, name=name, alias=alias, tags=tags)


def log_and_register_classifier(classifier, input_example: np.ndarray, **kwargs) -> RegisteredVersion:
    """Log and register a calibration model we trained, whichever framework made it."""
    from ema.training.recipes import SklearnClassifier, flatten

    if isinstance(classifier, SklearnClassifier):
        example = flatten(classifier.transform.apply(input_example[:2]))
        return log_and_register_sklearn_model(classifier.estimator, example, **kwargs)
    return log_and_register_torch_model(classifier.model, classifier.transform.apply(input_example[:2]), **kwargs)


def declared_input_shape(model_uri: str) -> tuple[int, ...] | None:
    """The input shape a logged model's tensor signature declares, without loading the model."""
    from mlflow.models import get_model_info

    signature = get_model_info(model_uri).signature
    if signature is None or not signature.inputs.is_tensor_spec():
        return None
    return tuple(signature.inputs.inputs[0].shape)


def set_version_tags(version: RegisteredVersion, tags: dict[str, str]) -> None:
    """Tag a model version (e.g. with its latest audit), so the registry shows it."""
    client = MlflowClient()
    for key, value in tags.items():
        client.set_model_version_tag(version.name, version.version, key, value)


def register(model_uri: str, *, name: str, alias: str, tags: dict[str, str]) -> RegisteredVersion:
    """Register ``model_uri`` under ``name``, point ``alias`` at it and tag the version."""
    version = mlflow.register_model(model_uri, name, tags=tags)
    MlflowClient().set_registered_model_alias(name, alias, version.version)
    return RegisteredVersion.from_entity(MlflowClient().get_model_version(name, version.version))


def find_cached_version(name: str, cache_key: str) -> RegisteredVersion | None:
    """The newest version of ``name`` tagged with ``cache_key``, or None (also when ``name`` is not registered).

    Asked of the registry every time: a version deleted since is not found.
    """
    found = MlflowClient().search_model_versions(f"name = '{name}' and tags.`{keys.TAG_CACHE_KEY}` = '{cache_key}'")
    if not found:
        return None
    return RegisteredVersion.from_entity(max(found, key=lambda v: int(v.version)))


def set_alias(version: RegisteredVersion, alias: str) -> None:
    MlflowClient().set_registered_model_alias(version.name, alias, version.version)
