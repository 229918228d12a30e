"""`ema audit --augment shifts` on a trained target: nine views through the same oracle, recorded and reported."""

from __future__ import annotations

import json
import math

import numpy as np
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


def latest_run(name_prefix: str):
    """The newest run whose name starts with ``name_prefix`` (a command's own run)."""
    runs = MlflowClient().search_runs(
        [exp.experiment_id for exp in MlflowClient().search_experiments()], order_by=["attributes.start_time DESC"]
    )
    return next(run for run in runs if run.info.run_name.startswith(name_prefix))


def test_power_certify_with_shifts_plans_from_nine_views_and_gives_the_identity_views_plan_beside(trained):
    _, outcome = trained
    words = ["power", "--model", outcome.version.uri, "--certify", "--margin", "0.95", "--no-progress"]
    shown = CliRunner().invoke(main, [*words, "--augment", "shifts", "--json"])
    assert shown.exit_code == 0, shown.output
    plan = json.loads(shown.stdout)
    assert plan["views"] == 9 and plan["single_view"]["views"] == 1 and plan["single_view"]["single_view"] is None
    plain = json.loads(CliRunner().invoke(main, [*words, "--json"]).stdout)
    # the identity view's plan is the plan without shifts, from the same references
    assert plan["single_view"]["information"] == pytest.approx(plain["information"])
    assert plan["single_view"]["query_size"] == plain["query_size"] and plain["views"] == 1
    assert plan["information"] != plain["information"]
    assert "54,000 oracle queries instead of 6,000" in shown.stderr
    run = latest_run("power --certify").data
    assert run.params[keys.PARAM_AUGMENT] == "none"  # the newest: the plain plan
    text = CliRunner().invoke(main, [*words, "--augment", "shifts"])
    assert text.exit_code == 0, text.output
    with_shifts, without = text.stdout.strip().splitlines()
    assert with_shifts.startswith("with the shifts (9 views), certifying a retained share of at most 0.95")
    assert without.startswith("without the shifts (the identity view alone), certifying")
    run = latest_run("power --certify").data
    assert run.params[keys.PARAM_AUGMENT] == "shifts" and keys.TAG_AUGMENT_COST in run.tags
    # the identity view's plan is on record too, its information named as an audit names it
    assert run.metrics["information_single_view"] == pytest.approx(plain["information"])
    assert run.metrics["certify_query_size_single_view"] == plain["query_size"]
    assert run.metrics["information"] == pytest.approx(plan["information"])
    assert run.metrics["information_lower"] == pytest.approx(plan["information_lower"])
    assert run.metrics["information_single_view_lower"] == pytest.approx(plain["information_lower"])


def test_power_with_shifts_plans_detection_on_nine_views_and_refuses_a_table(trained, tmp_path):
    _, outcome = trained
    words = ["power", "--model", outcome.version.uri, "--no-progress"]
    shown = CliRunner().invoke(main, [*words, "--augment", "shifts"])
    assert shown.exit_code == 0, shown.output
    assert "member-reference auditor's test" in shown.stdout and "oracle queries" in shown.stderr
    shifted = latest_run("power").data
    assert shifted.params[keys.PARAM_AUGMENT] == "shifts"
    plain = CliRunner().invoke(main, words)
    assert plain.exit_code == 0, plain.output
    # the 9 views give another score, so another power curve (the same references and seed otherwise)
    assert shifted.metrics[keys.METRIC_POWER_REACHED] != latest_run("power").data.metrics[keys.METRIC_POWER_REACHED]
    table = tmp_path / "rows.csv"
    table.write_text("a,b,label\n1,2,0\n3,4,1\n")
    for plan in ([], ["--certify", "--margin", "0.5"]):  # detection and certification alike
        refused = CliRunner().invoke(main, [*words, *plan, "--augment", "shifts", "--members", str(table)])
        assert refused.exit_code != 0
        assert "expected images with --augment shifts (it moves pixels), got table of 2 features" in refused.output


def test_augment_without_a_member_reference_is_refused_naming_members_and_a_table_as_a_table():
    from ema.data.arrays import ArraySet
    from ema.workflows.views import check_members_known, check_shiftable

    images = ArraySet("q", np.zeros((2, 4, 4), np.uint8), np.zeros(2, np.int64), np.arange(2))
    rows = ArraySet("rows", np.zeros((2, 3), np.float32), np.zeros(2, np.int64), np.arange(2))
    check_members_known("none", False, "t")  # nothing to refuse without shifts
    check_shiftable("none", rows)
    check_shiftable("shifts", images)
    with pytest.raises(InputError, match=r"expected a member reference with --augment shifts .* got none known "):
        check_members_known("shifts", False, "target t")
    with pytest.raises(InputError, match=r"expected images with --augment shifts \(it moves pixels\), got table"):
        check_shiftable("shifts", rows)


def test_power_certify_json_writes_no_nan_inside_the_identity_views_plan(monkeypatch):
    from ema.stats.certify import CertifyPlan

    common = {"margin": 0.3, "reference_size": 1000, "certify_level": 0.95, "probability": 0.9}
    single = CertifyPlan(reachable=False, query_size=None, smallest_reachable_margin=math.inf, information=math.nan,
                         information_lower=math.nan, **common)  # fmt: skip
    plan = CertifyPlan(reachable=True, query_size=500, smallest_reachable_margin=0.2, information=0.2,
                       information_lower=0.15, views=9, single_view=single, **common)  # fmt: skip
    monkeypatch.setattr("ema.workflows.power.certification_plan", lambda **_: plan)
    monkeypatch.setattr("ema_cli.options.configure", lambda experiment, **_: None)
    words = ["power", "--model", "models:/m/1", "--certify", "--margin", "0.3", "--augment", "shifts"]

    def refuse(constant):
        raise AssertionError(f"{constant} in the JSON")

    as_json = json.loads(CliRunner().invoke(main, [*words, "--json"]).stdout, parse_constant=refuse)
    assert as_json["single_view"]["information"] is None and as_json["single_view"]["smallest_reachable_margin"] is None
    text = CliRunner().invoke(main, words).stdout.splitlines()
    assert text[0].startswith("with the shifts (9 views), certifying") and "|D_q| >= 500" in text[0]
    assert text[1].startswith("without the shifts (the identity view alone), margin 0.3 is unreachable")
    assert "not estimable" in text[1]
