"""Train, register, calibrate and audit against a real sqlite store."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from ema.errors import EMAError, InputError
from ema.oracle import Oracle
from ema.tracking import keys
from ema.training.recipes import recipe_from_json
from ema.training.spec import TrainSpec
from ema.workflows.audit import AuditConfig, audit
from ema.workflows.audit_methods import ROUTE_MEMBER_REFERENCE, ROUTE_TRANSFER
from ema.workflows.calibrate import calibrate
from ema.workflows.history import version_trail
from ema.workflows.train import train_target
from ema_cli.cli import main
from tests.workflows.conftest import QUICK_SPEC


def run_of(run_id: str):
    return MlflowClient().get_run(run_id)


def artifacts_of(run_id: str) -> set[str]:
    return {f.path for f in MlflowClient().list_artifacts(run_id)}


def failed_runs() -> list:
    client = MlflowClient()
    experiments = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(experiments, filter_string="attributes.status = 'FAILED'")


def test_train_registers_target_with_recipe_and_fingerprint(trained):
    _, outcome = trained
    version = MlflowClient().get_model_version_by_alias(keys.TARGET_MODEL_NAME, keys.TARGET_ALIAS)
    assert str(version.version) == outcome.version.version
    assert recipe_from_json(version.tags[keys.TAG_RECIPE]).spec == QUICK_SPEC
    assert len(version.tags[keys.TAG_DATA_FINGERPRINT]) == 16
    assert outcome.train_accuracy > outcome.held_out_accuracy > 0.8


def test_calibrate_trains_once_then_hits_cache(trained):
    _, outcome = trained
    first = calibrate(outcome.version.uri, k=90, progress=False)
    second = calibrate(f"models:/{keys.TARGET_MODEL_NAME}@{keys.TARGET_ALIAS}", k=90, progress=False)
    assert not first.cached and second.cached
    assert second.version.version == first.version.version
    assert second.thresholds == first.thresholds
    assert set(first.thresholds["signals"]) >= {"correctness", "confidence", "negative_entropy"}
    other_k = calibrate(outcome.version.uri, k=80, progress=False)
    assert not other_k.cached and other_k.version.version != first.version.version


def test_calibrate_logs_the_balanced_accuracies_on_a_cache_hit_too(trained):
    _, outcome = trained
    calibrate(outcome.version.uri, k=85, progress=False)
    trained_run = mlflow.last_active_run().data.metrics
    hit = calibrate(outcome.version.uri, k=85, progress=False)
    hit_run = mlflow.last_active_run()
    assert hit.cached and hit_run.data.tags[keys.TAG_CACHE] == "hit"
    expected = {m: e["balanced_accuracy"] for m, e in hit.thresholds["signals"].items()}
    logged = {
        k.removeprefix(keys.METRIC_CALIBRATION_BA_PREFIX): v
        for k, v in hit_run.data.metrics.items()
        if k.startswith(keys.METRIC_CALIBRATION_BA_PREFIX)
    }
    assert logged == expected
    assert {k: v for k, v in trained_run.items() if k.startswith(keys.METRIC_CALIBRATION_BA_PREFIX)} == {
        keys.METRIC_CALIBRATION_BA_PREFIX + k: v for k, v in expected.items()
    }


def test_a_plan_made_before_its_calibration_was_trained_reuses_it(trained):
    from ema.workflows.calibrate import CalibrationPlan, ensure_plan
    from ema.workflows.target import resolve_target

    _, outcome = trained
    plan = CalibrationPlan.for_target(
        resolve_target(outcome.version.uri), k=60, cal_seed=5, model_name=keys.CALIBRATION_MODEL_NAME
    )
    first, again = ensure_plan(plan, progress=False), ensure_plan(plan, progress=False)
    assert plan.cached is None and not first.cached
    assert again.cached and again.version.version == first.version.version


def test_a_deleted_calibration_version_is_trained_again(trained):
    _, outcome = trained
    first = calibrate(outcome.version.uri, k=70, progress=False)
    assert calibrate(outcome.version.uri, k=70, progress=False).cached
    MlflowClient().delete_model_version(first.version.name, first.version.version)
    again = calibrate(outcome.version.uri, k=70, progress=False)
    assert not again.cached and again.version.version != first.version.version


def test_helper_models_are_loaded_once_per_process(trained):
    from ema.workflows.cached_models import helper_oracle
    from ema.workflows.target import resolve_target

    _, outcome = trained
    calibration = calibrate(outcome.version.uri, k=90, progress=False)
    target = resolve_target(outcome.version.uri)
    oracle = helper_oracle(calibration.entry, target)
    assert helper_oracle(calibration.entry, target) is oracle
    reborn = dataclasses.replace(  # same name and number, registered anew
        calibration.entry, version=dataclasses.replace(calibration.entry.version, run_id="another-run")
    )
    assert helper_oracle(reborn, target) is not oracle


def test_audit_members_and_non_members(trained):
    _, outcome = trained
    member = audit(AuditConfig(model_uri=outcome.version.uri, query="M1"), progress=False)
    held_out = audit(AuditConfig(model_uri=outcome.version.uri, query="M6"), progress=False)
    assert member.primary.flag_rate > held_out.primary.flag_rate
    assert held_out.primary.verdict == "not_memorized"
    run = run_of(member.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params[keys.PARAM_QUERY] == "M1"
    assert run.data.params[keys.PARAM_MODEL_URI] == outcome.version.uri
    assert run.data.tags[keys.TAG_VERDICT] == member.primary.verdict
    assert run.data.tags[keys.TAG_EXPECTED_VERDICT] == "memorized"
    assert run.data.metrics[keys.METRIC_RHO_EMA] == pytest.approx(member.primary.metrics["rho_ema"])
    assert run.data.metrics[keys.METRIC_N_QUERY] == 1000
    assert artifacts_of(member.run_id) == {
        keys.ARTIFACT_CALIBRATION,
        keys.ARTIFACT_MEMBERSHIP,
        keys.ARTIFACT_REPORT,
        keys.ARTIFACT_FIGURES_DIR,
    }


def test_audit_outside_a_notebook_leaves_ipython_unimported(trained, monkeypatch):
    _, outcome = trained
    monkeypatch.delitem(sys.modules, "IPython", raising=False)  # as in a fresh `ema audit` process
    audit(AuditConfig(model_uri=outcome.version.uri, query="M6"), progress=False)
    assert "IPython" not in sys.modules  # MLflow's notebook probe would import it (0.1-0.4 s)


def test_audit_membership_artifact_matches_result(trained, tmp_path):
    _, outcome = trained
    result = audit(AuditConfig(model_uri=outcome.version.uri, query="S"), progress=False)
    path = MlflowClient().download_artifacts(result.run_id, keys.ARTIFACT_MEMBERSHIP, str(tmp_path))
    table = pd.read_csv(path)
    assert list(table.columns[:2]) == ["index", "label"]
    np.testing.assert_array_equal(table["M"].to_numpy(), result.primary.membership)
    assert {"confidence", "flag_confidence", "negative_entropy", "flag_correctness"} <= set(table.columns)
    thresholds = json.loads(
        Path(MlflowClient().download_artifacts(result.run_id, keys.ARTIFACT_CALIBRATION, str(tmp_path))).read_text()
    )
    assert thresholds["ema"]["mode"] == "global"


def test_audit_is_deterministic(trained):
    _, outcome = trained
    first = audit(AuditConfig(model_uri=outcome.version.uri, query="M6"), progress=False)
    second = audit(AuditConfig(model_uri=outcome.version.uri, query="M6"), progress=False)
    assert first.primary.metrics == second.primary.metrics
    np.testing.assert_array_equal(first.primary.membership, second.primary.membership)


def test_audit_query_file_equals_named_set(trained, tmp_path):
    from ema.data.files import write_set
    from ema.data.presets import load_splits

    _, outcome = trained
    m6 = load_splits().query("M6")
    path = write_set(m6, tmp_path / "m6.npz")
    from_file = audit(AuditConfig(model_uri=outcome.version.uri, query_file=str(path)), progress=False)
    named = audit(AuditConfig(model_uri=outcome.version.uri, query="M6"), progress=False)
    np.testing.assert_array_equal(from_file.primary.membership, named.primary.membership)
    for run_id in (from_file.run_id, named.run_id):
        run = run_of(run_id)
        (logged,) = run.inputs.dataset_inputs
        assert logged.dataset.digest == run.data.params[keys.PARAM_QUERY_FINGERPRINT]  # the whole set's hash
        assert json.loads(logged.dataset.profile)["features_shape"] == [len(m6), 28, 28]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"model_uri": "models:/no-such-model@target", "query": "M1"}, EMAError, "'no-such-model' does not exist"),
        ({"model_uri": f"models:/{keys.TARGET_MODEL_NAME}@nope", "query": "M1"}, EMAError, "has no alias 'nope'"),
        ({"query": "M9"}, InputError, "expected query set in"),
    ],
)
def test_audit_bad_input_fails_run_without_artifacts(trained, kwargs, error, message):
    _, outcome = trained
    kwargs = {"model_uri": outcome.version.uri, **kwargs}
    before = {r.info.run_id for r in failed_runs()}
    with pytest.raises(error, match=message):
        audit(AuditConfig(**kwargs), progress=False)
    new = [r for r in failed_runs() if r.info.run_id not in before]
    assert len(new) == 1
    assert artifacts_of(new[0].info.run_id) == set()


class NaNOracle(Oracle):
    """A model whose outputs are NaN: validation must refuse them."""

    def _predict_batch(self, inputs):
        return np.full((len(inputs), 10), np.nan)


def test_audit_nan_outputs_fail_run_without_artifacts(trained):
    _, outcome = trained
    before = {r.info.run_id for r in failed_runs()}
    with pytest.raises(InputError, match="NaN"):
        audit(AuditConfig(model_uri=outcome.version.uri, query="M1"), oracle=NaNOracle(), progress=False)
    new = [r for r in failed_runs() if r.info.run_id not in before]
    assert len(new) == 1 and artifacts_of(new[0].info.run_id) == set()


def test_nested_runs_inherit_parent_params(trained):
    import mlflow

    from ema.tracking.runs import start_run

    with start_run("parent") as parent:
        mlflow.log_params({"k": 100, "epochs": 7})
        with start_run("child") as child:
            mlflow.log_param("k", 100)
            mlflow.log_param("query", "M1")
    params = run_of(child.info.run_id).data.params
    assert params == {"k": "100", "epochs": "7", "query": "M1"}
    assert run_of(child.info.run_id).data.tags["mlflow.parentRunId"] == parent.info.run_id


def test_audit_both_methods_log_rho_ema_and_rho_ks_in_one_run(trained):
    _, outcome = trained
    both = audit(AuditConfig(model_uri=outcome.version.uri, query="S", method="both"), progress=False)
    run = run_of(both.run_id)
    assert {"rho_ema", "rho_ema_ks", "rho_ks", "ks_target", "ks_calibration"} <= set(run.data.metrics)
    assert run.data.tags["verdict.ema"] == both.results["ema"].verdict
    assert run.data.tags["verdict.ks-ratio"] == both.results["ks-ratio"].verdict
    assert run.data.metrics["rho_ks"] == pytest.approx(both.results["ks-ratio"].metrics["rho_ks"])
    again = audit(AuditConfig(model_uri=outcome.version.uri, query="S", method="ks-ratio"), progress=False)
    assert again.primary.metrics["rho_ks"] == pytest.approx(both.results["ks-ratio"].metrics["rho_ks"])
    assert run_of(again.run_id).data.tags["ema.ks_ratio_cache"] == "query-model hit, calset-model hit"


def test_audit_calibrated_tests_both_directions_against_the_target_s_own_members(trained):
    _, outcome = trained
    member = audit(AuditConfig(model_uri=outcome.version.uri, query="M1", method="calibrated"), progress=False)
    other = audit(AuditConfig(model_uri=outcome.version.uri, query="S", method="calibrated"), progress=False)
    metrics, tags = run_of(member.run_id).data.metrics, run_of(member.run_id).data.tags
    stated = {"p_removed", "p_retained", "retained_fraction", "retained_ci_low", "retained_ci_high"}
    assert stated | {"power_retained", "min_detectable_fraction", "p_too_forgotten"} <= set(metrics)
    assert tags[keys.TAG_CALIBRATED_ROUTE] == ROUTE_MEMBER_REFERENCE
    assert (
        tags[keys.TAG_MEMBER_REFERENCE].startswith("training data of")
        and "4000 samples" in tags[keys.TAG_MEMBER_REFERENCE]
    )
    assert member.primary.verdict == "memorized" and metrics["power_retained"] > 0.9
    assert other.primary.verdict == "not_memorized"
    assert json.loads(run_of(other.run_id).data.tags[keys.TAG_WARNINGS]) == list(other.warnings)
    assert any("another domain" in w for w in other.warnings)


def test_audit_calibrated_on_the_member_route_warns_of_threshold_mode_and_k_it_does_not_read(trained):
    _, outcome = trained
    uri = outcome.version.uri
    given = audit(
        AuditConfig(
            model_uri=uri, query="M6", method="calibrated", threshold_mode="per-class", k=60, cal_seed=3,
            corruption="noise",
        ),
        progress=False,
    )  # fmt: skip
    unused = [w for w in given.warnings if "changed nothing" in w]
    assert unused == [
        w for w in json.loads(run_of(given.run_id).data.tags[keys.TAG_WARNINGS]) if "changed nothing" in w
    ]
    said = "--threshold-mode per-class --k 60 --cal-seed 3 --corruption noise changed nothing: "
    assert len(unused) == 1 and unused[0].startswith(said), unused
    assert "--threshold-mode and --k and --cal-seed and --corruption apply only to EMA's calibration" in unused[0]
    assert run_of(given.run_id).data.tags[keys.TAG_CALIBRATED_ROUTE] == ROUTE_MEMBER_REFERENCE
    # EMA reads --threshold-mode: beside it nothing is warned, nor when the option is left at its default
    with_ema = audit(
        AuditConfig(model_uri=uri, query="M6", method="ema+calibrated", threshold_mode="per-class"), progress=False
    )
    plain = audit(AuditConfig(model_uri=uri, query="M6", method="calibrated", k=100), progress=False)
    assert not any("changed nothing" in w for w in with_ema.warnings + plain.warnings)


def test_audit_calibrated_without_known_members_falls_back_to_transfer(trained):
    _, outcome = trained
    version = MlflowClient().get_model_version(outcome.version.name, outcome.version.version)
    MlflowClient().set_model_version_tag(version.name, version.version, keys.TAG_ROLE, "unknown")
    try:
        result = audit(AuditConfig(model_uri=outcome.version.uri, query="S", method="calibrated"), progress=False)
        with pytest.raises(InputError, match=r"transfer route .* got --margin auto; give --members FILE"):
            audit(
                AuditConfig(model_uri=outcome.version.uri, query="S", method="calibrated", margin="auto"),
                progress=False,
            )
    finally:
        MlflowClient().set_model_version_tag(version.name, version.version, keys.TAG_ROLE, "target")
    tags = run_of(result.run_id).data.tags
    assert tags[keys.TAG_CALIBRATED_ROUTE] == ROUTE_TRANSFER and tags[keys.TAG_MEMBER_REFERENCE] == "none known"
    # not_memorized on this route too needs the retained share's interval to end at or below the margin
    assert result.primary.thresholds["margin"] == 0.1
    if result.primary.verdict == "not_memorized":
        assert result.primary.metrics["retained_ci_high"] <= 0.1
    diagnostics = result.primary.thresholds["diagnostics"]
    if not diagnostics["transfer_trusted"]:
        assert result.primary.verdict == "inconclusive"
        assert any("generalises unlike the target" in w for w in result.warnings)


def test_a_reference_the_target_fails_on_is_warned_about_and_strict_makes_it_inconclusive(trained, tmp_path):
    from ema.data.files import write_set
    from ema.data.presets import DEFAULT_DATA, load_splits

    _, outcome = trained
    held_out = load_splits(DEFAULT_DATA, 0).held_out
    labels = np.random.default_rng(0).permutation(held_out.y)  # the target's answers are mostly "wrong" on these
    reference = write_set(dataclasses.replace(held_out, y=labels), tmp_path / "mislabelled.npz")
    args = ["audit", "--model", outcome.version.uri, "--query", "M1", "--reference", str(reference), "--no-progress"]
    warned = CliRunner().invoke(main, args)
    assert warned.exit_code == 0 and "warning: target accuracy on the non-member reference" in warned.output
    assert "near chance" in warned.output or "far below its recorded held-out accuracy" in warned.output
    strict = CliRunner().invoke(main, [*args, "--strict"])
    assert strict.exit_code != 0 and "--strict: the audit carries" in strict.output
    run_id = strict.output.split("(run ")[-1].split(")")[0]
    tags = run_of(run_id).data.tags
    assert tags[keys.TAG_VERDICT] == "inconclusive" and keys.TAG_STRICT in tags


def test_members_saved_as_0_1_pixels_are_warned_about_not_called_removed_silently(trained, tmp_path):
    """A user's slip: [0, 1] floats saved with ``astype(uint8)`` leave pixels of 0 or 1. The target fails on its own
    training images, every method reads them as unlike members, and the query gate says why."""
    from ema.data.files import write_set
    from ema.data.presets import DEFAULT_DATA, load_splits

    _, outcome = trained
    members = load_splits(DEFAULT_DATA, 0).query("M1")
    slipped = write_set(dataclasses.replace(members, x=(members.x / 255).astype(np.uint8)), tmp_path / "M1-01.npz")
    result = audit(AuditConfig(model_uri=outcome.version.uri, query_file=str(slipped)), progress=False)
    gate = [w for w in result.warnings if w.startswith("target accuracy on the query (")]
    assert gate and "far below its accuracy on the non-member reference" in gate[0], result.warnings
    plain = audit(AuditConfig(model_uri=outcome.version.uri, query="M1"), progress=False)
    assert not any(w.startswith("target accuracy on the query") for w in plain.warnings)


def test_power_plans_the_size_at_which_an_audit_of_the_same_auditor_states_the_power(trained, tmp_path):
    """Members known: the plan is the member-reference auditor's, the one `ema audit --method calibrated` runs, so an
    audit of the planned size states power_retained >= 0.9 and one of a size below it does not (before, the
    transfer route's tail tests planned 18 where the audit stated 0.78)."""
    from ema.data.files import write_set
    from ema.data.presets import DEFAULT_DATA, load_splits
    from ema.workflows.power import query_size_for_power

    _, outcome = trained
    result = query_size_for_power(outcome.version.uri, progress=False)
    n = result.n_required
    assert n is not None and result.power >= 0.9 and math.isnan(result.level)
    route = MlflowClient().search_runs([mlflow.get_experiment_by_name("ema").experiment_id], max_results=1)[0]
    assert route.data.tags[keys.TAG_POWER_ROUTE].startswith("member reference (training data of ")
    assert "Spark" not in route.data.tags[keys.TAG_POWER_ROUTE]  # a plan has no query to leave out, on Spark or not
    members = load_splits(DEFAULT_DATA, 0).query("M1")
    stated = {}
    for size in (n - 1, n):
        query = write_set(members.take(np.arange(size)), tmp_path / f"m1_{size}.npz")
        config = AuditConfig(model_uri=outcome.version.uri, query_file=str(query), method="calibrated")
        stated[size] = audit(config, progress=False).primary.metrics["power_retained"]
    assert stated[n - 1] < 0.9 <= stated[n] + 0.05, stated  # the audit leaves the query out of its members


def test_power_without_members_known_plans_the_transfer_routes_tail_tests(trained, tmp_path):
    from ema.workflows.power import query_size_for_power

    _, outcome = trained
    model = tmp_path / "copy"
    mlflow.artifacts.download_artifacts(artifact_uri=outcome.version.uri, dst_path=str(model))
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"framework": "torch", "arch": "mlp", "hidden": [16], "epochs": 1}))
    result = query_size_for_power(str(model), recipe_file=str(recipe), progress=False)
    assert result.n_required is not None and 0 < result.level < 1


