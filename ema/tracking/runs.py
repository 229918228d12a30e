"""Opening runs (top-level, resumed from ``mlflow run``, or nested) and logging artifacts whole."""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import mlflow
import pandas as pd
from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from mlflow.utils.name_utils import _GENERATOR_NOUNS, _GENERATOR_PREDICATES

from ema.data.arrays import ArraySet
from ema.errors import EMAError, StoreError
from ema.tracking import keys, store
from ema.validation import redact_url

#: MLflow's switch for the run links it prints to stdout when the store is a tracking server.
QUIET_LINKS_ENV = "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"
#: The tag MLflow gives a run ``mlflow run`` created (its entry point's name).
PROJECT_ENTRY_POINT_TAG = "mlflow.project.entryPoint"
#: The most characters of a failed run's ``ema.error`` tag: MLflow's limit on a tag's value
#: (``mlflow.utils.validation.MAX_TAG_VAL_LENGTH``).
ERROR_TAG_CHARS = 8000

logger = logging.getLogger(__name__)


def configure(experiment: str = keys.DEFAULT_EXPERIMENT, *, select_experiment: bool = True) -> None:
    """Use ``MLFLOW_TRACKING_URI`` or sqlite in the working directory, and the named experiment (created if
    need be; not with ``select_experiment=False``, for a command that only reads, which also refuses a sqlite
    store that does not exist instead of creating it: :func:`ema.tracking.store.check_present`).

    Under ``mlflow run`` the project's run already exists (``MLFLOW_RUN_ID``): its
    experiment is kept, so that nested runs land beside their parent.

    Safe when several commands start at once: a sqlite store is created and migrated, and
    the experiment created, by one process at a time under a lock beside the database
    (:func:`ema.tracking.store.opened`).

    Raises
    ------
    InputError
        With ``select_experiment=False``, if the sqlite store's database does not exist.
    StoreError
        If the store cannot be used (a corrupt database, an unsupported URI scheme), or the
        experiment cannot be set (e.g. it was deleted), as one line.
    MissingDependencyError
        If the store's database driver is not installed.
    """
    given = os.environ.get("MLFLOW_TRACKING_URI")
    uri = store.absolute_uri(given or keys.DEFAULT_TRACKING_URI)
    if not select_experiment:
        store.check_present(uri, given)
    mlflow.set_tracking_uri(uri)
    # A tracking server makes MLflow print a "View run" link per run to stdout, into our tables.
    os.environ.setdefault(QUIET_LINKS_ENV, "true")
    with store.opened(uri):
        if not select_experiment or os.environ.get("MLFLOW_RUN_ID") or mlflow.active_run() is not None:
            return
        try:
            store.retry_busy(lambda: mlflow.set_experiment(experiment), what=f"experiment {experiment!r} in {uri}")
        except MlflowException as exc:
            if store.is_unreachable(exc):  # a tracking server down: retryable, not a store to repair
                raise store.unreachable_error(uri, exc) from exc
            message = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise StoreError(f"could not use experiment {experiment!r} in {uri}: {message}") from exc


@dataclass(frozen=True)
class RemoteParent:
    """A run another process holds open (a grid's parent), under which this process nests its runs."""

    run_id: str
    experiment_id: str


#: Set in a grid's worker processes by :func:`join_parent`; None elsewhere.
_remote_parent: RemoteParent | None = None


def join_parent(tracking_uri: str, parent: RemoteParent) -> None:
    """Make this process (a worker) log to ``tracking_uri`` and nest its top-level runs under ``parent``.

    The worker must not resume the run ``mlflow run`` created (``MLFLOW_RUN_ID``, inherited
    from the process that started it): that run is the parent's to end.
    """
    global _remote_parent
    os.environ.pop("MLFLOW_RUN_ID", None)
    os.environ["MLFLOW_TRACKING_URI"] = tracking_uri
    mlflow.set_tracking_uri(tracking_uri)
    with store.opened(tracking_uri):
        _remote_parent = parent


