"""The method table: its rows, what is derived from them, and a test-only toy method registered through it.

The toy shows all that adding a method takes: an auditor (``ToyAuditor``, which the common
test list in ``tests/core/test_check_auditor.py`` checks with ``check_auditor``) and one
``MethodSpec`` row (:func:`toy_spec`). Nothing else is touched, and the toy appears in
``ema audit --help``, runs through the audit workflow and the CLI, and renders in report.html.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from ema.auditors import VERDICTS
from ema.auditors.metrics import CHECK, ESTIMATE, POWER, PVALUE, Metric
from ema.errors import InputError
from ema.oracle import ACCESS_LABEL_ONLY, ACCESS_PROBABILITIES
from ema.tracking import keys
from ema.workflows.audit import AuditConfig, audit
from ema.workflows.audit_methods import run_on_references
from ema.workflows.engines import ENGINE_IN_PROCESS, ENGINE_SPARK
from ema.workflows.method_rows import Combination, MethodSpec
from ema.workflows.methods import (
    FLAG_RATE,
    METHODS,
    check_access,
    method_engines,
    method_help,
    method_plan,
    method_spec,
    methods_running,
    metric_vocabulary,
    needs_calibration_model,
    register_method,
    unregister_method,
)
from tests.core.test_check_auditor import BUILT_IN_AUDITORS, ToyAuditor
from tests.workflows.conftest import probe_output

TOY_MEANING = "p-value of the toy's binomial test: more than half of the query above the non-members' median"


def toy_spec() -> MethodSpec:
    """The toy method's row: the one line of the table a new method adds."""
    return MethodSpec(
        name=ToyAuditor.method,
        help="a test-only toy: confidences above the non-members' median",
        auditors=(ToyAuditor,),
        runner=run_on_references(lambda config: ToyAuditor(alpha=config.alpha)),
        metrics=(Metric("p_flagged", PVALUE, TOY_MEANING), FLAG_RATE),
    )


@pytest.fixture
def toy_method():
    """The toy registered in the method table for one test, removed after."""
    spec = register_method(toy_spec())
    yield spec
    unregister_method(spec.name)


# --------------------------------------------------------------------------- the built-in rows


def test_method_names_and_help_come_from_the_table_in_its_order():
    assert tuple(METHODS) == ("ema", "ks-ratio", "both", "calibrated", "ema+calibrated", "marks")
    assert method_help() == (
        "ema (the paper), ks-ratio (Liu & Tsaftaris), both (ema and ks-ratio in one run), calibrated "
        "(tests removed and retained, may say inconclusive), ema+calibrated (both, EMA's verdict), "
        "marks (an owner's secret mark, with --mark-key)."
    )


def test_method_plan_runs_a_combinations_parts_in_order():
    assert method_plan("ema") == ("ema",)
    assert method_plan("both") == ("ema", "ks-ratio")
    assert method_plan("ema+calibrated") == ("ema", "calibrated")


def test_methods_running_names_every_method_whose_plan_runs_it():
    assert methods_running("ema") == ("ema", "both", "ema+calibrated")
    assert methods_running("ks-ratio") == ("ks-ratio", "both")


def test_method_engines_of_a_combination_are_those_all_its_parts_run_on():
    assert method_engines("ema") == (ENGINE_IN_PROCESS, ENGINE_SPARK)
    assert method_engines("both") == (ENGINE_IN_PROCESS,)


def test_check_access_refuses_label_only_models_for_methods_needing_probabilities():
    check_access("ema", ACCESS_LABEL_ONLY)
    check_access("ema+calibrated", ACCESS_PROBABILITIES)
    expected = (
        f"method 'ks-ratio' needs class probabilities, got a {ACCESS_LABEL_ONLY} model; use --method ema or marks$"
    )
    with pytest.raises(InputError, match=expected):
        check_access("both", ACCESS_LABEL_ONLY)


@pytest.mark.parametrize(
    ("method", "without_members", "with_members"),
    [
        ("ema", True, True),
        ("ks-ratio", True, True),
        ("calibrated", True, False),  # the transfer route reads the calibration model; a member reference does not
        ("ema+calibrated", True, True),
        ("marks", False, False),
    ],
)
def test_needs_calibration_model_says_which_plans_train_one(method, without_members, with_members):
    assert needs_calibration_model(method, members_file=False) is without_members
    assert needs_calibration_model(method, members_file=True) is with_members


