"""Query tables of any kind: RGB 32x32 images with their shape recorded, and tables of features, audited with
``--query-table`` in-process and on Spark (local[2]), each against a model trained and logged here as its users do.

The colour target is a user's torch CNN (signature (-1, 3, 32, 32)); the tabular target a user's
scikit-learn RandomForest on Breast Cancer plus an integer column (a DataFrame signature of named
double and long columns). Each has a calibration model of its own kind trained on other data
(``--calibration-model``). Spark runs are slow (marked); the in-process runs are the fast checks.
"""

from __future__ import annotations

import dataclasses

import mlflow
import mlflow.sklearn
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from mlflow.models import infer_signature
from mlflow.tracking import MlflowClient
from sklearn.datasets import load_breast_cancer
from sklearn.ensemble import RandomForestClassifier

from ema.data.arrays import ArraySet
from ema.data.files import read_set, write_set
from ema.data.parquet import SHAPE_COLUMNS, read_table, write_table
from ema.errors import InputError
from ema.inputs import InputTransform
from ema.tracking import keys
from ema.workflows.audit import AuditConfig, audit
from ema.workflows.audit_config import SuppliedCalibration
from ema.workflows.power import certification_plan, query_size_for_power
from ema_cli.cli import main
from tests.conftest import module_store
from tests.foreign.test_colour_images import noise_set, train_and_log
from tests.workflows.test_pipeline import failed_runs

#: Rows of Breast Cancer per set, and the integer feature added beside its 30 doubles.
ROWS, COUNT_COLUMN = 120, "lymph nodes"


def tabular_sets() -> dict[str, ArraySet]:
    """Breast Cancer with an integer column, in four disjoint sets of :data:`ROWS` rows."""
    data = load_breast_cancer()
    rng = np.random.default_rng(0)
    order = rng.permutation(len(data.target))
    counts = rng.integers(0, 12, len(data.target))
    sets = {}
    for i, name in enumerate(("members", "held_out", "cal_members", "cal_nonmembers")):
        rows = order[i * ROWS : (i + 1) * ROWS]
        x = np.column_stack([data.data[rows], counts[rows]])
        features = (*map(str, data.feature_names), COUNT_COLUMN)
        sets[name] = ArraySet(name, x, data.target[rows].astype(np.int64), rows.astype(np.int64), features)
    return sets


def frame(data: ArraySet) -> pd.DataFrame:
    """A set's features as its user holds them: named double columns and one integer column."""
    return pd.DataFrame(data.x, columns=list(data.features)).astype({COUNT_COLUMN: np.int64})


def log_forest(data: ArraySet, name: str) -> str:
    """A RandomForest fitted on ``data``'s frame, logged with a DataFrame signature and predict_proba; its URI."""
    features = frame(data)
    model = RandomForestClassifier(n_estimators=50, random_state=0).fit(features, data.y)
    with mlflow.start_run(run_name=f"a user's training of {name}"):
        info = mlflow.sklearn.log_model(
            model,
            name="model",
            signature=infer_signature(features.head(5), model.predict_proba(features.head(5))),
            pyfunc_predict_fn="predict_proba",
            registered_model_name=name,
            serialization_format=mlflow.sklearn.SERIALIZATION_FORMAT_CLOUDPICKLE,
            pip_requirements=["scikit-learn"],
        )
    return f"models:/{name}/{info.registered_model_version}"


def user_table(data: ArraySet, path) -> str:
    """``data`` as a user's Parquet table: the features, then ``label``; no ``index`` column."""
    frame(data).assign(label=data.y).to_parquet(path)
    return str(path)


@pytest.fixture(scope="module")
def kinds(tmp_path_factory, template_db):
    """Per kind: the target, its supplied calibration, and the query tables and files."""
    folder = tmp_path_factory.mktemp("kinds")
    with module_store(tmp_path_factory, template_db, "kinds"):
        colour = {
            n: noise_set(n, seed) for seed, n in enumerate(("members", "held_out", "cal_members", "cal_nonmembers"))
        }
        tables = tabular_sets()
        made = {}
        for kind, sets, train in (("colour", colour, train_and_log), ("tabular", tables, log_forest)):
            files = {name: str(write_set(data, folder / f"{kind}-{name}.npz")) for name, data in sets.items()}
            made[kind] = {
                "target": train(sets["members"], f"{kind}-target"),
                "calibration": SuppliedCalibration(
                    train(sets["cal_members"], f"{kind}-calibration"), files["cal_members"], files["cal_nonmembers"]
                ),
                "reference": files["cal_nonmembers"],
                "outputs": "logits" if kind == "colour" else "probabilities",
                **{name: str(write_table([sets[name]], folder / f"{kind}-{name}")) for name in ("members", "held_out")},
                **{f"{name}.npz": files[name] for name in ("members", "held_out")},
            }
        made["tabular"]["user"] = user_table(tables["held_out"], folder / "held_out.parquet")
        made["tabular"]["missing"] = user_table(
            ArraySet("x", tables["held_out"].x[:, 1:], tables["held_out"].y, tables["held_out"].index,
                     tables["held_out"].features[1:]),
            folder / "missing.parquet",
        )  # fmt: skip
        yield made


