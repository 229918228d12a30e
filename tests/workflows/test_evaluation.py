"""`mlflow.models.evaluate(..., evaluators=["ema"])`: the audit workflow underneath, its results on the run."""

from __future__ import annotations

import random
from importlib.metadata import EntryPoint
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow.models.evaluation import ModelEvaluator
from mlflow.models.evaluation.evaluator_registry import _model_evaluation_registry
from mlflow.tracking import MlflowClient
from mlflow.utils.name_utils import _generate_random_name

from ema.data.files import write_set
from ema.data.presets import load_splits
from ema.reports.audit import EXACT_COMMAND
from ema.tracking import keys
from ema.tracking.history import audit_history
from ema.tracking.runs import is_generated_name
from ema.workflows.audit import AuditConfig, audit
from ema.workflows.evaluation import EMAEvaluator
from ema.workflows.reporting import TEMPORARY_QUERY

ROOT = Path(__file__).resolve().parents[2]
N_QUERY = 200
AUDIT_ARTIFACTS = {
    keys.ARTIFACT_CALIBRATION,
    keys.ARTIFACT_MEMBERSHIP,
    keys.ARTIFACT_REPORT,
    f"{keys.ARTIFACT_FIGURES_DIR}/ema_scores.svg",
}


@pytest.fixture
def ema_evaluator(monkeypatch):
    """The evaluator registered as the entry point would register it (the shared install predates the entry point)."""
    monkeypatch.setitem(_model_evaluation_registry._registry, "ema", EMAEvaluator)


@pytest.fixture(scope="module")
def query():
    return load_splits().query("M6").take(np.arange(N_QUERY), name="held-out")


def pixel_frame(data) -> pd.DataFrame:
    return pd.DataFrame(data.x.reshape(len(data), -1), columns=[f"pixel{i}" for i in range(784)]).assign(label=data.y)


def evaluate(data, **config):
    """Evaluate a frame (labels in ``label``) or an MLflow dataset (its own targets) with the ema evaluator."""
    return mlflow.models.evaluate(
        model="models:/ema-target@target",
        data=data,
        targets="label" if isinstance(data, pd.DataFrame) else None,
        model_type="classifier",
        evaluators=["ema"],
        evaluator_config={"ema": {"method": "ema", "alpha": 0.1, "k": 100, **config}},
    )


def artifact_paths(client: MlflowClient, run_id: str, folder: str | None = None) -> set[str]:
    found = set()
    for info in client.list_artifacts(run_id, folder):
        found |= artifact_paths(client, run_id, info.path) if info.is_dir else {info.path}
    return found


def test_evaluate_with_the_ema_evaluator_logs_the_audit_on_the_run(trained, ema_evaluator, query):
    result = evaluate(pixel_frame(query))
    client = MlflowClient()
    assert {"rho_ema", "rho_ema_ks", "flag_rate"} <= set(result.metrics) and result.metrics["n_query"] == N_QUERY
    run = client.get_run(result.run_id)
    assert run.data.metrics == result.metrics
    assert keys.ARTIFACT_REPORT in artifact_paths(client, result.run_id)
    assert run.data.tags[keys.TAG_VERDICT] in ("memorized", "not_memorized")
    assert run.data.params[keys.PARAM_MODEL_URI] == "models:/ema-target/1"
    assert keys.TAG_RUN_KIND not in run.data.tags

    child = client.get_run(run.data.tags[keys.TAG_AUDIT_RUN])
    listed = list(audit_history("ema-target", include_all=True)["run_id"])
    assert child.info.run_id in listed and result.run_id not in listed  # `ema history` lists the audit once
    assert child.data.tags[keys.TAG_PARENT_RUN] == result.run_id
    assert child.data.tags[keys.TAG_RUN_KIND] == keys.RUN_KIND_AUDIT
    assert result.metrics["verdict_code"] == {"memorized": 1.0, "not_memorized": 0.0}[run.data.tags[keys.TAG_VERDICT]]
    assert child.data.params[keys.PARAM_QUERY] == "dataset"  # the MLflow dataset's name, not a temporary file's
    assert child.info.run_name == "dataset · ema · ema-target v1"  # named as `ema audit` names its runs
    assert run.info.run_name == child.info.run_name  # the run evaluate started had a made-up name
    assert AUDIT_ARTIFACTS <= artifact_paths(client, child.info.run_id)
    report = result.artifacts[keys.ARTIFACT_REPORT].content
    assert "Verdict: " in report and "rho_ema" in report and "<img " in report
    assert "beside the references (" in report and "non-members (reference)" in report
    # the command's query file was a temporary copy of the frame, deleted since: the report says so, and how to keep it
    assert TEMPORARY_QUERY in report and EXACT_COMMAND not in report
    version = client.get_model_version("ema-target", "1")
    assert child.info.run_id in version.tags[keys.TAG_LAST_AUDIT]  # the version's audit trail records it


