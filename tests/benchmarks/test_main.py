"""``python -m benchmarks``: a measurement whose extra is missing is skipped in its row; the others still run."""

from __future__ import annotations

import sys

import pytest

import benchmarks.thresholds
from benchmarks.__main__ import main
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
