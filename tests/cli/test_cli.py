"""The `ema` commands: options, one-line errors, FAILED runs."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from ema_cli.cli import main, option_spellings


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_data_splits_writes_every_split(tmp_path):
    result = invoke("data", "splits", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    names = sorted(p.stem for p in tmp_path.glob("*.npz"))
    assert names == sorted(["M6", "S", "calibration", *(f"M{i}" for i in range(1, 6))])
    with np.load(tmp_path / "M6.npz", allow_pickle=False) as data:
        assert data["x"].shape == (2000, 28, 28) and data["x"].dtype == np.uint8
        assert data["y"].dtype == np.int64 and data["index"].dtype == np.int64
    assert f"{tmp_path / 'M6.npz'}  2000 images, fingerprint " in result.output


def test_an_ema_warning_is_shown_after_a_library_sets_the_root_logger_to_errors(tmp_path, caplog, monkeypatch):
    """mlflow.pytorch runs logging.basicConfig(level=ERROR) on import: the `ema` command keeps its warnings."""
    import logging

    monkeypatch.setattr(logging.root, "level", logging.ERROR)
    monkeypatch.setattr(logging.getLogger("ema"), "level", logging.NOTSET)
    logging.getLogger("ema.data.tables").warning("silenced")
    assert "silenced" not in caplog.text
    invoke("data", "splits", "--data", "breast-cancer", "--out", str(tmp_path / "splits"))
    logging.getLogger("ema.data.tables").warning("shown")
    assert "shown" in caplog.text


def test_data_splits_of_a_table_counts_rows(tmp_path):
    result = invoke("data", "splits", "--data", "breast-cancer", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert f"{tmp_path / 'M1.npz'}  63 rows, fingerprint " in result.output and " images" not in result.output


def test_data_export_writes_a_query_table_of_the_split(tmp_path):
    from ema.data.parquet import read_table
    from ema.data.presets import load_splits

    result = invoke("data", "export", "--format", "parquet", "--query", "M6", "--out", str(tmp_path / "m6"))
    assert result.exit_code == 0, result.output
    table, split = read_table(tmp_path / "m6"), load_splits("mnist-embedded", 0).query("M6")
    assert table.fingerprint == split.fingerprint and f"fingerprint {split.fingerprint}" in result.output
    np.testing.assert_array_equal(table.index, split.index)


def test_data_export_needs_exactly_one_query(tmp_path):
    result = CliRunner().invoke(main, ["data", "export", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "exactly one of --query NAME or --query-file FILE" in result.output


def test_audit_unknown_model_is_one_line_error_and_failed_run(store):
    result = invoke("audit", "--model", "models:/missing@target", "--query", "M1", "--no-progress")
    assert result.exit_code == 3  # an InputError
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert errors == [f"Error: registered model 'missing' does not exist in {store}; known: []"]
    assert "Traceback" not in result.output
    runs = MlflowClient().search_runs([e.experiment_id for e in MlflowClient().search_experiments()])
    assert [r.info.status for r in runs] == ["FAILED"]


def test_audit_verbose_prints_the_traceback_before_the_one_line_error(store):
    result = invoke("audit", "--model", "models:/missing@target", "--query", "M1", "--no-progress", "--verbose")
    assert result.exit_code == 3
    assert "Traceback (most recent call last):" in result.output
    message = f"registered model 'missing' does not exist in {store}; known: []"
    assert re.search(rf"^ema\.errors\.\w+: {re.escape(message)}$", result.output, re.M)  # the traceback's last line
    assert result.output.rstrip().endswith(f"Error: {message}")


def test_audit_unknown_query_name_is_usage_error(store):
    result = invoke("audit", "--query", "M9")
    assert result.exit_code == 2
    assert "'M9' is not one of" in result.output


def test_audit_needs_exactly_one_query(store):
    result = invoke("audit", "--query", "M1", "--query-file", "x.npz")
    assert result.exit_code == 2
    assert "exactly one of --query NAME, --query-file FILE or --query-table URI" in result.output


def test_train_rejects_bad_hidden(store):
    result = invoke("train", "--hidden", "256,abc", "--epochs", "1")
    assert result.exit_code == 2
    assert "comma-separated integers" in result.output


def test_train_rejects_zero_epochs(store):
    result = invoke("train", "--epochs", "0")
    assert result.exit_code == 2
    assert "--epochs" in result.output


@pytest.mark.parametrize("command", ["train", "calibrate", "audit", "demo", "data", "mark"])
def test_help_of_every_command(command):
    assert invoke(command, "--help").exit_code == 0


@pytest.mark.parametrize(
    ("parameters", "query", "query_file"),
    [
        (["--query", ""], "M1", None),  # the entry point's defaults: M1
        (["--query", "", "--query_file", "patients.csv"], None, "patients.csv"),  # -P query_file=patients.csv
        (["--query", "M3"], "M3", None),  # -P query=M3
    ],
    ids=["default", "query-file", "named"],
)
def test_the_audit_entry_points_default_query_gives_way_to_a_query_file(monkeypatch, parameters, query, query_file):
    """MLproject passes ``--query {query}`` always, empty by default: ``-P query_file=FILE`` then names the query."""
    import ema.workflows.audit as workflow
    from ema.workflows.options import EMAError

    seen = {}

    def capture(config, progress):
        seen["config"] = config
        raise EMAError("captured")

    monkeypatch.setattr(workflow, "audit", capture)
    monkeypatch.setattr("ema_cli.options.configure", lambda name, **_: None)
    CliRunner().invoke(main, option_spellings(["audit", *parameters]))  # as entrypoints/audit.py calls the CLI
    assert (seen["config"].query, seen["config"].query_file) == (query, query_file)
    both = CliRunner().invoke(main, option_spellings(["audit", "--query", "M2", "--query_file", "patients.csv"]))
    assert both.exit_code == 2 and "give exactly one of --query NAME, --query-file FILE" in both.output


def test_audit_options_all_reach_the_audit_config(monkeypatch, tmp_path):
    import dataclasses

    import ema.workflows.audit as workflow
    from ema.workflows.audit import AuditConfig
    from ema.workflows.options import EMAError

    seen = {}

    def capture(config, progress):
        from ema.limits import current_limits

        seen["config"], seen["limits"] = config, current_limits()
        raise EMAError("captured")

    monkeypatch.setattr(workflow, "audit", capture)  # the command imports it when it runs
    monkeypatch.setattr("ema_cli.options.configure", lambda name, **_: None)
    given = {
        "--model": "models:/m@a",
        "--model-url": "http://127.0.0.1:1/invocations",
        "--query": "M1",
        "--method": "calibrated",
        "--test": "ks",
        "--alpha": "0.05",
        "--k": "60",
        "--cal-seed": "3",
        "--threshold-mode": "per-class",
        "--outputs": "logits",
        "--recipe": "r.json",
        "--reference": "ref.npz",
        "--members": "members.npz",
        "--margin": "0.2",
        "--timeout": "9",
        "--max-params": "1000",
        "--request-timeout": "4",
        "--http-concurrency": "3",
        "--http-format": "parquet",
        "--calibration-name": "cal",
        "--input-shape": "28,28",
        "--input-dtype": "uint8",
        "--output-name": "probabilities",
        "--engine": "spark",
        "--spark-master": "local[1]",
        "--membership-out": "out",
        "--max-query": "77",
        "--certify-level": "0.9",
        "--image-size": "64",
        "--device": "cuda:1",
        "--label-column": "diagnosis",
        "--calibration-file": "cal.csv",
        "--augment": "shifts",
        "--mark-key": "key.json",
        "--queries": "50",
        "--pixel-order": "hwc",
    }
    words = ["audit", *[v for pair in given.items() for v in pair], "--strict", "--no-figures", "--allow-missing"]
    result = CliRunner().invoke(main, words)
    assert "captured" in result.output
    config = seen["config"]
    assert (config.model_uri, config.model_url, config.query, config.method, config.test) == (
        "models:/m@a",
        "http://127.0.0.1:1/invocations",
        "M1",
        "calibrated",
        "ks",
    )
    assert (config.alpha, config.k, config.cal_seed, config.threshold_mode, config.outputs) == (
        0.05,
        60,
        3,
        "per-class",
        "logits",
    )
    assert (config.recipe_file, config.reference_file, config.members_file, config.calibration_name) == (
        "r.json",
        "ref.npz",
        "members.npz",
        "cal",
    )
    assert (config.margin, config.request_timeout, config.strict, config.figures) == (0.2, 4.0, True, False)
    assert (seen["limits"].timeout, seen["limits"].max_params) == (9.0, 1000)  # the whole command's limits
    assert (config.input_shape, config.output_name) == ((-1, 28, 28), "probabilities")
    assert (config.http_concurrency, config.http_format, config.input_dtype) == (3, "parquet", "uint8")
    assert (config.engine, config.spark_master, config.membership_out) == ("spark", "local[1]", "out")
    assert (config.max_query, config.certify_level, config.image_size) == (77, 0.9, 64)
    assert config.device == "cuda:1"  # resolved by the workflow, before its run starts
    assert (config.label_column, config.calibration_file, config.augment) == ("diagnosis", "cal.csv", "shifts")
    assert (config.mark_key, config.queries, config.pixel_order) == ("key.json", 50, "hwc")
    assert config.allow_missing is True
    unset = {f.name for f in dataclasses.fields(AuditConfig)} - {
        "model_uri", "model_url", "query", "method", "test", "alpha", "k", "cal_seed", "threshold_mode", "outputs",
        "recipe_file", "reference_file", "members_file", "margin", "request_timeout", "strict", "figures",
        "calibration_name", "input_shape", "output_name", "http_concurrency", "http_format", "engine", "spark_master",
        "membership_out", "input_dtype", "max_query", "certify_level", "image_size", "device",
        "label_column", "calibration_file", "augment",
        "mark_key", "queries", "pixel_order", "allow_missing",
    }  # fmt: skip
    assert unset == {
        "query_file", "query_table", "transform", "calibration", "calibration_outputs", "corruption", "timeout",
        "query_label", "query_file_temporary",
    }  # fmt: skip


@pytest.mark.parametrize("fails", [False, True])
def test_main_runs_a_command_with_gc_thresholds_then_restores_the_callers(monkeypatch, fails):
    import gc

    import click

    from ema_cli.cli import GC_THRESHOLDS

    seen = []

    @click.command("probe")
    def probe():
        seen.append(gc.get_threshold())
        if fails:
            raise click.ClickException("probe failed")

    monkeypatch.setattr(main, "get_command", lambda ctx, name: probe)
    before = gc.get_threshold()
    assert before != GC_THRESHOLDS
    result = CliRunner().invoke(main, ["probe"])
    assert result.exit_code == (1 if fails else 0), result.output
    assert seen == [GC_THRESHOLDS]
    assert gc.get_threshold() == before


@pytest.mark.parametrize(("args", "code"), [(["--version"], 0), (["nope"], 2)])
def test_the_program_exits_with_the_commands_code_its_objects_frozen(args, code):
    import gc

    from ema_cli.cli import run

    assert gc.get_freeze_count() == 0
    try:
        with pytest.raises(SystemExit) as exited:
            run(args)
        assert exited.value.code == code
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_main_in_process_leaves_the_collector_unfrozen():
    import gc

    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0, result.output
    assert gc.get_freeze_count() == 0


def test_the_console_script_is_the_program():
    from pathlib import Path

    import tomllib

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    assert tomllib.loads(pyproject.read_text())["project"]["scripts"]["ema"] == "ema_cli.cli:run"


def test_audit_margin_takes_a_share_or_auto_and_refuses_anything_else():
    refused = CliRunner().invoke(main, ["audit", "--query", "M1", "--margin", "most"])
    assert refused.exit_code == 2 and "expected a retained share in (0, 1) or 'auto', got 'most'" in refused.output
    assert CliRunner().invoke(main, ["audit", "--query", "M1", "--margin", "1.5"]).exit_code == 2


@pytest.mark.parametrize("command", [["audit", "--query", "M1"], ["power"], ["demo"], ["grid", "errors"]])
@pytest.mark.parametrize("alpha", ["2", "nan", "0", "1", "-inf", "a tenth"])
def test_a_bad_alpha_is_a_usage_error_alike_out_of_range_and_nan(store, command, alpha):
    """Click's FloatRange refused 2 (exit 2) and let nan through to the workflow's check (exit 3)."""
    refused = CliRunner().invoke(main, [*command, "--alpha", alpha, "--no-progress"])
    assert refused.exit_code == 2, refused.output
    errors = [line for line in refused.output.splitlines() if line.startswith("Error:")]
    assert errors == [
        f"Error: Invalid value for '--alpha': expected a number strictly between 0 and 1, got {alpha!r}"
    ], refused.output


def test_audit_query_help_and_refusal_list_the_named_sets_alone_and_an_empty_query_is_mlprojects_default(store):
    """--help showed `[M1|M2|M3|M4|M5|M6|S|]`, a refusal `'S', ''`: the empty value MLproject passes by default."""
    from ema.workflows.options import QUERY_NAMES
    from ema_cli.audit import PROJECT_DEFAULT_QUERY, audit

    named = "|".join(QUERY_NAMES)
    assert f"--query [{named}] " in invoke("audit", "--help").output
    refused = CliRunner().invoke(main, ["audit", "--query", "M7"])
    assert refused.exit_code == 2
    assert f"'M7' is not one of {', '.join(map(repr, QUERY_NAMES))}." in refused.output
    context = audit.make_context("audit", ["--query", ""])
    assert context.params["query"] == PROJECT_DEFAULT_QUERY  # M1 unless --query-file or --query-table names another


@pytest.mark.parametrize("level", ["nan", "0.5", "1", "x"])
def test_a_bad_certify_level_is_a_usage_error_alike_out_of_range_and_nan(store, level):
    refused = CliRunner().invoke(main, ["audit", "--query", "M1", "--certify-level", level, "--no-progress"])
    assert refused.exit_code == 2, refused.output
    assert f"Invalid value for '--certify-level': expected a number strictly between 0.5 and 1, got {level!r}" in (
        refused.output
    )


def test_history_and_compare_write_every_missing_value_alike_and_numbers_as_numbers():
    """A margin no method certified with is None in a text column, a metric a method does not log NaN: both '-'."""
    import pandas as pd

    from ema_cli.history import MISSING, shown

    table = pd.DataFrame({"method": ["ema", "calibrated"], "margin": [None, "0.3"], "rho": [2.3e-17, float("nan")]})
    lines = shown(table, index=False).splitlines()
    assert lines[1].split() == ["ema", MISSING, "2.300000e-17"]
    assert lines[2].split() == ["calibrated", "0.3", MISSING]
    mixed = pd.DataFrame({"run": {"metric rho_ema": 1.3860750875554306e-14, "param test": "t", "metric n": 200.0}})
    assert [line.split() for line in shown(mixed).splitlines()[1:]] == [
        ["metric", "rho_ema", "1.386075e-14"],
        ["param", "test", "t"],
        ["metric", "n", "200"],
    ]


def test_history_all_cuts_a_failed_audits_error_to_error_chars(store, monkeypatch):
    """README and --help: the error column is the run's ema.error cut to 80 characters (it was printed whole)."""
    import ema.workflows.history
    from ema_cli.history import ERROR_CHARS

    error = "expected a non-member reference of samples the target never saw, got " + "x" * 200
    table = pd.DataFrame({"run_id": ["abc"], "status": ["FAILED"], "error": [error]})
    monkeypatch.setattr(ema.workflows.history, "audit_history", lambda *args, **kwargs: table)
    shown = invoke("history", "--model", "ema-target", "--all")
    assert shown.exit_code == 0, shown.output
    row = shown.output.splitlines()[1]
    assert error[: ERROR_CHARS - 3] + "..." in row and error[: ERROR_CHARS - 2] not in row


