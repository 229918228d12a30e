"""`ema grid unlearning --mark-key`: the marks auditor beside EMA, the KS ratio and the calibrated auditor."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from ema.data import make_splits
from ema.data.files import write_set
from ema.data.marks import read_key
from ema.errors import InputError
from ema.experiments.unlearning.runner import UnlearningGridConfig, run_unlearning_grid
from ema.experiments.unlearning.tables import verdict_table
from ema.tracking import keys
from ema_cli.cli import main
from tests.experiments.test_unlearning import _config_given
from tests.workflows.conftest import marked  # noqa: F401 - the module's store with a target trained on marked M1


def test_config_refuses_a_mark_key_without_model_and_mark_queries_without_a_key():
    with pytest.raises(InputError, match=r"expected --mark-key with --model, .* got --mark-key without --model"):
        UnlearningGridConfig(mark_key="key.json").validate()
    with pytest.raises(InputError, match=r"expected --mark-queries only with --mark-key .*got --mark-queries 50"):
        UnlearningGridConfig(model_uri="models:/t/1", mark_queries=50).validate()
    with pytest.raises(InputError, match="expected mark queries"):
        UnlearningGridConfig(model_uri="models:/t/1", mark_key="k.json", mark_queries=0).validate()


def test_cli_grid_unlearning_hands_the_mark_options_to_the_grid(store, monkeypatch):
    options = ["--model", "models:/t/1", "--mark-key", "k.json", "--mark-queries", "50"]
    config = _config_given(monkeypatch, *options).validate()
    assert (config.mark_key, config.mark_queries) == ("k.json", 50)
    assert "k.json" not in json.dumps(config.params()) + json.dumps(config.logged())  # the key's path is not logged


def _grid(version, key, **options) -> UnlearningGridConfig:
    return UnlearningGridConfig(
        model_uri=f"models:/{version.name}/{version.version}",
        methods=("retrain",),
        seeds=(0,),
        sizes=(20,),
        n_draws=1,
        mark_key=str(key),
        **options,
    )


def test_grid_refuses_a_key_whose_marked_copy_is_not_the_targets_forget_set(marked, tmp_path):  # noqa: F811
    other = write_set(make_splits(0).folds[1], tmp_path / "M2.npz")
    args = ["mark", "--in", str(other), "--out", str(tmp_path / "M2-marked.npz"), "--key", str(tmp_path / "k.json")]
    assert CliRunner().invoke(main, [*args, "--seed", "5"]).exit_code == 0
    client = MlflowClient()
    before = {(v.name, v.version) for v in client.search_model_versions()}
    with pytest.raises(InputError, match=r"expected --model trained on this mark key's marked copy .* forget set M1"):
        run_unlearning_grid(_grid(marked["outcome"].version, tmp_path / "k.json"), progress=False)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()], "tags.`ema.grid` = 'unlearning'")
    assert [run.info.status for run in runs] == ["FAILED"]
    assert {(v.name, v.version) for v in client.search_model_versions()} == before  # nothing unlearned


@pytest.mark.slow
def test_grid_with_a_mark_key_audits_every_version_with_the_marks_auditor(marked):  # noqa: F811
    outcome = run_unlearning_grid(_grid(marked["outcome"].version, marked["key"], mark_queries=150), progress=False)
    marks = outcome.audits[outcome.audits["auditor"] == "marks"].set_index("method")
    assert list(marks.index) == ["none (before)", "retrain"] and set(marks["set"]) == {"forget"}
    assert marks.loc["none (before)", "verdict"] == "memorized" and marks.loc["none (before)", "value"] < 0.05
    assert marks.loc["retrain", "verdict"] != "memorized"
    assert "forget · marks" in verdict_table(outcome.audits).columns
    assert "retained · marks" not in verdict_table(outcome.audits).columns
    client = MlflowClient()
    retrained = client.get_model_version(marked["outcome"].version.name, marks.loc["retrain", "version"])
    assert retrained.tags[f"{keys.TAG_DATA_FOLD_PREFIX}M1"] == read_key(marked["key"]).fingerprint  # its lineage
    run = client.get_run(marks.loc["retrain", "run_id"])
    assert run.data.params[keys.PARAM_QUERIES] == "150" and run.data.params[keys.PARAM_QUERY] == "M6"
    logged = json.loads(open(client.download_artifacts(outcome.run_id, keys.ARTIFACT_GRID_CONFIG)).read())
    assert "mark_key" not in logged and str(marked["key"]) not in json.dumps(logged)
