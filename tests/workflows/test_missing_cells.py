"""Tables with missing cells (``--allow-missing``), audited as their users' models take them.

The target is a hospital's scikit-learn Pipeline that imputes its own gaps (a median SimpleImputer,
then a RandomForest), fitted on a Breast Cancer table with missing cells and logged with a DataFrame
signature of double columns, which take NaN. Without the flag the audit refuses such a table and says
what to do; with it the cells go to the model as NaN, in-process and over HTTP (JSON and Parquet
bodies, to a real `mlflow models serve`). A model that cannot take NaN is named in a clear error, whether it
answers NaN or raises (in-process and behind a server), and the workbench's own recipes are refused up front
to train a calibration model on gaps. MLproject's ``audit`` entry point passes the flag as ``-P allow_missing=true``.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import mlflow
import mlflow.pyfunc
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from mlflow.models import infer_signature
from sklearn.datasets import load_breast_cancer
from sklearn.ensemble import RandomForestClassifier
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline

from ema.data.arrays import ArraySet
from ema.errors import InputError, ModelAccessError
from ema.oracle import PyfuncOracle
from ema.oracle.batching import MIN_BATCH
from ema.tracking import keys
from ema.training.recipes import DEFAULT_TABLE_RECIPE
from ema.workflows.audit import AuditConfig, audit
from ema_cli.cli import main, option_spellings
from tests.conftest import module_store
from tests.workflows.test_serving import failed_ids, free_port, serve, stop
from tests.workflows.test_tables import log_user_model

#: Rows per set, features kept of Breast Cancer's, and the share of their cells left empty.
ROWS, FEATURES, MISSING_SHARE = 100, 10, 0.1
ROOT = Path(__file__).resolve().parents[2]


def missing_sets() -> dict[str, ArraySet]:
    """Breast Cancer's first :data:`FEATURES` features with :data:`MISSING_SHARE` of the cells NaN, in four disjoint
    sets of :data:`ROWS` rows."""
    data = load_breast_cancer()
    rng = np.random.default_rng(0)
    order = rng.permutation(len(data.target))
    x = data.data[:, :FEATURES].copy()
    x[rng.random(x.shape) < MISSING_SHARE] = np.nan
    features = tuple(name.replace(" ", "_") for name in data.feature_names[:FEATURES])
    return disjoint_sets(x, data.target, order, features, ROWS)


def disjoint_sets(
    x: np.ndarray, labels: np.ndarray, order: np.ndarray, features: tuple[str, ...], rows: int
) -> dict[str, ArraySet]:
    """A table cut in four disjoint sets of ``rows`` rows in ``order``: members, more members, held out, calibration."""
    sets = {}
    for i, name in enumerate(("members", "more_members", "held_out", "calibration")):
        taken = order[i * rows : (i + 1) * rows]
        sets[name] = ArraySet(name, x[taken], labels[taken].astype(np.int64), taken.astype(np.int64), features)
    return sets


def frame(data: ArraySet) -> pd.DataFrame:
    return pd.DataFrame(data.x, columns=list(data.features)).assign(label=data.y)


class LinearSoftmax(mlflow.pyfunc.PythonModel):
    """A model that cannot take missing values: softmax of a linear map, so a NaN cell makes its row's outputs NaN."""

    def __init__(self, weights: np.ndarray) -> None:
        self.weights = weights

    def predict(self, context, model_input, params=None):
        scores = np.asarray(model_input, dtype=np.float64) @ self.weights
        scores -= scores.max(axis=1, keepdims=True)
        return np.exp(scores) / np.exp(scores).sum(axis=1, keepdims=True)


def log_linear(features: pd.DataFrame, name: str) -> str:
    model = LinearSoftmax(np.random.default_rng(1).normal(size=(features.shape[1], 2)) / 100)
    with mlflow.start_run(run_name=f"train {name}"):
        info = mlflow.pyfunc.log_model(
            name="model",
            python_model=model,
            signature=infer_signature(features.head(5), model.predict(None, features.fillna(0).head(5))),
            registered_model_name=name,
            pip_requirements=["numpy"],
        )
    return f"models:/{name}/{info.registered_model_version}"


