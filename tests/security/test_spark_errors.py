"""`ema audit --engine spark` on hostile tables and a failing model: one line on stderr, a FAILED run, no traceback.

Every case is a real `ema audit` command line, and what is asserted is the whole stderr it
printed, Spark's JVM and Python workers included (they write to the process's stderr, which
click's CliRunner does not see). A JVM takes 10-40 s to start here, so one `python` process
runs the cases one after another through the `ema` command group (:func:`ema_cli.cli.main`,
as the `ema` program does), starting Spark once, and marks where each case begins on stderr.

The target is a tiny pyfunc (models from code) that raises on an image whose first pixel is
255, audited with a supplied calibration model (itself): no training, and the query table
decides whether the executors fail.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import NamedTuple

import mlflow.pyfunc
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from mlflow.models import ModelSignature
from mlflow.tracking import MlflowClient
from mlflow.types import Schema, TensorSpec

from ema.data.arrays import ArraySet
from ema.data.files import write_set
from ema.data.parquet import read_table, write_table
from ema.errors import InputError
from ema.oracle.batching import MIN_BATCH
from tests.conftest import module_store

pytest.importorskip("pyspark", reason="the Spark engine needs pyspark (pip install '.[spark]')")
pytestmark = pytest.mark.slow  # one process, one JVM, six audits: 40-90 s on two shared cores

ROOT = Path(__file__).resolve().parents[2]
#: The model's error on a saturated image, as the executor raises it.
MODEL_ERROR = "RuntimeError: cannot score an image whose first pixel is 255"
FRAGILE_MODEL = f'''
"""Ten-class probabilities from an image's mean pixel; raises on an image whose first pixel is 255."""
import mlflow
import numpy as np


class Fragile(mlflow.pyfunc.PythonModel):
    def predict(self, context, model_input, params=None):
        x = np.asarray(model_input, dtype=np.float64).reshape(len(model_input), -1)
        if (x[:, 0] == 255).any():
            raise RuntimeError("{MODEL_ERROR.partition(": ")[2]}")
        logits = np.outer(x.mean(axis=1) / 255, np.arange(10) - 4.5) * 4
        proba = np.exp(logits - logits.max(axis=1, keepdims=True))
        return (proba / proba.sum(axis=1, keepdims=True)).astype(np.float32)


