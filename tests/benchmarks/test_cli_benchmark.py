"""The ``cli`` benchmark's floors run as the ``ema`` program runs, so that they are comparable with its audit."""

from __future__ import annotations

import os
import subprocess
import sys

from benchmarks.cli import FLOORS, NO_BYTECODE, as_ema_runs, user_environment
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
