"""Opening the tracking store: once per process, safe when several commands start at once.

MLflow creates and migrates a fresh sqlite store when it first opens it, and creates an
experiment on first use; neither is safe when several processes do it at the same time
(three ``ema`` commands started together in an empty folder left a half-migrated store,
``table _alembic_tmp_tags already exists``, for good; mlflow #19943, #12259). Here both
happen under a file lock beside the database, and sqlite's "database is locked" is retried
with a bounded backoff. A store that cannot be used (a corrupt file, a URI scheme MLflow
does not know) is reported as one line that names it and says what to do.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import sqlite3
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

import filelock
import requests
from mlflow.environment_variables import (
    MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR,
    MLFLOW_HTTP_REQUEST_MAX_RETRIES,
    MLFLOW_HTTP_REQUEST_TIMEOUT,
)
from mlflow.exceptions import MlflowException
from mlflow.tracking import get_tracking_uri
from mlflow.tracking._tracking_service.utils import _get_store
from mlflow.tracking.registry import UnsupportedModelRegistryStoreURIException

from ema.errors import InputError, MissingDependencyError, ModelAccessError, StoreBusyError, StoreError, pip_command
from ema.tracking import sqlite_sync

T = TypeVar("T")

_logger = logging.getLogger(__name__)

#: How long a command waits for another one creating or migrating the same sqlite store.
STORE_LOCK_SECONDS = 300.0
#: Tries of a store call that sqlite refused with "database is locked", and the first and longest pause.
BUSY_ATTEMPTS = 8
BUSY_FIRST_PAUSE = 0.1
BUSY_MAX_PAUSE = 5.0
#: What sqlite says when another connection holds the write lock past the busy timeout.
BUSY_MESSAGES = ("database is locked", "database is busy", "database table is locked")
#: What PostgreSQL, sqlite and MySQL say when two connections insert the same key at once.
CONFLICT_MESSAGES = ("duplicate key value violates unique constraint", "UNIQUE constraint failed", "Duplicate entry")

#: What MLflow's REST client says when a tracking server could not be reached or kept failing (requests' errors).
UNREACHABLE_MESSAGES = ("Max retries exceeded", "failed with timeout exception", "Failed to establish a new connection")
#: Seconds a tracking server has to accept a connection before the command says, once, that it does not answer.
PROBE_SECONDS = 3.0
#: urllib3's longest pause between two of MLflow's retries (``Retry.DEFAULT_BACKOFF_MAX``).
MAX_RETRY_PAUSE = 120.0

SUPPORTED = (
    "sqlite:///PATH (the default is sqlite:///mlflow.db in the working directory), "
    "http(s)://HOST:PORT of an MLflow tracking server, or postgresql://, mysql:// or mssql:// database URIs"
)


def sqlite_path(uri: str) -> Path | None:
    """The database file behind a ``sqlite:`` URI, absolute; None for other stores and in-memory databases.

    >>> sqlite_path("sqlite:////tmp/x/mlflow.db")
    PosixPath('/tmp/x/mlflow.db')
    >>> sqlite_path("http://127.0.0.1:5000") is None, sqlite_path("sqlite:///:memory:") is None
    (True, True)
    """
    if not uri.startswith("sqlite:"):
        return None
    database = uri.removeprefix("sqlite:").removeprefix("//").split("?", 1)[0]
    database = database.removeprefix("/")  # sqlite:///rel.db -> rel.db, sqlite:////abs.db -> /abs.db
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database).absolute()


def absolute_uri(uri: str) -> str:
    """``uri`` with a relative sqlite database made absolute (against the working directory now).

    MLflow keeps one store object per URI for the life of the process: a relative
    ``sqlite:///mlflow.db`` opened in one folder would otherwise still point there after the
    process moves to another (a notebook, a test suite). Query strings and other stores are kept.

    >>> absolute_uri("http://127.0.0.1:5000")
    'http://127.0.0.1:5000'
    """
    db = sqlite_path(uri)
    if db is None or uri.startswith("sqlite:////"):
        return uri
    query = uri.partition("?")[2]
    return f"sqlite:///{db}" + (f"?{query}" if query else "")


def check_present(uri: str, given: str | None) -> None:
    """Refuse a sqlite store whose database file does not exist, for a command that only reads: opening it would
    create a store (a database of about 1 MB and its lock file) only to find nothing in it.

    ``given`` is ``MLFLOW_TRACKING_URI`` as set (None or empty: unset, the default store), named in the message.

    Raises
    ------
    InputError
        If ``uri`` is a sqlite store whose file does not exist.
    """
    db = sqlite_path(uri)
    if db is None or db.exists():
        return
    source = (
        f"MLFLOW_TRACKING_URI={given}"
        if given
        else "MLFLOW_TRACKING_URI is not set, so the store is sqlite:///mlflow.db in the working directory"
    )
    raise InputError(
        f"no MLflow store at {db} ({source}): expected an existing store for a command that only reads; run it "
        "in the folder that holds mlflow.db or set MLFLOW_TRACKING_URI to the store (nothing was created)"
    )


def lock_folder(db: Path) -> Path:
    """Where the lock files of a sqlite store live: ``<db>.locks`` beside the database."""
    return db.with_name(db.name + ".locks")


def is_busy(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it wraps) is sqlite's "database is locked"."""
    return _says_any(exc, BUSY_MESSAGES)


