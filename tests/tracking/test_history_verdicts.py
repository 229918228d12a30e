"""``ema history``'s verdict column: the run's verdict, then each other method's, in the plan's order; and
``--verdict V``, which lists the audits where any method said V."""

from __future__ import annotations

from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from ema.tracking import keys
from ema.tracking.history import audit_history, verdicts_text
from ema_cli.cli import main


def tags(methods: str | None, **verdicts: str) -> dict[str, str]:
    found = {f"{keys.TAG_VERDICT}.{name.replace('_', '-')}": verdict for name, verdict in verdicts.items()}
    first = next(iter(verdicts.values()))
    return {keys.TAG_VERDICT: first, **found, **({keys.TAG_METHODS: methods} if methods else {})}


def test_both_shows_the_ks_ratio_verdict_beside_emas():
    both = tags("ema,ks-ratio", ema="memorized", ks_ratio="not_memorized")
    assert verdicts_text(both, "both") == "memorized (ks-ratio not_memorized)"


def test_a_combination_lists_its_other_methods_and_a_single_method_none():
    combined = tags("ema,calibrated", ema="memorized", calibrated="inconclusive")
    assert verdicts_text(combined, "ema+calibrated") == "memorized (calibrated inconclusive)"
    assert verdicts_text(tags("calibrated", calibrated="inconclusive"), "calibrated") == "inconclusive"


def test_a_run_logged_before_the_methods_tag_is_read_from_its_method_name():
    old = tags(None, ema="memorized", calibrated="inconclusive")
    assert verdicts_text(old, "ema+calibrated") == "memorized (calibrated inconclusive)"


def an_audit(method: str, **verdicts: str) -> str:
    """A finished audit run of ``ema-target`` v1 on M1 by ``method``, each of its methods' verdict tagged."""
    client = MlflowClient()
    experiment = client.get_experiment_by_name("Default").experiment_id
    run = client.create_run(experiment, tags={keys.TAG_RUN_KIND: keys.RUN_KIND_AUDIT, **tags(None, **verdicts)})
    for key, value in {keys.PARAM_MODEL_NAME: "ema-target", keys.PARAM_QUERY: "M1", keys.PARAM_METHOD: method}.items():
        client.log_param(run.info.run_id, key, value)
    client.set_terminated(run.info.run_id)
    return run.info.run_id


def test_audit_history_verdict_finds_an_audit_where_a_later_method_said_it_naming_which(store):
    """An ema+calibrated audit whose run verdict (EMA's) is not_memorized, but whose calibrated auditor says
    memorized, is listed by ``--verdict memorized``, with ``said_by`` naming the calibrated auditor."""
    hidden = an_audit("ema+calibrated", ema="not_memorized", calibrated="memorized")
    both = an_audit("ema+calibrated", ema="memorized", calibrated="memorized")
    an_audit("ema", ema="not_memorized")
    table = audit_history("ema-target", verdict="memorized")
    assert table.set_index("run_id")["said_by"].to_dict() == {hidden: "calibrated", both: "ema, calibrated"}
    listed = CliRunner().invoke(main, ["history", "--model", "ema-target", "--verdict", "memorized"])
    assert listed.exit_code == 0 and hidden in listed.output and "said_by" in listed.output, listed.output
    assert "said_by" not in audit_history("ema-target").columns


def test_audit_history_verdict_reads_a_run_logged_before_the_per_method_tags_by_its_run_verdict(store):
    client = MlflowClient()
    old = an_audit("ema", ema="memorized")
    client.delete_tag(old, f"{keys.TAG_VERDICT}.ema")
    assert audit_history("ema-target", verdict="memorized")["said_by"].tolist() == ["ema"]
    assert audit_history("ema-target", verdict="not_memorized").empty
