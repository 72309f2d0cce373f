"""Stochastic depth (``modules.drop_path``, ``model.drop_path``): a residual branch dropped for a
whole sample in training, the identity at evaluation, its rate rising linearly with depth."""

from __future__ import annotations

import pytest
import torch

from transformer.models.classifier import ClassifierConfig, SequenceClassifier
from transformer.models.transformer import EncoderLayer
from transformer.modules.attention import PackedRows
from transformer.modules.drop_path import DropPath, depth_rates


def test_each_sample_keeps_or_drops_its_whole_branch_scaled_to_keep_the_mean():
    torch.manual_seed(0)
    drop = DropPath(0.5).train()
    branch = torch.randn(2000, 5, 3) + 1  # (B, T, D)
    out = drop(branch)
    kept = out.flatten(1).ne(0).all(1)  # (B,)
    dropped = out.flatten(1).eq(0).all(1)
    assert bool((kept | dropped).all())  # never part of a sample
    assert 0.45 < kept.float().mean() < 0.55
    assert torch.allclose(out[kept], branch[kept] * 2)  # 1 / (1 - p)
    assert out.mean().item() == pytest.approx(branch.mean().item(), rel=0.1)


def test_it_is_the_identity_at_evaluation_and_at_rate_0():
    branch = torch.randn(4, 3, 2)
    assert torch.equal(DropPath(0.9).eval()(branch), branch)
    assert torch.equal(DropPath(0.0).train()(branch), branch)
    with pytest.raises(ValueError, match="drop_path"):
        DropPath(1.0)


def test_packed_rows_keep_their_sample_s_draw():
    """A padded batch computed on its real positions (``PackedRows``): each position is dropped
    with its sample, as in the padded layout."""
    real = torch.tensor([[True, True, True], [True, False, False], [True, True, False]])  # (B, T)
    rows = PackedRows(real)
    branch = torch.ones(3, 3, 2)  # (B, T, D)
    torch.manual_seed(3)
    padded = DropPath(0.5).train()(branch)
    torch.manual_seed(3)
    packed = DropPath(0.5).train()(rows.pack(branch), rows)  # (N, D)
    assert torch.equal(rows.unpack(packed), padded * real[..., None])


def test_the_rate_rises_linearly_from_0_at_the_first_layer():
    assert depth_rates(0.1, 3) == pytest.approx([0.0, 0.05, 0.1])
    assert depth_rates(0.2, 5) == pytest.approx([0.0, 0.05, 0.1, 0.15, 0.2])
    assert depth_rates(0.1, 1) == [0.1]


def _classifier(drop_path: float) -> SequenceClassifier:
    torch.manual_seed(0)
    return SequenceClassifier(ClassifierConfig(vocab_size=20, pad_id=0, d_model=16, n_heads=2, d_ff=32, n_layers=3,
                                               dropout=0.0, n_classes=3, drop_path=drop_path))


def test_the_classifier_s_layers_take_the_rates_of_their_depth():
    model = _classifier(0.2)
    assert [layer.drop_path.p for layer in model.encoder.layers] == pytest.approx([0.0, 0.1, 0.2])
    assert [layer.drop_path.p for layer in _classifier(0.0).encoder.layers] == [0.0, 0.0, 0.0]


def test_the_classifier_is_unchanged_at_evaluation_and_varies_in_training():
    src = torch.randint(1, 20, (8, 6))  # (B, T)
    plain, dropping = _classifier(0.0), _classifier(0.5)
    assert torch.equal(plain.eval()(src), dropping.eval()(src))  # the same weights, identity at eval
    dropping.train()
    torch.manual_seed(1)
    a = dropping(src)
    torch.manual_seed(2)
    b = dropping(src)
    assert not torch.allclose(a, b)  # no dropout: only the dropped branches differ
    plain.train()
    assert torch.equal(plain(src), plain(src))


@pytest.mark.parametrize("norm_first", [True, False])
def test_a_dropped_sample_passes_the_layer_through_its_residuals(norm_first):
    """At rate ~1 almost every branch is dropped: pre-norm, the layer is the identity for those
    samples; post-norm, what is left is the LayerNorms of the input."""
    layer = EncoderLayer(8, 2, 16, dropout=0.0, norm_first=norm_first, drop_path=0.999).train()
    x = torch.randn(4, 5, 8)  # (B, S, D)
    torch.manual_seed(0)
    out, _ = layer(x)
    expected = x if norm_first else layer.norm_2(layer.norm_1(x))
    assert torch.allclose(out, expected, atol=1e-6)