def test_metric_vocabulary_gives_each_metric_its_kind():
    vocabulary = metric_vocabulary()
    kinds = {key: vocabulary[key].kind for key in ("rho_ema", "p_removed", "p_class_mix", "power_retained", "rho_ks")}
    assert kinds == {
        "rho_ema": PVALUE,
        "p_removed": PVALUE,
        "p_class_mix": CHECK,
        "power_retained": POWER,
        "rho_ks": ESTIMATE,
    }


def test_headline_is_the_first_metric_of_a_method():
    assert [method_spec(m).headline for m in ("ema", "ks-ratio", "calibrated")] == ["rho_ema", "rho_ks", "p_removed"]


def test_every_auditor_of_the_table_is_in_the_common_test_list():
    tested = {type(param.values[0]) for param in BUILT_IN_AUDITORS}
    singles = [name for name in METHODS if method_plan(name) == (name,)]
    assert {cls for name in singles for cls in method_spec(name).auditors} <= tested


# --------------------------------------------------------------------------- registering


def test_register_method_adds_a_live_row_and_unregister_removes_it():
    register_method(toy_spec())
    try:
        assert "toy" in METHODS and method_plan("toy") == ("toy",)
        assert "toy (a test-only toy" in method_help()
        assert metric_vocabulary()["p_flagged"].meaning == TOY_MEANING
    finally:
        unregister_method("toy")
    assert "toy" not in METHODS and "p_flagged" not in metric_vocabulary()


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (Combination(name="ema", help="again", parts=("ema",)), "expected a new method name, got 'ema'"),
        (Combination(name="ema+toy", help="x", parts=("ema", "toy")), "single methods of the table, got 'toy'"),
        (Combination(name="both+ema", help="x", parts=("both", "ema")), "single methods of the table, got 'both'"),
        (Combination(name="Ema Two", help="x", parts=("ema",)), "lowercase letters, digits, - and \\+, got 'Ema Two'"),
    ],
)
def test_register_method_refuses_a_bad_combination(row, message):
    with pytest.raises(InputError, match=message):
        register_method(row)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"name": "toy+1"}, "lowercase letters, digits and -, got 'toy\\+1'"),
        ({"engines": ("gpu",)}, "engines of method 'toy' among .*, got \\('gpu',\\)"),
        ({"metrics": ()}, "method 'toy' to declare its metrics, got none"),
        (
            {"metrics": (Metric("flag_rate", ESTIMATE, "something else"),)},
            "metric 'flag_rate' of method 'toy' to mean what the table says .* give a new metric a new name",
        ),
        ({"trail": ("p_flagged", "rho_ema")}, r"trail numbers of method 'toy' among its metrics, got \['rho_ema'\]"),
        ({"calibration_model": "sometimes"}, "calibration_model of method 'toy' in .*, got 'sometimes'"),
    ],
)
def test_register_method_refuses_a_bad_spec(changes, message):
    with pytest.raises(InputError, match=message):
        register_method(dataclasses.replace(toy_spec(), **changes))
    assert "toy" not in METHODS


@pytest.mark.parametrize(
    ("key", "kind", "message"),
    [
        ("toy_p", PVALUE, "p-value metric to be named p_\\* and nothing else, got 'toy_p' of kind 'p-value'"),
        ("p_share", ESTIMATE, "got 'p_share' of kind 'estimate'"),
        ("p_toy", "pvalue", "expected the kind of metric 'p_toy' in .*, got 'pvalue'"),
    ],
)
def test_metric_refuses_a_kind_its_name_contradicts(key, kind, message):
    with pytest.raises(InputError, match=message):
        Metric(key, kind, "meaning")


def test_unregister_method_refuses_an_unknown_name():
    with pytest.raises(InputError, match=r"expected method in .*, got 'nope'"):
        unregister_method("nope")


# --------------------------------------------------------------------------- the toy, end to end


