"""``spark``: an audit of 1,000,000 images on Spark local[2] against the in-process audit of the same table.

The query is seeded augmentations of the 10,000 embedded MNIST images (each image shifted by
up to 2 pixels in x and y, plus Gaussian noise of std 8 grey levels, clipped), written once
as a Parquet query table (:mod:`ema.data.parquet`) under ``benchmarks/.cache/spark/`` and
reused by later runs. The target is the paper's MLP trained for 20 epochs (enough to overfit, so
that the flags and rho_EMA are not trivial and their equality across engines means something),
calibrated once before the timings.

Each audit runs in a fresh process, as ``ema audit`` would:

- spark: ``ema audit --engine spark --query-table T --membership-out M`` in local[2], the
  session's start-up included (the membership table written to a scratch folder, as on a
  cluster, rather than copied into the run's artifacts);
- in-process: ``ema audit --query-table T``, the same table read whole and scored in this
  process; then, in the same process, :class:`ema.oracle.PyfuncOracle` scoring the images
  alone (the scoring floor, no audit around it).

Driver memory: the spark process's RSS high-water mark (``VmHWM``) at 100,000 and at 1,000,000
images. The Python driver holds the session, the model's UDF and counts; the JVM beside it
(Spark's driver and, in local mode, its executors) is reported too, but in local mode it is
not the driver alone. Run ``python -m benchmarks.spark child MODE N TABLE URI OUT`` for one
process's JSON by hand.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from benchmarks._common import Config, progress, require_module, row, temporary_store
from benchmarks.memory import MB, _peak_rss, _rss_now, _status_kib

NAME = "spark"
#: Query sizes: the throughput at the largest, driver memory at each.
SIZES = (100_000, 1_000_000)
QUICK_SIZES = (20_000, 100_000)
#: Where the augmented tables are written once.
CACHE = Path(__file__).resolve().parent / ".cache" / NAME
THROUGHPUT_GOAL = 0.5
#: The driver's peak may differ by at most this much between the sizes.
MEMORY_GOAL_BYTES = 100 * MB
#: The target's epochs: 20 overfit the training folds, as the paper's 50 do (tests/workflows use the same).
SETUP_EPOCHS = 20
#: Augmentation: largest shift in pixels, noise std in grey levels, seed.
MAX_SHIFT, NOISE_STD, SEED = 2, 8.0, 0


def augmented_chunks(n: int, seed: int = SEED) -> Iterator[object]:
    """``n`` seeded augmentations of the embedded images, 10,000 per chunk (ArraySet), indices 0..n-1."""
    from ema.data.arrays import ArraySet
    from ema.data.embedded import load_mnist_embedded

    base = load_mnist_embedded()
    padded = np.pad(base.x, ((0, 0), (MAX_SHIFT, MAX_SHIFT), (MAX_SHIFT, MAX_SHIFT)))
    grid = np.arange(base.x.shape[1]) + MAX_SHIFT
    for start in range(0, n, len(base)):
        rng = np.random.default_rng([seed, start])
        size = min(len(base), n - start)
        shift = rng.integers(-MAX_SHIFT, MAX_SHIFT + 1, (size, 2))
        rows, cols = grid[None, :] - shift[:, :1], grid[None, :] - shift[:, 1:]
        images = padded[np.arange(size)[:, None, None], rows[:, :, None], cols[:, None, :]]
        noisy = np.clip(images + rng.normal(0.0, NOISE_STD, images.shape), 0, 255).astype(np.uint8)
        yield ArraySet(f"augmented-{start}", noisy, base.y[:size], np.arange(start, start + size, dtype=np.int64))


def cached_table(n: int) -> Path:
    """The table of ``n`` augmented images, written on first use."""
    from ema.data.parquet import PART_FILE, write_table

    path = CACHE / f"mnist-augmented-{n}-seed{SEED}"
    if not (path / PART_FILE).is_file():
        progress(f"spark: writing {n:,} augmented images to {path} (once)")
        write_table(augmented_chunks(n), path)
    return path


def _setup() -> str:
    """Train and register a target, and calibrate it with a first audit; returns its URI."""
    from ema.training.spec import TrainSpec
    from ema.workflows.audit import AuditConfig, audit
    from ema.workflows.train import train_target

    trained = train_target(TrainSpec(epochs=SETUP_EPOCHS), progress=False)
    uri = f"models:/{trained.version.name}/{trained.version.version}"
    audit(AuditConfig(model_uri=uri, query="M6"), progress=False)
    return uri


def _child(mode: str, n: int, table: str, uri: str, out: str) -> dict:
    """One audit in this (fresh) process; its wall time, memory and result."""
    from ema.workflows.audit import AuditConfig, audit

    start = time.perf_counter()
    if mode == "in-process":
        outcome = audit(AuditConfig(model_uri=uri, query_table=table), progress=False)
        seconds, peak = time.perf_counter() - start, _peak_rss()
        return {**_outcome(outcome, seconds, peak), "scoring_seconds": _scoring_only(table, uri)}
    from ema.engines.spark import spark_session

    with spark_session("local[2]") as spark:
        jvm = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
        before = _rss_now()
        config = AuditConfig(model_uri=uri, query_table=table, engine="spark", membership_out=out)
        outcome = audit(config, progress=False)
        seconds, peak = time.perf_counter() - start, _peak_rss()
        jvm_peak = _status_kib("VmHWM", f"/proc/{jvm}/status")
    return {**_outcome(outcome, seconds, peak), "rss_before_audit": before, "jvm_peak": jvm_peak}


def _scoring_only(table: str, uri: str) -> float:
    """Seconds :class:`ema.oracle.PyfuncOracle` takes to score the table's images, read beforehand."""
    from ema.data.parquet import read_table
    from ema.oracle import PyfuncOracle

    images, oracle = read_table(table).x, PyfuncOracle(uri)
    start = time.perf_counter()
    oracle.predict(images)
    return time.perf_counter() - start


