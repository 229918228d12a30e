"""Cache entries the auditor made itself: recorded by the run that made them, found only when they still match.

The auditor caches the models it trains for itself (calibration models, the KS ratio's
query and calibration-set models, unlearned versions, grid targets) in the registry, under a
version tag ``ema.cache_key``. That tag is a deterministic hash anyone who reads the registry
can copy onto a model of their own, so it only *finds* candidates. A candidate is a cache hit
only if:

- its run (``version.run_id``) exists and carries the run tag ``ema.helper``, written by the
  auditor when it registered the version: the model name, version number, cache key and a
  digest of every file of the version;
- the version's files, downloaded now, have that digest; and the logged model they come
  from was logged by that same run.

Any other candidate is *foreign*: it is skipped with a warning naming it (in the record of the
audit that is looking: :mod:`ema.run_warnings`), and the caller trains a fresh entry. The check
is about which entry to use; what keeps the auditor from running registry code is how a helper
is loaded (weights into architectures the auditor builds, :mod:`ema.training.helper_loading`),
whatever entry is found.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import json
import logging
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import mlflow
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from ema.errors import EMAError
from ema.run_warnings import FOR_THE_RECORD
from ema.tracking import keys
from ema.tracking.registry import RegisteredVersion
from ema.tracking.store import retry_busy, retry_set

_logger = logging.getLogger(__name__)

#: The run tag the auditor writes when it registers a cache entry (JSON: name, version, cache key, digest).
TAG_HELPER = "ema.helper"
#: The prefix of a logged model's URI in MLflow 3 (``models:/m-<id>``).
LOGGED_MODEL_PREFIX = "models:/m-"


@dataclass(frozen=True)
class TrustedEntry:
    """A cache entry the auditor made, and the local folder holding its files (checked against the digest)."""

    version: RegisteredVersion
    path: Path
    digest: str


def files_digest(folder: Path) -> str:
    """sha256 over every file below ``folder``: relative paths and contents, in sorted order."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def record_entry(version: RegisteredVersion, cache_key: str) -> TrustedEntry:
    """Record in the version's own run that the auditor made it for ``cache_key``; its files as they are now.

    Called by the process that just registered ``version`` (and set its ``ema.cache_key``).
    """
    path = _download(version)
    digest = files_digest(path)
    record = {"name": version.name, "version": version.version, "cache_key": cache_key, "digest": digest}
    client = MlflowClient()
    retry_set(lambda: client.set_tag(version.run_id, TAG_HELPER, json.dumps(record, sort_keys=True)))
    return TrustedEntry(version, path, digest)


def find_entry(
    name: str, cache_key: str, *, read: Callable[[TrustedEntry], object] | None = None
) -> TrustedEntry | None:
    """The newest version of ``name`` under ``cache_key`` that the auditor made (and ``read`` can read), or None.

    Versions that carry the key but fail the check, or whose files ``read`` refuses with an
    :class:`~ema.errors.EMAError`, are skipped, each with a warning (logged, and gathered by
    :func:`ema.run_warnings.gather_run_warnings`). A model that is not registered has no entries.
    """
    client = MlflowClient()
    found = retry_busy(
        lambda: client.search_model_versions(f"name = '{name}' and tags.`{keys.TAG_CACHE_KEY}` = '{cache_key}'")
    )
    for entity in sorted(found, key=lambda v: int(v.version), reverse=True):
        version = RegisteredVersion.from_entity(entity)
        entry, reason = _checked(client, version, entity.source, cache_key)
        if entry is not None and read is not None:
            try:
                read(entry)
            except EMAError as exc:
                entry, reason = None, str(exc)
        if entry is not None:
            return entry
        _logger.warning(
            "ignored a foreign cache entry %s (cache key %s): %s; not used",
            version.uri,
            cache_key,
            reason,
            extra=FOR_THE_RECORD,
        )
    return None


def _checked(
    client: MlflowClient, version: RegisteredVersion, source: str | None, cache_key: str
) -> tuple[TrustedEntry | None, str]:
    """The entry if the auditor's own run recorded it with these files, else None and why not."""
    if not version.run_id:
        return None, "it names no run"
    try:
        run = retry_busy(lambda: client.get_run(version.run_id))
    except MlflowException:
        return None, f"its run {version.run_id} does not exist"
    try:
        record = json.loads(run.data.tags.get(TAG_HELPER) or "null")
    except ValueError:
        record = None
    expected = {"name": version.name, "version": version.version, "cache_key": cache_key}
    if not isinstance(record, dict) or any(record.get(k) != v for k, v in expected.items()):
        return None, f"its run {version.run_id} did not record it (no matching {TAG_HELPER} run tag)"
    if source and source.startswith(LOGGED_MODEL_PREFIX):
        model_id = source.removeprefix("models:/")
        try:
            logged_by = retry_busy(lambda: client.get_logged_model(model_id)).source_run_id
        except MlflowException:
            return None, f"its logged model {model_id} does not exist"
        if logged_by != version.run_id:
            return None, f"its files were logged by run {logged_by}, not by its run {version.run_id}"
    try:
        path = _download(version)
    except (MlflowException, OSError) as exc:
        return None, f"its files could not be read ({type(exc).__name__})"
    digest = files_digest(path)
    if digest != record.get("digest"):
        return None, "its files differ from those its run recorded (digest mismatch)"
    return TrustedEntry(version, path, digest), ""


def _download(version: RegisteredVersion) -> Path:
    """The version's files in a local folder, downloaded once per process (checked and loaded from the same copy)."""
    key = (mlflow.get_tracking_uri(), version.uri, version.run_id)
    if key not in _DOWNLOADS:
        folder = tempfile.mkdtemp(dir=_scratch())
        _DOWNLOADS[key] = Path(mlflow.artifacts.download_artifacts(artifact_uri=version.uri, dst_path=folder))
    return _DOWNLOADS[key]


@functools.cache
def _scratch() -> str:
    """This process's folder for downloaded entries, removed when the process exits."""
    folder = tempfile.mkdtemp(prefix="ema-helpers-")
    atexit.register(shutil.rmtree, folder, True)
    return folder


_DOWNLOADS: dict[tuple[str, str, str | None], Path] = {}
