"""The report's inputs: the command that reproduces an audit, parsed back by `ema audit`, gives the same config."""

from __future__ import annotations

import shlex

import pytest
from click.testing import CliRunner

import ema.workflows.audit
from ema.inputs import InputTransform
from ema.workflows.audit import AuditConfig, SuppliedCalibration
from ema.workflows.reporting import reproduce_command
from ema_cli.cli import main


class Parsed(Exception):
    """Raised by the stand-in workflow with the config the command built."""


def parsed_back(command: str, monkeypatch) -> AuditConfig:
    """The AuditConfig `ema audit` builds from the command's words (the workflow itself is not run)."""

    def stand_in(config, progress):
        raise Parsed(config)

    monkeypatch.setattr(ema.workflows.audit, "audit", stand_in)  # the command imports it when it runs
    monkeypatch.setattr("ema_cli.options.configure", lambda experiment, **_: None)
    words = shlex.split(command.split("  #")[0])
    assert words[:2] == ["ema", "audit"]
    result = CliRunner().invoke(main, words[1:])
    assert isinstance(result.exception, Parsed), result.output
    return result.exception.args[0]


@pytest.mark.parametrize(
    "config",
    [
        AuditConfig(model_uri="models:/ema-target/3", query="M1"),
        AuditConfig(
            model_uri="models:/ema-target/3",
            model_url="http://127.0.0.1:5001/invocations",
            query_file="my queries/q 1.npz",
            method="ema+calibrated",
            test="ks",
            alpha=0.05,
            threshold_mode="per-class",
            k=80,
            cal_seed=3,
            calibration_name="my-calibration",
            outputs="probabilities",
            output_name="probabilities",
            input_shape=(-1, 28, 28, 1),
            input_dtype="uint8",
            pixel_order="hwc",
            calibration_outputs="logits",
            recipe_file="recipe.yaml",
            transform=InputTransform(scale=255.0, mean=0.5, std=2.0),
            calibration=SuppliedCalibration("models:/cal/1", "members.npz", "nonmembers.npz"),
            reference_file="reference.npz",
            members_file="members.npz",
            margin=0.2,
            strict=True,
            figures=False,
            timeout=30.0,
            request_timeout=5.0,
            http_concurrency=3,
            http_format="json",
            certify_level=0.9,
            label_column="diagnosis",
            allow_missing=True,
            calibration_file="cal.csv",
            image_size=64,
            device="cuda:1",
        ),
        AuditConfig(model_uri="runs:/abc/model", query="S", transform=InputTransform(scale=255.0)),
        AuditConfig(
            model_uri="models:/ema-target/1",
            query="M6",
            method="marks",
            mark_key="M1-key.json",
            queries=50,
            margin=0.05,
        ),
    ],
    ids=["defaults", "every-option", "scale-only", "marks"],
)
def test_reproduce_command_parses_back_to_the_same_config(config, monkeypatch):
    command = reproduce_command(config)
    assert parsed_back(command, monkeypatch) == config


def test_reproduce_command_writes_only_options_that_differ_from_their_defaults():
    command = reproduce_command(AuditConfig(model_uri="models:/ema-target/3", query="M1", alpha=0.05))
    assert command == "ema audit --model models:/ema-target/3 --query M1 --method ema --alpha 0.05 --device cpu"


def test_reproduce_command_names_what_ema_audit_cannot_set():
    command = reproduce_command(AuditConfig(model_uri="models:/m/1", query="M1", corruption="noise"))
    assert command.endswith("  # not an ema audit option: corruption=noise")


def test_reproduce_command_names_files_absolute_so_it_runs_from_any_folder(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    for name in ("query.npz", "cal.npz", "reference.npz", "members.npz", "nonmembers.npz"):
        (tmp_path / "data" / name).write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    config = AuditConfig(
        model_uri="models:/m/1",
        query_file="data/query.npz",
        calibration_file="data/cal.npz",
        reference_file="data/reference.npz",
        recipe_file="paper-medical",
        calibration=SuppliedCalibration("models:/cal/1", "data/members.npz", "data/nonmembers.npz"),
    )
    words = shlex.split(reproduce_command(config))
    data = tmp_path.resolve() / "data"
    for flag, name in [
        ("--query-file", "query.npz"),
        ("--calibration-file", "cal.npz"),
        ("--reference", "reference.npz"),
        ("--calibration-members", "members.npz"),
        ("--calibration-nonmembers", "nonmembers.npz"),
    ]:
        assert words[words.index(flag) + 1] == str(data / name), flag
    assert words[words.index("--recipe") + 1] == "paper-medical", "a named recipe is no file"
