"""``--device``: its forms, how it resolves on a machine with and without CUDA, and training that honours it."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from ema.errors import InputError
from ema.training.devices import describe_device, parse_device, reproducible_on, resolve_device
from ema.training.fit import fit, model_device, on_cpu, predict_proba
from ema.training.spec import TrainSpec

FORMS = r"^expected --device auto, cpu, cuda or cuda:N \(N a CUDA device's index\), got"
NO_CUDA = "expected --device cpu or auto on this machine (CUDA is not available), got 'cuda'"


@pytest.fixture
def without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture
def two_cards(monkeypatch):
    """A machine with two CUDA devices, the second current (nothing runs on them)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: f"NVIDIA H100 80GB HBM3 #{device}")


@pytest.mark.parametrize("text", ["auto", "cpu", "cuda", "cuda:0", "cuda:12"])
def test_parse_device_accepts_every_form(text):
    assert parse_device(text) == text


@pytest.mark.parametrize("text", ["gpu", "CUDA", "cuda:", "cuda:-1", "cuda:x", "cpu:0", "auto:1", " cpu", "", None, 0])
def test_parse_device_refuses_another_form_naming_the_accepted_ones(text):
    with pytest.raises(InputError, match=FORMS):
        parse_device(text)


def test_resolve_device_auto_is_the_cpu_without_cuda(without_cuda):
    assert resolve_device("auto") == "cpu"
    assert resolve_device("cpu") == "cpu"


@pytest.mark.parametrize("text", ["cuda", "cuda:0"])
def test_resolve_device_refuses_cuda_without_cuda_in_one_line(without_cuda, text):
    with pytest.raises(InputError) as caught:
        resolve_device(text)
    assert str(caught.value) == NO_CUDA.replace("'cuda'", repr(text))


def test_resolve_device_auto_and_cuda_are_the_current_card_with_cuda(two_cards):
    assert (resolve_device("auto"), resolve_device("cuda"), resolve_device("cuda:0")) == ("cuda:1", "cuda:1", "cuda:0")
    assert resolve_device("cpu") == "cpu"


def test_resolve_device_refuses_an_index_past_the_last_card(two_cards):
    with pytest.raises(InputError) as caught:
        resolve_device("cuda:2")
    assert str(caught.value) == (
        "expected --device cuda:0 to cuda:1, cuda, cpu or auto on this machine (2 CUDA devices), got 'cuda:2'"
    )


def test_describe_device_names_the_card(two_cards):
    assert describe_device("cpu") == "cpu"
    assert describe_device("cuda:1") == "cuda:1 (NVIDIA H100 80GB HBM3 #cuda:1)"


def test_fit_on_an_explicit_cpu_is_the_default_training_bitwise():
    rng = np.random.default_rng(0)
    pixels, labels = rng.random((64, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, 64)
    spec = TrainSpec(hidden=(16,), epochs=2, batch_size=16)
    default = fit(spec, pixels, labels, progress=False)
    explicit = fit(spec, pixels, labels, progress=False, device="cpu")
    for a, b in zip(default.state_dict().values(), explicit.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert model_device(explicit) == torch.device("cpu")
    probabilities = predict_proba(explicit, pixels)
    assert isinstance(probabilities, np.ndarray) and probabilities.shape == (64, 10)


def test_on_cpu_keeps_a_cpu_model_itself():
    model = torch.nn.Linear(2, 2)
    assert on_cpu(model) is model
    assert model_device(torch.nn.ReLU()) == torch.device("cpu")  # no parameters: the CPU


def deterministic_settings() -> tuple:
    return (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.benchmark,
    )


def test_reproducible_on_cuda_turns_deterministic_kernels_on_and_restores_the_settings(monkeypatch):
    """Only the settings (no CUDA work): torch takes them without a GPU."""
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    before = deterministic_settings()
    with reproducible_on("cuda:0"):
        assert deterministic_settings() == (True, True, False)
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert deterministic_settings() == before == (False, False, True)


def test_reproducible_on_the_cpu_changes_nothing(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    before = deterministic_settings()
    with reproducible_on("cpu"):
        assert deterministic_settings() == before
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: trains twice on the GPU")
@pytest.mark.parametrize("arch", ["cnn", "resnet18"])
def test_two_fits_of_one_seed_on_cuda_are_bitwise_equal(arch):
    """Under torch's defaults on an H200 they differed by 5.8e-5 (CNN) and 5.5-6.3 (ResNet-18) in a weight."""
    rng = np.random.default_rng(0)
    pixels, labels = rng.random((256, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, 256)
    spec = TrainSpec(arch=arch, epochs=2)
    first, second = (fit(spec, pixels, labels, progress=False, device=resolve_device("cuda")).cpu() for _ in range(2))
    for a, b in zip(first.state_dict().values(), second.state_dict().values(), strict=True):
        assert torch.equal(a, b)
