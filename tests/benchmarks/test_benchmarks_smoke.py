"""Smoke tests of the benchmark suite: shapes of the rows and agreement with the reference loop.

No wall-clock assertions: timings belong in benchmarks/RESULTS.md, not in tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from benchmarks import MEASUREMENTS
from benchmarks.__main__ import markdown, parse_args, text_table, write_atomically
from benchmarks._common import ROW_KEYS, Config
from benchmarks.thresholds import balanced_accuracy_at, loop_threshold, make_scores, measure

ROOT = Path(__file__).resolve().parents[2]
TINY = Config(quick=True, repeats=3)


def test_thresholds_measure_rows_have_the_expected_keys():
    rows = measure(TINY, sizes=(200, 1000), big_size=None)
    assert [r["n"] for r in rows] == [200, 1000]
    for r in rows:
        assert set(ROW_KEYS) <= set(r)
        assert r["benchmark"] == "thresholds"
        assert r["unit"] == "s"
        assert r["ours"] > 0 and r["baseline"] > 0 and r["ratio"] > 0


def test_thresholds_measure_ours_reaches_the_loops_balanced_accuracy():
    for r in measure(TINY, sizes=(200, 1000), big_size=None):
        assert r["loop_exhaustive"]
        assert r["ba_match"]
        assert r["ba_ours"] == pytest.approx(r["ba_loop"], abs=1e-12)
        # What select_threshold reports is what its threshold achieves.
        assert r["ba_reported"] == pytest.approx(r["ba_ours"], abs=1e-12)


def test_thresholds_measure_extrapolates_above_the_full_loop_limit():
    (r,) = measure(TINY, sizes=(2000,), big_size=None, full_loop_max=100)
    assert not r["loop_exhaustive"] and r["baseline_extrapolated"]
    assert "EXTRAPOLATED" in r["note"]
    assert r["ba_ours"] >= r["ba_loop"] - 1e-12


@pytest.mark.parametrize("seed", range(5))
def test_loop_threshold_agrees_with_select_threshold_with_ties(seed):
    from ema.thresholds import select_threshold

    rng = np.random.default_rng(seed)
    members, nonmembers = np.round(rng.normal(0.5, 1, 150), 1), np.round(rng.normal(0, 1, 170), 1)
    _, ba_loop = loop_threshold(members, nonmembers)
    result = select_threshold(members, nonmembers)
    assert balanced_accuracy_at(members, nonmembers, result.threshold) == pytest.approx(ba_loop, abs=1e-12)


def test_make_scores_has_ties_and_the_requested_size():
    members, nonmembers = make_scores(1001)
    assert members.size + nonmembers.size == 1001
    assert np.unique(np.concatenate([members, nonmembers])).size < 1001


def test_results_markdown_and_table_from_rows(tmp_path):
    rows = measure(TINY, sizes=(200,), big_size=None)
    rows.append({"benchmark": "thresholds", "error": "Traceback ...\nRuntimeError: boom"})
    args = parse_args(["--quick", "--only", "thresholds", "--output", str(tmp_path / "RESULTS.md")])
    info = {"date": "today", "cpu": "test cpu", "threads": "2"}
    text = markdown(rows, info, args, {"thresholds": 1.0})
    write_atomically(args.output, text)
    written = args.output.read_text()
    assert written == text
    for expected in (
        "## Machine",
        "test cpu",
        "## Summary",
        "## thresholds",
        "n=200",
        "ERROR",
        "python -m benchmarks --quick",
    ):
        assert expected in written
    assert not list(tmp_path.glob("*.partial"))
    table = text_table(rows)
    assert "loop / ours" in table and "ERROR" in table


def test_text_tables_scores_both_tables_through_their_pipelines():
    from benchmarks.text_tables import measure as text_tables

    (r,) = text_tables(TINY, n_rows=2_000)
    assert set(ROW_KEYS) <= set(r) and r["benchmark"] == "text_tables"
    assert r["ours"] > 0 and r["baseline"] > 0 and r["ratio"] == pytest.approx(r["ours"] / r["baseline"])
    assert "2,000 rows with 2 text categories" in r["case"]


def test_parse_args_refuses_unknown_measurements():
    assert parse_args([]).only == list(MEASUREMENTS)
    assert parse_args(["--only", "memory,thresholds"]).only == ["thresholds", "memory"]
    with pytest.raises(SystemExit):
        parse_args(["--only", "nope"])


@pytest.mark.slow
def test_python_m_benchmarks_quick_thresholds_writes_results(tmp_path):
    output = tmp_path / "RESULTS.md"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--only", "thresholds", "--output", str(output)],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    text = output.read_text()
    assert "## Machine" in text and "torch" in text and "n=100k" in text and "n=1M" in text
    assert "thresholds" in done.stdout


def test_spark_augmented_chunks_are_seeded_shifted_noisy_images():
    from benchmarks.spark import augmented_chunks
    from ema.data.embedded import load_mnist_embedded

    first, second = list(augmented_chunks(12_000)), list(augmented_chunks(12_000))
    assert [len(c) for c in first] == [10_000, 2_000]
    np.testing.assert_array_equal(first[1].x, second[1].x)
    np.testing.assert_array_equal(first[1].index, np.arange(10_000, 12_000))
    base = load_mnist_embedded()
    np.testing.assert_array_equal(first[0].y, base.y)
    difference = np.abs(first[0].x.astype(int) - base.x.astype(int)).mean()
    assert 2 < difference < 60


def test_training_measure_runs_on_a_tiny_set():
    from benchmarks.training import measure as measure_training

    rows = measure_training(TINY, n_images=128, epochs=1, repeats=1)
    assert rows and all(r["benchmark"] == "training" and r["ours"] > 0 and r["baseline"] > 0 for r in rows)


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads /proc (Linux)")
def test_spark_cpu_counts_the_cpu_of_the_processes_below_a_root():
    from benchmarks.spark_cpu import _cpu_below

    burner = subprocess.Popen([sys.executable, "-c", "import time; sum(range(10**8)); time.sleep(60)"])
    try:
        deadline = time.monotonic() + 30
        while (below := _cpu_below(os.getpid())[1]) < 0.5 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert below >= 0.5
        assert _cpu_below(burner.pid)[1] == 0.0
    finally:
        burner.kill()
        burner.wait()


def test_gpu_measure_compares_a_device_with_the_cpu():
    """The GPU rows' code path, with the CPU standing in for the GPU (CI has none); one small CNN workload."""
    from benchmarks.gpu import SIZE, Workload, image_side
    from benchmarks.gpu import measure as measure_gpu

    rows = measure_gpu(TINY, workloads=(Workload("cnn", 128, 64, 256, 128),), device="cpu")
    side = image_side("cnn")
    assert [r["case"] for r in rows] == [f"cnn {side}x{side} training", f"cnn {side}x{side} scoring"]
    for r in rows:
        assert set(ROW_KEYS) <= set(r) and r["ours"] > 0 and r["baseline"] > 0 and r["ratio"] > 0
        assert ("does not take 64x64 yet" in r["note"]) == (side != SIZE)


def test_gpu_measure_trains_a_named_recipe_at_the_side_asked():
    """The paper's medical workload: ResNet-18 with its recipe's optimizer, at the side asked (small here)."""
    from benchmarks.gpu import Workload
    from benchmarks.gpu import measure as measure_gpu

    medical = Workload("resnet18", 8, 4, 8, 4, side=32, recipe="paper-medical")
    assert (medical.spec().optimizer, medical.spec().epochs, medical.spec().lr) == ("adam", 1, 2e-5)
    rows = measure_gpu(TINY, workloads=(medical,), device="cpu")
    assert [r["case"] for r in rows] == [
        "resnet18 (paper-medical) 32x32 training",
        "resnet18 (paper-medical) 32x32 scoring",
    ]
    assert "one epoch of fit (adam, batch 64)" in rows[0]["note"] and "does not take" not in rows[0]["note"]


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="measures on a machine with CUDA")
def test_gpu_measure_without_cuda_is_skipped_saying_why():
    from benchmarks._common import Skipped
    from benchmarks.gpu import measure as measure_gpu

    with pytest.raises(Skipped, match="no CUDA device on this machine"):
        measure_gpu(TINY)
