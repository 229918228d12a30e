"""Where an audit's query is scored: in this process (the default) or on a Spark cluster.

- in-process: :mod:`ema.oracle` scores the query in batches in this process, and the auditors
  get the per-sample arrays.
- spark: :mod:`ema.engines.spark` reads a Parquet query table, scores it through
  ``mlflow.pyfunc.spark_udf``, computes per-sample signals and flags on the executors
  (:mod:`ema.engines.batches`, the same functions the in-process audit calls) and hands the
  driver counts only.

pyspark is imported by :mod:`ema.engines.spark` alone, so that the workbench runs without it.
"""

ENGINE_IN_PROCESS = "in-process"
ENGINE_SPARK = "spark"
ENGINES = (ENGINE_IN_PROCESS, ENGINE_SPARK)
#: How a Spark master URL may start, besides ``yarn`` (what spark-submit accepts): checked before a JVM starts.
SPARK_MASTER_PREFIXES = ("local", "spark://", "k8s://")
