"""The ``cli`` benchmark's floors run as the ``ema`` program runs, so that they are comparable with its audit; its
count of the audit's store writes counts the transactions that wrote."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys

import pytest

from benchmarks.cli import (
    COUNT_WRITES,
    FLOORS,
    NO_BYTECODE,
    SLOW_SYNC_US,
    WRITE_COUNTER,
    as_ema_runs,
    count_writes,
    rollback_copy,
    slow_syncs,
    user_environment,
    write_commit_seconds,
)
from ema.tracking.sqlite_sync import create_in_wal_mode
from ema_cli.cli import GC_THRESHOLDS


def test_a_floor_process_has_the_programs_collector_thresholds_and_exits_frozen():
    # atexit runs after the command's last statement, the freeze, and before the interpreter's teardown
    probe = "import atexit; atexit.register(lambda: print(gc.get_threshold(), gc.get_freeze_count() > 0))"
    shown = subprocess.run(as_ema_runs(probe), check=True, capture_output=True, text=True).stdout
    assert shown.strip() == f"{GC_THRESHOLDS} True"


def test_the_whole_floor_imports_and_opens_a_store(tmp_path):
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    subprocess.run(FLOORS["floor"], check=True, capture_output=True, cwd=tmp_path, env=env)
    assert (tmp_path / "mlflow.db").stat().st_size > 0


def test_timed_processes_may_write_bytecode_even_where_this_machine_forbids_it(monkeypatch):
    monkeypatch.setenv(NO_BYTECODE, "1")
    probe = [sys.executable, "-c", "import sys; print(sys.flags.dont_write_bytecode)"]
    shown = subprocess.run(probe, check=True, capture_output=True, text=True, env=user_environment()).stdout
    assert shown.strip() == "0"


def logging_run(calls: list[dict]) -> list[str]:
    """A process that opens a run, logs ``calls`` (params), one ``log_batch`` each, and ends it, counting writes."""
    code = (
        "from ema.tracking.runs import configure, log_batch, start_run\n"
        "configure()\n"
        "with start_run('params'):\n" + "".join(f"    log_batch(params={call!r})\n" for call in calls)
    )
    return [sys.executable, "-c", WRITE_COUNTER + code]


def test_count_writes_counts_the_transactions_that_wrote(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    subprocess.run(FLOORS["floor"], check=True, capture_output=True, cwd=tmp_path)  # the store and experiment, made
    assert count_writes([*COUNT_WRITES, "--help"]) == 0
    assert count_writes(logging_run([{"a": 1}, {"b": 2}])) == 4  # the run, each params call, the run's end
    assert count_writes(logging_run([{"a": 1, "b": 2}])) == 3


@pytest.mark.parametrize("wal", [True, False])
def test_write_commit_seconds_times_a_commit_and_leaves_the_folder_as_it_was(tmp_path, wal):
    assert write_commit_seconds(tmp_path, wal=wal) > 0
    assert list(tmp_path.iterdir()) == []


def test_a_rollback_copy_holds_what_the_log_holds_in_mlflows_default_journal(tmp_path):
    """The copy is made while a connection holds commits in the log, not yet in the database file."""
    db = tmp_path / "mlflow.db"
    create_in_wal_mode(db)
    writer = sqlite3.connect(db)
    writer.execute("CREATE TABLE runs (name TEXT)")
    writer.execute("INSERT INTO runs VALUES ('kept')")
    writer.commit()
    uri = rollback_copy(db, tmp_path / "copy")
    writer.close()
    copy = sqlite3.connect(uri.removeprefix("sqlite:///"))
    assert copy.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    assert copy.execute("SELECT name FROM runs").fetchall() == [("kept",)]


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_slow_syncs_delays_each_sync(tmp_path):
    """A lower bound only, which the injected delay guarantees: two syncs take at least two delays."""
    probe = (
        "import os, time; f = os.open('f', os.O_CREAT | os.O_WRONLY); t = time.perf_counter(); "
        "os.fsync(f); os.fdatasync(f); print(time.perf_counter() - t)"
    )
    shown = subprocess.run(
        slow_syncs([sys.executable, "-c", probe]), check=True, capture_output=True, text=True, cwd=tmp_path
    )
    assert float(shown.stdout) >= 2 * SLOW_SYNC_US / 1e6
