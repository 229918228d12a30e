"""``scoring``: black-box scoring throughput, raw torch vs pyfunc in-process vs HTTP.

For the paper's MLP and the small CNN (untrained weights: the cost does not depend on
them), at batch sizes 256 and 4096, on 10,000 embedded MNIST images:

- raw torch: ``ProbabilityModel`` forward under ``torch.inference_mode`` (the baseline);
- pyfunc: the same model logged with :func:`ema.training.packaging.package_torch_model`
  into a temporary sqlite store, scored through :class:`ema.oracle.PyfuncOracle`
  (including its float32 cast and output validation, as an audit uses it);
- HTTP: a real ``mlflow models serve --env-manager local`` process on the same machine,
  through ``ema.oracle.HttpOracle`` when it exists, else a hand-rolled JSON POST.
"""

from __future__ import annotations

import statistics

import numpy as np

from benchmarks._common import Config, interleaved, median_time, progress, row, spread, temporary_store

NAME = "scoring"
ARCHS = ("mlp", "cnn")
BATCH_SIZES = (256, 4096)
N_IMAGES = 10_000
#: Images sent over HTTP (full run, --quick), three repeats each: JSON makes HTTP far slower than in-process.
HTTP_IMAGES = (10_000, 2_000)
PYFUNC_GOAL = 0.9
#: The batch size the pyfunc goal applies to ("large batches").
GOAL_BATCH = 4096


def load_images(n: int) -> np.ndarray:
    """``n`` embedded MNIST images as float32 (n, 1, 28, 28), tiled if n exceeds 10,000."""
    from ema.data.embedded import load_mnist_embedded

    data = load_mnist_embedded()
    x = np.resize(data.x, (n, *data.x.shape[1:])) if n > len(data) else data.x[:n]
    return (x.astype(np.float32) / 255.0)[:, None, :, :]


def raw_scorer(model, pixels: np.ndarray, batch_size: int):
    """Scores ``pixels`` with the torch model in batches: the in-process floor."""
    import torch

    inputs = torch.from_numpy(pixels)

    def score() -> np.ndarray:
        with torch.inference_mode():
            return torch.cat([model(chunk) for chunk in inputs.split(batch_size)]).numpy()

    return score


def http_scorer(url: str, batch_size: int):
    """(score function, label): ``ema.oracle.HttpOracle`` if it exists, else a JSON POST of ``{"inputs": ...}``."""
    try:
        from ema.oracle import HttpOracle
    except ImportError:
        HttpOracle = None
    probe = load_images(2)
    if HttpOracle is not None:
        errors = []
        # It documents the /invocations URL; the base URL is tried second in case that changes.
        for candidate in (f"{url}/invocations", url):
            try:
                oracle = HttpOracle(candidate, batch_size=batch_size)
                oracle.predict_proba(probe)
            except Exception as exc:  # noqa: BLE001 - try the other URL form, report both if neither works
                errors.append(f"{candidate}: {exc}")
                continue
            return oracle.predict_proba, "HTTP via ema.oracle.HttpOracle"
        raise RuntimeError(f"ema.oracle.HttpOracle exists but could not score: {errors}")

    import requests

    session = requests.Session()

    def score(pixels: np.ndarray) -> np.ndarray:
        chunks = []
        for start in range(0, len(pixels), batch_size):
            body = {"inputs": pixels[start : start + batch_size].tolist()}
            response = session.post(f"{url}/invocations", json=body, timeout=600)
            response.raise_for_status()
            chunks.append(np.asarray(response.json()["predictions"], dtype=np.float64))
        return np.concatenate(chunks)

    score(probe)
    return score, "HTTP, hand-rolled JSON POST {inputs} (ema.oracle.HttpOracle not available)"


