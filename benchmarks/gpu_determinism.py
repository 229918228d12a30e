"""Does one seed give one model, and one rho, on a CUDA device? Each run twice, compared.

``python -m benchmarks.gpu_determinism`` on a machine with CUDA writes
``benchmarks/RESULTS_GPU_DETERMINISM.md`` (and prints it), under two settings: torch's defaults
(:func:`ema.training.devices.reproducible_on` replaced by a no-op), and the workbench's (torch's
deterministic algorithms while training on CUDA):

- for each architecture, :func:`ema.training.fit.fit` twice on the GPU with the same seed (500
  embedded MNIST images, 3 epochs): the largest difference between the two runs' weights, the
  seconds per fit, and (the workbench's setting) the largest difference from a CPU run;
- the paper's medical recipe (ResNet-18, Adam) for one epoch on 2,000 random 224x224 images:
  seconds per epoch, the cost of the deterministic kernels at the size that matters;
- ``ema train --arch cnn`` then ``ema audit --query M1``, on the GPU, twice, each in a fresh
  store: the rho_EMA each run logs.

On a machine without CUDA it says so and exits 0. It answers the project's rule "the same
command gives the same rho" for GPU runs, which the tests cannot check where CI runs.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from unittest import mock

#: Architectures compared, images and epochs per fit.
ARCHS, N_IMAGES, EPOCHS = ("mlp", "cnn", "resnet18"), 500, 3
#: The medical recipe's timing: images of this side, this many.
MEDICAL_SIDE, MEDICAL_IMAGES = 224, 2_000
RESULTS = Path(__file__).resolve().parent / "RESULTS_GPU_DETERMINISM.md"
DEFAULTS, WORKBENCH = "torch's defaults", "the workbench's (deterministic on CUDA)"


def setting(name: str):
    """A context in which :func:`ema.training.fit.fit` trains under the setting ``name``."""
    if name == WORKBENCH:
        return contextlib.nullcontext()
    return mock.patch("ema.training.fit.reproducible_on", lambda device: contextlib.nullcontext())


def largest_difference(a, b) -> float:
    """The largest absolute difference between two models' weights (0.0: bitwise equal)."""
    pairs = zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    return max(float((x - y).abs().max()) for x, y in pairs)


def timed_fit(spec, pixels, labels, device: str):
    """(the model fitted on ``device``, moved to the CPU; seconds the fit took, the device synchronised)."""
    import torch

    from ema.training.fit import fit

    start = time.perf_counter()
    model = fit(spec, pixels, labels, progress=False, device=device)
    torch.cuda.synchronize(device)
    return model.cpu(), time.perf_counter() - start


def fits(arch: str, device: str) -> tuple[float, float, float]:
    """(GPU run vs GPU run, GPU run vs CPU run, median seconds per GPU fit) for ``arch`` under the current setting."""
    from ema.data.embedded import load_mnist_embedded
    from ema.training.fit import fit
    from ema.training.spec import TrainSpec

    data = load_mnist_embedded()
    rows = slice(0, len(data.y), len(data.y) // N_IMAGES)
    pixels, labels = data.model_inputs()[rows], data.y[rows]
    spec = TrainSpec(arch=arch, epochs=EPOCHS)
    timed_fit(spec, pixels[:128], labels[:128], device)  # warm-up: CUDA context, kernels
    (first, one), (second, two) = (timed_fit(spec, pixels, labels, device) for _ in range(2))
    on_cpu = fit(spec, pixels, labels, progress=False, device="cpu")
    return largest_difference(first, second), largest_difference(first, on_cpu), statistics.median([one, two])


def medical_epoch_seconds(device: str) -> float:
    """Median seconds of one epoch of the paper's medical recipe on :data:`MEDICAL_IMAGES` random 224x224 images."""
    import numpy as np

    from benchmarks.gpu import random_images
    from ema.inputs import to_model_inputs
    from ema.training.recipes import NAMED_RECIPES, recipe_from_dict

    spec = replace(recipe_from_dict(dict(NAMED_RECIPES["paper-medical"])).spec, epochs=1)
    images, labels = random_images(MEDICAL_IMAGES, MEDICAL_SIDE)
    pixels = to_model_inputs(images)
    timed_fit(spec, pixels[:128], labels[:128], device)
    return float(np.median([timed_fit(spec, pixels, labels, device)[1] for _ in range(3)]))


def audit_rho(device: str) -> float:
    """rho_EMA of ``ema audit --query M1`` on a CNN ``ema train`` made, both on ``device``, in a fresh store."""
    from click.testing import CliRunner
    from mlflow.tracking import MlflowClient

    from benchmarks._common import temporary_store
    from ema.tracking import keys
    from ema_cli.cli import main

    with temporary_store("ema-gpu-determinism-"):
        for args in (
            ["train", "--arch", "cnn", "--epochs", "5", "--device", device, "--no-progress"],
            ["audit", "--query", "M1", "--device", device, "--no-progress"],
        ):
            result = CliRunner().invoke(main, args, catch_exceptions=False)
            if result.exit_code != 0:
                raise RuntimeError(f"ema {' '.join(args)} exited {result.exit_code}: {result.output[-2000:]}")
        client = MlflowClient()
        runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
        return next(r.data.metrics[keys.METRIC_RHO_EMA] for r in runs if keys.METRIC_RHO_EMA in r.data.metrics)


def report(device: str) -> list[str]:
    """The markdown lines of every comparison, measured now."""
    import torch

    from ema.training.devices import describe_device

    lines = [
        "# Determinism on a GPU",
        "",
        f"Written by `python -m benchmarks.gpu_determinism`: {describe_device(device)}, torch {torch.__version__}. "
        f"{N_IMAGES} embedded MNIST images, {EPOCHS} epochs per fit, two fits of one seed per row.",
        "",
        "| setting | arch | max abs weight diff, GPU fit vs GPU fit | GPU vs CPU | seconds per GPU fit |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name in (DEFAULTS, WORKBENCH):
        with setting(name):
            for arch in ARCHS:
                runs, cpu, seconds = fits(arch, device)
                lines.append(f"| {name} | {arch} | {runs:.3g} | {cpu:.3g} | {seconds:.3g} |")
    epochs = {}
    for name in (DEFAULTS, WORKBENCH):
        with setting(name):
            epochs[name] = medical_epoch_seconds(device)
    lines += [
        "",
        f"One epoch of `--recipe paper-medical` (ResNet-18, Adam) on {MEDICAL_IMAGES:,} random "
        f"{MEDICAL_SIDE}x{MEDICAL_SIDE} images, median of 3: {epochs[DEFAULTS]:.3g} s under {DEFAULTS}, "
        f"{epochs[WORKBENCH]:.3g} s under {WORKBENCH} ({epochs[WORKBENCH] / epochs[DEFAULTS]:.2f}x).",
        "",
        "| setting | `ema train --arch cnn --epochs 5` + `ema audit --query M1`, on the GPU, fresh store | rho_EMA |",
        "| --- | --- | --- |",
    ]
    for name in (DEFAULTS, WORKBENCH):
        with setting(name):
            lines += [f"| {name} | run {attempt} | {audit_rho(device)!r} |" for attempt in (1, 2)]
    return lines


def main() -> int:
    import torch

    from ema.training.devices import resolve_device

    if not torch.cuda.is_available():
        print("gpu_determinism: no CUDA device on this machine: nothing to compare")
        return 0
    text = "\n".join(report(resolve_device("cuda"))) + "\n"
    RESULTS.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
