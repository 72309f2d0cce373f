"""Pictures of attention and positions with matplotlib (non-interactive Agg backend, no display).

Every function writes one PNG and returns the number of matrix panels it drew; the PNG's
``Description`` text chunk says the same (``"4 panels"``), so a reader can check a file
without the figure object.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np

from transformer.files import atomic_open, write_text

INSTALL_HINT = 'matplotlib is not installed: pip install "transformer[inspect]" (or pip install matplotlib)'


class PlottingUnavailable(ValueError):
    """matplotlib is missing (a setup problem the CLI reports in one line)."""


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend, or ``PlottingUnavailable`` naming the fix."""
    try:
        import matplotlib
    except ImportError:
        raise PlottingUnavailable(INSTALL_HINT) from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def label_fontsize(n_labels: int) -> float:
    """Tick-label size in points: 10 for short sentences, down to 4 for long ones."""
    return float(max(4.0, min(10.0, 240.0 / max(n_labels, 1))))


def _save(fig, path: Path, panels: int, title: str) -> int:
    """Write ``fig`` as a PNG, then close it: pyplot keeps every figure it made until it is
    closed, so a command drawing hundreds of panels would otherwise hold them all."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(path, "wb") as f:
            fig.savefig(f, format="png", dpi=100, metadata={"Title": title, "Description": f"{panels} panels"})
    finally:
        pyplot().close(fig)
    return panels


def _matrix_panel(ax, m: np.ndarray, rows: Sequence[str] | None, cols: Sequence[str] | None, title: str,
                  vmin: float | None = 0.0, vmax: float | None = 1.0, cmap: str = "viridis"):
    image = ax.imshow(m, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
    ax.set_title(title, fontsize=10)
    if cols is not None:
        ax.set_xticks(range(len(cols)))
        ax.set_xticklabels(cols, rotation=90, fontsize=label_fontsize(len(cols)))
    if rows is not None:
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels(rows, fontsize=label_fontsize(len(rows)))
    return image


def _grid(plt, panels: int, n_rows: int, n_cols: int, max_columns: int = 4):
    """A figure with one square-ish panel per head, sized to the labels it carries."""
    cols = min(panels, max_columns)
    rows = math.ceil(panels / cols)
    cell = 0.22  # inches per matrix cell, clamped to a readable range
    width = min(max(4.0, 2.0 + cell * n_cols), 12.0)
    height = min(max(4.0, 2.0 + cell * n_rows), 12.0)
    # constrained layout keeps each panel's token labels clear of its neighbours
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False, layout="constrained")
    for ax in axes.flat[panels:]:
        ax.axis("off")
    return fig, list(axes.flat[:panels])


def plot_heads(weights: np.ndarray, rows: Sequence[str], cols: Sequence[str], title: str, path: str | Path,
               max_tokens: int = 80, vmin: float | None = 0.0, vmax: float | None = 1.0) -> int:
    """``weights (H, Q, K)`` as H panels (one per head), queries down, keys across, each axis
    labelled with its tokens. Longer axes are cut to the first ``max_tokens`` (said in the
    title)."""
    plt = pyplot()
    h, q, k = weights.shape
    qs, ks = min(q, max_tokens), min(k, max_tokens)
    cut = f" (first {max_tokens} tokens)" if (q > max_tokens or k > max_tokens) else ""
    fig, axes = _grid(plt, h, qs, ks)
    image = None
    for head, ax in enumerate(axes):
        image = _matrix_panel(ax, weights[head, :qs, :ks], list(rows)[:qs], list(cols)[:ks], f"head {head}",
                              vmin, vmax)
    fig.suptitle(title + cut, fontsize=12)
    fig.colorbar(image, ax=axes, shrink=0.8)
    return _save(fig, Path(path), h, title)


def plot_encoder_layers(arrays: dict[str, np.ndarray], tokens: Sequence[str], folder: Path, max_tokens: int = 80,
                        title: str = "encoder self-attention") -> list[str]:
    """``folder/encoder_layer{i}.png`` for each ``encoder.layer{i} (H, T, T)`` of ``arrays``, a
    panel per head (:func:`plot_heads`), both axes labelled with ``tokens``; their file names."""
    pictures = []
    layer = 0
    while f"encoder.layer{layer}" in arrays:
        plot_heads(arrays[f"encoder.layer{layer}"], tokens, tokens, f"{title}, layer {layer}",
                   folder / f"encoder_layer{layer}.png", max_tokens)
        pictures.append(f"encoder_layer{layer}.png")
        layer += 1
    return pictures


def plot_matrix(matrix: np.ndarray, rows: Sequence[str] | None, cols: Sequence[str] | None, title: str,
                path: str | Path, xlabel: str = "", ylabel: str = "", vmin: float | None = 0.0,
                vmax: float | None = 1.0, cmap: str = "viridis", max_tokens: int = 80) -> int:
    """One labelled matrix (an alignment, a position table or similarity) as one panel."""
    plt = pyplot()
    r, c = matrix.shape
    rs, cs = (min(r, max_tokens), min(c, max_tokens)) if rows is not None else (r, c)
    fig, (ax,) = _grid(plt, 1, min(rs, 60), min(cs, 60))
    image = _matrix_panel(ax, matrix[:rs, :cs], None if rows is None else list(rows)[:rs],
                          None if cols is None else list(cols)[:cs], title, vmin, vmax, cmap)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    fig.colorbar(image, ax=ax, shrink=0.8)
    return _save(fig, Path(path), 1, title)


def plot_image_attention(image: np.ndarray, maps: np.ndarray, titles: Sequence[str], title: str,
                         path: str | Path) -> int:
    """Attention over an image's patches drawn on top of the image: ``image (H, W)`` grey or
    ``(H, W, 3)`` RGB in [0, 1], ``maps (L, R, C)`` one grid of patch weights per panel (R x C
    patches covering the image), each panel the image with its map laid over it, half transparent."""
    plt = pyplot()
    n = len(maps)
    h, w = image.shape[:2]
    fig, axes = plt.subplots(1, n, figsize=(2.6 * n + 0.6, 3.0), squeeze=False, layout="constrained")
    overlay = None
    for ax, m, name in zip(axes[0], maps, titles):
        ax.imshow(image, cmap="gray" if image.ndim == 2 else None, vmin=0.0, vmax=1.0, extent=(0, w, h, 0))
        overlay = ax.imshow(m, cmap="inferno", alpha=0.55, vmin=0.0, vmax=float(maps.max()) or 1.0,
                            extent=(0, w, h, 0), interpolation="nearest")  # one cell per patch
        ax.set_title(name, fontsize=10)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(title, fontsize=11)
    fig.colorbar(overlay, ax=list(axes[0]), shrink=0.8)
    return _save(fig, Path(path), n, title)


def plot_relative_bias(bias: np.ndarray, distances: np.ndarray, title: str, path: str | Path) -> int:
    """``bias (H, R)`` per head against relative distance ``distances (R,)`` (key - query):
    one panel per head."""
    plt = pyplot()
    h = bias.shape[0]
    fig, axes = _grid(plt, h, 12, 16)
    for head, ax in enumerate(axes):
        ax.plot(distances, bias[head], marker=".")
        ax.axvline(0, color="grey", linewidth=0.5)
        ax.set_title(f"head {head}", fontsize=10)
        ax.set_xlabel("key position - query position")
    fig.suptitle(title, fontsize=12)
    return _save(fig, Path(path), h, title)


class Report:
    """What each ``inspect_*`` writes for several items (sentences, recordings, nodes): per item
    a folder of pictures beside ``attention.npz`` (the raw arrays), listed under a heading in
    ``index.html``. Draw an item's pictures into :meth:`folder`, then :meth:`add` it."""

    def __init__(self, out_dir: str | Path):
        self.out_dir = Path(out_dir)
        self.written: list[Path] = []
        self.sections: dict[str, list[str]] = {}

    def folder(self, name: str) -> Path:
        return self.out_dir / name

    def add(self, name: str, heading: str, arrays: dict[str, np.ndarray], pictures: Sequence[str]) -> None:
        """Item ``name``'s arrays saved beside its ``pictures`` (drawn into :meth:`folder`)."""
        folder = self.folder(name)
        self.written += [save_npz(folder / "attention.npz", arrays), *(folder / p for p in pictures)]
        self.sections[heading] = [f"{name}/{p}" for p in pictures]

    def close(self) -> list[Path]:
        """Write ``index.html``; returns every path written."""
        self.written.append(write_index(self.out_dir, "attention", self.sections))
        return self.written


def save_npz(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    """``arrays`` as one ``.npz`` at ``path`` (its folder made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **arrays)
    return path


def write_index(out_dir: str | Path, title: str, sections: dict[str, list[str]]) -> Path:
    """``index.html`` showing the PNGs (paths relative to ``out_dir``) under section headings."""
    import html

    parts = [f"<!doctype html><meta charset='utf-8'><title>{html.escape(title)}</title>",
             f"<h1>{html.escape(title)}</h1>"]
    for heading, images in sections.items():
        parts.append(f"<h2>{html.escape(heading)}</h2>")
        parts += [f"<p>{html.escape(p)}<br><img src='{html.escape(p)}' style='max-width:100%'></p>" for p in images]
    path = Path(out_dir) / "index.html"
    write_text(path, "\n".join(parts) + "\n")
    return path
