"""What a logged model says about itself without being loaded (flavors, inputs), and its flavor's own object.

Inputs come from its signature, else its input example, as an :class:`InputSpec`.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import pandas as pd
import yaml

from ema.errors import EXTRA_OF_MODULE, EMAError, InputError, MissingDependencyError, ModelAccessError, pip_command
from ema.inputs import INPUT_DTYPES, LAST_AXIS_CHANNELS, TEXT_DTYPE, InputSpec
from ema.validation import redact_url


def input_spec_from(schema: object, example: object = None) -> InputSpec | None:
    """The inputs a model declares: a tensor or column-based signature, else the input example; None if neither.

    Parameters
    ----------
    schema : mlflow.types.Schema or None
        The signature's inputs.
    example : ndarray, DataFrame or None
        The logged input example, read when there is no signature.

    Raises
    ------
    InputError
        If the signature declares several tensors, binary columns (encoded image files), or columns that are
        neither numbers nor text.
    """
    if schema is not None:
        if schema.is_tensor_spec():
            if len(schema.inputs) != 1:
                raise InputError(
                    f"expected a model with one input tensor (the images), got {len(schema.inputs)}: "
                    f"{[str(t) for t in schema.inputs][:5]}"
                )
            tensor = schema.inputs[0]
            return _tensor_spec(tuple(tensor.shape), np.dtype(tensor.type).name, tensor.name)
        _refuse_binary_columns(schema)
        dtypes = tuple(str(np.dtype(column.type.to_numpy())) for column in schema.inputs)
        return _column_spec(tuple(schema.input_names()), dtypes)
    if isinstance(example, pd.DataFrame):
        return _column_spec(tuple(str(c) for c in example.columns), tuple(str(d) for d in example.dtypes))
    if isinstance(example, np.ndarray) and example.ndim >= 2:
        return _tensor_spec((-1, *example.shape[1:]), example.dtype.name)
    return None


def _refuse_binary_columns(schema: object) -> None:
    """Refuse a column-based signature with ``binary`` columns: such a model takes encoded files (PNG or JPEG
    bytes), and the audit sends pixel arrays or table cells, never files; no option changes that."""
    binary = [
        str(name)
        for name, column in zip(schema.input_names(), schema.inputs, strict=True)
        if getattr(column.type, "name", None) == "binary"
    ]
    if binary:
        raise InputError(
            f"expected a model that takes pixels or table cells, got a signature with {len(binary)} binary "
            f"column(s) ({', '.join(map(repr, binary[:5]))}): such a model takes encoded image files (PNG or JPEG "
            "bytes), and the audit sends images as pixel arrays, never as files; wrap the model in a pyfunc whose "
            "predict takes uint8 pixels (n, height, width[, channels]) and encodes them itself, logged with that "
            "tensor signature"
        )


def _tensor_spec(shape: tuple[int, ...], dtype: str, name: str | None = None) -> InputSpec:
    if dtype not in INPUT_DTYPES:
        raise InputError(f"expected a model whose input tensor holds numbers of a dtype in {INPUT_DTYPES}, got {dtype}")
    if all(size > 0 for size in shape[1:]):
        return InputSpec(shape, dtype, tensor_name=name)
    # a size left open (-1) beyond the batch: images go as they come, channels last where the last axis says so
    channels_last = len(shape) == 4 and shape[1] == shape[2] == -1 and shape[3] in LAST_AXIS_CHANNELS
    return InputSpec(None, dtype, tensor_name=name, channels_last=shape[3] if channels_last else None)


def _column_spec(columns: tuple[str, ...], dtypes: tuple[str, ...]) -> InputSpec:
    """One column per feature (or pixel), each of a numeric dtype or text; mixed dtypes (a table's int and float
    columns, its categories as text) are kept per column, so that integers reach the model as integers."""
    dtypes = tuple(TEXT_DTYPE if np.dtype(dtype).kind in "OUS" else dtype for dtype in dtypes)
    known = (*INPUT_DTYPES, TEXT_DTYPE)
    odd = [(name, dtype) for name, dtype in zip(columns, dtypes, strict=True) if dtype not in known]
    if odd:
        raise InputError(
            f"expected a column-based signature of numeric or text columns (dtypes {(*INPUT_DTYPES, 'string')}), got "
            f"{len(odd)} of another type: {', '.join(f'{name!r} ({dtype})' for name, dtype in odd[:5])}"
        )
    if len(set(dtypes)) == 1:
        return InputSpec(dtype=dtypes[0], columns=columns)
    numbers = [dtype for dtype in dtypes if dtype != TEXT_DTYPE]
    return InputSpec(dtype=str(np.result_type(*numbers)), columns=columns, column_dtypes=dtypes)


#: Schemes of a scoring server's URL, which ``--model-url`` takes, not ``--model``.
URL_SCHEMES = ("http", "https")
#: MLflow's error codes for a model that is not there: the same URI fails the same way again.
MISSING_CODES = ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE")


def check_model_path(model_uri: str) -> None:
    """Refuse a local model path (no URI scheme) with nothing there, and a server's URL: the user's slips.

    Raises
    ------
    InputError
        Naming the path, or saying that a URL goes to ``--model-url``.
    """
    scheme = urlparse(model_uri).scheme.lower()
    if scheme in URL_SCHEMES:
        raise InputError(
            f"expected a model URI (models:/NAME@ALIAS, runs:/ID/PATH or a model directory), got the URL "
            f"{redact_url(model_uri)}: a scoring server's URL goes to --model-url"
        )
    if not scheme and not Path(model_uri).exists():
        raise InputError(f"expected a model directory (an MLmodel file inside) at {model_uri}, found nothing there")


def model_read_error(model_uri: str, exc: Exception, doing: str = "read") -> EMAError:
    """The one-line error for a model that could not be read or loaded, by whether trying again can help.

    A model that is not there (MLflow's "does not exist", a folder without ``MLmodel``) or whose
    files are malformed (YAML, JSON, text that is not UTF-8, fields of the wrong kind) fails the
    same way every time: an :class:`~ema.errors.InputError` (exit 3). Anything else (a store or
    an artifact repository that cannot be reached, credentials it refuses) is a
    :class:`~ema.errors.ModelAccessError` (exit 4, retried by callers that retry).
    """
    from mlflow.exceptions import MlflowException

    text = (
        f"could not {doing} model {redact_url(model_uri)!r}: {type(exc).__name__}: {' '.join(str(exc).split())[:500]}"
    )
    if isinstance(exc, MlflowException):
        return InputError(text) if exc.error_code in MISSING_CODES else ModelAccessError(text)
    if isinstance(exc, (FileNotFoundError, NotADirectoryError, IsADirectoryError)):
        return InputError(text)
    if isinstance(exc, (yaml.YAMLError, ValueError, TypeError, AttributeError, KeyError, ImportError)):
        # reading metadata runs no model code, so the file is at fault; loading runs the model's own
        return InputError(f"{text} (its MLmodel file is not one MLflow wrote)" if doing == "read" else text)
    return ModelAccessError(text)


def missing_module_error(model_uri: str, exc: ModuleNotFoundError) -> MissingDependencyError:
    """The one-line error for a model whose loading imports a module this Python lacks.

    The module may be a package (a flavor's runtime: onnxruntime for an ONNX model), installed
    with pip, or the user's own code (a class the model was pickled with), which travels with the
    model only where it was logged with ``code_paths``. A module of one of our extras is a package;
    any other may be either, and a user's own module is the likelier, so that advice comes first.
    """
    name = exc.name or str(exc)
    if name.split(".")[0] in EXTRA_OF_MODULE:
        need = f"{name}, which is not installed: {pip_command(name)}"
    else:
        need = (
            f"the module {name}, which this Python cannot import: if it is your own code, put it on PYTHONPATH or "
            f"log the model with code_paths=[...]; if it is a package, {pip_command(name)}"
        )
    return MissingDependencyError(f"could not load model {redact_url(model_uri)!r}: it needs {need}")


def _model_info(model_uri: str):
    from mlflow.models import get_model_info

    check_model_path(model_uri)
    try:
        return get_model_info(model_uri)
    except Exception as exc:  # reading metadata runs no model code: every failure is the files' or the store's
        raise model_read_error(model_uri, exc) from exc


def model_flavors(model_uri: str) -> tuple[str, ...]:
    """The flavors ``model_uri`` was logged with (``sklearn``, ``pytorch``, ``onnx``, ``python_function``...)."""
    return tuple(_model_info(model_uri).flavors)


def declared_input_spec(model_uri: str) -> InputSpec | None:
    """The inputs a logged model's signature declares, read without loading the model; None without one."""
    signature = _model_info(model_uri).signature
    return input_spec_from(signature.inputs if signature is not None else None)


#: Flavors whose own model object :func:`load_native_model` loads.
NATIVE_FLAVORS = ("sklearn", "pytorch")


def load_native_model(model_uri: str, flavor: str) -> object:
    """The flavor's own object (a fitted scikit-learn estimator, a torch module); loading runs the model's code."""
    from mlflow.exceptions import MlflowException

    if flavor == "sklearn":
        from mlflow import sklearn as flavor_module
    elif flavor == "pytorch":
        from mlflow import pytorch as flavor_module
    else:
        raise InputError(f"expected a model flavor in {NATIVE_FLAVORS}, got {flavor!r}")
    try:
        return flavor_module.load_model(model_uri)
    except ModuleNotFoundError as exc:
        raise missing_module_error(model_uri, exc) from exc
    except (MlflowException, OSError, ImportError, AttributeError) as exc:  # a name its module lacks
        raise model_read_error(model_uri, exc, f"load the {flavor}") from exc