def active_parent() -> RemoteParent | None:
    """The active run of this process, else the remote parent it joined, else None."""
    run = mlflow.active_run()
    if run is not None:
        return RemoteParent(run.info.run_id, run.info.experiment_id)
    return _remote_parent


@contextmanager
def start_run(run_name: str, tags: dict[str, str] | None = None) -> Iterator[mlflow.ActiveRun]:
    """Open a run: nested under the active run (or the remote parent a worker joined), in the parent's experiment.

    An exception inside marks the run FAILED (MLflow's context manager does so), records why
    as the run's tag ``ema.error`` (:func:`record_error`), and propagates. Every run records
    the process and host that run it, so that a RUNNING run whose process is gone can be told
    apart (:func:`ema.tracking.history.audit_history`).
    """
    tags = {**(tags or {}), keys.TAG_PID: str(os.getpid()), keys.TAG_HOST: socket.gethostname()}
    parent = active_parent()
    with no_notebook_probe():
        if parent is not None:
            run = mlflow.start_run(
                run_name=run_name,
                nested=mlflow.active_run() is not None,
                parent_run_id=parent.run_id,
                experiment_id=parent.experiment_id,
                tags=tags,
            )
        elif os.environ.get("MLFLOW_RUN_ID"):
            run = mlflow.start_run(tags=tags)  # resumes the run that `mlflow run` created
            if is_generated_name(run.info.run_name):  # named as the command names its own, unless `--run-name` did
                mlflow.set_tag(keys.TAG_RUN_NAME, run_name)
        else:
            run = mlflow.start_run(run_name=run_name, tags=tags)
    with run:
        try:
            yield run
        except (Exception, KeyboardInterrupt, SystemExit) as exc:  # not GeneratorExit: nothing failed
            record_error(run.info.run_id, exc)
            raise
        finally:
            if parent is not None:
                inherit_params(parent.run_id, run.info.run_id)


def error_line(exc: BaseException) -> str:
    """Why a run failed, in one line of at most :data:`ERROR_TAG_CHARS` characters, without secrets.

    A workbench error (:class:`~ema.errors.EMAError`) is its message, as the command prints it;
    any other exception is its type and message (``KeyError: 'x'``), since its type is often
    all that says what went wrong. Line breaks and runs of spaces become one space; a longer
    message is cut at MLflow's limit on a tag's value and ends with an ellipsis.

    >>> error_line(KeyError("x"))
    "KeyError: 'x'"
    >>> error_line(EMAError("bad  file\\nnamed x"))
    'bad file named x'
    """
    message = " ".join(redact_url(str(exc)).split())
    if not isinstance(exc, EMAError):
        message = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    if len(message) > ERROR_TAG_CHARS:
        message = message[: ERROR_TAG_CHARS - 1] + "…"
    return message


def record_error(run_id: str, exc: BaseException) -> None:
    """Tag the failing run ``run_id`` with why it failed (:func:`error_line`), so that the MLflow UI and
    ``ema history --all`` can tell.

    Best effort: the store may be what failed (locked, gone, the disk full). A failure to tag
    is left out, so that the error the user sees is the one that ended the run.
    """
    try:
        MlflowClient().set_tag(run_id, keys.TAG_ERROR, error_line(exc))
    except Exception:  # the run's own error is the one to report
        logger.debug("could not record the error of run %s", run_id, exc_info=True)


def is_generated_name(name: str) -> bool:
    """Whether ``name`` is one MLflow gives a run started without a name (``predicate-noun-number``).

    A run that ``mlflow run`` or ``mlflow.models.evaluate`` started is named so; a name of that form says
    nobody chose it, so the workbench may name the run as its command names its own.
    """
    parts = name.split("-")
    return len(parts) == 3 and parts[0] in _GENERATOR_PREDICATES and parts[1] in _GENERATOR_NOUNS and parts[2].isdigit()


