"""An MLflow pyfunc model loaded in-process, as an oracle."""

from __future__ import annotations

import logging
from importlib import metadata
from pathlib import Path

import numpy as np
from packaging.requirements import InvalidRequirement, Requirement

from ema.errors import EMAError
from ema.oracle.base import Oracle


class PyfuncOracle(Oracle):
    """An MLflow pyfunc model loaded in-process (``models:/NAME@ALIAS``, ``runs:/...``, a path).

    Loading a pyfunc model runs that model's code: load only models you trust, and audit
    others over HTTP against a sandboxed server.
    """

    def __init__(self, model_uri: str, **options) -> None:
        import mlflow.pyfunc
        from mlflow.exceptions import MlflowException

        try:
            local_path = mlflow.artifacts.download_artifacts(model_uri)
            # MLflow's own requirements check maps every installed distribution to its modules first
            # (1.3 s here); warn_about_mismatches reads just the model's requirements
            self._model = mlflow.pyfunc.load_model(local_path, suppress_warnings=True)
        except (MlflowException, OSError) as exc:
            raise EMAError(f"could not load model {model_uri!r}: {str(exc).splitlines()[0]}") from exc
        warn_about_mismatches(model_uri, Path(local_path) / "requirements.txt")
        self.model_uri = model_uri
        self.source = f"model {model_uri!r}"
        super().__init__(**{**declared_input(self._model.metadata.get_input_schema()), **options})

    def _predict_batch(self, inputs: np.ndarray) -> object:
        from mlflow.exceptions import MlflowException

        try:
            return self._model.predict(inputs)
        except MlflowException as exc:
            raise EMAError(f"model {self.model_uri!r} refused the query: {_first_line(exc)}") from exc
        except Exception as exc:  # the model's own code: whatever it raises is the model's failure, not ours
            raise EMAError(
                f"model {self.model_uri!r} failed on a batch of {len(inputs)} images of shape {inputs.shape[1:]}: "
                f"{type(exc).__name__}: {_first_line(exc)}"
            ) from exc


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:500] if lines else type(exc).__name__


def requirement_mismatches(requirements_file: Path) -> list[str]:
    """The model's pinned requirements that the packages installed here do not satisfy, as ``name==want (have X)``."""
    if not requirements_file.is_file():
        return []
    mismatches = []
    for line in requirements_file.read_text().splitlines():
        try:
            requirement = Requirement(line.strip())
        except InvalidRequirement:  # blank lines, comments, pip options: nothing to compare
            continue
        try:
            installed = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            installed = "not installed"
        if installed == "not installed" or not requirement.specifier.contains(installed, prereleases=True):
            mismatches.append(f"{requirement} (installed: {installed})")
    return mismatches


def warn_about_mismatches(model_uri: str, requirements_file: Path) -> None:
    """Log, as MLflow would, which of the model's requirements differ from what is installed."""
    mismatches = requirement_mismatches(requirements_file)
    if mismatches:
        logging.getLogger(__name__).warning(
            "model %r was logged with requirements that differ from this environment (its predictions may "
            "differ too): %s",
            model_uri,
            "; ".join(mismatches),
        )


def declared_input(schema) -> dict:
    """``input_shape`` and ``input_dtype`` for :class:`Oracle` from a model's input schema ({} if not a tensor one)."""
    if schema is None or not schema.is_tensor_spec():
        return {}
    spec = schema.inputs[0]
    declared = {"input_shape": tuple(spec.shape)}
    if spec.type == np.dtype(np.uint8):
        declared["input_dtype"] = "uint8"
    return declared
