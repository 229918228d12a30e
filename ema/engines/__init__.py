"""The executor side of the Spark engine: what runs where pyspark is.

The engine table (names, option checks, ``score``) is :mod:`ema.workflows.engines`: an engine
wires oracles, tracking and auditors, which only a workflow may import. Its rows:

- in-process (:mod:`ema.workflows.audit_in_process`): :mod:`ema.oracle` scores the query in
  batches in this process, and the auditors get the per-sample arrays.
- spark (:mod:`ema.workflows.audit_spark`): :mod:`ema.engines.spark` reads a Parquet query
  table, scores it on the executors through the in-process oracle (the model's folder shipped
  with the job) and computes per-sample signals and flags there in the same pass
  (:mod:`ema.engines.batches`, the same functions the in-process audit calls), and hands the
  driver counts only.

pyspark is imported by :mod:`ema.engines.spark` alone, so that the workbench runs without it.
"""
