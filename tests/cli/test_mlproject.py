"""MLproject's entry points call the CLI with options that exist, and every parameter is used."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest
import yaml

from ema_cli.cli import main

MLPROJECT = yaml.safe_load((Path(__file__).resolve().parents[2] / "MLproject").read_text())
ENTRY_POINTS = MLPROJECT["entry_points"]


def command_options(command: click.Command) -> set[str]:
    return {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}


@pytest.mark.parametrize("entry_point", sorted(ENTRY_POINTS))
def test_mlproject_entry_point_matches_cli(entry_point):
    spec = ENTRY_POINTS[entry_point]
    words = shlex.split(spec["command"])
    assert words[0] == "ema"
    name = {"main": "demo"}.get(entry_point, entry_point)
    assert words[1] == name
    command = main.commands[name]
    flags = [w for w in words[2:] if w.startswith("--")]
    assert set(flags) <= command_options(command), set(flags) - command_options(command)
    used = set(re.findall(r"\{(\w+)\}", spec["command"]))
    assert used == set(spec.get("parameters", {}))


@pytest.mark.parametrize("entry_point", sorted(ENTRY_POINTS))
def test_mlproject_defaults_match_cli_defaults(entry_point):
    spec = ENTRY_POINTS[entry_point]
    name = {"main": "demo"}.get(entry_point, entry_point)
    command = main.commands[name]
    words = shlex.split(spec["command"])
    for flag, value in zip(words[2:], words[3:]):
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
