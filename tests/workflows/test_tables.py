"""Tabular targets end to end: a user's scikit-learn model on Breast Cancer, audited from CSV, Parquet and .npz files.

The target is trained and registered here as a scikit-learn user does: a RandomForestClassifier
fitted on a DataFrame of named columns, logged with ``mlflow.sklearn.log_model`` and a DataFrame
signature, no workbench tag. The audit clones it (the sklearn flavor) and calibrates on the
auditor's own ``--calibration-file``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re

import mlflow
import mlflow.sklearn
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from mlflow.models import infer_signature
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import RandomForestClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from ema.data.arrays import ArraySet
from ema.data.files import write_set
from ema.data.presets import load_splits
from ema.errors import InputError
from ema.tracking import keys
from ema.workflows.audit import AuditConfig, SuppliedCalibration, audit
from ema.workflows.references import contains_all, training_data, without_query
from ema.workflows.target import resolve_target
from ema_cli.cli import main
from tests.conftest import module_store
from tests.workflows.test_unlearn_sklearn import _failed_runs as failed_runs

#: The label column of the test's files: not the default, so that --label-column is exercised.
LABEL = "diagnosis"


def frame(data: ArraySet) -> pd.DataFrame:
    """A set as a user's table: one column per feature, then the label."""
    table = pd.DataFrame(data.x, columns=list(data.features))
    table[LABEL] = data.y
    return table


def audit_cli(model_uri: str, query_file, calibration_file, *options: str):
    """``ema audit`` of a table file with a calibration file (and ``options``), as a user types it."""
    return CliRunner().invoke(
        main,
        ["audit", "--model", model_uri, "--query-file", str(query_file), "--label-column", LABEL,
         "--calibration-file", str(calibration_file), "--no-progress", *options],
    )  # fmt: skip


def refusal(model_uri: str, query_file, calibration_file, *options: str) -> str:
    """The error line of an ``ema audit`` (:func:`audit_cli`) that was refused as an input error (exit 3)."""
    result = audit_cli(model_uri, query_file, calibration_file, *options)
    assert result.exit_code == 3, result.output
    return result.output.strip().splitlines()[-1]


def log_user_model(model, name: str, features: pd.DataFrame, predict_fn: str | None = "predict_proba") -> str:
    """Log and register a user's fitted scikit-learn model with a DataFrame signature; its version's URI.

    ``predict_fn`` None keeps the default ``predict`` (labels only)."""
    outputs = getattr(model, predict_fn or "predict")(features.head(5))
    with mlflow.start_run(run_name=f"train {name}"):
        info = mlflow.sklearn.log_model(
            model,
            name="model",
            signature=infer_signature(features.head(5), outputs),
            registered_model_name=name,
            serialization_format=mlflow.sklearn.SERIALIZATION_FORMAT_CLOUDPICKLE,
            pip_requirements=["scikit-learn"],
            **({"pyfunc_predict_fn": predict_fn} if predict_fn else {}),
        )
    return f"models:/{name}/{info.registered_model_version}"


@pytest.fixture(scope="module")
def tabular(tmp_path_factory, template_db):
    """(model URI, folder): a user's RandomForest on Breast Cancer's training folds, and the auditor's files."""
    splits = load_splits("breast-cancer", 0)
    folder = tmp_path_factory.mktemp("tables")
    with module_store(tmp_path_factory, template_db):
        features = pd.DataFrame(splits.train.x, columns=list(splits.train.features))
        model = RandomForestClassifier(n_estimators=100, random_state=0).fit(features, splits.train.y)
        model_uri = log_user_model(model, "rf-breast-cancer", features)
        for name, data in (("members", splits.query("M1")), ("held_out", splits.held_out)):
            frame(data).to_csv(folder / f"{name}.csv", index=False)
        frame(splits.query("M1")).to_parquet(folder / "members.parquet")
        write_set(splits.query("M1"), folder / "members.npz")
        frame(splits.calibration).to_csv(folder / "calibration.csv", index=False)
        yield model_uri, folder