def is_write_conflict(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it wraps) is a unique-key violation: another writer inserted the row first.

    >>> is_write_conflict(MlflowException('duplicate key value violates unique constraint "registered_model_tag_pk"'))
    True
    >>> is_write_conflict(MlflowException("Registered Model with name=x not found"))
    False
    """
    return _says_any(exc, CONFLICT_MESSAGES)


def retry_set(call: Callable[[], T]) -> T:
    """``call()``, an MLflow set of a tag or an alias, tried once more if it raced another writer of the same key.

    MLflow's SQL stores set a key by looking its row up and inserting the row when missing,
    so of two processes that set the same new key at once (two audits of one version writing
    its first ``last_audit``), one fails on the unique key. The row exists by then, so the
    second try updates it: the last writer wins, as for any two sets. sqlite's "database is
    locked" is retried as by :func:`retry_busy`.
    """
    try:
        return retry_busy(call)
    except Exception as exc:
        if not is_write_conflict(exc):
            raise
        _logger.info("another process set the same key at the same moment (%s); setting it again", exc)
        return retry_busy(call)


def _says_any(exc: BaseException | None, messages: tuple[str, ...]) -> bool:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if any(message in str(exc) for message in messages):
            return True
        exc = getattr(exc, "orig", None) or exc.__cause__ or exc.__context__
    return False


def is_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it wraps) says a tracking server could not be reached: refused, timed out,
    or failing through all of MLflow's retries.

    >>> is_unreachable(MlflowException("API request to http://h:1/api failed with exception HTTPConnectionPool("
    ...     "host='h', port=1): Max retries exceeded with url: /api"))
    True
    >>> is_unreachable(MlflowException("Could not find experiment with ID 7"))
    False
    """
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if isinstance(link, (requests.exceptions.ConnectionError, requests.exceptions.Timeout)):
            return True
        link = link.__cause__ or link.__context__
    return _says_any(exc, UNREACHABLE_MESSAGES)


def current_uri() -> str:
    """The tracking URI this process uses now."""
    return get_tracking_uri()


def unreachable_error(uri: str, exc: BaseException) -> ModelAccessError:
    """The one-line, retryable error of a tracking server at ``uri`` that ``exc`` says could not be reached."""
    reason = re.search(
        r"\[Errno -?\d+\] [^'\")]+|Read timed out|timeout exception|too many \d+ error responses", str(exc)
    )
    return ModelAccessError(
        f"could not reach the MLflow tracking server {uri} (MLFLOW_TRACKING_URI)"
        f"{f': {reason.group(0)}' if reason else ''}, after MLflow's retries; try again once it serves"
    )


