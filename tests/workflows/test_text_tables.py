"""Tables with text columns (categories), audited as their users' models take them.

The target is a user's scikit-learn Pipeline on Breast Cancer whose tumour size is a category of
text ("small", "medium", "large", from the mean radius), one-hot encoded inside the pipeline:
fitted on a DataFrame, logged with a DataFrame signature that declares the column a string. The
audit reads the text from CSV, Parquet and ``.npz`` files, sends it as text (in-process, over
HTTP to `mlflow models serve`, on Spark), and trains the calibration clone on it.
"""

from __future__ import annotations

import json

import mlflow
import mlflow.sklearn
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from mlflow.models import get_model_info, infer_signature
from sklearn.compose import ColumnTransformer
from sklearn.datasets import load_breast_cancer
from sklearn.ensemble import RandomForestClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder

from ema.data.arrays import ArraySet
from ema.data.files import write_set
from ema.data.presets import load_splits
from ema.errors import InputError
from ema.tracking import keys
from ema.training.recipes import DEFAULT_TABLE_RECIPE
from ema.workflows.audit import AuditConfig, audit
from ema_cli.cli import main
from tests.conftest import module_store
from tests.workflows.test_missing_cells import disjoint_sets
from tests.workflows.test_pipeline import failed_runs
from tests.workflows.test_serving import free_port, serve, stop
from tests.workflows.test_tables import log_user_model

#: Rows per set, and the text column that replaces Breast Cancer's mean radius.
ROWS, SIZE = 120, "size"


def size_words(radius: np.ndarray) -> np.ndarray:
    return np.select([radius < 12, radius < 16], ["small", "medium"], "large").astype(object)


def text_sets() -> dict[str, ArraySet]:
    """Breast Cancer with its mean radius as a size of text, in four disjoint sets of :data:`ROWS` rows."""
    data = load_breast_cancer()
    order = np.random.default_rng(0).permutation(len(data.target))
    x = np.column_stack([data.data[:, 1:].astype(object), size_words(data.data[:, 0])])
    return disjoint_sets(x, data.target, order, (*map(str, data.feature_names[1:]), SIZE), ROWS)


def frame(data: ArraySet) -> pd.DataFrame:
    """A set's features as its user holds them: named double columns and the size as text."""
    return pd.DataFrame(data.x, columns=list(data.features)).infer_objects()


def log_pipeline(features: pd.DataFrame, labels: np.ndarray, name: str, text: list[str]) -> str:
    """A Pipeline one-hot encoding the ``text`` columns, fitted on ``features``, logged with their signature."""
    model = make_pipeline(
        ColumnTransformer([("categories", OneHotEncoder(handle_unknown="ignore"), text)], remainder="passthrough"),
        RandomForestClassifier(n_estimators=50, random_state=0),
    ).fit(features, labels)
    return log_user_model(model, name, features)


def training(sets: dict[str, ArraySet]) -> tuple[pd.DataFrame, np.ndarray]:
    """The target's training data: both sets of members."""
    both = [sets["members"], sets["more_members"]]
    return pd.concat([frame(data) for data in both], ignore_index=True), np.concatenate([data.y for data in both])


@pytest.fixture(scope="module")
def tables(tmp_path_factory, template_db):
    """The target's URI and the sets as a user's files (``NAME.csv``, ``NAME.parquet``, ``NAME.npz``)."""
    folder = tmp_path_factory.mktemp("text-tables")
    sets = text_sets()
    with module_store(tmp_path_factory, template_db, "text-tables"):
        model_uri = log_pipeline(*training(sets), "text-target", [SIZE])
        for name, data in sets.items():
            table = frame(data).assign(label=data.y)
            table.to_csv(folder / f"{name}.csv", index=False)
            table.to_parquet(folder / f"{name}.parquet")
            write_set(data, folder / f"{name}.npz")
        yield model_uri, folder, sets


def audit_of(model_uri: str, folder, query: str, suffix: str = ".csv", **options):
    """``query`` (a file in ``folder``) audited by EMA and the calibrated auditor: ``folder``'s calibration file, and
    its other members as the member reference (files of ``suffix``)."""
    config = {
        "calibration_file": str(folder / f"calibration{suffix}"),
        "members_file": str(folder / f"more_members{suffix}"),
        "method": "ema+calibrated",
        **options,
    }
    return audit(AuditConfig(model_uri=model_uri, query_file=str(folder / query), **config), progress=False)


