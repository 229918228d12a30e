"""Bad options through the `ema` command: refused before any work, one error line, nothing lost.

Each case asserts the exit code, exactly one ``Error:`` line and no traceback, that every
run the command opened is FAILED and holds no artifacts, and that the registry (models,
versions, aliases) is exactly as before.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys

import mlflow
import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from ema.tracking import keys
from ema.tracking.history import STALE, audit_history
from ema_cli.cli import main
from tests.security.test_http_oracle import server, trickle  # noqa: F401 - a scoring server that trickles
from tests.workflows.conftest import trained  # noqa: F401 - the module's store with a registered target

TRAIN = ["train", "--epochs", "1", "--hidden", "16", "--no-progress"]
AUDIT = ["audit", "--query", "M1", "--no-progress"]

CASES = {
    "alias with a path": ([*TRAIN, "--alias", "../x"], "expected alias of letters"),
    "model name with a path": ([*TRAIN, "--model-name", "../../evil"], "expected model name of letters"),
    "lr nan": ([*TRAIN, "--lr", "nan"], "expected lr to be a finite number > 0, got nan"),
    "momentum nan": ([*TRAIN, "--momentum", "nan"], "expected momentum to be a finite number >= 0, got nan"),
    "weight decay inf": ([*TRAIN, "--weight-decay", "inf"], "expected weight_decay to be a finite number"),
    "diverging lr": ([*TRAIN, "--epochs", "2", "--lr", "1e30"], "training diverged"),
    "demo alpha nan": (
        ["demo", "--alpha", "nan", "--epochs", "1", "--no-progress"],
        "expected a number strictly between 0 and 1, got 'nan'",
    ),
    "errors grid sizes": (["grid", "errors", "--sizes", "0,-5"], "expected query size to be a positive integer, got 0"),
    "paper grid draws": (["grid", "paper", "benchmark", "--draws", "5"], "No such option '--draws'"),
    "errors grid k": (["grid", "errors", "--data", "fashion", "--k", "60"], "No such option '--k'"),
    "old paper grid spelling": (["grid", "benchmark", "--k", "60"], "is now `ema grid paper benchmark`"),
    "calibration name with a path": (
        ["calibrate", "--calibration-name", "../../evil", "--no-progress"],
        "expected calibration name of letters",
    ),
    "calibration name with a quote": (
        [*AUDIT, "--calibration-name", "it's"],
        "expected calibration name of letters",
    ),
    "input scale nan": ([*AUDIT, "--input-scale", "nan"], "scale"),
    "timeout zero": ([*AUDIT, "--timeout", "0"], "expected timeout to be a finite number > 0, got 0.0"),
    "request timeout nan": ([*AUDIT, "--request-timeout", "nan"], "expected request timeout to be a finite number"),
    "no query": (["audit", "--no-progress"], "exactly one of --query NAME, --query-file FILE or --query-table URI"),
    "history name with a quote": (["history", "--model", "it's"], "without single quotes"),
    "history of no such model": (["history", "--model", "no-such"], "registered model 'no-such' does not exist"),
    "compare a run id's prefix": (["compare", "0123abcd"], r"'0123abcd' does not exist .*whole id: 32 characters"),
    "no such version": ([*AUDIT, "--model", "models:/ema-target/99"], r"has no version 99; known versions: \[1"),
    "audit cal seed negative": ([*AUDIT, "--cal-seed", "-1"], "expected cal_seed to be a non-negative integer, got -1"),
    "calibrate cal seed negative": (
        ["calibrate", "--cal-seed", "-1", "--no-progress"],
        "expected cal_seed to be a non-negative integer, got -1",
    ),
    "test without ema": (
        [*AUDIT, "--method", "calibrated", "--test", "ks"],
        r"expected --test with a method that runs EMA \(ema, both, ema\+calibrated\), got --test ks with --method "
        "calibrated: it would change nothing",
    ),
}


def registry_state(client: MlflowClient) -> set[tuple]:
    models = {m.name: m for m in client.search_registered_models()}
    return {
        (v.name, v.version, tuple(sorted(a for a, n in models[v.name].aliases.items() if str(n) == v.version)))
        for v in client.search_model_versions()
    }


def all_runs(client: MlflowClient) -> dict[str, mlflow.entities.Run]:
    experiments = [e.experiment_id for e in client.search_experiments()]
    return {r.info.run_id: r for r in client.search_runs(experiments, max_results=10_000)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_option_is_refused_before_any_work(trained, case):  # noqa: F811 - the imported fixture
    args, message = CASES[case]
    client = MlflowClient()
    registry, runs = registry_state(client), all_runs(client)
    result = CliRunner().invoke(main, args)
    text = result.output
    assert result.exit_code != 0, text
    errors = [line for line in text.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "Traceback" not in text, text
    assert re.search(message, errors[0]), errors[0]
    assert registry_state(client) == registry
    for run_id, run in all_runs(client).items():
        if run_id not in runs:
            assert run.info.status == "FAILED", (case, run.info.run_name)
            assert client.list_artifacts(run_id) == [], (case, run.info.run_name)


def test_a_recipe_refused_for_its_input_leaves_no_run(trained, tmp_path):  # noqa: F811 - the imported fixture
    """The same values given as --normalize are refused before any run: a recipe's "input" must be too."""
    bad = tmp_path / "bad.json"
    bad.write_text('{"arch": "mlp", "input": {"mean": [0.4, 0.4, 0.4], "std": [0.2, -0.2, 0.2]}}')
    client = MlflowClient()
    runs = all_runs(client)
    result = CliRunner().invoke(main, [*AUDIT, "--recipe", str(bad)])
    assert result.exit_code == 3 and "expected input scale > 0 and std > 0" in result.output, result.output
    assert all_runs(client).keys() == runs.keys()


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_history_lists_finished_audits_and_marks_stale_runs(trained):  # noqa: F811 - the imported fixture
    _, outcome = trained
    name = outcome.version.name
    audited = CliRunner().invoke(main, ["audit", "--query", "M6", "--no-progress"])
    assert audited.exit_code == 0, audited.output
    client = MlflowClient()
    experiment = client.get_experiment_by_name(keys.DEFAULT_EXPERIMENT).experiment_id
    killed = client.create_run(
        experiment,
        tags={
            keys.TAG_RUN_KIND: keys.RUN_KIND_AUDIT,
            keys.TAG_PID: str(dead_pid()),
            keys.TAG_HOST: socket.gethostname(),
            keys.TAG_RUN_NAME: "audit killed",
        },
    )
    client.log_param(killed.info.run_id, keys.PARAM_MODEL_NAME, name)
    finished = audit_history(name)
    assert set(finished["status"]) == {"FINISHED"} and killed.info.run_id not in set(finished["run_id"])
    assert finished["rho_ema"].notna().all()  # the calibration runs nested in audits are not listed
    before_params = client.create_run(  # killed while its target was being resolved: no params yet
        experiment,
        tags={
            keys.TAG_RUN_KIND: keys.RUN_KIND_AUDIT,
            keys.TAG_PID: str(dead_pid()),
            keys.TAG_HOST: socket.gethostname(),
            keys.TAG_AUDITED_MODEL: name,
        },
    )
    everything = audit_history(name, include_all=True).set_index("run_id")
    assert everything.loc[killed.info.run_id, "status"] == everything.loc[before_params.info.run_id, "status"] == STALE
    assert before_params.info.run_id not in set(audit_history(name, query="M6", include_all=True)["run_id"])
    audits = client.search_runs([experiment], f"tags.`{keys.TAG_RUN_KIND}` = 'audit' and params.query = 'M6'")
    assert audits and all(run.data.tags[keys.TAG_AUDITED_MODEL] == name for run in audits)  # set as its run starts
    shown = CliRunner().invoke(main, ["history", "--model", name, "--all"])
    assert shown.exit_code == 0 and "STALE" in shown.output


def test_a_trickling_scoring_server_is_given_up_on_the_wall_clock(trained, server):  # noqa: F811
    _, outcome = trained
    url, _ = server(trickle)
    client = MlflowClient()
    registry, runs = registry_state(client), all_runs(client)
    args = ["audit", "--model", outcome.version.uri, "--model-url", url, "--query", "M6", "--timeout", "1"]
    result = CliRunner().invoke(main, [*args, "--request-timeout", "30", "--no-progress"])
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    # the command's --timeout, not the oracle's limit, is what the trickle runs out: its error, naming the step
    assert result.exit_code == 124 and len(errors) == 1, result.output
    assert f"ran past it in step 'score scoring server {url}'" in errors[0] and "raise --timeout" in errors[0]
    new = [run for run_id, run in all_runs(client).items() if run_id not in runs]
    assert [run.info.status for run in new] == ["FAILED"]
    assert client.list_artifacts(new[0].info.run_id) == [] and registry_state(client) == registry
