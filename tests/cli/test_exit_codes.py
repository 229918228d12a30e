"""A failed command exits with the code of its error's kind, and ``ema --help`` lists the codes."""

from __future__ import annotations

import inspect

import click
import mlflow
import pytest
from click.testing import CliRunner

from benchmarks._serve import free_port
from ema import errors
from ema.oracle import ScoringTimeout
from ema.tracking.runs import MissingArtifact
from ema.tracking.single_flight import ClaimTimeout
from ema_cli.cli import main
from ema_cli.exit_codes import EXIT_CODES, USAGE_ERROR, exit_code
from ema_cli.options import workflow_command

#: Each kind, one of its subclasses defined elsewhere, and the code both exit with.
CODES = [
    (errors.EMAError, 1),
    (errors.InputError, 3),
    (errors.NotCalibratedError, 3),
    (errors.ModelAccessError, 4),
    (ScoringTimeout, 4),
    (errors.MissingDependencyError, 5),
    (errors.StoreError, 6),
    (MissingArtifact, 6),
    (errors.StoreBusyError, 7),
    (ClaimTimeout, 7),
    (errors.TimeLimitExceeded, 124),
]


def test_exit_codes_name_every_kind_of_ema_errors_once():
    kinds = {name for name, kind in inspect.getmembers(errors, inspect.isclass) if issubclass(kind, errors.EMAError)}
    assert set(EXIT_CODES) == kinds - {"NotCalibratedError"}  # an InputError, refused as one
    codes = [code for code, _ in EXIT_CODES.values()]
    assert len(set(codes)) == len(codes) and not {0, USAGE_ERROR} & set(codes)


@pytest.mark.parametrize(("kind", "code"), CODES, ids=lambda value: getattr(value, "__name__", str(value)))
def test_exit_code_of_each_kind_and_of_its_subclasses(kind, code):
    assert exit_code(kind("x")) == code


def test_exit_code_of_an_error_outside_the_tree_is_one():
    assert exit_code(OSError("disk full")) == 1


@pytest.mark.parametrize(("kind", "code"), CODES, ids=lambda value: getattr(value, "__name__", str(value)))
def test_a_workflow_command_exits_with_its_errors_code_and_one_line(store, kind, code):
    @click.command()
    @workflow_command
    def fails():
        raise kind("expected something, got something else: do this")

    result = CliRunner().invoke(fails, [])
    assert result.exit_code == code
    assert result.output.splitlines()[-1] == "Error: expected something, got something else: do this"
    assert "Traceback" not in result.output


def test_a_corrupt_tracking_store_exits_with_the_store_code(tmp_path, monkeypatch):
    (tmp_path / "mlflow.db").write_bytes(bytes(range(256)) * 16)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    result = CliRunner().invoke(main, ["history", "--model", "any"])
    assert result.exit_code == 6 and "is not a usable sqlite database" in result.output


