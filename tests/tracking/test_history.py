"""`ema compare RUN_ID...`: audit runs side by side, and any other run refused, named with what it is."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from ema.errors import InputError
from ema.tracking import keys
from ema.tracking.history import compare_runs, version_trail
from ema.tracking.runs import PROJECT_ENTRY_POINT_TAG
from ema.tracking.trail import trail_record
from ema_cli.cli import main


def a_run(name: str, **tags: str) -> str:
    client = MlflowClient()
    experiment = client.get_experiment_by_name("Default").experiment_id
    run = client.create_run(experiment, run_name=name, tags=tags)
    client.set_terminated(run.info.run_id)
    return run.info.run_id


def test_compare_runs_lines_up_audits(store):
    first = a_run("M1 · ema · ema-target v1", **{keys.TAG_RUN_KIND: keys.RUN_KIND_AUDIT, keys.TAG_VERDICT: "memorized"})
    legacy = a_run("M6", **{keys.TAG_VERDICT: "not_memorized"})  # logged before the run-kind tag: its verdict says
    table = compare_runs([first, legacy])
    assert list(table.columns) == [first[:8], legacy[:8]]
    assert table.loc["verdict"].tolist() == ["memorized", "not_memorized"]


@pytest.mark.parametrize(
    ("name", "tags", "what"),
    [
        ("train mlp ema-target", {}, r"\(named 'train mlp ema-target'\)"),
        ("grid paper", {PROJECT_ENTRY_POINT_TAG: "grid"}, r"\(named 'grid paper', entry point 'grid'\)"),
        ("calibrate k=100", {keys.TAG_PARENT_RUN: "f" * 32}, rf"\(named 'calibrate k=100', nested in run {'f' * 32}\)"),
    ],
)
def test_compare_runs_refuses_a_run_that_is_not_an_audit_naming_what_it_is(store, name, tags, what):
    audit = a_run("M1 · ema · ema-target v1", **{keys.TAG_RUN_KIND: keys.RUN_KIND_AUDIT})
    other = a_run(name, **tags)
    refusal = rf"expected runs of `ema audit`, got run {other} {what}, which is not an audit"
    with pytest.raises(InputError, match=refusal):
        compare_runs([audit, other])
    refused = CliRunner().invoke(main, ["compare", audit, other])
    assert refused.exit_code == 3 and "Traceback" not in refused.output
    assert refused.output.startswith(f"Error: expected runs of `ema audit`, got run {other} ("), refused.output
    assert "compare the audit runs `ema history --model NAME` lists" in refused.output


def test_compare_runs_refuses_an_evaluation_run_naming_the_audit_it_mirrors(store):
    audit = a_run("M1 · ema · ema-target v1", **{keys.TAG_RUN_KIND: keys.RUN_KIND_AUDIT})
    mirror = a_run("evaluate", **{keys.TAG_RUN_KIND: keys.RUN_KIND_AUDIT, keys.TAG_AUDIT_RUN: audit})
    with pytest.raises(InputError, match=rf"it mirrors the results of audit run {audit}: compare that one"):
        compare_runs([mirror])


def an_audit_with(method: str, metrics: dict[str, float]) -> str:
    """A finished audit run of ``method`` (its methods tagged as ``ema.methods``) logging ``metrics``."""
    client = MlflowClient()
    experiment = client.get_experiment_by_name("Default").experiment_id
    tags = {keys.TAG_RUN_KIND: keys.RUN_KIND_AUDIT, keys.TAG_METHODS: method.replace("+", ",")}
    run = client.create_run(experiment, tags=tags)
    for key, value in metrics.items():
        client.log_metric(run.info.run_id, key, value)
    client.set_terminated(run.info.run_id)
    return run.info.run_id


def test_compare_runs_shows_a_metric_two_methods_share_per_method_never_bare(store):
    """EMA's flag rate and the calibrated auditor's are two numbers: a row holds one method's in every run."""
    combined = an_audit_with(
        "ema+calibrated", {"flag_rate": 0.971, "flag_rate.ema": 0.971, "flag_rate.calibrated": 0.678}
    )
    calibrated = an_audit_with("calibrated", {"flag_rate": 0.678, "flag_rate.calibrated": 0.678})
    table = compare_runs([combined, calibrated])
    assert "metric flag_rate" not in table.index
    assert table.loc["metric flag_rate.ema"].tolist() == [0.971, ""]
    assert table.loc["metric flag_rate.calibrated"].tolist() == [0.678, 0.678]


def test_compare_runs_reads_a_run_logged_before_every_methods_flag_rate_was_kept(store):
    """Such a run has the bare key (its first method's) and a later method's only where the values differed."""
    old = an_audit_with("ema+calibrated", {"flag_rate": 0.5, "n_query": 200.0, "n_query.calibrated": 100.0})
    table = compare_runs([old])
    assert table.loc["metric flag_rate.ema"].tolist() == table.loc["metric flag_rate.calibrated"].tolist() == [0.5]
    assert table.loc["metric n_query.ema"].tolist() == [200.0] and table.loc["metric n_query.calibrated"].tolist() == [
        100.0
    ]


def a_trail_record(query: str, fingerprint: str, run_id: str) -> str:
    verdict = {"method": "ema", "verdict": "memorized", "rho_ema": 0.01}
    return trail_record(query, fingerprint, "ema", [verdict], {"n_query": 200.0}, {}, run_id, time.gmtime())


def test_version_trail_lists_an_audit_of_the_same_data_under_another_name(store):
    """The evaluator's audits are named ``dataset``: one of M1's rows (M1's fingerprint) is listed under M1's."""
    client = MlflowClient()
    client.create_registered_model("ema-target")
    version = client.create_model_version("ema-target", source=str(Path.cwd()))
    for name, fingerprint, run_id in (("M1", "96210f35aa", "r1"), ("dataset", "96210f35aa", "r2"), ("M6", "7", "r3")):
        tag = f"{keys.TAG_AUDIT_PREFIX}{name}.2026-01-01T00:00:0{run_id[1]}Z.{run_id}"
        client.set_model_version_tag("ema-target", version.version, tag, a_trail_record(name, fingerprint, run_id))
    trail = version_trail("ema-target", query="M1")
    assert trail[["query", "data", "run_id"]].values.tolist() == [
        ["M1", "200 96210f35", "r1"],
        ["dataset", "200 96210f35", "r2"],
    ]
    assert version_trail("ema-target", query="dataset")["run_id"].tolist() == ["r1", "r2"]
