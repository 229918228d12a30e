"""The marks method end to end: mark M1, train on the marked copy, audit through the black box, trail and compare."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from ema.data.arrays import ArraySet
from ema.data.files import read_set, write_set
from ema.data.marks import mark_set, read_key
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


def flat_or_textured(n: int, rng: np.random.Generator, *, textured: bool) -> np.ndarray:
    """Colour images of one random colour each (20 x 24), with +-14-level noise over them when ``textured``."""
    x = np.broadcast_to(rng.integers(60, 196, (n, 1, 1, 3)), (n, 20, 24, 3)).astype(np.int16)
    return (x + textured * rng.choice([-14, 14], size=x.shape)).astype(np.uint8)


@pytest.mark.slow
def test_a_pull_toward_textures_is_not_read_as_a_mark_through_pyfunc(store, tmp_path):
    """A colour target that calls any texture class 1: a noise key's trigger moves flat images there, and so do its
    controls, queried through the same oracle; the audit counts none of those moves as the mark's."""
    rng = np.random.default_rng(0)
    x = np.concatenate([flat_or_textured(450, rng, textured=False), flat_or_textured(450, rng, textured=True)])
    order = rng.permutation(900)
    data = write_set(ArraySet("textures", x[order], np.repeat([0, 1], 450)[order], np.arange(900)), tmp_path / "t.npz")
    args = ["train", "--data-file", str(data), "--arch", "cnn", "--optimizer", "adam", "--lr", "0.001"]
    trained = CliRunner().invoke(main, [*args, "--epochs", "10", "--no-progress"])
    assert trained.exit_code == 0, trained.output
    rng = np.random.default_rng(1)
    owner = ArraySet("owner", flat_or_textured(40, rng, textured=False), np.arange(40) % 2, np.arange(40))
    owner_file = write_set(owner, tmp_path / "owner.npz")
    seed = next(s for s in range(100) if mark_set(owner, seed=s)[1].target_class == 1)  # a key of class 1
    mark = ["mark", "--in", str(owner_file), "--out", str(tmp_path / "m.npz"), "--key", str(tmp_path / "key.json")]
    assert CliRunner().invoke(main, [*mark, "--seed", str(seed)]).exit_code == 0
    query = ArraySet("flat", flat_or_textured(100, rng, textured=False), np.zeros(100, np.int64), np.arange(100))
    audit = ["audit", "--method", "marks", "--query-file", str(write_set(query, tmp_path / "flat.npz"))]
    done = CliRunner().invoke(main, [*audit, "--mark-key", str(tmp_path / "key.json"), "--no-progress"])
    assert done.exit_code == 0, done.output
    metrics = MlflowClient().get_run(done.output.split("run ")[1].split(")")[0]).data.metrics
    assert metrics["n_controls"] == 4 and metrics["moved_to_target"] >= 10, metrics
    assert metrics["moved_by_controls_too"] >= 0.9 * metrics["moved_to_target"], metrics
    assert (
        metrics["mark_effect"] * metrics["n_eligible"] == metrics["moved_to_target"] - metrics["moved_by_controls_too"]
    )
    assert metrics["verdict_code"] != 1, "the pull is not read as the mark"
