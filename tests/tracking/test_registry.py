"""Registry writes that two processes may make at once: a version's tags and a model's aliases; an alias moved."""

from __future__ import annotations

import logging

import pytest
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from ema.tracking.registry import RegisteredVersion, set_alias, set_version_tags

NAME = "ema-target"
CONFLICT = "(psycopg2.errors.UniqueViolation) duplicate key value violates unique constraint"


@pytest.fixture
def version(store, tmp_path) -> RegisteredVersion:
    client = MlflowClient()
    client.create_registered_model(NAME)
    return RegisteredVersion.from_entity(client.create_model_version(NAME, source=str(tmp_path)))


def race_first_call(monkeypatch, method: str, other_process) -> None:
    """The first call of ``MlflowClient.<method>`` loses a race: ``other_process`` sets the key, then ours fails."""
    real, raced = getattr(MlflowClient, method), []

    def losing_first(self, *args):
        if not raced:
            raced.append(args)
            other_process()
            raise MlflowException(CONFLICT)
        return real(self, *args)

    monkeypatch.setattr(MlflowClient, method, losing_first)


def test_a_version_tag_set_at_once_by_another_process_ends_as_ours(version, monkeypatch):
    """Two audits of one version write its first ``last_audit`` together: the later one is kept, neither fails."""
    client = MlflowClient()
    race_first_call(
        monkeypatch, "set_model_version_tag", lambda: client.set_model_version_tag(NAME, "1", "ema.last", "theirs")
    )
    set_version_tags(version, {"ema.last": "ours"})
    assert client.get_model_version(NAME, "1").tags["ema.last"] == "ours"


def test_an_alias_set_at_once_by_another_process_ends_as_ours(version, monkeypatch, tmp_path):
    client = MlflowClient()
    client.create_model_version(NAME, source=str(tmp_path))
    race_first_call(
        monkeypatch, "set_registered_model_alias", lambda: client.set_registered_model_alias(NAME, "target", "2")
    )
    set_alias(version, "target")
    assert str(client.get_model_version_by_alias(NAME, "target").version) == "1"


def test_set_alias_moving_an_alias_says_from_which_version_and_data_to_which(store, tmp_path, caplog):
    """`ema demo --data breast-cancer` moved the MNIST demo's @target to a table model without a word."""
    client = MlflowClient()
    client.create_registered_model(NAME)
    first, table, marked = (
        RegisteredVersion.from_entity(client.create_model_version(NAME, source=str(tmp_path), tags=tags))
        for tags in (
            {"ema.data": "mnist-embedded"},
            {"ema.data": "file", "ema.data_root": str(tmp_path / "patients.csv")},
            {"ema.data": "mnist-embedded", "ema.data_fold_file.M1": str(tmp_path / "M1-marked.npz")},
        )
    )
    with caplog.at_level(logging.WARNING, logger="ema.tracking.registry"):
        set_alias(first, "target")
        set_alias(first, "target")
        assert caplog.messages == []  # set, then set again where it was: nothing moved
        set_alias(table, "target")
        set_alias(marked, "target")
    assert caplog.messages == [
        "alias @target of ema-target moved from v1 (mnist-embedded) to v2 (file patients.csv): "
        "models:/ema-target@target now reaches it",
        "alias @target of ema-target moved from v2 (file patients.csv) to v3 (mnist-embedded, M1 from M1-marked.npz): "
        "models:/ema-target@target now reaches it",
    ]
    assert str(client.get_model_version_by_alias(NAME, "target").version) == "3"