def test_members_are_memorized_and_held_out_not_and_the_clone_takes_the_text(tables):
    model_uri, folder, _ = tables
    members = audit_of(model_uri, folder, "members.csv")
    held_out = audit_of(model_uri, folder, "held_out.csv")
    assert [r.verdict for r in members.results.values()] == ["memorized", "memorized"]
    assert "memorized" not in [r.verdict for r in held_out.results.values()]
    run = mlflow.get_run(members.run_id)
    assert run.data.tags["ema.calibration_source"] == "clone"
    assert not [w for w in json.loads(run.data.tags[keys.TAG_WARNINGS]) if "text" in w or "column" in w]
    versions = mlflow.MlflowClient().search_model_versions("name = 'ema-calibration'")
    inputs = {c.name: c.type.name for c in get_model_info(f"models:/ema-calibration/{versions[0].version}")
              .signature.inputs.inputs}  # fmt: skip
    assert inputs[SIZE] == "string" and inputs["mean texture"] == "double"


@pytest.mark.parametrize("suffix", [".parquet", ".npz"])
def test_parquet_and_npz_files_give_the_csv_numbers(tables, suffix):
    model_uri, folder, _ = tables
    csv = audit_of(model_uri, folder, "members.csv")
    other = audit_of(model_uri, folder, f"members{suffix}")
    for mine, theirs in zip(other.results.values(), csv.results.values(), strict=True):
        assert mine.metrics == theirs.metrics
        np.testing.assert_array_equal(mine.membership, theirs.membership)


def test_text_in_a_column_the_model_takes_as_numbers_is_refused_by_name_and_row_and_the_run_fails(tables, tmp_path):
    model_uri, folder, _ = tables
    table = pd.read_csv(folder / "held_out.csv")
    table["mean texture"] = table["mean texture"].astype(object)
    table.loc[2, "mean texture"] = "unknown"
    table.to_csv(tmp_path / "broken.csv", index=False)
    before = {r.info.run_id for r in failed_runs()}
    with pytest.raises(InputError, match=r"column 'mean texture' \(the model's signature declares float64\), got "
                                         r"text such as 'unknown' \(data row 2, counted from 0\)"):  # fmt: skip
        audit_of(model_uri, tmp_path, "broken.csv", calibration_file=str(folder / "calibration.csv"))
    assert len([r for r in failed_runs() if r.info.run_id not in before]) == 1


def test_whole_numbers_in_a_column_the_model_takes_as_text_go_as_their_text_on_record(tables, tmp_path):
    """Grades "1".."3" as a user trained on them; a CSV reader takes them for numbers: they go as text again."""
    sets = tables[2]
    grades = {"small": "1", "medium": "2", "large": "3"}
    graded = {name: frame(data).replace({SIZE: grades}).rename(columns={SIZE: "grade"}) for name, data in sets.items()}
    both = pd.concat([graded["members"], graded["more_members"]], ignore_index=True)
    model_uri = log_pipeline(both, training(sets)[1], "graded-target", ["grade"])
    for name, table in graded.items():
        table.assign(label=sets[name].y).to_csv(tmp_path / f"{name}.csv", index=False)
        table.assign(label=sets[name].y).to_parquet(tmp_path / f"{name}.parquet")
    assert pd.read_csv(tmp_path / "members.csv")["grade"].dtype == np.int64
    as_numbers = audit_of(model_uri, tmp_path, "members.csv")
    as_text = audit_of(model_uri, tmp_path, "members.parquet", suffix=".parquet")
    for numbers, text in zip(as_numbers.results.values(), as_text.results.values(), strict=True):
        assert numbers.metrics == text.metrics
    said = "'grade' hold numbers where the model's signature declares text: sent as their decimal text (such as '"
    warnings = json.loads(mlflow.get_run(as_numbers.run_id).data.tags[keys.TAG_WARNINGS])
    assert any(said in w for w in warnings)
    assert not any(said in w for w in json.loads(mlflow.get_run(as_text.run_id).data.tags[keys.TAG_WARNINGS]))


def test_a_pipeline_logged_without_a_signature_takes_its_text_by_the_names_it_was_fitted_on(tables):
    model_uri, folder, _ = tables
    signed = audit_of(model_uri, folder, "members.csv")
    unsigned = mlflow.sklearn.load_model(model_uri)
    with mlflow.start_run(run_name="a user's pipeline logged bare"):
        info = mlflow.sklearn.log_model(
            unsigned, name="model", pyfunc_predict_fn="predict_proba", registered_model_name="unsigned-text-target",
            serialization_format=mlflow.sklearn.SERIALIZATION_FORMAT_CLOUDPICKLE,
        )  # fmt: skip
    assert get_model_info(f"models:/unsigned-text-target/{info.registered_model_version}").signature is None
    bare = audit_of(f"models:/unsigned-text-target/{info.registered_model_version}", folder, "members.csv")
    for mine, theirs in zip(bare.results.values(), signed.results.values(), strict=True):
        assert mine.metrics == theirs.metrics


