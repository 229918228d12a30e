"""Certifying removal on a trained target: `ema power --certify` and `ema audit --margin auto`."""

from __future__ import annotations

import json
import math
import re

import mlflow
import numpy as np
import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from ema.data.files import write_set
from ema.data.presets import load_splits
from ema.stats.certify import MIN_CERTIFY_PROBABILITY, CertifyPlan
from ema.tracking import keys
from ema.workflows.audit import AuditConfig, audit
from ema_cli.cli import main
from ema_cli.power import MIN_CERTIFY_POWER

PLAN_KEYS = {"query_size", "reference_size", "reachable", "information", "smallest_reachable_margin", "margin"}
PLAN_KEYS |= {"information_lower"}


def power(*args: str):
    return CliRunner().invoke(main, ["power", *args])


def shown_plan(monkeypatch, *, margin: float, reference_size: int = 1000, **fields):
    """What `ema power --certify --margin M` prints of an unreachable plan with ``fields`` (no model is read)."""
    plan = CertifyPlan(
        margin=margin, reachable=False, query_size=None, reference_size=reference_size, certify_level=0.95,
        probability=0.9, **fields,
    )  # fmt: skip
    monkeypatch.setattr("ema.workflows.power.certification_plan", lambda **_: plan)
    monkeypatch.setattr("ema_cli.options.configure", lambda experiment, **_: None)
    shown = power("--model", "models:/m/1", "--certify", "--margin", f"{margin:g}")
    assert shown.exit_code == 0, shown.output
    return shown


def test_power_certify_json_gives_the_sizes_of_a_reachable_margin(trained):
    _, outcome = trained
    shown = power("--model", outcome.version.uri, "--certify", "--margin", "0.95", "--json")
    assert shown.exit_code == 0, shown.output
    plan = json.loads(shown.output)
    assert PLAN_KEYS <= set(plan) and plan["reachable"] is True
    assert plan["query_size"] >= 1 and plan["reference_size"] >= 1000 and plan["information"] > 0
    assert plan["certify_level"] == 0.95 and plan["probability"] == 0.9
    assert 0 < plan["information_lower"] < plan["information"]  # planned from the bound, as an audit's margin


def test_power_certify_plans_for_the_probability_power_asks(trained):
    _, outcome = trained
    plans = {}
    for wanted in ("0.9", "0.97"):
        shown = power("--model", outcome.version.uri, "--certify", "--margin", "0.95", "--power", wanted, "--json")
        assert shown.exit_code == 0, shown.output
        plans[wanted] = json.loads(shown.output)
    assert plans["0.97"]["probability"] == 0.97
    # certifying more often takes at least as many samples, and more in all
    assert plans["0.97"]["query_size"] >= plans["0.9"]["query_size"]
    sizes = {wanted: plan["query_size"] + plan["reference_size"] for wanted, plan in plans.items()}
    assert sizes["0.97"] > sizes["0.9"]


def test_power_certify_says_an_unreachable_margin_is_unreachable_and_names_the_smallest(trained):
    _, outcome = trained
    shown = power("--model", outcome.version.uri, "--certify", "--margin", "0.001")
    assert shown.exit_code == 0, shown.output
    assert "margin 0.001 is unreachable on this target: the smallest reachable margin is" in shown.output
    as_json = json.loads(power("--model", outcome.version.uri, "--certify", "--margin", "0.001", "--json").output)
    assert as_json["reachable"] is False and as_json["query_size"] is None
    assert f"{as_json['smallest_reachable_margin']:.3f}" in shown.output and "and probability 0.9;" in shown.output


def test_power_certify_options_need_each_other():
    assert "--certify needs --margin M" in power("--certify").output
    assert "expected --margin, --json with --certify" in power("--margin", "0.3", "--json").output
    assert "got it without --certify" in power("--json").output
    refused = power("--certify", "--margin", "0.3", "--certify-level", "0.5").output
    assert "expected a number strictly between 0.5 and 1, got '0.5'" in refused


def test_power_certify_refuses_a_power_below_one_half_as_an_option_naming_its_range():
    """--help offers 0<x<1 for --power; --certify plans for at least 0.5: a usage error naming --power, not an
    input error about "a probability of certifying"."""
    refused = power("--certify", "--margin", "0.3", "--power", "0.3")
    assert refused.exit_code == 2
    assert (
        "expected --power in the range 0.5<=x<1 with --certify (the probability of certifying a removed set), got 0.3"
    ) in refused.output
    assert "with --certify, of certifying a removed set, then 0.5<=x<1." in " ".join(power("--help").output.split())
    assert MIN_CERTIFY_POWER == MIN_CERTIFY_PROBABILITY  # the option's range is the planner's


