"""The version trail's records: every method's answer and the options behind it, old EMA-only records still read."""

from __future__ import annotations

import json
import time

import pandas as pd
import pytest

from ema.inputs import InputTransform
from ema.tracking.history import trail_table
from ema.tracking.trail import answer, trail_record, trail_rows
from ema.workflows.audit_session import audit_run_name

WHEN = time.gmtime(0)
OPTIONS = {"input": "x255", "calibration": "recipe", "members": "folds 1-4", "margin": 0.1, "strict": False}
#: A record as audits wrote it before ``results`` existed: EMA only, its metrics on the top level.
LEGACY = {
    "query": "M1",
    "query_fingerprint": "abc",
    "method": "ema",
    "rho_ema": 0.5,
    "rho_ema_ks": 0.4,
    "flag_rate": 0.9,
    "verdict": "not_memorized",
    "run_id": "r" * 32,
    "time": "2026-01-01T00:00:00Z",
}


def combined_record() -> dict:
    ema = {"rho_ema": 0.3, "rho_ema_ks": 0.2, "flag_rate": 0.9, "n_query": 200.0}
    calibrated = {
        "p_removed": 0.001,
        "p_retained": 0.6,
        "retained_fraction": 0.8,
        "retained_ci_low": 0.5,
        "retained_ci_high": float("nan"),
        "flag_rate": 0.9,
    }
    answers = [
        answer("ema", "not_memorized", ema, ("rho_ema", "rho_ema_ks")),
        answer("calibrated", "memorized", calibrated, ("p_removed", "retained_fraction", "retained_ci_low")),
    ]
    return json.loads(trail_record("M1", "abc", "ema+calibrated", answers, ema, OPTIONS, "s" * 32, WHEN))


def test_trail_record_keeps_each_methods_verdict_and_headline_numbers():
    record = combined_record()
    ema, calibrated = record["results"]  # in the run's plan order
    assert ema == {"method": "ema", "verdict": "not_memorized", "rho_ema": 0.3, "rho_ema_ks": 0.2}
    assert calibrated == {
        "method": "calibrated",
        "verdict": "memorized",
        "p_removed": 0.001,
        "retained_fraction": 0.8,
        "retained_ci_low": 0.5,
    }  # a non-finite number is left out, so the record stays JSON any reader parses
    assert (record["verdict"], record["rho_ema"], record["method"]) == ("not_memorized", 0.3, "ema")  # as before
    assert record["run_method"] == "ema+calibrated" and record["options"] == OPTIONS


def test_trail_rows_give_one_row_per_method_and_read_old_records():
    rows = trail_rows(combined_record())
    assert [(r["method"], r["verdict"]) for r in rows] == [("ema", "not_memorized"), ("calibrated", "memorized")]
    assert rows[1]["p_removed"] == 0.001 and rows[1]["options"] == OPTIONS
    (old,) = trail_rows(LEGACY)
    assert old["method"] == "ema" and old["run_method"] == "ema" and old["verdict"] == "not_memorized"
    assert (old["rho_ema"], old["rho_ema_ks"]) == (0.5, 0.4) and "flag_rate" not in old and old["options"] == {}


def test_trail_rows_show_the_margin_and_level_only_on_the_row_of_the_method_that_certified_with_them():
    record = combined_record()
    record["options"] = {**OPTIONS, "level": 0.95, "certified_by": "calibrated"}
    ema_row, calibrated_row = trail_rows(record)
    assert (ema_row["options"]["margin"], ema_row["options"]["level"]) == (None, None)
    assert (calibrated_row["options"]["margin"], calibrated_row["options"]["level"]) == (0.1, 0.95)
    assert ema_row["options"]["input"] == calibrated_row["options"]["input"] == "x255"  # run-wide options on both


def test_trail_table_lines_up_methods_numbers_and_options():
    rows = [{"version": 2, **row} for row in trail_rows(combined_record())] + [{"version": 1, **trail_rows(LEGACY)[0]}]
    table = trail_table(rows)
    assert list(table["version"]) == [2, 2, 1]  # sorted by time: the old record's is later
    assert list(table.columns[:7]) == ["version", "time", "query", "data", "run_method", "method", "verdict"]
    assert list(table["data"]) == ["200 abc", "200 abc", "? abc"]  # size and fingerprint: same-named sets told apart
    assert {"rho_ema", "p_removed", "input", "calibration", "members", "nonmembers", "margin", "strict"} <= set(
        table.columns
    )
    assert "retained_fraction" not in table.columns and "image_size" not in table.columns  # set by no audit
    calibrated = table[table["method"] == "calibrated"].iloc[0]
    assert calibrated["p_removed"] == 0.001 and calibrated["input"] == "x255"
    assert calibrated["retained"] == ""  # its interval's upper end was not finite
    assert pd.isna(table[table["version"] == 1].iloc[0]["input"])  # the old record knew no options


def test_trail_table_shows_options_only_some_audits_set():
    record = combined_record()
    record["options"] = {**OPTIONS, "image_size": 64, "alpha": 0.001}
    record["results"][1]["retained_ci_high"] = 0.95
    table = trail_table([{"version": 1, **row} for row in trail_rows(record)])
    assert list(table["image_size"]) == [64, 64] and list(table["alpha"]) == [0.001, 0.001]
    assert "test" not in table.columns and "cal_seed" not in table.columns  # left at their defaults
    assert list(table["retained"]) == ["", "0.80 [0.50, 0.95]"]