def last_failed_run():
    """The FAILED run started last, in any experiment."""
    client = mlflow.MlflowClient()
    experiments = [experiment.experiment_id for experiment in client.search_experiments()]
    (run,) = client.search_runs(
        experiments,
        filter_string="attributes.status = 'FAILED'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return run


def audit_file(model_uri: str, query_file, calibration_file, **options):
    config = AuditConfig(
        model_uri=model_uri,
        query_file=str(query_file),
        calibration_file=str(calibration_file),
        label_column=LABEL,
        **options,
    )
    return audit(config, progress=False)


def test_audit_csv_members_memorized_and_held_out_not(tabular):
    model_uri, folder = tabular
    members = audit_file(model_uri, folder / "members.csv", folder / "calibration.csv")
    held_out = audit_file(model_uri, folder / "held_out.csv", folder / "calibration.csv")
    assert members.primary.verdict == "memorized"
    assert held_out.primary.verdict != "memorized"
    run = mlflow.get_run(members.run_id)
    assert run.data.tags["ema.calibration_source"] == "clone"
    assert run.data.params["calibration_file"].endswith("calibration.csv")
    assert run.info.run_name == "members · ema · rf-breast-cancer v1"  # the file's name without its suffix
    assert run.data.params[keys.PARAM_QUERY] == "members.csv"


@pytest.mark.parametrize("suffix", [".parquet", ".npz"])
def test_audit_other_formats_give_the_csv_numbers(tabular, suffix):
    model_uri, folder = tabular
    csv = audit_file(model_uri, folder / "members.csv", folder / "calibration.csv")
    other = audit_file(model_uri, folder / f"members{suffix}", folder / "calibration.csv")
    assert other.primary.metrics == csv.primary.metrics
    np.testing.assert_array_equal(other.primary.membership, csv.primary.membership)


def test_a_pipeline_picking_columns_by_name_is_cloned_on_a_table_of_those_names(tabular):
    """A ColumnTransformer that selects the signature's columns by name refuses a bare array: its clone is trained
    on a DataFrame of the columns, as the target was."""
    _, folder = tabular
    splits = load_splits("breast-cancer", 0)
    features = pd.DataFrame(splits.train.x, columns=list(splits.train.features))
    by_name = ColumnTransformer([("scaled", StandardScaler(), list(features.columns[:10]))], remainder="passthrough")
    pipeline = make_pipeline(by_name, RandomForestClassifier(n_estimators=50, random_state=0))
    model_uri = log_user_model(pipeline.fit(features, splits.train.y), "pipeline-breast-cancer", features)
    outcome = audit_file(model_uri, folder / "members.csv", folder / "calibration.csv")
    assert outcome.primary.verdict == "memorized"
    assert mlflow.get_run(outcome.run_id).data.tags["ema.calibration_source"] == "clone"


def test_audit_table_references_from_files(tabular):
    """--members (Parquet) and --reference (CSV) are read as tables, with the label column given."""
    model_uri, folder = tabular
    outcome = audit_file(
        model_uri,
        folder / "held_out.csv",
        folder / "calibration.csv",
        method="calibrated",
        members_file=str(folder / "members.parquet"),
        reference_file=str(folder / "calibration.csv"),
    )
    tags = mlflow.get_run(outcome.run_id).data.tags
    assert tags["ema.member_reference"].startswith(f"file {folder / 'members.parquet'}")
    assert tags["ema.nonmember_reference"].startswith(f"file {folder / 'calibration.csv'}")


def test_audit_query_missing_a_signature_column_is_refused_in_one_line(tabular, tmp_path):
    model_uri, folder = tabular
    pd.read_csv(folder / "members.csv").drop(columns=["mean radius"]).to_csv(tmp_path / "q.csv", index=False)
    before = failed_runs()
    result = audit_cli(model_uri, tmp_path / "q.csv", folder / "calibration.csv")
    assert result.exit_code != 0
    named = f"Error: {tmp_path / 'q.csv'}: expected the columns the model's signature names, missing 1: 'mean radius'"
    assert named in result.output  # the file as given, not `q`
    assert len(result.output.strip().splitlines()) == 1
    assert failed_runs() == before + 1
    assert last_failed_run().data.tags[keys.TAG_ERROR] == result.output.strip().removeprefix("Error: ")


def test_audit_table_refuses_augment_shifts_in_one_line_and_leaves_a_failed_run(tabular):
    model_uri, folder = tabular
    before = failed_runs()
    result = audit_cli(
        model_uri,
        folder / "members.csv",
        folder / "calibration.csv",
        "--method",
        "calibrated",
        "--members",
        str(folder / "members.npz"),
        "--augment",
        "shifts",
    )
    assert result.exit_code != 0
    assert "expected images with --augment shifts (it moves pixels), got table of 30 features" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert failed_runs() == before + 1


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            ("--input-scale", "255"),
            "expected no --input-scale or --normalize with a table of 30 features (they scale pixels), got "
            "--input-scale 255.0; give",
        ),
        (  # --input-scale was not given: the message said "got --input-scale 1.0 --normalize 0.5,0.2"
            ("--normalize", "0.5,0.2"),
            "expected no --input-scale or --normalize with a table of 30 features (they scale pixels), got "
            "--normalize 0.5,0.2; give",
        ),
        (("--pixel-order", "hwc"), "expected images to order with --pixel-order hwc, got a table of 30 features"),
    ],
)
def test_audit_table_refuses_pixel_options_in_one_line(tabular, options, message):
    model_uri, folder = tabular
    before = failed_runs()
    result = audit_cli(model_uri, folder / "members.csv", folder / "calibration.csv", *options)
    assert result.exit_code == 3, result.output
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert failed_runs() == before + 1