@pytest.fixture(scope="module")
def tables(tmp_path_factory, template_db):
    """The imputing target's URI, the NaN-blind model's, the files folder (``NAME.csv``, ``NAME.parquet``), the sets."""
    folder = tmp_path_factory.mktemp("missing-cells")
    sets = missing_sets()
    with module_store(tmp_path_factory, template_db, "missing-cells"):
        both = [sets["members"], sets["more_members"]]
        features = pd.concat([frame(data).drop(columns="label") for data in both], ignore_index=True)
        labels = np.concatenate([data.y for data in both])
        imputing = make_pipeline(
            SimpleImputer(strategy="median"), RandomForestClassifier(n_estimators=30, random_state=0)
        )
        model_uri = log_user_model(imputing.fit(features, labels), "imputing-target", features)
        blind_uri = log_linear(features, "nan-blind")
        for name, data in sets.items():
            frame(data).to_csv(folder / f"{name}.csv", index=False)
            frame(data).to_parquet(folder / f"{name}.parquet")
        yield model_uri, blind_uri, folder, sets


class Broken(mlflow.pyfunc.PythonModel):
    """A model that fails on every input, with gaps or without."""

    def predict(self, context, model_input, params=None):
        raise RuntimeError("the model's store is down")


@pytest.fixture(scope="module")
def raising(tables):
    """The URIs of a LogisticRegression fitted on the members' rows without gaps, which raises on NaN (as
    scikit-learn's estimators without native NaN support do), and of :class:`Broken`."""
    _, _, _, sets = tables
    features = frame(sets["members"]).drop(columns="label")
    complete = features.notna().all(axis=1).to_numpy()
    model = LogisticRegression(max_iter=5000).fit(features[complete], sets["members"].y[complete])
    with mlflow.start_run(run_name="train broken"):
        signature = infer_signature(features.head(5), np.zeros((5, 2)))
        info = mlflow.pyfunc.log_model(name="model", python_model=Broken(), signature=signature,
                                       registered_model_name="broken", pip_requirements=["numpy"])  # fmt: skip
    return log_user_model(model, "nan-raising", features[complete]), f"models:/broken/{info.registered_model_version}"


def cli(*arguments: str):
    return CliRunner().invoke(main, ["audit", "--no-progress", "--no-figures", *arguments])


def run_of(output: str) -> mlflow.entities.Run:
    """The audit run an ``ema audit`` printed."""
    return mlflow.get_run(re.search(r"run ([0-9a-f]{32})", output).group(1))


def missing_params(run_id: str) -> dict[str, str]:
    """A run's ``missing_cells.<set>`` params, by set."""
    params = mlflow.get_run(run_id).data.params
    prefix = keys.PARAM_MISSING_CELLS_PREFIX
    return {key.removeprefix(prefix): value for key, value in params.items() if key.startswith(prefix)}


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_table_with_missing_cells_is_refused_without_allow_missing_saying_what_to_do(tables, suffix):
    model_uri, _, folder, sets = tables
    result = cli("--model", model_uri, "--query-file", str(folder / f"members{suffix}"),
                 "--calibration-file", str(folder / f"calibration{suffix}"))  # fmt: skip
    assert result.exit_code == 3, result.output
    cells = np.isnan(sets["members"].x)  # the query's, which is what is audited, before the calibration file's
    row, column = np.argwhere(cells)[0]
    assert result.output.strip().splitlines()[-1] == (
        f"Error: {folder / f'members{suffix}'}: expected a finite number in every feature cell, got "
        f"{int(cells.sum())} missing (first in column {sets['members'].features[column]!r}, data row {row}, "
        "counted from 0); nothing is filled in; pass --allow-missing to send missing cells to the model as NaN when "
        "its own pipeline imputes them"
    )