@contextmanager
def no_notebook_probe() -> Iterator[None]:
    """Inside, a process that has not imported IPython cannot import it: MLflow's notebook probe answers at once.

    Starting a run, describing a dataset for ``log_input`` and logging a model, MLflow asks each
    run context provider for tags; its Jupyter provider imports IPython to call ``get_ipython()``
    (0.1-0.4 s where IPython is installed). A process that has not imported IPython runs no
    IPython shell, so the answer is known: while ``sys.modules["IPython"]`` is None the
    import fails at once, which MLflow reads as "not a notebook", as it does where IPython is
    not installed. In a notebook (or any process that imported IPython) nothing changes. The
    entry is removed on the way out.
    """
    if "IPython" in sys.modules:
        yield
        return
    sys.modules["IPython"] = None
    try:
        yield
    finally:
        if "IPython" in sys.modules and sys.modules["IPython"] is None:
            del sys.modules["IPython"]


def inherit_params(parent_id: str, child_id: str) -> None:
    """Copy the parent's params the child did not set itself onto the child.

    The MLflow UI filters and compares top-level runs by their params; copies let nested
    runs be filtered and compared the same way.
    """
    client = MlflowClient()
    own = client.get_run(child_id).data.params
    missing = {k: v for k, v in client.get_run(parent_id).data.params.items() if k not in own}
    if missing:
        log_params_of(child_id, missing)


def log_batch(
    *,
    params: dict[str, object] | None = None,
    metrics: dict[str, float] | None = None,
    tags: dict[str, str] | None = None,
) -> None:
    """Params, metrics and tags of the active run in one store call (each MLflow call costs several ms of SQL).

    In a run ``mlflow run`` created, whose params already hold the ``-P`` values as written, a
    param of ours is left out where it repeats one, and logged as ``<key>.resolved`` where it
    differs (``-P input_shape=784`` is resolved as ``-1,784``): MLflow refuses to change a param.
    """
    now = int(time.time() * 1000)
    run = mlflow.active_run()
    values = {key: str(value) for key, value in (params or {}).items()}
    if values and PROJECT_ENTRY_POINT_TAG in run.data.tags:
        values = _beside_project_params(MlflowClient().get_run(run.info.run_id).data.params, values)
    MlflowClient().log_batch(
        run.info.run_id,
        metrics=[Metric(key, float(value), now, 0) for key, value in (metrics or {}).items()],
        params=[Param(key, value) for key, value in values.items()],
        tags=[RunTag(key, str(value)) for key, value in (tags or {}).items()],
    )


def _beside_project_params(logged: dict[str, str], values: dict[str, str]) -> dict[str, str]:
    """``values`` less those ``logged`` already holds; one it holds with another value as ``<key>.resolved``."""
    return {
        key if key not in logged else f"{key}.resolved": value
        for key, value in values.items()
        if logged.get(key) != value
    }


def log_params(params: dict[str, object]) -> None:
    """Params of the active run, in one store call."""
    log_batch(params=params)


def log_metrics(metrics: dict[str, float]) -> None:
    """Metrics of the active run, in one store call."""
    log_batch(metrics=metrics)


def set_tags(tags: dict[str, str]) -> None:
    """Tags of the active run, in one store call."""
    log_batch(tags=tags)


def log_params_of(run_id: str, params: dict[str, object]) -> None:
    """Params of a run that is not the active one (a finished child run)."""
    MlflowClient().log_batch(run_id, params=[Param(key, str(value)) for key, value in params.items()])


def run_metrics(run_id: str) -> dict[str, float]:
    """The latest value of every metric of a run."""
    return dict(MlflowClient().get_run(run_id).data.metrics)


