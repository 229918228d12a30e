"""An MLflow pyfunc model loaded in-process, as an oracle."""

from __future__ import annotations

import functools
import logging
import platform
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from packaging.requirements import InvalidRequirement, Requirement

from ema.errors import InputError, ModelAccessError
from ema.inputs import InputSpec
from ema.oracle.base import Oracle
from ema.oracle.model_info import check_model_path, input_spec_from, missing_module_error, model_read_error
from ema.run_warnings import FOR_THE_RECORD

#: Longest model message kept in an error (MLflow's schema errors quote the data; the reason comes last).
MAX_MESSAGE = 1000
#: Where MLflow's schema-enforcement message ("... with schema '...'. Error: REASON") starts its reason.
SCHEMA_REASON = "'. Error: "
#: The start of scikit-learn's warning for columns sent by position (:func:`~ema.oracle.base.log_by_position` says it).
SKLEARN_BY_POSITION = "X does not have valid feature names"
#: What a model's own code raises on inputs unlike those it takes (scikit-learn's feature count, a shape, a
#: column): the same inputs fail the same way again, an input error (exit 3), not one to retry.
INPUT_FAILURES = (ValueError, TypeError, KeyError, IndexError)
#: torch's RuntimeErrors for inputs of a dtype or shape its layers do not take: the same on every try (exit 3).
TORCH_INPUT_ERRORS = (
    "Input type (",  # a convolution's input dtype unlike its weights'
    "to have the same dtype",  # a matrix product's
    "expected scalar type",
    "shapes cannot be multiplied",  # a linear layer's input size
    "Given groups=",  # a convolution's input channels
)
#: torch's error for a tensor pickled on a GPU and loaded where there is none (see :func:`torch_load_onto`).
CUDA_PICKLE = "Attempting to deserialize object on a CUDA device"
#: torch's errors for a model whose own code moves to a GPU on a machine without one: the same every time (exit 3,
#: not a retryable model failure).
NO_GPU_ERRORS = ("Found no NVIDIA driver", "Torch not compiled with CUDA enabled", "No CUDA GPUs are available")
#: The ``model_config`` keys where a model takes its device: our torch models' (``ema.training.pyfunc_code.DEVICE``),
#: and MLflow's pytorch flavor's, which our torch models logged before; and the CPU's name.
DEVICE_KEYS, CPU = ("scoring_device", "device"), "cpu"


