"""Batches paced to the model (so that --timeout, checked between them, holds) and the progress of scoring a set."""

from __future__ import annotations

import io
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from ema import progress
from ema.data.arrays import ArraySet
from ema.errors import TimeLimitExceeded
from ema.limits import command_limits
from ema.oracle import Oracle, base
from ema.oracle.batching import BATCH_SECONDS, MIN_BATCH, BatchPace
from tests.command_clock import Clock, command_clock

#: (seconds a sample, the batch size that pace gets): the largest power of two BATCH_SECONDS holds, MIN_BATCH at least.
PACES = [(BATCH_SECONDS / 3000, 2048), (BATCH_SECONDS / 100, 64), (BATCH_SECONDS / 9, MIN_BATCH), (10.0, MIN_BATCH)]


def test_batch_pace_starts_at_min_batch_then_takes_the_largest_power_of_two_one_batch_time_holds():
    pace = BatchPace()
    assert pace.size(4096) == MIN_BATCH and pace.size(5) == 5
    for seconds_per_sample, size in PACES:
        pace.record(10, 10 * seconds_per_sample)
        assert pace.size(4096) == size
    pace.record(4096, 0.001)  # a fast model: every batch as large as allowed
    assert pace.size(4096) == 4096 and pace.size(1000) == 1000


def test_batch_pace_grows_past_a_fixed_cost_by_the_marginal_cost_of_a_larger_batch():
    """8 samples in 0.1 s, 64 in 0.11 s: a fixed cost of about 0.1 s a call. The batch's own pace would allow 256
    samples; its marginal cost (0.01 s for 56 samples) allows 8 times that at most, 2,048."""
    pace = BatchPace()
    pace.record(8, 0.1)
    pace.record(64, 0.11)
    assert pace.size(4096) == 2048
    pace.record(128, 0.05)  # faster than the smaller batch before: noise, nothing said about a marginal cost
    assert pace.size(4096) == 1024


@pytest.fixture
def clock(monkeypatch) -> Clock:
    """The time the oracle's pace and the command's deadline read, moved only by the model's work."""
    clock = command_clock(monkeypatch)
    monkeypatch.setattr(base, "time", SimpleNamespace(perf_counter=clock))
    return clock


class Tallied(Oracle):
    """Probabilities that depend on each row alone, in ``seconds_per_sample`` a row of ``clock``'s time; keeps the
    size of every batch it was handed."""

    def __init__(self, clock: Clock | None = None, seconds_per_sample: float = 0.0, **options) -> None:
        super().__init__(outputs="probabilities", **options)
        self.clock, self.seconds_per_sample = clock, seconds_per_sample
        self.batches: list[int] = []

    def _predict_batch(self, inputs):
        self.batches.append(len(inputs))
        if self.clock is not None:
            self.clock.now += len(inputs) * self.seconds_per_sample
        scores = np.asarray(inputs, dtype=np.float64).reshape(len(inputs), -1).sum(axis=1)
        first = 1.0 / (1.0 + np.exp(-np.sin(scores)))
        return np.stack([first, 1.0 - first], axis=1)


def test_paced_batches_give_the_outputs_of_one_big_batch(clock):
    """Batches of MIN_BATCH, then of the pace's size, then the set's tail: the numbers of one call."""
    images = np.random.default_rng(0).random((1000, 1, 4, 4)).astype(np.float32)
    whole = Tallied(batch_size=len(images))
    whole.paced = False
    expected = whole.predict_proba(images)
    paced = Tallied(clock, seconds_per_sample=BATCH_SECONDS / 100)
    proba = paced.predict_proba(images)
    assert whole.batches == [1000] and paced.batches == [MIN_BATCH] + [64] * 15 + [1000 - MIN_BATCH - 64 * 15]
    np.testing.assert_array_equal(proba, expected)


