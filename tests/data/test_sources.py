"""The on-disk loaders, each on tiny files written in its exact format."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.io import savemat

from ema.data.embedded import load_mnist_embedded
from ema.data.sources import (
    LOADERS,
    MNIST,
    SVHN,
    ChestXRay,
    COVIDx,
    FashionMNIST,
    PneumoniaMNIST,
    open_source,
    read_idx,
)
from ema.data.sources.images import resize_images, to_grey
from ema.errors import InputError

DEBIAN_FASHION = Path("/usr/share/datasets/fashion-mnist")


def check_image_set(data, n: int, side: int = 28) -> None:
    assert data.x.shape == (n, side, side) and data.x.dtype == np.uint8
    assert data.y.dtype == np.int64 and data.index.dtype == np.int64
    np.testing.assert_array_equal(data.index, np.arange(n))


# IDX ---------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_read_idx_round_trips(tmp_path, suffix, write_idx):
    array = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    back = read_idx(write_idx(tmp_path / f"a-idx3-ubyte{suffix}", array))
    np.testing.assert_array_equal(back, array)
    assert back.dtype == np.uint8 and back.flags.writeable


def test_read_idx_reads_big_endian_int32(tmp_path):
    path = tmp_path / "ints"
    path.write_bytes(bytes([0, 0, 0x0C, 1]) + np.array([2], ">i4").tobytes() + np.array([1, 70000], ">i4").tobytes())
    np.testing.assert_array_equal(read_idx(path), [1, 70000])


def test_read_idx_rejects_bad_header(tmp_path):
    (tmp_path / "bad").write_bytes(b"PK\x03\x04rest")
    with pytest.raises(InputError, match="expected an IDX header"):
        read_idx(tmp_path / "bad")


def test_read_idx_rejects_truncated_data(tmp_path, write_idx):
    path = write_idx(tmp_path / "short", np.zeros((2, 3, 4), np.uint8))
    path.write_bytes(path.read_bytes()[:-1])
    with pytest.raises(InputError, match="expected 24 data bytes for shape \\(2, 3, 4\\), got 23"):
        read_idx(path)


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_mnist_load_reads_torchvision_layout(make_idx_root, suffix):
    root = make_idx_root("MNIST/raw", n_train=30, n_test=10, suffix=suffix)
    train, test = MNIST(root).load("train"), MNIST(root).load("test")
    check_image_set(train, 30)
    check_image_set(test, 10)
    np.testing.assert_array_equal(train.y, np.arange(30) % 10)
    np.testing.assert_array_equal(train.x, read_idx(root / f"MNIST/raw/train-images-idx3-ubyte{suffix}"))
    assert train.name == "mnist-train"


def test_mnist_missing_files_lists_what_was_expected_where(tmp_path):
    expected = "expected MNIST/raw/t10k-images-idx3-ubyte\\[.gz\\], MNIST/raw/t10k-labels-idx1-ubyte\\[.gz\\] under"
    with pytest.raises(InputError, match=expected) as error:
        MNIST(tmp_path).load("test")
    assert str(tmp_path.resolve()) in str(error.value)


def test_mnist_missing_label_file_is_named(make_idx_root, write_idx):
    root = make_idx_root("MNIST/raw")
    (root / "MNIST/raw/train-labels-idx1-ubyte").unlink()
    with pytest.raises(InputError, match=r"missing MNIST/raw/train-labels-idx1-ubyte\[\.gz\];"):
        MNIST(root).load("train")


def test_mnist_rejects_label_count_mismatch(make_idx_root, write_idx):
    root = make_idx_root("MNIST/raw")
    write_idx(root / "MNIST/raw/train-labels-idx1-ubyte", np.zeros(29, np.uint8))
    with pytest.raises(InputError, match="expected 30 labels"):
        MNIST(root).load("train")


def test_mnist_resizes_to_image_size(make_idx_root):
    data = MNIST(make_idx_root("MNIST/raw"), image_size=14).load("test")
    check_image_set(data, 10, side=14)


def test_fashion_reads_flat_folder_and_defaults_to_debian_path(make_idx_root):
    assert FashionMNIST().root == DEBIAN_FASHION
    data = FashionMNIST(make_idx_root("fashion", suffix=".gz") / "fashion").load("train")
    check_image_set(data, 30)
    assert data.name == "fashion-train"


def test_fashion_real_debian_files():
    if not (DEBIAN_FASHION / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip(f"Debian package dataset-fashion-mnist is not installed ({DEBIAN_FASHION} has no IDX files)")
    test = FashionMNIST().load("test")
    check_image_set(test, 10_000)
    np.testing.assert_array_equal(np.bincount(test.y), [1_000] * 10)
    assert test.x.min() == 0 and test.x.max() == 255


# SVHN --------------------------------------------------------------------------------


def test_svhn_maps_label_10_to_zero_and_converts_to_grey(tmp_path, write_svhn):
    write_svhn(tmp_path / "test_32x32.mat", 12)
    data = SVHN(tmp_path).load("test")
    check_image_set(data, 12)
    np.testing.assert_array_equal(data.y, (np.arange(12) + 1) % 10)
    colours = np.random.default_rng(12).integers(0, 256, (12, 3), dtype=np.uint8)
    expected_grey = np.rint(colours.astype(np.float64) @ [0.299, 0.587, 0.114])
    np.testing.assert_allclose(data.x[:, 14, 14], expected_grey, atol=1)
    assert (data.x == data.x[:, :1, :1]).all(), "constant images stay constant when resized"


def test_svhn_missing_file_is_listed(tmp_path, write_svhn):
    write_svhn(tmp_path / "test_32x32.mat", 2)
    assert SVHN(tmp_path).available("test") and not SVHN(tmp_path).available("train")
    with pytest.raises(InputError, match=r"svhn \(train\): expected train_32x32\.mat under .*missing train_32x32\.mat"):
        SVHN(tmp_path).load("train")


def test_svhn_rejects_wrong_image_shape(tmp_path):
    savemat(tmp_path / "train_32x32.mat", {"X": np.zeros((28, 28, 3, 2), np.uint8), "y": np.ones((2, 1), np.uint8)})
    with pytest.raises(InputError, match="expected X as uint8 of shape \\(32, 32, 3, 2\\)"):
        SVHN(tmp_path).load("train")


def test_svhn_rejects_a_file_that_is_not_matlab(tmp_path):
    (tmp_path / "train_32x32.mat").write_text("not matlab")
    with pytest.raises(InputError, match="expected a MATLAB v5 file"):
        SVHN(tmp_path).load("train")


# Chest X-ray image folders -----------------------------------------------------------


def test_chest_xray_reads_class_folders_as_binary_labels(make_chest_root):
    data = ChestXRay(make_chest_root(n=3), image_size=28).load("train")
    check_image_set(data, 6)
    np.testing.assert_array_equal(data.y, [0, 0, 0, 1, 1, 1])
    assert data.x[:3].max() < 40 and data.x[3:].min() > 210


def test_chest_xray_keeps_the_images_own_size_by_default(make_chest_root):
    data = ChestXRay(make_chest_root(n=2, size=(48, 36))).load("test")
    assert data.x.shape == (4, 36, 48) and data.describe() == "image 36x48"
    assert set(np.unique(data.x[:2])) == {20} and set(np.unique(data.x[2:])) == {230}, "read as they are, not resized"


def test_chest_xray_of_several_sizes_needs_image_size(make_chest_root):
    with pytest.raises(
        InputError,
        match=r"chest_xray/train: expected images of one size to read them at their own size, got 3 sizes "
        r"\(width x height\): 40x30 \(2 files\), 41x30 \(2 files\), 42x30 \(2 files\); give --image-size N to "
        r"resize them to N x N$",
    ):
        ChestXRay(make_chest_root(n=3)).load("train")


def sixteen_bit_chest_root(root: Path, values: dict[str, int], eight_bit: str | None = None) -> Path:
    """ROOT/chest_xray/{train,test}/CLASS/ with one 16-bit PNG per class holding ``values[CLASS]`` (12-bit X-ray
    values, as exported from DICOM), and an 8-bit PNG named ``eight_bit`` in NORMAL."""
    from PIL import Image

    for split in ("train", "test"):
        for name, value in values.items():
            folder = root / "chest_xray" / split / name
            folder.mkdir(parents=True)
            Image.fromarray(np.full((20, 24), value, dtype=np.uint16)).save(folder / "wide.png")
            if eight_bit and name == "NORMAL":
                Image.new("L", (24, 20), color=100).save(folder / eight_bit)
    return root


def test_chest_xray_of_16_bit_pngs_is_scaled_by_the_folders_bit_depth_not_clipped(tmp_path):
    root = sixteen_bit_chest_root(tmp_path, {"NORMAL": 1024, "PNEUMONIA": 4095})
    for size in (None, 10):
        data = ChestXRay(root, image_size=size).load("train")
        assert data.x.dtype == np.uint8
        assert set(np.unique(data.x[0])) == {round(1024 * 255 / 4095)} and set(np.unique(data.x[1])) == {255}
    colour = ChestXRay(root, channels=3).load("test")
    assert colour.x.shape == (2, 20, 24, 3) and set(np.unique(colour.x[0])) == {64}


def test_the_splits_of_16_bit_pngs_share_one_scale_whatever_their_largest_values(tmp_path):
    """The test split's brightest image is 2000, the train split's 4095: both read as 12 bits, 1024 as 64 in each."""
    from PIL import Image

    root = sixteen_bit_chest_root(tmp_path, {"NORMAL": 1024, "PNEUMONIA": 4095})
    darker = root / "chest_xray" / "test" / "PNEUMONIA" / "wide.png"
    Image.fromarray(np.full((20, 24), 2000, dtype=np.uint16)).save(darker)
    train, test = (ChestXRay(root).load(split) for split in ("train", "test"))
    assert set(np.unique(train.x[0])) == set(np.unique(test.x[0])) == {64}
    assert set(np.unique(test.x[1])) == {round(2000 * 255 / 4095)}


def twelve_bit_digit_root(root: Path, hot: int | None = None) -> tuple[Path, dict[str, np.ndarray]]:
    """ROOT/chest_xray/{train,test}/CLASS/ of real digits (the embedded MNIST) as 12-bit X-ray values in 16-bit PNGs,
    4 per class and split; ``hot``: the value of one corner pixel of the first test PNEUMONIA file. Returns the root
    and each split's values in reading order."""
    from PIL import Image

    digits = load_mnist_embedded().x[:16]
    values = np.rint(digits.astype(np.float64) * 4095 / 255).astype(np.uint16)
    if hot is not None:
        values[8, 0, 0] = hot
    for position, image in enumerate(values):
        split, name = ("train", "test")[position // 8], ChestXRay.classes[position // 4 % 2]
        folder = root / "chest_xray" / split / name
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image).save(folder / f"{position:02d}.png")
    return root, {"train": values[:8], "test": values[8:]}