def training_dataset_files(run_id: str) -> list[Path]:
    """Local files a run logged as its training data (``mlflow.log_input(..., context="training")``).

    Only datasets whose source is a local path are returned; what they hold is read, and
    checked, by whoever uses them.
    """
    found = []
    for item in MlflowClient().get_run(run_id).inputs.dataset_inputs:
        tags = {tag.key: tag.value for tag in item.tags}
        if tags.get(keys.TAG_DATASET_CONTEXT) != "training" or item.dataset.source_type != "local":
            continue
        uri = json.loads(item.dataset.source).get("uri", "")
        found.append(Path(urlparse(uri).path if uri.startswith("file:") else uri))
    return found


def tracking_uri() -> str:
    """The store runs are logged to."""
    return mlflow.get_tracking_uri()


def log_dataset(data: ArraySet, *, name: str, context: str, source: str | None = None) -> None:
    """Record which images the active run used (``mlflow.log_input``), with our fingerprint as the digest.

    The fingerprint hashes every image and label; MLflow's own numpy digest would copy the
    whole array to hash its first 10,000 values. ``source`` names the local file the images
    were read from, when there is one (it then serves as a member reference, see
    :func:`training_dataset_files`).
    """
    with no_notebook_probe():  # from_numpy resolves the run context's tags, as start_run does
        dataset = mlflow.data.from_numpy(data.x, targets=data.y, name=name, digest=data.fingerprint, source=source)
    mlflow.log_input(dataset, context=context)


def download_artifact(run_id: str, name: str, folder: str | Path) -> Path:
    """A run's artifact copied into ``folder``.

    Raises
    ------
    MissingArtifact
        If the artifact (or its run) is gone from the store.
    """
    try:
        return Path(mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=name, dst_path=str(folder)))
    except (MlflowException, OSError) as exc:
        message = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise MissingArtifact(f"{name} of run {run_id} cannot be read: {message}") from exc


def log_artifacts_atomically(files: dict[str, str | bytes | pd.DataFrame | dict | Path]) -> None:
    """Write every artifact to a scratch folder, then log them in one call.

    Called last in a run, after everything it reports was computed, so that a failure
    leaves no half-written artifacts. A ``Path`` is a local file or folder, copied as it is
    (a Parquet table written by Spark).
    """
    with tempfile.TemporaryDirectory() as tmp:
        for name, content in files.items():
            path = Path(tmp) / name
            path.parent.mkdir(parents=True, exist_ok=True)  # names may hold a folder: figures/x.png
            if isinstance(content, Path):
                _copy(content, path)
            elif isinstance(content, pd.DataFrame):
                content.to_csv(path, index=False)
            elif isinstance(content, dict):
                path.write_text(json.dumps(content, indent=2, sort_keys=True))
            elif isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content)
        mlflow.log_artifacts(tmp)


def _copy(source: Path, destination: Path) -> None:
    if source.is_dir():
        shutil.copytree(source, destination)
    else:
        shutil.copyfile(source, destination)


class MissingArtifact(StoreError):
    """A run's artifact cannot be read back: deleted from the artifact store, its run gone, or not JSON."""


def read_json_artifact(run_id: str, name: str) -> dict:
    """A JSON artifact of a finished run (read once per process: a finished run's artifacts do not change).

    Raises
    ------
    MissingArtifact
        If the artifact (or its run) is gone from the store, or does not hold a JSON object.
    """
    try:
        content = json.loads(_artifact_text(mlflow.get_tracking_uri(), run_id, name))
    except (MlflowException, OSError, ValueError) as exc:
        message = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise MissingArtifact(f"{name} of run {run_id} cannot be read: {message}") from exc
    if not isinstance(content, dict):
        raise MissingArtifact(f"{name} of run {run_id} holds a JSON {type(content).__name__}, expected an object")
    return content


@functools.lru_cache(maxsize=64)
def _artifact_text(tracking_uri: str, run_id: str, name: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=name, dst_path=tmp)
        return Path(path).read_text()
