"""Image files and image folders: the layout torchvision's ``ImageFolder`` reads
(``<root>/<class>/<file>``, one folder per label), read with Pillow.

A bad input is one :class:`ImageError` naming the file (or folder) and what is wrong: not an image
Pillow reads, an image of another size than the model's, an empty class folder, a folder without
class folders.

Shape legend: C channels, H height, W width.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

#: Pillow's mode for each channel count the models read.
MODES = {1: "L", 3: "RGB"}


class ImageError(ValueError):
    """An image file or folder cannot be used: ``path: problem``, on one line."""

    def __init__(self, path: str | os.PathLike, problem: str):
        super().__init__(f"{path}: {' '.join(str(problem).split())}")
        self.path, self.problem = str(path), problem


@dataclass(frozen=True)
class ImageRow:
    """One labelled image: its file and its class (the folder it sits in)."""

    path: Path
    label: str


def _mode(channels: int) -> str:
    if channels not in MODES:
        raise ValueError(f"data.channels={channels}: expected 1 (grey) or 3 (RGB)")
    return MODES[channels]


def _reason(exc: BaseException) -> str:
    """An exception's reason without the path the message already starts with."""
    return getattr(exc, "strerror", None) or str(exc)


@contextlib.contextmanager
def _image_of_size(path: Path, height: int, width: int) -> Iterator[Any]:
    """The image at ``path``, opened by Pillow and checked to be ``height x width``; a file that
    is missing, not an image, of another size or truncated (found while the caller reads it) is
    an :class:`ImageError` naming it."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as img:
            if img.size != (width, height):
                raise ImageError(path, f"a {img.size[1]}x{img.size[0]} image (height x width); the model reads "
                                       f"{height}x{width} images (data.height, data.width)")
            yield img
    except UnidentifiedImageError:
        raise ImageError(path, "not an image file Pillow reads") from None
    except ImageError:
        raise
    except (OSError, SyntaxError, ValueError) as exc:  # missing, unreadable, truncated
        raise ImageError(path, f"cannot read the image ({_reason(exc)})") from None


def load_image(path: str | os.PathLike, height: int, width: int, channels: int = 1) -> torch.Tensor:
    """One image as ``(C, H, W)`` float pixels in [0, 1], converted to grey (``channels=1``) or RGB
    (``3``); an unreadable or non-image file, or one of another size than ``height x width``, is an
    :class:`ImageError` naming it (images are never resized behind the user's back)."""
    mode = _mode(channels)
    with _image_of_size(Path(path), height, width) as img:
        pixels = np.asarray(img.convert(mode), dtype=np.float32) / 255.0  # (H, W) or (H, W, C)
    x = torch.from_numpy(pixels)
    return x.unsqueeze(0) if x.dim() == 2 else x.permute(2, 0, 1).contiguous()  # -> (C, H, W)


def check_image(path: str | os.PathLike, height: int, width: int) -> None:
    """What :func:`load_image` would refuse, from the file's header and a full decode check
    (Pillow's ``verify``), without keeping the pixels."""
    with _image_of_size(Path(path), height, width) as img:
        img.verify()


def read_folder(root: str | os.PathLike) -> list[ImageRow]:
    """Every file of ``root``'s class folders (``<root>/<class>/<file>``), sorted by class then
    name; hidden files (``.name``) are skipped. A missing root, a root without class folders, or a
    class folder without files is an :class:`ImageError` naming it."""
    root = Path(root)
    if not root.is_dir():
        raise ImageError(root, "not a folder (an image folder holds one folder of images per class)")
    classes = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise ImageError(root, "no class folders (expected <folder>/<class>/<image file>)")
    rows = []
    for folder in classes:
        files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
        if not files:
            raise ImageError(folder, "an empty class folder (no image files)")
        rows += [ImageRow(f, folder.name) for f in files]
    return rows


__all__ = ["ImageError", "ImageRow", "MODES", "check_image", "load_image", "read_folder"]