def retry_wait() -> str:
    """How long MLflow's retries of a tracking server's request may wait in all, with the settings that say so."""
    try:
        retries, factor = MLFLOW_HTTP_REQUEST_MAX_RETRIES.get(), MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR.get()
        timeout = MLFLOW_HTTP_REQUEST_TIMEOUT.get()
    except ValueError:  # a setting MLflow cannot read: it says so itself when it tries
        return "its retries (MLFLOW_HTTP_REQUEST_MAX_RETRIES, MLFLOW_HTTP_REQUEST_TIMEOUT)"
    # urllib3 pauses factor * 2 ** (n - 1) seconds after the n-th failure in a row (none after the first)
    pauses = sum(min(MAX_RETRY_PAUSE, factor * 2 ** (n - 1)) for n in range(2, retries + 1))
    return (
        f"about {pauses:g} s (MLFLOW_HTTP_REQUEST_MAX_RETRIES={retries}, MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR={factor:g}"
        f"; up to MLFLOW_HTTP_REQUEST_TIMEOUT={timeout} s a try)"
    )


def warn_if_silent(uri: str) -> None:
    """Say once, before MLflow's retries start their silent wait, that the tracking server at ``uri`` does not
    accept connections. Nothing for other stores, for a server reached through a proxy, or one that answers."""
    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return
    if urllib.request.getproxies().get(parts.scheme) and not urllib.request.proxy_bypass(parts.hostname):
        return  # MLflow goes through the proxy: a direct connection says nothing about the server
    try:
        if MLFLOW_HTTP_REQUEST_MAX_RETRIES.get() == 0:
            return  # no wait to announce: the first failure is the error
    except ValueError:
        return  # a setting MLflow cannot read: it says so itself
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        socket.create_connection((parts.hostname, port), timeout=PROBE_SECONDS).close()
    except (OSError, ValueError) as exc:
        _logger.warning(
            "the MLflow tracking server %s does not answer (%s); MLflow tries again for %s: lower them to fail sooner",
            uri,
            exc,
            retry_wait(),
        )


def retry_busy(call: Callable[[], T], *, what: str = "the tracking store") -> T:
    """``call()``, tried again with a doubling pause (at most ``BUSY_ATTEMPTS`` tries) while sqlite is busy.

    Raises
    ------
    StoreBusyError
        If the store is still locked after the last try.
    """
    pause = BUSY_FIRST_PAUSE
    for attempt in range(1, BUSY_ATTEMPTS + 1):
        try:
            return call()
        except Exception as exc:
            if not is_busy(exc):
                raise
            if attempt == BUSY_ATTEMPTS:
                raise StoreBusyError(
                    f"{what} stayed locked by other processes through {BUSY_ATTEMPTS} tries; "
                    "try again when they are done, or use an MLflow tracking server for many concurrent writers"
                ) from exc
            _logger.info("sqlite is busy (%s); trying again in %.1f s", exc, pause)
            time.sleep(pause)
            pause = min(2 * pause, BUSY_MAX_PAUSE)
    raise AssertionError("unreachable")


@contextmanager
def store_lock(db: Path, *, timeout: float = STORE_LOCK_SECONDS) -> Iterator[None]:
    """Hold ``<db>.lock``: one process at a time creates, migrates or sets up the store ``db``."""
    lock = filelock.FileLock(str(db.with_name(db.name + ".lock")), timeout=timeout)
    try:
        lock.acquire()
    except filelock.Timeout as exc:
        raise StoreBusyError(
            f"waited {timeout:.0f} s for another process setting up the MLflow store {db} (it holds {lock.lock_file}); "
            "if no other ema or mlflow command is running, delete that lock file and try again"
        ) from exc
    except PermissionError as exc:
        raise StoreError(
            f"cannot use the MLflow store {db}: its lock file {lock.lock_file} is not writable here ({exc}); every "
            "command writes beside its store, even one that only reads: use a copy in a folder you may write to"
        ) from exc
    try:
        yield
    finally:
        lock.release()