def test_audit_table_with_labels_in_another_order_is_withheld_and_warned_about_labels_not_pixels(tabular, tmp_path):
    """Its own training rows with the labels swapped: every verdict is withheld (it said `not_memorized` before)."""
    model_uri, folder = tabular
    for name in ("members", "calibration"):
        table = pd.read_csv(folder / f"{name}.csv")
        table[LABEL] = 1 - table[LABEL]  # the classes named in the other order than the model's outputs
        table.to_csv(tmp_path / f"{name}.csv", index=False)
    result = audit_cli(model_uri, tmp_path / "members.csv", tmp_path / "calibration.csv", "--method", "ema+calibrated")
    assert result.exit_code == 1, result.output
    assert "Error: every verdict is withheld (inconclusive): the inputs do not reach the model" in result.output
    tags = mlflow.get_run(re.search(r"; run ([0-9a-f]{32})\)", result.output)[1]).data.tags
    assert tags[keys.TAG_VERDICT] == tags[f"{keys.TAG_VERDICT}.ema"] == tags[f"{keys.TAG_VERDICT}.calibrated"]
    assert tags[keys.TAG_VERDICT] == "inconclusive"
    assert tags[keys.TAG_WITHHELD].startswith("the target's outputs match the non-member reference's labels far better")
    warnings = [line for line in result.output.splitlines() if line.startswith("warning: target accuracy")]
    assert warnings and "not the model's classes in the order of its outputs" in warnings[0], result.output
    assert (
        "warning: the target's outputs match the non-member reference's labels far better in another order "
        "(accuracy 0.9"
        in result.output
        and "reading output 1 as class 0, output 0 as class 1" in result.output
    )
    assert "pixels in [0, 1]" not in result.output  # no pixel-scaling probe on a table


def test_audit_query_extra_columns_are_ignored_and_listed(tabular, tmp_path, caplog):
    model_uri, folder = tabular
    extra = pd.read_csv(folder / "members.csv")
    extra.insert(0, "patient_id", np.arange(len(extra)))
    extra.to_csv(tmp_path / "members.csv", index=False)
    calibration = pd.read_csv(folder / "calibration.csv")
    calibration.insert(0, "patient_id", np.arange(len(calibration)))
    calibration.to_csv(tmp_path / "calibration.csv", index=False)
    with caplog.at_level(logging.WARNING):
        outcome = audit_file(model_uri, tmp_path / "members.csv", tmp_path / "calibration.csv")
    assert outcome.primary.verdict == "memorized"
    assert "left out: patient_id" in caplog.text
    recorded = json.loads(mlflow.get_run(outcome.run_id).data.tags[keys.TAG_WARNINGS])
    left_out = "members: 1 column(s) the model's signature does not name are left out: patient_id"
    assert left_out in recorded and left_out in outcome.warnings


def test_audit_cli_prints_a_table_warning_once_and_records_it(tabular, tmp_path, monkeypatch):
    """Without logging configured (as `ema audit` runs), a warning is shown as it arises; the closing list of
    warnings left it out, which printed it twice."""
    model_uri, folder = tabular
    extra = pd.read_csv(folder / "members.csv")
    extra.insert(0, "patient_id", np.arange(len(extra)))
    extra.to_csv(tmp_path / "members.csv", index=False)
    monkeypatch.setattr(logging.getLogger(), "handlers", [])  # pytest's own capture handlers off: Python's last resort
    result = audit_cli(model_uri, tmp_path / "members.csv", folder / "calibration.csv")
    assert result.exit_code == 0, result.output
    left_out = "members: 1 column(s) the model's signature does not name are left out: patient_id"
    assert result.output.count(left_out) == 1
    run_id = result.output.partition("run ")[2].partition(")")[0]
    assert left_out in json.loads(mlflow.get_run(run_id).data.tags[keys.TAG_WARNINGS])


