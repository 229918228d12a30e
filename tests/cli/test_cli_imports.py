"""`ema --help`, every command's --help and option errors answer without importing mlflow or torch."""

import subprocess
import sys

import click
import click.testing
import pytest

from ema_cli.cli import COMMANDS, main

#: Prints which heavy packages the command line imported while it answered ARGS.
PROBE = """
import sys
from ema_cli.cli import main
try:
    main(sys.argv[1:], prog_name="ema")
except SystemExit as exc:
    code = exc.code
print(code, *sorted(name for name in ("mlflow", "torch", "torchvision", "scipy") if name in sys.modules))
"""


def answer(*args: str) -> tuple[int, set[str]]:
    """The exit code and the heavy packages imported by ``ema ARGS`` in a fresh interpreter."""
    out = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=True).stdout
    code, *imported = out.strip().splitlines()[-1].split()
    return int(code), set(imported)


def test_group_help_imports_no_command():
    code, imported = answer("--help")
    assert code == 0
    assert imported == set()


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_command_help_imports_neither_mlflow_nor_torch(name):
    code, imported = answer(name, "--help")
    assert code == 0
    assert not imported & {"mlflow", "torch", "torchvision"}


@pytest.mark.parametrize(
    "args", [("audit", "--bogus"), ("audit", "--alpha", "2"), ("train", "--epochs", "x"), ("train", "--device", "gpu")]
)
def test_option_errors_import_neither_mlflow_nor_torch(args):
    code, imported = answer(*args)
    assert code == 2
    assert not imported & {"mlflow", "torch", "torchvision"}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_group_help_shows_each_commands_own_first_line(name):
    command = main.get_command(click.Context(main), name)
    assert command.name == name
    assert COMMANDS[name][1] == command.help.splitlines()[0]


def test_the_audit_command_imports_scikit_learn_only_to_fit_thresholds():
    probe = "import sys, ema_cli.audit; print('sklearn' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False"]


def test_unknown_command_is_a_usage_error():
    result = click.testing.CliRunner().invoke(main, ["nope"])
    assert result.exit_code == 2
    assert "No such command 'nope'" in result.output
