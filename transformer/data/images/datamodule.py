"""Images as a data module: image folders in (``<folder>/<class>/<file>``), batches of pixels out.

A user's own folder is the main path: ``data=images data.train=<folder> [data.dev=<folder>]
[data.test=<folder>] data.height=H data.width=W data.channels=C``. A split without a folder is
carved from the training folder, per class and seeded by ``split_seed`` (a fixed test set whatever
the training seed): ``test_fraction`` of each class tests, then ``dev_fraction`` of the rest
validates. ``train_fraction`` below 1 trains on that share of each class of what is left, drawn
by ``seed`` (a learning curve). The UCI digits are a preset of it: ``data.preset=digits`` writes
scikit-learn's bundled copy as an image folder (``digits.write_digits``).

Batches: ``src (B, C, H, W)`` float pixels in [0, 1], ``labels (B,)``, ``index (B,)``. The token
budget counts images (``max_tokens`` images a batch). The input kind is declared here, once:
``settings()["input"] = "patches"`` travels into the checkpoint (``transformer.kinds``).

Shape legend: B images, C channels, H height, W width.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Annotated, Any, Mapping, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from transformer.data.core.datamodule import TokenBudgetDataModule
from transformer.data.images.folder import MODES, ImageError, ImageRow, check_image, load_image, read_folder
from transformer.ranges import Range

log = logging.getLogger(__name__)

PRESETS = ("digits",)
SPLITS = ("train", "dev", "test")


def _fraction(d: Mapping[str, Any], key: str, where: str, lo_open: bool = False) -> float:
    """``d[key]`` as a fraction: ``0 <= x < 1`` (a share held out), or ``0 < x <= 1`` with
    ``lo_open`` (a share kept); else a ``ValueError`` naming the key."""
    value = d.get(key)
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not (number and ((0 < value <= 1) if lo_open else (0 <= value < 1))):
        raise ValueError(f"{where}.{key}={value!r}: expected a fraction, {'0 < x <= 1' if lo_open else '0 <= x < 1'}")
    return float(value)


def check_images(d: dict, where: str, complete: bool = False) -> None:
    """An image config, before anything is written: a known preset, the patches input, a size
    and channel count the readers take, fractions that leave images to train on, and every folder
    given: class folders, none empty, every file an image of ``height x width`` (one
    :class:`ImageError` naming the file or folder); ``complete``: a run's, which needs a training
    folder or a preset."""
    preset = d.get("preset")
    if preset is not None and preset not in PRESETS:
        raise ValueError(f"{where}.preset={preset!r}: unknown (known: {', '.join(PRESETS)}; null for your own folder)")
    if d.get("input", "patches") != "patches":
        raise ValueError(f"{where}.input={d.get('input')!r}: an image data module reads patches")
    if d.get("channels", 1) not in MODES:
        raise ValueError(f"{where}.channels={d.get('channels')!r}: expected 1 (grey) or 3 (RGB)")
    for key in ("test_fraction", "dev_fraction"):
        if d.get(key) is not None:
            _fraction(d, key, where)
    if d.get("train_fraction") is not None:
        _fraction(d, "train_fraction", where, lo_open=True)
    if complete and d.get("train") is None and preset is None:
        raise ValueError(f"{where}.train: required (a folder of <class>/<image> files, or {where}.preset=digits)")
    height, width = d.get("height"), d.get("width")
    for split in SPLITS:
        if d.get(split) is not None:
            for row in read_folder(d[split]):
                check_image(row.path, height, width)


def split_rows(settings: Mapping[str, Any]) -> dict[str, list[ImageRow]]:
    """Every split's rows as a data module's ``settings()`` name them: each split's folder, or
    carved from the training folder per class (test by ``split_seed``, then dev), then the
    training share ``train_fraction`` of each class drawn by ``seed``. Rows in folder order."""
    paths = settings["paths"]
    rows = {split: read_folder(path) for split, path in paths.items()}
    rng = np.random.default_rng(settings.get("split_seed", 0))
    carved = [(s, settings.get(f"{s}_fraction", 0.0)) for s in ("test", "dev") if s not in rows]
    for split, fraction in carved:
        taken = _per_class(rows["train"], fraction, rng, at_least_one=True)
        rows[split] = [r for i, r in enumerate(rows["train"]) if i in taken]
        rows["train"] = [r for i, r in enumerate(rows["train"]) if i not in taken]
    share = settings.get("train_fraction", 1.0)
    if share < 1:
        kept = _per_class(rows["train"], share, np.random.default_rng(settings.get("seed", 0)), at_least_one=True)
        rows["train"] = [r for i, r in enumerate(rows["train"]) if i in kept]
    return rows


def _per_class(rows: Sequence[ImageRow], fraction: float, rng: np.random.Generator, at_least_one: bool) -> set[int]:
    """Indices of ``fraction`` of each class's rows (rounded; at least one a class), drawn by ``rng``."""
    by_class: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        by_class.setdefault(row.label, []).append(i)
    taken: set[int] = set()
    for label in sorted(by_class):
        members = by_class[label]
        n = int(round(fraction * len(members)))
        n = max(n, 1) if at_least_one and fraction > 0 and len(members) > 1 else n
        taken.update(np.asarray(members)[rng.permutation(len(members))[:n]].tolist())
    return taken