def test_a_query_column_the_model_does_not_take_is_needed_nowhere_else_and_trains_no_clone(tabular, tmp_path):
    """An ID in the query only, and a column in the calibration file only (here a copy of the label): the audit
    runs on the model's 30 columns, with the calibration model of the plain files (a clone trained on the extra
    column as a feature would have been another model)."""
    model_uri, folder = tabular
    query = pd.read_csv(folder / "members.csv")
    query.insert(0, "patient_id", np.arange(len(query)))
    query.to_csv(tmp_path / "members.csv", index=False)
    calibration = pd.read_csv(folder / "calibration.csv")
    calibration["followup"] = calibration[LABEL]
    calibration.to_csv(tmp_path / "calibration.csv", index=False)
    plain = audit_file(model_uri, folder / "members.csv", folder / "calibration.csv")
    extra = audit_file(model_uri, tmp_path / "members.csv", tmp_path / "calibration.csv")
    assert extra.primary.metrics == plain.primary.metrics
    tags = [mlflow.get_run(outcome.run_id).data.tags for outcome in (plain, extra)]
    assert tags[0]["ema.calibration_version"] == tags[1]["ema.calibration_version"]


def test_member_and_nonmember_files_leave_the_querys_own_rows_out_whatever_their_column_order(tabular, tmp_path):
    model_uri, folder = tabular
    splits = load_splits("breast-cancer", 0)
    members = pd.concat([frame(splits.query("M1")), frame(splits.query("M2"))])
    members[list(reversed(members.columns))].to_csv(tmp_path / "members.csv", index=False)
    reference = pd.concat([pd.read_csv(folder / "calibration.csv"), frame(splits.query("M1"))])
    reference.insert(0, "patient_id", np.arange(len(reference)))
    reference.to_csv(tmp_path / "reference.csv", index=False)
    outcome = audit_file(
        model_uri,
        folder / "members.csv",
        folder / "calibration.csv",
        method="calibrated",
        members_file=str(tmp_path / "members.csv"),
        reference_file=str(tmp_path / "reference.csv"),
    )
    tags = mlflow.get_run(outcome.run_id).data.tags
    n_m1, n_m2, n_calibration = len(splits.query("M1")), len(splits.query("M2")), len(splits.calibration)
    assert tags["ema.member_reference"].endswith(f": {n_m2} samples, {n_m1} of the query's left out")
    assert tags["ema.nonmember_reference"].endswith(f": {n_calibration} samples, {n_m1} of the query's left out")


def test_the_default_reference_from_a_calibration_file_leaves_the_querys_own_rows_out(tabular, tmp_path):
    """A calibration file the query was drawn from is the non-member reference by default: without the query's rows."""
    model_uri, folder = tabular
    splits = load_splits("breast-cancer", 0)
    pd.concat([pd.read_csv(folder / "calibration.csv"), frame(splits.query("M1"))]).to_csv(
        tmp_path / "calibration_and_query.csv", index=False
    )
    frame(splits.query("M2")).to_csv(tmp_path / "other_members.csv", index=False)
    outcome = audit_file(
        model_uri,
        folder / "members.csv",
        tmp_path / "calibration_and_query.csv",
        method="calibrated",
        members_file=str(tmp_path / "other_members.csv"),
    )
    n_m1, n_calibration = len(splits.query("M1")), len(splits.calibration)
    assert mlflow.get_run(outcome.run_id).data.tags["ema.nonmember_reference"] == (
        f"calibration file calibration_and_query: {n_calibration} samples, {n_m1} of the query's left out"
    )


def test_a_supplied_calibration_models_non_members_are_the_default_reference(tabular, tmp_path):
    """No --reference and no --calibration-file: not the preset's digits (refused for a table), the calibration
    model's non-members."""
    model_uri, folder = tabular
    frame(load_splits("breast-cancer", 0).query("M2")).to_csv(tmp_path / "cal_members.csv", index=False)
    config = AuditConfig(
        model_uri=model_uri,
        query_file=str(folder / "held_out.csv"),
        label_column=LABEL,
        calibration=SuppliedCalibration(model_uri, str(tmp_path / "cal_members.csv"), str(folder / "calibration.csv")),
    )
    assert audit(config, progress=False).primary.verdict == "not_memorized"
    members = str(tmp_path / "cal_members.csv")
    calibrated = audit(dataclasses.replace(config, method="calibrated", members_file=members), progress=False)
    n_reference = len(pd.read_csv(folder / "calibration.csv"))
    assert mlflow.get_run(calibrated.run_id).data.tags["ema.nonmember_reference"] == (
        f"file {folder / 'calibration.csv'}: {n_reference} samples, none the query's"
    )


