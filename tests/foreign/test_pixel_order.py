"""A scikit-learn MLP trained on colour images flattened as numpy flattens them, ``x.reshape(n, -1)`` of (n, H, W, 3)
images (pixel by pixel), logged with a tensor signature (-1, 3072) and with one of 3072 pixel columns.

Channel by channel (the default ``--pixel-order chw``) it sees scrambled pixels and its own
training set reads as not memorized; ``--pixel-order hwc`` gives it, its clone and its
references the order it was trained on, in-process and over HTTP alike.

The images are the embedded MNIST digits resized to 32x32 and coloured: a random foreground
and background colour per image, as a reviewer's script made them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from sklearn.neural_network import MLPClassifier

from ema.data.arrays import ArraySet
from ema.data.files import write_set
from ema.data.presets import load_splits
from ema.data.sources.images import resize_images
from ema.tracking import keys
from ema.workflows.target import resolve_target
from ema_cli.cli import main
from tests.foreign.conftest import ema_audit, register_sklearn, run_of
from tests.workflows.test_serving import free_port, serve, stop

#: Images per set, and the side they are resized to.
N, SIDE = 300, 32
COLUMNS = [f"pixel{i}" for i in range(SIDE * SIDE * 3)]


def coloured(data: ArraySet, name: str, seed: int) -> ArraySet:
    """``data``'s grey digits resized to 32x32 and coloured: a foreground and a background colour per image."""
    rng = np.random.default_rng(seed)
    grey = resize_images(data.x, SIDE).astype(np.float32)[..., None] / 255
    foreground = rng.uniform(0.3, 1.0, (len(data), 1, 1, 3))
    background = rng.uniform(0.0, 0.3, (len(data), 1, 1, 3))
    images = np.rint((grey * foreground + (1 - grey) * background) * 255).clip(0, 255).astype(np.uint8)
    return ArraySet(name, images, data.y, np.arange(len(data), dtype=np.int64))


def numpy_flat(images: np.ndarray) -> np.ndarray:
    """What the user's model was trained on: ``x.reshape(n, -1) / 255`` of (n, H, W, 3) images, float64."""
    return images.reshape(len(images), -1).astype(np.float64) / 255.0


@pytest.fixture(scope="module")
def colour(store, tmp_path_factory) -> dict[str, Path]:
    """Members (M1), held-out queries and a reference (M6) and calibration data, coloured, as files; the MLP trained
    on the members registered as ``sk-hwc`` (tensor signature) and ``sk-hwc-columns`` (pixel columns)."""
    splits, folder = load_splits(), tmp_path_factory.mktemp("colour")
    held_out = splits.query("M6")
    sets = {
        "members": coloured(splits.query("M1").take(np.arange(N)), "members", 0),
        "held": coloured(held_out.take(np.arange(N)), "held", 1),
        "reference": coloured(held_out.take(np.arange(N, 2 * N)), "reference", 2),
        "calibration": coloured(splits.calibration.take(np.arange(2 * N)), "calibration", 3),
    }
    for name, data in sets.items():
        write_set(data, folder / f"{name}.npz")
    x, y = numpy_flat(sets["members"].x), sets["members"].y
    model = MLPClassifier(hidden_layer_sizes=(64,), max_iter=150, random_state=0).fit(x, y)
    register_sklearn(model, "sk-hwc", x)
    register_sklearn(model, "sk-hwc-columns", pd.DataFrame(x, columns=COLUMNS))
    return {name: folder / f"{name}.npz" for name in sets} | {"model": model}


def audit_options(colour: dict, model: str, query: str) -> tuple[str, ...]:
    return (
        "--model",
        f"models:/{model}/1",
        "--query-file",
        str(colour[query]),
        "--calibration-file",
        str(colour["calibration"]),
        "--reference",
        str(colour["reference"]),
    )


def test_pixel_order_hwc_tells_the_members_of_a_numpy_flattened_model_from_held_out_data(colour):
    output, member = ema_audit(*audit_options(colour, "sk-hwc", "members"), "--pixel-order", "hwc")
    _, held_out = ema_audit(*audit_options(colour, "sk-hwc", "held"), "--pixel-order", "hwc")
    assert (member, held_out) == ("memorized", "not_memorized")
    run = run_of(output)
    assert run.data.params[keys.PARAM_PIXEL_ORDER] == "hwc" and "--pixel-order" not in output
    assert run.data.tags[keys.TAG_CALIBRATION_SOURCE] == "clone"


def test_the_default_pixel_order_scrambles_the_pixels_and_the_warning_names_pixel_order_hwc(colour):
    """Its own training set, scrambled, was called `not_memorized`: every verdict is now withheld."""
    result = CliRunner().invoke(main, ["audit", *audit_options(colour, "sk-hwc", "members"), "--no-progress"])
    assert result.exit_code == 1, result.output
    assert "-> inconclusive" in result.output and "Error: every verdict is withheld (inconclusive)" in result.output
    assert "rerun with --pixel-order hwc if so" in result.output
    assert "flattened channel by channel" in result.output and "--pixel-order hwc)" in result.output  # near chance


def test_the_clone_is_trained_on_pixels_in_the_order_the_target_gets(colour):
    target = resolve_target("models:/sk-hwc/1", pixel_order="hwc")
    assert target.calibration_source == "clone" and target.recipe.pixel_order == "hwc"
    calibration = target.read_set(str(colour["calibration"]), role="calibration file (--calibration-file)")
    clone = target.recipe.fit(calibration.model_inputs(), calibration.y)  # as the calibration plan trains it
    np.testing.assert_allclose(clone.features(calibration.model_inputs()), numpy_flat(calibration.x), rtol=1e-6)


@pytest.mark.parametrize("model", ["sk-hwc", "sk-hwc-columns"])
def test_a_flat_model_in_pixel_order_hwc_gets_what_the_user_fed_it(colour, model):
    reference = np.load(colour["reference"])["x"]
    oracle = resolve_target(f"models:/{model}/1", pixel_order="hwc").oracle()
    np.testing.assert_allclose(
        oracle.predict_proba(reference), colour["model"].predict_proba(numpy_flat(reference)), rtol=1e-5, atol=1e-9
    )  # pixels divided by 255 in float32, the user's in float64


def test_pixel_columns_model_audited_with_pixel_order_hwc(colour):
    _, member = ema_audit(*audit_options(colour, "sk-hwc-columns", "members"), "--pixel-order", "hwc")
    assert member == "memorized"


@pytest.mark.slow
def test_pixel_order_hwc_over_http_equals_in_process(colour):
    reference = np.load(colour["reference"])["x"]
    target = resolve_target("models:/sk-hwc/1", pixel_order="hwc")
    in_process = target.oracle().predict_proba(reference)
    port = free_port()
    process = serve(target.model_uri, port)
    try:
        url = f"http://127.0.0.1:{port}/invocations"
        over_http = resolve_target("models:/sk-hwc/1", model_url=url, pixel_order="hwc")
        for http_format in ("json", "parquet"):
            np.testing.assert_allclose(over_http.oracle(http_format=http_format).predict_proba(reference), in_process)
    finally:
        stop(process)
    assert (in_process.argmax(axis=1) == np.load(colour["reference"])["y"]).mean() > 0.7
