"""Approximate removal methods over one of our torch models: fine-tune, NegGrad+, random labels, SCRUB.

Each starts from a copy of the trained model (the original is left untouched: SCRUB uses it
as its teacher) and takes SGD steps on the retained data, and for all but fine-tuning on the
forget set too. Exact removal (``retrain``) needs no model, only the recipe
(:meth:`ema.training.recipes.TorchRecipe.fit` on the retained data).

References: NegGrad+ and SCRUB as in Kurmanji, Triantafillou, Hayes and Triantafillou,
"Towards Unbounded Machine Unlearning" (NeurIPS 2023); random labels as in Graves, Nagisetty
and Ganesh, "Amnesiac Machine Learning" (AAAI 2021).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from ema.errors import EMAError
from ema.limits import check_deadline
from ema.training.architectures import ProbabilityModel
from ema.training.devices import reproducible_on
from ema.training.fit import model_device, to_tensor
from ema.training.unlearn_spec import APPROXIMATE_METHODS, UnlearnSpec
from ema.validation import check_choice

#: A labelled batch: inputs (b, 1, 28, 28) float32 and labels (b,) int64.
Batch = tuple[torch.Tensor, torch.Tensor]


class _Batches:
    """How every data set of one method is batched: its size, the seeded order's generator, the model's device."""

    def __init__(self, batch_size: int, generator: torch.Generator, device: torch.device) -> None:
        self.batch_size, self.generator, self.device = batch_size, generator, device

    def of(self, pixels: np.ndarray, labels: np.ndarray) -> _Data:
        return _Data(pixels, labels, self)


class _Data:
    """Inputs and labels as tensors in this process's memory, with seeded shuffled batches on the model's device."""

    def __init__(self, pixels: np.ndarray, labels: np.ndarray, batches: _Batches) -> None:
        self.x, self.y = to_tensor(pixels), to_tensor(labels, np.int64)
        self.batch_size, self.generator, self.device = batches.batch_size, batches.generator, batches.device

    def epoch(self) -> Iterator[Batch]:
        """One pass in a fresh seeded order (drawn on the CPU: the same on any device)."""
        for batch in torch.randperm(len(self.y), generator=self.generator).split(self.batch_size):
            yield self.x[batch].to(self.device), self.y[batch].to(self.device)

    def forever(self) -> Iterator[Batch]:
        """Passes without end (the forget set beside a longer retained set)."""
        while True:
            yield from self.epoch()


def unlearn_model(
    model: ProbabilityModel,
    spec: UnlearnSpec,
    retain: tuple[np.ndarray, np.ndarray],
    forget: tuple[np.ndarray, np.ndarray],
    *,
    progress: bool = True,
) -> ProbabilityModel:
    """Remove ``forget`` from ``model`` by an approximate method; returns a new model in eval mode, on its device.

    Parameters
    ----------
    model : ProbabilityModel
        The trained target, on the device the method runs on (:func:`ema.training.fit.model_device`);
        its weights are not modified.
    spec : UnlearnSpec
        An approximate method with every option resolved (:meth:`UnlearnSpec.resolved`).
    retain, forget : tuple of (ndarray of shape (n, 1, 28, 28) float32, ndarray of shape (n,) int64)
        Model inputs (the recipe's transform applied) and labels of the retained data and the forget set.

    Raises
    ------
    EMAError
        If the loss or the weights become non-finite (nothing is registered: lower --lr).
    """
    check_choice("approximate unlearning method", spec.method, APPROXIMATE_METHODS)
    torch.manual_seed(spec.seed)
    batches = _Batches(spec.batch_size, torch.Generator().manual_seed(spec.seed), model_device(model))
    student = copy.deepcopy(model).train()
    optimizer = torch.optim.SGD(student.network.parameters(), lr=spec.lr, momentum=spec.momentum)
    steps = STEPS[spec.method](student.network, model.eval(), spec, retain, forget, batches)
    step_name = f"unlearn {spec.method}"
    with reproducible_on(batches.device):
        for epoch in tqdm(range(spec.epochs), desc=f"unlearn {spec.method}", disable=not progress, leave=False):
            for loss_fn in steps(epoch):
                check_deadline(step_name)
                optimizer.zero_grad(set_to_none=True)
                loss = loss_fn()
                if not torch.isfinite(loss):
                    raise EMAError(
                        f"unlearning diverged: expected a finite loss, got {loss.item()} in epoch {epoch + 1} of "
                        f"{spec.epochs} ({spec.method}, lr {spec.lr:g}); nothing was registered: lower --lr"
                    )
                loss.backward()
                nn.utils.clip_grad_norm_(student.network.parameters(), spec.clip_norm)
                optimizer.step()
    return student.eval()


#: One epoch's steps: each a function computing the loss of one step. A method's builder takes the
#: student's network, the original model (SCRUB's teacher), the spec, the retained and forget data
#: and how they are batched (the seeded order's generator, the device).
Steps = Callable[[int], Iterator[Callable[[], torch.Tensor]]]


def _finetune(student: nn.Module, teacher, spec: UnlearnSpec, retain, forget, batches: _Batches) -> Steps:
    """Plain descent on the retained data: the forget set fades only as far as training moves away from it."""
    data = batches.of(*retain)
    return lambda epoch: (lambda x=x, y=y: F.cross_entropy(student(x), y) for x, y in data.epoch())


def _random_labels(student: nn.Module, teacher, spec: UnlearnSpec, retain, forget, batches: _Batches) -> Steps:
    """Descent on the retained data and the forget set with seeded random wrong labels, shuffled together."""
    pixels, labels = forget
    shift = np.random.default_rng(spec.seed).integers(1, teacher.n_classes, size=len(labels))
    relabelled = (labels + shift) % teacher.n_classes  # never the true label
    data = batches.of(np.concatenate([retain[0], pixels]), np.concatenate([retain[1], relabelled]))
    return lambda epoch: (lambda x=x, y=y: F.cross_entropy(student(x), y) for x, y in data.epoch())


def _neggrad(student: nn.Module, teacher, spec: UnlearnSpec, retain, forget, batches: _Batches) -> Steps:
    """NegGrad+: each step descends on a retained batch and ascends on a forget batch, weighted by ``ascent_weight``."""
    kept, forgotten = batches.of(*retain), batches.of(*forget).forever()
    w = spec.ascent_weight

    def step(x: torch.Tensor, y: torch.Tensor, fx: torch.Tensor, fy: torch.Tensor) -> torch.Tensor:
        return (1.0 - w) * F.cross_entropy(student(x), y) - w * F.cross_entropy(student(fx), fy)

    return lambda epoch: (lambda b=b, f=next(forgotten): step(*b, *f) for b in kept.epoch())  # noqa: B008 - next batch per step


def _scrub(student: nn.Module, teacher: ProbabilityModel, spec: UnlearnSpec, retain, forget, batches) -> Steps:
    """SCRUB: max-steps away from the teacher on the forget set (first epochs), min-steps close to it on the rest.

    The min-step loss is the cross-entropy on a retained batch plus ``kd_weight`` times the
    divergence from the teacher; the max-step loss is minus the divergence on a forget batch.
    """
    kept, forgotten = batches.of(*retain), batches.of(*forget)

    def divergence(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            target = F.log_softmax(teacher.network(x) / spec.temperature, dim=1)
        own = F.log_softmax(student(x) / spec.temperature, dim=1)
        return F.kl_div(own, target, reduction="batchmean", log_target=True) * spec.temperature**2

    def epoch_steps(epoch: int) -> Iterator[Callable[[], torch.Tensor]]:
        if epoch < spec.forget_epochs:
            yield from (lambda x=x: -divergence(x) for x, _ in forgotten.epoch())
        yield from (
            lambda x=x, y=y: F.cross_entropy(student(x), y) + spec.kd_weight * divergence(x) for x, y in kept.epoch()
        )

    return epoch_steps


STEPS = {"finetune": _finetune, "neggrad": _neggrad, "random-labels": _random_labels, "scrub": _scrub}