def test_one_bright_pixel_in_one_split_scales_every_split_alike_whatever_the_image_size_or_order(tmp_path):
    """One pixel of 4100 (past 12 bits) in one test file: the whole source reads at 16 bits, both splits, read apart
    in either order, and resized or not (the depth comes from the files' raw values, not the resized ones)."""
    root, values = twelve_bit_digit_root(tmp_path, hot=4100)
    sixteen_bit = {split: np.rint(v * (255 / 65535)).astype(np.uint8) for split, v in values.items()}
    for order in (("train", "test"), ("test", "train")):
        source = ChestXRay(root)
        for split in order:
            np.testing.assert_array_equal(source.load(split).x, sixteen_bit[split], err_msg=f"{split} of {order}")
    for split in ("test", "train"):
        resized = ChestXRay(root, image_size=14).load(split).x
        assert resized.max() <= sixteen_bit["test"].max() == round(4100 * 255 / 65535), split


def test_a_twelve_bit_source_of_real_digits_reads_back_their_8_bit_values(tmp_path):
    root, _ = twelve_bit_digit_root(tmp_path)
    source = ChestXRay(root)
    for split, start in (("test", 8), ("train", 0)):
        np.testing.assert_array_equal(source.load(split).x, load_mnist_embedded().x[start : start + 8])


