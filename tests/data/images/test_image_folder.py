"""Image folders: the ``<class>/<file>`` layout read with Pillow, each bad file or folder one
``ImageError`` naming it; the digits preset written as such a folder; the carved splits fixed by
``split_seed`` whatever the training seed, per class and disjoint."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("PIL")

from transformer.data.images.datamodule import check_images, split_rows  # noqa: E402
from transformer.data.images.folder import ImageError, check_image, load_image, read_folder  # noqa: E402


def grey(path: Path, pixels: np.ndarray) -> Path:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels.astype(np.uint8), mode="L").save(path)
    return path


def folder(root: Path, per_class: dict[str, int], size=(4, 6)) -> Path:
    for label, n in per_class.items():
        for i in range(n):
            grey(root / label / f"{i:02d}.png", np.full(size, 10 * i))
    return root


def test_an_image_reads_as_channels_height_width_in_0_1(tmp_path):
    pixels = np.arange(24).reshape(4, 6) * 10
    x = load_image(grey(tmp_path / "a.png", pixels), 4, 6, channels=1)
    assert x.shape == (1, 4, 6) and x.dtype == torch.float32
    torch.testing.assert_close(x[0], torch.tensor(pixels / 255.0, dtype=torch.float32))
    rgb = load_image(tmp_path / "a.png", 4, 6, channels=3)
    assert rgb.shape == (3, 4, 6) and torch.equal(rgb[0], rgb[2])


@pytest.mark.parametrize("damage", ["not_an_image", "other_size", "truncated", "missing"])
def test_a_bad_image_is_one_error_naming_the_file(tmp_path, damage):
    path = tmp_path / "x.png"
    if damage == "not_an_image":
        path.write_text("hello")
    elif damage == "other_size":
        grey(path, np.zeros((5, 6)))
    elif damage == "truncated":
        grey(path, np.random.default_rng(0).integers(0, 255, (64, 64)))
        path.write_bytes(path.read_bytes()[:100])
    for read in (lambda: load_image(path, 4, 6), lambda: check_image(path, 4, 6)):
        with pytest.raises(ImageError) as err:
            read()
        message = str(err.value)
        assert message.startswith(str(path)) and "\n" not in message
        if damage == "other_size":
            assert "5x6 image" in message and "4x6" in message


def test_a_folder_is_its_class_folders_files_and_an_empty_class_is_refused(tmp_path):
    root = folder(tmp_path / "f", {"cat": 2, "dog": 3})
    (root / "dog" / ".hidden").write_text("skipped")
    rows = read_folder(root)
    assert [(r.path.name, r.label) for r in rows] == [("00.png", "cat"), ("01.png", "cat"), ("00.png", "dog"),
                                                      ("01.png", "dog"), ("02.png", "dog")]
    (root / "emu").mkdir()
    with pytest.raises(ImageError, match="emu: an empty class folder"):
        read_folder(root)
    with pytest.raises(ImageError, match="no class folders"):
        read_folder(root / "cat")
    with pytest.raises(ImageError, match="not a folder"):
        read_folder(tmp_path / "nowhere")


def test_the_config_check_names_the_bad_file_before_anything_is_written(tmp_path):
    root = folder(tmp_path / "f", {"a": 2, "b": 2})
    d = {"train": str(root), "height": 4, "width": 6, "channels": 1}
    check_images(d, "data", complete=True)
    grey(root / "b" / "wide.png", np.zeros((4, 7)))
    with pytest.raises(ImageError, match="wide.png: a 4x7 image"):
        check_images(d, "data", complete=True)
    with pytest.raises(ValueError, match="data.train: required"):
        check_images({}, "data", complete=True)
    with pytest.raises(ValueError, match="data.train_fraction=0"):
        check_images({"preset": "digits", "train_fraction": 0}, "data")
    with pytest.raises(ValueError, match="data.preset='mnist'"):
        check_images({"preset": "mnist"}, "data")


def test_carved_splits_are_per_class_disjoint_and_the_test_set_ignores_the_training_seed(tmp_path):
    root = folder(tmp_path / "f", {"a": 20, "b": 10})
    settings = {"paths": {"train": str(root)}, "test_fraction": 0.2, "dev_fraction": 0.1, "split_seed": 0}
    one = split_rows({**settings, "seed": 1, "train_fraction": 0.5})
    two = split_rows({**settings, "seed": 2, "train_fraction": 1.0})
    assert one["test"] == two["test"] and one["dev"] == two["dev"]
    assert [sum(r.label == c for r in two["test"]) for c in "ab"] == [4, 2]  # 20 % of each class
    assert [sum(r.label == c for r in two["dev"]) for c in "ab"] == [2, 1]  # then 10 % of the rest
    paths = [{r.path for r in two[s]} for s in ("train", "dev", "test")]
    assert sum(map(len, paths)) == 30 and len(set.union(*paths)) == 30
    assert {r.path for r in one["train"]} < paths[0]
    assert [sum(r.label == c for r in one["train"]) for c in "ab"] == [7, 4]  # half of 14 and 7 (rounded)
    other = split_rows({**settings, "split_seed": 1})
    assert other["test"] != two["test"]


def test_the_digits_preset_is_an_image_folder_of_the_uci_digits(tmp_path):
    sklearn = pytest.importorskip("sklearn.datasets")
    from transformer.data.images.digits import write_digits

    root = write_digits(tmp_path)
    rows = read_folder(root)
    digits = sklearn.load_digits()
    assert len(rows) == 1797 and sorted({r.label for r in rows}) == [str(d) for d in range(10)]
    first = next(r for r in rows if r.path.name == "0000.png")
    assert first.label == str(digits.target[0])
    torch.testing.assert_close(load_image(first.path, 8, 8)[0], torch.tensor(digits.images[0] / 16, dtype=torch.float32),
                               atol=1 / 500, rtol=0)
    assert write_digits(tmp_path) == root  # written once