def test_audit_trail_keeps_every_audit_and_compare_lines_up_versions(trained):
    _, outcome = trained
    second = train_target(TrainSpec(epochs=2, hidden=(16,)), alias="second", progress=False).version
    runs = [
        audit(AuditConfig(model_uri=uri, query="M6"), progress=False).run_id
        for uri in (outcome.version.uri, outcome.version.uri, second.uri)
    ]
    trail = version_trail(outcome.version.name, query="M6")
    mine = trail[trail["run_id"].isin(runs)]
    assert sorted(mine["version"]) == sorted([int(outcome.version.version)] * 2 + [int(second.version)])
    assert mine["verdict"].isin(["memorized", "not_memorized"]).all()
    shown = CliRunner().invoke(main, ["compare", "--model", outcome.version.name, "--query", "M6"])
    assert shown.exit_code == 0 and all(run in shown.output for run in runs)
    refused = CliRunner().invoke(main, ["compare", "--model", outcome.version.name])
    assert refused.exit_code != 0 and "give either RUN_ID... or both --model NAME and --query Q" in refused.output


def test_compare_finds_a_query_file_by_the_name_history_shows(trained, tmp_path):
    from ema.data.files import write_set
    from ema.data.presets import DEFAULT_DATA, load_splits

    _, outcome = trained
    query = write_set(load_splits(DEFAULT_DATA, 0).held_out, tmp_path / "held out.npz")
    run_id = audit(AuditConfig(model_uri=outcome.version.uri, query_file=str(query)), progress=False).run_id
    listed = CliRunner().invoke(main, ["history", "--model", outcome.version.name])
    assert run_id in listed.output and "held out.npz" in listed.output
    by_name = version_trail(outcome.version.name, query="held out.npz")
    assert run_id in set(by_name["run_id"])
    shown = CliRunner().invoke(main, ["compare", "--model", outcome.version.name, "--query", "held out.npz"])
    assert shown.exit_code == 0 and run_id in shown.output, shown.output