def test_chest_xray_mixing_8_and_16_bit_images_is_refused(tmp_path):
    root = sixteen_bit_chest_root(tmp_path, {"NORMAL": 1024, "PNEUMONIA": 4095}, eight_bit="narrow.png")
    with pytest.raises(InputError, match=r"expected images of one bit depth, got 2 grey images of more than 8 bits"):
        ChestXRay(root).load("train")


def test_chest_xray_in_colour_at_a_given_size(make_chest_root):
    data = ChestXRay(make_chest_root(n=3), image_size=16, channels=3).load("train")
    assert data.x.shape == (6, 16, 16, 3) and data.x.dtype == np.uint8
    np.testing.assert_array_equal(data.x[..., 0], data.x[..., 2], err_msg="grey X-rays repeat in every channel")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"image_size": 0}, r"chest-xray: expected --image-size from 1 to 4096, got 0"),
        ({"channels": 2}, r"chest-xray: expected --channels among \(1, 3\), got 2"),
    ],
)
def test_image_options_out_of_range_are_refused(tmp_path, options, message):
    with pytest.raises(InputError, match=message):
        ChestXRay(tmp_path, **options)


def test_array_sources_stay_28x28_grey_by_default(make_idx_root):
    assert MNIST(make_idx_root("MNIST/raw")).load("test").x.shape == (10, 28, 28)