mlflow.models.set_model(Fragile())
'''
#: Runs each case's `ema` command line in this one process; marks the start and exit code of each on stderr.
DRIVER = textwrap.dedent(
    """
    import json, sys, traceback
    from ema_cli.cli import main

    for name, args in json.loads(sys.argv[1]):
        print(f"@@case {name}", file=sys.stderr, flush=True)
        try:
            main(args, prog_name="ema")
        except SystemExit as exit:
            code = exit.code
        except BaseException:  # what the interpreter would print for an uncaught exception
            traceback.print_exc()
            code = 1
        sys.stderr.flush()
        print(f"@@exit {code}", file=sys.stderr, flush=True)
    """
)
#: What must not reach the screen: Python and Java tracebacks, Py4J, Spark's own log lines.
NOISE = re.compile(r"Traceback|Py4J|py4j|^\s+at org\.apache|^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (ERROR|WARN) ", re.M)


class Case(NamedTuple):
    """One `ema audit` command line's table, stderr and exit code."""

    table: str
    stderr: str
    code: int


def images(n: int, seed: int, *, first_pixel: int | None = None) -> np.ndarray:
    x = np.random.default_rng(seed).integers(0, 200, size=(n, 28, 28), dtype=np.uint8)
    if first_pixel is not None:
        x[:, 0, 0] = first_pixel
    return x


def write_npz(path: Path, x: np.ndarray, seed: int) -> str:
    labels = np.random.default_rng(seed).integers(0, 10, len(x))
    write_set(ArraySet(path.stem, x, labels, np.arange(len(x))), path)
    return str(path)


def table(folder: Path, x: np.ndarray) -> str:
    write_table([ArraySet(folder.name, x, np.arange(len(x)) % 10, np.arange(len(x)))], folder)
    return str(folder)


def not_parquet(folder: Path) -> str:
    folder.mkdir()
    (folder / "part-0.parquet").write_text("label,index,pixels\n1,0,abc\n")
    return str(folder)


def corrupt(folder: Path) -> str:
    """A table whose footer is intact and whose pages are garbage: Spark reads its schema, then fails mid-job."""
    table(folder, images(64, seed=5))
    part = next(folder.glob("*.parquet"))
    data = bytearray(part.read_bytes())
    data[200 : len(data) // 2] = np.random.default_rng(6).integers(0, 256, len(data) // 2 - 200, np.uint8).tobytes()
    part.write_bytes(bytes(data))
    return str(folder)


def wrong_image_size(folder: Path) -> str:
    folder.mkdir()
    pq.write_table(
        pa.table({"label": [1, 2], "index": [0, 1], "pixels": [b"\0" * 100, b"\0" * 100]}), folder / "p.parquet"
    )
    return str(folder)


@pytest.fixture(scope="module")
def cases(tmp_path_factory, template_db):
    """Each case by name, from one `python` process running them all; the store stays configured for the tests."""
    with module_store(tmp_path_factory, template_db, "spark-errors") as uri:
        work = Path.cwd()
        (work / "fragile.py").write_text(FRAGILE_MODEL)
        signature = ModelSignature(
            inputs=Schema([TensorSpec(np.dtype(np.uint8), (-1, 28, 28))]),
            outputs=Schema([TensorSpec(np.dtype(np.float32), (-1, 10))]),
        )
        model = work / "model"
        mlflow.pyfunc.save_model(model, python_model=str(work / "fragile.py"), signature=signature)
        members, nonmembers = (write_npz(work / f"{n}.npz", images(200, s), s) for n, s in (("m", 1), ("n", 2)))
        tables = {
            "not_parquet": not_parquet(work / "not_parquet"),
            "corrupt": corrupt(work / "corrupt"),
            "wrong_image_size": wrong_image_size(work / "wrong_image_size"),
            "model_raises": table(work / "model_raises", images(32, 3, first_pixel=255)),
            "model_raises_verbose": table(work / "model_raises_verbose", images(32, 4, first_pixel=255)),
        }
        common = ["audit", "--engine", "spark", "--model", str(model), "--no-progress", "--reference", nonmembers]
        common += ["--calibration-model", str(model), "--calibration-members", members]
        common += ["--calibration-nonmembers", nonmembers]
        cases = [
            [name, [*common, "--query-table", path, *(["--verbose"] if name.endswith("verbose") else [])]]
            for name, path in tables.items()
        ]
        completed = subprocess.run(
            [sys.executable, "-c", DRIVER, json.dumps(cases)],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": uri},
        )
        assert completed.returncode == 0, completed.stderr[-3000:]
        yield {name: Case(tables[name], *case) for name, case in split_cases(completed.stderr).items()}


def split_cases(stderr: str) -> dict[str, tuple[str, int]]:
    """Case name -> (its stderr, its exit code), from the driver's markers."""
    found = re.findall(r"^@@case (\S+)\n(.*?)^@@exit (\S+)$", stderr, re.M | re.S)
    return {name: (text, int(code) if code.lstrip("-").isdigit() else code) for name, text, code in found}


def one_error_line(case: Case, code: int = 3) -> str:
    """The case exited with ``code`` (3: a refused input), one `Error:` line ending stderr, no noise before it."""
    assert case.code == code, case.stderr
    assert not NOISE.search(case.stderr), case.stderr
    errors = [line for line in case.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and case.stderr.rstrip().endswith(errors[0]), case.stderr
    return errors[0].removeprefix("Error: ")


def test_spark_audit_of_a_file_that_is_not_parquet_is_one_line(cases):
    line, path = one_error_line(cases["not_parquet"]), cases["not_parquet"].table
    with pytest.raises(InputError) as in_process:
        read_table(path)
    prefix = f"could not read query table {path} as Parquet: "
    assert str(in_process.value).startswith(prefix)  # the in-process engine's words, Spark's reason
    assert re.fullmatch(re.escape(prefix) + r"file:\S+/part-0\.parquet is not a Parquet file\. Expected magic .*", line)


def test_spark_audit_of_a_corrupt_parquet_file_is_one_line(cases):
    line, path = one_error_line(cases["corrupt"]), cases["corrupt"].table
    assert re.fullmatch(re.escape(f"could not read query table {path} as Parquet: ") + r"file:\S+\.parquet: .+", line)


def test_spark_audit_of_images_of_another_size_says_what_the_in_process_engine_says(cases):
    line = one_error_line(cases["wrong_image_size"])
    with pytest.raises(InputError) as in_process:
        read_table(cases["wrong_image_size"].table)
    assert line == str(in_process.value)  # the same table, the same message
    assert line.endswith("expected `pixels` of 784 bytes (a 28x28 uint8 image), got values of [100] bytes")


def test_spark_audit_whose_model_raises_on_the_executors_is_one_line(cases):
    # the model's own failure, as the in-process oracle words and classes it: ModelAccessError, retryable, exit 4;
    # the first batch is the paced oracle's smallest, the model's pace not yet known
    line = one_error_line(cases["model_raises"], code=4)
    pattern = rf"model '\S+' failed on a batch of {MIN_BATCH} inputs of shape \(28, 28\): {MODEL_ERROR}"
    assert re.fullmatch(pattern, line)


def test_spark_audit_verbose_prints_the_executors_traceback_then_the_line(cases):
    stderr = cases["model_raises_verbose"].stderr
    assert cases["model_raises_verbose"].code == 4
    assert stderr.rstrip().endswith(f"inputs of shape (28, 28): {MODEL_ERROR}")
    executor = stderr[stderr.index("An exception was thrown from the Python worker") :]
    assert "Traceback (most recent call last)" in executor and "fragile.py" in executor, stderr
    assert f"{MODEL_ERROR}\n" in executor


def test_each_failed_spark_audit_leaves_one_failed_run_and_registers_nothing(cases):
    client = MlflowClient()
    runs = client.search_runs([experiment.experiment_id for experiment in client.search_experiments()])
    assert sorted(run.info.status for run in runs) == ["FAILED"] * len(cases)
    assert client.search_registered_models() == []