def test_an_imputing_pipeline_is_audited_with_allow_missing_and_the_run_and_report_say_so(tables, tmp_path):
    model_uri, _, folder, sets = tables
    result = cli("--model", model_uri, "--query-file", str(folder / "members.csv"), "--method", "ema+calibrated",
                 "--calibration-file", str(folder / "calibration.csv"), "--members", str(folder / "more_members.csv"),
                 "--allow-missing")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "calibrated: " in result.output and "-> memorized" in result.output.split("calibrated: ")[1]
    run = run_of(result.output)
    counts = {name: str(int(np.isnan(data.x).sum())) for name, data in sets.items()}
    assert run.data.params[keys.PARAM_ALLOW_MISSING] == "True"
    assert missing_params(run.info.run_id) == {
        "query": counts["members"],
        "calibration": counts["calibration"],
        "members": counts["more_members"],
        "nonmembers": counts["calibration"],  # the calibration file is the non-member reference
    }
    assert run.data.tags[keys.TAG_CALIBRATION_SOURCE] == "clone"  # the target's own pipeline, imputer included
    report = mlflow.artifacts.download_artifacts(run_id=run.info.run_id, artifact_path="report.html", dst_path=tmp_path)
    html = open(report).read()
    total = sum(int(counts[name]) for name in ("members", "calibration", "more_members", "calibration"))
    assert f"{total} (query {counts['members']}, calibration {counts['calibration']}" in html
    assert "sent to the model as NaN (--allow-missing), nothing filled in" in html
    assert re.search(r"ema audit .*--allow-missing", html)


def audit_calibrated(model_uri: str, folder, **options):
    """The members audited by the calibrated auditor on member and non-member reference files (no calibration
    model), the tables' missing cells sent as NaN."""
    config = AuditConfig(model_uri=model_uri, query_file=str(folder / "members.csv"), method="calibrated",
                         members_file=str(folder / "more_members.csv"), reference_file=str(folder / "held_out.csv"),
                         allow_missing=True, figures=False, **options)  # fmt: skip
    return audit(config, progress=False)


def test_a_served_imputing_pipeline_answers_json_and_parquet_with_the_in_process_numbers(tables):
    """JSON has no NaN: the missing cells go as null in ``dataframe_split``, which the server reads back as NaN."""
    model_uri, _, folder, _ = tables
    local = audit_calibrated(model_uri, folder)
    assert local.primary.verdict == "memorized"
    port = free_port()
    process = serve(model_uri, port)
    try:
        for http_format in ("json", "parquet"):
            served = audit_calibrated(model_uri, folder, model_url=f"http://127.0.0.1:{port}/invocations",
                                      http_format=http_format)  # fmt: skip
            assert served.primary.metrics == local.primary.metrics, http_format
            assert served.primary.verdict == local.primary.verdict
    finally:
        stop(process)


def test_a_model_that_cannot_take_missing_cells_is_named_and_the_run_fails(tables):
    _, blind_uri, folder, sets = tables
    before = failed_ids()
    with pytest.raises(InputError) as error:
        audit_calibrated(blind_uri, folder)
    rows = int(np.isnan(sets["members"].x).any(axis=1).sum())
    assert str(error.value) == (
        f"expected finite outputs from model {blind_uri!r}, got NaN or infinite ones for {rows} of {ROWS} samples, "
        f"whose inputs had {int(np.isnan(sets['members'].x).sum())} missing cells sent as NaN (--allow-missing): this "
        "model cannot take missing values (its pipeline imputes none); audit it on rows without gaps, or a model "
        "that imputes them"
    )
    (failed,) = failed_ids() - before
    assert not mlflow.MlflowClient().list_artifacts(failed)


def test_a_model_that_raises_on_missing_cells_says_so_in_one_line(tables, raising):
    _, _, folder, sets = tables
    raising_uri, _ = raising
    batch = sets["members"].x[:MIN_BATCH]  # the first batch an in-process oracle scores
    gaps = np.isnan(batch).any(axis=1)
    with pytest.raises(InputError) as error:
        PyfuncOracle(raising_uri).predict(sets["members"])
    assert str(error.value).startswith(
        f"model {raising_uri!r} failed on rows with missing values: {gaps.sum()} of a batch of {MIN_BATCH} rows had "
        f"{int(np.isnan(batch).sum())} missing cells, sent as NaN (--allow-missing), and the batch's "
        f"{(~gaps).sum()} other rows scored; this model does not accept missing values: impute the table before the "
        "audit, or audit a model that accepts NaN (e.g. scikit-learn's HistGradientBoostingClassifier, or a pipeline "
        f"that imputes them); its error: model {raising_uri!r} failed on a batch of {MIN_BATCH} inputs"
    )
    assert "ValueError: Input X contains NaN" in str(error.value)
    result = cli("--model", raising_uri, "--query-file", str(folder / "members.csv"), "--method", "calibrated",
                 "--members", str(folder / "more_members.csv"), "--reference", str(folder / "held_out.csv"),
                 "--allow-missing")  # fmt: skip
    assert result.exit_code == 3, result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert re.match(rf"Error: model '{raising_uri}' failed on rows with missing values: \d+ of a batch", line)


