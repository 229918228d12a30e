"""``memory``: peak memory of an audit over 100,000 query images, each variant in a fresh process.

The 100,000 images are the 10,000 embedded MNIST images tiled ten times (uint8: 78 MB;
as float32 pixels: 314 MB; their probabilities, 100,000 x 10 float64: 8 MB). A fresh
subprocess per variant reports its RSS high-water mark and, for the numpy/Python heap,
``tracemalloc``'s peak over the audit (in a separate traced run). The high-water mark is
``VmHWM`` from /proc/self/status: ``resource.getrusage(...).ru_maxrss`` would be the obvious
choice, but Linux carries it over fork + exec, so a child of a large parent reports at least
the parent's RSS (it is recorded in the notes for comparison).

- baseline: imports (ema, torch, mlflow) and the target's pyfunc loaded, no data;
- library: the uint8 images read from the query file and given to
  :class:`ema.oracle.PyfuncOracle` (which converts and scores them 4,096 at a time), then
  :class:`ema.auditors.EMAAuditor`: no MLflow run;
- workflow: ``ema audit --model URI --query-file FILE`` on the 100,000-image query file, the
  command's own code called in the process (run, params, ``log_input``, artifacts, version tags).

Run ``python -m benchmarks.memory child MODE DIR`` to get one variant's JSON by hand.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks._common import Config, progress, row

NAME = "memory"
N_QUERY = 100_000
BATCH = 4096
GOAL_BYTES = 1 << 30
#: Target epochs for the setup (the weights do not change the memory).
SETUP_EPOCHS = 1
MB = 1 << 20


def _status_kib(field: str, status: str = "/proc/self/status") -> int:
    """A field of a process's ``status`` file (this process's by default) in bytes (Linux; 0 elsewhere)."""
    try:
        for line in Path(status).read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _rss_now() -> int:
    """Current resident set size in bytes."""
    return _status_kib("VmRSS")


def _peak_rss() -> int:
    """RSS high-water mark of this process in bytes.

    ``VmHWM`` (Linux) belongs to the process's own address space, which ``execve`` creates
    afresh. ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` is NOT usable in a child here: Linux
    keeps it across fork + exec, so a child of a large parent reports at least the parent's
    RSS at fork time (seen: three different children all reporting the parent's 1.85 GB).
    It is the fallback where /proc is missing.
    """
    peak = _status_kib("VmHWM")
    if peak:
        return peak
    rusage = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rusage if sys.platform == "darwin" else rusage * 1024


def _tiled_query(n: int):
    from ema.data.arrays import ArraySet
    from ema.data.embedded import load_mnist_embedded

    data = load_mnist_embedded()
    x = np.resize(data.x, (n, *data.x.shape[1:]))
    y = np.resize(data.y, n)
    return ArraySet(f"mnist-tiled-{n}", x, y, np.arange(n, dtype=np.int64))


def _setup(directory: Path, n: int, epochs: int) -> dict:
    """Train and register a target, calibrate (via a first audit), write the query file and thresholds."""
    from ema.data.files import write_set
    from ema.tracking.runs import configure
    from ema.training.spec import TrainSpec
    from ema.workflows.audit import AuditConfig, audit
    from ema.workflows.train import train_target

    configure()
    trained = train_target(TrainSpec(epochs=epochs), progress=False)
    uri = f"models:/{trained.version.name}/{trained.version.version}"
    first = audit(AuditConfig(model_uri=uri, query="M6"), progress=False)
    (directory / "calibration.json").write_text(json.dumps(first.primary.thresholds))
    write_set(_tiled_query(n), directory / "query.npz")
    return {"uri": uri}


#: Functions of one audit, called one after another (never nested), whose memory and time are recorded.
PHASES = (
    ("ema.workflows.audit", "resolve_target", "resolve the target in the registry"),
    ("mlflow.data", "from_numpy", "mlflow.data.from_numpy(x, y): dataset and schema (digest: our fingerprint)"),
    ("ema.data.files", "read_set", "read the query file (uint8)"),
    ("mlflow", "log_input", "mlflow.log_input (dataset logged to the run)"),
    ("ema.workflows.target", "Target.oracle", "Target.oracle(): load the target's pyfunc"),
    ("ema.oracle", "Oracle.predict", "Oracle.predict: per-batch conversion, scoring, validation"),
    ("ema.auditors.ema", "EMAAuditor.audit", "EMAAuditor.audit"),
    ("ema.workflows.audit_in_process", "membership_table", "membership_table (pandas)"),
    ("ema.workflows.audit", "log_artifacts_atomically", "log_artifacts_atomically (CSV + JSON)"),
    ("ema.workflows.audit", "set_version_tags", "set_version_tags (audit history on the version)"),
)


def _instrument(phases: list[dict]) -> None:
    """Wrap each function of :data:`PHASES` to record tracemalloc's peak above its start, and its time.

    A function imported by name elsewhere in ``ema`` is replaced there too. Names that no
    longer exist (the library changes) are skipped.
    """
    import importlib
    import tracemalloc

    for module_name, attr, label in PHASES:
        try:
            module = importlib.import_module(module_name)
            owner, name = (getattr(module, attr.split(".")[0]), attr.split(".")[1]) if "." in attr else (module, attr)
            original = getattr(owner, name)
        except (ImportError, AttributeError):
            continue

        def wrapper(*args, __original=original, __label=label, **kwargs):
            before, peak_so_far = tracemalloc.get_traced_memory()
            phases.append({"phase": "(before)", "peak": peak_so_far})
            tracemalloc.reset_peak()
            start = time.perf_counter()
            try:
                return __original(*args, **kwargs)
            finally:
                after, peak = tracemalloc.get_traced_memory()
                phases.append(
                    {
                        "phase": __label,
                        "peak": peak,
                        "above_start": peak - before,
                        "kept": after - before,
                        "seconds": time.perf_counter() - start,
                    }
                )

        setattr(owner, name, wrapper)
        if "." in attr:
            continue
        for other in list(sys.modules.values()):
            if getattr(other, "__name__", "").startswith("ema.") and getattr(other, name, None) is original:
                setattr(other, name, wrapper)


def _child(mode: str, directory: Path, uri: str | None, n: int, batch: int, epochs: int, trace: bool) -> dict:
    """One variant in this (fresh) process; returns what it measured.

    With ``trace``, tracemalloc runs over the audit (and the workflow's phases are
    instrumented): its peaks are exact for numpy, but it slows Python-heavy code many times
    and adds its own memory, so RSS and seconds come from untraced runs.
    """
    import tracemalloc

    stages = {"python + numpy": _rss_now()}
    os.chdir(directory)
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{directory / 'mlflow.db'}"
    import torch

    stages["+ import torch"] = _rss_now()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    import mlflow
    import mlflow.pyfunc

    stages["+ import mlflow, mlflow.pyfunc"] = _rss_now()
    from benchmarks._common import quiet_mlflow

    quiet_mlflow()
    import ema_cli.cli  # noqa: F401 - the imports `ema audit` makes, in every mode
    from ema.auditors import EMAAuditor
    from ema.data.files import read_set
    from ema.oracle import PyfuncOracle

    stages["+ import ema_cli.cli (the ema command)"] = _rss_now()
    mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])
    if mode == "setup":
        return _setup(directory, n, epochs)
    out: dict = {"mode": mode, "traced": trace}
    phases: list[dict] = []
    if mode == "baseline":
        start = time.perf_counter()
        PyfuncOracle(uri)
        stages["+ target pyfunc loaded"] = _rss_now()
        out["rss_before_audit"] = _rss_now()
    elif mode == "library":
        oracle = PyfuncOracle(uri, batch_size=batch)
        auditor = EMAAuditor.from_dict(json.loads((directory / "calibration.json").read_text()))
        out["rss_before_audit"] = _rss_now()
        if trace:
            tracemalloc.start()
        start = time.perf_counter()
        query = read_set(directory / "query.npz")
        result = auditor.audit(oracle.predict_proba(query.x), query.y)
        out["flag_rate"] = result.flag_rate
    elif mode == "workflow":
        from ema.tracking.runs import configure
        from ema_cli.cli import main

        configure()
        out["rss_before_audit"] = _rss_now()
        if trace:
            _instrument(phases)
            tracemalloc.start()
        start = time.perf_counter()
        main(
            ["audit", "--model", uri, "--query-file", str(directory / "query.npz"), "--no-progress"],
            standalone_mode=False,
        )
        run = mlflow.search_runs(search_all_experiments=True, order_by=["attributes.start_time DESC"], max_results=1)
        out["flag_rate"] = float(run["metrics.flag_rate"].iloc[0])
    else:
        raise ValueError(f"unknown mode {mode!r}")
    out["seconds"] = time.perf_counter() - start
    if tracemalloc.is_tracing():
        out["tracemalloc_peak"] = max([tracemalloc.get_traced_memory()[1], *(p["peak"] for p in phases)])
        tracemalloc.stop()
    out["phases"] = [p for p in phases if p["phase"] != "(before)"]
    out["peak_rss"] = _peak_rss()
    out["ru_maxrss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out["stages"] = stages
    return out


def run_child(
    mode: str,
    directory: Path,
    *,
    uri: str | None = None,
    n: int = N_QUERY,
    batch: int = BATCH,
    epochs: int = SETUP_EPOCHS,
    trace: bool = False,
) -> dict:
    """Run one variant in a fresh ``python -m benchmarks.memory child`` process and parse its JSON."""
    command = [sys.executable, "-m", "benchmarks.memory", "child", mode, str(directory)]
    command += ["--n", str(n), "--batch", str(batch), "--epochs", str(epochs)]
    command += (["--uri", uri] if uri else []) + (["--trace"] if trace else [])
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH", "")]))}
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=root, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"memory child {mode} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


STREAMING_NOTE = """\
What an audit of 100,000 query images holds, and what was changed to get there:

- The query stays uint8 (78 MB). `Oracle.predict` takes the uint8 images and turns them into
  float32 one batch at a time (13 MB per 4,096 images); the whole set as float32 (314 MB, and
  a second copy while dividing by 255) was made at once before.
- The outputs go into one preallocated array. Keeping one small array per batch (as the
  `np.concatenate` over batches did) pinned glibc's heap above each batch's temporaries: RSS
  grew ~4 MB per batch (+100 MB over 25 batches, measured with VmRSS around each batch).
- Fingerprints hash the arrays' own bytes; `array.tobytes()` copied the whole query (78 MB)
  each time, and the audit fingerprints its query for the run's param, the logged dataset's
  digest and the version's audit record (now once: `ArraySet.fingerprint` is cached). The
  dataset logged with `mlflow.log_input` carries that fingerprint as its digest, so MLflow
  does not copy the array to hash its first 10,000 values.
- Our models are pyfunc models from code with a state dict (`ema.training.packaging`), not
  pt2: in the stage table, loading the target (the tracking store's first use included) added
  225 MB as pt2 (the torch.export machinery) and adds about 60 MB now.
- What is left is fixed cost before any data (table above): importing torch (a CUDA build:
  ~480 MB) and mlflow, scipy.stats and the tracking store. An audit over HTTP
  (`--model-url`) whose calibration is cached never imports torch (checked by hand on M6);
  a CPU-only torch build would lower the in-process fixed cost.
"""


def _details(results: dict) -> str:
    """Markdown: RSS after each import of the baseline process, the workflow's phases, what would change."""
    stages = results["baseline"]["stages"]
    lines = ["Fixed cost, before any data (fresh baseline process):", "", "| stage | RSS MB |", "|---|---:|"]
    lines += [f"| {stage} | {rss / MB:.0f} |" for stage, rss in stages.items()]
    phases = results.get("workflow traced", {}).get("phases", [])
    if phases:
        lines += [
            "",
            (
                "Inside `ema audit` on the 100,000-image file, in a separate run under tracemalloc "
                "(numpy and Python heap; seconds are inflated by tracemalloc, several-fold for Python-heavy steps "
                "such as loading the model):"
            ),
            "",
            "| phase | seconds (traced) | peak above its start MB | still held after MB |",
            "|---|---:|---:|---:|",
        ]
        lines += [
            f"| {p['phase']} | {p['seconds']:.2f} | {p['above_start'] / MB:.0f} | {p['kept'] / MB:.0f} |"
            for p in phases
        ]
    return "\n".join(lines) + "\n\n" + STREAMING_NOTE


def measure(config: Config, *, n: int = N_QUERY, batch: int = BATCH) -> list[dict]:
    """Peak RSS of the baseline, library and workflow variants, each in a fresh process."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="ema-bench-memory-") as tmp:
        directory = Path(tmp)
        progress(f"memory: setup (target, calibration, {n:,}-image query file) in a subprocess")
        uri = run_child("setup", directory, n=n, batch=batch)["uri"]
        results = {}
        for mode, trace in (
            ("baseline", False),
            ("library", False),
            ("workflow", False),
            ("library", True),
            ("workflow", True),
        ):
            key = f"{mode} traced" if trace else mode
            progress(f"memory: {key} in a fresh process")
            results[key] = run_child(mode, directory, uri=uri, n=n, batch=batch, trace=trace)
    base = results["baseline"]["peak_rss"]
    labels = {
        "library": f"library: uint8 images to PyfuncOracle (float32 per {batch:,}-image batch), EMAAuditor",
        "workflow": "`ema audit --query-file` (the command's code, in process)",
    }
    for mode in ("library", "workflow"):
        result, traced = results[mode], results[f"{mode} traced"]
        peak = result["peak_rss"]
        rows.append(
            {
                **row(
                    NAME,
                    f"audit of {n:,} images, {labels[mode]}",
                    ours=peak / MB,
                    baseline=base / MB,
                    unit="MB peak RSS",
                    baseline_label="fresh process: imports + target pyfunc loaded, no data",
                    ratio=peak / base,
                    ratio_label="peak / baseline process",
                    goal="< 1 GB (1024 MB)",
                    met=peak < GOAL_BYTES,
                    repeats=1,
                    note=(
                        f"RSS before the audit {result['rss_before_audit'] / MB:.0f} MB, the audit adds "
                        f"{(peak - result['rss_before_audit']) / MB:.0f} MB; tracemalloc peak (numpy/Python heap, "
                        f"separate run) {traced.get('tracemalloc_peak', 0) / MB:.0f} MB; {result['seconds']:.1f} s; "
                        f"flag rate {result['flag_rate']:.3f}; getrusage ru_maxrss says "
                        f"{result['ru_maxrss'] / MB:.0f} MB "
                        "(inherited from the parent, not used)"
                    ),
                    details=_details(results) if mode == "workflow" else "",
                ),
                "peak_rss_bytes": peak,
            }
        )
    return rows


def _main(argv: list[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m benchmarks.memory")
    parser.add_argument("child", choices=["child"])
    parser.add_argument("mode", choices=["setup", "baseline", "library", "workflow"])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--uri")
    parser.add_argument("--n", type=int, default=N_QUERY)
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument("--epochs", type=int, default=SETUP_EPOCHS)
    parser.add_argument("--trace", action="store_true", help="Run tracemalloc over the audit.")
    args = parser.parse_args(argv)
    result = _child(args.mode, args.directory, args.uri, args.n, args.batch, args.epochs, args.trace)
    sys.stdout.flush()
    print(json.dumps(result))


if __name__ == "__main__":
    _main(sys.argv[1:])
