"""How many samples each call to an in-process model scores: as many as take about :data:`BATCH_SECONDS`.

The command's ``--timeout`` is checked between batches (:func:`ema.limits.check_deadline`), so a
batch's time is how far scoring can overrun it. A fixed 4,096 samples a call is 0.02 s for the
paper's MLP but over a minute for ResNet-18 on 224x224 images on two cores (benchmarks/RESULTS.md,
``image_sizes``: 43 images/s). An oracle therefore scores a small first batch, measures the
model's time per sample, and sizes every later batch to take about :data:`BATCH_SECONDS`, up to
its ``batch_size``. A fast model reaches ``batch_size`` within two or three batches (small calls
cost a pyfunc model a fixed overhead each: benchmarks/RESULTS.md, ``scoring``).

Sizes are powers of two from :data:`MIN_BATCH` up (or ``batch_size``), so that a model's pace, measured
afresh in every run, picks the same few sizes, and none so small that a float32 network takes another
kernel path: the workbench's MLP and CNN return bitwise the same outputs for batches of 4 samples and
more as for one batch of 4,096, and outputs that differ in the last bit for batches of 1 and 2
(measured on this two-core machine, CHANGELOG.md). A model that scores each sample on its own
returns the same numbers whatever the batches.
"""

from __future__ import annotations

import math

#: Seconds one call to an in-process model should take (about the most the deadline can be overrun by).
BATCH_SECONDS = 0.5
#: The fewest samples in a call (but a set's last): an oracle's first, before it knows the model's pace (so that a
#: slow model's first batch is short too), and every call of a model slower than ``BATCH_SECONDS / MIN_BATCH`` a sample.
MIN_BATCH = 8
#: The most a batch's marginal cost may shrink its pace (:meth:`BatchPace.record`): at most this many times the
#: samples that a pace with the fixed cost would give.
MOST_GROWTH = 8


class BatchPace:
    """The size of an oracle's next batch, from the time per sample of the batches it scored last.

    One pace per oracle and the copies made of it (:meth:`~ema.oracle.base.Oracle.with_transform`):
    they score through the same model, and the sets of an audit after the first start at its pace.
    """

    def __init__(self) -> None:
        self.seconds_per_sample: float | None = None
        self._last: tuple[int, float] | None = None  # the last batch's samples and seconds

    def size(self, most: int) -> int:
        """Samples for the next call: the largest power of two that takes at most :data:`BATCH_SECONDS` at the
        measured pace, at least :data:`MIN_BATCH` (its first) and at most ``most``."""
        if self.seconds_per_sample is None or self.seconds_per_sample * MIN_BATCH >= BATCH_SECONDS:
            return min(MIN_BATCH, most)
        if self.seconds_per_sample * most <= BATCH_SECONDS:
            return most
        return 1 << int(math.log2(BATCH_SECONDS / self.seconds_per_sample))

    def record(self, samples: int, seconds: float) -> None:
        """Note that a call of ``samples`` (at least one) took ``seconds``: the pace the next size follows.

        The pace is the batch's seconds a sample, which holds the call's fixed cost too: a batch sized by
        it takes at most :data:`BATCH_SECONDS`, whatever that cost. Where the batch before was smaller, the
        time the extra samples added (their marginal cost) is the pace instead, down to an eighth of that:
        a fixed cost that dominates small calls (torch's threads, MLflow's input checks) no longer holds a
        fast model at small batches for several calls. A larger batch that took no longer than the smaller one
        before (noise) says nothing about the marginal cost.
        """
        pace = seconds / samples
        if self._last is not None and self._last[0] < samples and seconds > self._last[1]:
            marginal = (seconds - self._last[1]) / (samples - self._last[0])
            pace = min(pace, max(marginal, pace / MOST_GROWTH))
        self.seconds_per_sample, self._last = pace, (samples, seconds)
