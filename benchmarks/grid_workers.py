"""``grid_workers``: ``ema grid paper benchmark --workers 2`` against ``--workers 1``, both on a team tracking server.

The server is an ``mlflow server`` on a throwaway PostgreSQL cluster with served artifacts
(``tests/server/cluster.py``; PostgreSQL and psycopg2 must be installed). Every timed grid
runs against a fresh, empty database of that cluster and a server of its own, so every model
is trained, as on a first run; starting the server is not timed. The grid is the benchmark
grid (Table 2: 6 k x 7 query sets, EMA and the KS ratio in every cell, 20 models) with the
paper's 50 epochs; ``--quick`` narrows it to k = 100, 90 and 10 epochs. Every process uses
``--threads`` torch threads: the workers copy their parent's count, as ``ema grid`` does, so that
their cells equal the serial run's (with ``--threads 1`` two workers fill two cores). The runs
alternate (1, 2, then 2, 1 in a full run) so that a slow phase of the shared machine does not
fall on one side only. Both runs' ``cells.csv`` are compared, run ids aside.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import tempfile
from collections.abc import Iterator
from pathlib import Path

from benchmarks._common import Config, Skipped, progress, require_module, row, spread, timed, using_store

NAME = "grid_workers"
#: Epochs of the recipe (full run: the paper's 50, --quick).
EPOCHS = (50, 10)
#: k values of the quick run (the full run takes all of the grid's).
QUICK_KS = (100, 90)
WORKERS = 2


@contextlib.contextmanager
def fresh_server(cluster, database: str) -> Iterator[str]:
    """A tracking server on a new database of ``cluster``, selected as the store, in a temporary working folder."""
    from tests.server.cluster import team_server

    with (
        tempfile.TemporaryDirectory(prefix="ema-bench-server-") as tmp,
        team_server(cluster, database, Path(tmp)) as url,
    ):
        with using_store(url, Path(tmp)):
            yield url


def measure(config: Config) -> list[dict]:
    """Wall time of the grid with one worker and with two, on fresh server databases; one row."""
    from ema.experiments.paper.config import GridConfig
    from ema.experiments.paper.runner import run_grid
    from tests.server.cluster import missing, postgres_cluster

    require_module("psycopg2", "server")
    reason = missing()
    if reason:
        raise Skipped(f"needs a team server: {reason}")
    epochs = EPOCHS[config.quick]
    base = GridConfig(name="benchmark", epochs=epochs, ks=QUICK_KS if config.quick else None)
    order = (1, WORKERS) if config.quick else (1, WORKERS, WORKERS, 1)
    times: dict[int, list[float]] = {1: [], WORKERS: []}
    cells = {}
    with postgres_cluster() as cluster:
        for i, workers in enumerate(order):
            with fresh_server(cluster, f"grid{i}"):
                progress(f"grid benchmark, {epochs} epochs, --workers {workers} (run {i + 1} of {len(order)})")
                grid = dataclasses.replace(base, workers=workers)
                seconds, outcome = timed(lambda grid=grid: run_grid(grid, progress=False))
                times[workers].append(seconds)
                cells.setdefault(workers, outcome.cells.drop(columns="run_id"))
                progress(f"  {seconds:.1f} s, {outcome.n_audited} cells audited")
    serial, parallel = statistics.median(times[1]), statistics.median(times[WORKERS])
    same = cells[1].equals(cells[WORKERS])
    n_cells = len(cells[1])
    case = (
        f"ema grid paper benchmark on PostgreSQL + mlflow server, MLP {epochs} epochs, {n_cells} cells, "
        f"{config.threads} torch thread(s) per process: --workers 2"
    )
    return [
        row(
            NAME,
            case,
            ours=parallel,
            baseline=serial,
            unit="s",
            baseline_label="--workers 1",
            ratio=serial / parallel,
            ratio_label="workers 1 / workers 2 (speedup)",
            goal="recorded",
            repeats=len(times[1]),
            note=(
                f"--workers 2: {spread(times[WORKERS])}; --workers 1: {spread(times[1])}; run order {order}; "
                f"cells.csv of both (run ids aside) {'identical' if same else 'DIFFERENT'}"
            ),
        )
    ]