def config(kind: dict, **query) -> AuditConfig:
    return AuditConfig(
        model_uri=kind["target"],
        calibration=kind["calibration"],
        reference_file=kind["reference"],
        outputs=kind["outputs"],
        calibration_outputs=kind["outputs"],
        **query,
    )


def membership(outcome) -> pd.DataFrame:
    """The run's per-sample membership table (CSV in-process, Parquet on Spark), by index."""
    names = {a.path for a in MlflowClient().list_artifacts(outcome.run_id)}
    name = keys.ARTIFACT_MEMBERSHIP_PARQUET if keys.ARTIFACT_MEMBERSHIP_PARQUET in names else keys.ARTIFACT_MEMBERSHIP
    path = MlflowClient().download_artifacts(outcome.run_id, name)
    table = pd.read_parquet(path) if name.endswith(".parquet") else pd.read_csv(path)
    return table.sort_values("index", ignore_index=True)


@pytest.mark.parametrize("kind", ["colour", "tabular"])
def test_query_table_in_process_equals_the_query_file_and_tells_members(kinds, kind):
    made = kinds[kind]
    verdicts = {}
    for query in ("members", "held_out"):
        from_table = audit(config(made, query_table=made[query]), progress=False)
        from_file = audit(config(made, query_file=made[f"{query}.npz"]), progress=False)
        assert from_table.primary.metrics == from_file.primary.metrics
        np.testing.assert_array_equal(from_table.primary.membership, from_file.primary.membership)
        verdicts[query] = from_table.primary.verdict
    assert verdicts == {"members": "memorized", "held_out": "not_memorized"}


def test_a_users_feature_table_without_index_reads_in_process(kinds):
    made = kinds["tabular"]
    outcome = audit(config(made, query_table=made["user"]), progress=False)
    expected = audit(config(made, query_table=made["held_out"]), progress=False)
    assert outcome.primary.metrics == expected.primary.metrics
    assert membership(outcome)["index"].tolist() == list(range(ROWS))  # no index column: rows 0..n-1


def test_colour_table_records_its_shape(kinds):
    table = pq.read_table(kinds["colour"]["members"])
    assert [set(table.column(name).to_pylist()) for name in SHAPE_COLUMNS] == [{32}, {32}, {3}]


@pytest.mark.parametrize("kind", ["colour", "tabular"])
def test_data_export_writes_a_query_table_of_either_kind(kinds, kind, tmp_path):
    query_file = kinds[kind]["held_out.npz"]
    result = CliRunner().invoke(main, ["data", "export", "--query-file", query_file, "--out", str(tmp_path / "t")])
    assert result.exit_code == 0, result.output
    written, expected = read_table(tmp_path / "t"), read_set(query_file)
    assert (written.fingerprint, written.features) == (expected.fingerprint, expected.features)
    describe = "image 32x32x3" if kind == "colour" else "table of 31 features"
    assert f"{ROWS if kind == 'tabular' else 48} rows, {describe} (parquet)" in result.output


def test_query_table_missing_a_signature_column_is_refused_in_one_line(kinds):
    made = kinds["tabular"]
    before = {r.info.run_id for r in failed_runs()}
    with pytest.raises(InputError, match=r"expected the columns the model's signature names, missing 1: 'mean radius'"):
        audit(config(made, query_table=made["missing"]), progress=False)
    assert len([r for r in failed_runs() if r.info.run_id not in before]) == 1


spark_engine = pytest.importorskip("ema.engines.spark", reason="the Spark engine needs pyspark")


@pytest.fixture(scope="module")
def spark():
    """A local[2] session for the module; audits find it active."""
    with spark_engine.spark_session("local[2]") as session:
        yield session


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "query"), [("colour", "members"), ("tabular", "held_out"), ("tabular", "user")])
def test_spark_audit_of_any_kind_equals_in_process(kinds, spark, kind, query):
    made = kinds[kind]
    local = audit(config(made, query_table=made[query]), progress=False)
    on_spark = audit(config(made, query_table=made[query], engine="spark"), progress=False)
    assert on_spark.primary.verdict == local.primary.verdict
    assert on_spark.primary.metrics == local.primary.metrics  # rho and p-values to the bit
    pd.testing.assert_frame_equal(membership(on_spark), membership(local), check_dtype=False)


