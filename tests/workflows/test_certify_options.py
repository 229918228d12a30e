"""`--margin` and `--certify-level` where they change a verdict, and only there: refusals, records, plans."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from ema.errors import InputError
from ema.tracking import keys
from ema.tracking.history import audit_history
from ema.workflows.audit import AuditConfig, audit
from ema.workflows.evaluation import audit_config, check_evaluator_config
from ema_cli.cli import main


def ema(*args: str):
    return CliRunner().invoke(main, list(args))


def run_ids() -> set[str]:
    client = MlflowClient()
    experiments = [e.experiment_id for e in client.search_experiments()]
    return {run.info.run_id for run in client.search_runs(experiments, max_results=10_000)}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--method", "ema", "--margin", "0.3"], "expected --margin with a method that certifies a margin"),
        (["--method", "ks-ratio", "--margin", "auto"], "got --margin auto with --method ks-ratio"),
        (["--method", "ema", "--certify-level", "0.9"], "expected --certify-level with a method that certifies"),
        (["--method", "ema", "--augment", "shifts"], "expected --augment shifts with a method that runs"),
    ],
)
def test_an_option_the_method_does_not_use_is_refused_before_any_run(trained, args, message):
    _, outcome = trained
    before = run_ids()
    refused = ema("audit", "--model", outcome.version.uri, "--query", "M6", "--no-progress", *args)
    assert refused.exit_code == 3, refused.output
    assert message in refused.output and "Traceback" not in refused.output
    assert run_ids() == before  # nothing started, so nothing left FAILED


@pytest.mark.parametrize("level", ["0.5", "0.2"])
def test_a_certify_level_at_or_below_one_half_is_refused_in_one_line(trained, level):
    _, outcome = trained
    refused = ema(
        "audit", "--model", outcome.version.uri, "--query", "M6", "--method", "calibrated", "--certify-level", level
    )
    expected = f"expected a number strictly between 0.5 and 1, got {level!r}"
    assert refused.exit_code == 2 and expected in refused.output, refused.output
    with pytest.raises(InputError, match=r"certify level in \(0.5, 1\)"):
        AuditConfig(
            model_uri=outcome.version.uri, query="M6", method="calibrated", certify_level=float(level)
        ).validate()


def test_an_audit_refused_on_its_data_is_named_and_listed_with_its_model(trained, tmp_path):
    _, outcome = trained
    empty = tmp_path / "empty.npz"
    np.savez(empty, x=np.zeros((0, 28, 28), np.uint8), y=np.zeros(0, np.int64))
    refused = ema("audit", "--model", outcome.version.uri, "--query-file", str(empty), "--no-progress")
    assert refused.exit_code == 3, refused.output
    listed = audit_history(outcome.version.name, include_all=True)
    failed = listed[listed["status"] == "FAILED"]
    assert "empty.npz" in set(failed["query"]), listed
    run = MlflowClient().get_run(failed[failed["query"] == "empty.npz"]["run_id"].iloc[0])
    assert run.info.run_name.startswith("empty · ema · ")  # the file's name, its suffix left out
    assert MlflowClient().list_artifacts(run.info.run_id) == []
    why = failed[failed["query"] == "empty.npz"]["error"].iloc[0]
    assert why == run.data.tags[keys.TAG_ERROR] and why in refused.output  # the error printed is the one listed
    shown = ema("history", "--model", outcome.version.name, "--all")
    assert shown.exit_code == 0 and why[:40] in shown.output and "error" in shown.output.splitlines()[0]
    assert "error" not in ema("history", "--model", outcome.version.name).output.splitlines()[0]


def test_runs_and_trail_record_the_margin_and_level_a_method_certified_with(trained):
    _, outcome = trained
    uri, version = outcome.version.uri, outcome.version
    plain = audit(AuditConfig(model_uri=uri, query="M6", method="ema"), progress=False)
    auto = audit(
        AuditConfig(
            model_uri=uri, query="M6", method="ema+calibrated", margin="auto", certify_level=0.99, figures=False
        ),
        progress=False,
    )
    client = MlflowClient()
    assert client.get_run(plain.run_id).data.params[keys.PARAM_MARGIN] == ""  # ema certifies no margin
    assert client.get_run(plain.run_id).data.params[keys.PARAM_CERTIFY_LEVEL] == ""
    run = client.get_run(auto.run_id).data
    assert run.params[keys.PARAM_MARGIN] == "auto" and run.params[keys.PARAM_CERTIFY_LEVEL] == "0.99"
    # a metric two methods share is logged per method; the unprefixed key holds the first one's value
    ema_rate, calibrated_rate = (auto.results[m].metrics["flag_rate"] for m in ("ema", "calibrated"))
    assert ema_rate != calibrated_rate
    assert run.metrics["flag_rate"] == run.metrics["flag_rate.ema"] == ema_rate
    assert run.metrics["flag_rate.calibrated"] == calibrated_rate
    tags = client.get_model_version(version.name, version.version).tags
    records = [json.loads(v) for k, v in tags.items() if k.startswith(keys.TAG_AUDIT_PREFIX)]
    by_run = {record["run_id"]: record["options"] for record in records}
    assert by_run[plain.run_id]["margin"] is None and by_run[plain.run_id]["level"] is None
    used = auto.results["calibrated"].thresholds["certify"]["margin_used"]
    assert by_run[auto.run_id]["margin"] == f"auto {used:.3g}" and by_run[auto.run_id]["level"] == 0.99
    compared = ema("compare", "--model", version.name, "--query", "M6")
    assert compared.exit_code == 0 and f"auto {used:.3g}" in compared.output and "0.99" in compared.output


def test_audit_prints_headline_numbers_and_history_every_methods_verdict(trained):
    """The audit's lines keep the attack-strength metrics to one line of AUCs; ``ema history`` shows a combination's
    second verdict beside the first and ``-`` for a number a method does not log (a calibrated audit's rho_EMA)."""
    _, outcome = trained
    uri, name = outcome.version.uri, outcome.version.name
    both = ema("audit", "--model", uri, "--query", "M6", "--method", "ema+calibrated", "--no-figures", "--no-progress")
    assert both.exit_code == 0, both.output
    verdict_line = next(line for line in both.output.splitlines() if line.startswith("  ema: rho_ema"))
    assert "mia_auc" not in verdict_line and "tpr_at_fpr" not in verdict_line
    auc_line = next(line for line in both.output.splitlines() if "attack AUC" in line)
    assert auc_line.startswith("  ema: attack AUC where membership is known: correctness ")
    run_id = both.output.split("run ")[1].split(")")[0]
    tags = MlflowClient().get_run(run_id).data.tags
    verdicts = {m: tags[f"verdict.{m}"] for m in ("ema", "calibrated")}
    assert tags["ema.methods"] == "ema,calibrated"  # the plan's order: history reads the others from it
    trail = json.loads(MlflowClient().get_model_version(name, outcome.version.version).tags[keys.TAG_LAST_AUDIT])
    assert trail["run_id"] == run_id and {"certifiable_margin", "mia_auc.calibrated"} <= set(trail["results"][1])
    alone = audit(AuditConfig(model_uri=uri, query="M6", method="calibrated", figures=False), progress=False)
    listed = ema("history", "--model", name, "--query", "M6")
    assert listed.exit_code == 0, listed.output
    rows = {line.split()[2]: line.split() for line in listed.output.splitlines()[1:]}
    assert " ".join(rows[run_id][8:-1]) == f"{verdicts['ema']} (calibrated {verdicts['calibrated']})"
    assert rows[alone.run_id][6:8] == ["-", "-"] and rows[alone.run_id][-2] == alone.primary.verdict


def test_power_plans_within_a_reference_smaller_than_today(trained):
    _, outcome = trained
    shown = ema(
        "power", "--model", outcome.version.uri, "--certify", "--margin", "0.95", "--max-reference", "200", "--json"
    )
    assert shown.exit_code == 0, shown.output
    plan = json.loads(shown.output)
    assert plan["reference_size"] <= 200


def test_the_evaluator_takes_margin_auto_and_a_certify_level(trained, tmp_path):
    _, outcome = trained
    config = check_evaluator_config({"method": "calibrated", "margin": "auto", "certify_level": 0.9})
    built = audit_config(outcome.version.uri, str(tmp_path / "q.npz"), config)
    assert built.margin == "auto" and built.certify_level == 0.9
    with pytest.raises(InputError, match="expected ema evaluator config key 'margin' as a number or 'auto'"):
        check_evaluator_config({"margin": "0.3"})
