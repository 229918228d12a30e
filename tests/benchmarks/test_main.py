"""``python -m benchmarks``: a measurement whose extra (or device) is missing is skipped in its row; the others still
run; with nothing measured, the recorded results stay as they are."""

from __future__ import annotations

import sys

import pytest

import benchmarks.gpu
import benchmarks.thresholds
from benchmarks.__main__ import RESULTS, main, parse_args
from benchmarks._common import row


@pytest.fixture
def base_install(monkeypatch):
    """No psycopg2 and no pyspark (``sys.modules[name] = None`` makes their import fail), nothing measured for real."""
    monkeypatch.setitem(sys.modules, "psycopg2", None)
    monkeypatch.setitem(sys.modules, "pyspark", None)
    for variable in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.setenv(variable, "1")  # main sets them: restored afterwards
    fake = row("thresholds", "n=10", ours=1.0, baseline=2.0, unit="s", baseline_label="b", ratio=2.0, ratio_label="x")
    monkeypatch.setattr(benchmarks.thresholds, "measure", lambda config, **kwargs: [fake])


def test_main_skips_the_measurements_whose_extra_is_missing_and_writes_the_others(base_install, tmp_path, capsys):
    output = tmp_path / "RESULTS.md"
    only = "thresholds,grid_workers,spark"
    assert main(["--quick", "--no-profile", "--only", only, "--output", str(output)]) == 0
    printed = capsys.readouterr().out
    results = output.read_text()
    assert "| thresholds | n=10 | 1 s | 2 s |" in results
    server = "psycopg2 is not installed (the [server] extra: pip install -e '.[server]')"
    spark = "pyspark is not installed (the [spark] extra: pip install -e '.[spark]')"
    for name, reason in (("grid_workers", server), ("spark", spark)):
        assert f"| {name} | {reason} | - | - | - | - | skipped |" in results
        assert f"| {reason} | - | - | - | - | skipped | - | not measured here |" in results
        assert f"{name} / : {reason}" in printed
    assert "ERROR" not in results and "Traceback" not in results


@pytest.fixture
def no_cuda(monkeypatch, tmp_path):
    """A machine without CUDA, whose recorded RESULTS_GPU.md is a file under ``tmp_path``."""
    recorded = tmp_path / "RESULTS_GPU.md"
    recorded.write_text("| gpu | resnet18 (paper-medical) 224x224 scoring | 2,890 images/s |\n")
    monkeypatch.setattr(benchmarks.gpu, "RESULTS_GPU", recorded)
    monkeypatch.setattr(benchmarks.gpu, "cuda_device", lambda: None)
    return recorded


def test_gpu_main_without_cuda_leaves_the_recorded_results_alone(base_install, no_cuda, capsys):
    """`python -m benchmarks.gpu` on a machine without CUDA rewrote RESULTS_GPU.md with a "no CUDA device" row."""
    before = no_cuda.read_text()
    assert benchmarks.gpu.main(["--threads", "2"]) == 0
    assert no_cuda.read_text() == before
    err = capsys.readouterr().err
    assert "no CUDA device on this machine" in err and f"nothing was measured: {no_cuda} left as it is" in err


def test_main_without_cuda_writes_nothing_where_only_gpu_was_asked(base_install, no_cuda, tmp_path):
    output = tmp_path / "elsewhere.md"
    assert main(["--quick", "--no-profile", "--only", "gpu", "--output", str(output)]) == 0
    assert not output.exists()


def test_main_without_cuda_skips_gpu_among_the_others_and_keeps_results_gpu(base_install, no_cuda, tmp_path):
    """The aggregate runner writes RESULTS.md (here --output), with gpu's row skipped, and never RESULTS_GPU.md."""
    before = no_cuda.read_text()
    output = tmp_path / "RESULTS.md"
    assert parse_args([]).output == RESULTS != benchmarks.gpu.RESULTS_GPU
    assert main(["--quick", "--no-profile", "--only", "thresholds,gpu", "--output", str(output)]) == 0
    assert f"| gpu | {benchmarks.gpu.NO_CUDA} | - | - | - | - | skipped |" in output.read_text()
    assert no_cuda.read_text() == before
