"""``image_sizes``: scoring full-size colour images through pyfunc against raw torch, for a user's ResNet-18.

The model is what a user registers: torchvision's ResNet-18 (untrained weights: the cost does
not depend on them) for 3-channel images, logged with ``mlflow.pytorch.log_model`` (MLflow's default
``pt2`` format, a traced graph) and a tensor signature ``(-1, 3, S, S)`` float32, at S = 64 and 224:

- raw torch: the model's forward on float32 (n, 3, S, S) pixels already in memory, in batches,
  under ``torch.inference_mode`` (the floor; the baseline). The pixels are
  :func:`ema.inputs.to_model_inputs` of the images: channels-first in shape, channels-last in
  memory, the layout torch's CPU convolutions run fastest on (the note gives raw torch on a
  C-ordered copy too, as a user's stacked ``ToTensor`` batches are);
- pyfunc: :class:`ema.oracle.PyfuncOracle` on the uint8 images (n, S, S, 3) as a query file
  holds them, which converts each batch to channels-first pixels (the same layout) and checks
  the outputs, as an audit does. MLflow's pytorch flavor scores under ``torch.no_grad``.

Both run on this machine's CPU, with the same torch threads and batch size; the goal is >= 0.9x raw.
"""

from __future__ import annotations

import statistics

import numpy as np

from benchmarks._common import Config, interleaved, progress, row, spread, temporary_store
from benchmarks.scoring import raw_scorer

NAME = "image_sizes"
#: Image side -> images scored per repeat (a 224 x 224 forward costs about 12x a 64 x 64 one).
SIZES = {64: 1024, 224: 128}
BATCH_SIZE = 64
PYFUNC_GOAL = 0.9


def resnet18(n_classes: int = 2):
    """torchvision's ResNet-18 for colour images, ending in probabilities (as a registered classifier would)."""
    import torch
    from torchvision.models import resnet18 as build

    torch.manual_seed(0)
    return torch.nn.Sequential(build(num_classes=n_classes), torch.nn.Softmax(dim=1)).eval()


def measure(config: Config, *, sizes: dict[int, int] = SIZES) -> list[dict]:
    """Throughput rows (images/s): pyfunc vs raw torch, per image size."""
    import mlflow
    from mlflow.models import infer_signature

    from ema.inputs import to_model_inputs
    from ema.oracle import PyfuncOracle

    rows = []
    rng = np.random.default_rng(0)
    model = resnet18()
    with temporary_store() as _:
        for side, n_images in sizes.items():
            n_images = n_images // 4 if config.quick else n_images
            images = rng.integers(0, 256, size=(n_images, side, side, 3), dtype=np.uint8)
            pixels = to_model_inputs(images)
            progress(f"image_sizes: logging ResNet-18 for {side} x {side} colour images")
            with mlflow.start_run(run_name=f"bench resnet18 {side}"):
                info = mlflow.pytorch.log_model(
                    model,
                    name="model",
                    input_example=pixels[:2],
                    serialization_format="pt2",  # MLflow's default, named (MLFLOW-NOTES: always name it)
                    signature=infer_signature(pixels[:2], np.zeros((2, 2), np.float32)),
                )
            oracle = PyfuncOracle(info.model_uri, batch_size=BATCH_SIZE)
            raw = raw_scorer(model, pixels, BATCH_SIZE)
            raw_c_order = raw_scorer(model, np.ascontiguousarray(pixels), BATCH_SIZE)
            head = slice(0, BATCH_SIZE)
            same = np.abs(raw_scorer(model, pixels[head], BATCH_SIZE)() - oracle.predict_proba(images[head])).max()
            progress(f"image_sizes: {side} x {side}, {n_images} images: raw torch (2 layouts), pyfunc, 3 repeats")
            scorers = {"raw": raw, "raw_c_order": raw_c_order, "pyfunc": lambda o=oracle, x=images: o.predict_proba(x)}
            times = interleaved(scorers, 3)
            raw_rate = n_images / statistics.median(times["raw"])
            pyfunc_rate = n_images / statistics.median(times["pyfunc"])
            ratio = pyfunc_rate / raw_rate
            rows.append(
                row(
                    NAME,
                    f"ResNet-18 {side}x{side}x3, batch {BATCH_SIZE}: pyfunc in-process",
                    ours=pyfunc_rate,
                    baseline=raw_rate,
                    unit="images/s",
                    baseline_label="raw torch forward (CPU)",
                    ratio=ratio,
                    ratio_label="pyfunc / raw",
                    goal=f">= {PYFUNC_GOAL:g}x raw",
                    met=ratio >= PYFUNC_GOAL,
                    repeats=3,
                    note=(
                        f"{n_images} uint8 images; raw {spread(times['raw'])}, pyfunc {spread(times['pyfunc'])}, "
                        f"raw on C-ordered pixels {spread(times['raw_c_order'])}; "
                        f"max |diff| on a batch {same:.1e}"
                    ),
                )
            )
    return rows
