"""Train a network from in-memory tensors, deterministically under the recipe's seed."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from ema.data.arrays import class_count
from ema.errors import EMAError
from ema.limits import check_deadline
from ema.training.architectures import ProbabilityModel, check_input_shape
from ema.training.devices import reproducible_on
from ema.training.sizes import check_size, torch_size
from ema.training.spec import TrainSpec

#: Rows per forward pass when scoring.
SCORING_BATCH = 4096


def to_tensor(array: np.ndarray, dtype: type = np.float32) -> torch.Tensor:
    """An array as a tensor, copied only when it is not contiguous, of another dtype, or read-only."""
    return torch.from_numpy(np.require(array, dtype, ["C", "W"]))


def input_tensor(inputs: np.ndarray) -> torch.Tensor:
    """Model inputs as a tensor: integers as they are (a model that takes pixel values 0-255 scales them itself),
    anything else as float32."""
    return to_tensor(inputs, inputs.dtype if np.issubdtype(inputs.dtype, np.integer) else np.float32)


def make_optimizer(spec: TrainSpec, params) -> torch.optim.Optimizer:
    if spec.optimizer == "sgd":
        return torch.optim.SGD(params, lr=spec.lr, momentum=spec.momentum, weight_decay=spec.weight_decay)
    return torch.optim.Adam(params, lr=spec.lr, weight_decay=spec.weight_decay)


def fit(
    spec: TrainSpec,
    pixels: np.ndarray,
    labels: np.ndarray,
    *,
    progress: bool = True,
    desc: str = "train",
    device: str = "cpu",
    n_classes: int | None = None,
) -> ProbabilityModel:
    """Train algorithm A = ``spec`` on ``pixels`` (float32, (n, C, H, W) images or an (n, d) table) and ``labels``,
    on ``device``, with ``n_classes`` outputs (None: one per class of ``labels``, :func:`class_count`).

    The network is built for the shape of ``pixels``' samples, which the model keeps
    (``input_shape``). The weights are drawn on the CPU under the recipe's seed whatever the
    device, so a run on a GPU starts from the same network as one on the CPU.

    Returns
    -------
    ProbabilityModel
        In eval mode, on ``device`` (a resolved device, :func:`ema.training.devices.resolve_device`);
        its forward returns probabilities of shape (n, n_classes).

    Raises
    ------
    InputError
        If the network is larger than the command's ``--max-params`` allows (checked before it is built).
    TimeLimitExceeded
        If the command's ``--timeout`` passes while training.
    """
    input_shape = check_input_shape(spec.arch, tuple(pixels.shape[1:]))
    check_size(torch_size(spec, len(labels), input_shape))
    torch.manual_seed(spec.seed)
    model = ProbabilityModel(spec, n_classes or class_count(labels), input_shape).to(device)
    model.network.train()
    loss_fn = nn.CrossEntropyLoss(reduction="sum")
    train_network(model.network, spec, pixels, labels, loss_fn, progress=progress, desc=desc)
    return model.eval()


def model_device(module: nn.Module) -> torch.device:
    """Where ``module`` runs: the device of its first parameter (or buffer); the CPU for one without either."""
    for tensor in itertools.chain(module.parameters(), module.buffers()):
        return tensor.device
    return torch.device("cpu")


def on_cpu(module: nn.Module) -> nn.Module:
    """``module`` itself when it lies on the CPU, else a copy moved there (the original stays where it runs).

    Models are registered with CPU tensors, so that they load on machines without the device they were trained on.
    """
    if model_device(module).type == "cpu":
        return module
    return copy.deepcopy(module).cpu()


def train_network(
    network: nn.Module,
    spec: TrainSpec,
    pixels: np.ndarray,
    labels: np.ndarray,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    *,
    progress: bool = True,
    desc: str = "train",
) -> None:
    """Train ``network`` in place, on its device, with the optimizer, rate, epochs, batch size and seed of ``spec``.

    Batches are slices of one shuffled index per epoch (drawn on the CPU: the same order on any
    device), each moved to the network's device: no per-sample Python work. On a GPU, torch's
    deterministic algorithms are on meanwhile (:func:`ema.training.devices.reproducible_on`).
    ``loss_fn(outputs, targets)`` sums over the batch (it is divided by the batch size here).

    Raises
    ------
    EMAError
        If the loss or the weights stop being finite.
    TimeLimitExceeded
        If the command's ``--timeout`` passes (checked before every step).
    """
    generator = torch.Generator().manual_seed(spec.seed)
    optimizer = make_optimizer(spec, network.parameters())
    # the scheduler is a no-op without decay, and costs ~10% of a small MLP's step
    scheduler = (
        torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1.0 + spec.lr_decay * step))
        if spec.lr_decay > 0
        else None
    )
    inputs, targets = input_tensor(pixels), to_tensor(labels, np.int64)
    device = model_device(network)
    with reproducible_on(device):
        bar = tqdm(range(spec.epochs), desc=desc, unit="epoch", disable=not progress, leave=False)
        for epoch in bar:
            order = torch.randperm(len(targets), generator=generator)
            total = torch.zeros((), device=device)
            for batch in order.split(spec.batch_size):
                check_deadline(desc)
                optimizer.zero_grad(set_to_none=True)
                summed = loss_fn(network(inputs[batch].to(device)), targets[batch].to(device))
                (summed / len(batch)).backward()
                optimizer.step()
                if scheduler is not None:
                    scheduler.step()
                total += summed.detach()
            loss = total.item() / len(targets)
            if not np.isfinite(loss):
                raise _diverged(spec, f"a loss of {loss} in epoch {epoch + 1} of {spec.epochs}")
            bar.set_postfix(loss=f"{loss:.4f}")
    if not all(torch.isfinite(parameter).all() for parameter in network.parameters()):
        raise _diverged(spec, "non-finite weights after the last step")


def _diverged(spec: TrainSpec, what: str) -> EMAError:
    return EMAError(
        f"training diverged: expected a finite loss and weights, got {what} (lr {spec.lr:g}); "
        "nothing was registered: lower --lr"
    )


def predict_proba(model: nn.Module, pixels: np.ndarray, batch_size: int = SCORING_BATCH) -> np.ndarray:
    """Probabilities of a model we hold (the calibration model), in batches on its device, without autograd.

    Returns a numpy array in this process's memory whatever the model's device.
    """
    inputs, device = input_tensor(pixels), model_device(model)
    with torch.inference_mode():
        return torch.cat([model(chunk.to(device)).cpu() for chunk in inputs.split(batch_size)]).numpy()


class TorchClassifier:
    """A trained torch model we hold, with the input transform it was trained on."""

    def __init__(self, model: ProbabilityModel, transform) -> None:
        self.model, self.transform = model, transform

    def predict_proba(self, pixels: np.ndarray) -> np.ndarray:
        return predict_proba(self.model, self.transform.apply(pixels))
