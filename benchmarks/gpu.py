"""``gpu``: training and scoring images/s on a CUDA device against the CPU, for the small CNN and ResNet-18.

On random uint8 images of 64x64 pixels and ten classes (an architecture that does not take
that size yet is measured at 28x28, and its rows say so), and for the paper's medical target
(``--recipe paper-medical``: ResNet-18, Adam) on 4,000 images of 224x224 pixels as its chest
X-rays are, each on the CUDA device and on the CPU (the baseline, with every core this process
may use):

- training: :func:`ema.training.fit.fit` with the paper's SGD recipe (batch 64), or the named
  recipe, one epoch, ``device="cuda:N"`` against ``device="cpu"``; fewer images on the CPU, the
  rate is per image;
- scoring: the model logged as the workbench logs it (:func:`ema.training.packaging.package_torch_model`,
  CPU tensors, in a temporary store) and scored through :class:`ema.oracle.PyfuncOracle` with
  ``device=...`` on uint8 images, as an in-process audit scores a torch target.

``python -m benchmarks.gpu`` runs it alone with every core for the CPU and writes
``benchmarks/RESULTS_GPU.md`` (the CPU measurements' RESULTS.md is left as it is); it took 45 s on
an NVIDIA H200 machine (16 cores). On a machine without CUDA it measures nothing, says so and
exits 0, writing no file: the recorded RESULTS_GPU.md stays as it is (in ``python -m benchmarks``,
with other measurements, its row says it was skipped).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from benchmarks._common import Config, Skipped, median_time, progress, row, spread, temporary_store

NAME = "gpu"
#: The image side asked for, and the side of the images every architecture took before they adapted.
SIZE, FALLBACK_SIZE = 64, 28
N_CLASSES = 10
RESULTS_GPU = Path(__file__).resolve().parent / "RESULTS_GPU.md"
#: Why nothing is measured on a machine without CUDA (the measurement's skipped row).
NO_CUDA = "no CUDA device on this machine (torch.cuda.is_available() is False): run it on a machine with a GPU"
#: Timed repeats per device (the CPU's ResNet-18 takes seconds per repeat), after one untimed warm-up.
REPEATS = 3


@dataclass(frozen=True)
class Workload:
    """Images trained on and scored, per device, for one architecture (fewer on the CPU: it is slower).

    ``recipe`` names a recipe of :data:`ema.training.recipes.NAMED_RECIPES` to train with (one
    epoch of it); None: the paper's SGD recipe. ``side``: the images' side asked for.
    """

    arch: str
    train_gpu: int
    train_cpu: int
    score_gpu: int
    score_cpu: int
    side: int = SIZE
    recipe: str | None = None

    def spec(self):
        """The :class:`~ema.training.spec.TrainSpec` of one epoch of this workload's training."""
        from ema.training.recipes import NAMED_RECIPES, recipe_from_dict
        from ema.training.spec import TrainSpec

        spec = recipe_from_dict(dict(NAMED_RECIPES[self.recipe])).spec if self.recipe else TrainSpec(arch=self.arch)
        return replace(spec, epochs=1)

    @property
    def label(self) -> str:
        return f"{self.arch} ({self.recipe})" if self.recipe else self.arch


WORKLOADS = (
    Workload("cnn", train_gpu=16_384, train_cpu=2_048, score_gpu=65_536, score_cpu=8_192),
    Workload("resnet18", train_gpu=4_096, train_cpu=256, score_gpu=16_384, score_cpu=512),
    Workload(
        "resnet18", train_gpu=4_000, train_cpu=64, score_gpu=4_000, score_cpu=128, side=224, recipe="paper-medical"
    ),
)


def cuda_device() -> str | None:
    """``cuda:N`` of the current CUDA device, or None on a machine without CUDA."""
    import torch

    return f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else None


def image_side(arch: str, side: int = SIZE) -> int:
    """``side`` when the workbench's ``arch`` takes images of that side, else :data:`FALLBACK_SIZE`."""
    import torch

    from ema.training.architectures import ProbabilityModel
    from ema.training.spec import TrainSpec

    model = ProbabilityModel(TrainSpec(arch=arch)).eval()
    try:
        with torch.inference_mode():
            model(torch.zeros(2, 1, side, side))
    except RuntimeError:  # a head sized for 28x28 inputs
        return FALLBACK_SIZE
    return side


