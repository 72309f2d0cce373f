"""Tagger: per-word pooling of subword pieces."""

import pytest
import torch
from tiny_models import TINY

from transformer.models import Tagger
from transformer.models.tagger import pool_words

WORD_IDS = torch.tensor([[0, 0, 1, -1, -1], [-1, 0, 1, 1, 2]])  # -1: pad / specials


def test_pool_first_and_mean_on_crafted_word_ids():
    h = torch.arange(10.0).view(2, 5, 1)  # piece t of row b has value 5b + t
    first = pool_words(h, WORD_IDS, "first")
    mean = pool_words(h, WORD_IDS, "mean")
    assert first.shape == mean.shape == (2, 3, 1)
    assert first[..., 0].tolist() == [[0.0, 2.0, 0.0], [6.0, 7.0, 9.0]]  # row 0 has no word 2
    assert mean[..., 0].tolist() == [[0.5, 2.0, 0.0], [6.0, 7.5, 9.0]]


@pytest.mark.parametrize("pooling", ["first", "mean"])
def test_tagger_output_shape(pooling):
    m = Tagger(vocab_size=20, n_tags=7, pad_id=0, n_layers=1, pooling=pooling, **TINY).eval()
    src = torch.tensor([[2, 5, 6, 3, 0], [2, 5, 6, 7, 8]])
    logits = m(src, WORD_IDS)
    assert logits.shape == (2, 3, 7)


def test_pooling_choice_changes_multi_piece_words_only():
    torch.manual_seed(0)
    first = Tagger(20, 7, 0, n_layers=1, pooling="first", **TINY).eval()
    mean = Tagger(20, 7, 0, n_layers=1, pooling="mean", **TINY).eval()
    mean.load_state_dict(first.state_dict())
    src = torch.tensor([[2, 5, 6, 3, 0], [2, 5, 6, 7, 8]])
    a, b = first(src, WORD_IDS), mean(src, WORD_IDS)
    torch.testing.assert_close(a[1, 0], b[1, 0])  # single-piece word
    assert not torch.allclose(a[1, 1], b[1, 1], atol=1e-4)  # two-piece word
