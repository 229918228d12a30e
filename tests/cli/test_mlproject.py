"""MLproject's entry points run their entrypoints/ script, which calls the CLI with options that exist."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest
import yaml

from ema_cli.cli import main
from tests.test_entrypoints import script_command

ROOT = Path(__file__).resolve().parents[2]
MLPROJECT = yaml.safe_load((ROOT / "MLproject").read_text())
ENTRY_POINTS = MLPROJECT["entry_points"]


def command_options(command: click.Command) -> set[str]:
    return {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}


def cli_command(entry_point: str) -> tuple[click.Command, list[str]]:
    """The `ema` command an entry point runs (through its script), and the words MLproject passes it."""
    words = shlex.split(ENTRY_POINTS[entry_point]["command"])
    assert words[:2] == ["python", f"entrypoints/{entry_point}.py"], words[:2]
    return main.get_command(None, script_command(ROOT / words[1])), words[2:]


@pytest.mark.parametrize("entry_point", sorted(ENTRY_POINTS))
def test_mlproject_entry_point_matches_cli(entry_point):
    spec = ENTRY_POINTS[entry_point]
    command, arguments = cli_command(entry_point)
    assert command.name == {"main": "demo"}.get(entry_point, entry_point)
    flags = [w for w in arguments if w.startswith("--")]
    assert set(flags) <= command_options(command), set(flags) - command_options(command)
    used = set(re.findall(r"\{(\w+)\}", spec["command"]))
    assert used == set(spec.get("parameters", {}))


@pytest.mark.parametrize("entry_point", sorted(ENTRY_POINTS))
def test_mlproject_defaults_match_cli_defaults(entry_point):
    spec = ENTRY_POINTS[entry_point]
    command, arguments = cli_command(entry_point)
    for flag, value in zip(arguments, arguments[1:]):
        match = re.fullmatch(r"\{(\w+)\}", value)
        if not flag.startswith("--") or not match:
            continue
        param = next(p for p in command.params if flag in p.opts)
        if not isinstance(param.default, (str, int, float)):
            continue  # no CLI default (e.g. --query): MLproject supplies one
        default = spec["parameters"][match[1]]["default"]
        assert str(param.default) == str(default) or float(param.default) == float(default), (
            flag,
            param.default,
            default,
        )