def test_a_tracking_server_that_does_not_answer_exits_with_the_retryable_code(tmp_path, monkeypatch):
    """`ema history` (whose first request is a search) ended in MLflow's traceback, `ema audit` in exit 6."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    try:
        for command in (["history", "--model", "any"], ["audit", "--query", "M6"]):
            result = CliRunner().invoke(main, command)
            assert result.exit_code == 4, result.output
            assert "Error: could not reach the MLflow tracking server" in result.output
            assert "Traceback" not in result.output
    finally:
        mlflow.set_tracking_uri(None)


def test_help_lists_every_exit_code_with_its_kind():
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    lines = result.output.split("Exit codes:\n", 1)[1].splitlines()
    codes = sorted([0, USAGE_ERROR, *(c for c, _ in EXIT_CODES.values()), 143])  # 143: SIGTERM, as the README says
    assert [int(line.split()[0]) for line in lines] == codes
    assert all(f"({name})" in result.output for name in EXIT_CODES)


def test_an_audit_of_a_local_model_path_with_nothing_there_exits_as_an_input_error(store, tmp_path):
    """The path is read for its signature before the model is loaded: that read says the same as the loader."""
    result = CliRunner().invoke(main, ["audit", "--model", str(tmp_path / "typo"), "--query", "M1", "--no-progress"])
    assert result.exit_code == 3, result.output
    assert result.output.strip().splitlines()[-1] == (
        f"Error: expected a model directory (an MLmodel file inside) at {tmp_path / 'typo'}, found nothing there"
    )


MALFORMED_MLMODELS = {
    "not UTF-8": b"\xc3\x28 flavors",
    "a YAML list": b"- 1\n",
    "a signature that is not JSON": b"flavors:\n  python_function: {}\nsignature:\n  inputs: 'not json ['\n",
    "a python tag": b"flavors:\n  python_function:\n    env: !!python/object/apply:os.system ['true']\n",
}


@pytest.mark.parametrize("kind", sorted(MALFORMED_MLMODELS))
def test_an_audit_of_a_model_whose_mlmodel_is_malformed_exits_as_an_input_error(store, tmp_path, kind):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "MLmodel").write_bytes(MALFORMED_MLMODELS[kind])
    result = CliRunner().invoke(main, ["audit", "--model", str(folder), "--query", "M1", "--no-progress"])
    assert result.exit_code == 3, result.output
    assert result.output.strip().splitlines()[-1].startswith(f"Error: could not read model '{folder}': ")


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("runs:/0123456789abcdef/model", "Run with id=0123456789abcdef not found"),
        ("models:/m-doesnotexist", "Logged model with ID 'm-doesnotexist' not found"),
        ("http://127.0.0.1:9/invocations", "a scoring server's URL goes to --model-url"),
    ],
)
def test_an_audit_of_a_model_uri_that_names_nothing_exits_as_an_input_error(store, uri, message):
    """It fails the same way every time: not exit 4, which tells a caller to try again."""
    result = CliRunner().invoke(main, ["audit", "--model", uri, "--query", "M1", "--no-progress"])
    assert result.exit_code == 3, result.output
    assert message in result.output.strip().splitlines()[-1]


def test_an_audit_of_a_folder_without_mlmodel_exits_as_an_input_error(store, tmp_path):
    result = CliRunner().invoke(main, ["audit", "--model", str(tmp_path), "--query", "M1", "--no-progress"])
    assert result.exit_code == 3, result.output
    assert "No such artifact: 'MLmodel'" in result.output


@pytest.mark.parametrize("command", [["history", "--model", "any"], ["compare", "--model", "any", "--query", "M1"]])
def test_reading_commands_create_no_experiment_and_take_no_experiment_option(store, command):
    from mlflow.tracking import MlflowClient

    result = CliRunner().invoke(main, command)
    assert result.exit_code == 3 and "Error: registered model 'any' " in result.output
    assert [e.name for e in MlflowClient().search_experiments()] == ["Default"]
    refused = CliRunner().invoke(main, [*command, "--experiment-name", "x"])
    assert refused.exit_code == 2 and "No such option '--experiment-name'" in refused.output


@pytest.mark.parametrize("command", [["history", "--model", "ema-target"], ["compare", "0" * 32]])
def test_reading_commands_in_a_folder_without_a_store_say_so_and_create_none(tmp_path, monkeypatch, command):
    """`ema history` and `ema compare` only read: in a folder without a store they created one (mlflow.db, 954 KB,
    and its lock) before saying the model or run did not exist."""
    import mlflow

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    mlflow.set_tracking_uri(None)
    refused = CliRunner().invoke(main, command)
    assert refused.exit_code == 3, refused.output
    assert refused.output.startswith(f"Error: no MLflow store at {tmp_path / 'mlflow.db'} (MLFLOW_TRACKING_URI is not")
    assert list(tmp_path.iterdir()) == []
