"""Shared fixtures: a real sqlite MLflow store per test (migrated once, then copied)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import mlflow
import pytest
from mlflow.tracking import MlflowClient

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


#: The repository's folder, where a test run starts.
REPOSITORY = Path(__file__).resolve().parents[1]
#: What MLflow writes into the working directory when no store was configured (ema's default, MLflow's own).
DEFAULT_STORES = ("mlflow.db", "mlruns")


@pytest.fixture(autouse=True)
def no_store_left_in_the_repository() -> Iterator[None]:
    """Fail a test that left a default store in the repository's folder (it forgot ``store``), and remove that store.

    Such a test reads and writes whatever store the repository's folder holds, and the next test run
    finds its runs there.
    """
    before = {name for name in DEFAULT_STORES if (REPOSITORY / name).exists()}
    yield
    left = [name for name in DEFAULT_STORES if name not in before and (REPOSITORY / name).exists()]
    for name in left:
        path = REPOSITORY / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    if left:
        pytest.fail(
            f"expected no store in the repository's folder {REPOSITORY}, got {', '.join(left)} (removed): "
            "the test needs the `store` fixture",
            pytrace=False,
        )


@pytest.fixture
def immutable() -> Iterator[Callable[[Path], None]]:
    """Make a file or folder unwritable even for root (the immutable attribute) until the test ends; the test is
    skipped where ``chattr +i`` cannot set it (another file system, no privilege)."""
    made: list[Path] = []

    def make(path: Path) -> None:
        if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
            pytest.skip(f"chattr +i {path} is not possible here")
        made.append(path)

    yield make
    for path in made:
        subprocess.run(["chattr", "-i", str(path)], check=True)


@pytest.fixture(scope="session")
def template_db(tmp_path_factory) -> Path:
    """An empty, migrated MLflow sqlite database (migrations take ~1 s; copies take ms)."""
    path = tmp_path_factory.mktemp("template") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments()
    return path


def open_store(directory: Path, template: Path) -> str:
    """Copy the template DB into ``directory``, point MLflow at it and work from there."""
    shutil.copy(template, directory / "mlflow.db")
    uri = f"sqlite:///{directory / 'mlflow.db'}"
    os.environ["MLFLOW_TRACKING_URI"] = uri
    os.chdir(directory)
    mlflow.set_tracking_uri(uri)
    return uri


@pytest.fixture
def store(tmp_path, template_db, monkeypatch) -> str:
    """A fresh store in ``tmp_path`` (the working directory for the test)."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "")
    monkeypatch.chdir(tmp_path)
    uri = open_store(tmp_path, template_db)
    yield uri
    while mlflow.active_run():
        mlflow.end_run()


@contextmanager
def module_store(tmp_path_factory, template: Path, name: str = "store") -> Iterator[str]:
    """A store for a whole test module, configured; cwd and MLFLOW_TRACKING_URI restored after."""
    from ema.tracking.runs import configure

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", "")
        patch.chdir(os.getcwd())
        uri = open_store(tmp_path_factory.mktemp(name), template)
        configure()
        yield uri
        while mlflow.active_run():
            mlflow.end_run()


@pytest.fixture
def one_thread():
    """One torch thread in this process, hence in the grid workers it starts (they copy it): two fill two cores."""
    from ema.training.threads import torch_threads, use_threads

    before = torch_threads()
    use_threads(1)
    yield
    use_threads(before)