def test_the_ema_evaluator_keeps_the_name_of_a_run_the_user_named(trained, ema_evaluator, query):
    with mlflow.start_run(run_name="forget request 17") as run:
        evaluate(pixel_frame(query))
    assert MlflowClient().get_run(run.info.run_id).info.run_name == "forget request 17"


def test_names_mlflow_makes_up_are_told_from_chosen_ones():
    random.seed(0)
    assert all(is_generated_name(_generate_random_name()) for _ in range(500))
    assert not any(map(is_generated_name, ["forget-request-17", "bold-owl", "bold-owl-x", "audit M1", "bold-owl-1-2"]))


def test_the_ema_evaluator_runs_the_same_audit_as_ema_audit(trained, ema_evaluator, query, tmp_path):
    result = evaluate(pixel_frame(query))
    client = MlflowClient()
    through_mlflow = client.get_run(client.get_run(result.run_id).data.tags[keys.TAG_AUDIT_RUN])
    query_file = write_set(query, tmp_path / "dataset.npz")
    direct = client.get_run(
        audit(
            AuditConfig(model_uri="models:/ema-target@target", query_file=str(query_file), query_label="dataset")
        ).run_id
    )
    assert through_mlflow.data.metrics == direct.data.metrics
    assert through_mlflow.data.params == direct.data.params
    volatile = (keys.TAG_PID, keys.TAG_HOST, keys.TAG_PARENT_RUN, "mlflow.source.name", "mlflow.user")
    ours, theirs = ({k: v for k, v in r.data.tags.items() if k not in volatile} for r in (through_mlflow, direct))
    assert ours == theirs
    assert artifact_paths(client, through_mlflow.info.run_id) == artifact_paths(client, direct.info.run_id)


def test_the_ema_evaluator_reads_a_column_of_images(trained, ema_evaluator, query):
    frame = pd.DataFrame({"image": list(query.x), "label": query.y})
    by_pixels, by_images = evaluate(pixel_frame(query)), evaluate(frame)
    assert by_images.metrics == by_pixels.metrics
    fingerprints = {
        MlflowClient().get_run(r.run_id).data.params[keys.PARAM_QUERY_FINGERPRINT] for r in (by_pixels, by_images)
    }
    assert fingerprints == {query.fingerprint}


def test_the_ema_evaluator_keeps_the_query_file_when_asked(trained, ema_evaluator, query, tmp_path):
    kept = tmp_path / "request-17.npz"
    result = evaluate(pixel_frame(query), query_file=str(kept))
    assert kept.is_file()
    report = result.artifacts[keys.ARTIFACT_REPORT].content
    assert f"--query-file {kept}" in report and EXACT_COMMAND in report and TEMPORARY_QUERY not in report


def test_the_ema_evaluator_records_a_named_datasets_name(trained, ema_evaluator, query):
    named = mlflow.data.from_pandas(pixel_frame(query), targets="label", name="forget-request-17")
    result = evaluate(named)
    child = MlflowClient().get_run(MlflowClient().get_run(result.run_id).data.tags[keys.TAG_AUDIT_RUN])
    assert child.data.params[keys.PARAM_QUERY] == "forget-request-17"
    assert child.info.run_name.startswith("forge…est-17 · ema · ")


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"alhpa": 0.1}, r"unknown ema evaluator config keys \['alhpa'\]"),
        ({"calibration_model": "models:/cal/1"}, "expected all of"),
        ({"method": "bayes"}, "method"),
    ],
)
def test_the_ema_evaluator_refuses_a_bad_config(trained, ema_evaluator, query, config, match):
    with pytest.raises(ValueError, match=match):
        evaluate(pixel_frame(query), **config)


