"""MLproject's entry points run their entrypoints/ script, which calls the CLI with options that exist."""

from __future__ import annotations

import re
import shlex
from itertools import pairwise
from pathlib import Path

import click
import pytest
import yaml

from ema_cli.audit import PROJECT_DEFAULT_QUERY
from ema_cli.cli import main
from tests.test_entrypoints import script_command

ROOT = Path(__file__).resolve().parents[2]
MLPROJECT = yaml.safe_load((ROOT / "MLproject").read_text())
ENTRY_POINTS = MLPROJECT["entry_points"]


def command_options(command: click.Command) -> set[str]:
    return {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}


#: Entry points that run an `ema` command of another name, or a subcommand.
RUNS = {"main": ("demo",), "grid": ("grid", "paper")}


def cli_command(entry_point: str) -> tuple[click.Command, list[str]]:
    """The `ema` command an entry point runs (through its script), and the words MLproject passes it."""
    words = shlex.split(ENTRY_POINTS[entry_point]["command"])
    assert words[:2] == ["python", f"entrypoints/{entry_point}.py"], words[:2]
    path = script_command(ROOT / words[1])
    assert path == RUNS.get(entry_point, (entry_point,)), path
    command = main
    for name in path:
        command = command.get_command(click.Context(command), name)
    return command, words[2:]


@pytest.mark.parametrize("entry_point", sorted(ENTRY_POINTS))
def test_mlproject_entry_point_matches_cli(entry_point):
    spec = ENTRY_POINTS[entry_point]
    command, arguments = cli_command(entry_point)
    assert command.name == RUNS.get(entry_point, (entry_point,))[-1]
    flags = [w for w in arguments if w.startswith("--")]
    assert set(flags) <= command_options(command), set(flags) - command_options(command)
    used = set(re.findall(r"\{(\w+)\}", spec["command"]))
    assert used == set(spec.get("parameters", {}))


@pytest.mark.parametrize("entry_point", sorted(ENTRY_POINTS))
def test_mlproject_defaults_match_cli_defaults(entry_point):
    spec = ENTRY_POINTS[entry_point]
    command, arguments = cli_command(entry_point)
    for flag, value in pairwise(arguments):
        match = re.fullmatch(r"\{(\w+)\}", value)
        if not flag.startswith("--") or not match:
            continue
        param = next(p for p in command.params if flag in p.opts)
        if not isinstance(param.default, (str, int, float)):
            continue  # no CLI default (e.g. --query): MLproject supplies one
        default = spec["parameters"][match[1]]["default"]
        assert same_value(param.default, default), (flag, param.default, default)


def same_value(given: object, default: object) -> bool:
    """Whether a CLI value and an MLproject default are alike: as text, as numbers, or as click reads a boolean's
    text (``"false"`` for False: MLproject has no boolean type)."""
    if isinstance(given, bool):
        return given is click.BOOL.convert(str(default), None, None)
    return str(given) == str(default) or float(given) == float(default)


#: MLproject parameter types and the click types that parse them.
PARAM_TYPES = {"int": (click.types.IntParamType,), "float": (click.types.FloatParamType,), "string": None}


@pytest.mark.parametrize("entry_point", sorted(ENTRY_POINTS))
def test_mlproject_parameters_are_typed_and_map_one_to_one_to_their_flags(entry_point):
    spec = ENTRY_POINTS[entry_point]
    command, arguments = cli_command(entry_point)
    passed = {
        match[1]: flag
        for flag, value in pairwise(arguments)
        if flag.startswith("--") and (match := re.fullmatch(r"\{(\w+)\}", value))
    }
    for name, declared in spec.get("parameters", {}).items():
        assert set(declared) == {"type", "default"}, (name, declared)
        if name not in passed:  # a positional argument (grid's name)
            continue
        assert passed[name] == "--" + name.replace("_", "-"), (name, passed[name])
        param = next(p for p in command.params if passed[name] in p.opts)
        expected = PARAM_TYPES[declared["type"]]
        if expected is not None:
            assert isinstance(param.type, expected), (name, declared["type"], param.type)


@pytest.mark.parametrize("entry_point", sorted(ENTRY_POINTS))
def test_mlproject_defaults_parse_as_the_cli_command_line(entry_point):
    """The command MLproject renders from its defaults is one the command accepts (choices, ranges, required)."""
    spec = ENTRY_POINTS[entry_point]
    command, arguments = cli_command(entry_point)
    defaults = {name: str(declared["default"]) for name, declared in spec.get("parameters", {}).items()}
    words = [re.sub(r"\{(\w+)\}", lambda m: defaults[m[1]], word) for word in arguments]
    context = command.make_context(command.name, words)
    flags = {value[1:-1]: flag for flag, value in pairwise(arguments) if flag.startswith("--")}
    for name, declared in spec.get("parameters", {}).items():
        param = next(p for p in command.params if flags.get(name) in p.opts or p.name == name)
        given = context.params[param.name]
        if (entry_point, name) == ("audit", "query"):  # "": M1 unless -P query_file or query_table names another
            assert given == PROJECT_DEFAULT_QUERY, given
            continue
        if declared["default"] == "":  # an optional path: "" is not given (ema_cli.options.empty_is_none)
            assert given is None, (name, given)
            continue
        assert same_value(given, declared["default"]), (name, given)


def test_mlproject_unlearn_entry_point_passes_every_option_of_a_removal():
    command, arguments = cli_command("unlearn")
    flags = {w for w in arguments if w.startswith("--")}
    required = {p.opts[0] for p in command.params if getattr(p, "required", False)}
    assert required == {"--forget", "--method"} and required <= flags
    assert {"--model", "--epochs", "--lr", "--seed", "--alias"} <= flags


def test_mlproject_audit_declares_allow_missing_off_by_default():
    """``-P allow_missing=true`` is the audit's ``--allow-missing true``; declared, so that it is off unless given."""
    command, arguments = cli_command("audit")
    assert ENTRY_POINTS["audit"]["parameters"]["allow_missing"] == {"type": "string", "default": "false"}
    assert arguments[arguments.index("--allow-missing") + 1] == "{allow_missing}"
    param = next(p for p in command.params if "--allow-missing" in p.opts)
    assert command.make_context("audit", ["--allow-missing"]).params[param.name] is True  # alone, as before


def test_readme_names_the_mlproject_entry_points():
    readme = (ROOT / "README.md").read_text()
    after = readme.split("are also MLflow project entry points with the same", 1)[1]
    sentence = " ".join(after.split("run as")[0].split())
    assert set(re.findall(r"`(\w+)`", sentence)) == set(ENTRY_POINTS), sentence
