"""The image data module's pieces: shifted copies move the pixels and bring in zeros, a Cutout
square hides pixels, both drawn anew each time a training image is asked for, and never for the
splits that are scored."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("PIL")

from transformer.data.images.datamodule import ImageDataModule, ImageDataset, erased, shifted  # noqa: E402
from transformer.data.images.folder import ImageRow  # noqa: E402


def test_a_shift_moves_every_pixel_and_brings_in_zeros():
    image = torch.arange(1, 13, dtype=torch.float32).reshape(1, 3, 4)  # (C, H, W)
    down_left = shifted(image, 1, -1)
    assert torch.equal(down_left[0, 1:, :3], image[0, :2, 1:])
    assert not down_left[0, 0].any() and not down_left[0, :, 3].any()
    assert torch.equal(shifted(image, 0, 0), image)
    assert torch.equal(shifted(shifted(image, 2, 3), -2, -3)[0, :1, :1], image[0, :1, :1])


def test_training_images_are_shifted_anew_each_time_and_scored_ones_never(tmp_path):
    from PIL import Image

    path = tmp_path / "a" / "x.png"
    path.parent.mkdir()
    Image.fromarray(np.random.default_rng(0).integers(1, 255, (6, 6)).astype(np.uint8), mode="L").save(path)
    rows = [ImageRow(path, "a")]
    train = ImageDataset(rows, 6, 6, 1, {"a": 0}, shift=1, seed=0)
    plain = ImageDataset(rows, 6, 6, 1, {"a": 0})
    draws = [train[0]["src"] for _ in range(20)]
    original = plain[0]["src"]
    assert torch.equal(plain[0]["src"], original)
    assert len({tuple(d.flatten().tolist()) for d in draws}) > 3  # several of the 9 shifts
    again = ImageDataset(rows, 6, 6, 1, {"a": 0}, shift=1, seed=0)
    assert all(torch.equal(again[0]["src"], d) for d in draws)  # the same seed, the same draws


def test_an_erased_square_is_zero_and_every_other_pixel_kept():
    image = torch.arange(1, 2 * 6 * 6 + 1, dtype=torch.float32).reshape(2, 6, 6)  # (C, H, W)
    out = erased(image, 3, 2, 4)  # rows 1..3, columns 3..5
    hidden = torch.zeros(6, 6, dtype=torch.bool)
    hidden[1:4, 3:6] = True
    assert not out[:, hidden].any() and torch.equal(out[:, ~hidden], image[:, ~hidden])
    corner = erased(image, 4, 0, 0)  # rows and columns -2..1: only the 2x2 inside the image
    assert (corner == 0).sum() == 2 * 4 and not corner[:, :2, :2].any()
    assert torch.equal(image[0, 0, 0], torch.tensor(1.0))  # the input is not changed


def _dm(tmp_path, **kw) -> ImageDataModule:
    from PIL import Image

    rng = np.random.default_rng(0)
    for label in "ab":
        for i in range(10):
            path = tmp_path / "images" / label / f"{i}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(rng.integers(1, 255, (6, 6)).astype(np.uint8), mode="L").save(path)
    dm = ImageDataModule(train=str(tmp_path / "images"), height=6, width=6, channels=1, test_fraction=0.2,
                         dev_fraction=0.2, data_dir=str(tmp_path / "cache"), **kw)
    dm.setup("fit")
    return dm


def test_training_images_are_erased_anew_each_time_and_scored_ones_never(tmp_path):
    dm = _dm(tmp_path, erase=2)
    train = dm._datasets["train"]
    draws = [train[0]["src"] for _ in range(20)]
    assert all((d == 0).sum() in (1, 2, 4) for d in draws)  # every pixel is above 0 before
    assert len({tuple(d.flatten().tolist()) for d in draws}) > 3
    for split in ("dev", "test"):
        assert all((dm._datasets[split][i]["src"] > 0).all() for i in range(len(dm._datasets[split])))
