"""Opening the store: once per process under a lock, busy sqlite retried, unusable stores refused in one line."""

from __future__ import annotations

import sqlite3

import mlflow
import pytest
from mlflow.exceptions import MlflowException

from benchmarks._serve import free_port
from ema.errors import RETRYABLE, EMAError, InputError, ModelAccessError
from ema.tracking import store
from ema.tracking.runs import configure


@pytest.fixture
def fresh_folder(tmp_path, monkeypatch):
    """An empty working directory with no tracking URI set: the default sqlite store lands in it."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    monkeypatch.chdir(tmp_path)
    mlflow.set_tracking_uri(None)  # a URI set in this process by an earlier test would win over the folder's store
    yield tmp_path
    mlflow.set_tracking_uri(None)


@pytest.fixture
def quick_backoff(monkeypatch):
    monkeypatch.setattr(store, "BUSY_FIRST_PAUSE", 0.001)
    monkeypatch.setattr(store, "BUSY_MAX_PAUSE", 0.002)


def busy() -> Exception:
    """What sqlalchemy raises over sqlite's busy error: a wrapper whose cause says "database is locked"."""
    try:
        raise sqlite3.OperationalError("database is locked")
    except sqlite3.OperationalError as inner:
        try:
            raise RuntimeError("(sqlite3.OperationalError) ...") from inner
        except RuntimeError as outer:
            return outer


def test_sqlite_path_of_relative_absolute_and_other_uris(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert store.sqlite_path("sqlite:///mlflow.db") == tmp_path / "mlflow.db"
    assert store.sqlite_path(f"sqlite:///{tmp_path}/a/b.db?timeout=5") == tmp_path / "a" / "b.db"
    assert store.sqlite_path("sqlite://") is None
    assert store.sqlite_path("https://mlflow.example.org") is None
    assert store.sqlite_path("postgresql://u@h/db") is None


def test_is_busy_finds_sqlite_busy_through_wrappers():
    assert store.is_busy(busy())
    assert not store.is_busy(RuntimeError("no such table: runs"))


def test_retry_busy_retries_until_the_store_answers(quick_backoff):
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise busy()
        return "ok"

    assert store.retry_busy(flaky) == "ok"
    assert len(calls) == 3


def test_retry_busy_gives_up_after_bounded_tries_with_one_line(quick_backoff):
    calls = []

    def locked():
        calls.append(1)
        raise busy()

    with pytest.raises(store.StoreError, match=r"stayed locked by other processes through 8 tries") as info:
        store.retry_busy(locked, what="the MLflow store x.db")
    assert len(calls) == store.BUSY_ATTEMPTS
    assert "\n" not in str(info.value)


def test_retry_busy_passes_other_errors_through_at_once():
    calls = []

    def broken():
        calls.append(1)
        raise ValueError("not a busy store")

    with pytest.raises(ValueError, match="not a busy store"):
        store.retry_busy(broken)
    assert len(calls) == 1


#: What MLflow's server answered the loser of two processes setting the same new tag on PostgreSQL (CI, stop 20).
POSTGRES_CONFLICT = (
    "BAD_REQUEST: (psycopg2.errors.UniqueViolation) duplicate key value violates unique constraint "
    '"registered_model_tag_pk"'
)


@pytest.mark.parametrize(
    "message",
    [POSTGRES_CONFLICT, "(sqlite3.IntegrityError) UNIQUE constraint failed: model_version_tags.key", "Duplicate entry"],
)
def test_is_write_conflict_knows_each_databases_unique_violation(message):
    assert store.is_write_conflict(MlflowException(message))
    assert not store.is_write_conflict(MlflowException("FOREIGN KEY constraint failed"))


def test_retry_set_sets_once_more_after_racing_another_writer():
    calls = []

    def set_tag():
        calls.append(1)
        if len(calls) == 1:
            raise MlflowException(POSTGRES_CONFLICT)
        return "set"

    assert store.retry_set(set_tag) == "set"
    assert len(calls) == 2


@pytest.mark.parametrize(
    ("error", "tries"), [(MlflowException(POSTGRES_CONFLICT), 2), (MlflowException("PERMISSION_DENIED"), 1)]
)
def test_retry_set_raises_a_second_conflict_and_other_errors(error, tries):
    calls = []

    def set_tag():
        calls.append(1)
        raise error

    with pytest.raises(MlflowException) as raised:
        store.retry_set(set_tag)
    assert raised.value is error
    assert len(calls) == tries


def test_configure_creates_the_store_and_experiment_under_a_lock_beside_it(fresh_folder):
    configure("first-use")
    assert (fresh_folder / "mlflow.db").stat().st_size > 0
    assert (fresh_folder / "mlflow.db.lock").exists()
    assert mlflow.get_experiment_by_name("first-use") is not None
    configure("first-use")  # a second command: nothing to create


def test_configure_in_another_folder_uses_that_folders_store(fresh_folder, monkeypatch):
    configure("first-use")
    other = fresh_folder / "elsewhere"
    other.mkdir()
    monkeypatch.chdir(other)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # mlflow.set_tracking_uri exports it
    configure("first-use")  # MLflow keeps one store per URI: a relative one would still point at the first folder
    assert (other / "mlflow.db").stat().st_size > 0


def test_configure_refuses_a_corrupt_database_naming_it(fresh_folder):
    (fresh_folder / "mlflow.db").write_bytes(bytes(range(256)) * 16)
    with pytest.raises(EMAError, match=r"mlflow\.db is not a usable sqlite database .*move it aside") as info:
        configure()
    assert str(fresh_folder / "mlflow.db") in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("foo://x", r"unsupported tracking URI 'foo://x' \(MLFLOW_TRACKING_URI\): expected sqlite:///PATH"),
        ("file:./mlruns", r"the file store 'file:./mlruns' is not supported"),
    ],
)
def test_configure_refuses_an_unusable_uri_in_one_line(fresh_folder, monkeypatch, uri, message):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    with pytest.raises(EMAError, match=message) as info:
        configure()
    assert "\n" not in str(info.value)


