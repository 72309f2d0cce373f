"""Attention capture and alignments: the captured weights are the model's own, rows are
distributions over real keys, masked cells are zero, teacher-forced rows equal cached decoding,
and alignment pairs are the argmax of (scripted) cross-attention."""

from __future__ import annotations

import torch
from torch import nn

from transformer.inspect.attention import (
    alignment_pairs,
    capture_encoder_attention,
    format_alignment,
    sentence_alignments,
    translation_attention,
    with_alignments,
)
from transformer.models import EncoderDecoder, Tagger, TaggerConfig, TransformerConfig
from transformer.modules.attention import MultiHeadAttention
from transformer.modules.positional import RelativePositionBias

PAD, BOS, EOS = 0, 1, 2


def tiny_model(**kw) -> EncoderDecoder:
    torch.manual_seed(0)
    return EncoderDecoder(TransformerConfig(vocab_size=20, pad_id=PAD, d_model=16, n_heads=2, n_encoder_layers=2,
                                            n_decoder_layers=2, d_ff=32, dropout=0.0, **kw)).eval()


SRC = torch.tensor([[5, 6, 7, 8, EOS], [9, 10, EOS, PAD, PAD]])  # (B, S): second sentence padded
HYPS = [[11, 12, 13], [14]]


def test_rows_are_distributions_over_real_keys_and_masked_cells_are_zero():
    att = translation_attention(tiny_model(), SRC, HYPS, BOS, PAD)
    real_src = SRC.ne(PAD)  # (B, S)
    for w in att.encoder:  # (B, H, S, S)
        assert torch.allclose(w.sum(-1)[real_src[:, None].expand(-1, 2, -1)], torch.tensor(1.0), atol=1e-5)
        assert w.masked_select(~real_src[:, None, None, :]).abs().max() == 0  # padded keys
    t = att.tgt_in.size(1)
    future = torch.ones(t, t).triu(1).bool()
    real_tgt = att.tgt_in.ne(PAD)  # (B, T)
    for sw, cw in zip(att.decoder, att.cross):  # (B, H, T, T), (B, H, T, S)
        assert sw[..., future].abs().max() == 0  # no query sees a later token
        assert sw.masked_select(~real_tgt[:, None, None, :]).abs().max() == 0
        rows = real_tgt[:, None].expand(-1, 2, -1)  # (B, H, T) real queries
        assert torch.allclose(sw.sum(-1)[rows], torch.tensor(1.0), atol=1e-5)
        assert torch.allclose(cw.sum(-1)[rows], torch.tensor(1.0), atol=1e-5)
        assert cw.masked_select(~real_src[:, None, None, :]).abs().max() == 0


def test_captured_weights_are_need_weights_of_the_model():
    model = tiny_model()
    att = translation_attention(model, SRC[:1], HYPS[:1], BOS, PAD)
    _, direct = model.encoder(SRC[:1], need_weights=True)
    for a, b in zip(att.encoder, direct):
        assert torch.equal(a, b)
    memory = model.encoder(SRC[:1])
    _, dec = model.decoder(torch.tensor([[BOS, *HYPS[0]]]), memory, SRC[:1].ne(PAD), need_weights=True)
    for (sw, cw), a, b in zip(dec, att.decoder, att.cross):
        assert torch.allclose(sw, a, atol=1e-6) and torch.allclose(cw, b, atol=1e-6)


def test_teacher_forced_rows_equal_cached_decoding_steps():
    """Row t is what incremental decoding computed at step t (prefix BOS y_<t), for absolute and
    relative positions alike."""
    for kw in ({}, {"positional": RelativePositionBias}):
        model = tiny_model(**kw)
        att = translation_attention(model, SRC[:1], HYPS[:1], BOS, PAD)
        enc = model.encode(SRC[:1])
        cache = model.init_cache(enc)
        steps = [BOS, *HYPS[0]]
        with torch.no_grad():
            for t, token in enumerate(steps):
                _, weights = model.decoder._states(torch.tensor([[token]]), None, enc.src_pad_mask, None, cache, True)
                for layer, (sw, cw) in enumerate(weights):
                    assert torch.allclose(sw[0, :, 0], att.decoder[layer][0, :, t, : t + 1], atol=1e-5)
                    assert torch.allclose(cw[0, :, 0], att.cross[layer][0, :, t], atol=1e-5)


