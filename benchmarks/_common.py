"""What every measurement shares: the run configuration, timing, rows, temporary MLflow stores."""

from __future__ import annotations

import contextlib
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

#: Keys every row carries (``details`` is optional).
ROW_KEYS = (
    "benchmark",
    "case",
    "ours",
    "baseline",
    "unit",
    "baseline_label",
    "ratio",
    "ratio_label",
    "goal",
    "met",
    "repeats",
    "note",
)

#: torch threads used unless ``--threads`` says otherwise (the machine has two cores).
DEFAULT_THREADS = 2


@dataclass(frozen=True)
class Config:
    """How a benchmark run is set up.

    Attributes
    ----------
    quick : bool
        Shorter recipes (epochs), fewer HTTP images and fewer repeats of cheap measurements.
        Expensive measurements keep three repeats and shrink their work instead: on a shared
        machine a single timing can be off by several times.
    threads : int
        ``torch.set_num_threads`` (also ``OMP_NUM_THREADS`` for subprocesses).
    repeats : int
        Repeats of cheap measurements (at least 3; 3 with ``quick``).
    """

    quick: bool = False
    threads: int = DEFAULT_THREADS
    repeats: int = 5

    def cheap_repeats(self) -> int:
        return 3 if self.quick else max(3, self.repeats)


def progress(message: str) -> None:
    """A progress line on stderr (the table goes to stdout)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    """Seconds one call of ``fn`` takes (``time.perf_counter``), and its return value."""
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def median_time(fn: Callable[[], object], repeats: int, *, warmup: int = 0) -> tuple[float, list[float], object]:
    """Median seconds of ``repeats`` calls of ``fn`` after ``warmup`` untimed calls.

    Returns
    -------
    (median, all timings, last return value)
    """
    value = None
    for _ in range(warmup):
        value = fn()
    times = []
    for _ in range(repeats):
        seconds, value = timed(fn)
        times.append(seconds)
    return statistics.median(times), times, value


def interleaved(fns: dict[str, Callable[[], object]], repeats: int, *, warmup: int = 0) -> dict[str, list[float]]:
    """Seconds per call of each function, calling them in turn in every round (A B A B ...).

    Interleaving spreads the machine's slow phases (other work on a shared machine) over
    every contender instead of penalising whichever happened to run during them.
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            times[name].append(timed(fn)[0])
    return times


def spread(times: list[float]) -> str:
    """min-max of a list of timings, for notes."""
    return f"{min(times):.3g}-{max(times):.3g} s" if len(times) > 1 else f"{times[0]:.3g} s"


class Skipped(Exception):
    """Raised by a measurement whose extra (or other prerequisite) is missing: the reason becomes its row."""


def require_module(module: str, extra: str) -> None:
    """Raise :class:`Skipped` unless ``module`` is installed; ``extra`` names the install extra that brings it."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise Skipped(f"{module} is not installed (the [{extra}] extra: pip install -e '.[{extra}]')")


def row(
    benchmark: str,
    case: str,
    *,
    ours: float | None,
    baseline: float | None,
    unit: str,
    baseline_label: str,
    ratio: float | None,
    ratio_label: str,
    goal: str = "",
    met: bool | None = None,
    repeats: int = 1,
    note: str = "",
    details: str = "",
) -> dict:
    """One result row with every key of :data:`ROW_KEYS` (and ``details`` when given)."""
    out = {
        "benchmark": benchmark,
        "case": case,
        "ours": ours,
        "baseline": baseline,
        "unit": unit,
        "baseline_label": baseline_label,
        "ratio": ratio,
        "ratio_label": ratio_label,
        "goal": goal,
        "met": met,
        "repeats": repeats,
        "note": note,
    }
    if details:
        out["details"] = details
    return out


def set_threads(threads: int) -> None:
    """Fix torch's intra-op threads (and OMP's for subprocesses) so that runs compare."""
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ["MKL_NUM_THREADS"] = str(threads)
    import torch

    torch.set_num_threads(threads)


def quiet_mlflow() -> None:
    """Environment for benchmarking MLflow: no telemetry, no progress bars, fewer warnings."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("TQDM_DISABLE", "1")
    import logging
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", message=".*specialized.*")
    for name in ("mlflow", "alembic", "torch._export", "torch.export"):
        logging.getLogger(name).setLevel(logging.ERROR)


@contextlib.contextmanager
def temporary_store(prefix: str = "ema-bench-") -> Iterator[Path]:
    """A fresh sqlite MLflow store in a temporary folder, which is also the working directory.

    ``MLFLOW_TRACKING_URI`` points at it (so subprocesses such as ``mlflow models serve``
    see it too) and the ``ema`` experiment is selected. Everything is restored on exit.
    """
    with (
        tempfile.TemporaryDirectory(prefix=prefix) as tmp,
        using_store(f"sqlite:///{Path(tmp) / 'mlflow.db'}", Path(tmp)),
    ):
        yield Path(tmp)


@contextlib.contextmanager
def using_store(uri: str, folder: Path) -> Iterator[None]:
    """Work from ``folder`` against the store ``uri`` (``MLFLOW_TRACKING_URI``), experiment ``ema``; then restore."""
    import mlflow

    from ema.tracking.runs import configure

    quiet_mlflow()
    saved_cwd, saved_uri = os.getcwd(), os.environ.get("MLFLOW_TRACKING_URI")
    os.environ["MLFLOW_TRACKING_URI"] = uri
    os.chdir(folder)
    try:
        configure()
        yield
    finally:
        while mlflow.active_run():
            mlflow.end_run()
        os.chdir(saved_cwd)
        if saved_uri is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = saved_uri
        mlflow.set_tracking_uri(saved_uri or "")


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (or the platform's description)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info(threads: int) -> dict[str, str]:
    """Where and with what a run happened, for the head of RESULTS.md."""
    import mlflow
    import numpy
    import torch

    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count() or 0
    try:
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "n/a"
    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "cpu": cpu_model(),
        "cores": f"{os.cpu_count()} logical ({affinity} usable by this process)",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "mlflow": mlflow.__version__,
        "threads": (
            f"torch.set_num_threads({threads}): intra-op {torch.get_num_threads()}, "
            f"inter-op {torch.get_num_interop_threads()}; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, "
            f"MKL_NUM_THREADS={os.environ.get('MKL_NUM_THREADS')}, "
            f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset (libgomp spins)')}"
        ),
        "load average at start (1, 5, 15 min)": load,
        "platform": platform.platform(),
    }


def replace_block(page: Path, lines: list[str], *, heading: str = "") -> None:
    """Replace the marked block of ``page`` whose first and last lines are ``lines[0]`` and ``lines[-1]``.

    A page without the block gets it appended (under ``heading``, when given); everything else on the
    page is kept as it is, so several benchmarks can each own a block of one page.
    """
    begin, end = lines[0], lines[-1]
    text = page.read_text() if page.exists() else ""
    if begin not in text:
        text += f"\n{heading}\n\n{begin}\n{end}\n" if heading else f"\n{begin}\n{end}\n"
    page.write_text(re.sub(f"{re.escape(begin)}.*?{re.escape(end)}", lambda _: "\n".join(lines), text, flags=re.S))