def test_the_deadline_stops_a_slow_model_within_a_batch_of_it(clock):
    """0.3 s a row, a 10 s deadline: 4,096 rows in one call ran 20 minutes past it; paced, the scoring stops at the
    first batch that ends past the deadline."""
    oracle = Tallied(clock, seconds_per_sample=0.3)
    with command_limits(timeout=10.0, started=0.0):
        with pytest.raises(TimeLimitExceeded, match="in step 'score the model'"):
            oracle.predict_proba(np.zeros((4096, 3), dtype=np.float32))
    assert set(oracle.batches) == {MIN_BATCH}  # BATCH_SECONDS holds fewer rows: the fewest a batch holds
    assert 10.0 <= clock.now < 10.0 + MIN_BATCH * oracle.seconds_per_sample


def scoring_to(monkeypatch, *, on_terminal: bool) -> tuple[Oracle, io.StringIO]:
    """A fast oracle with progress on, its stderr a terminal or a log, its progress shown from the first batch."""
    stderr = io.StringIO()
    stderr.isatty = lambda: on_terminal
    monkeypatch.setattr(sys, "stderr", stderr)
    monkeypatch.setattr(progress, "terminal_columns", lambda: 100)
    monkeypatch.setattr(progress, "SHOW_AFTER", 0.0)
    return Tallied(progress=True), stderr


def a_set(name: str) -> ArraySet:
    """300 blank images named ``name``."""
    return ArraySet(name, np.zeros((300, 28, 28), dtype=np.uint8), np.zeros(300, dtype=np.int64), np.arange(300))


def test_progress_on_a_terminal_is_a_bar_counting_the_sets_samples_named_by_set_and_model(monkeypatch):
    oracle, stderr = scoring_to(monkeypatch, on_terminal=True)
    oracle.predict(a_set("query.csv"))
    shown = stderr.getvalue()
    assert "score the model on query.csv" in shown and "/300 [" in shown and "sample/s" in shown


def test_progress_in_a_log_is_a_line_then_one_when_done_never_a_redrawn_bar(monkeypatch):
    oracle, stderr = scoring_to(monkeypatch, on_terminal=False)
    oracle.predict(a_set("members.parquet"))
    lines = stderr.getvalue().splitlines()
    assert "\r" not in stderr.getvalue() and len(lines) == 2
    assert lines[0] == f"score the model on members.parquet: {MIN_BATCH} of 300 samples after 0 s"
    assert lines[1].startswith("score the model on members.parquet: 300 samples in ")


@pytest.mark.parametrize("on_terminal", [True, False])
def test_no_progress_shows_nothing(monkeypatch, on_terminal):
    oracle, stderr = scoring_to(monkeypatch, on_terminal=on_terminal)
    oracle.with_progress(False).predict(a_set("query.csv"))
    assert stderr.getvalue() == ""


def test_progress_on_a_terminal_of_no_width_is_lines(monkeypatch):
    """A pseudo-terminal given no size (``script -qc`` outside a terminal): tqdm draws nothing there."""
    oracle, stderr = scoring_to(monkeypatch, on_terminal=True)
    monkeypatch.setattr(progress, "terminal_columns", lambda: 0)
    oracle.predict(a_set("query.csv"))
    assert stderr.getvalue().splitlines()[0] == f"score the model on query.csv: {MIN_BATCH} of 300 samples after 0 s"


def test_a_set_scored_within_show_after_shows_nothing(monkeypatch):
    oracle, stderr = scoring_to(monkeypatch, on_terminal=False)
    monkeypatch.setattr(progress, "SHOW_AFTER", 3600.0)
    oracle.predict(a_set("query.csv"))
    assert stderr.getvalue() == ""


def test_copies_of_an_oracle_share_its_pace(clock):
    """An audit's later sets start at the pace its first measured, whichever copy scores them."""
    oracle = Tallied(clock, seconds_per_sample=BATCH_SECONDS / 100)
    oracle.predict(np.zeros((100, 3), dtype=np.float32))
    copy = oracle.with_progress(True)
    copy.predict(np.zeros((100, 3), dtype=np.float32))
    assert copy.batches[-2:] == [64, 36]  # no first batch of MIN_BATCH again