def test_a_served_model_that_raises_on_missing_cells_says_so_and_other_failures_stay_as_they_were(tables, raising):
    """`mlflow models serve` answers HTTP 400 for the model's error; a model that fails on rows without gaps too
    keeps its own error."""
    _, _, folder, _ = tables
    raising_uri, broken_uri = raising
    port = free_port()
    process = serve(raising_uri, port)
    try:
        with pytest.raises(InputError) as error:
            audit_calibrated(raising_uri, folder, model_url=f"http://127.0.0.1:{port}/invocations")
    finally:
        stop(process)
    assert re.match(
        rf"scoring server http://127.0.0.1:{port}/invocations failed on rows with missing values: \d+ of a batch of "
        rf"{ROWS} rows had \d+ missing cells, sent as NaN \(--allow-missing\), and the batch's \d+ other rows scored; "
        rf"this model does not accept missing values: .*; its error: scoring server .* refused the query \(HTTP 400\)",
        str(error.value),
    )
    with pytest.raises(ModelAccessError, match=r"^model .*broken.* failed on a batch of \d+ inputs .*: RuntimeError: "):
        audit_calibrated(broken_uri, folder)


def mlproject_audit(**parameters: str):
    """``mlflow run -e audit -P NAME=VALUE ...`` in this process: the command MLflow renders from MLproject, its words
    after ``python entrypoints/audit.py`` given to the CLI as that script gives them."""
    from mlflow.projects._project_spec import load_project

    words = shlex.split(load_project(str(ROOT)).get_entry_point("audit").compute_command(parameters, None))
    assert words[:2] == ["python", "entrypoints/audit.py"], words[:2]
    return CliRunner().invoke(main, option_spellings(["audit", *words[2:]]))


def test_the_mlproject_audit_entry_point_sends_missing_cells_with_allow_missing_true(tables):
    model_uri, _, folder, sets = tables
    given = {"model": model_uri, "query_file": str(folder / "members.csv"),
             "calibration_file": str(folder / "calibration.csv")}  # fmt: skip
    refused = mlproject_audit(**given)  # the parameter's default: false
    assert refused.exit_code == 3 and "pass --allow-missing" in refused.output.splitlines()[-1], refused.output
    audited = mlproject_audit(**given, allow_missing="true")
    assert audited.exit_code == 0, audited.output
    run = run_of(audited.output)
    assert run.data.params[keys.PARAM_ALLOW_MISSING] == "True"
    assert missing_params(run.info.run_id)["query"] == str(int(np.isnan(sets["members"].x).sum()))


def test_a_recipe_is_refused_up_front_to_train_the_calibration_model_on_missing_cells(tables, tmp_path):
    model_uri, _, folder, sets = tables
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps(DEFAULT_TABLE_RECIPE))
    before = failed_ids()
    result = cli("--model", model_uri, "--query-file", str(folder / "members.csv"), "--recipe", str(recipe),
                 "--calibration-file", str(folder / "calibration.csv"), "--allow-missing")  # fmt: skip
    assert result.exit_code == 3, result.output
    assert result.output.strip().splitlines()[-1] == (
        f"Error: calibration file {folder / 'calibration.csv'}: expected no missing cells for the workbench to train "
        f"the calibration model of --method ema on with the {DEFAULT_TABLE_RECIPE['framework']} recipe {recipe} "
        f"(--recipe), got {int(np.isnan(sets['calibration'].x).sum())} missing: its recipes fill nothing in; use a "
        "method that needs no calibration model (--method calibrated --members FILE), or your own "
        "--calibration-model with its members and non-members, or a calibration file without missing cells"
    )
    (failed,) = failed_ids() - before
    assert keys.PARAM_QUERY_FINGERPRINT not in mlflow.get_run(failed).data.params  # refused before the query was read