def _check_sqlite_file(db: Path) -> None:
    """Refuse a file that is not a sqlite database, before MLflow fails on it with a traceback."""
    if not db.exists() or db.stat().st_size == 0:
        return
    if db.is_dir():
        raise StoreError(f"the MLflow store {db} is a folder, expected a sqlite database file")
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        connection.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        if is_busy(exc):
            raise
        if sqlite_sync.is_wal(db) and not os.access(db.parent, os.W_OK):
            raise StoreError(
                f"the MLflow store {db} is in WAL mode and its folder is not writable here, where sqlite must create "
                f"{db.name}-shm to read it ({exc}); read a copy in a folder you may write to, or have its owner "
                "convert it back with PRAGMA journal_mode=DELETE"
            ) from exc
        raise StoreError(
            f"the MLflow store {db} is not a usable sqlite database ({exc}); move it aside to start a fresh "
            "store there, or point MLFLOW_TRACKING_URI at another store"
        ) from exc
    finally:
        connection.close()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _open(uri: str, db: Path | None) -> None:
    """Create the store object (and for sqlite the tables); refuse one that cannot work with one line."""
    if db is not None:
        retry_busy(lambda: _check_sqlite_file(db), what=f"the MLflow store {db}")
    try:
        retry_busy(lambda: _get_store(uri), what=f"the MLflow store {uri}")
    except UnsupportedModelRegistryStoreURIException as exc:
        raise StoreError(f"unsupported tracking URI {uri!r} (MLFLOW_TRACKING_URI): expected {SUPPORTED}") from exc
    except ModuleNotFoundError as exc:
        raise MissingDependencyError(
            f"the tracking URI {uri!r} needs a database driver that is not installed: {exc}; {pip_command(exc.name)}"
        ) from exc
    except StoreError:
        raise
    except MlflowException as exc:
        if uri.startswith("file:") or "://" not in uri:
            raise StoreError(
                f"the file store {uri!r} is not supported (MLflow keeps it in maintenance mode): expected {SUPPORTED}"
            ) from exc
        raise StoreError(f"could not open the MLflow store {uri}: {_first_line(exc)}") from exc
    except Exception as exc:  # sqlalchemy's errors on a broken or half-migrated database
        where = db if db is not None else uri
        raise StoreError(
            f"could not open the MLflow store {where}: {_first_line(exc)}; if it is a sqlite file left broken, "
            "move it aside to start a fresh store"
        ) from exc


@contextmanager
def opened(uri: str) -> Iterator[None]:
    """Open the store at ``uri``; inside, set-up calls (creating an experiment) run one process at a time.

    For a sqlite store the database is created and migrated at most once, under
    ``<db>.lock``: a command that starts while another migrates waits for it. It is created in
    WAL mode, and this process's connections to a WAL store sync at checkpoints only
    (:mod:`ema.tracking.sqlite_sync`). Other stores (a tracking server, a database server)
    migrate on their own side.

    Raises
    ------
    StoreError
        If the store is a corrupt file or its URI scheme is not supported; :class:`~ema.errors.StoreBusyError`
        if it stays locked.
    MissingDependencyError
        If its database driver is not installed.
    """
    db = sqlite_path(uri)
    if db is None:
        warn_if_silent(uri)
        _open(uri, None)
        yield
        return
    db.parent.mkdir(parents=True, exist_ok=True)
    with store_lock(db):
        if not db.exists() or db.stat().st_size == 0:
            sqlite_sync.create_in_wal_mode(db)
        sqlite_sync.sync_at_checkpoints(db)
        _open(uri, db)
        yield
