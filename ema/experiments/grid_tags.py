"""The tag a grid leaves on the versions it audited (``ema.last_grid.<grid>``): the paper and unlearning grids."""

import json
import time

from ema.tracking import keys
from ema.tracking.registry import RegisteredVersion, set_version_tags


def record_grid_on_version(version: RegisteredVersion, grid: str, run_id: str, config_hash: str, n_cells: int) -> None:
    """Tag ``version`` with ``ema.last_grid.<grid>``: the grid's parent run, config hash, cells and time (JSON).

    A grid's cells do not tag the version one by one (a query-size grid would leave dozens of
    tags); the grid tags it once, after its parent run finished.
    """
    record = {
        "run_id": run_id,
        "config_hash": config_hash,
        "n_cells": n_cells,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    set_version_tags(version, {f"{keys.TAG_LAST_GRID_PREFIX}{grid}": json.dumps(record, sort_keys=True)})
