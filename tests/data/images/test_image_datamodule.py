"""The image data module's pieces: shifted copies move the pixels and bring in zeros, drawn
anew each time a training image is asked for, and never for the splits that are scored."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("PIL")

from transformer.data.images.datamodule import ImageDataset, shifted  # noqa: E402
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
