"""Oversized recipes are refused before anything is built, and --timeout ends the whole command FAILED.

Each refusal runs `ema` in a child process under an address-space limit (so that old code
which tried the allocation fails here instead of exhausting the machine) and reads the
child's peak RSS, which must stay far below what the recipe would have allocated.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from ema.tracking import keys
from ema_cli.cli import main

ROOT = Path(__file__).resolve().parents[2]
#: The child's address-space limit: ample for the imports, far below any oversized recipe.
CHILD_ADDRESS_SPACE = 8 << 30
#: Peak RSS (KiB) a refusal may reach: the imports (mlflow, torch, scikit-learn) and the data, under 2 GiB.
REFUSAL_PEAK_KIB = 2 << 20
#: Runs `ema` with an address-space limit, prints its peak RSS in KiB on the last line.
CHILD = """
import resource, subprocess, sys
limit = int(sys.argv[1])
def cap():
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
done = subprocess.run([sys.executable, "-c", "from ema_cli.cli import run; run()", *sys.argv[2:]], preexec_fn=cap)
print(done.returncode)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""

OVERSIZED = {
    "torch hidden 65536 x 3": {"framework": "torch", "arch": "mlp", "hidden": [65536, 65536, 65536]},
    "sklearn hidden_layer_sizes [200000, 200000]": {
        "framework": "sklearn",
        "estimator": "MLPClassifier",
        "params": {"hidden_layer_sizes": [200000, 200000]},
    },
    "sklearn n_estimators 1e9": {
        "framework": "sklearn",
        "estimator": "RandomForestClassifier",
        "params": {"n_estimators": 1_000_000_000},
    },
}


def run_ema(*args: str) -> tuple[int, str, int]:
    """Run `ema ARGS` in a capped child: its exit code, its stderr and stdout, its peak RSS in KiB."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_DISABLE_TELEMETRY": "true"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(CHILD_ADDRESS_SPACE), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    *_, code, peak = done.stdout.splitlines()
    return int(code), done.stderr + "\n".join(done.stdout.splitlines()[:-2]), int(peak)


def error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.strip() and " INFO " not in line]


def plant(name: str, recipe: dict | None, tmp_path: Path) -> str:
    """A registered version with no model files, whose ``ema.recipe`` tag is ``recipe``; its URI."""
    client = MlflowClient()
    client.create_registered_model(name)
    tags = {keys.TAG_RECIPE: json.dumps(recipe)} if recipe is not None else {}
    client.create_model_version(name, source=(tmp_path / "model").as_uri(), tags=tags)
    return f"models:/{name}/1"


def assert_failed_and_nothing_registered(names: set[str]) -> None:
    client = MlflowClient()
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert runs and {run.info.status for run in runs} == {"FAILED"}, [(r.info.run_name, r.info.status) for r in runs]
    assert {model.name for model in client.search_registered_models()} == names


def assert_refused(code: int, output: str, peak_kib: int, parameter: str) -> None:
    errors = error_lines(output)
    assert code == 3 and "Traceback" not in output, output[-2000:]
    assert len(errors) == 1, errors
    assert errors[0].startswith("Error: expected a recipe of at most 500,000,000 parameters (--max-params), got")
    assert parameter in errors[0], errors[0]
    assert peak_kib < REFUSAL_PEAK_KIB, f"peak RSS {peak_kib} KiB"


@pytest.mark.parametrize("case", sorted(OVERSIZED))
@pytest.mark.parametrize("route", ["recipe file", "registry tag"])
def test_calibrate_refuses_oversized_recipe_before_allocating(store, tmp_path, case, route):
    recipe = OVERSIZED[case]
    if route == "recipe file":
        path = tmp_path / "recipe.json"
        path.write_text(json.dumps(recipe))
        args = ["--model", plant("planted", None, tmp_path), "--recipe", str(path)]
    else:
        args = ["--model", plant("planted", recipe, tmp_path)]
    code, output, peak = run_ema("calibrate", *args, "--no-progress")
    assert_refused(code, output, peak, case.split()[1])
    assert_failed_and_nothing_registered({"planted"})


def test_train_refuses_oversized_hidden_widths_before_allocating(store):
    code, output, peak = run_ema("train", "--hidden", "65536,65536,65536", "--no-progress")
    assert_refused(code, output, peak, "hidden [65536, 65536, 65536]")
    assert_failed_and_nothing_registered(set())


def test_max_params_raises_and_lowers_the_limit(store):
    result = CliRunner().invoke(main, ["train", "--epochs", "1", "--max-params", "1000", "--no-progress"])
    assert result.exit_code == 3 and "Traceback" not in result.output
    assert "expected a recipe of at most 1,000 parameters (--max-params), got hidden [256, 256]" in result.output
    assert_failed_and_nothing_registered(set())


@pytest.mark.parametrize(
    "recipe",
    [
        {"framework": "torch", "arch": "mlp", "hidden": [32], "epochs": 100_000},
        {
            "framework": "sklearn",
            "estimator": "GradientBoostingClassifier",
            "params": {"n_estimators": 100_000, "max_depth": 1},
        },
    ],
    ids=["torch epochs 100000", "sklearn n_estimators 100000"],
)
def test_timeout_ends_training_with_a_failed_run_and_nothing_registered(store, tmp_path, recipe):
    path = tmp_path / "recipe.json"
    path.write_text(json.dumps(recipe))
    model = plant("planted", None, tmp_path)
    result = CliRunner().invoke(
        main, ["calibrate", "--model", model, "--recipe", str(path), "--timeout", "4", "--no-progress"]
    )
    assert result.exit_code == 124 and "Traceback" not in result.output, result.output
    errors = error_lines(result.output)
    assert len(errors) == 1 and errors[0].startswith("Error: expected the command to finish within --timeout 4 s")
    assert "train" in errors[0]
    assert_failed_and_nothing_registered({"planted"})