def test_a_calibration_file_with_one_row_of_a_class_trains_a_calibration_model_of_every_class(tabular, tmp_path):
    """The row falls in one half: the clone trained on the other has a column for the class all the same."""
    model_uri, folder = tabular
    calibration = pd.read_csv(folder / "calibration.csv")
    one_malignant = pd.concat([calibration[calibration[LABEL] == 0], calibration[calibration[LABEL] == 1].head(1)])
    one_malignant.to_csv(tmp_path / "one_malignant.csv", index=False)
    result = audit_cli(model_uri, folder / "members.csv", tmp_path / "one_malignant.csv")
    assert result.exit_code == 0, result.output


def test_a_calibration_file_of_a_few_rows_per_class_is_warned_of_in_the_audits_record(tabular, tmp_path):
    """Two rows of each class give a verdict (thresholds from one row a class in each half): said, not silent."""
    model_uri, folder = tabular
    calibration = pd.read_csv(folder / "calibration.csv")
    calibration.groupby(LABEL).head(2).to_csv(tmp_path / "two_per_class.csv", index=False)
    few = audit_file(model_uri, folder / "held_out.csv", tmp_path / "two_per_class.csv")
    warned = [w for w in few.warnings if "rows of each class" in w]
    assert warned == [
        "calibration file two_per_class: expected at least 10 rows of each class, got fewer in 2 of 2 classes "
        "(class 0: 2, class 1: 2): the calibration model trains on one half of the set and EMA's thresholds are "
        "picked on the other (one per class with --threshold-mode per-class), so such a class is barely learnt and "
        "its thresholds rest on a handful of rows; give --calibration-file FILE with more of each class"
    ]
    assert warned[0] in json.loads(mlflow.get_run(few.run_id).data.tags[keys.TAG_WARNINGS])
    enough = audit_file(model_uri, folder / "held_out.csv", folder / "calibration.csv")
    assert not any("rows of each class" in w for w in enough.warnings)


def test_a_label_only_model_of_classes_3_and_7_is_audited_on_a_calibration_file_of_those_classes(tabular, tmp_path):
    _, folder = tabular
    splits = load_splits("breast-cancer", 0)
    features = pd.DataFrame(splits.train.x, columns=list(splits.train.features))
    model = RandomForestClassifier(n_estimators=50, random_state=0).fit(features, np.where(splits.train.y, 7, 3))
    model_uri = log_user_model(model, "labels-3-7", features, predict_fn=None)
    for name in ("members", "calibration"):
        table = pd.read_csv(folder / f"{name}.csv")
        table.assign(**{LABEL: np.where(table[LABEL], 7, 3)}).to_csv(tmp_path / f"{name}_3_7.csv", index=False)
    result = audit_cli(model_uri, tmp_path / "members_3_7.csv", tmp_path / "calibration_3_7.csv")
    assert result.exit_code == 0, result.output
    refused = audit_cli(model_uri, tmp_path / "members_3_7.csv", folder / "calibration.csv")
    assert refused.exit_code == 3
    assert refused.output.strip().splitlines()[-1] == (
        "Error: calibration file calibration: expected samples of each of the 2 classes the model answered on the "
        "query (3, 7), got none of class 3, 7; give a calibration file with every class"
    )


def test_a_members_file_holding_only_the_querys_own_rows_is_refused(tabular):
    model_uri, folder = tabular
    query = folder / "members.csv"
    result = audit_cli(model_uri, query, folder / "calibration.csv", "--members", str(query), "--method", "calibrated")
    n_query = len(load_splits("breast-cancer", 0).query("M1"))
    last = result.output.strip().splitlines()[-1]
    assert result.exit_code == 3
    assert last.endswith(f"only the query's own {n_query}: a member reference must be other members (give none to "
                         "audit without one)")  # fmt: skip


def test_the_report_of_a_file_audit_names_no_split_and_a_tables_noise_only(tabular):
    """A query file calibrated on the auditor's file uses no split: the report named the default images' one."""
    from pathlib import Path

    from mlflow.tracking import MlflowClient

    model_uri, folder = tabular
    outcome = audit_file(model_uri, folder / "held_out.csv", folder / "calibration.csv")
    page = Path(MlflowClient().download_artifacts(outcome.run_id, keys.ARTIFACT_REPORT)).read_text()
    assert "Splits (named queries" not in page and "mnist" not in page
    assert "corruption=noise (noise+rotation; a table has no rotation)" in page
    runs = MlflowClient().search_runs(
        [mlflow.get_experiment_by_name("ema").experiment_id], f"params.{keys.PARAM_MODEL_URI} = '{model_uri}'"
    )
    finished = [run for run in runs if run.info.status == "FINISHED"]
    assert {run.data.params[keys.PARAM_CORRUPTION] for run in finished} == {"noise"}  # calibration and audit runs
    params = MlflowClient().get_run(outcome.run_id).data.params
    assert params[keys.PARAM_CORRUPTION] == "noise"  # what the table's rows got, not the protocol's name
    assert keys.PARAM_PIXEL_ORDER not in params and keys.PARAM_INPUT_TRANSFORM not in params


