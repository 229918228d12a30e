"""A loaded torch module, re-initialised and trained as the calibration model; packaged for logging.

A module logged with MLflow's default ``pt2`` format loads as a ``torch.export`` graph: its
parameters keep their names but its layers lose ``reset_parameters``, and it has no train
mode. Parameters no layer resets get torch's own defaults by shape (weights of two or more
dimensions Kaiming-uniform, their biases uniform in +-1/sqrt(fan_in), one-dimensional weights
ones, as normalisation layers start); the graph's batch norms and dropouts are switched to
training by their operations' flag while the clone trains, as ``train()`` switches a module's.
"""

from __future__ import annotations

import copy
import logging
import math
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ema.errors import InputError
from ema.inputs import prepare_inputs
from ema.model_package import FLAVOR_PYTORCH, ModelPackage
from ema.run_warnings import FOR_THE_RECORD
from ema.training.clones import TorchCloneRecipe
from ema.training.fit import model_device, on_cpu, predict_proba, train_network
from ema.validation import short_hash

#: Smallest probability whose log is taken when a module returns probabilities.
PROBABILITY_FLOOR = 1e-12
#: Rows used to tell whether a module returns logits or probabilities.
PROBE_ROWS = 64
#: How far from 1 a row of probabilities may sum (as :data:`ema.signals.ROW_SUM_TOLERANCE`).
ROW_SUM_TOLERANCE = 1e-3
#: The operations of an exported graph that run in train or eval mode by a flag, and that flag's argument position.
MODE_FLAGS = {
    **dict.fromkeys((torch.ops.aten.batch_norm.default, torch.ops.aten.instance_norm.default), 5),
    **dict.fromkeys(
        (
            torch.ops.aten.dropout.default,
            torch.ops.aten.alpha_dropout.default,
            torch.ops.aten.feature_dropout.default,
            torch.ops.aten.feature_alpha_dropout.default,
        ),
        2,
    ),
}
#: Words in the name of an operation whose behaviour depends on the mode (warned of when not in :data:`MODE_FLAGS`).
MODE_WORDS = ("batch_norm", "instance_norm", "dropout")
#: The file beside a clone's ``pt2`` graph that holds its output kind and state dict, read back as weights only.
CLONE_WEIGHTS_NAME = "clone_weights.pt"


def architecture_digest(module: nn.Module) -> str:
    """What identifies an architecture: the module's printout and its parameters' names and shapes."""
    shapes = [(name, tuple(p.shape)) for name, p in module.named_parameters()]
    return f"{type(module).__name__}:{short_hash(str(module) + repr(shapes))}"


def reinitialise(module: nn.Module, seed: int) -> nn.Module:
    """Re-draw every parameter of ``module`` in place, seeded: layers reset themselves, the rest by shape."""
    torch.manual_seed(seed)
    done: set[int] = set()
    for layer in module.modules():
        if callable(getattr(layer, "reset_parameters", None)):
            layer.reset_parameters()
            done.update(id(p) for p in layer.parameters(recurse=False))
        if callable(getattr(layer, "reset_running_stats", None)):
            layer.reset_running_stats()
    parameters = dict(module.named_parameters())
    if not parameters:
        raise InputError(f"expected the target's {type(module).__name__} to have parameters to train, got none")
    with torch.no_grad():
        for name, parameter in parameters.items():
            if id(parameter) not in done:
                _default_init(name, parameter, parameters)
        for name, buffer in module.named_buffers():
            if name.endswith("running_mean") or name.endswith("num_batches_tracked"):
                buffer.zero_()
            elif name.endswith("running_var"):
                buffer.fill_(1)
    return module


def _default_init(name: str, parameter: torch.Tensor, parameters: dict[str, torch.Tensor]) -> None:
    """torch's default initialisation of a linear or convolutional layer's weight and bias, or a norm's."""
    if parameter.ndim >= 2:
        nn.init.kaiming_uniform_(parameter, a=math.sqrt(5))
        return
    weight = parameters.get(name[: -len("bias")] + "weight") if name.endswith("bias") else None
    if weight is not None and weight.ndim >= 2:
        bound = 1 / math.sqrt(weight[0].numel())
        nn.init.uniform_(parameter, -bound, bound)
    elif name.endswith("bias"):
        nn.init.zeros_(parameter)
    else:
        nn.init.ones_(parameter)


def _set_mode(module: nn.Module, training: bool) -> None:
    """Train or eval mode. An exported graph (``pt2``) ignores ``train()`` (or refuses it): its batch norms and
    dropouts are switched by their operations' own flag (:func:`_set_graph_mode`)."""
    try:
        module.train(training)
    except NotImplementedError:
        pass
    graph = getattr(module, "graph", None)
    if isinstance(graph, torch.fx.Graph):
        _set_graph_mode(module, graph, training)