def measure(
    config: Config,
    *,
    archs: tuple[str, ...] = ARCHS,
    batch_sizes: tuple[int, ...] = BATCH_SIZES,
    n_images: int = N_IMAGES,
    http: bool = True,
) -> list[dict]:
    """Throughput rows (images/s): pyfunc vs raw and HTTP vs raw, per architecture and batch size."""
    import mlflow
    import torch

    from ema.oracle import PyfuncOracle
    from ema.tracking.registry import log_and_register
    from ema.training.architectures import ProbabilityModel
    from ema.training.packaging import package_torch_model
    from ema.training.spec import TrainSpec

    pixels = load_images(n_images)
    n_http = min(n_images, HTTP_IMAGES[1] if config.quick else HTTP_IMAGES[0])
    rows = []
    with temporary_store() as _:
        for arch in archs:
            torch.manual_seed(0)
            model = ProbabilityModel(TrainSpec(arch=arch)).eval()
            progress(f"scoring: logging the {arch} model")
            with mlflow.start_run(run_name=f"bench scoring {arch}"), package_torch_model(model, pixels[:2]) as package:
                version = log_and_register(package, name=f"bench-{arch}", alias="bench", tags={"ema.role": "benchmark"})
            load_seconds, _, _ = median_time(lambda v=version: PyfuncOracle(v.uri), 3)
            # Three interleaved repeats even with --quick: single timings on a shared machine scatter by 2-10x.
            repeats = 3 if arch == "cnn" else config.cheap_repeats()
            in_process: dict[int, dict[str, list[float]]] = {}
            for batch_size in batch_sizes:
                progress(f"scoring: {arch}, batch {batch_size}: raw torch and pyfunc, {repeats} interleaved repeats")
                oracle = PyfuncOracle(version.uri, batch_size=batch_size)
                raw = raw_scorer(model, pixels, batch_size)
                # Warm-up, and a check that both give the same probabilities, on a slice.
                head = pixels[: 2 * batch_size]
                same = np.abs(raw_scorer(model, head, batch_size)() - oracle.predict_proba(head)).max()
                in_process[batch_size] = interleaved(
                    {"raw": raw, "pyfunc": lambda o=oracle: o.predict_proba(pixels)}, repeats
                )
                times = in_process[batch_size]
                raw_rate = n_images / statistics.median(times["raw"])
                pyfunc_rate = n_images / statistics.median(times["pyfunc"])
                ratio = pyfunc_rate / raw_rate
                goal, met = ("", None)
                if batch_size == GOAL_BATCH:
                    goal, met = f">= {PYFUNC_GOAL:g}x raw", ratio >= PYFUNC_GOAL
                rows.append(
                    row(
                        NAME,
                        f"{arch} batch {batch_size}: pyfunc in-process",
                        ours=pyfunc_rate,
                        baseline=raw_rate,
                        unit="images/s",
                        baseline_label="raw torch forward",
                        ratio=ratio,
                        ratio_label="pyfunc / raw",
                        goal=goal,
                        met=met,
                        repeats=repeats,
                        note=(
                            f"{n_images} images; raw {spread(times['raw'])}, pyfunc {spread(times['pyfunc'])}; "
                            f"max |diff| on a slice {same:.1e}; pyfunc load {load_seconds:.2f} s (not in the rate)"
                        ),
                    )
                )
            if not http:
                continue
            http_pixels = pixels[:n_http]
            progress(f"scoring: {arch}: starting `mlflow models serve` for {version.uri}")
            from benchmarks._serve import serve

            with serve(version.uri, threads=config.threads) as (url, startup):
                for batch_size in batch_sizes:
                    progress(f"scoring: {arch}, batch {batch_size}: HTTP on {n_http} images")
                    score, label = http_scorer(url, batch_size)
                    http_seconds, http_times, probabilities = median_time(lambda s=score, x=http_pixels: s(x), 3)
                    same = np.abs(probabilities - raw_scorer(model, http_pixels, batch_size)()).max()
                    http_rate = n_http / http_seconds
                    raw_rate = n_images / statistics.median(in_process[batch_size]["raw"])
                    rows.append(
                        row(
                            NAME,
                            f"{arch} batch {batch_size}: HTTP",
                            ours=http_rate,
                            baseline=raw_rate,
                            unit="images/s",
                            baseline_label="raw torch forward",
                            ratio=http_rate / raw_rate,
                            ratio_label="HTTP / raw",
                            goal="reported as is",
                            met=None,
                            repeats=len(http_times),
                            note=(
                                f"{label}; {n_http} images, {spread(http_times)}; max |diff| {same:.1e}; "
                                f"server start {startup:.1f} s; client and server share the machine's cores"
                            ),
                        )
                    )
    return rows
