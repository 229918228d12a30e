"""`ema audit --augment shifts` on a trained target: nine views through the same oracle, recorded and reported."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from ema.errors import InputError
from ema.tracking import keys
from ema.workflows.audit import AuditConfig, audit
from ema_cli.cli import main


def test_audit_with_shifts_scores_nine_views_and_says_what_they_bought(trained):
    _, outcome = trained
    config = AuditConfig(model_uri=outcome.version.uri, query="M1", method="calibrated", augment="shifts")
    result = audit(config, progress=False)
    primary = result.primary
    assert primary.thresholds["n_views"] == 9 and primary.verdict == "memorized"
    assert primary.metrics["information"] > 0 and primary.metrics["information_single_view"] > 0
    assert 0 < primary.metrics["certifiable_margin_single_view"] <= 1
    run = MlflowClient().get_run(result.run_id).data
    assert run.params[keys.PARAM_AUGMENT] == "shifts"
    assert "54,000 oracle queries instead of 6,000" in run.tags[keys.TAG_AUGMENT_COST]
    assert "certifiable_margin_single_view" in run.metrics
    last = json.loads(
        MlflowClient().get_model_version(outcome.version.name, outcome.version.version).tags[keys.TAG_LAST_AUDIT]
    )
    assert last["options"]["augment"] == "shifts"
    report = MlflowClient().download_artifacts(result.run_id, "report.html")
    with open(report, encoding="utf-8") as page:
        html = page.read()
    assert "With shifted queries (--augment shifts): certifiable margin" in html
    assert "--augment shifts" in html and "would lower the floor to" in html


def test_audit_cli_prints_the_cost_of_shifts_before_scoring(trained):
    _, outcome = trained
    words = "audit --query S --method calibrated --augment shifts --no-progress --model".split()
    shown = CliRunner().invoke(main, [*words, outcome.version.uri])
    assert shown.exit_code == 0, shown.output
    cost = "--augment shifts: 9 views of each sample (query 1,000, members 5,000, non-members 1,000): 63,000"
    assert cost in shown.stderr and "calibrated: p_removed" in shown.stdout


def test_audit_without_shifts_logs_augment_none_and_says_shifts_must_be_measured(trained):
    _, outcome = trained
    result = audit(AuditConfig(model_uri=outcome.version.uri, query="M6", method="calibrated"), progress=False)
    assert MlflowClient().get_run(result.run_id).data.params[keys.PARAM_AUGMENT] == "none"
    assert "information_single_view" not in result.primary.metrics
    html = open(MlflowClient().download_artifacts(result.run_id, "report.html"), encoding="utf-8").read()
    assert "must be measured with --augment shifts" in html


def test_augment_with_a_method_without_the_calibrated_auditor_is_refused_in_one_line(trained):
    _, outcome = trained
    with pytest.raises(InputError, match=r"expected --augment shifts with a method that runs the calibrated auditor"):
        audit(AuditConfig(model_uri=outcome.version.uri, query="M1", method="ema", augment="shifts"), progress=False)
    shown = CliRunner().invoke(main, ["audit", "--model", outcome.version.uri, "--query", "M1", "--augment", "rot"])
    assert shown.exit_code != 0 and "'rot' is not one of 'none', 'shifts'" in shown.output