def test_audit_calibration_file_unlike_the_query_is_refused(tabular, tmp_path):
    model_uri, folder = tabular
    pd.read_csv(folder / "calibration.csv").drop(columns=["worst area"]).to_csv(tmp_path / "cal.csv", index=False)
    result = audit_cli(model_uri, folder / "members.csv", tmp_path / "cal.csv")
    assert result.exit_code != 0
    assert f"calibration file {tmp_path / 'cal.csv'}: expected inputs like the query's (table of 30 features)" in (
        result.output
    )
    assert "missing 'worst area'" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_audit_query_and_calibration_file_both_without_labels_is_refused_on_the_query_first(tabular, tmp_path):
    """The query is what is audited: it was refused on the calibration file, read first, and its run left unnamed."""
    model_uri, folder = tabular
    for name in ("members", "calibration"):
        pd.read_csv(folder / f"{name}.csv").drop(columns=[LABEL]).to_csv(tmp_path / f"{name}.csv", index=False)
    before = failed_runs()
    result = audit_cli(model_uri, tmp_path / "members.csv", tmp_path / "calibration.csv")
    assert result.exit_code == 3, result.output
    assert result.output.startswith(f"Error: {tmp_path / 'members.csv'}: expected a label column {LABEL!r}")
    assert failed_runs() == before + 1
    assert last_failed_run().data.params[keys.PARAM_CALIBRATION_FILE] == str(tmp_path / "calibration.csv")


def test_audit_calibration_file_with_the_querys_columns_in_another_order_is_read_by_name(tabular, tmp_path):
    model_uri, folder = tabular
    calibration = pd.read_csv(folder / "calibration.csv")
    calibration[list(reversed(calibration.columns))].to_csv(tmp_path / "reversed.csv", index=False)
    ordered = audit_file(model_uri, folder / "members.csv", folder / "calibration.csv")
    reordered = audit_file(model_uri, folder / "members.csv", tmp_path / "reversed.csv")
    assert reordered.primary.metrics == ordered.primary.metrics
    tags = mlflow.get_run(reordered.run_id).data.tags
    assert tags["ema.calibration_version"] == mlflow.get_run(ordered.run_id).data.tags["ema.calibration_version"]


def test_audit_calibration_file_missing_a_class_is_refused_before_a_calibration_model_is_registered(tabular, tmp_path):
    model_uri, folder = tabular
    calibration = pd.read_csv(folder / "calibration.csv")
    calibration[calibration[LABEL] == 0].to_csv(tmp_path / "benign_only.csv", index=False)
    versions = len(mlflow.MlflowClient().search_model_versions("name = 'ema-calibration'"))
    result = audit_cli(model_uri, folder / "members.csv", tmp_path / "benign_only.csv")
    assert result.exit_code == 3, result.output
    assert result.output.strip() == (
        "Error: calibration file benign_only: expected samples of each of the model's 2 classes (0..1), got none "
        "of class 1; give a calibration file with every class"
    )
    assert len(mlflow.MlflowClient().search_model_versions("name = 'ema-calibration'")) == versions
    calibration.assign(**{LABEL: calibration[LABEL].where(calibration.index > 0, 2)}).to_csv(
        tmp_path / "a_third_class.csv", index=False
    )
    result = audit_cli(model_uri, folder / "members.csv", tmp_path / "a_third_class.csv")
    assert result.exit_code == 3, result.output
    assert result.output.strip().splitlines()[-1] == (
        "Error: calibration file a_third_class: expected labels of the model's 2 classes (0..1), got 1 outside "
        "(first 2, data row 0, counted from 0; labels from 0 to 2); give a calibration file of the model's classes "
        "only, numbered as its outputs are"
    )
    assert len(mlflow.MlflowClient().search_model_versions("name = 'ema-calibration'")) == versions


