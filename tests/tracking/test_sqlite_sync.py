"""A store the workbench creates is in WAL mode and synced at checkpoints; other stores keep their mode."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import mlflow
import pytest
from mlflow.tracking._tracking_service.utils import _get_store
from sqlalchemy import text

from ema.errors import StoreError
from ema.tracking import sqlite_sync
from ema.tracking.runs import configure


@pytest.fixture
def fresh_folder(tmp_path, monkeypatch):
    """An empty working directory with no tracking URI set: the default sqlite store lands in it."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    monkeypatch.chdir(tmp_path)
    mlflow.set_tracking_uri(None)
    yield tmp_path
    sqlite_sync.close_stores()
    mlflow.set_tracking_uri(None)


def pragmas(uri: str) -> tuple[str, int]:
    """The journal mode and the ``synchronous`` level of a connection MLflow's store for ``uri`` opens."""
    with _get_store(uri).engine.connect() as connection:
        mode = connection.execute(text("PRAGMA journal_mode")).scalar()
        return mode, connection.execute(text("PRAGMA synchronous")).scalar()


def test_a_new_store_is_in_wal_mode_and_its_commits_sync_at_checkpoints(fresh_folder):
    configure()
    assert pragmas(mlflow.get_tracking_uri()) == ("wal", 1)  # 1: NORMAL, 2: FULL (sqlite's default)


def test_an_existing_store_keeps_its_journal_mode_and_full_syncs(store):
    configure()
    assert pragmas(store) == ("delete", 2)


def test_a_store_on_a_network_file_system_is_created_as_mlflow_creates_it(fresh_folder, monkeypatch):
    mounts = fresh_folder.parent / "mounts"
    mounts.write_text(f"server:/export {fresh_folder} nfs4 rw 0 0\n")
    monkeypatch.setattr(sqlite_sync, "MOUNTS", mounts)
    configure()
    assert pragmas(mlflow.get_tracking_uri()) == ("delete", 2)


def test_the_process_leaves_no_log_beside_the_store_and_its_runs_in_it(fresh_folder):
    """The log is checkpointed into the database when the process exits: a copy of mlflow.db alone holds every run."""
    code = "from ema.tracking.runs import configure; configure(); import mlflow; mlflow.start_run(run_name='kept')"
    subprocess.run([sys.executable, "-c", f"{code}; mlflow.end_run()"], check=True, capture_output=True)
    assert sorted(path.name for path in fresh_folder.glob("mlflow.db*")) == ["mlflow.db", "mlflow.db.lock"]
    names = sqlite3.connect(fresh_folder / "mlflow.db").execute("SELECT name FROM runs").fetchall()
    assert names == [("kept",)]


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/data/store/mlflow.db", "nfs"),  # the longest mount point above the path wins
        ("/data", "nfs"),
        ("/datasets/mlflow.db", "ext4"),  # /data is not above /datasets
        ("/mnt/my disk/mlflow.db", "cifs"),  # a space, written \\040 in the table
    ],
)
def test_filesystem_type_reads_the_longest_mount_point_above_the_path(tmp_path, path, kind):
    mounts = tmp_path / "mounts"
    mounts.write_text("/dev/sda1 / ext4 rw 0 0\nserver:/x /data nfs rw 0 0\n//h/s /mnt/my\\040disk cifs rw 0 0\n")
    assert sqlite_sync.filesystem_type(sqlite_sync.Path(path), mounts) == kind


def test_a_wal_store_in_an_unwritable_folder_is_refused_with_what_to_do(fresh_folder, immutable):
    subprocess.run([sys.executable, "-c", "from ema.tracking.runs import configure; configure()"], check=True)
    assert sqlite_sync.is_wal(fresh_folder / "mlflow.db")
    immutable(fresh_folder)
    with pytest.raises(StoreError) as info:
        configure(select_experiment=False)
    assert str(info.value).startswith(f"the MLflow store {fresh_folder / 'mlflow.db'} is in WAL mode and its folder")
    assert "read a copy in a folder you may write to" in str(info.value)


def test_is_wal_reads_the_header_of_either_journal(store, tmp_path):
    assert not sqlite_sync.is_wal(tmp_path / "mlflow.db")
    sqlite3.connect(tmp_path / "mlflow.db").execute("PRAGMA journal_mode=WAL").fetchone()
    assert sqlite_sync.is_wal(tmp_path / "mlflow.db")
    assert not sqlite_sync.is_wal(tmp_path)  # a file it cannot read (here a folder) is not said to be WAL


def test_a_store_reached_through_a_symbolic_link_syncs_at_checkpoints(fresh_folder, monkeypatch):
    """The store is recorded by its resolved path and sqlite's name for the file is resolved before comparing (sqlite
    3.40 resolves links itself; older ones name the file as it was opened)."""
    (fresh_folder / "real").mkdir()
    (fresh_folder / "link").symlink_to(fresh_folder / "real")
    uri = f"sqlite:///{fresh_folder / 'link' / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    configure()
    assert pragmas(uri) == ("wal", 1)


def test_a_store_whose_lock_file_is_not_writable_is_refused_with_what_to_do(fresh_folder, immutable):
    subprocess.run([sys.executable, "-c", "from ema.tracking.runs import configure; configure()"], check=True)
    immutable(fresh_folder / "mlflow.db.lock")
    with pytest.raises(StoreError) as info:
        configure(select_experiment=False)
    assert str(info.value).startswith(f"cannot use the MLflow store {fresh_folder / 'mlflow.db'}: its lock file")
    assert str(info.value).endswith("use a copy in a folder you may write to")
