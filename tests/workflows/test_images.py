"""Targets on image folders at their own size: `ema train --data chest-xray --image-size N --arch ...` on a folder
in the Kermany layout that the test writes, then audits of its folds; the sizes and shapes they record."""

from __future__ import annotations

import json

import mlflow
import numpy as np
import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient
from PIL import Image

from ema.tracking import keys
from ema_cli.cli import main

#: Images per class and split, and their side on disk.
PER_CLASS, SIDE = 36, 72


def write_kermany(root, *, per_class: int = PER_CLASS, size: tuple[int, int] = (SIDE, SIDE), seed: int = 0):
    """ROOT/chest_xray/{train,test}/{NORMAL,PNEUMONIA}/*.png: noisy grey images, NORMAL darker than PNEUMONIA."""
    rng = np.random.default_rng(seed)
    for split in ("train", "test"):
        for label, name in enumerate(("NORMAL", "PNEUMONIA")):
            folder = root / "chest_xray" / split / name
            folder.mkdir(parents=True)
            for i in range(per_class):
                pixels = rng.normal(90 + 80 * label, 40, size[::-1]).clip(0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(folder / f"{name.lower()}{i:03d}.png")
    return root


def invoke(*args: str):
    return CliRunner().invoke(main, [*args, "--no-progress"])


def train_and_audit(root, *train_options: str) -> tuple[str, str]:
    """Train on the folder with ``train_options``, audit fold M1 and the held-out M6; their outputs."""
    trained = invoke("train", "--data", "chest-xray", "--root", str(root), *train_options)
    assert trained.exit_code == 0, trained.output
    outputs = []
    for query in ("M1", "M6"):
        audited = invoke("audit", "--query", query)
        assert audited.exit_code == 0, audited.output
        outputs.append(audited.output)
    return trained.output, "".join(outputs)


def registered_config() -> tuple[dict, dict]:
    """The target's pyfunc config (spec, classes, input shape) and its tags."""
    version = MlflowClient().get_model_version_by_alias(keys.TARGET_MODEL_NAME, keys.TARGET_ALIAS)
    info = mlflow.models.get_model_info(f"models:/{keys.TARGET_MODEL_NAME}/{version.version}")
    return info.flavors["python_function"]["config"], version.tags


def test_chest_xray_cnn_at_32_trains_records_its_shape_and_audits(store, tmp_path):
    """The fast variant: a small CNN on the folder resized to 32x32."""
    root = write_kermany(tmp_path, per_class=24)
    _, audits = train_and_audit(root, "--image-size", "32", "--arch", "cnn", "--epochs", "3", "--lr", "0.01")
    config, tags = registered_config()
    assert config["input_shape"] == [1, 32, 32]
    assert (tags[keys.TAG_DATA_IMAGE_SIZE], keys.TAG_DATA_CHANNELS in tags) == ("32", False)
    assert "M1: |D_q|=" in audits and "M6: |D_q|=" in audits


def test_chest_xray_in_colour_at_its_own_size(store, tmp_path):
    root = write_kermany(tmp_path, per_class=24, size=(24, 20))
    trained = invoke(
        "train", "--data", "chest-xray", "--root", str(root), "--channels", "3", "--arch", "cnn", "--epochs", "1"
    )
    assert trained.exit_code == 0, trained.output
    config, tags = registered_config()
    assert config["input_shape"] == [3, 20, 24], "(channels, height, width) of the images as they are"
    assert tags[keys.TAG_DATA_CHANNELS] == "3"
    audited = invoke("audit", "--query", "M1")
    assert audited.exit_code == 0, audited.output


def test_chest_xray_of_several_sizes_is_refused_without_image_size(store, tmp_path):
    root = write_kermany(tmp_path, per_class=2)
    Image.new("L", (50, 40)).save(root / "chest_xray/train/NORMAL/other.png")
    result = invoke("train", "--data", "chest-xray", "--root", str(root), "--epochs", "1")
    assert result.exit_code != 0
    assert result.output.strip().splitlines()[-1] == (
        f"Error: {root}/chest_xray/train: expected images of one size to read them at their own size, got 2 sizes "
        "(width x height): 72x72 (4 files), 50x40 (1 files); give --image-size N to resize them to N x N"
    )
    assert not MlflowClient().search_registered_models(), "nothing is registered"


def test_paper_medical_recipe_with_options_that_override_it(store, tmp_path):
    root = write_kermany(tmp_path, per_class=12, size=(32, 32))
    trained = invoke("train", "--data", "chest-xray", "--root", str(root), "--recipe", "paper-medical", "--epochs", "1")
    assert trained.exit_code == 0, trained.output
    _, tags = registered_config()
    recipe = json.loads(tags[keys.TAG_RECIPE])
    assert (recipe["arch"], recipe["optimizer"], recipe["lr"], recipe["weight_decay"], recipe["epochs"]) == (
        "resnet18",
        "adam",
        2e-5,
        1e-7,
        1,
    ), "the preset's fields, the epochs given on the command line"


@pytest.mark.slow
def test_chest_xray_resnet18_at_64_trains_and_audits_a_fold(store, tmp_path):
    """The issue's command: ResNet-18 (ImageNet's stem, one channel) on the folder at 64x64, then audits."""
    root = write_kermany(tmp_path)
    trained, audits = train_and_audit(
        root, "--image-size", "64", "--arch", "resnet18", "--optimizer", "adam", "--lr", "0.001", "--epochs", "3"
    )
    config, _ = registered_config()
    assert config["input_shape"] == [1, 64, 64]
    assert "ema:" in audits, trained + audits