def test_audit_labels_numbered_from_1_are_refused_with_the_models_numbering(tabular, tmp_path):
    model_uri, folder = tabular
    members = pd.read_csv(folder / "members.csv")
    members.assign(**{LABEL: members[LABEL] + 1}).to_csv(tmp_path / "from_one.csv", index=False)
    first = int(np.argmax(members[LABEL].to_numpy() + 1 > 1))
    assert refusal(model_uri, tmp_path / "from_one.csv", folder / "calibration.csv") == (
        f"Error: query file from_one: expected labels of the model's 2 classes (0..1), got "
        f"{int((members[LABEL] == 1).sum())} outside (first 2, data row {first}, counted from 0; labels from 1 to 2); "
        "number them 0..1 in the order of the model's outputs (a scikit-learn model fitted on these labels sorts "
        "them: 1 = 0, 2 = 1; subtract 1)"
    )


@pytest.mark.parametrize("option", ["--reference", "--members"])
def test_audit_query_or_reference_with_a_label_the_model_has_no_class_of_is_named_with_its_row(
    tabular, tmp_path, option
):
    model_uri, folder = tabular
    held_out = pd.read_csv(folder / "held_out.csv")
    held_out.assign(**{LABEL: held_out[LABEL].where(held_out.index != 3, 2)}).to_csv(
        tmp_path / "label2.csv", index=False
    )
    assert refusal(model_uri, tmp_path / "label2.csv", folder / "calibration.csv") == (
        "Error: query file label2: expected labels of the model's 2 classes (0..1), got 1 outside (first 2, data row "
        "3, counted from 0; labels from 0 to 2); give a query file of the model's classes only, numbered as its "
        "outputs are"
    )
    references = {"--reference": tmp_path / "label2.csv", "--members": folder / "calibration.csv"}
    if option == "--members":
        references = {"--reference": folder / "calibration.csv", "--members": tmp_path / "label2.csv"}
    role = "non-member reference" if option == "--reference" else "member reference"
    options = [text for pair in references.items() for text in map(str, pair)]
    refused = refusal(model_uri, folder / "members.csv", folder / "calibration.csv", "--method", "calibrated", *options)
    assert refused.startswith(f"Error: {role} label2") and "got 1 outside (first 2, " in refused


def test_audit_parquet_column_of_numbers_stored_as_text_is_refused_with_the_cast_that_mends_it(tabular, tmp_path):
    model_uri, folder = tabular
    members = pd.read_csv(folder / "members.csv")
    members.assign(**{"mean radius": members["mean radius"].astype(str)}).to_parquet(tmp_path / "text_radius.parquet")
    assert refusal(model_uri, tmp_path / "text_radius.parquet", folder / "calibration.csv") == (
        "Error: text_radius: expected numbers in column 'mean radius' (the model's signature declares float64), got "
        f"text such as {str(members['mean radius'][0])!r} (data row 0, counted from 0); every cell of it reads as a "
        "number, so the column is stored as text in the file: cast it to a number type before writing the file "
        "(pandas: frame['mean radius'] = frame['mean radius'].astype(float))"
    )
    # a cell of text among the numbers is named, as before: the file's values are what is wrong
    with_word = members.assign(**{"mean radius": members["mean radius"].astype(str).where(members.index != 2, "n.a.")})
    with_word.to_parquet(tmp_path / "word_radius.parquet")
    assert refusal(model_uri, tmp_path / "word_radius.parquet", folder / "calibration.csv").endswith(
        "got text such as 'n.a.' (data row 2, counted from 0); give the values the model was trained on"
    )


def test_audit_csv_naming_a_column_twice_is_refused_by_that_name(tabular, tmp_path):
    model_uri, folder = tabular
    (tmp_path / "twice.csv").write_text(
        (folder / "members.csv").read_text().replace("mean texture,", "mean radius,", 1)
    )
    result = audit_cli(model_uri, tmp_path / "twice.csv", folder / "calibration.csv")
    assert result.exit_code == 3, result.output
    expected = f"{tmp_path / 'twice.csv'}: expected distinct column names, got 'mean radius' more than once"
    assert expected in result.output


