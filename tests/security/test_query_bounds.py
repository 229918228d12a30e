"""Sets too large to hold, refused from their headers; unlearning that destroys the model, refused before registering.

The zip bomb is the issue's case: a 1.5 MB ``.npz`` declaring 2,000,000 images of 28 x 28
(1.5 GB once inflated). It is refused in one line from its headers, with little memory,
and the run it opened is FAILED.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from ema.data.limits import DEFAULT_MAX_QUERY
from ema.data.parquet import read_table, write_table
from ema.data.presets import load_splits
from ema.errors import InputError
from ema.tracking import keys
from ema.training.spec import TrainSpec
from ema.workflows.train import train_target
from ema_cli.cli import main
from tests.conftest import module_store

ROOT = Path(__file__).resolve().parents[2]
BOMB_IMAGES = 2_000_000
#: Deflate bytes are written for this many zeros at a time.
ZERO_CHUNK = bytes(1 << 24)
#: Peak memory (KiB) of a refusal: the `ema` process's own imports, far from the 1.5 GB the bomb inflates to.
REFUSAL_PEAK_KIB = 1_000_000


class _ZeroDeflater:
    """zlib's deflate, except that a whole chunk of zeros gets the bytes deflate gave it once (1.5 GB in a second).

    Every call ends in a full flush, which empties deflate's window: each piece of the stream
    stands alone, so repeating one is exactly what deflating the same bytes again would write.
    """

    def __init__(self) -> None:
        self._deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
        self._zeros = self.compress(ZERO_CHUNK)

    def compress(self, data: bytes) -> bytes:
        if data is ZERO_CHUNK and hasattr(self, "_zeros"):
            return self._zeros
        return self._deflate.compress(data) + self._deflate.flush(zlib.Z_FULL_FLUSH)

    def flush(self) -> bytes:
        return self._deflate.flush(zlib.Z_FINISH)


def _write_zero_member(archive: zipfile.ZipFile, name: str, shape: tuple[int, ...], dtype: str) -> None:
    with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
        header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": shape}
        np.lib.format.write_array_header_1_0(member, header)
        left = int(np.prod(shape)) * np.dtype(dtype).itemsize
        while left >= len(ZERO_CHUNK):
            member.write(ZERO_CHUNK)
            left -= len(ZERO_CHUNK)
        member.write(bytes(left))


@pytest.fixture(scope="module")
def bomb(tmp_path_factory):
    """The issue's .npz: 2,000,000 blank 28 x 28 images and their labels, 1.5 MB that numpy would read as 1.5 GB."""
    path = tmp_path_factory.mktemp("bomb") / "bomb.npz"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(zipfile, "_get_compressor", lambda *args: _ZeroDeflater())
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
            _write_zero_member(archive, "x", (BOMB_IMAGES, 28, 28), "u1")
            _write_zero_member(archive, "y", (BOMB_IMAGES,), "<i8")
    assert path.stat().st_size < 2_000_000
    return path


@pytest.fixture(scope="module")
def target(tmp_path_factory, template_db):
    """A registered target trained for 2 epochs (a second), in the module's store."""
    with module_store(tmp_path_factory, template_db) as uri:
        yield uri, train_target(TrainSpec(epochs=2), progress=False).version


def run_ema(*args: str) -> tuple[subprocess.CompletedProcess, int]:
    """Run ``ema ARGS`` in a child of a fresh Python, and return it with the peak RSS (KiB) of that child alone."""
    measure = (
        "import resource, subprocess, sys\n"
        "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "sys.stdout.write(done.stdout + '\\n' + str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n"
        "sys.stderr.write(done.stderr)\n"
        "sys.exit(done.returncode)\n"
    )
    ema = [sys.executable, "-c", "from ema_cli.cli import run; run()", *args]
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", measure, *ema], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": path}
    )
    *_, peak = done.stdout.split("\n")
    return done, int(peak)


def runs_by_status() -> dict[str, int]:
    client = MlflowClient()
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    return {status: sum(r.info.status == status for r in runs) for status in ("FAILED", "RUNNING")}


