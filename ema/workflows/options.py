"""What the command line offers: the choices, defaults and errors of the layers below, in one place.

The CLI imports workflows (and experiments) only; these names are defined in the modules
named in the imports and re-exported here unchanged. Nothing here imports mlflow or torch,
so that ``--help`` and option errors answer without them (``tests/cli/test_cli_imports.py``).
"""

from ema.auditors.attack import AUC_METRIC, is_attack_metric
from ema.auditors.reference_record import AUTO_MARGIN, DEFAULT_MARGIN
from ema.auditors.result import VERDICTS
from ema.data.catalog import SOURCE_NAMES
from ema.data.limits import AUDIT_BYTES_PER_IMAGE, DEFAULT_MAX_QUERY
from ema.data.marks import DEFAULT_RATE as DEFAULT_MARK_RATE
from ema.data.presets import DATA_SOURCES, DEFAULT_DATA
from ema.data.shifts import AUGMENT_NONE, AUGMENTATIONS, N_SHIFT_VIEWS
from ema.data.sources import ImageFormat
from ema.data.sources.base import MAX_IMAGE_SIDE
from ema.data.splits import MEMBER_NAMES, QUERY_NAMES
from ema.data.tables import DEFAULT_LABEL_COLUMN
from ema.errors import EMAError, InputError
from ema.image_shapes import PIXEL_ORDERS
from ema.inputs import INPUT_DTYPES
from ema.limits import DEFAULT_MAX_PARAMS, command_limits
from ema.oracle import DEFAULT_REQUEST_TIMEOUT, DEFAULT_TIMEOUT, HTTP_FORMATS, OUTPUT_KINDS
from ema.run_warnings import shown_run_warnings
from ema.stats import EMA_TESTS
from ema.thresholds import THRESHOLD_MODES
from ema.tracking.keys import (
    CALIBRATION_MODEL_NAME,
    DEFAULT_EXPERIMENT,
    METRIC_N_QUERY,
    TARGET_ALIAS,
    TARGET_MODEL_NAME,
    UNLEARNED_ALIAS,
)
from ema.training.devices import DEVICE_FORMS, parse_device
from ema.training.spec import ARCHITECTURES, OPTIMIZERS, TrainSpec
from ema.training.unlearn_spec import DEFAULT_RETAIN_MARGIN, UNLEARN_METHODS, UnlearnSpec
from ema.validation import redact_url
from ema.workflows.engines import ENGINE_IN_PROCESS, ENGINES
from ema.workflows.methods import METHODS, engine_help, method_help


def configure(experiment_name: str, *, select_experiment: bool = True) -> None:
    """Point tracking at the store and experiment (:func:`ema.tracking.runs.configure`), importing mlflow now."""
    from ema.tracking.runs import configure as configure_tracking

    configure_tracking(experiment_name, select_experiment=select_experiment)


def store_unreachable(exc: Exception) -> EMAError | None:
    """``exc``, which no layer turned into an :class:`~ema.errors.EMAError`, as the retryable error of a tracking
    server that could not be reached (:func:`ema.tracking.store.is_unreachable`); None for anything else."""
    from ema.tracking.store import current_uri, is_unreachable, unreachable_error

    return unreachable_error(current_uri(), exc) if is_unreachable(exc) else None


#: The target ``--model`` names when none is given.
DEFAULT_TARGET_URI = f"models:/{TARGET_MODEL_NAME}@{TARGET_ALIAS}"

__all__ = [
    "ARCHITECTURES",
    "AUC_METRIC",
    "AUDIT_BYTES_PER_IMAGE",
    "AUGMENTATIONS",
    "AUGMENT_NONE",
    "AUTO_MARGIN",
    "CALIBRATION_MODEL_NAME",
    "DATA_SOURCES",
    "DEFAULT_DATA",
    "DEFAULT_EXPERIMENT",
    "DEFAULT_LABEL_COLUMN",
    "DEFAULT_MARGIN",
    "DEFAULT_MARK_RATE",
    "DEFAULT_MAX_PARAMS",
    "DEFAULT_MAX_QUERY",
    "DEFAULT_REQUEST_TIMEOUT",
    "DEFAULT_RETAIN_MARGIN",
    "DEFAULT_TARGET_URI",
    "DEFAULT_TIMEOUT",
    "DEVICE_FORMS",
    "EMA_TESTS",
    "ENGINES",
    "ENGINE_IN_PROCESS",
    "HTTP_FORMATS",
    "INPUT_DTYPES",
    "MAX_IMAGE_SIDE",
    "MEMBER_NAMES",
    "METHODS",
    "METRIC_N_QUERY",
    "N_SHIFT_VIEWS",
    "OPTIMIZERS",
    "OUTPUT_KINDS",
    "PIXEL_ORDERS",
    "QUERY_NAMES",
    "SOURCE_NAMES",
    "TARGET_ALIAS",
    "TARGET_MODEL_NAME",
    "THRESHOLD_MODES",
    "UNLEARNED_ALIAS",
    "UNLEARN_METHODS",
    "VERDICTS",
    "EMAError",
    "ImageFormat",
    "InputError",
    "TrainSpec",
    "UnlearnSpec",
    "command_limits",
    "configure",
    "engine_help",
    "is_attack_metric",
    "method_help",
    "parse_device",
    "redact_url",
    "shown_run_warnings",
    "store_unreachable",
]