class PyfuncOracle(Oracle):
    """An MLflow pyfunc model loaded in-process (``models:/NAME@ALIAS``, ``runs:/...``, a path).

    Inputs follow the model's signature (tensor or column-based; dtype and shape), else its
    input example, unless ``input_spec`` is given. Loading a pyfunc model runs that model's
    code: load only models you trust, and audit others over HTTP against a sandboxed server.

    ``copy_of`` says that ``model_uri`` is a copy of the model known by that URI (the folder a
    Spark executor receives): errors name it, and its requirements are left to whoever loaded
    the original (the driver warned about them).

    ``device`` (``cpu``, ``cuda:N``) is where a model that takes one scores: MLflow's pytorch
    flavor and the workbench's own torch models read it from their ``model_config``; other
    models ignore it. None leaves the flavor's own choice (MLflow's pytorch flavor: CUDA when
    available). A model that cannot be moved there (a ``torch.export`` graph saved on the CPU)
    scores on the CPU, with a warning.
    """

    def __init__(self, model_uri: str, *, device: str | None = None, copy_of: str | None = None, **options) -> None:
        import mlflow.pyfunc
        from mlflow.exceptions import MlflowException

        check_model_path(model_uri)
        try:
            local_path = mlflow.artifacts.download_artifacts(model_uri)
            self._model = load_on_device(model_uri, local_path, device)
        except ModuleNotFoundError as exc:
            raise missing_module_error(copy_of or model_uri, exc) from exc
        except (
            MlflowException,
            OSError,
            RuntimeError,
            yaml.YAMLError,
            ValueError,
            TypeError,
            ImportError,
            AttributeError,
        ) as exc:
            raise model_read_error(copy_of or model_uri, exc, "load") from exc
        if copy_of is None:
            python = self._model.metadata.flavors.get("python_function", {}).get("python_version")
            warn_about_mismatches(model_uri, Path(local_path) / "requirements.txt", python)
        #: The model's files on this machine (for a ``models:/`` URI, the copy MLflow downloaded).
        self.local_path = local_path
        self.model_uri = copy_of or model_uri
        self.source = f"model {self.model_uri!r}"
        if options.get("input_spec") is None:
            declared = input_spec_from(self._model.metadata.get_input_schema(), self._input_example())
            options["input_spec"] = declared or self._fitted_columns()
        super().__init__(**options)

    def _fitted_columns(self) -> InputSpec | None:
        """The columns a scikit-learn model was fitted on (``feature_names_in_``), for a model that declares no inputs.

        Without them a table would reach the model by position, and a query whose columns come in
        another order would be scored as other features, silently (by name, they are put in order).
        """
        try:
            names = getattr(self._model.get_raw_model(), "feature_names_in_", None)
        except NotImplementedError:  # a flavor without a raw model to ask
            return None
        if names is None or not all(isinstance(name, str) for name in names):
            return None
        return InputSpec(dtype="float64", columns=tuple(names), types_declared=False)

    def _input_example(self) -> object:
        """The logged input example, read only for a model without a signature."""
        if self._model.metadata.get_input_schema() is not None:
            return None
        try:
            return self._model.input_example
        except Exception:  # an unreadable example is as good as none: --input-shape then says the shape
            return None

    #: Whether the model failed on pixels not C-ordered in memory (see :meth:`_predict_batch`) and now gets copies.
    _c_order_only = False

    def _predict_batch(self, inputs: np.ndarray | pd.DataFrame) -> object:
        """The model's outputs for one prepared batch.

        Colour pixels arrive channels-last in memory (:func:`ema.inputs.prepare_inputs`). A
        model whose code needs C order (a torch ``view`` of its input) fails on them: the batch
        is retried once as a C-ordered copy, and if that scores, every later batch is copied too.
        """
        from mlflow.exceptions import MlflowException

        strided = isinstance(inputs, np.ndarray) and not inputs.flags.c_contiguous
        if strided and self._c_order_only:
            return self._predict_batch(np.ascontiguousarray(inputs))
        try:
            with warnings.catch_warnings():  # scikit-learn's warning for a table sent by position: logged as ours
                warnings.filterwarnings("ignore", message=SKLEARN_BY_POSITION, category=UserWarning)
                return self._model.predict(inputs)
        except MlflowException as exc:  # its signature's schema refused the inputs: they fail the same way again
            raise InputError(
                f"model {self.model_uri!r} refused the query ({self.input_spec.describe()}): {schema_reason(exc)}"
            ) from exc
        except Exception as exc:  # the model's own code: whatever it raises is the model's failure, not ours
            if strided:
                return self._retry_in_c_order(inputs, exc)
            if any(message in str(exc) for message in NO_GPU_ERRORS):
                raise InputError(
                    f"expected a model that scores on this machine's CPU, got {self.model_uri!r}, whose code needs a "
                    f"CUDA GPU ({first_line(exc)}): audit it on a machine with one (--device cuda), or against a "
                    "scoring server on such a machine (--model-url)"
                ) from exc
            # the inputs' kind of failure (a feature count, a shape, a column) repeats; anything else may not
            refused = isinstance(exc, INPUT_FAILURES) or any(message in str(exc) for message in TORCH_INPUT_ERRORS)
            error = InputError if refused else ModelAccessError
            raise error(
                f"model {self.model_uri!r} failed on a batch of {len(inputs)} inputs of shape {inputs.shape[1:]}: "
                f"{type(exc).__name__}: {first_line(exc)}"
            ) from exc

    def _retry_in_c_order(self, inputs: np.ndarray, failure: Exception) -> object:
        """Scores a C-ordered copy of a batch the model failed on, and copies every later batch too if it scores."""
        outputs = self._predict_batch(np.ascontiguousarray(inputs))
        self._c_order_only = True
        logging.getLogger(__name__).info(
            "model %r failed on channels-last pixels (%s: %s) and scored a C-ordered copy; later batches are copied",
            self.model_uri,
            type(failure).__name__,
            first_line(failure),
        )
        return outputs


def load_on_device(model_uri: str, local_path: str, device: str | None) -> object:
    """The pyfunc model at ``local_path``, loaded to score on ``device`` where its ``model_config`` takes a device.

    Falls back to the CPU, with a warning, when the model cannot be loaded on ``device``.
    """
    import mlflow.pyfunc
    from mlflow.exceptions import MlflowException

    # MLflow's own requirements check maps every installed distribution to its modules first
    # (1.3 s here); warn_about_mismatches reads just the model's requirements
    config = device_config(local_path, device)
    try:
        return mlflow.pyfunc.load_model(local_path, suppress_warnings=True, model_config=config)
    except RuntimeError as exc:
        if CUDA_PICKLE not in str(exc):
            raise
        logging.getLogger(__name__).info(
            "model %r was pickled on a GPU, and there is none here: its tensors are loaded onto %s",
            model_uri,
            device or CPU,
        )
        with torch_load_onto(device or CPU):
            return mlflow.pyfunc.load_model(local_path, suppress_warnings=True, model_config=config)
    except MlflowException as exc:
        if config is None or device == CPU:
            raise
        logging.getLogger(__name__).warning(
            "model %r could not be loaded on %s (%s); scoring it on the CPU", model_uri, device, one_line(exc)
        )
        return mlflow.pyfunc.load_model(local_path, suppress_warnings=True, model_config=device_config(local_path, CPU))


