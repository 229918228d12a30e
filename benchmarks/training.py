"""``training``: our training loop against the reference's DataLoader pipeline, and the compute floor.

All three train the paper's MLP on the 10,000 embedded MNIST images with the same recipe
(SGD, lr 0.05, momentum 0.9, weight decay 1e-4, batch 64), for the same epochs:

- ours: :func:`ema.training.fit.fit` (slices of one in-memory tensor, shuffled per epoch),
  including the uint8 -> float32 conversion of the images it is given;
- the conventional pipeline of the reference code: a per-sample ``Dataset`` that makes a
  PIL image and applies ``transforms.ToTensor()`` and ``Normalize``, batched by a
  ``torch.utils.data.DataLoader`` (``shuffle=True``, ``num_workers=0``: worker processes
  would only compete for the machine's two cores);
- the floor: zero_grad + forward + backward + step over batches made before the clock starts.
"""

from __future__ import annotations

import statistics

import numpy as np

from benchmarks._common import Config, interleaved, progress, row, spread

NAME = "training"
N_IMAGES = 10_000
#: Epochs (full run, --quick).
EPOCHS = (2, 1)
SPEEDUP_GOAL = 3.0
#: The reference code's MNIST normalisation.
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081


def dataloader_trainer(spec, x: np.ndarray, y: np.ndarray):
    """The reference pipeline: PIL image + ToTensor + Normalize per sample, DataLoader batches."""
    import torch
    from PIL import Image
    from torch import nn
    from torch.utils.data import DataLoader, Dataset
    from torchvision import transforms

    from ema.training.fit import make_optimizer
    from ema.training.networks import build_network

    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((MNIST_MEAN,), (MNIST_STD,))])

    class ImageDataset(Dataset):
        def __init__(self, images: np.ndarray, labels: np.ndarray) -> None:
            self.images, self.labels = images, labels

        def __len__(self) -> int:
            return len(self.labels)

        def __getitem__(self, i: int):
            return transform(Image.fromarray(self.images[i], mode="L")), int(self.labels[i])

    def train() -> nn.Module:
        torch.manual_seed(spec.seed)
        network = build_network(spec.arch, spec.hidden)
        optimizer = make_optimizer(spec, network.parameters())
        loss_fn = nn.CrossEntropyLoss()
        loader = DataLoader(ImageDataset(x, y), batch_size=spec.batch_size, shuffle=True, num_workers=0)
        network.train()
        for _ in range(spec.epochs):
            total = 0.0
            for inputs, targets in loader:
                optimizer.zero_grad()
                loss = loss_fn(network(inputs), targets)
                loss.backward()
                optimizer.step()
                total += loss.item() * len(targets)
        return network

    return train


def floor_trainer(spec, x: np.ndarray, y: np.ndarray):
    """Only the compute: the same steps on batches made in advance (no data work, no bookkeeping)."""
    import torch
    from torch import nn

    from ema.training.fit import make_optimizer
    from ema.training.networks import build_network

    inputs = torch.from_numpy((x.astype(np.float32) / 255.0)[:, None, :, :])
    targets = torch.from_numpy(y.astype(np.int64))
    generator = torch.Generator().manual_seed(spec.seed)
    epochs = [
        [
            (inputs[idx], targets[idx])
            for idx in torch.randperm(len(targets), generator=generator).split(spec.batch_size)
        ]
        for _ in range(spec.epochs)
    ]

    def train() -> nn.Module:
        torch.manual_seed(spec.seed)
        network = build_network(spec.arch, spec.hidden)
        optimizer = make_optimizer(spec, network.parameters())
        loss_fn = nn.CrossEntropyLoss()
        network.train()
        for batches in epochs:
            for batch_inputs, batch_targets in batches:
                optimizer.zero_grad(set_to_none=True)
                loss_fn(network(batch_inputs), batch_targets).backward()
                optimizer.step()
        return network

    return train


def ours_trainer(spec, x: np.ndarray, y: np.ndarray):
    """:func:`ema.training.fit.fit` on the images as our workflows pass them (float32 in [0, 1])."""
    from ema.training.fit import fit

    def train():
        return fit(spec, (x.astype(np.float32) / 255.0)[:, None, :, :], y, progress=False)

    return train


def measure(
    config: Config, *, n_images: int = N_IMAGES, epochs: int | None = None, repeats: int | None = None
) -> list[dict]:
    """samples/s of ours, the DataLoader pipeline and the floor, interleaved over repeats."""
    from ema.data.embedded import load_mnist_embedded
    from ema.training.spec import TrainSpec

    data = load_mnist_embedded()
    x, y = data.x[:n_images], data.y[:n_images]
    epochs = epochs or (EPOCHS[1] if config.quick else EPOCHS[0])
    repeats = repeats or 3
    spec = TrainSpec(arch="mlp", optimizer="sgd", epochs=epochs, batch_size=64)
    progress(f"training: MLP on {len(y)} images, {epochs} epoch(s), batch 64: ours, DataLoader, floor x {repeats}")
    times = interleaved(
        {
            "ours": ours_trainer(spec, x, y),
            "dataloader": dataloader_trainer(spec, x, y),
            "floor": floor_trainer(spec, x, y),
        },
        repeats,
        warmup=0,
    )
    samples = epochs * len(y)
    rate = {name: samples / statistics.median(t) for name, t in times.items()}
    timings = ", ".join(f"{name} {spread(t)}" for name, t in times.items())
    case = f"MLP {len(y)} images x {epochs} epoch(s), batch 64, SGD"
    ratio = rate["ours"] / rate["dataloader"]
    return [
        row(
            NAME,
            f"{case}: ours vs DataLoader",
            ours=rate["ours"],
            baseline=rate["dataloader"],
            unit="samples/s",
            baseline_label="DataLoader + PIL + ToTensor + Normalize",
            ratio=ratio,
            ratio_label="ours / DataLoader (speedup)",
            goal=f">= {SPEEDUP_GOAL:g}x",
            met=ratio >= SPEEDUP_GOAL,
            repeats=repeats,
            note=timings,
        ),
        row(
            NAME,
            f"{case}: ours vs compute floor",
            ours=rate["ours"],
            baseline=rate["floor"],
            unit="samples/s",
            baseline_label="forward+backward+step on pre-made batches",
            ratio=rate["ours"] / rate["floor"],
            ratio_label="ours / floor (1.0 = no overhead)",
            repeats=repeats,
            note=f"DataLoader reaches {rate['dataloader'] / rate['floor']:.2f} of the floor",
        ),
    ]
