"""A store with a quickly trained, registered target, shared by the tests of a module."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ema.training.spec import TrainSpec
from ema.workflows.train import train_target
from tests.conftest import module_store

ROOT = Path(__file__).resolve().parents[2]

#: 20 epochs (~4 s) overfit the 5,000 training images, as the paper's 50 do.
QUICK_SPEC = TrainSpec(epochs=20)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, template_db):
    """(store URI, TrainOutcome) for a target trained with QUICK_SPEC; cwd and MLFLOW_TRACKING_URI restored after."""
    with module_store(tmp_path_factory, template_db) as uri:
        yield uri, train_target(QUICK_SPEC, progress=False)


def probe_output(probe: str, *args: str) -> str:
    """The stdout of ``python -c probe ARGS`` (this checkout importable, as a plug-in's code), whitespace collapsed.

    For tests that register a row in a table before the CLI is imported, then run ``ema`` in one process.
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
    done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return " ".join(done.stdout.split())


#: A seed long enough that finding it in the store's bytes means the key leaked.
MARK_SEED = 918273645546372819


@pytest.fixture(scope="module")
def marked(tmp_path_factory, template_db):
    """A store with a target trained with a marked copy of M1 in place of the fold (``ema mark``, seeded).

    Yields a dict: ``uri`` (the store), ``root`` (its folder), ``outcome`` (its TrainOutcome), ``key``, ``marked``
    and ``clean`` (paths).
    """
    from click.testing import CliRunner

    from ema.data import make_splits
    from ema.data.files import write_set
    from ema_cli.cli import main

    with module_store(tmp_path_factory, template_db) as uri:
        folder = Path.cwd()
        clean = write_set(make_splits(0).folds[0], folder / "M1.npz")
        args = ["mark", "--in", str(clean), "--out", "marked.npz", "--key", "key.json", "--seed", str(MARK_SEED)]
        done = CliRunner().invoke(main, args)
        assert done.exit_code == 0, done.output
        outcome = train_target(QUICK_SPEC, folds={"M1": folder / "marked.npz"}, progress=False)
        yield {
            "uri": uri,
            "root": folder,
            "outcome": outcome,
            "key": folder / "key.json",
            "marked": folder / "marked.npz",
            "clean": clean,
        }
