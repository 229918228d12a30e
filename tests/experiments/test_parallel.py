"""`run_in_workers`: results in the tasks' order, the first failure raised (spawned processes, kept light here)."""

from __future__ import annotations

import os

import pytest

from ema.experiments.parallel import run_in_workers

#: Set in each worker by `remember`.
_offset = 0


def remember(offset: int) -> None:
    global _offset
    _offset = offset


def add_offset(task: int) -> tuple[int, int]:
    if task < 0:
        raise ValueError(f"task {task} refused")
    return task + _offset, os.getpid()


def test_run_in_workers_returns_results_in_task_order_from_other_processes():
    results = run_in_workers(add_offset, [3, 1, 2, 0], workers=2, initializer=remember, initargs=(10,), progress=False)
    assert [value for value, _ in results] == [13, 11, 12, 10]
    assert os.getpid() not in {pid for _, pid in results}


def test_run_in_workers_raises_the_first_failure():
    with pytest.raises(ValueError, match="task -1 refused"):
        run_in_workers(add_offset, [1, -1, 2], workers=2, initializer=remember, initargs=(0,), progress=False)


def test_run_in_workers_with_no_tasks_starts_nothing():
    assert run_in_workers(add_offset, [], workers=2, initializer=remember, progress=False) == []