def test_a_toy_method_registered_in_the_table_runs_and_renders_in_the_report(trained, toy_method, tmp_path):
    _, outcome = trained
    member = audit(AuditConfig(model_uri=outcome.version.uri, query="M1", method="toy"), progress=False)
    assert list(member.results) == ["toy"] and member.primary.method == "toy"
    verdict = member.primary.verdict
    client = MlflowClient()
    run = client.get_run(member.run_id)
    assert run.data.tags[keys.TAG_VERDICT] == run.data.tags[f"{keys.TAG_VERDICT}.toy"] == verdict
    assert run.data.metrics["p_flagged"] == pytest.approx(member.primary.metrics["p_flagged"])
    figures = {f.path for f in client.list_artifacts(member.run_id, keys.ARTIFACT_FIGURES_DIR)}
    assert figures == {f"{keys.ARTIFACT_FIGURES_DIR}/toy_scores.svg"}
    page = Path(client.download_artifacts(member.run_id, keys.ARTIFACT_REPORT, str(tmp_path))).read_text()
    pvalues = page.split('id="pvalues"')[1].split("</section>")[0]
    assert "p_flagged" in pvalues and "0.1" in pvalues and "toy&#x27;s binomial test" in pvalues
    assert "Decided by method <b>toy</b>" in page


#: Registers the toy (as a plug-in would, before the CLI is imported), then runs ``ema audit --help`` and
#: ``ema audit --method toy`` on the model given as the first argument, in one process.
PROBE = """
import sys
from ema.workflows.methods import register_method
from tests.workflows.test_methods import toy_spec
register_method(toy_spec())
from ema_cli.cli import main
main(["audit", "--help"], prog_name="ema", standalone_mode=False)
main(["audit", "--model", sys.argv[1], "--query", "M6", "--method", "toy", "--no-progress"], prog_name="ema")
"""


def test_a_toy_method_registered_in_the_table_is_offered_and_run_by_ema_audit(trained):
    _, outcome = trained
    words = probe_output(PROBE, outcome.version.uri)
    assert "--method [ema|ks-ratio|both|calibrated|ema+calibrated|marks|toy]" in words
    assert "toy (a test-only toy: confidences above the non-members' median)." in words
    assert "toy: p_flagged " in words and words.rsplit(" -> ", 1)[1] in VERDICTS


def test_trail_numbers_default_to_the_headline_and_keep_the_calibrated_interval():
    assert toy_spec().trail_numbers == ("p_flagged",)
    assert method_spec("ema").trail_numbers == ("rho_ema", "rho_ema_ks")
    assert {"p_removed", "retained_ci_low", "retained_ci_high"} <= set(method_spec("calibrated").trail_numbers)


def test_the_calibrated_auditors_shift_checks_are_checks_not_pvalues_compared_with_alpha():
    """They warn at their own level (0.01): the report marked p_too_forgotten 0.0499 "<= 0.1 (over-forgotten)"."""
    vocabulary = metric_vocabulary()
    assert {vocabulary[k].kind for k in ("p_too_forgotten", "p_class_mix", "p_mixture_fit")} == {CHECK}
    assert vocabulary["p_removed"].kind == PVALUE


def test_an_information_the_references_could_not_estimate_is_logged_as_nothing_and_printed_as_not_estimable(
    monkeypatch,
):
    """References scored alike estimate no information: the run logs no ``information`` metric (merged_metrics
    leaves NaN out, and `ema compare` shows it missing), and `ema audit` prints it as not estimable, not 0."""
    import numpy as np
    from click.testing import CliRunner

    import ema.workflows.audit
    from ema.auditors.reference import ReferenceAuditor
    from ema.workflows.audit import AuditOutcome, merged_metrics
    from ema_cli.cli import main

    labels = np.random.default_rng(0).integers(0, 3, 40)
    proba = np.full((40, 3), 1 / 3)
    auditor = ReferenceAuditor(n_permutations=100, n_power_resamples=100).calibrate(proba, labels, proba, labels)
    result = dataclasses.replace(auditor.audit(proba[:20], labels[:20]), method="calibrated")
    logged = merged_metrics({"calibrated": result})
    assert "information" not in logged and "information_lower" not in logged and "certifiable_margin" in logged

    outcome = AuditOutcome("r1", "M1", "calibrated", None, ACCESS_PROBABILITIES, {"calibrated": result})
    monkeypatch.setattr(ema.workflows.audit, "audit", lambda config, progress: outcome)
    monkeypatch.setattr("ema_cli.options.configure", lambda experiment, **_: None)
    printed = CliRunner().invoke(main, ["audit", "--query", "M1", "--method", "calibrated", "--no-progress"])
    assert printed.exit_code == 0, printed.output
    assert "information (not estimable) information_lower (not estimable)" in printed.output
    assert "information 0" not in printed.output
