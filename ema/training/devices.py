"""Where torch trains and scores in this process: ``--device auto|cpu|cuda[:N]``, parsed, resolved and described.

A device is a choice of the run, never of the model: models are built and seeded on the CPU,
trained or scored where the run says, and registered with CPU tensors so that they load
anywhere (:mod:`ema.training.packaging`). Parsing (:func:`parse_device`) imports nothing
heavy, so the command line checks the option's form without torch; :func:`resolve_device`
asks torch what this machine has, before any run starts.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager

from ema.errors import InputError

AUTO, CPU, CUDA = "auto", "cpu", "cuda"
#: The forms ``--device`` accepts, in words.
DEVICE_FORMS = "auto, cpu, cuda or cuda:N (N a CUDA device's index)"
_FORM = re.compile(r"(auto|cpu|cuda)(?::(\d{1,4}))?")
#: cuBLAS's setting for reproducible results (torch's reproducibility notes); read when cuBLAS first runs.
CUBLAS_WORKSPACE = ("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def parse_device(text: str) -> str:
    """``text`` checked for its form only: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``, without asking the machine.

    Raises
    ------
    InputError
        If ``text`` is none of those forms.

    Examples
    --------
    >>> parse_device("cuda:1")
    'cuda:1'
    """
    match = _FORM.fullmatch(text) if isinstance(text, str) else None
    if match is None or (match[2] is not None and match[1] != CUDA):
        raise InputError(f"expected --device {DEVICE_FORMS}, got {text!r}")
    return text


def resolve_device(text: str) -> str:
    """The device ``text`` names on this machine: ``cpu`` or ``cuda:N``.

    ``auto`` is the current CUDA device when CUDA is available, else ``cpu``; ``cuda`` is the
    current CUDA device. Call it before a run starts, so that a refused device leaves no run.

    Raises
    ------
    InputError
        If ``text`` is not a device's form, or names CUDA (or a CUDA device) this machine lacks.
    """
    device = parse_device(text)
    if device == CPU:
        return CPU
    import torch

    available = torch.cuda.is_available()
    if available:
        os.environ.setdefault(*CUBLAS_WORKSPACE)  # before any CUDA work of the run: see reproducible_on
    if device == AUTO:
        return f"{CUDA}:{torch.cuda.current_device()}" if available else CPU
    if not available:
        raise InputError(f"expected --device cpu or auto on this machine (CUDA is not available), got {text!r}")
    if device == CUDA:
        return f"{CUDA}:{torch.cuda.current_device()}"
    count, index = torch.cuda.device_count(), int(device.split(":")[1])
    if index >= count:
        raise InputError(
            f"expected --device cuda:0 to cuda:{count - 1}, cuda, cpu or auto on this machine ({count} CUDA "
            f"device{'s' if count != 1 else ''}), got {text!r}"
        )
    return device


def describe_device(device: str) -> str:
    """A resolved device as runs record it: ``cpu``, or ``cuda:N (the card's name)``."""
    if device == CPU:
        return CPU
    import torch

    return f"{device} ({torch.cuda.get_device_name(device)})"


@contextmanager
def reproducible_on(device) -> Iterator[None]:
    """Training on ``device`` as a function of its seed alone: on CUDA, torch's deterministic algorithms meanwhile.

    With torch's defaults, two fits of one seed on an NVIDIA H200 differed by 5.5 to 6.3 (two runs) in a
    ResNet-18 weight and 5.8e-5 in the CNN's (cuDNN picks and sums as it likes); with
    deterministic algorithms they were bitwise equal (``python -m benchmarks.gpu_determinism``,
    benchmarks/RESULTS_GPU_DETERMINISM.md). The CPU's kernels already are, and nothing changes there. An
    operation with no deterministic CUDA kernel (in a user's own network) warns instead of
    failing. The previous settings are restored on exit.
    """
    import torch

    if torch.device(device).type != CUDA:
        yield
        return
    os.environ.setdefault(*CUBLAS_WORKSPACE)
    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.benchmark,
    )
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.backends.cudnn.benchmark = before[2]