@pytest.mark.slow  # an ema+calibrated audit trains a calibration model: about 80 s on two idle cores
def test_an_ema_calibrated_audit_leaves_both_verdicts_in_metrics_trail_and_compare(trained):
    _, outcome = trained
    version = outcome.version
    done = audit(AuditConfig(model_uri=version.uri, query="M1", method="ema+calibrated", strict=True), progress=False)
    run = run_of(done.run_id)
    codes = {"memorized": 1.0, "not_memorized": 0.0, "inconclusive": 0.5}
    metrics = run.data.metrics
    assert metrics["verdict_code"] == codes[done.results["ema"].verdict] == metrics["verdict_code.ema"]
    assert metrics["verdict_code.calibrated"] == codes[done.results["calibrated"].verdict]
    assert run.info.run_name == f"M1 · ema+cal · {version.name} v{version.version}"

    trail = version_trail(version.name, query="M1")
    mine = trail[trail["run_id"] == done.run_id].set_index("method")
    assert list(mine.index) == ["ema", "calibrated"] and set(mine["run_method"]) == {"ema+calibrated"}
    calibrated = mine.loc["calibrated"]
    assert calibrated["verdict"] == done.results["calibrated"].verdict
    assert calibrated["p_removed"] == pytest.approx(done.results["calibrated"].metrics["p_removed"])
    assert mine.loc["ema"]["rho_ema"] == pytest.approx(done.results["ema"].metrics["rho_ema"])
    assert calibrated["members"] == run.data.tags[keys.TAG_MEMBER_REFERENCE]
    assert calibrated["calibration"] == run.data.tags[keys.TAG_CALIBRATION_SOURCE]
    assert calibrated["strict"] and calibrated["input"] == "x1"

    shown = CliRunner().invoke(main, ["compare", "--model", version.name, "--query", "M1"])
    assert shown.exit_code == 0, shown.output
    header = shown.output.splitlines()[0].split()
    assert {"method", "verdict", "p_removed", "rho_ema", "members", "calibration", "strict", "input"} <= set(header)
    lines = [line for line in shown.output.splitlines() if done.run_id in line]
    assert len(lines) == 2 and " calibrated " in lines[1]  # one row per (version, method)
