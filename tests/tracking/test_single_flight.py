"""Single-flight caches: the file lock (sqlite) and the registry lease (any store), in one process."""

from __future__ import annotations

import json
import threading
import time

import pytest
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from ema.errors import EMAError
from ema.tracking import keys, single_flight
from ema.tracking.single_flight import ClaimTimeout, Lease, claim, claim_mode

NAME, KEY = "ema-calibration", "0123abcd"
TAG = keys.TAG_CLAIM_PREFIX + KEY


@pytest.fixture
def lease(store, monkeypatch):
    """Force the lease on the sqlite store, with short pauses."""
    monkeypatch.setenv(single_flight.MODE_ENV, "lease")
    monkeypatch.setattr(single_flight, "SETTLE_SECONDS", 0.01)
    monkeypatch.setattr(single_flight, "POLL_SECONDS", 0.01)
    return store


def claim_tag() -> str | None:
    return MlflowClient().get_registered_model(NAME).tags.get(TAG)


def write_claim(owner: str, expires: float) -> None:
    MlflowClient().set_registered_model_tag(NAME, TAG, Lease(owner, expires).to_json())


def test_single_flight_returns_what_it_finds_without_building(store):
    built = []
    value, was_built = single_flight.single_flight(NAME, KEY, find=lambda: "v1", build=lambda: built.append(1))
    assert (value, was_built, built) == ("v1", False, [])


def test_single_flight_looks_again_under_the_claim_before_building(store):
    answers = iter([None, "built by another process"])
    value, was_built = single_flight.single_flight(
        NAME, KEY, find=lambda: next(answers), build=lambda: pytest.fail("built twice")
    )
    assert (value, was_built) == ("built by another process", False)


def test_single_flight_builds_on_a_miss(store):
    value, was_built = single_flight.single_flight(NAME, KEY, find=lambda: None, build=lambda: "new")
    assert (value, was_built) == ("new", True)


def test_threads_missing_at_once_build_once(store):
    """Four threads miss the same entry at once: one builds, the others find its result."""
    registry, built, results = {}, [], []

    def build():
        time.sleep(0.2)
        built.append(1)
        registry[KEY] = "model"
        return "model"

    def worker():
        results.append(single_flight.single_flight(NAME, KEY, find=lambda: registry.get(KEY), build=build))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(built) == 1
    assert sorted(was_built for _, was_built in results) == [False, False, False, True]


def test_file_claim_waits_for_its_holder_then_times_out_naming_the_lock(store, monkeypatch):
    monkeypatch.setenv(single_flight.WAIT_ENV, "0.1")
    with claim(NAME, KEY):
        with pytest.raises(ClaimTimeout, match=r"waited 0 s for another process training ema-calibration .*\.lock"):
            with claim(NAME, KEY):
                pass
    with claim(NAME, KEY):  # released
        pass


def test_lease_is_written_while_held_and_deleted_after(lease):
    with claim(NAME, KEY):
        held = json.loads(claim_tag())
        assert held["expires"] > time.time()
    assert claim_tag() is None


def test_a_live_lease_of_another_process_is_waited_for(lease, monkeypatch):
    MlflowClient().create_registered_model(NAME)
    write_claim("other-host:1:abc", time.time() + 60)
    monkeypatch.setenv(single_flight.WAIT_ENV, "0.2")
    with pytest.raises(ClaimTimeout, match=r"for other-host:1:abc training ema-calibration .*ema\.claim\.0123abcd"):
        with claim(NAME, KEY):
            pass
    assert json.loads(claim_tag())["owner"] == "other-host:1:abc"


@pytest.mark.parametrize("stale", [Lease("dead-host:1:abc", time.time() - 1).to_json(), "not json"])
def test_an_expired_or_unreadable_lease_is_taken_over(lease, stale):
    MlflowClient().create_registered_model(NAME)
    MlflowClient().set_registered_model_tag(NAME, TAG, stale)
    with claim(NAME, KEY):
        assert "dead-host" not in claim_tag()
    assert claim_tag() is None


def test_a_claim_write_that_races_another_process_creating_the_tag_is_written_again(lease, monkeypatch):
    """PostgreSQL behind a tracking server: both insert the new tag at once, the loser's insert is refused.

    The loser's second try overwrites the other's claim, so it is the last writer and holds the
    claim; the other reads the tag back after the settle pause and waits.
    """
    MlflowClient().create_registered_model(NAME)
    real, calls = MlflowClient.set_registered_model_tag, []

    def set_tag(self, name, key, value):
        if key == TAG and not calls:
            calls.append(value)
            write_claim("other-host:1:abc", time.time() + 60)  # the other process, meanwhile
            raise MlflowException("(psycopg2.errors.UniqueViolation) duplicate key value violates unique constraint")
        return real(self, name, key, value)

    monkeypatch.setattr(MlflowClient, "set_registered_model_tag", set_tag)
    with claim(NAME, KEY):
        assert json.loads(claim_tag())["owner"] == json.loads(calls[0])["owner"] != "other-host:1:abc"
    assert claim_tag() is None


def test_a_lease_is_renewed_while_its_holder_works(lease, monkeypatch):
    monkeypatch.setattr(single_flight, "LEASE_SECONDS", 0.3)
    with claim(NAME, KEY):
        first = json.loads(claim_tag())["expires"]
        time.sleep(0.5)
        renewed = json.loads(claim_tag())["expires"]
    assert renewed > first


def test_claim_mode_follows_the_store_and_refuses_unknown_values(monkeypatch):
    monkeypatch.delenv(single_flight.MODE_ENV, raising=False)
    assert claim_mode("sqlite:///mlflow.db") == "lock"
    assert claim_mode("http://127.0.0.1:5000") == "lease"
    monkeypatch.setenv(single_flight.MODE_ENV, "lease")
    assert claim_mode("sqlite:///mlflow.db") == "lease"
    monkeypatch.setenv(single_flight.MODE_ENV, "lock")
    with pytest.raises(EMAError, match="needs a sqlite tracking store"):
        claim_mode("http://127.0.0.1:5000")
    monkeypatch.setenv(single_flight.MODE_ENV, "both")
    with pytest.raises(EMAError, match="expected EMA_SINGLE_FLIGHT to be 'lock', 'lease' or unset, got 'both'"):
        claim_mode("sqlite:///mlflow.db")


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "soon"])
def test_wait_seconds_refuses_what_is_not_a_duration(monkeypatch, value):
    monkeypatch.setenv(single_flight.WAIT_ENV, value)
    with pytest.raises(EMAError, match="expected EMA_CACHE_WAIT_SECONDS to be a finite number"):
        single_flight.wait_seconds()
