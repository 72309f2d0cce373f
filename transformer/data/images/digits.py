"""The UCI handwritten digits preset: scikit-learn's bundled copy (1,797 grey 8x8 images of the
digits 0-9, ``sklearn.datasets.load_digits``, no download) written once as an image folder
(``<folder>/<digit>/<index>.png``), which is then read like any user's folder.

The pixels are counts 0-16 (ink in each 4x4 block of a 32x32 bitmap); they are written as
``round(v · 255 / 16)``, so that reading a PNG back as ``[0, 1]`` gives ``v / 16`` to within 1/510.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

#: The images, their size and the labels of the preset.
N_IMAGES, SIZE = 1797, 8
DIGITS = [str(d) for d in range(10)]


def write_digits(data_dir: str | os.PathLike) -> Path:
    """The digits as an image folder under ``data_dir/digits/images`` (written once: a folder
    that exists is complete, as it is renamed into place only when every file is written)."""
    from PIL import Image
    from sklearn.datasets import load_digits

    out = Path(data_dir) / "digits" / "images"
    if out.is_dir():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    digits = load_digits()
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=".images-"))
    try:
        for digit in DIGITS:
            (tmp / digit).mkdir()
        pixels = np.rint(digits.images * (255.0 / 16.0)).clip(0, 255).astype(np.uint8)  # (N, 8, 8)
        for i, (image, label) in enumerate(zip(pixels, digits.target)):
            Image.fromarray(image, mode="L").save(tmp / str(label) / f"{i:04d}.png")
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


__all__ = ["DIGITS", "N_IMAGES", "SIZE", "write_digits"]
