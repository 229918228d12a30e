"""Single-flight caches: of several processes that need the same cached model at once, one trains it.

The workbench caches the models it trains for itself (calibration models, the KS-ratio
baseline's models, grid targets) in the model registry, keyed by a hash of everything
that decides them (a version tag ``ema.cache_key``). Looking the key up and training on a
miss is not enough when commands run at once: each sees the miss and trains its own copy.
:func:`single_flight` looks up, then claims the key, looks up again, and builds only if
the entry is still missing; the others wait for the claim and find what it built.

Two kinds of claim, chosen by the tracking URI:

- a sqlite store (one machine): an exclusive file lock ``<db>.locks/<name>-<hash>.lock``
  beside the database; the operating system releases it when its holder exits or dies.
- any other store (a tracking server, a database server; processes on several machines):
  a lease in the registry, the registered-model tag ``ema.claim.<cache key>`` on the model
  name, holding ``{"owner": ..., "expires": ...}``. A process writes its claim only when
  there is none or the one there has expired, waits ``SETTLE_SECONDS`` and reads it back:
  the claim is its own only if its write was the last (the store offers no compare-and-set,
  so this relies on a store round trip being much shorter than the settle pause). The
  holder renews the lease every third of ``LEASE_SECONDS`` from a background thread and
  deletes it when done; a holder that dies stops renewing, and a waiter takes over once
  the lease has expired. Expiry times are wall-clock seconds, so the machines' clocks must
  agree to well within a lease.

``EMA_SINGLE_FLIGHT=lease`` forces the lease on a sqlite store too (for tests and for a
sqlite file shared between machines, where file locks are unreliable);
``EMA_CACHE_WAIT_SECONDS`` bounds how long a process waits for another one's training.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

import filelock
import mlflow
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from ema.errors import EMAError, InputError, StoreBusyError
from ema.limits import seconds_left
from ema.tracking import keys
from ema.tracking.store import lock_folder, retry_busy, retry_set, sqlite_path

T = TypeVar("T")

_logger = logging.getLogger(__name__)

#: Environment: "lock" (file lock, sqlite only) or "lease" (registry tag); unset picks by the store.
MODE_ENV = "EMA_SINGLE_FLIGHT"
MODE_LOCK, MODE_LEASE = "lock", "lease"
#: Environment: seconds a process waits for another one building the same entry.
WAIT_ENV = "EMA_CACHE_WAIT_SECONDS"
DEFAULT_WAIT_SECONDS = 3600.0
#: A lease's length; its holder renews it every third of that.
LEASE_SECONDS = 60.0
#: Pause between writing a claim and reading it back, much longer than a store round trip.
SETTLE_SECONDS = 1.0
#: Pause between looks at someone else's live claim (plus up to half of it at random).
POLL_SECONDS = 1.0


class ClaimTimeout(StoreBusyError):
    """Another process held the cache entry longer than this one was willing to wait."""


def single_flight(name: str, cache_key: str, *, find: Callable[[], T | None], build: Callable[[], T]) -> tuple[T, bool]:
    """The cache entry ``(name, cache_key)``: found, or built by exactly one of the processes that miss it.

    Parameters
    ----------
    name
        The registered model name the entry lives under.
    cache_key
        The entry's key (the version tag ``ema.cache_key``).
    find
        Looks the entry up in the store; None when it is missing (or unusable). Called
        again after the claim is taken, since another process may have built it meanwhile.
    build
        Builds and registers the entry; runs while this process holds the claim.

    Returns
    -------
    (value, built)
        What ``find`` or ``build`` returned, and whether this process built it.

    Raises
    ------
    ClaimTimeout
        If another process held the claim longer than ``EMA_CACHE_WAIT_SECONDS``.
    """
    found = find()
    if found is not None:
        return found, False
    with claim(name, cache_key):
        found = find()
        if found is not None:
            return found, False
        return build(), True


def claim_mode(uri: str) -> str:
    """``lock`` for a sqlite store, ``lease`` for any other; ``EMA_SINGLE_FLIGHT`` overrides."""
    mode = os.environ.get(MODE_ENV, "").strip().lower()
    if mode and mode not in (MODE_LOCK, MODE_LEASE):
        raise InputError(f"expected {MODE_ENV} to be {MODE_LOCK!r}, {MODE_LEASE!r} or unset, got {mode!r}")
    if mode == MODE_LOCK and sqlite_path(uri) is None:
        raise InputError(f"{MODE_ENV}={MODE_LOCK} needs a sqlite tracking store, got {uri!r}; unset it or use lease")
    return mode or (MODE_LOCK if sqlite_path(uri) is not None else MODE_LEASE)


def wait_seconds() -> float:
    text = os.environ.get(WAIT_ENV, "").strip()
    if not text:
        return DEFAULT_WAIT_SECONDS
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value >= 0 or value == float("inf"):
        raise InputError(f"expected {WAIT_ENV} to be a finite number of seconds >= 0, got {text!r}")
    return value


@contextmanager
def claim(name: str, cache_key: str) -> Iterator[None]:
    """Hold the right to build ``(name, cache_key)`` in the current tracking store; wait for it if needed."""
    uri = mlflow.get_tracking_uri()
    wait = min(wait_seconds(), seconds_left(math.inf))  # never past the command's --timeout
    if claim_mode(uri) == MODE_LOCK:
        with _file_claim(uri, name, cache_key, wait):
            yield
    else:
        with _lease_claim(name, cache_key, wait):
            yield


def lock_file_name(name: str, cache_key: str) -> str:
    """A file name for the entry: readable, and distinct for distinct (name, key) pairs.

    >>> lock_file_name("ema-calibration", "0123abcd")
    'ema-calibration-0123abcd-21a3ce87d019.lock'
    """
    readable = re.sub(r"[^A-Za-z0-9._-]", "_", f"{name}-{cache_key}")[:80]
    digest = hashlib.sha256(json.dumps([name, cache_key]).encode()).hexdigest()[:12]
    return f"{readable}-{digest}.lock"


@contextmanager
def _file_claim(uri: str, name: str, cache_key: str, wait: float) -> Iterator[None]:
    folder = lock_folder(sqlite_path(uri))
    folder.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(str(folder / lock_file_name(name, cache_key)), timeout=wait)
    try:
        lock.acquire()
    except filelock.Timeout as exc:
        raise ClaimTimeout(
            f"waited {wait:.0f} s for another process training {name} (cache key {cache_key}, lock "
            f"{lock.lock_file}); set {WAIT_ENV} to wait longer"
        ) from exc
    try:
        yield
    finally:
        lock.release()


@dataclass(frozen=True)
class Lease:
    """A claim as stored in the registered-model tag."""

    owner: str
    expires: float

    def to_json(self) -> str:
        return json.dumps({"owner": self.owner, "expires": self.expires})

    @classmethod
    def parse(cls, text: str | None) -> Lease | None:
        """The lease in a tag value; None for no tag, and for a value that is not one of ours (then expired)."""
        if not text:
            return None
        try:
            data = json.loads(text)
            return cls(str(data["owner"]), float(data["expires"]))
        except (ValueError, TypeError, KeyError):
            return cls("?", 0.0)


class _LeaseStore:
    """Reads and writes one entry's lease tag on the registered model ``name``."""

    def __init__(self, name: str, cache_key: str) -> None:
        self.client, self.name, self.tag = MlflowClient(), name, keys.TAG_CLAIM_PREFIX + cache_key

    def ensure_model(self) -> None:
        """Create the registered model, so it can carry the tag (another process may create it at once)."""
        try:
            retry_busy(lambda: self.client.get_registered_model(self.name))
            return
        except MlflowException:
            pass
        try:
            retry_busy(lambda: self.client.create_registered_model(self.name))
        except MlflowException:
            retry_busy(lambda: self.client.get_registered_model(self.name))  # created by another: fine

    def read(self) -> Lease | None:
        tags = retry_busy(lambda: self.client.get_registered_model(self.name)).tags or {}
        return Lease.parse(tags.get(self.tag))

    def write(self, lease: Lease) -> None:
        retry_set(lambda: self.client.set_registered_model_tag(self.name, self.tag, lease.to_json()))

    def delete(self) -> None:
        retry_busy(lambda: self.client.delete_registered_model_tag(self.name, self.tag))


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@contextmanager
def _lease_claim(name: str, cache_key: str, wait: float) -> Iterator[None]:
    leases = _LeaseStore(name, cache_key)
    leases.ensure_model()
    owner = _owner()
    deadline = time.monotonic() + wait
    while True:
        current = leases.read()
        if current is None or current.expires <= time.time():
            if current is not None:
                _logger.info("taking over the expired claim of %s on %s", current.owner, leases.tag)
            leases.write(Lease(owner, time.time() + LEASE_SECONDS))
            time.sleep(SETTLE_SECONDS)
            current = leases.read()
            if current is not None and current.owner == owner:
                break
        if time.monotonic() >= deadline:
            holder = current.owner if current is not None else "another process"
            raise ClaimTimeout(
                f"waited {wait:.0f} s for {holder} training {name} (cache key {cache_key}, registered-model tag "
                f"{leases.tag}); set {WAIT_ENV} to wait longer"
            )
        time.sleep(POLL_SECONDS * (1 + random.random() / 2))
    stop = threading.Event()
    renewer = threading.Thread(target=_renew, args=(leases, owner, stop), name=f"renew {leases.tag}", daemon=True)
    renewer.start()
    try:
        yield
    finally:
        stop.set()
        renewer.join()
        try:
            current = leases.read()
            if current is not None and current.owner == owner:
                leases.delete()
        except (MlflowException, EMAError) as exc:  # the lease then expires on its own
            _logger.warning("could not release the claim %s on %s: %s", leases.tag, name, exc)


def _renew(leases: _LeaseStore, owner: str, stop: threading.Event) -> None:
    """Extend the lease while its holder works; stop when told, or when the lease was lost."""
    while not stop.wait(LEASE_SECONDS / 3):
        try:
            current = leases.read()
            if current is None or current.owner != owner:
                _logger.warning("lost the claim %s to %s", leases.tag, current.owner if current else "nobody")
                return
            leases.write(Lease(owner, time.time() + LEASE_SECONDS))
        except (MlflowException, EMAError) as exc:
            _logger.warning("could not renew the claim %s: %s", leases.tag, exc)
