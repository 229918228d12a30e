"""``scoring``: in-process scoring throughput, raw torch vs pyfunc (HTTP: the ``http`` measurement).

For the paper's MLP and the small CNN (untrained weights: the cost does not depend on
them), at batch sizes 256 and 4096, on 10,000 embedded MNIST images:

- raw torch: ``ProbabilityModel`` forward on float32 pixels under ``torch.inference_mode``
  (the baseline);
- pyfunc: the same model logged with :func:`ema.training.packaging.package_torch_model`
  into a temporary sqlite store, scored through :class:`ema.oracle.PyfuncOracle` on the
  uint8 images, as an audit does (the model scales them itself; output validation included).
"""

from __future__ import annotations

import statistics

import numpy as np

from benchmarks._common import Config, interleaved, median_time, progress, row, spread, temporary_store

NAME = "scoring"
ARCHS = ("mlp", "cnn")
BATCH_SIZES = (256, 4096)
N_IMAGES = 10_000
PYFUNC_GOAL = 0.9
#: The batch size the pyfunc goal applies to ("large batches").
GOAL_BATCH = 4096


def load_images(n: int) -> np.ndarray:
    """``n`` embedded MNIST images, uint8 (n, 28, 28), tiled if n exceeds 10,000."""
    from ema.data.embedded import load_mnist_embedded

    data = load_mnist_embedded()
    return np.resize(data.x, (n, *data.x.shape[1:])) if n > len(data) else data.x[:n]


def raw_scorer(model, pixels: np.ndarray, batch_size: int):
    """Scores ``pixels`` with the torch model in batches: the in-process floor."""
    import torch

    inputs = torch.from_numpy(pixels)

    def score() -> np.ndarray:
        with torch.inference_mode():
            return torch.cat([model(chunk) for chunk in inputs.split(batch_size)]).numpy()

    return score


def measure(
    config: Config,
    *,
    archs: tuple[str, ...] = ARCHS,
    batch_sizes: tuple[int, ...] = BATCH_SIZES,
    n_images: int = N_IMAGES,
) -> list[dict]:
    """Throughput rows (images/s): pyfunc vs raw, per architecture and batch size."""
    import mlflow
    import torch

    from ema.inputs import to_model_inputs
    from ema.oracle import PyfuncOracle
    from ema.tracking.registry import log_and_register
    from ema.training.architectures import ProbabilityModel
    from ema.training.packaging import package_torch_model
    from ema.training.spec import TrainSpec

    images = load_images(n_images)
    pixels = to_model_inputs(images)
    rows = []
    with temporary_store() as _:
        for arch in archs:
            torch.manual_seed(0)
            model = ProbabilityModel(TrainSpec(arch=arch)).eval()
            progress(f"scoring: logging the {arch} model")
            with mlflow.start_run(run_name=f"bench scoring {arch}"), package_torch_model(model, images) as package:
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
                head = slice(0, 2 * batch_size)
                same = np.abs(raw_scorer(model, pixels[head], batch_size)() - oracle.predict_proba(images[head])).max()
                in_process[batch_size] = interleaved(
                    {"raw": raw, "pyfunc": lambda o=oracle: o.predict_proba(images)}, repeats
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
    return rows