def assert_bomb_refused(done: subprocess.CompletedProcess, peak_kib: int) -> None:
    assert done.returncode == 3, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(errors) == 1, done.stderr
    assert "bomb.npz: expected at most 1,000,000 images, got 2,000,000" in errors[0]
    assert "--max-query 2000000" in errors[0]
    assert peak_kib < REFUSAL_PEAK_KIB, f"the refusal peaked at {peak_kib} KiB"


def test_a_zip_bomb_query_file_is_refused_from_its_headers_with_little_memory(target, bomb, tmp_path):
    """`ema audit --query-file`: over HTTP to a closed port, so that only reading the query could cost memory."""
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"arch": "mlp"}))
    before = runs_by_status()
    done, peak = run_ema(
        "audit", "--model-url", "http://127.0.0.1:9/invocations", "--recipe", str(recipe), "--query-file", str(bomb)
    )
    assert_bomb_refused(done, peak)
    after = runs_by_status()
    assert after["FAILED"] == before["FAILED"] + 1 and after["RUNNING"] == 0


def test_a_zip_bomb_forget_set_is_refused_before_unlearning(target, bomb):
    _, version = target
    versions = len(MlflowClient().search_model_versions(f"name = '{version.name}'"))
    done, peak = run_ema("unlearn", "--model", version.uri, "--forget", str(bomb), "--method", "finetune")
    assert_bomb_refused(done, peak)
    assert len(MlflowClient().search_model_versions(f"name = '{version.name}'")) == versions
    assert runs_by_status()["RUNNING"] == 0


def test_max_query_is_the_default_limit_of_every_reader():
    assert DEFAULT_MAX_QUERY == 1_000_000 < BOMB_IMAGES


def test_a_query_table_is_refused_from_its_metadata_row_count(tmp_path):
    table = write_table([load_splits().query("M1")], tmp_path / "table")
    with pytest.raises(InputError, match=r"table: expected at most 10 rows, got 1,000 .*--max-query 1000"):
        read_table(table, max_images=10)
    assert len(read_table(table, max_images=1000)) == 1000


def test_unlearning_that_destroys_the_model_registers_nothing(target):
    """The issue's `ema unlearn --method neggrad --lr 1e6`: refused below chance + margin, unless asked to accept it."""
    _, version = target
    client = MlflowClient()
    before, failed = len(client.search_model_versions(f"name = '{version.name}'")), runs_by_status()["FAILED"]
    command = ["unlearn", "--model", version.uri, "--forget", "M1", "--method", "neggrad", "--lr", "1e6"]
    result = CliRunner().invoke(main, [*command, "--epochs", "1", "--no-progress"])
    assert result.exit_code == 1, result.output
    (line,) = result.output.strip().splitlines()
    assert re.match(
        r"Error: expected an accuracy on the retained data of at least 0\.3\d+ \(chance 0\.1\d+ \+ 0\.25\)", line
    )
    assert "after neggrad (lr 1e+06, epochs 1)" in line and "nothing was registered" in line
    assert line.endswith("the model lost what it learned; lower --lr or --epochs, or pass --min-retain-accuracy to "
                         "accept it")  # fmt: skip
    assert len(client.search_model_versions(f"name = '{version.name}'")) == before
    assert keys.UNLEARNED_ALIAS not in client.get_registered_model(version.name).aliases
    assert runs_by_status() == {"FAILED": failed + 1, "RUNNING": 0}
    accepted = CliRunner().invoke(main, [*command, "--epochs", "1", "--no-progress", "--min-retain-accuracy", "0"])
    assert accepted.exit_code == 0, accepted.output
    assert keys.UNLEARNED_ALIAS in client.get_registered_model(version.name).aliases
    own_floor = CliRunner().invoke(main, [*command, "--epochs", "1", "--no-progress", "--min-retain-accuracy", "1"])
    assert own_floor.exit_code == 1  # a floor the user set: no talk of a model that lost what it learned
    assert own_floor.output.strip().endswith("nothing was registered; lower --min-retain-accuracy to accept it")
