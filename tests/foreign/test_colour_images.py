"""A torch CNN on RGB 32x32 images, logged with plain `mlflow.pytorch.log_model` (signature (-1, 3, 32, 32)),
audited on query files of (n, 32, 32, 3) uint8 images: channels last in the files, first in the model.

The members are noise images with random labels: the network can only memorise them, so
its training set is memorized and anything else is not. The calibration model is a second
copy trained the same way on other noise (``--calibration-model``), as a user holding their
own calibration data does.
"""

from __future__ import annotations

import json

import mlflow
import mlflow.pyfunc
import mlflow.pytorch
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from mlflow.models import ModelSignature
from mlflow.types.schema import ColSpec, Schema, TensorSpec
from torch import nn

from ema.data.arrays import ArraySet
from ema.data.files import write_set
from ema_cli.cli import main
from tests.foreign.conftest import ema_audit

pytestmark = pytest.mark.slow

#: Images per set, their side and classes.
N, SIDE, CLASSES = 48, 32, 2


class ColourCNN(nn.Module):
    """A user's small CNN for RGB 32x32 images; returns logits."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(4))
        self.head = nn.Linear(8 * 8 * 8, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


class ChannelsLast(nn.Module):
    """A user's model taking channels-last images of any size, (n, H, W, 3), as image pipelines outside torch give
    them: it moves the channels first itself."""

    def __init__(self, network: nn.Module) -> None:
        super().__init__()
        self.network = network

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.network(x.permute(0, 3, 1, 2))


class EncodedImages(mlflow.pyfunc.PythonModel):
    """A served image model's usual form: one ``binary`` column of encoded files (PNG bytes), decoded by the model."""

    def predict(self, context, model_input, params=None):
        return np.full((len(model_input), CLASSES), 1.0 / CLASSES)


def noise_set(name: str, seed: int) -> ArraySet:
    """``N`` RGB noise images (n, 32, 32, 3) uint8 with random labels."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (N, SIDE, SIDE, 3), dtype=np.uint8)
    return ArraySet(name, x, rng.integers(0, CLASSES, N).astype(np.int64), np.arange(N, dtype=np.int64))


def chw(images: np.ndarray) -> np.ndarray:
    """uint8 (n, H, W, 3) as the user's model takes them: float32 (n, 3, H, W) in [0, 1]."""
    return np.ascontiguousarray(images.transpose(0, 3, 1, 2), dtype=np.float32) / 255.0


def train_and_log(data: ArraySet, name: str, normalize: tuple | None = None, *, channels_last: bool = False) -> str:
    """Train a ColourCNN on ``data`` until it memorises it (seeded), log and register it as a user does;
    ``normalize``: the (mean, std) per channel its pixels are normalised with, as torchvision's ``Normalize``;
    ``channels_last``: logged as :class:`ChannelsLast` with a signature of any size, (-1, -1, -1, 3)."""
    torch.manual_seed(0)
    model = ColourCNN()
    pixels = chw(data.x)
    if normalize is not None:
        mean, std = (np.asarray(values, np.float32).reshape(1, 3, 1, 1) for values in normalize)
        pixels = (pixels - mean) / std
    x, y = torch.from_numpy(pixels), torch.from_numpy(data.y)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(60):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    model.eval()
    assert (model(x).argmax(1) == y).float().mean() == 1.0, "the members are memorised"
    inputs = {"input_example": pixels[:2]}
    if channels_last:
        model = ChannelsLast(model)
        inputs = {
            "input_example": np.ascontiguousarray(pixels[:2].transpose(0, 2, 3, 1)),
            "signature": ModelSignature(inputs=Schema([TensorSpec(np.dtype("float32"), (-1, -1, -1, 3))])),
        }
    with mlflow.start_run(run_name=f"a user's training of {name}"):
        mlflow.pytorch.log_model(model, name="model", registered_model_name=name, pip_requirements=["torch"], **inputs)
    return f"models:/{name}/1"


@pytest.fixture(scope="module")
def colour_files(store, tmp_path_factory):
    """The target and calibration model, and the query files: members, held out, calibration halves."""
    folder = tmp_path_factory.mktemp("colour")
    sets = {
        name: noise_set(name, seed)
        for seed, name in enumerate(("members", "held_out", "cal_members", "cal_nonmembers"))
    }
    files = {name: str(write_set(data, folder / f"{name}.npz")) for name, data in sets.items()}
    files["target"] = train_and_log(sets["members"], "colour-cnn")
    files["calibration"] = train_and_log(sets["cal_members"], "colour-cnn-calibration")
    return files


def audit_options(files: dict, query: str) -> tuple[str, ...]:
    return (
        "--model", files["target"],
        "--outputs", "logits",
        "--calibration-model", files["calibration"],
        "--calibration-outputs", "logits",
        "--calibration-members", files["cal_members"],
        "--calibration-nonmembers", files["cal_nonmembers"],
        "--reference", files["cal_nonmembers"],
        "--query-file", files[query],
    )  # fmt: skip


def test_rgb_32x32_members_memorized_held_out_not(colour_files):
    member_output, member = ema_audit(*audit_options(colour_files, "members"))
    held_out_output, held_out = ema_audit(*audit_options(colour_files, "held_out"))
    assert (member, held_out) == ("memorized", "not_memorized"), member_output + held_out_output