@contextmanager
def torch_load_onto(device: str) -> Iterator[None]:
    """Within the block, ``torch.load`` maps every tensor onto ``device`` (where no ``map_location`` is given).

    MLflow's pytorch flavor unpickles a model's tensors onto the devices they were saved from
    and takes no ``map_location``; a model pickled on a GPU then fails to load on a machine
    without one, although it scores on the CPU. Called only after that flavor failed so, with
    torch imported by it: the oracle layer itself never imports torch.
    """
    torch = sys.modules["torch"]
    load = torch.load
    torch.load = functools.partial(load, map_location=device)
    try:
        yield
    finally:
        torch.load = load


def device_config(local_path: str, device: str | None) -> dict | None:
    """``{key: device}`` when the model's pyfunc configuration has a device key (:data:`DEVICE_KEYS`), else None.

    MLflow applies only keys the logged configuration already holds (and warns about others),
    so a model without one (scikit-learn, ONNX, older workbench models) is loaded as it is.
    """
    if device is None:
        return None
    from mlflow.models import Model

    config = Model.load(local_path).flavors.get("python_function", {}).get("config") or {}
    return next(({key: device} for key in DEVICE_KEYS if key in config), None)


def warm_model_loading() -> None:
    """Do once what every ``mlflow.pyfunc.load_model`` in a fresh process does first: import MLflow's pyfunc
    and map installed modules to their packages (MLflow reads every installed distribution's
    metadata to check the model's requirements against this environment).

    A Spark worker process pays both before its first batch (about a third of a model worker's
    Python time on a 100,000-image audit); a daemon that calls this before it forks its workers
    (:mod:`ema.engines.spark_daemon`) pays them once. The map is MLflow's private cache: an MLflow
    without it is left alone, and loading then only takes longer.
    """
    import mlflow.pyfunc  # noqa: F401 - imported to be inherited by the forked workers
    from mlflow.utils import requirements_utils

    build_map = getattr(requirements_utils, "_init_packages_to_modules_map", None)
    if build_map is not None:
        build_map()


def first_line(exc: BaseException) -> str:
    """The first line of a model's own error (its code's message; a traceback below it is not ours to show)."""
    lines = str(exc).strip().splitlines()
    return lines[0][:MAX_MESSAGE] if lines else type(exc).__name__


def one_line(exc: BaseException) -> str:
    """An exception's whole message on one line, at most :data:`MAX_MESSAGE` characters."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


def schema_reason(exc: BaseException) -> str:
    """MLflow's reason for refusing inputs, whole and on one line, without the data and schema it quotes first.

    The reason follows the last ``' with schema '...'. Error: `` of the message, however deep MLflow
    nested it (its scoring server wraps it in "Failed to predict data '...'. Error: ").
    """
    text = " ".join(str(exc).split())
    schema = text.rfind("' with schema '")
    start = text.find(SCHEMA_REASON, schema) if schema >= 0 else -1
    if start >= 0:
        text = text[start + len(SCHEMA_REASON) :]
    return one_line(Exception(text))


def requirement_mismatches(requirements_file: Path) -> list[str]:
    """The model's requirements that the packages installed here do not satisfy, as ``name==want (installed: X)``.

    A requirement whose environment marker does not hold here (another platform or Python) is skipped.
    """
    if not requirements_file.is_file():
        return []
    mismatches = []
    for line in requirements_file.read_text().splitlines():
        try:
            requirement = Requirement(line.strip())
        except InvalidRequirement:  # blank lines, comments, pip options: nothing to compare
            continue
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        try:
            installed = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            installed = "not installed"
        if installed == "not installed" or not requirement.specifier.contains(installed, prereleases=True):
            mismatches.append(f"{requirement} (installed: {installed})")
    return mismatches


def python_mismatch(model_python: str | None) -> list[str]:
    """The model's Python, if its major.minor version is not the one running here (or it recorded none)."""
    running = platform.python_version()
    if model_python is None:
        return [f"python unrecorded (running: {running})"]
    if model_python.split(".")[:2] != running.split(".")[:2]:
        return [f"python {model_python} (running: {running})"]
    return []


def warn_about_mismatches(model_uri: str, requirements_file: Path, model_python: str | None) -> None:
    """Log, as MLflow would, which of the model's requirements (and its Python version) differ from what runs here."""
    mismatches = python_mismatch(model_python) + requirement_mismatches(requirements_file)
    if mismatches:
        logging.getLogger(__name__).warning(
            "model %r was logged for an environment that differs from this one (its predictions may differ too): %s",
            model_uri,
            "; ".join(mismatches),
            extra=FOR_THE_RECORD,
        )