def label_order(labels) -> list[str]:
    """Class names sorted as numbers when they all are (``2`` before ``10``), else as text."""
    labels = set(labels)
    return sorted(labels, key=lambda t: (len(t), t)) if all(t.isdigit() for t in labels) else sorted(labels)


def shifted(image: torch.Tensor, dy: int, dx: int) -> torch.Tensor:
    """``image (C, H, W)`` moved ``dy`` rows down and ``dx`` columns right, zeros coming in."""
    c, h, w = image.shape
    out = torch.zeros_like(image)
    out[:, max(dy, 0):h + min(dy, 0), max(dx, 0):w + min(dx, 0)] = \
        image[:, max(-dy, 0):h - max(dy, 0), max(-dx, 0):w - max(dx, 0)]
    return out


def erased(image: torch.Tensor, side: int, y: int, x: int) -> torch.Tensor:
    """``image (C, H, W)`` with the ``side x side`` square centred on pixel ``(y, x)`` set to zero
    (the part of it inside the image: a centre near the edge hides less)."""
    out = image.clone()
    top, left = y - side // 2, x - side // 2
    out[:, max(top, 0):max(top + side, 0), max(left, 0):max(left + side, 0)] = 0
    return out


class ImageDataset(Dataset):
    """Labelled images as ``{"src": (C, H, W) float32, "target": label id, "index": int}``; each
    image is read when first asked for (``cache``: kept in memory after that, for small sets).
    ``shift > 0`` (training): each time an image is asked for it is moved by up to ``shift``
    pixels in each direction, drawn from ``seed`` (zeros coming in); ``erase > 0`` (training): then a
    square of that side, centred on a pixel drawn from ``seed``, is set to zero (Cutout, DeVries
    and Taylor 2017)."""

    def __init__(self, rows: Sequence[ImageRow], height: int, width: int, channels: int, label_ids: Mapping[str, int],
                 cache: bool = True, shift: int = 0, erase: int = 0, seed: int = 0):
        self.rows = list(rows)
        self.height, self.width, self.channels = height, width, channels
        self.label_ids = label_ids
        self.cache: dict[int, torch.Tensor] | None = {} if cache else None
        self.shift, self.erase = shift, erase
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return len(self.rows)

    def lengths(self) -> list[int]:
        """One unit per image: the token budget counts images."""
        return [1] * len(self.rows)

    def __getitem__(self, i: int) -> dict:
        image = self.cache.get(i) if self.cache is not None else None
        if image is None:
            image = load_image(self.rows[i].path, self.height, self.width, self.channels)
            if self.cache is not None:
                self.cache[i] = image
        if self.shift:
            dy, dx = self.rng.integers(-self.shift, self.shift + 1, size=2).tolist()
            image = shifted(image, dy, dx)
        if self.erase:
            y, x = self.rng.integers(0, (self.height, self.width)).tolist()
            image = erased(image, self.erase, y, x)
        return {"src": image, "target": self.label_ids[self.rows[i].label], "index": i}


class ImageCollator:
    """Stacks :class:`ImageDataset` items: ``src (B, C, H, W)``, ``labels (B,)``, ``index (B,)``."""

    def __call__(self, examples: Sequence[dict]) -> dict:
        return {"src": torch.stack([e["src"] for e in examples]),  # (B, C, H, W)
                "labels": torch.tensor([e["target"] for e in examples], dtype=torch.long),
                "index": torch.tensor([e["index"] for e in examples], dtype=torch.long)}


