"""Tasks in worker processes, results in the order the tasks were given: the engine of ``ema grid paper --workers N``.

Workers are fresh interpreters (the ``spawn`` start method): nothing of the parent's state
(torch's thread pools, open database connections, MLflow's active run) is copied into them.
Each takes on the parent's command limits (``--max-params``, ``--timeout``: :mod:`ema.limits`),
runs ``initializer(*initargs)`` once, then ``work(task)`` for the tasks it is handed.
The first task that raises stops the rest (tasks not yet started are cancelled) and its
exception is raised here.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import TypeVar

from tqdm.auto import tqdm

from ema.limits import Limits, adopt_limits, current_limits

T = TypeVar("T")
R = TypeVar("R")

#: Start method of the workers: fresh interpreters, safe with torch and with threads in the parent.
START_METHOD = "spawn"


def run_in_workers(
    work: Callable[[T], R],
    tasks: Sequence[T],
    *,
    workers: int,
    initializer: Callable[..., None],
    initargs: tuple = (),
    progress: bool = True,
    desc: str = "",
) -> list[R]:
    """``[work(task) for task in tasks]``, computed by ``workers`` processes; results in the tasks' order.

    ``work`` and ``initializer`` must be module-level functions (they are pickled by name).
    """
    if not tasks:
        return []
    context = multiprocessing.get_context(START_METHOD)
    with ProcessPoolExecutor(
        max_workers=min(workers, len(tasks)),
        mp_context=context,
        initializer=_start_worker,
        initargs=(current_limits(), initializer, initargs),
    ) as pool:
        futures = [pool.submit(work, task) for task in tasks]
        with tqdm(total=len(futures), desc=desc, unit="task", disable=not progress) as bar:
            pending = set(futures)
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                bar.update(len(finished))
                failed = next((f for f in finished if f.exception() is not None), None)
                if failed is not None:
                    pool.shutdown(wait=True, cancel_futures=True)
                    raise failed.exception()
        return [future.result() for future in futures]


def _start_worker(limits: Limits, initializer: Callable[..., None], initargs: tuple) -> None:
    adopt_limits(limits)
    initializer(*initargs)
