"""Registry writes that two processes may make at once: a version's tags and a model's aliases."""

from __future__ import annotations

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
