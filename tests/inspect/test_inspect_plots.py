"""Plots open and have one panel per head; position arrays show what the encodings are."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from transformer.inspect.positions import position_arrays
from transformer.modules.positional import (
    LearnedPositionalEncoding,
    NoPositionalEncoding,
    RelativePositionBias,
    SinusoidalPositionalEncoding,
)

plots = pytest.importorskip("transformer.inspect.plots")
pytest.importorskip("matplotlib")
Image = pytest.importorskip("PIL.Image")


def test_plot_heads_draws_one_labelled_panel_per_head(tmp_path):
    w = torch.softmax(torch.randn(3, 5, 7), -1).numpy()
    rows, cols = [f"q{i}" for i in range(5)], [f"k{i}" for i in range(7)]
    assert plots.plot_heads(w, rows, cols, "test", tmp_path / "a.png") == 3
    with Image.open(tmp_path / "a.png") as img:
        img.load()
        assert img.text["Description"] == "3 panels" and img.size[0] > 300
    # long sentences: cut to max_tokens and still written
    long = torch.softmax(torch.randn(2, 200, 200), -1).numpy()
    labels = [str(i) for i in range(200)]
    assert plots.plot_heads(long, labels, labels, "long", tmp_path / "b.png", max_tokens=40) == 2
    assert plots.label_fontsize(200) < plots.label_fontsize(10) <= 10


def test_every_plot_closes_its_figure_written_or_not(tmp_path):
    plt = plots.pyplot()
    plt.close("all")
    w = torch.softmax(torch.randn(2, 4, 4), -1).numpy()
    labels = [f"t{i}" for i in range(4)]
    for i in range(2):  # a figure pyplot still holds is in get_fignums() after a single plot
        plots.plot_heads(w, labels, labels, "heads", tmp_path / f"h{i}.png")
        plots.plot_matrix(w[0], labels, labels, "matrix", tmp_path / f"m{i}.png")
    assert plt.get_fignums() == []
    # a figure that cannot be written (its folder is a file) is closed all the same
    (tmp_path / "taken").write_text("a file, not a folder")
    with pytest.raises(OSError):
        plots.plot_matrix(w[0], labels, labels, "matrix", tmp_path / "taken" / "m.png")
    assert plt.get_fignums() == []


def test_sinusoid_similarity_depends_only_on_distance_and_decays_nearby():
    a = position_arrays(SinusoidalPositionalEncoding(d_model=64, max_len=128), 50)
    assert a["table"].shape == (50, 64)
    sim = a["similarity"]
    assert np.allclose(np.diag(sim), 1.0, atol=1e-5)
    assert np.allclose(sim[:-1, :-1], sim[1:, 1:], atol=1e-4)  # Toeplitz: a function of i - j
    assert sim[10, 11] > sim[10, 14] > sim[10, 20]  # nearby positions resemble each other


def test_learned_and_relative_position_arrays():
    learned = LearnedPositionalEncoding(d_model=8, max_len=10)
    a = position_arrays(learned, 50)
    assert np.array_equal(a["table"], learned.embedding.weight.detach().numpy())  # capped at max_len
    rel = RelativePositionBias(n_heads=3, causal=False)
    r = position_arrays(rel, 6)
    bias = rel.attention_bias(6, 6)[0].detach().numpy()  # (H, 6, 6)
    assert np.array_equal(r["bias"], bias) and r["bias_by_distance"].shape == (3, 11)
    d = list(r["distances"])
    for q in range(6):
        for k in range(6):
            assert np.array_equal(r["bias_by_distance"][:, d.index(k - q)], bias[:, q, k])
    with pytest.raises(ValueError, match="no positional encoding"):
        position_arrays(NoPositionalEncoding(), 5)


def test_missing_matplotlib_says_how_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import now raises ImportError
    with pytest.raises(plots.PlottingUnavailable, match=r'pip install "transformer\[inspect\]"'):
        plots.pyplot()