@pytest.mark.parametrize(
    ("query", "method", "model", "name"),
    [
        ("M1", "ema+calibrated", "ema-target v4", "M1 · ema+cal · ema-target v4"),
        ("M6", "both", "ema-target v12", "M6 · both · ema-target v12"),
        ("forget-request-17.npz", "calibrated", "xray v3", "forge…est-17 · calibrated · xray v3"),
        ("heldout-M6-300", "ema", "ema-target v1", "heldo…M6-300 · ema · ema-target v1"),
        ("heldout-M6-600", "ema", "ema-target v1", "heldo…M6-600 · ema · ema-target v1"),
        # a file's folder and suffix go before the name is cut: the part that tells files apart stays
        ("bc_q_members.csv", "ema+calibrated", "bc-rf v1", "bc_q_members · ema+cal · bc-rf v1"),
        ("v_textnum.csv", "ema", "bc-rf v1", "v_textnum · ema · bc-rf v1"),
        ("v_textindex.csv", "ema", "bc-rf v1", "v_textindex · ema · bc-rf v1"),
        ("v_labelnan.parquet", "ema", "bc-rf v1", "v_labelnan · ema · bc-rf v1"),
        ("s3://bucket/tables/query.parquet/", "ema", "bc-rf v1", "query · ema · bc-rf v1"),
        ("heldout.v2", "ema", "bc-rf v1", "heldout.v2 · ema · bc-rf v1"),
    ],
)
def test_audit_run_name_keeps_query_method_and_model_visible(query, method, model, name):
    assert audit_run_name(query, method, model) == name
    assert len(audit_run_name("M1", "ema+calibrated", "ema-target v4")) <= 30


def test_describe_transform_says_scale_and_normalisation():
    assert InputTransform().describe() == "x1"
    assert InputTransform(scale=255.0).describe() == "x255"
    assert InputTransform(mean=0.1307, std=0.3081).describe() == "x1 norm 0.1307,0.3081"


def test_trail_options_record_emas_settings_where_not_the_default():
    from ema.workflows.audit_config import AuditConfig
    from ema.workflows.audit_trail import SETTINGS, non_default

    changed = AuditConfig(query="M1", alpha=0.001, test="ks", k=50, threshold_mode="per-class", cal_seed=3)
    assert {name: non_default(changed, name) for name in SETTINGS} == {
        "alpha": 0.001,
        "test": "ks",
        "k": 50,
        "threshold_mode": "per-class",
        "cal_seed": 3,
    }
    assert {non_default(AuditConfig(query="M1"), name) for name in SETTINGS} == {None}


def test_audit_params_record_the_inputs_transform_and_the_files_and_models_given(tmp_path, monkeypatch):
    """``ema compare RUN RUN`` shows params: two audits that differ in these must show how."""
    from ema.workflows.audit_config import AuditConfig, SuppliedCalibration
    from ema.workflows.target import resolve_target

    transform = InputTransform(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
    target = resolve_target(model_url="http://127.0.0.1:1/invocations", transform=transform)
    config = AuditConfig(
        query="M1",
        image_size=48,
        reference_file="ref.npz",
        members_file="members.npz",
        calibration=SuppliedCalibration("models:/cal/1", "cal_members.npz", "cal_nonmembers.npz"),
    )
    params = {**config.params(target), **config.query_params(target, "image")}
    assert params["input_transform"] == "x1.0 norm 0.485,0.456,0.406,0.229,0.224,0.225"
    assert (params["image_size"], params["reference_file"], params["members_file"]) == (48, "ref.npz", "members.npz")
    precise = resolve_target(model_url="http://127.0.0.1:1/invocations", transform=InputTransform(mean=0.1234561))
    precise_params = AuditConfig(query="M1").query_params(precise, "image")
    assert precise_params["input_transform"] == "x1.0 norm 0.1234561,1.0"  # every digit
    assert params["calibration_model"] == "models:/cal/1" and "recipe_file" not in params
    (tmp_path / "ref.npz").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    named_here = AuditConfig(query="M1", reference_file="ref.npz").params(target)["reference_file"]
    assert named_here == str(tmp_path.resolve() / "ref.npz")  # one file shows alike however it was named
    plain_target = resolve_target(model_url="http://127.0.0.1:1/invocations")
    plain = {
        **AuditConfig(query="M1").params(plain_target),
        **AuditConfig(query="M1").query_params(plain_target, "image"),
    }
    assert plain["input_transform"] == "x1.0" and not {"image_size", "reference_file", "calibration_model"} & set(plain)


def test_audit_query_params_log_what_applies_to_the_querys_kind():
    """A table has no rotation, pixel order or pixel scaling: its run logs the noise it got, not the others."""
    from ema.workflows.audit_config import AuditConfig
    from ema.workflows.target import resolve_target

    target = resolve_target(model_url="http://127.0.0.1:1/invocations")
    config = AuditConfig(query="M1")
    assert config.query_params(target, "table") == {"corruption": "noise"}
    assert config.query_params(target, "image") == {
        "corruption": "noise+rotation",
        "pixel_order": "chw",
        "input_transform": "x1.0",
    }
    assert not {"corruption", "pixel_order", "input_transform"} & set(config.params(target))
