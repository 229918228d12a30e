"""The marks method end to end: mark M1, train on the marked copy, audit through the black box, trail and compare."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from ema.data.files import read_set
from ema.data.marks import read_key
from ema.errors import InputError
from ema.tracking import keys
from ema.workflows.audit import AuditConfig
from ema.workflows.train import train_target
from ema_cli.cli import main
from tests.workflows.conftest import QUICK_SPEC, marked  # noqa: F401 - the module's store with a marked target

AUDIT = ["audit", "--method", "marks", "--query", "M6", "--no-progress"]


def audit_marks(key, *extra: str) -> tuple[str, MlflowClient]:
    """Run the marks audit through `ema`; the run's id (from the output) and a client."""
    done = CliRunner().invoke(main, [*AUDIT, "--mark-key", str(key), *extra])
    assert done.exit_code == 0, done.output
    return done.output.split("run ")[1].split(")")[0], MlflowClient()


def test_mark_marks_a_share_of_the_file_and_keys_it(marked):  # noqa: F811 - the imported fixture
    key, copy, clean = read_key(marked["key"]), read_set(marked["marked"]), read_set(marked["clean"])
    changed = np.flatnonzero((copy.x != clean.x).any(axis=(1, 2)) | (copy.y != clean.y))
    assert changed.size == key.n_marked == 100
    assert (copy.y[changed] == key.target_class).all() and (clean.y[changed] != key.target_class).all()
    assert copy.fingerprint == key.fingerprint
    version = marked["outcome"].version
    assert version.tags[f"{keys.TAG_DATA_FOLD_PREFIX}M1"] == key.fingerprint


def test_marks_audit_finds_the_mark_in_the_model_trained_on_it(marked):  # noqa: F811
    run_id, client = audit_marks(marked["key"])
    run = client.get_run(run_id)
    assert run.data.tags[keys.TAG_VERDICT] == "memorized"
    assert run.data.metrics["p_mark"] < 0.05 and run.data.metrics["n_query"] == 200, run.data.metrics
    assert run.data.params[keys.PARAM_QUERIES] == "200"
    assert run.data.tags[keys.TAG_MARKED_FINGERPRINT] == read_key(marked["key"]).fingerprint


def test_marks_audit_of_a_model_trained_without_the_mark_says_not_memorized(marked):  # noqa: F811
    clean = train_target(QUICK_SPEC, alias="clean", progress=False).version
    run_id, client = audit_marks(marked["key"], "--model", f"models:/{clean.name}@clean", "--margin", "0.05")
    run = client.get_run(run_id)
    assert run.data.tags[keys.TAG_VERDICT] == "not_memorized", run.data.metrics
    assert run.data.metrics["mark_effect_upper_bound"] <= 0.05


def test_marks_audit_is_in_the_trail_and_compare(marked):  # noqa: F811
    audit_marks(marked["key"], "--queries", "120")
    version = marked["outcome"].version
    tags = MlflowClient().get_model_version(version.name, version.version).tags
    records = [
        json.loads(v) for k, v in tags.items() if k.startswith(keys.TAG_AUDIT_PREFIX) and k != keys.TAG_LAST_AUDIT
    ]
    assert any("marks" in json.dumps(record) and "p_mark" in json.dumps(record) for record in records), records
    shown = CliRunner().invoke(main, ["compare", "--model", version.name, "--query", "M6"])
    assert shown.exit_code == 0 and "p_mark" in shown.output, shown.output


def test_unlearning_the_marked_file_by_retraining_removes_the_mark(marked):  # noqa: F811
    version = marked["outcome"].version
    args = ["unlearn", "--model", f"models:/{version.name}/{version.version}", "--forget", str(marked["marked"])]
    done = CliRunner().invoke(main, [*args, "--method", "retrain", "--alias", "forgot", "--no-progress"])
    assert done.exit_code == 0, done.output
    run_id, client = audit_marks(marked["key"], "--model", f"models:/{version.name}@forgot", "--margin", "0.05")
    assert client.get_run(run_id).data.tags[keys.TAG_VERDICT] == "not_memorized"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"method": "marks"}, "--method marks needs the owner's key, got none: give --mark-key KEY.json"),
        ({"method": "ema", "mark_key": "k.json"}, "expected --mark-key and --queries only with --method marks"),
        ({"method": "calibrated", "queries": 50}, "expected --mark-key and --queries only with --method marks"),
        ({"method": "marks", "mark_key": "k.json", "queries": 0}, "expected queries to be a positive integer"),
    ],
)
def test_audit_config_refuses_mark_options_that_do_not_go_together(options, message):
    with pytest.raises(InputError, match=message):
        AuditConfig(model_uri="models:/m@target", query="M6", **options).validate()


def test_marks_audits_200_queries_by_default_and_others_the_whole_query():
    assert AuditConfig(query="M6", method="marks", mark_key="k.json").query_limit == 200
    assert AuditConfig(query="M6", method="marks", mark_key="k.json", queries=50).query_limit == 50
    assert AuditConfig(query="M6").query_limit is None