class ScriptedCrossAttention(MultiHeadAttention):
    """Returns fixed weights (B, H, T, S) and a zero context: the alignment reads only them."""

    def __init__(self, weights: torch.Tensor):
        super().__init__(16, 2)
        self.weights = weights

    def attend(self, q, k, v, mask=None, attn_bias=None, need_weights=False):
        b, _, t, _ = q.shape
        return q.new_zeros(b, t, 16), (self.weights[:b, :, :t] if need_weights else None)


def test_alignment_pairs_are_the_argmax_of_head_averaged_cross_attention():
    model = tiny_model()
    # (B=1, H=2, T=4, S=5): source = 4 pieces + EOS; target = 3 pieces + EOS row.
    w = torch.zeros(1, 2, 4, 5)
    w[0, 0, 0, 3], w[0, 1, 0, 1] = 0.9, 0.6       # heads disagree: mean picks 3 (0.45 vs 0.30)
    w[0, 0, 1, 1], w[0, 1, 1, 1] = 0.2, 0.2       # ... row 1 -> 1
    w[0, 0, 1, 4], w[0, 1, 1, 4] = 0.8, 0.8       # the source EOS (column 4) never competes
    w[0, 0, 2, 0], w[0, 1, 2, 2] = 0.5, 0.6       # row 2 -> 2
    w[0, :, 3, 2] = 1.0                           # the EOS step gets no pair
    model.decoder.layers[-1].cross_attn = ScriptedCrossAttention(w)
    line = sentence_alignments(model, SRC[:1, :5], [HYPS[0]], BOS, EOS, PAD)
    assert line == ["3-0 1-1 2-2"]
    first = tiny_model()
    first.decoder.layers[0].cross_attn = ScriptedCrossAttention(w.flip(-1))
    assert sentence_alignments(first, SRC[:1, :5], [HYPS[0]], BOS, EOS, PAD, layer=0) == ["1-0 0-1 2-2"]  # mirrored source: the 0.8s now sit on piece 0


def test_alignment_helpers():
    cross = torch.tensor([[0.1, 0.7, 0.2], [0.6, 0.1, 0.3]])
    assert alignment_pairs(cross, n_src=3, n_tgt=2) == [(1, 0), (0, 1)]
    assert alignment_pairs(cross, n_src=0, n_tgt=2) == []
    assert format_alignment([(1, 0), (0, 1)]) == "1-0 0-1"
    assert with_alignments(["a", "b"], [["0-0"], [""]], 1) == ["a ||| 0-0", "b ||| "]
    assert with_alignments(["0 ||| a ||| -1", "0 ||| b ||| -2"], [["0-0", "1-0"]], 2)[1] == "0 ||| b ||| -2 ||| 1-0"


def test_encoder_capture_records_tagger_attention_without_changing_outputs():
    torch.manual_seed(0)
    tagger = Tagger(TaggerConfig(vocab_size=30, n_tags=4, pad_id=PAD, d_model=16, n_heads=2, n_layers=2, d_ff=32,
                                 dropout=0.0, window=1)).eval()
    src = torch.tensor([[5, 6, 7, 8]])
    word_ids = torch.tensor([[0, 0, 1, 2]])
    plain = tagger(src, word_ids)
    with capture_encoder_attention(tagger.encoder) as calls:
        captured = tagger(src, word_ids)
    assert torch.allclose(plain, captured, atol=1e-5) and len(calls) == 1 and len(calls[0]) == 2
    w = calls[0][0]  # (B, H, T, T)
    outside = (torch.arange(4)[:, None] - torch.arange(4)[None]).abs() > 1
    assert w[..., outside].abs().max() == 0  # the local window shows as a band
    assert "forward_embeddings" not in vars(tagger.encoder)  # the method is restored
    assert isinstance(tagger.encoder.forward_embeddings.__self__, nn.Module)