def test_svhn_in_colour_keeps_its_channels(tmp_path, write_svhn):
    write_svhn(tmp_path / "test_32x32.mat", 4)
    data = SVHN(tmp_path, image_size=32, channels=3).load("test")
    assert data.x.shape == (4, 32, 32, 3)
    assert len(np.unique(data.x[0].reshape(-1, 3), axis=0)) == 1, "a constant colour stays one colour"


def test_resize_images_resizes_colour_channel_by_channel():
    x = np.zeros((2, 8, 8, 3), np.uint8)
    x[..., 1] = 200
    np.testing.assert_array_equal(resize_images(x, 4)[0, 0, 0], [0, 200, 0])
    assert resize_images(x, 4).shape == (2, 4, 4, 3)


def test_chest_xray_missing_class_folders_are_listed(tmp_path):
    (tmp_path / "chest_xray/test/NORMAL").mkdir(parents=True)
    with pytest.raises(InputError, match="missing chest_xray/test/PNEUMONIA;"):
        ChestXRay(tmp_path).load("test")


def test_chest_xray_empty_class_folder_is_refused(make_chest_root):
    root = make_chest_root(n=1)
    for image in (root / "chest_xray/test/PNEUMONIA").glob("img*"):
        image.unlink()
    with pytest.raises(InputError, match=r"expected image files .* in .*PNEUMONIA, got none"):
        ChestXRay(root).load("test")


def test_chest_xray_unreadable_image_is_named(make_chest_root):
    root = make_chest_root(n=1)
    (root / "chest_xray/train/NORMAL/img0.jpeg").write_text("broken")
    with pytest.raises(InputError, match=r"img0\.jpeg: expected an image file Pillow can read"):
        ChestXRay(root).load("train")


# COVIDx ------------------------------------------------------------------------------


def test_covidx_maps_labels_to_binary(make_covidx_root):
    source = COVIDx(make_covidx_root(), image_size=28)
    train, test = source.load("train"), source.load("test")
    check_image_set(train, 3)
    np.testing.assert_array_equal(train.y, [1, 0, 1])
    np.testing.assert_array_equal(test.y, [0, 1])
    assert np.ptp(train.x) == 0, "a constant colour image is a constant grey image"


def test_covidx_missing_split_files_are_listed(tmp_path):
    with pytest.raises(InputError, match=r"expected test\.txt, test under .*missing test\.txt, test;"):
        COVIDx(tmp_path).load("test")


