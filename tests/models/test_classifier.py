"""SequenceClassifier and its poolings: padding never changes a sentence's result, an empty
sentence gives finite scores, attention pooling's weights cover real tokens only, and the
pooling is chosen by config ``_target_``."""

from __future__ import annotations

import pytest
import torch

from transformer.models.classifier import ClassifierConfig, SequenceClassifier
from transformer.models.pooling import AttentionPooling, ClsPooling, FirstPooling, MeanPooling
from transformer.tasks.build import build_model

PAD = 0
POOLINGS = [ClsPooling, FirstPooling, MeanPooling, AttentionPooling]


def tiny(pooling, n_classes: int = 3) -> SequenceClassifier:
    torch.manual_seed(0)
    model = SequenceClassifier(ClassifierConfig(vocab_size=50, n_classes=n_classes, pad_id=PAD, d_model=16, n_heads=2,
                                                n_layers=2, d_ff=32, dropout=0.0, pooling=pooling))
    return model.eval()


def padded(sentences: list[list[int]], width: int) -> torch.Tensor:
    out = torch.full((len(sentences), width), PAD, dtype=torch.long)
    for i, s in enumerate(sentences):
        out[i, : len(s)] = torch.tensor(s)
    return out


@pytest.mark.parametrize("pooling", POOLINGS)
@pytest.mark.parametrize("seed", range(5))
def test_padding_never_changes_the_result(pooling, seed):
    model = tiny(pooling)
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 9, (4,), generator=g).tolist()
    sentences = [torch.randint(1, 50, (n,), generator=g).tolist() for n in lengths]
    with torch.no_grad():
        alone = torch.cat([model(padded([s], len(s))) for s in sentences])  # (4, C), no padding at all
        batch = model(padded(sentences, max(lengths)))  # padded to the longest
        wide = model(padded(sentences, max(lengths) + 7))  # and then some
    torch.testing.assert_close(batch, alone, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(wide, alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("pooling", POOLINGS)
def test_an_empty_sentence_gives_finite_scores(pooling):
    model = tiny(pooling)
    with torch.no_grad():
        logits = model(padded([[], [5, 6]], 3))
    assert torch.isfinite(logits).all()


def test_attention_pooling_weights_cover_real_tokens_only():
    model = tiny(AttentionPooling)
    with torch.no_grad():
        pooled = model.pool(padded([[3, 4, 5], [7]], 4))
    w = pooled.weights  # (B, H, T)
    assert w.shape == (2, 2, 4) and pooled.offset == 0
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 2))
    assert (w[0, :, 3] == 0).all() and (w[1, :, 1:] == 0).all()
    assert model.pool(padded([[3]], 1)).weights is not None and tiny(MeanPooling).pool(padded([[3]], 1)).weights is None


def test_cls_pooling_reads_the_position_it_adds():
    model = tiny(ClsPooling)
    pooled = model.pool(padded([[3, 4]], 2))
    assert pooled.offset == 1 and pooled.weights is None
    # The [CLS] vector is learnt: it gets a gradient from the loss.
    model.train()
    model(padded([[3, 4]], 2)).sum().backward()
    assert model.pooling.cls.grad is not None and model.pooling.cls.grad.abs().sum() > 0


def test_first_pooling_reads_position_0_whatever_the_padding():
    """``FirstPooling`` is the encoder's state at position 0 (a family's ``[CLS]``/``<s>``): no
    vector of its own, the same for a row alone and padded, and not any other position's."""
    model = tiny(FirstPooling)
    assert not list(model.pooling.parameters())
    rows = [[2, 9, 4, 11, 3], [2, 7, 3], [2, 3]]
    src = padded(rows, 8)  # (B, T), right-padded
    with torch.no_grad():
        pooled = model.pool(src)
        states = model.encoder(src, src.ne(PAD))  # (B, T, D)
        alone = [model.pool(padded([r], len(r))).vector[0] for r in rows]
    assert pooled.offset == 0 and pooled.weights is None
    assert torch.equal(pooled.vector, states[:, 0])
    for i in range(len(rows)):
        torch.testing.assert_close(pooled.vector[i], alone[i], atol=1e-5, rtol=1e-5)
        assert not torch.allclose(pooled.vector[i], states[i, 1], atol=1e-3)
        assert not torch.allclose(pooled.vector[i], states[i, :len(rows[i])].mean(0), atol=1e-3)


@pytest.mark.parametrize("dense, act", [("tanh", torch.tanh), ("relu", torch.relu)])
def test_first_pooling_with_a_dense_layer_is_the_families_pooler(dense, act):
    """``FirstPooling(dense=...)``: position 0's state through a ``D -> D`` layer and tanh (BERT's
    pooler, RoBERTa's classification head) or ReLU (DistilBERT's pre-classifier); a built config
    names it, and another activation is refused."""
    import functools

    model = tiny(functools.partial(FirstPooling, dense=dense))
    src = padded([[2, 9, 4, 3], [2, 3]], 6)  # (B, T)
    with torch.no_grad():
        states = model.encoder(src, src.ne(PAD))  # (B, T, D)
        expected = act(states[:, 0] @ model.pooling.dense.weight.T + model.pooling.dense.bias)  # (B, D)
        assert torch.allclose(model.pool(src).vector, expected, atol=1e-6)
    built = build_model({"_target_": "SequenceClassifier", "d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32,
                         "pooling": {"_target_": "FirstPooling", "_partial_": True, "dense": dense}},
                        vocab_size=50, pad_id=PAD, n_classes=2)
    assert isinstance(built.pooling.activation, type(model.pooling.activation))
    with pytest.raises(ValueError, match=r"pooling\.dense='gelu': expected null or one of tanh, relu"):
        FirstPooling(16, dense="gelu")


@pytest.mark.parametrize("pooling", POOLINGS)
def test_pooling_is_chosen_by_config_target(pooling):
    cfg = {"_target_": "transformer.models.classifier.SequenceClassifier", "d_model": 16, "n_heads": 2,
           "n_layers": 1, "d_ff": 32, "pooling": {"_target_": f"transformer.models.pooling.{pooling.__name__}",
                                                  "_partial_": True}}
    model = build_model(cfg, vocab_size=30, pad_id=PAD, n_classes=2)
    assert type(model.pooling) is pooling
    assert model(padded([[1, 2, 3]], 3)).shape == (1, 2)


def test_one_label_is_refused():
    with pytest.raises(ValueError, match="at least 2"):
        SequenceClassifier(ClassifierConfig(vocab_size=10, n_classes=1, pad_id=PAD, d_model=8, n_heads=2, n_layers=1,
                                            d_ff=8))