def _outcome(outcome, seconds: float, peak: int) -> dict:
    primary = outcome.primary
    return {"seconds": seconds, "peak": peak, "metrics": primary.metrics, "verdict": primary.verdict}


def _run_child(mode: str, n: int, table: Path, uri: str, scratch: Path) -> dict:
    progress(f"spark: {mode} audit of {n:,} images in a fresh process")
    out = scratch / f"membership-{mode}-{n}"
    command = [sys.executable, "-m", "benchmarks.spark", "child", mode, str(n), str(table), uri, str(out)]
    root = str(Path(__file__).resolve().parents[1])  # the child imports benchmarks.spark from any working folder
    path = os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH"))))
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": path},
    )
    if done.returncode != 0:
        raise RuntimeError(f"{mode} audit of {n} images failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(config: Config, *, sizes: tuple[int, ...] | None = None) -> list[dict]:
    """Rows: Spark vs in-process throughput at the largest size, and the Spark driver's peak memory per size."""
    require_module("pyspark", "spark")
    sizes = sizes or (QUICK_SIZES if config.quick else SIZES)
    largest = max(sizes)
    tables = {n: cached_table(n) for n in sizes}
    with temporary_store("ema-bench-spark-") as store:
        progress("spark: training and calibrating the target")
        uri = _setup()
        with tempfile.TemporaryDirectory(prefix="ema-bench-spark-out-", dir=store) as scratch:
            on_spark = {n: _run_child("spark", n, tables[n], uri, Path(scratch)) for n in sizes}
            local = _run_child("in-process", largest, tables[largest], uri, Path(scratch))
    return [*_throughput_rows(largest, on_spark[largest], local), _memory_row(sizes, on_spark)]


def _throughput_rows(n: int, on_spark: dict, local: dict) -> list[dict]:
    same = on_spark["metrics"] == local["metrics"] and on_spark["verdict"] == local["verdict"]
    metrics = on_spark["metrics"]
    spark_rate, audit_rate, scoring_rate = (n / on_spark["seconds"], n / local["seconds"], n / local["scoring_seconds"])
    common = (
        f"Spark wall {on_spark['seconds']:.0f} s (session start-up included), in-process audit "
        f"{local['seconds']:.0f} s, in-process scoring alone {local['scoring_seconds']:.1f} s; "
        f"same metrics and verdict as in-process: {'yes' if same else 'NO'} (rho_ema {metrics['rho_ema']:.4g}, "
        f"flag rate {metrics['flag_rate']:.4f}, {on_spark['verdict']})"
    )
    return [
        row(
            NAME,
            f"audit of {n:,} images: Spark local[2] vs in-process audit",
            ours=spark_rate,
            baseline=audit_rate,
            unit="images/s",
            baseline_label="`ema audit --query-table` in-process, same table, same run",
            ratio=spark_rate / audit_rate,
            ratio_label="Spark / in-process (throughput)",
            goal=f">= {THROUGHPUT_GOAL:g}x",
            met=spark_rate / audit_rate >= THROUGHPUT_GOAL and same,
            note=common,
        ),
        row(
            NAME,
            f"audit of {n:,} images on Spark vs in-process scoring alone",
            ours=spark_rate,
            baseline=scoring_rate,
            unit="images/s",
            baseline_label="PyfuncOracle.predict on the images in memory (no audit), same run",
            ratio=spark_rate / scoring_rate,
            ratio_label="Spark audit / in-process scoring (throughput)",
            goal="recorded",
            note=common,
        ),
    ]


def _memory_row(sizes: tuple[int, ...], on_spark: dict[int, dict]) -> dict:
    small, large = min(sizes), max(sizes)
    growth = on_spark[large]["peak"] - on_spark[small]["peak"]
    jvm = ", ".join(f"{n:,}: {on_spark[n]['jvm_peak'] / MB:,.0f} MB" for n in sizes)
    before = ", ".join(f"{n:,}: {on_spark[n]['rss_before_audit'] / MB:,.0f} MB" for n in sizes)
    walls = ", ".join(f"{n:,}: {on_spark[n]['seconds']:.0f} s" for n in sizes)
    marginal = (large - small) / (on_spark[large]["seconds"] - on_spark[small]["seconds"])
    return row(
        NAME,
        f"Spark driver (Python) peak RSS at {large:,} vs {small:,} images",
        ours=on_spark[large]["peak"] / MB,
        baseline=on_spark[small]["peak"] / MB,
        unit="MB",
        baseline_label=f"the same at {small:,} images",
        ratio=on_spark[large]["peak"] / on_spark[small]["peak"],
        ratio_label=f"peak at {large:,} / at {small:,}",
        goal=f"grows < {MEMORY_GOAL_BYTES // MB} MB",
        met=growth < MEMORY_GOAL_BYTES,
        note=f"growth {growth / MB:+.0f} MB; RSS before the audit (imports, session) {before}; "
        f"JVM peak (driver + local executors) {jvm}; Spark wall {walls}, so {marginal:,.0f} images/s "
        f"for the images beyond the first {small:,} (start-up excluded)",
    )


if __name__ == "__main__" and sys.argv[1:2] == ["child"]:
    mode, n, table, uri, out = sys.argv[2:7]
    print(json.dumps(_child(mode, int(n), table, uri, out)))