def test_unlearning_a_users_pipeline_retrains_its_clone_on_the_retained_files_columns_by_name(tables, tmp_path):
    """No lineage: the retained data is a file, its columns in another order; the held-out split is not the model's."""
    model_uri, folder, _ = tables
    retained = pd.read_csv(folder / "more_members.csv")
    retained[list(reversed(retained.columns))].to_csv(tmp_path / "retained.csv", index=False)
    removed = CliRunner().invoke(main, ["unlearn", "--model", model_uri, "--forget", str(folder / "members.csv"),
                                        "--retain", str(tmp_path / "retained.csv"), "--method", "retrain",
                                        "--alias", "text-unlearned", "--no-progress"])  # fmt: skip
    assert removed.exit_code == 0, removed.output
    name = model_uri.split("/")[1]
    pipeline = mlflow.sklearn.load_model(f"models:/{name}@text-unlearned")
    encoder = pipeline[0].named_transformers_["categories"]
    assert encoder.categories_[0].tolist() == ["large", "medium", "small"]  # the sizes, not a numeric column
    run = mlflow.get_run(mlflow.MlflowClient().get_model_version_by_alias(name, "text-unlearned").run_id)
    assert np.isnan(run.data.metrics["test_accuracy"]) and run.data.metrics["retain_accuracy"] == 1.0
    retained_file = str(tmp_path / "retained.csv")
    forgotten = audit_of(f"models:/{name}@text-unlearned", folder, "members.csv", members_file=retained_file)
    assert forgotten.expected_verdict == "not_memorized"


def test_power_of_a_users_table_model_without_members_says_to_give_them_and_plans_with_them(tables):
    model_uri, folder, _ = tables
    power = ["power", "--model", model_uri, "--no-progress"]
    refused = CliRunner().invoke(main, power)
    assert refused.exit_code == 3 and "expected --members FILE for ema power on a model of table inputs" in (
        refused.output
    ), refused.output
    files = ["--members", str(folder / "more_members.csv"), "--reference", str(folder / "calibration.csv")]
    planned = CliRunner().invoke(main, [*power, *files])
    assert planned.exit_code == 0 and "|D_q| >=" in planned.output, planned.output


def test_power_with_shifts_refuses_a_users_table_model_as_a_table_before_asking_for_members(tables):
    """No members known and a table model: refused for the table first, not asked for --members and then refused."""
    model_uri, _, _ = tables
    refused = CliRunner().invoke(main, ["power", "--model", model_uri, "--augment", "shifts", "--no-progress"])
    assert refused.exit_code == 3, refused.output
    assert (
        "expected a model of image inputs with --augment shifts (it moves pixels), got a model of table"
        in (refused.output)
        and "--members" not in refused.output
    )


def test_a_model_naming_no_columns_is_sent_the_numbers_and_the_text_left_out_on_record(tables):
    _, folder, sets = tables
    features, labels = training(sets)
    numbers = features.drop(columns=SIZE).to_numpy(np.float64)
    model = RandomForestClassifier(n_estimators=50, random_state=0).fit(numbers, labels)
    with mlflow.start_run(run_name="a user's model of bare arrays"):
        info = mlflow.sklearn.log_model(
            model, name="model", signature=infer_signature(numbers[:5], model.predict_proba(numbers[:5])),
            pyfunc_predict_fn="predict_proba", registered_model_name="bare-target",
            serialization_format=mlflow.sklearn.SERIALIZATION_FORMAT_CLOUDPICKLE, pip_requirements=["scikit-learn"],
        )  # fmt: skip
    outcome = audit_of(f"models:/bare-target/{info.registered_model_version}", folder, "members.csv")
    assert outcome.primary.verdict == "memorized"
    warnings = json.loads(mlflow.get_run(outcome.run_id).data.tags[keys.TAG_WARNINGS])
    assert any("1 column(s) of text left out, as the model's signature names no columns" in w for w in warnings)