class ImageDataModule(TokenBudgetDataModule):
    """Labelled images from class folders (or a preset that writes them).

    Args:
        train, dev, test: image folders (``<folder>/<class>/<file>``); dev and test may instead be
            carved from train (``dev_fraction``, ``test_fraction``).
        name: a short name for run folders.
        preset: ``digits`` (the UCI handwritten digits scikit-learn ships, written as a folder
            into ``data_dir``), or None for your own folders.
        height, width, channels: the image size every file must have (the model's input; images
            are never resized) and 1 (grey) or 3 (RGB) channels.
        test_fraction, dev_fraction: without a test (dev) folder, this share of each class of the
            training folder tests (validates), drawn by ``split_seed``.
        split_seed: the seed of the carved splits (fixed, whatever ``seed`` trains with).
        train_fraction: train on this share of each class of the training images (drawn by
            ``seed``); 1.0 = all.
        shift: move each training image by up to this many pixels each way every time it is
            drawn (shifted copies: a ViT has no built-in translation invariance); 0 = off.
        erase: hide a square of this side, centred anywhere in the image, each time a training
            image is drawn (Cutout: the label must come from more than one part of the image);
            0 = off.
        max_tokens: images per batch.
        cache_images: keep each image in memory once read (small sets).
        input: the input kind (``transformer.kinds``): patches.
    """

    val_split = "dev"
    vocab_size_chosen = False
    presets = PRESETS
    check_config = staticmethod(check_images)  # its config's checks, before the run folder is written

    def __init__(
        self,
        train: str | None = None,
        dev: str | None = None,
        test: str | None = None,
        name: str = "images",
        preset: str | None = None,
        height: Annotated[int, Range(1, 2**16)] = 32,
        width: Annotated[int, Range(1, 2**16)] = 32,
        channels: Annotated[int, Range(1, 3)] = 3,
        test_fraction: Annotated[float, Range(0.0, 0.9)] = 0.2,
        dev_fraction: Annotated[float, Range(0.0, 0.9)] = 0.1,
        split_seed: int = 0,
        train_fraction: Annotated[float, Range(0.0, 1.0)] = 1.0,
        shift: Annotated[int, Range(0, 64)] = 0,
        erase: Annotated[int, Range(0, 2**16)] = 0,
        data_dir: str | os.PathLike = "data/cache",
        max_tokens: Annotated[int, Range(1, 2**31)] = 64,
        num_workers: Annotated[int, Range(0, 1024)] = 0,
        seed: int = 0,
        cache_images: bool = True,
        input: str = "patches",
        label_names: Sequence[str] | None = None,
    ):
        super().__init__(max_tokens, num_workers, seed)
        self.save_hyperparameters()
        check_images({"preset": preset, "input": input, "channels": channels, "train_fraction": train_fraction},
                     "data")
        self.paths = {s: Path(p).resolve() for s, p in (("train", train), ("dev", dev), ("test", test)) if p}
        self.name, self.preset = name, preset
        self.height, self.width, self.channels = height, width, channels
        self.fractions = {"test_fraction": test_fraction, "dev_fraction": dev_fraction,
                          "train_fraction": train_fraction}
        self.split_seed, self.shift, self.erase = split_seed, shift, erase
        self.data_dir, self.cache_images = Path(data_dir), cache_images
        self.max_len = 1  # every image is one unit of the budget: none is filtered
        self.test_splits = ["test"]
        self.tokenizer = None
        self.labels: list[str] = []
        self.label_names = list(label_names) if label_names else None

    def settings(self) -> dict:
        """What a checkpoint keeps to read a split and an image again: the folders (absolute),
        the input kind, the image size and how the splits were carved (:func:`split_rows`)."""
        return {"name": self.name, "input": "patches", "paths": {s: str(p) for s, p in self.paths.items()},
                "height": self.height, "width": self.width, "channels": self.channels, **self.fractions,
                "split_seed": self.split_seed, "seed": self.seed}

    def _build(self) -> None:
        if self.preset == "digits":
            from transformer.data.images.digits import write_digits

            self.paths["train"] = write_digits(self.data_dir).resolve()
        if "train" not in self.paths:
            raise ValueError("data.train is required: a folder of <class>/<image> files (or data.preset=digits)")
        rows = split_rows(self.settings())
        self.labels = label_order(r.label for r in rows["train"])
        if len(self.labels) < 2:
            raise ImageError(self.paths["train"], f"{len(self.labels)} class folder(s); a classifier needs at least 2")
        ids = {label: i for i, label in enumerate(self.labels)}
        for split in SPLITS:
            for row in rows[split]:
                if row.label not in ids:
                    raise ImageError(row.path.parent, f"class {row.label!r} is not among the training folder's "
                                                      f"classes ({', '.join(self.labels)})")
        for split in SPLITS:
            ds = ImageDataset(rows[split], self.height, self.width, self.channels, ids, cache=self.cache_images,
                              shift=self.shift if split == "train" else 0, erase=self.erase if split == "train" else 0,
                              seed=self.seed)
            self._add_split(split, ds, ds.lengths(), ds.lengths(), f"{self.name}-{split}")
        log.info("image data: %s", ", ".join(f"{s} {len(d)} images" for s, d in self._datasets.items()))

    def _lengths_of(self, ds) -> list[int]:
        return ds.lengths()

    def _collator(self) -> ImageCollator:
        return ImageCollator()

    def raw(self, split: str) -> list[ImageRow]:
        """A split's rows in folder order."""
        return self._eval_dataset(split).rows


def images_of(paths: Sequence[str | os.PathLike], data: Mapping[str, Any]) -> torch.Tensor:
    """Image files -> a batch ``(B, C, H, W)`` at a checkpoint's image size (``data``: its data
    settings); a bad file is one :class:`ImageError` naming it."""
    return torch.stack([load_image(p, data["height"], data["width"], data.get("channels", 1)) for p in paths])


__all__ = ["ImageCollator", "ImageDataModule", "ImageDataset", "PRESETS", "check_images", "erased", "images_of",
           "label_order", "shifted", "split_rows"]
