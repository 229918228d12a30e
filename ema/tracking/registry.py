"""The model registry: logging and registering our models, resolving URIs, tagging versions."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import mlflow
import mlflow.pyfunc
from mlflow.entities.model_registry import ModelVersion, RegisteredModel
from mlflow.exceptions import MlflowException
from mlflow.models import infer_signature
from mlflow.tracking import MlflowClient

from ema.errors import InputError
from ema.model_package import FLAVOR_PYTORCH, FLAVOR_SKLEARN, ModelPackage
from ema.tracking import keys
from ema.tracking.runs import no_notebook_probe
from ema.tracking.search import quoted
from ema.tracking.store import retry_set

MODELS_URI = re.compile(r"^models:/(?P<name>[^/@]+)(?:@(?P<alias>[^/]+)|/(?P<version>\d+))$")

_logger = logging.getLogger(__name__)


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

    @property
    def described(self) -> str:
        """``v2 (breast-cancer)``: the version and, from its lineage tags, the data it was trained on.

        A set file adds its name (``file patients.csv``), an owner's file trained on in place of a
        fold its fold and name (``M1 from M1-marked.npz``), an unlearned version what it removed.
        """
        source = self.tags.get(keys.TAG_DATA_SOURCE)
        if source is None:
            return f"v{self.version}"
        root = self.tags.get(keys.TAG_DATA_ROOT)
        words = [f"{source} {Path(root).name}" if root else source]
        words += [
            f"{name.removeprefix(keys.TAG_DATA_FOLD_FILE_PREFIX)} from {Path(path).name}"
            for name, path in sorted(self.tags.items())
            if name.startswith(keys.TAG_DATA_FOLD_FILE_PREFIX)
        ]
        if keys.TAG_FORGET in self.tags:
            words.append(f"without {self.tags[keys.TAG_FORGET]}")
        return f"v{self.version} ({', '.join(words)})"

    @classmethod
    def from_entity(cls, entity: ModelVersion) -> RegisteredVersion:
        return cls(entity.name, str(entity.version), entity.run_id, dict(entity.tags or {}))


def audited_model_tag(model_uri: str | None) -> dict[str, str]:
    """The tag naming the registered model of ``models:/NAME...``, set as an audit's run starts; none for others."""
    found = MODELS_URI.match(model_uri or "")
    return {keys.TAG_AUDITED_MODEL: found["name"]} if found else {}


def resolve_version(model_uri: str) -> RegisteredVersion:
    """The registered version behind ``models:/NAME@ALIAS`` or ``models:/NAME/VERSION``.

    Raises
    ------
    InputError
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
        if alias:
            return RegisteredVersion.from_entity(client.get_model_version_by_alias(name, alias))
        return RegisteredVersion.from_entity(client.get_model_version(name, version))
    except MlflowException as exc:
        failure = exc
    registered = registered_model(name)  # only now, to say what went wrong: no query on the way that works
    if alias:
        raise InputError(
            f"registered model {name!r} has no alias {alias!r}; known aliases: {sorted(registered.aliases)}"
        ) from failure
    versions = sorted(int(v.version) for v in client.search_model_versions(f"name = {quoted('model name', name)}"))
    raise InputError(f"registered model {name!r} has no version {version}; known versions: {versions}") from failure


def registered_model(name: str) -> RegisteredModel:
    """The registered model ``name``.

    Raises
    ------
    InputError
        If there is none, naming the registered models there are.
    """
    client = MlflowClient()
    try:
        return client.get_registered_model(name)
    except MlflowException as exc:
        known = sorted(m.name for m in client.search_registered_models())
        raise InputError(
            f"registered model {name!r} does not exist in {mlflow.get_tracking_uri()}; known: {known}"
        ) from exc


def log_and_register(package: ModelPackage, *, name: str, alias: str | None, tags: dict[str, str]) -> RegisteredVersion:
    """Log a packaged model in the active run, register it under ``name`` and point ``alias`` at it (unless None).

    The signature is inferred from the package's example input and output; pip requirements
    are explicit, which skips MLflow's slow requirement inference.
    """
    signature = infer_signature(package.input_example, package.output_example)
    common = {
        "name": keys.MODEL_ARTIFACT,
        "signature": signature,
        "input_example": package.input_example[:2],
        "pip_requirements": list(package.pip_requirements),
    }
    with no_notebook_probe():  # logging a model resolves the run context's tags, as start_run does
        if package.flavor == FLAVOR_SKLEARN:
            from mlflow import sklearn as mlflow_sklearn  # imports scikit-learn: only when one is logged

            info = mlflow_sklearn.log_model(
                package.estimator,
                pyfunc_predict_fn="predict_proba",
                serialization_format=mlflow_sklearn.SERIALIZATION_FORMAT_SKOPS,
                skops_trusted_types=list(package.skops_trusted_types),
                **common,
            )
        elif package.flavor == FLAVOR_PYTORCH:
            from mlflow import pytorch as mlflow_pytorch  # imports torch: only when a cloned torch model is logged

            info = mlflow_pytorch.log_model(
                package.estimator, serialization_format="pt2", extra_files=list(package.extra_files), **common
            )
        else:
            info = mlflow.pyfunc.log_model(
                python_model=package.python_model,
                artifacts=package.artifacts,
                model_config=package.model_config,
                **common,
            )
    return register(info.model_uri, name=name, alias=alias, tags=tags)


def set_version_tags(version: RegisteredVersion, tags: dict[str, str]) -> None:
    """Tag a model version (e.g. with its latest audit), so the registry shows it."""
    client = MlflowClient()
    for key, value in tags.items():
        retry_set(partial(client.set_model_version_tag, version.name, version.version, key, value))


def register(model_uri: str, *, name: str, alias: str | None, tags: dict[str, str]) -> RegisteredVersion:
    """Register ``model_uri`` under ``name``, tag the version and point ``alias`` at it (no alias when None)."""
    version = mlflow.register_model(model_uri, name, tags=tags)
    registered = RegisteredVersion.from_entity(MlflowClient().get_model_version(name, version.version))
    if alias is not None:
        set_alias(registered, alias)
    return registered


def set_alias(version: RegisteredVersion, alias: str) -> None:
    """Point ``alias`` of the version's model at it (safe when another process sets the same new alias at once).

    An alias that pointed at another version is moved, and every command that names
    ``models:/NAME@ALIAS`` reaches the new version from then on: one line, logged as a warning,
    says from which version (and its data) to which.
    """
    client = MlflowClient()
    previous = client.get_registered_model(version.name).aliases.get(alias)
    retry_set(lambda: client.set_registered_model_alias(version.name, alias, version.version))
    if previous is not None and str(previous) != version.version:
        before = RegisteredVersion.from_entity(client.get_model_version(version.name, str(previous)))
        _logger.warning(
            "alias @%s of %s moved from %s to %s: models:/%s@%s now reaches it",
            alias, version.name, before.described, version.described, version.name, alias,
        )  # fmt: skip