def test_ema_train_on_a_file_with_missing_cells_is_refused_without_offering_an_option_it_lacks(tables):
    _, _, folder, _ = tables
    result = CliRunner().invoke(main, ["train", "--data-file", str(folder / "calibration.csv"), "--no-progress"])
    assert result.exit_code == 3, result.output
    refusal = result.output.strip().splitlines()[-1]
    assert "pass --allow-missing" not in refusal  # ema train has no such option
    assert refusal.endswith(
        "nothing is filled in, and the workbench's own recipes train on no missing cell; only an audit sends them "
        "to a model, as NaN (ema audit --allow-missing), for a model whose own pipeline imputes them"
    )


def test_mlflow_evaluate_audits_a_frame_with_missing_cells_when_allowed(tables, monkeypatch):
    from mlflow.models.evaluation.evaluator_registry import _model_evaluation_registry

    from ema.workflows.evaluation import EMAEvaluator

    monkeypatch.setitem(_model_evaluation_registry._registry, "ema", EMAEvaluator)  # as the entry point registers it
    model_uri, _, folder, _ = tables
    config = {"kind": "table", "members": str(folder / "more_members.csv"), "reference": str(folder / "held_out.csv"),
              "method": "calibrated", "figures": False}  # fmt: skip
    evaluate = {"model": model_uri, "data": pd.read_csv(folder / "members.csv"), "targets": "label",
                "model_type": "classifier", "evaluators": ["ema"]}  # fmt: skip
    with pytest.raises(InputError, match=r"got \d+ missing .* pass evaluator_config=\{'ema': \{'allow_missing'"):
        mlflow.models.evaluate(**evaluate, evaluator_config={"ema": config})
    result = mlflow.models.evaluate(**evaluate, evaluator_config={"ema": {**config, "allow_missing": True}})
    from_file = audit_calibrated(model_uri, folder)
    assert result.metrics["p_removed"] == from_file.primary.metrics["p_removed"]


def test_power_plans_from_references_with_missing_cells_only_when_allowed(tables):
    model_uri, _, folder, _ = tables
    arguments = ["power", "--model", model_uri, "--members", str(folder / "more_members.csv"),
                 "--reference", str(folder / "held_out.csv"), "--no-progress"]  # fmt: skip
    refused = CliRunner().invoke(main, arguments)
    assert refused.exit_code == 3 and "pass --allow-missing" in refused.output
    planned = CliRunner().invoke(main, [*arguments, "--allow-missing"])
    assert planned.exit_code == 0, planned.output
    assert "separates members from non-members" in planned.output


@pytest.mark.slow
def test_spark_sends_a_query_tables_missing_cells_as_nan_as_in_process_and_counts_them(tables, tmp_path):
    spark_engine = pytest.importorskip("ema.engines.spark", reason="the Spark engine needs pyspark")
    model_uri, _, folder, sets = tables
    options = {"model_uri": model_uri, "query_table": str(folder / "members.parquet"), "method": "ema",
               "calibration_file": str(folder / "calibration.csv"), "figures": False}  # fmt: skip
    with spark_engine.spark_session("local[2]"):
        with pytest.raises(InputError, match="pass --allow-missing"):
            audit(AuditConfig(engine="spark", **options), progress=False)
        local = audit(AuditConfig(allow_missing=True, **options), progress=False)
        on_spark = audit(AuditConfig(engine="spark", allow_missing=True, **options), progress=False)
    assert on_spark.primary.metrics == local.primary.metrics and on_spark.primary.verdict == local.primary.verdict
    query, calibration = (str(int(np.isnan(sets[name].x).sum())) for name in ("members", "calibration"))
    counts = {"query": query, "calibration": calibration, "nonmembers": calibration}  # the file is the non-members
    assert missing_params(on_spark.run_id) == missing_params(local.run_id) == counts
    report = mlflow.artifacts.download_artifacts(run_id=on_spark.run_id, artifact_path="report.html", dst_path=tmp_path)
    total = sum(map(int, counts.values()))
    assert f"{total} (query {query}, calibration {calibration}, nonmembers {calibration})" in open(report).read()
