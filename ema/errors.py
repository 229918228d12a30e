"""Errors the workbench reports to a user as one line, without a traceback; callers act on the kind.

Every error the workbench raises for a user is an :class:`EMAError`, and its kind says what
to do next (the message says what exactly)::

    EMAError                        failed as the message explains (a diverged unlearning...)
    ├── InputError (ValueError)     an argument, file or data set refused: fix it; unchanged, it fails again
    │   └── NotCalibratedError      an auditor asked to audit before calibrate()
    ├── ModelAccessError            the model could not be loaded, or its scoring server failed,
    │   │                           timed out or refused the request; or the tracking server did not answer
    │   └── ScoringTimeout          (ema.oracle) the server did not answer in time (--request-timeout, --timeout)
    ├── MissingDependencyError      an optional extra is not installed: the message gives the pip command
    ├── StoreError                  the tracking store or registry cannot be used as it is (a corrupt
    │   │                           database, an unsupported URI)
    │   ├── StoreBusyError          it stayed locked, or another process held a cache entry too long
    │   │   └── ClaimTimeout        (ema.tracking.single_flight) waited too long for a cache entry
    │   ├── MissingArtifact         (ema.tracking.runs) a run's artifact is gone or unreadable
    │   └── HelperLoadError         (ema.training.helper_loading) a cached helper's files do not fit
    └── TimeLimitExceeded           the command ran past its --timeout

:data:`RETRYABLE` holds the kinds that may pass when tried again unchanged (the model serves
again, the other writer is done); an :class:`InputError` is refused for good. The CLI exits
with a code per kind (``ema --help``), and ``ema grid`` says how to resume after a retryable one.
"""

#: The distribution whose extras install the optional dependencies (``pip install 'ema-audit[spark]'``).
DISTRIBUTION = "ema-audit"
#: The extra of :data:`DISTRIBUTION` (pyproject.toml's optional-dependencies) that installs each optional module.
EXTRA_OF_MODULE = {"pyspark": "spark", "py4j": "spark", "onnx": "onnx", "onnxruntime": "onnx", "psycopg2": "server"}


class EMAError(Exception):
    """A problem with the user's input or environment that the user can fix."""


class InputError(EMAError, ValueError):
    """An argument or data array does not have the expected form."""


class NotCalibratedError(InputError):
    """An auditor was asked to audit or export before ``calibrate()``: calibrate it first."""


class ModelAccessError(EMAError):
    """The model could not be loaded or read, or its scoring server failed, timed out or refused a request."""


class MissingDependencyError(EMAError):
    """An optional dependency is not installed; the message ends with the command that installs it."""


class StoreError(EMAError):
    """The tracking store cannot be opened or used as it is."""


class StoreBusyError(StoreError):
    """The tracking store stayed locked by other processes, or one of them held what this one waited for."""


class TimeLimitExceeded(EMAError):
    """The command ran past its ``--timeout``."""


#: The kinds that may pass when tried again unchanged: ``except RETRYABLE:`` retries, anything else is final.
RETRYABLE = (ModelAccessError, StoreBusyError)


def pip_command(module: str) -> str:
    """The command that installs the missing ``module`` (``ModuleNotFoundError.name``): its extra, else its own name.

    >>> pip_command("pyspark")
    "pip install 'ema-audit[spark]'"
    >>> pip_command("pymysql")
    'pip install pymysql'
    """
    top = module.split(".")[0]
    extra = EXTRA_OF_MODULE.get(top)
    return f"pip install '{DISTRIBUTION}[{extra}]'" if extra else f"pip install {top}"
