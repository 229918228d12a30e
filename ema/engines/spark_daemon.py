"""Spark's Python daemon (``spark.python.daemon.module``), with the scoring code loaded before it forks.

Spark starts one daemon per executor and forks a Python worker from it for each Python step
of a task. Each worker then imports what its step runs (MLflow's pyfunc, the batch code and
the auditors) and, on its first model batch, reads every installed distribution's metadata
(:func:`ema.oracle.warm_model_loading`). This daemon does all of that once, before its first
fork, so that the workers inherit it; then it is :mod:`pyspark.daemon`, unchanged.
"""

from __future__ import annotations

from pyspark import daemon

import ema.engines.batches  # noqa: F401 - imported to be inherited by the forked workers
from ema.oracle import warm_model_loading

if __name__ == "__main__":
    warm_model_loading()
    daemon.manager()