def test_ema_train_on_a_table_with_text_trains_on_its_numbers_says_so_and_audits_from_its_lineage(
    tables, tmp_path, caplog
):
    _, folder, sets = tables
    both = pd.concat([frame(sets[name]).assign(label=sets[name].y) for name in ("members", "held_out")])
    both.to_csv(tmp_path / "training.csv", index=False)
    result = CliRunner().invoke(main, ["train", "--data-file", str(tmp_path / "training.csv"), "--model-name",
                                       "own-text-target", "--no-progress"])  # fmt: skip
    assert result.exit_code == 0, result.output
    # the query keeps its text; the lineage's sets (calibration, member pool) are the training file's numbers
    lineage = audit(AuditConfig(model_uri="models:/own-text-target/1", query_file=str(folder / "members.csv"),
                                method="ema+calibrated"), progress=False)  # fmt: skip
    tags = mlflow.get_run(lineage.run_id).data.tags
    assert tags[keys.TAG_CALIBRATED_ROUTE] == "member reference scored on the target"
    assert tags[keys.TAG_MEMBER_REFERENCE].startswith("training data of own-text-target v1 (file, split seed 0)")
    # a forget file with its text is found in the training data by the columns both hold
    fold = load_splits("file", 0, tmp_path / "training.csv").query("M1")  # as `ema train` split the file
    both.iloc[fold.index].to_csv(tmp_path / "forget.csv", index=False)
    removed = CliRunner().invoke(main, ["unlearn", "--model", "models:/own-text-target/1", "--forget",
                                        str(tmp_path / "forget.csv"),
                                        "--method", "retrain", "--no-progress"])  # fmt: skip
    assert removed.exit_code == 0, removed.output
    # the forget file, audited on the new version, is known as the forget set by every column it was read with
    forgotten = audit(AuditConfig(model_uri="models:/own-text-target@unlearned", method="ema",
                                  query_file=str(tmp_path / "forget.csv")), progress=False)  # fmt: skip
    assert forgotten.expected_verdict == "not_memorized"
    assert "1 column(s) of text left out of the training data, as the workbench's recipes take numbers: 'size'" in (
        caplog.text
    )
    columns = get_model_info("models:/own-text-target/1").signature.inputs.input_names()
    assert SIZE not in columns and len(columns) == 29


def test_mlflow_evaluate_audits_a_frame_with_text_as_the_file_is_audited(tables, monkeypatch):
    from mlflow.models.evaluation.evaluator_registry import _model_evaluation_registry

    from ema.workflows.evaluation import EMAEvaluator

    monkeypatch.setitem(_model_evaluation_registry._registry, "ema", EMAEvaluator)  # as the entry point registers it
    model_uri, folder, _ = tables
    config = {"kind": "table", "calibration_file": str(folder / "calibration.csv"),
              "members": str(folder / "more_members.csv"), "method": "ema+calibrated"}  # fmt: skip
    result = mlflow.models.evaluate(
        model=model_uri, data=pd.read_csv(folder / "members.csv"), targets="label", model_type="classifier",
        evaluators=["ema"], evaluator_config={"ema": config},
    )  # fmt: skip
    from_file = audit_of(model_uri, folder, "members.csv")
    assert result.metrics["verdict_code"] == 1.0 and result.metrics["verdict_code.calibrated"] == 1.0
    assert result.metrics["p_removed"] == from_file.results["calibrated"].metrics["p_removed"]


def test_a_served_model_takes_the_text_as_json_and_parquet_and_answers_as_in_process(tables, tmp_path):
    """Over HTTP the target cannot be cloned: a recipe of ours trains the calibration model (on the numbers)."""
    model_uri, folder, _ = tables
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps(DEFAULT_TABLE_RECIPE))
    local = audit_of(model_uri, folder, "members.csv", recipe_file=str(recipe))
    port = free_port()
    process = serve(model_uri, port)
    try:
        for http_format in ("json", "parquet"):
            served = audit_of(model_uri, folder, "members.csv", model_url=f"http://127.0.0.1:{port}/invocations",
                              http_format=http_format, recipe_file=str(recipe))  # fmt: skip
            for mine, theirs in zip(served.results.values(), local.results.values(), strict=True):
                assert mine.metrics == theirs.metrics, http_format
            # the calibration model, trained by the first audit and found in the cache by these, is blind to the text
            warnings = json.loads(mlflow.get_run(served.run_id).data.tags[keys.TAG_WARNINGS])
            assert any("1 column(s) of text left out of the calibration model" in w and "'size'" in w for w in warnings)
    finally:
        stop(process)


spark_engine = pytest.importorskip("ema.engines.spark", reason="the Spark engine needs pyspark")


@pytest.mark.slow
def test_spark_audits_a_query_table_with_text_as_in_process(tables, tmp_path):
    """The calibration file holds a column the model does not take (a ward): left out on Spark as in-process."""
    model_uri, folder, _ = tables
    calibration = pd.read_csv(folder / "calibration.csv")
    calibration.assign(ward=[f"W{i % 3}" for i in range(len(calibration))]).to_csv(tmp_path / "cal.csv", index=False)
    with spark_engine.spark_session("local[2]"):
        options = {"method": "ema", "query_table": str(folder / "members.parquet")}
        local = audit(AuditConfig(model_uri=model_uri, calibration_file=str(tmp_path / "cal.csv"), **options),
                      progress=False)  # fmt: skip
        on_spark = audit(AuditConfig(model_uri=model_uri, calibration_file=str(tmp_path / "cal.csv"),
                                     engine="spark", **options), progress=False)  # fmt: skip
    assert on_spark.primary.metrics == local.primary.metrics and on_spark.primary.verdict == "memorized"