@pytest.mark.slow
@pytest.mark.parametrize("options", [{"image_size": 28}, {"transform": InputTransform(scale=255.0)}])
def test_spark_refuses_pixel_options_for_a_table_of_features_in_the_in_process_line(kinds, spark, options):
    made = kinds["tabular"]
    with pytest.raises(InputError) as in_process:
        audit(config(made, query_table=made["held_out"], **options), progress=False)
    with pytest.raises(InputError) as on_spark:
        audit(config(made, query_table=made["held_out"], engine="spark", **options), progress=False)
    # the same reason, for the first table each engine reads (in-process the query, Spark the reference)
    assert str(on_spark.value).partition(": ")[2] == str(in_process.value).partition(": ")[2]
    assert "with --image-size, got a table" in str(on_spark.value) or "(they scale pixels)" in str(on_spark.value)


@pytest.mark.slow
def test_spark_refuses_pixel_options_for_a_query_table_of_features_once_its_references_are_images(kinds, spark):
    """The references pass (images, resized) and the model is shipped; the query table, read on Spark, is refused
    by its name as in-process, and the session audits on (the archive shipped for the refused audit is still there
    for the next job's executors to fetch)."""
    query = config(kinds["colour"], query_table=kinds["tabular"]["held_out"], image_size=32)
    with pytest.raises(InputError) as in_process:
        audit(query, progress=False)
    with pytest.raises(InputError) as on_spark:
        audit(dataclasses.replace(query, engine="spark"), progress=False)
    assert str(on_spark.value) == str(in_process.value)
    expected = "tabular-held_out: expected images to resize with --image-size, got a table of 31 features"
    assert str(on_spark.value) == expected
    made = kinds["tabular"]
    after = audit(config(made, query_table=made["held_out"], engine="spark"), progress=False)
    assert after.primary.verdict == audit(config(made, query_table=made["held_out"]), progress=False).primary.verdict


def test_a_table_query_without_a_reference_of_its_kind_is_refused_naming_the_default(kinds):
    """The default non-member reference is the preset's images: for a table of features, say so, not a shape error.
    A supplied calibration model's non-members are the default instead."""
    made = kinds["tabular"]
    supplied = dataclasses.replace(config(made, query_table=made["held_out"]), reference_file=None)
    assert audit(supplied, progress=False).primary.verdict in ("memorized", "not_memorized", "inconclusive")
    query = dataclasses.replace(supplied, calibration=None, calibration_outputs=None)
    with pytest.raises(InputError) as refused:  # EMA's calibration set first: the preset's digits
        audit(query, progress=False)
    assert str(refused.value) == (
        "expected a calibration set like the query (table of 31 features), got the clean calibration set of "
        "mnist-embedded (image 28x28): give --calibration-file FILE with samples like the query's, of every class "
        "the model outputs"
    )
    calibrated = dataclasses.replace(query, method="calibrated", members_file=made["members.npz"])
    with pytest.raises(InputError) as refused:  # the calibrated auditor's non-member reference
        audit(calibrated, progress=False)
    assert str(refused.value).startswith(
        "expected a non-member reference of the query's kind (table of 31 features), got clean calibration set of "
    )
    assert str(refused.value).endswith(
        "give --reference FILE (or --calibration-file) with samples of that kind the model never saw"
    )


@pytest.mark.parametrize("plan", [query_size_for_power, certification_plan])
def test_power_of_a_table_model_without_a_reference_of_its_kind_is_refused_naming_it(kinds, plan):
    made = kinds["tabular"]
    options = {"margin": 0.3} if plan is certification_plan else {}
    with pytest.raises(
        InputError,
        match=r"expected a non-member reference of the member reference's kind \(table of "
        r"31 features\), got clean calibration set of .*: give --reference FILE with samples of that kind",
    ):
        plan(made["target"], members_file=made["members.npz"], **options)
    assert plan(made["target"], members_file=made["members.npz"], reference_file=made["reference"], **options)


@pytest.mark.slow
def test_spark_audit_of_a_table_missing_a_signature_column_is_the_in_process_line(kinds, spark):
    made = kinds["tabular"]
    with pytest.raises(InputError) as in_process:
        audit(config(made, query_table=made["missing"]), progress=False)
    before = {r.info.run_id for r in failed_runs()}
    with pytest.raises(InputError) as on_spark:
        audit(config(made, query_table=made["missing"], engine="spark"), progress=False)
    assert str(on_spark.value) == str(in_process.value)
    assert str(on_spark.value).startswith(
        "missing.parquet: expected the columns the model's signature names, missing 1: 'mean radius' (the file has "
        "'mean texture', "
    )
    assert len([r for r in failed_runs() if r.info.run_id not in before]) == 1
