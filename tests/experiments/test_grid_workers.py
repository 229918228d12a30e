"""`ema grid --workers 2`: the serial run's cells.csv, every model trained once (issue 15, item 3)."""

from __future__ import annotations

import pandas as pd
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from ema.tracking import keys
from ema_cli.cli import main
from tests.conftest import open_store
from tests.experiments.test_grid_cli import audit_children, cells_of, grid_parents

#: One k, two query sets, both methods: 2 cells that need the same calibration and calibration-set models at once.
GRID = ("grid", "paper", "benchmark", "--epochs", "2", "--k", "100", "--queries", "M1,M6", "--no-progress")
#: Models the grid trains, by registered name: the target, a calibration and a KS-ratio model per k, one per query set.
TRAINED = {"ema-grid-target": 1, keys.CALIBRATION_MODEL_NAME: 1, "ema-calset-model": 1, "ema-query-model": 2}


def grid_cells(*options: str) -> tuple[pd.DataFrame, str]:
    """Run the grid in the current store; its cells.csv and parent run id."""
    result = CliRunner().invoke(main, [*GRID, *options], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "(2 audited, 0 reused)" in result.output
    _, (parent,) = grid_parents(MlflowClient(), "benchmark")
    return cells_of(MlflowClient(), parent.info.run_id), parent.info.run_id


def versions_by_cache_key(client: MlflowClient) -> dict[str, list[str]]:
    """Registered name -> the cache keys of its versions (a key twice: a model trained twice)."""
    return {
        name: [v.tags[keys.TAG_CACHE_KEY] for v in client.search_model_versions(f"name = '{name}'")] for name in TRAINED
    }


def test_grid_with_two_workers_writes_the_serial_cells_and_trains_each_model_once(
    store, tmp_path, template_db, one_thread
):
    serial, _ = grid_cells()
    (tmp_path / "parallel").mkdir()
    open_store(tmp_path / "parallel", template_db)
    parallel, parent = grid_cells("--workers", "2")

    columns = [c for c in serial.columns if c != "run_id"]  # run ids are new in every store
    pd.testing.assert_frame_equal(parallel[columns], serial[columns])
    client = MlflowClient()
    experiment, _ = grid_parents(client, "benchmark")
    children = audit_children(client, experiment.experiment_id, parent)
    assert sorted(c.info.run_id for c in children) == sorted(parallel["run_id"])
    assert {c.info.status for c in children} == {"FINISHED"} and {c.data.params["workers"] for c in children} == {"2"}
    trained = versions_by_cache_key(client)
    assert {name: len(found) for name, found in trained.items()} == TRAINED
    assert all(len(set(found)) == len(found) for found in trained.values())
