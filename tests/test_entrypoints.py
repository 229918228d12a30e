"""entrypoints/: one thin script per MLproject entry point, never an installed package (DESIGN.md, "Top level")."""

from __future__ import annotations

import ast
import fnmatch
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "entrypoints"
ENTRY_POINTS = yaml.safe_load((ROOT / "MLproject").read_text())["entry_points"]
SCRIPTS = sorted(FOLDER.glob("*.py"))
#: All a script may import: the command group, and sys for its arguments.
SCRIPT_IMPORTS = {"sys", "ema_cli.cli", "ema_cli.cli.run"}


def script_command(path: Path) -> tuple[str, ...]:
    """The `ema` command a script runs (``("grid", "paper")`` for a subcommand): the words of its ``run([...])`` call
    before the script's own arguments (the program, as ``ema`` is)."""
    calls = [
        node
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "run"
    ]
    assert len(calls) == 1, f"{path.name}: expected one run([...]) call, got {len(calls)}"
    (words,) = calls[0].args
    assert isinstance(words, ast.List), ast.dump(words)
    *command, rest = words.elts
    assert command and all(isinstance(word, ast.Constant) for word in command), ast.dump(words)
    assert isinstance(rest, ast.Starred) and ast.unparse(rest) == "*sys.argv[1:]"
    return tuple(word.value for word in command)


def test_every_mlproject_entry_point_runs_its_script():
    for name, spec in ENTRY_POINTS.items():
        words = shlex.split(spec["command"])
        assert words[:2] == ["python", f"entrypoints/{name}.py"], (name, words[:2])
    assert sorted(path.stem for path in SCRIPTS) == sorted(ENTRY_POINTS)


@pytest.mark.parametrize("path", SCRIPTS, ids=[path.name for path in SCRIPTS])
def test_entrypoint_script_is_a_thin_wrapper_over_its_command(path):
    from ema_cli.cli import main

    command, *_ = script_command(path)
    assert command == {"main": "demo"}.get(path.stem, path.stem) and command in main.list_commands(None)
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    assert imported <= SCRIPT_IMPORTS, imported - SCRIPT_IMPORTS


def test_entrypoint_script_runs_the_cli():
    completed = subprocess.run(
        [sys.executable, "entrypoints/train.py", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.startswith("Usage: ema train [OPTIONS]")


def test_an_undeclared_parameter_reaches_its_option_as_mlflow_run_spells_it():
    """``mlflow run -e audit -P threshold_mode=X`` passes ``--threshold_mode X``; the option is ``--threshold-mode``."""
    completed = subprocess.run(
        [sys.executable, "entrypoints/audit.py", "--threshold_mode", "bogus"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 2
    assert "Invalid value for '--threshold-mode': 'bogus' is not one of 'global', 'per-class'" in completed.stderr


def test_entrypoints_is_not_a_package():
    assert not (FOLDER / "__init__.py").exists()
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    assert not any(
        fnmatch.fnmatch(name, pattern) for pattern in find["include"] for name in ("entrypoints", "entrypoints.x")
    )
    from setuptools import find_namespace_packages  # what packages.find runs (namespaces are on by default)

    packages = find_namespace_packages(where=str(ROOT), include=find["include"])
    assert "ema" in packages and "ema_cli" in packages
    assert not [p for p in packages if p.split(".")[0] == "entrypoints"]


def test_entrypoints_is_not_importable_as_an_installed_package(tmp_path):
    """Outside the repository (no PYTHONPATH), the name `entrypoints` is not ours: absent, or PyPI's."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = (
        "import importlib.util; spec = importlib.util.find_spec('entrypoints'); "
        "print(spec and (spec.origin or list(spec.submodule_search_locations)))"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=True
    )
    found = completed.stdout.strip()
    assert found == "None" or str(FOLDER) not in found, found
