"""`ema grid` end to end against a temporary sqlite store: child runs, parent artifacts, resuming."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from ema.errors import ModelAccessError
from ema.experiments.errors.validity import StudyTarget
from ema.experiments.paper.cells import CellAuditor
from ema.experiments.paper.runner import RESUME_ADVICE
from ema.tracking import keys
from ema.tracking.keys import (
    ARTIFACT_CELLS,
    ARTIFACT_FIG2,
    ARTIFACT_FIG3,
    ARTIFACT_GRID_CONFIG,
    ARTIFACT_REPORT,
    ARTIFACT_TABLES_HTML,
    ARTIFACT_TABLES_MD,
    TAG_GRID,
    TAG_GRID_CONFIG,
)
from ema_cli.cli import main

PARENT_ARTIFACTS = {
    ARTIFACT_TABLES_MD,
    ARTIFACT_TABLES_HTML,
    ARTIFACT_CELLS,
    ARTIFACT_FIG2,
    ARTIFACT_FIG3,
    ARTIFACT_GRID_CONFIG,
    ARTIFACT_REPORT,
}


def invoke(*args: str):
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def grid_parents(client: MlflowClient, name: str):
    experiment = client.get_experiment_by_name(keys.DEFAULT_EXPERIMENT)
    runs = client.search_runs(
        [experiment.experiment_id], f"tags.`{TAG_GRID}` = '{name}'", order_by=["attributes.start_time ASC"]
    )
    return experiment, runs


def audit_children(client: MlflowClient, experiment_id: str, parent_id: str):
    children = client.search_runs([experiment_id], f"tags.`mlflow.parentRunId` = '{parent_id}'")
    return [run for run in children if keys.PARAM_QUERY in run.data.params]


def cells_of(client: MlflowClient, run_id: str) -> pd.DataFrame:
    path = client.download_artifacts(run_id, ARTIFACT_CELLS)
    return pd.read_csv(path)


def test_grid_benchmark_resumes_an_interrupted_grid_then_reuses_every_finished_cell(store, monkeypatch):
    args = ("grid", "paper", "benchmark", "--epochs", "2", "--k", "100", "--queries", "M1,M6", "--no-progress")
    original = CellAuditor.run

    def run_one_cell_then_lose_the_model(self, cell):
        if cell.query == "M6":
            raise ModelAccessError("scoring server http://127.0.0.1:1/invocations failed after 4 attempts")
        return original(self, cell)

    monkeypatch.setattr(CellAuditor, "run", run_one_cell_then_lose_the_model)
    stopped = CliRunner().invoke(main, list(args))
    assert stopped.exit_code == 4, stopped.output  # a ModelAccessError: worth running again
    assert stopped.output.strip().splitlines()[-1] == (
        f"Error: scoring server http://127.0.0.1:1/invocations failed after 4 attempts; {RESUME_ADVICE}"
    )
    monkeypatch.setattr(CellAuditor, "run", original)
    client = MlflowClient()
    experiment, (interrupted,) = grid_parents(client, "benchmark")
    assert interrupted.info.status == "FAILED"
    assert [
        c.data.params[keys.PARAM_QUERY]
        for c in audit_children(client, experiment.experiment_id, interrupted.info.run_id)
    ] == ["M1"]

    resumed = invoke(*args)
    assert (
        "Table 2(a)" in resumed.output and "Table 2(b)" in resumed.output and "(1 audited, 1 reused)" in resumed.output
    )
    _, parents = grid_parents(client, "benchmark")
    parent = parents[1]
    assert (
        parent.info.status == "FINISHED" and parent.data.tags[TAG_GRID_CONFIG] == interrupted.data.tags[TAG_GRID_CONFIG]
    )
    assert parent.data.params["grid_ks"] == "100" and parent.data.params["epochs"] == "2"
    assert PARENT_ARTIFACTS <= {a.path for a in client.list_artifacts(parent.info.run_id)}
    (child,) = audit_children(client, experiment.experiment_id, parent.info.run_id)
    params = {name: child.data.params[name] for name in (keys.PARAM_K, keys.PARAM_QUERY, keys.PARAM_METHOD, "n_query")}
    assert params == {"k": "100", "query": "M6", "method": "both", "n_query": "2000"}
    assert {"rho_ema", "rho_ema_ks", "rho_ks"} <= set(child.data.metrics)

    cells = cells_of(client, parent.info.run_id)
    assert list(cells["query"]) == ["M1", "M6"] and list(cells["reused"]) == [True, False]
    assert list(cells["n_query"]) == [1000, 2000] and cells[["rho_ema", "rho_ks"]].notna().all().all()
    with open(client.download_artifacts(parent.info.run_id, ARTIFACT_TABLES_MD)) as handle:
        markdown = handle.read()
    assert "| k | M1 | M6 |" in markdown and markdown.count("| 100 |") == 2
    with open(client.download_artifacts(parent.info.run_id, ARTIFACT_REPORT)) as handle:
        report = handle.read()
    assert "Table 2(a)" in report and "data:image/png;base64," in report
    assert report.count("<img ") == 2  # Fig. 2 and Fig. 3, inline
    assert ARTIFACT_REPORT in {a.path for a in client.list_artifacts(child.info.run_id)}  # each cell's own report

    again = invoke(*args)
    assert "(0 audited, 2 reused)" in again.output
    _, parents = grid_parents(client, "benchmark")
    assert len(parents) == 3 and audit_children(client, experiment.experiment_id, parents[2].info.run_id) == []
    reused = cells_of(client, parents[2].info.run_id)
    assert reused["reused"].all() and list(reused["run_id"]) == list(cells["run_id"])
    assert reused["rho_ks"].tolist() == pytest.approx(cells["rho_ks"].tolist())

    (target,) = client.search_model_versions("name = 'ema-grid-target'")
    assert not any(tag.startswith(keys.TAG_AUDIT_PREFIX) for tag in target.tags)  # cells do not tag the version
    assert json.loads(target.tags[f"{keys.TAG_LAST_GRID_PREFIX}benchmark"])["run_id"] == parents[2].info.run_id


def test_grid_medical_on_a_tiny_pneumoniamnist(store, make_pneumoniamnist_root):
    root = make_pneumoniamnist_root({"train": 300, "val": 4, "test": 6})
    result = invoke(
        "grid",
        "paper",
        "medical",
        "--data",
        "pneumoniamnist",
        "--root",
        str(root),
        "--epochs",
        "1",
        "--k",
        "100",
        "--queries",
        "M1,M6",
        "--sizes",
        "full,5",
        "--no-progress",
    )
    for title in ("Table 3(a)", "Table 3(b)", "Table 4(c)", "Table 6: rho_EMA (t-test), |D_q| = 5"):
        assert title in result.output
    assert "| k | C1 | C6 |" in result.output  # the paper's names of the chest X-ray query sets
    client = MlflowClient()
    experiment, (parent,) = grid_parents(client, "medical")
    assert PARENT_ARTIFACTS <= {a.path for a in client.list_artifacts(parent.info.run_id)}
    cells = cells_of(client, parent.info.run_id)
    assert sorted(zip(cells["method"], cells["size"].astype(str), cells["query"], strict=True)) == [
        ("ema", "5", "M1"),
        ("ema", "5", "M6"),
        ("ema", "full", "M1"),
        ("ema", "full", "M6"),
        ("ks-ratio", "full", "M1"),
        ("ks-ratio", "full", "M6"),
    ]
    assert cells.loc[cells["size"].astype(str) == "5", "n_query"].tolist() == [5, 5]
    children = audit_children(client, experiment.experiment_id, parent.info.run_id)
    assert len(children) == 6
    ks_runs = [c for c in children if c.data.params[keys.PARAM_METHOD] == "ks-ratio"]
    assert len(ks_runs) == 2
    assert all(c.data.params[keys.PARAM_CORRUPTION] == "noise" for c in children)
    ema_runs = [c for c in children if c.data.params[keys.PARAM_METHOD] == "ema"]
    assert {c.data.tags[keys.TAG_CACHE] for c in ema_runs} == {"miss", "hit"}
    (calibration,) = client.search_model_versions(f"name = '{keys.CALIBRATION_MODEL_NAME}'")
    assert calibration.tags[keys.TAG_CORRUPTION] == "noise" and calibration.tags[keys.TAG_CALIBRATION_K] == "100"


def test_grid_medical_refuses_a_non_medical_source_and_a_missing_root(store):
    result = CliRunner().invoke(main, ["grid", "paper", "medical", "--data", "mnist-embedded", "--no-progress"])
    assert result.exit_code == 3 and "binary chest X-ray source" in result.output
    result = CliRunner().invoke(main, ["grid", "paper", "medical", "--no-progress"])
    assert result.exit_code == 3 and "pneumoniamnist: expected a root folder" in result.output


def test_grid_bad_k_is_a_usage_error(store):
    result = CliRunner().invoke(main, ["grid", "paper", "benchmark", "--k", "100,abc"])
    assert result.exit_code == 2 and "k values" in result.output


def test_grid_model_with_epochs_is_refused(store):
    result = CliRunner().invoke(
        main, ["grid", "paper", "benchmark", "--model", "models:/x@target", "--epochs", "3", "--no-progress"]
    )
    assert result.exit_code == 3 and "either --model" in result.output


class _Stop(Exception):
    """Raised by the stand-in grid: the config arrived, nothing runs."""


def test_grid_paper_without_a_name_runs_the_benchmark_grid(store, monkeypatch):
    import ema.experiments.paper.runner as runner

    seen = []

    def record(config, progress):
        seen.append(config)
        raise _Stop

    monkeypatch.setattr(runner, "run_grid", record)
    result = CliRunner().invoke(main, ["grid", "paper", "--k", "100", "--no-progress"])
    assert isinstance(result.exception, _Stop), result.output
    (config,) = seen
    assert config.name == "benchmark" and config.ks == (100,)


@pytest.mark.parametrize(
    ("args", "targets"),
    [
        ((), "TARGETS"),
        (("--data", "breast-cancer"), {"breast-cancer (default recipe)": StudyTarget(None, data="breast-cancer")}),
    ],
)
def test_grid_errors_data_picks_the_study_targets(store, monkeypatch, args, targets):
    import ema.experiments.errors.study as study
    from ema.experiments.errors.validity import TARGETS

    seen = []

    def record(config, *, targets, cal_seed, progress):
        seen.append((config, targets))
        raise _Stop

    monkeypatch.setattr(study, "run_error_grid", record)
    result = CliRunner().invoke(main, ["grid", "errors", *args, "--sizes", "5,20", "--no-progress"])
    assert isinstance(result.exception, _Stop), result.output
    ((config, chosen),) = seen
    assert config.sizes == (5, 20) and chosen == (TARGETS if targets == "TARGETS" else targets)


def test_grid_errors_refuses_root_without_data(store, tmp_path):
    result = CliRunner().invoke(main, ["grid", "errors", "--root", str(tmp_path), "--no-progress"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        f"Error: expected --root only with --data (the source it holds), got --root {tmp_path}"
    )


def test_grid_errors_refuses_a_size_larger_than_a_fold_in_one_line_and_starts_no_run(store):
    result = CliRunner().invoke(main, ["grid", "errors", "--data", "breast-cancer", "--sizes", "5,64,100"])
    assert result.exit_code == 3
    assert result.output.strip().splitlines()[-1] == (
        "Error: expected query sizes of at most 63, the samples a member fold M1 of target "
        "'breast-cancer (default recipe)' holds, got 64, 100; give --sizes up to 63"
    )
    assert "Traceback" not in result.output
    client = MlflowClient()
    assert client.search_runs([experiment.experiment_id for experiment in client.search_experiments()]) == []


@pytest.mark.parametrize("name", ["benchmark", "medical"])
def test_grid_with_a_paper_grid_name_names_the_command_that_replaced_it(store, name):
    result = CliRunner().invoke(main, ["grid", name, "--k", "100"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        f"Error: `ema grid {name}` is now `ema grid paper {name}`: expected a study (errors, paper, unlearning), "
        f"got '{name}'"
    )


#: What `ema grid paper` and `ema grid errors` read, besides what every command has (unlearning: test_unlearning.py).
STUDY_OPTIONS = {
    "paper": {"name", "data_name", "root", "data_seed", "model_uri", "ks", "queries", "sizes", "epochs", "workers"}
    | {"cal_seed", "alpha", "sample_seed"},
    "errors": {"data_name", "root", "sizes", "n_draws", "n_ks_draws", "cal_seed", "alpha", "sample_seed"},
}


@pytest.mark.parametrize("study", sorted(STUDY_OPTIONS))
def test_each_study_has_only_the_options_it_reads(study):
    from ema_cli.grid import grid

    shared = {"progress", "experiment_name", "verbose", "max_params"}
    assert {param.name for param in grid.commands[study].params} == STUDY_OPTIONS[study] | shared