def test_covidx_missing_images_are_named(make_covidx_root):
    root = make_covidx_root()
    (root / "train/b.png").unlink()
    with pytest.raises(InputError, match=r"expected every listed image under .*train, missing 1: b\.png"):
        COVIDx(root).load("train")


def test_covidx_unknown_label_names_the_line(make_covidx_root):
    root = make_covidx_root({"train": [("p1", "a.png", "positive", "src"), ("p2", "b.png", "maybe", "src")]})
    with pytest.raises(InputError, match=r"train\.txt, line 2: expected a label from .*, got 'maybe'"):
        COVIDx(root).load("train")


def test_covidx_wrong_field_count_names_the_line(make_covidx_root):
    root = make_covidx_root({"train": [("p1", "a.png", "positive")]})
    with pytest.raises(InputError, match=r"line 1: expected 4 fields .*, got 3"):
        COVIDx(root).load("train")


# PneumoniaMNIST ----------------------------------------------------------------------


def test_pneumoniamnist_reads_every_split(make_pneumoniamnist_root):
    source = PneumoniaMNIST(make_pneumoniamnist_root())
    for split, n in (("train", 20), ("val", 4), ("test", 6)):
        data = source.load(split)
        check_image_set(data, n)
        np.testing.assert_array_equal(data.y, np.arange(n) % 2)


def test_pneumoniamnist_resizes_larger_images(make_pneumoniamnist_root):
    data = PneumoniaMNIST(make_pneumoniamnist_root(side=64)).load("val")
    check_image_set(data, 4)


def test_pneumoniamnist_missing_file_is_listed(tmp_path):
    with pytest.raises(InputError, match=r"pneumoniamnist \(val\): expected pneumoniamnist\.npz under"):
        PneumoniaMNIST(tmp_path).load("val")


def test_pneumoniamnist_missing_arrays_are_listed(make_pneumoniamnist_root):
    root = make_pneumoniamnist_root({"train": 4})
    with pytest.raises(InputError, match="missing \\['test_images', 'test_labels'\\]"):
        PneumoniaMNIST(root).load("test")


def test_pneumoniamnist_refuses_pickled_objects(tmp_path):
    objects = np.array([{"a": 1}], dtype=object)
    np.savez(tmp_path / "pneumoniamnist.npz", train_images=objects, train_labels=np.zeros((1, 1)))
    with pytest.raises(InputError, match="without pickled objects"):
        PneumoniaMNIST(tmp_path).load("train")


# Shared behaviour --------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_every_loader_refuses_an_unknown_split(tmp_path, name):
    with pytest.raises(InputError, match=f"expected {name} split in .*, got 'extra'"):
        open_source(name, tmp_path).load("extra")


def test_open_source_needs_a_root_unless_the_source_has_a_default():
    with pytest.raises(InputError, match="covidx: expected a root folder holding its files, got none"):
        open_source("covidx")
    assert open_source("fashion").root == DEBIAN_FASHION


def test_open_source_rejects_unknown_name():
    with pytest.raises(InputError, match=r"expected data source in .*, got 'usps'"):
        open_source("usps")


def test_resize_images_keeps_constants_and_averages_blocks():
    x = np.full((3, 32, 32), 77, np.uint8)
    np.testing.assert_array_equal(resize_images(x, 28), np.full((3, 28, 28), 77, np.uint8))
    checker = np.kron([[0, 255], [255, 0]], np.ones((2, 2))).astype(np.uint8)[None]
    np.testing.assert_array_equal(resize_images(checker, 2), [[[0, 255], [255, 0]]])
    np.testing.assert_array_equal(resize_images(checker, 1), [[[128]]])
    assert resize_images(np.zeros((2, 8, 8), np.uint8), 28).shape == (2, 28, 28)


def test_to_grey_uses_luma_weights():
    pixels = np.array([[[[255, 0, 0], [0, 255, 0], [0, 0, 255]]]], np.uint8)
    np.testing.assert_array_equal(to_grey(pixels), [[[76, 150, 29]]])