def random_images(n: int, side: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` seeded random uint8 images (n, side, side) and labels: the cost does not depend on the pixels."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, side, side), dtype=np.uint8), rng.integers(0, N_CLASSES, n)


def training_rate(spec, images: np.ndarray, labels: np.ndarray, device: str, repeats: int) -> tuple[float, list]:
    """Images/s of one epoch of :func:`ema.training.fit.fit` with ``spec`` on ``device`` (median of ``repeats``)."""
    import torch

    from ema.inputs import to_model_inputs
    from ema.training.fit import fit

    pixels = to_model_inputs(images)

    def train() -> None:
        fit(spec, pixels, labels, progress=False, device=device)
        if device != "cpu":
            torch.cuda.synchronize(device)

    fit(spec, pixels[: 2 * spec.batch_size], labels[: 2 * spec.batch_size], progress=False, device=device)  # warm-up
    seconds, times, _ = median_time(train, repeats)
    return len(images) / seconds, times


def scoring_rate(uri: str, images: np.ndarray, device: str, repeats: int) -> tuple[float, list]:
    """Images per second of :class:`ema.oracle.PyfuncOracle` on ``device`` (median of ``repeats``, load not timed)."""
    from ema.oracle import PyfuncOracle

    oracle = PyfuncOracle(uri, device=device)
    oracle.predict_proba(images[:64])  # warm-up: CUDA context, cuDNN's choice of kernels
    seconds, times, _ = median_time(lambda: oracle.predict_proba(images), repeats)
    return len(images) / seconds, times


def logged_model(arch: str, images: np.ndarray) -> str:
    """The untrained ``arch`` for ``images``' size, logged and registered as ``ema train`` registers it; its URI."""
    import mlflow
    import torch

    from ema.tracking.registry import log_and_register
    from ema.training.architectures import ProbabilityModel
    from ema.training.packaging import package_torch_model
    from ema.training.spec import TrainSpec

    torch.manual_seed(0)
    model = ProbabilityModel(TrainSpec(arch=arch), input_shape=(1, *images.shape[1:])).eval()
    with mlflow.start_run(run_name=f"bench gpu {arch}"), package_torch_model(model, images) as package:
        version = log_and_register(package, name=f"bench-gpu-{arch}", alias="bench", tags={"ema.role": "benchmark"})
    return version.uri


def measure(config: Config, *, workloads: tuple[Workload, ...] = WORKLOADS, device: str | None = None) -> list[dict]:
    """GPU-vs-CPU rows (images/s) for training and pyfunc scoring, per architecture.

    ``device`` is the accelerator to compare with the CPU (default: the current CUDA device).

    Raises
    ------
    Skipped
        Without a CUDA device: the runner says so in the measurement's row and, when nothing else
        was measured, writes no results file.
    """
    import torch

    from ema.training.devices import describe_device

    device = device or cuda_device()
    if device is None:
        raise Skipped(NO_CUDA)
    card, threads, repeats = describe_device(device), torch.get_num_threads(), REPEATS
    rows = []
    with temporary_store("ema-bench-gpu-"):
        for work in workloads:
            side = image_side(work.arch, work.side)
            size_note = (
                ""
                if side == work.side
                else f"; at {side}x{side}: the architecture does not take {work.side}x{work.side} yet"
            )
            images, labels = random_images(max(work.train_gpu, work.score_gpu), side)
            for kind, n_gpu, n_cpu in (
                ("training", work.train_gpu, work.train_cpu),
                ("scoring", work.score_gpu, work.score_cpu),
            ):
                progress(f"gpu: {work.label} {side}x{side} {kind}: {n_gpu} images on {card}, {n_cpu} on the CPU")
                if kind == "training":
                    spec = work.spec()
                    gpu_rate, gpu_times = training_rate(spec, images[:n_gpu], labels[:n_gpu], device, repeats)
                    cpu_rate, cpu_times = training_rate(spec, images[:n_cpu], labels[:n_cpu], "cpu", repeats)
                    what = f"one epoch of fit ({spec.optimizer}, batch {spec.batch_size})"
                else:
                    uri = logged_model(work.arch, images[:2])
                    gpu_rate, gpu_times = scoring_rate(uri, images[:n_gpu], device, repeats)
                    cpu_rate, cpu_times = scoring_rate(uri, images[:n_cpu], "cpu", repeats)
                    what = "PyfuncOracle.predict_proba on uint8 images, load not timed"
                rows.append(
                    row(
                        NAME,
                        f"{work.label} {side}x{side} {kind}",
                        ours=gpu_rate,
                        baseline=cpu_rate,
                        unit="images/s",
                        baseline_label=f"the CPU, {threads} torch threads",
                        ratio=gpu_rate / cpu_rate,
                        ratio_label="gpu / cpu",
                        repeats=repeats,
                        note=(
                            f"{card}; {what}; {n_gpu} images on the GPU ({spread(gpu_times)}), {n_cpu} on the CPU "
                            f"({spread(cpu_times)}){size_note}"
                        ),
                    )
                )
    return rows


def usable_cores() -> int:
    """The cores this process may run on (every one goes to the CPU baseline)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.gpu [options of python -m benchmarks]``: this measurement alone, into RESULTS_GPU.md."""
    from benchmarks.__main__ import main as run_benchmarks

    defaults = ["--only", NAME, "--threads", str(usable_cores()), "--output", str(RESULTS_GPU), "--no-profile"]
    return run_benchmarks(defaults + list(argv if argv is not None else sys.argv[1:]))


if __name__ == "__main__":
    sys.exit(main())
