"""``table_memory``: peak memory of `ema audit` on a 100,000-row table, against the same audit of 1,000 rows.

The target is what `ema train --data breast-cancer` registers (the default table recipe,
extremely randomized trees, 30 named features, a DataFrame signature). The query is a Parquet
table of the Breast Cancer rows tiled to 100,000 with seeded noise (1% of each column's spread,
so no two rows are equal), the calibration data the preset's calibration rows as a CSV file.
Each audit runs as the `ema` program in a fresh process under ``/usr/bin/time -v``, whose
"Maximum resident set size" is the figure; the 1,000-row audit is the baseline (imports, the
store, the calibration model), so the ratio shows what the rows themselves cost.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks._common import Config, progress, row

NAME = "table_memory"
N_ROWS = 100_000
N_BASELINE = 1_000
GOAL_BYTES = 1.5e9
MB = 1 << 20
#: /usr/bin/time -v's line for the peak RSS, in kilobytes.
MAX_RSS = re.compile(r"Maximum resident set size \(kbytes\): (\d+)")


def _write_inputs(folder: Path) -> str:
    """Register the target and write the query tables and the calibration file; returns the model URI."""
    import pandas as pd

    from ema.data.presets import load_splits
    from ema.tracking.runs import configure
    from ema.workflows.train import train_target

    configure()
    trained = train_target(None, data="breast-cancer", progress=False)
    splits = load_splits("breast-cancer")
    calibration = splits.calibration
    frame = pd.DataFrame(calibration.x, columns=list(calibration.features)).assign(label=calibration.y)
    frame.to_csv(folder / "calibration.csv", index=False)
    pool = splits.held_out
    rng = np.random.default_rng(0)
    for n in (N_ROWS, N_BASELINE):
        rows = rng.integers(0, len(pool), n)
        x = pool.x[rows] + rng.normal(0, 0.01, (n, pool.x.shape[1])) * pool.x.std(axis=0)
        table = pd.DataFrame(x, columns=list(pool.features)).assign(label=pool.y[rows])
        table.to_parquet(folder / f"query-{n}.parquet")
    return f"models:/{trained.version.name}/{trained.version.version}"


def _peak_rss(folder: Path, uri: str, n: int) -> int:
    """Peak RSS in bytes of `ema audit` of the ``n``-row table, in a fresh process."""
    command = ["/usr/bin/time", "-v", sys.executable, "-c", "from ema_cli.cli import run; run()", "audit"]
    command += ["--model", uri, "--query-file", str(folder / f"query-{n}.parquet")]
    command += ["--calibration-file", str(folder / "calibration.csv"), "--no-progress"]
    env = {**os.environ, "MLFLOW_TRACKING_URI": os.environ["MLFLOW_TRACKING_URI"]}
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=folder, check=False)
    found = MAX_RSS.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"ema audit of {n} rows failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return int(found.group(1)) * 1024


def measure(config: Config) -> list[dict]:
    """One row: peak RSS of the 100,000-row audit against the 1,000-row one."""
    from benchmarks._common import using_store

    with tempfile.TemporaryDirectory(prefix="ema-bench-table-") as name:
        folder = Path(name)
        with using_store(f"sqlite:///{folder / 'mlflow.db'}", folder):
            progress("table_memory: training the breast-cancer target, writing a 100,000-row query table")
            uri = _write_inputs(folder)
            progress("table_memory: ema audit of 1,000 rows (calibrates), then of 100,000 rows")
            baseline = _peak_rss(folder, uri, N_BASELINE)
            ours = _peak_rss(folder, uri, N_ROWS)
    return [
        row(
            NAME,
            f"ema audit of a {N_ROWS:,}-row table (30 features, ExtraTrees target): peak RSS",
            ours=ours / MB,
            baseline=baseline / MB,
            unit="MB",
            baseline_label=f"the same audit of {N_BASELINE:,} rows",
            ratio=ours / baseline,
            ratio_label=f"{N_ROWS:,} / {N_BASELINE:,} rows",
            goal=f"< {GOAL_BYTES / 1e9:g} GB",
            met=ours < GOAL_BYTES,
            note="/usr/bin/time -v, each audit a fresh `ema` process; the calibration model trained by the first",
        )
    ]