def test_the_ema_evaluator_refuses_pixels_in_another_range(trained, ema_evaluator, query):
    frame = pixel_frame(query)
    frame["pixel0"] = frame["pixel0"] / 255.0 + 0.5
    with pytest.raises(ValueError, match="integer pixel values 0-255"):
        evaluate(frame)


def test_the_ema_evaluator_refuses_a_table_over_max_query_before_converting_it(trained, ema_evaluator, query):
    with pytest.raises(ValueError, match=rf"expected at most 50 images, got {N_QUERY} .*--max-query {N_QUERY}"):
        evaluate(pixel_frame(query), max_query=50)
    with pytest.raises(ValueError, match="expected ema evaluator config key 'max_query' as an integer, got str 'many'"):
        evaluate(pixel_frame(query), max_query="many")


def test_pyproject_declares_the_ema_evaluator_entry_point():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["mlflow.model_evaluator"]
    assert declared == {"ema": "ema.workflows.evaluation:EMAEvaluator"}
    loaded = EntryPoint(name="ema", value=declared["ema"], group="mlflow.model_evaluator").load()
    assert loaded is EMAEvaluator and issubclass(loaded, ModelEvaluator)
    assert loaded.can_evaluate(model_type="classifier", evaluator_config={})
    assert not loaded.can_evaluate(model_type="regressor", evaluator_config={})


def test_audit_config_maps_every_evaluator_key_as_ema_audit_names_it(tmp_path, monkeypatch):
    from ema.inputs import InputTransform
    from ema.workflows.evaluation import audit_config

    monkeypatch.chdir(tmp_path)
    (tmp_path / "recipe.yaml").write_text("arch: mlp\n")  # a recipe is read when the options are checked
    config = audit_config(
        "models:/m/1",
        "q.npz",
        {
            "method": "calibrated",
            "alpha": 0.05,
            "members": "members.npz",
            "reference": "reference.npz",
            "recipe": "recipe.yaml",
            "margin": 0.2,
            "strict": True,
            "figures": False,
            "input_scale": 255.0,
            "pixel_order": "hwc",
            "calibration_model": "models:/cal/1",
            "calibration_members": "in.npz",
            "calibration_nonmembers": "out.npz",
        },
    )
    assert (config.members_file, config.reference_file, config.recipe_file) == (
        "members.npz",
        "reference.npz",
        "recipe.yaml",
    )
    assert config.strict and config.margin == 0.2 and config.transform == InputTransform(scale=255.0)
    assert config.figures is False and config.pixel_order == "hwc"
    assert config.calibration.model_uri == "models:/cal/1" and config.query_file == "q.npz"


def test_every_evaluator_config_key_the_glue_or_audit_config_reads_has_a_kind():
    from ema.tracking.evaluator import GLUE_KEYS
    from ema.workflows.evaluation import CALIBRATION_KEYS, KEY_KINDS, KINDS, RENAMED, SAME_NAME

    assert {*GLUE_KEYS, *SAME_NAME, *RENAMED, *CALIBRATION_KEYS} <= set(KEY_KINDS)
    assert set(KEY_KINDS.values()) <= set(KINDS)


def test_the_ema_evaluator_refuses_for_good_or_fails_retryably_by_kind(trained, ema_evaluator, query, monkeypatch):
    from ema.errors import RETRYABLE, InputError, ModelAccessError
    from ema.oracle import PyfuncOracle

    with pytest.raises(InputError, match="has no version 99") as refused:
        evaluate(pixel_frame(query), model_uri="models:/ema-target/99")
    assert not isinstance(refused.value, RETRYABLE)

    def unreachable(self, pixels):
        raise ModelAccessError(f"model {self.model_uri!r} failed on a batch: ConnectionError")

    monkeypatch.setattr(PyfuncOracle, "predict", unreachable)
    with pytest.raises(RETRYABLE, match="failed on a batch: ConnectionError"):
        evaluate(pixel_frame(query))
