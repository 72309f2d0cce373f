"""CTCNonAutoregressiveModel: upsampled decoder inputs, their padding, and padding invariance."""

from __future__ import annotations

import math


import pytest
import torch

from model_configs import model_config

from transformer.tasks.build import build_model
from transformer.models.ctc import upsample, upsample_positions

PAD, EOS, MASK = 0, 2, 4


def tiny_model(**overrides):
    cfg = model_config("nat_ctc_tiny")
    cfg.update(overrides)
    return build_model(cfg, vocab_size=30, pad_id=PAD, blank_id=MASK).eval()


def test_copy_upsampling_repeats_each_source_embedding_ratio_times():
    emb = torch.arange(8.0).view(1, 4, 2)  # (B, S, D): rows 0..3
    mask = torch.tensor([[True, True, True, False]])
    x, real = upsample(emb, mask, 3, "copy")
    assert x.shape == (1, 12, 2)
    assert real.tolist() == [[True] * 9 + [False] * 3]
    assert x[0, :9, 0].tolist() == [0, 0, 0, 2, 2, 2, 4, 4, 4]


def test_interpolated_upsampling_spans_first_to_last_real_source_position():
    lower, frac = upsample_positions(torch.tensor([3]), 2, 8, "interpolate")
    pos = (lower + frac)[0, :6]  # 6 real positions spread over 0..2
    torch.testing.assert_close(pos, torch.tensor([0.0, 0.4, 0.8, 1.2, 1.6, 2.0]))
    emb = torch.tensor([[[0.0], [10.0], [20.0], [99.0]]])
    x, real = upsample(emb, torch.tensor([[True, True, True, False]]), 2, "interpolate")
    torch.testing.assert_close(x[0, :6, 0], torch.tensor([0.0, 4.0, 8.0, 12.0, 16.0, 20.0]))
    assert real[0].tolist() == [True] * 6 + [False] * 2


@pytest.mark.parametrize("mode", ["copy", "interpolate"])
@pytest.mark.parametrize("ratio", [2, 3, 1.5])
def test_extra_padding_leaves_outputs_at_real_positions_unchanged(mode, ratio):
    model = tiny_model(upsample_ratio=ratio, upsample_mode=mode)
    src = torch.tensor([[5, 6, 7, 8, EOS], [9, 10, EOS, PAD, PAD]])
    padded = torch.cat([src, torch.full((2, 3), PAD)], dim=1)
    logits, real = model(src)
    logits_p, real_p = model(padded)
    assert logits.shape[1] == math.ceil(ratio * 5) and logits_p.shape[1] == math.ceil(ratio * 8)
    assert real.sum(1).tolist() == real_p.sum(1).tolist() == [math.ceil(ratio * 5), math.ceil(ratio * 3)]
    for b in range(2):
        n = int(real[b].sum())
        torch.testing.assert_close(logits_p[b, :n], logits[b, :n], atol=1e-5, rtol=1e-5)
    # a sentence alone gives the same outputs as in a padded batch
    alone, _ = model(src[1:, :3])
    torch.testing.assert_close(alone[0], logits[1, : math.ceil(ratio * 3)], atol=1e-5, rtol=1e-5)


def test_a_fractional_ratio_reads_every_source_token_once_or_twice_in_order():
    emb = torch.arange(5.0).view(1, 5, 1)
    x, real = upsample(emb, torch.tensor([[True, True, True, True, False]]), 1.5, "copy")
    assert x.shape[1] == 8 and real[0].tolist() == [True] * 6 + [False] * 2  # ceil(1.5 * 4) = 6
    assert x[0, :6, 0].tolist() == [0, 0, 1, 2, 2, 3]
    lower, frac = upsample_positions(torch.tensor([4]), 1.5, 6, "interpolate")
    torch.testing.assert_close((lower + frac)[0], torch.tensor([0.0, 0.6, 1.2, 1.8, 2.4, 3.0]))


def test_bad_settings_are_refused():
    from transformer.models import CTCConfig, CTCNonAutoregressiveModel

    sizes = dict(vocab_size=30, pad_id=PAD, blank_id=MASK, d_model=8, n_heads=2)
    with pytest.raises(ValueError, match="upsample_ratio"):
        CTCNonAutoregressiveModel(CTCConfig(**sizes, upsample_ratio=0))
    with pytest.raises(ValueError, match="upsample_mode"):
        CTCNonAutoregressiveModel(CTCConfig(**sizes, upsample_mode="nearest"))