@pytest.mark.parametrize("args", [["--model", "ema-target", "--query", "M6"], ["0" * 32]])
def test_compare_cuts_a_long_cell_to_compare_chars(store, monkeypatch, args):
    """A trail's members (a reference's description) was printed whole: to_string ignores display.max_colwidth."""
    import ema.workflows.history
    from ema_cli.history import COMPARE_CHARS

    members = "member reference scored on the target training data of ema-target v1 (mnist-embedded): " + "x" * 100
    trail = pd.DataFrame({"version": [1], "members": [members]})
    runs = pd.DataFrame({"0" * 8: {"param members": members}})
    monkeypatch.setattr(ema.workflows.history, "version_trail", lambda *args, **kwargs: trail)
    monkeypatch.setattr(ema.workflows.history, "compare_runs", lambda *args, **kwargs: runs)
    shown = invoke("compare", *args)
    assert shown.exit_code == 0, shown.output
    row = shown.output.splitlines()[1]  # pandas counts a cell's leading space among the characters
    assert row.endswith("...") and members[: COMPARE_CHARS - 4] in row and members[: COMPARE_CHARS - 2] not in row


def test_train_on_other_data_says_it_moved_the_alias_and_model_name_keeps_it(store, caplog):
    """`ema train --data breast-cancer` moved @target from the MNIST target to a table model without a word."""
    mnist = invoke("train", "--hidden", "16", "--epochs", "1", "--no-progress")
    assert mnist.exit_code == 0, mnist.output
    assert "moved" not in caplog.text  # the first version: the alias pointed nowhere
    table = invoke("train", "--data", "breast-cancer", "--no-progress")
    assert table.exit_code == 0, table.output
    moved = "alias @target of ema-target moved from v1 (mnist-embedded) to v2 (breast-cancer)"
    assert [m for m in caplog.messages if "moved" in m] == [f"{moved}: models:/ema-target@target now reaches it"]
    caplog.clear()
    apart = invoke("train", "--data", "breast-cancer", "--model-name", "ema-table", "--no-progress")
    assert apart.exit_code == 0 and "moved" not in caplog.text
    assert str(MlflowClient().get_model_version_by_alias("ema-target", "target").version) == "2"


def test_demo_registers_the_target_under_model_name(store, monkeypatch):
    import ema.workflows.demo

    asked = {}
    table = pd.DataFrame({"query": ["M1"]})
    monkeypatch.setattr(ema.workflows.demo, "run_demo", lambda spec, **options: asked.update(options) or table)
    result = invoke("demo", "--data", "breast-cancer", "--model-name", "ema-table", "--no-progress")
    assert result.exit_code == 0, result.output
    assert asked["model_name"] == "ema-table" and asked["data"] == "breast-cancer"