@pytest.mark.parametrize(
    ("information", "information_lower", "expected"),
    [
        (
            0.0,
            0.0,
            "(estimate 0): the target scores the member and non-member references alike, so no query size certifies",
        ),
        (0.02, 0.0, "the estimate, 0.02 per sample, has a lower bound of 0; larger --members and --reference files"),
    ],
)
def test_power_certify_without_information_says_no_margin_is_reachable_and_why(
    monkeypatch, information, information_lower, expected
):
    """A plan from no information reaches no margin at any size: said so, not as "the smallest reachable margin is
    inf"."""
    shown = shown_plan(
        monkeypatch, margin=0.5, smallest_reachable_margin=math.inf, information=information,
        information_lower=information_lower,
    )  # fmt: skip
    assert shown.output.startswith(
        "margin 0.5 is unreachable on this target: no margin is reachable, as the references carry no information "
        "about membership"
    )
    assert expected in shown.output and not re.search(r"\binf\b", shown.output)


def test_power_certify_says_none_below_1_where_the_smallest_reachable_margin_is_1(monkeypatch):
    """A floor of 1 (the planner's cap: a retained share is at most 1) is no reachable margin: said as the audit says
    it, not as "the smallest reachable margin is 5.31"."""
    shown = shown_plan(
        monkeypatch, margin=0.3, reference_size=150, smallest_reachable_margin=1.0, information=0.0432,
        information_lower=0.00084,
    )  # fmt: skip
    assert shown.output.startswith(
        "margin 0.3 is unreachable on this target: no margin below 1 is reachable (with a reference of 150, an "
        "unbounded query and probability 0.9; planned from the information's lower bound 0.00084 per sample"
    )
    assert "smallest reachable margin is" not in shown.output


class Uniform(mlflow.pyfunc.PythonModel):
    """A model that says nothing: the same probabilities for every image."""

    def predict(self, context, model_input, params=None):
        return np.full((len(model_input), 10), 0.1)


def test_power_certify_on_references_scored_alike_plans_with_no_information_and_says_so(trained, tmp_path):
    splits = load_splits()
    files = [str(write_set(splits.query(name).take(np.arange(200)), tmp_path / f"{name}.npz")) for name in ("M2", "M6")]
    with mlflow.start_run(run_name="a model that says nothing"):
        example = np.zeros((2, 28, 28), np.uint8)
        info = mlflow.pyfunc.log_model(
            name="model", python_model=Uniform(), input_example=example, registered_model_name="uniform"
        )
    options = ("--model", f"models:/uniform/{info.registered_model_version}", "--members", files[0], "--reference",
               files[1], "--certify", "--margin", "0.5")  # fmt: skip
    shown = power(*options)
    assert shown.exit_code == 0, shown.output
    assert shown.output.strip() == (
        "margin 0.5 is unreachable on this target: no margin is reachable, as the references carry no information "
        "about membership: their scores did not vary, so it is not estimable; a target that scores members and "
        "non-members alike cannot be certified"
    )
    plan = json.loads(power(*options, "--json").output)
    assert plan["information"] is None and plan["information_lower"] is None and plan["reachable"] is False
    assert plan["smallest_reachable_margin"] == 1.0  # none below 1, as the audit's certifiable_margin says it
    logged = MlflowClient().search_runs([mlflow.get_experiment_by_name("ema").experiment_id], max_results=1)[0]
    assert "information" not in logged.data.metrics and "smallest_reachable_margin" in logged.data.metrics


def test_audit_at_margin_auto_certifies_at_its_certifiable_margin_and_records_the_level(trained):
    _, outcome = trained
    result = audit(
        AuditConfig(model_uri=outcome.version.uri, query="S", method="calibrated", margin="auto"), progress=False
    )
    run = MlflowClient().get_run(result.run_id).data
    certifiable = run.metrics["certifiable_margin"]
    assert 0 < certifiable <= 1 and run.metrics["information"] > 0 and "retained_upper_bound" in run.metrics
    assert 0 <= run.metrics["information_lower"] < run.metrics["information"]
    assert run.params[keys.PARAM_MARGIN] == "auto" and run.params[keys.PARAM_CERTIFY_LEVEL] == "0.95"
    assert result.primary.thresholds["certify"]["margin_used"] == certifiable
    # other-domain digits: the bound lies far below the margin, so auto certifies them
    assert result.primary.verdict == "not_memorized"


def test_strict_turns_a_warned_certificate_inconclusive_and_its_evidence_says_so_first(trained):
    """Other-domain digits are certified removed with warnings; under --strict the evidence must not read
    "certified: ..." beneath an inconclusive verdict (the report and the command line both show it)."""
    _, outcome = trained
    config = AuditConfig(model_uri=outcome.version.uri, query="S", method="calibrated", margin="auto", strict=True)
    result = audit(config, progress=False)
    evidence = result.primary.thresholds["evidence"]
    assert result.primary.verdict == "inconclusive" and result.warnings
    assert evidence.startswith(f"inconclusive under --strict ({len(result.warnings)} warning(s): the verdict is ")
    assert "; without --strict: certified: at most " in evidence