def test_a_channels_last_model_of_any_size_gets_its_images_channels_last(colour_files):
    """Signature (-1, -1, -1, 3): the images go (n, 32, 32, 3), at their own size, with no --input-shape."""
    files = {**colour_files, "target": train_and_log(noise_set("members", 0), "channels-last-cnn", channels_last=True)}
    member_output, member = ema_audit(*audit_options(files, "members"))
    held_out_output, held_out = ema_audit(*audit_options(files, "held_out"))
    assert (member, held_out) == ("memorized", "not_memorized"), member_output + held_out_output


def test_a_model_of_encoded_image_files_is_refused_naming_the_wrapper_not_options(colour_files):
    """A signature of one binary column: no option the audit has makes pixels into files, so none is advised."""
    with mlflow.start_run(run_name="a user's model of PNG bytes"):
        mlflow.pyfunc.log_model(
            name="model",
            python_model=EncodedImages(),
            signature=ModelSignature(inputs=Schema([ColSpec("binary", "image")])),
            registered_model_name="png-bytes",
        )
    files = {**colour_files, "target": "models:/png-bytes/1"}
    for extra in ([], ["--input-shape", "32,32,3"]):
        refused = CliRunner().invoke(main, ["audit", *audit_options(files, "held_out"), *extra, "--no-progress"])
        assert refused.exit_code == 3, refused.output
        last = refused.output.strip().splitlines()[-1]
        assert "1 binary column(s) ('image')" in last and "the audit sends images as pixel arrays" in last, last
        assert "wrap the model in a pyfunc" in last and "--image-size" not in last


def test_grey_images_for_a_colour_model_are_refused_naming_the_channels_not_the_size(colour_files, tmp_path):
    grey = noise_set("grey", 9)
    grey = ArraySet("grey", grey.x.mean(axis=-1).round().astype(np.uint8), grey.y, grey.index)  # 32x32, one channel
    path = str(write_set(grey, tmp_path / "grey.npz"))
    refused = CliRunner().invoke(main, ["audit", *audit_options(colour_files, "held_out")[:-1], path, "--no-progress"])
    assert refused.exit_code == 3
    assert refused.output.strip().splitlines()[-1] == (
        "Error: expected images that fit the model's declared input shape (-1, 3, 32, 32), got images of shape "
        "(32, 32) (1024 values); the model takes 3-channel images and these have 1: write the query, calibration "
        "and reference files with 3 channels (a grey image repeated: np.repeat(x[..., None], 3, axis=-1))"
    )


def test_a_colour_query_without_a_calibration_file_is_refused_naming_the_option(colour_files):
    """The default calibration set is the preset's 28x28 digits: no calibration model of the target's takes them."""
    refused = CliRunner().invoke(
        main,
        ["audit", "--model", colour_files["target"], "--outputs", "logits", "--query-file", colour_files["held_out"]],
    )
    assert refused.exit_code == 3
    assert refused.output.strip().splitlines()[-1] == (
        "Error: expected a calibration set like the query (image 32x32x3), got the clean calibration set "
        "of mnist-embedded (image 28x28): give --calibration-file FILE with samples like the query's, of every "
        "class the model outputs"
    )


def test_rgb_images_of_another_size_are_refused_in_one_line_and_resized_when_asked(colour_files, tmp_path):
    big = noise_set("big", 9)
    big = ArraySet("big", np.repeat(np.repeat(big.x, 2, axis=1), 2, axis=2), big.y, big.index)  # 64x64x3
    path = str(write_set(big, tmp_path / "big.npz"))
    options = [*audit_options(colour_files, "held_out")[:-1], path, "--no-progress"]
    refused = CliRunner().invoke(main, ["audit", *options])
    assert refused.exit_code != 0
    assert refused.output.strip().splitlines()[-1] == (
        "Error: expected images that fit the model's declared input shape (-1, 3, 32, 32), got images of shape "
        "(64, 64, 3) (12288 values); give the model's shape with --input-shape, or resize the images with "
        "--image-size 32"
    )
    resized = CliRunner().invoke(main, ["audit", *options, "--image-size", "32"])
    assert resized.exit_code == 0, resized.output


def test_a_model_trained_on_imagenet_normalised_pixels_is_audited_with_normalize_imagenet(colour_files):
    """Target and calibration model take torchvision's ImageNet normalisation, per channel, as pretrained ResNets do."""
    from mlflow.tracking import MlflowClient

    from ema.input_transform import IMAGENET_NORMALIZE

    files = {
        **colour_files,
        "target": train_and_log(noise_set("members", 0), "imagenet-cnn", IMAGENET_NORMALIZE),
        "calibration": train_and_log(noise_set("cal_members", 2), "imagenet-cnn-calibration", IMAGENET_NORMALIZE),
    }
    member_output, member = ema_audit(*audit_options(files, "members"), "--normalize", "imagenet")
    held_out_output, held_out = ema_audit(*audit_options(files, "held_out"), "--normalize", "imagenet")
    assert (member, held_out) == ("memorized", "not_memorized"), member_output + held_out_output
    trail = MlflowClient().get_model_version("imagenet-cnn", "1").tags
    inputs = {json.loads(value)["options"]["input"] for key, value in trail.items() if key.startswith("ema.audit.")}
    assert inputs == {"x1 norm 0.485,0.456,0.406,0.229,0.224,0.225"}
