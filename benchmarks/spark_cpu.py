"""Where a Spark audit's CPU goes: ``python -m benchmarks.spark_cpu [--n N] [--profile]``.

The ``spark`` measurement times a Spark audit as a whole; this one says what its job spends,
for whoever makes it faster. In a fresh temporary store it trains and calibrates the same
target as ``spark`` does, starts a ``local[2]`` session, audits the cached table of ``N``
augmented images (default 1,000,000) with ``--engine spark``, and prints:

- the wall time of the audit, and the CPU seconds the JVM (Spark's driver and local executors)
  and the Python processes below it (the daemon and its workers) spent during it, from
  ``/proc``, read while the session still holds its workers;
- with ``--profile``, PySpark's UDF profiler on (``spark.sql.pyspark.udf.profiler=perf``):
  each Python UDF's profile (``pstats``, summed over the workers), as ``spark.profile.show``
  prints it. The profiler adds its own cost to the workers' CPU; run without it for that.

Linux only (``/proc``). One run; the shared machines move timings by tens of percent.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from benchmarks._common import progress, temporary_store
from benchmarks.spark import SIZES, _setup, cached_table

#: Clock ticks per second of ``/proc/PID/stat``'s CPU times.
TICKS = os.sysconf("SC_CLK_TCK")


def _processes() -> dict[int, tuple[int, float]]:
    """Every process's parent and CPU seconds (user + system), from ``/proc``."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended while we read
            continue
        found[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / TICKS)
    return found


def _cpu_below(root: int) -> tuple[float, float]:
    """CPU seconds of process ``root`` and, summed, of every process below it."""
    processes = _processes()
    below, frontier = 0.0, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, (ppid, _) in processes.items() if ppid == parent]
        below += sum(processes[pid][1] for pid in children)
        frontier += children
    return processes[root][1], below


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=max(SIZES), help="images in the query table (default: 1,000,000)")
    parser.add_argument("--profile", action="store_true", help="profile the Python UDFs (adds to their CPU time)")
    args = parser.parse_args()

    from ema.engines.spark import spark_session
    from ema.workflows.audit import AuditConfig, audit

    table = cached_table(args.n)
    with temporary_store("ema-bench-spark-cpu-") as store:
        progress("spark_cpu: training and calibrating the target")
        uri = _setup()
        with (
            tempfile.TemporaryDirectory(dir=store) as scratch,
            spark_session("local[2]") as spark,
        ):
            if args.profile:
                spark.conf.set("spark.sql.pyspark.udf.profiler", "perf")
            jvm = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
            jvm_before, python_before = _cpu_below(jvm)
            progress(f"spark_cpu: Spark audit of {args.n:,} images")
            start = time.perf_counter()
            config = AuditConfig(
                model_uri=uri, query_table=str(table), engine="spark", membership_out=str(Path(scratch) / "m")
            )
            audit(config, progress=False)
            seconds = time.perf_counter() - start
            jvm_after, python_after = _cpu_below(jvm)
            print(
                f"audit of {args.n:,} images: {seconds:.1f} s wall; CPU seconds during it: "
                f"JVM {jvm_after - jvm_before:.1f}, Python workers {python_after - python_before:.1f}"
            )
            if args.profile:
                spark.profile.show(type="perf")


if __name__ == "__main__":
    main()