def test_store_lock_times_out_with_advice(fresh_folder):
    db = fresh_folder / "mlflow.db"
    with store.store_lock(db):
        with pytest.raises(store.StoreError, match=r"waited 0 s for another process setting up .*delete that lock"):
            with store.store_lock(db, timeout=0.05):
                pass


def test_configure_for_reading_refuses_a_missing_store_and_creates_nothing(fresh_folder):
    """`ema history` in a folder without a store said the model did not exist, after creating a 1 MB store."""
    with pytest.raises(InputError) as refused:
        configure(select_experiment=False)
    assert str(refused.value) == (
        f"no MLflow store at {fresh_folder / 'mlflow.db'} (MLFLOW_TRACKING_URI is not set, so the store is "
        "sqlite:///mlflow.db in the working directory): expected an existing store for a command that only reads; "
        "run it in the folder that holds mlflow.db or set MLFLOW_TRACKING_URI to the store (nothing was created)"
    )
    assert list(fresh_folder.iterdir()) == []


def test_configure_for_reading_names_the_tracking_uri_of_a_missing_store(fresh_folder, monkeypatch):
    uri = f"sqlite:///{fresh_folder / 'team' / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    with pytest.raises(InputError, match=rf"^no MLflow store at \S+team/mlflow\.db \(MLFLOW_TRACKING_URI={uri}\): "):
        configure(select_experiment=False)
    assert list(fresh_folder.iterdir()) == []
    configure()  # a command that writes creates it, as before
    assert (fresh_folder / "team" / "mlflow.db").stat().st_size > 0
    configure(select_experiment=False)  # and a reading command then opens it


@pytest.fixture
def server_down(fresh_folder, monkeypatch):
    """MLFLOW_TRACKING_URI at a local port nothing listens on, with MLflow's retries made short; returns the URI."""
    uri = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")
    return uri


def test_configure_calls_a_tracking_server_that_does_not_answer_retryable(server_down, caplog):
    """A server down was a StoreError ("repair or move the store", exit 6), after 4 minutes of silence."""
    with pytest.raises(ModelAccessError) as refused:
        configure()
    assert isinstance(refused.value, RETRYABLE)
    assert str(refused.value) == (
        f"could not reach the MLflow tracking server {server_down} (MLFLOW_TRACKING_URI): [Errno 111] Connection "
        "refused, after MLflow's retries; try again once it serves"
    )
    said = [r.getMessage() for r in caplog.records if r.name == "ema.tracking.store"]
    assert len(said) == 1 and said[0].startswith(f"the MLflow tracking server {server_down} does not answer (")
    assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES=1" in said[0] and "MLFLOW_HTTP_REQUEST_TIMEOUT=" in said[0]


def test_is_unreachable_tells_a_server_down_from_other_mlflow_errors():
    assert store.is_unreachable(MlflowException("API request to x failed with exception ... Max retries exceeded"))
    assert not store.is_unreachable(MlflowException("RESOURCE_DOES_NOT_EXIST: no experiment"))


def test_retry_wait_adds_urllib3s_pauses(monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "7")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "2")
    assert store.retry_wait().startswith("about 244 s (")  # 4 + 8 + 16 + 32 + 64 + 120: the reviewer's 4 minutes