def _set_graph_mode(graph_module: nn.Module, graph: torch.fx.Graph, training: bool) -> None:
    """Set the train-or-eval flag of every :data:`MODE_FLAGS` operation of an exported graph, in place.

    A graph is traced in eval mode: without this its batch norms would train on running
    statistics that never move and its dropouts would stay off. Other operations whose name
    says they depend on the mode are warned of, for the record, once when training starts. A
    layer the trace left out cannot come back (torch drops ``Dropout2d`` from an eval-mode graph).
    """
    unswitched = []
    for node in graph.nodes:
        position = MODE_FLAGS.get(node.target)
        if position is not None and len(node.args) > position:
            node.args = (*node.args[:position], training, *node.args[position + 1 :])
        elif node.op == "call_function" and any(word in str(node.target) for word in MODE_WORDS):
            unswitched.append(str(node.target))
    graph_module.recompile()
    if training and unswitched:
        logging.getLogger(__name__).warning(
            "the target's exported graph (pt2) has operations that behave differently in training, which the "
            "calibration clone runs as they were traced, in eval mode: %s; log the model with "
            "serialization_format='pickle', or give --recipe FILE or --calibration-model",
            ", ".join(sorted(set(unswitched))),
            extra=FOR_THE_RECORD,
        )


class ProbabilityOutputs(nn.Module):
    """A module whose outputs become probabilities: softmax over logits, or as they are."""

    def __init__(self, network: nn.Module, logits: bool) -> None:
        super().__init__()
        self.network, self.logits = network, logits

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outputs = self.network(x)
        return torch.softmax(outputs, dim=1) if self.logits else outputs


def _probe_outputs(network: nn.Module, inputs: np.ndarray) -> tuple[bool, int]:
    """Whether ``network`` returns logits (else rows of probabilities), and how many classes; judged on a few rows."""
    with torch.inference_mode():
        outputs = network(torch.from_numpy(np.ascontiguousarray(inputs[:PROBE_ROWS])).to(model_device(network)))
    if outputs.ndim != 2:
        raise InputError(
            f"expected the target's module to return (n, classes) outputs, got shape {tuple(outputs.shape)}"
        )
    sums = outputs.sum(dim=1)
    probabilities = (outputs >= 0).all() and torch.allclose(sums, torch.ones_like(sums), atol=ROW_SUM_TOLERANCE)
    return not bool(probabilities), int(outputs.shape[1])


def _probability_loss(probabilities: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.nll_loss(torch.log(probabilities.clamp_min(PROBABILITY_FLOOR)), targets, reduction="sum")


def fit_clone(
    recipe: TorchCloneRecipe, pixels: np.ndarray, labels: np.ndarray, *, progress: bool, device: str = "cpu"
) -> TorchCloneClassifier:
    """Train a re-initialised copy of ``recipe.template`` on ``pixels`` (float32 in [0, 1]) and ``labels``.

    The copy is re-initialised on the CPU (the same weights on any device), then trained on ``device``.
    """
    inputs = _model_inputs(recipe, pixels)
    network = reinitialise(copy.deepcopy(recipe.template).cpu(), recipe.spec.seed).to(device)
    logits, n_outputs = _probe_outputs(network, inputs)
    if labels.size and labels.max() >= n_outputs:
        raise InputError(
            f"expected calibration labels of the target's {n_outputs} classes (0..{n_outputs - 1}), got labels up to "
            f"{int(labels.max())}: give --calibration-file FILE with samples of the model's classes only"
        )
    loss_fn = nn.CrossEntropyLoss(reduction="sum") if logits else _probability_loss
    _set_mode(network, True)
    train_network(network, recipe.spec, inputs, labels, loss_fn, progress=progress, desc="train calibration clone")
    _set_mode(network, False)
    return TorchCloneClassifier(ProbabilityOutputs(network, logits), recipe)


def _model_inputs(recipe: TorchCloneRecipe, pixels: np.ndarray) -> np.ndarray:
    """``pixels`` (float (n, C, H, W) in [0, 1]) as the target takes them, C-ordered for torch."""
    return np.ascontiguousarray(prepare_inputs(pixels, recipe.transform, recipe.input_spec))


class TorchCloneClassifier:
    """A trained clone, giving probabilities for pixels in [0, 1]."""

    def __init__(self, model: ProbabilityOutputs, recipe: TorchCloneRecipe) -> None:
        self.model, self.recipe, self.transform = model, recipe, recipe.transform

    def predict_proba(self, pixels: np.ndarray) -> np.ndarray:
        return predict_proba(self.model, _model_inputs(self.recipe, pixels))

    @contextmanager
    def package(self, pixels: np.ndarray) -> Iterator[ModelPackage]:
        """The clone as MLflow's pytorch flavor logs it (``pt2``), on the CPU, its example the first two images.

        Its output kind and state dict travel beside the graph (:data:`CLONE_WEIGHTS_NAME`): the
        auditor reads a cached clone back from them alone, into a copy of the target's module.
        """
        example, model = _model_inputs(self.recipe, pixels[:2]), on_cpu(self.model)
        with tempfile.TemporaryDirectory() as folder:
            weights = Path(folder) / CLONE_WEIGHTS_NAME
            torch.save({"logits": bool(model.logits), "state_dict": model.state_dict()}, weights)
            yield ModelPackage(
                FLAVOR_PYTORCH,
                example,
                predict_proba(model, example),
                (f"torch=={torch.__version__.split('+')[0]}",),
                estimator=model,
                extra_files=(str(weights),),
            )