def test_train_data_file_registers_a_table_target_with_lineage(tabular, tmp_path):
    """`ema train --data-file F.csv --label-column y --recipe R`: a DataFrame signature, members from lineage."""
    from ema.data.embedded import load_breast_cancer_table

    table = frame(load_breast_cancer_table()).rename(columns={LABEL: "y"})
    table.to_csv(tmp_path / "patients.csv", index=False)
    recipe = tmp_path / "rf.yaml"
    recipe.write_text(
        "framework: sklearn\nestimator: RandomForestClassifier\nparams: {n_estimators: 20, random_state: 0}\n"
    )
    result = CliRunner().invoke(
        main,
        ["train", "--data-file", str(tmp_path / "patients.csv"), "--label-column", "y", "--recipe", str(recipe),
         "--model-name", "patients", "--no-progress"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    target = resolve_target("models:/patients@target")
    signature = mlflow.models.get_model_info(target.model_uri).signature
    assert signature.inputs.input_names() == list(table.columns[:-1])
    assert target.data == "file" and target.label_column == "y"
    known = training_data(target)
    assert known is not None and len(known.data) == 5 * (len(table) // 9)
    outcome = audit(AuditConfig(model_uri="models:/patients@target", query="M1", method="ema"), progress=False)
    assert outcome.primary.verdict == "memorized"


def test_mlflow_evaluate_with_the_ema_evaluator_on_a_table_target(tabular, monkeypatch):
    """``mlflow.models.evaluate(..., evaluators=["ema"])`` on rows with named columns: a verdict and its code."""
    from mlflow.models.evaluation.evaluator_registry import _model_evaluation_registry

    from ema.workflows.evaluation import EMAEvaluator

    monkeypatch.setitem(_model_evaluation_registry._registry, "ema", EMAEvaluator)  # as the entry point registers it
    model_uri, folder = tabular
    config = {"kind": "table", "calibration_file": str(folder / "calibration.csv"), "label_column": LABEL}
    verdicts = {}
    for name in ("members", "held_out"):
        result = mlflow.models.evaluate(
            model=model_uri,
            data=pd.read_csv(folder / f"{name}.csv"),
            targets=LABEL,
            model_type="classifier",
            evaluators=["ema"],
            evaluator_config={"ema": config},
        )
        verdicts[name] = mlflow.get_run(result.run_id).data.tags[keys.TAG_VERDICT]
        assert result.metrics["verdict_code"] == {"memorized": 1.0, "not_memorized": 0.0}[verdicts[name]]
        assert {"rho_ema", "flag_rate"} <= set(result.metrics)
    assert verdicts == {"members": "memorized", "held_out": "not_memorized"}


@pytest.mark.parametrize("name", ["query.csv", "query.parquet", "query"])
def test_the_ema_evaluator_refuses_a_query_file_not_named_npz_before_writing_it(tabular, monkeypatch, tmp_path, name):
    """The table is kept as an .npz archive: under a .csv name it could not be read back and blocked every rerun."""
    from mlflow.models.evaluation.evaluator_registry import _model_evaluation_registry

    from ema.workflows.evaluation import EMAEvaluator

    monkeypatch.setitem(_model_evaluation_registry._registry, "ema", EMAEvaluator)
    model_uri, folder = tabular
    kept = tmp_path / name
    config = {"kind": "table", "calibration_file": str(folder / "calibration.csv"), "label_column": LABEL}
    with pytest.raises(
        InputError, match=rf"'query_file' as a path ending in \.npz .*got '{kept}' \(.*\); name it query\.npz"
    ):
        mlflow.models.evaluate(
            model=model_uri,
            data=pd.read_csv(folder / "held_out.csv"),
            targets=LABEL,
            model_type="classifier",
            evaluators=["ema"],
            evaluator_config={"ema": {**config, "query_file": str(kept)}},
        )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_demo_breast_cancer_tells_members_from_held_out(tmp_path_factory, template_db):
    """`ema demo --data breast-cancer`: EMA and the calibrated auditor both right on M1..M5 and M6 (about 40 s)."""
    with module_store(tmp_path_factory, template_db, name="demo"):
        result = CliRunner().invoke(main, ["demo", "--data", "breast-cancer", "--no-progress"])
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.output.splitlines()]
    header = next(row for row in rows if row[:1] == ["query"])
    table = [row for row in rows if len(row) == len(header) + 1 and row[0] != "query"]  # retained: "[lo, hi]"
    verdicts = {row[0]: (row[header.index("verdict")], row[header.index("calibrated")]) for row in table}
    assert set(verdicts) >= {"M1", "M2", "M3", "M4", "M5", "M6"} and "S" not in verdicts
    assert all(verdicts[f"M{i}"] == ("memorized", "memorized") for i in range(1, 6))
    assert verdicts["M6"] == ("not_memorized", "not_memorized")


def test_without_query_leaves_out_a_float_tables_own_rows():
    """Rows are matched by their bytes, whatever the dtype (a float64 table's rows are 8 bytes a feature)."""
    splits = load_splits("breast-cancer", 0)
    rest = without_query(splits.train, splits.query("M1"))
    assert len(rest) == 4 * 63 and not contains_all(rest, splits.query("M1")).any()
