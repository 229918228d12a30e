"""Where torch trains and scores in this process: ``--device auto|cpu|cuda[:N]``, parsed, resolved and described.

A device is a choice of the run, never of the model: models are built and seeded on the CPU,
trained or scored where the run says, and registered with CPU tensors so that they load
anywhere (:mod:`ema.training.packaging`). Parsing (:func:`parse_device`) imports nothing
heavy, so the command line checks the option's form without torch; :func:`resolve_device`
asks torch what this machine has, before any run starts.
"""

from __future__ import annotations

import re

from ema.errors import InputError

AUTO, CPU, CUDA = "auto", "cpu", "cuda"
#: The forms ``--device`` accepts, in words.
DEVICE_FORMS = "auto, cpu, cuda or cuda:N (N a CUDA device's index)"
_FORM = re.compile(r"(auto|cpu|cuda)(?::(\d{1,4}))?")


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
