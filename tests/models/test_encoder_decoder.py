"""Encoder-decoder: causality, padding, cached decoding (also after beam reorder), tying."""

import pytest
import torch
from tiny_models import POSITIONALS, TINY

from transformer.models import EncoderDecoder, EncoderOut, TransformerConfig
from transformer.models.transformer import count_parameters
from transformer.tasks.build import build_model


def _model(positional=None, **kw):
    args = dict(vocab_size=24, pad_id=0, n_encoder_layers=2, n_decoder_layers=2, positional=positional)
    return EncoderDecoder(TransformerConfig(**{**args, **TINY, **kw})).eval()


def test_forward_shape_and_attributes():
    m = _model()
    logits = m(torch.randint(1, 24, (3, 5)), torch.randint(1, 24, (3, 4)))
    assert logits.shape == (3, 4, 24)
    assert m.pad_id == 0 and m.vocab_size == 24


@pytest.mark.parametrize("name", ["sinusoidal", "relative"])
def test_changing_future_target_tokens_leaves_earlier_outputs_unchanged(name):
    m = _model(POSITIONALS[name])
    src = torch.randint(1, 24, (2, 6))
    tgt = torch.randint(1, 24, (2, 7))
    t = 3
    changed = tgt.clone()
    changed[:, t + 1 :] = (tgt[:, t + 1 :] % 23) + 1  # guarantee a different token
    a, b = m(src, tgt), m(src, changed)
    torch.testing.assert_close(a[:, : t + 1], b[:, : t + 1], atol=1e-6, rtol=0)
    assert not torch.allclose(a[:, t + 1 :], b[:, t + 1 :], atol=1e-4)


def test_extra_source_and_target_padding_leaves_outputs_unchanged():
    m = _model(POSITIONALS["relative"], norm_first=True)
    src = torch.tensor([[5, 6, 7, 8]])
    tgt = torch.tensor([[1, 9, 10]])
    zeros = torch.zeros(1, 3, dtype=torch.long)
    ref = m(src, tgt)
    torch.testing.assert_close(m(torch.cat([src, zeros], 1), tgt), ref, atol=1e-5, rtol=0)
    torch.testing.assert_close(m(src, torch.cat([tgt, zeros], 1))[:, :3], ref, atol=1e-5, rtol=0)


def test_all_pad_rows_are_finite():
    m = _model()
    src = torch.tensor([[5, 6, 7], [0, 0, 0]])
    tgt = torch.tensor([[1, 5], [0, 0]])
    assert torch.isfinite(m(src, tgt)).all()


def _step_through(m, tgt, enc, cache, start=0):
    outs = []
    for t in range(start, tgt.size(1)):
        lp, cache = m.decode_step(tgt[:, t : t + 1], enc, cache)
        outs.append(lp)
    return torch.stack(outs, 1), cache


@pytest.mark.parametrize("name", list(POSITIONALS))
@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_decoding_equals_full_recomputation(name, norm_first):
    m = _model(POSITIONALS[name], norm_first=norm_first)
    src = torch.tensor([[5, 6, 7, 8, 9], [4, 3, 2, 0, 0]])
    tgt = torch.randint(1, 24, (2, 6))
    full = torch.log_softmax(m(src, tgt), -1)  # (B, T, V)
    enc = m.encode(src)
    steps, cache = _step_through(m, tgt, enc, m.init_cache(enc))
    assert cache.length == 6
    torch.testing.assert_close(steps, full, atol=1e-5, rtol=0)
    # Several new tokens in one call land at the right positions too.
    cache = m.init_cache(enc)
    _, cache = m.decode_step(tgt[:, :4], enc, cache)
    lp, cache = m.decode_step(tgt[:, 4:], enc, cache)
    torch.testing.assert_close(lp, full[:, -1], atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", list(POSITIONALS))
def test_cached_decoding_survives_beam_expand_and_reorder(name):
    m = _model(POSITIONALS[name])
    src = torch.tensor([[5, 6, 7, 8, 9], [4, 3, 2, 0, 0]])
    beams = 3
    rows = torch.arange(2).repeat_interleave(beams)  # (N,) = (6,)
    enc = m.encode(src).index_select(rows)
    assert isinstance(enc, EncoderOut) and enc.memory.shape[0] == 6
    prefix = torch.randint(1, 24, (6, 3))
    _, cache = _step_through(m, prefix, enc, m.init_cache(enc))
    # Beam search keeps, e.g., beam 2 twice and drops beam 1 of each sentence.
    order = torch.tensor([2, 2, 0, 4, 3, 3])
    cache = cache.reorder(order)
    prefix = prefix[order]
    cont = torch.randint(1, 24, (6, 2))
    steps, cache = _step_through(m, cont, enc, cache)
    full = torch.log_softmax(m(src[rows], torch.cat([prefix, cont], 1)), -1)
    torch.testing.assert_close(steps, full[:, 3:], atol=1e-5, rtol=0)


def test_shared_and_tied_embeddings_share_storage():
    m = _model()
    emb = m.encoder.embedding.weight
    assert m.decoder.embedding.weight.data_ptr() == emb.data_ptr()
    assert m.decoder.output_proj.weight.data_ptr() == emb.data_ptr()
    untied = _model(share_embeddings=False, tie_output=False)
    assert untied.decoder.embedding.weight.data_ptr() != untied.encoder.embedding.weight.data_ptr()
    assert untied.decoder.output_proj.weight.data_ptr() != untied.decoder.embedding.weight.data_ptr()
    assert count_parameters(untied) == count_parameters(m) + 2 * 24 * 16


def test_separate_target_vocabulary():
    m = _model(tgt_vocab_size=30, share_embeddings=False)
    assert m.vocab_size == 30
    assert m(torch.randint(1, 24, (1, 4)), torch.randint(1, 30, (1, 3))).shape == (1, 3, 30)
    with pytest.raises(ValueError):
        _model(tgt_vocab_size=30, share_embeddings=True)


def test_pre_and_post_norm_both_build_and_differ():
    torch.manual_seed(1)
    post = _model(norm_first=False)
    torch.manual_seed(1)
    pre = _model(norm_first=True)
    src, tgt = torch.randint(1, 24, (2, 5)), torch.randint(1, 24, (2, 4))
    assert not torch.allclose(post(src, tgt), pre(src, tgt), atol=1e-3)
    assert isinstance(pre.encoder.final_norm, torch.nn.LayerNorm)
    assert isinstance(post.encoder.final_norm, torch.nn.Identity)


def test_builds_from_a_flat_config():
    cfg = {
        "_target_": "transformer.models.EncoderDecoder",
        "vocab_size": 24, "pad_id": 0, "d_model": 16, "n_heads": 2, "n_encoder_layers": 1,
        "n_decoder_layers": 1, "d_ff": 32, "dropout": 0.0, "norm_first": True,
        "positional": {"_target_": "transformer.modules.positional.RelativePositionBias", "_partial_": True},
    }
    m = build_model(cfg)
    assert type(m) is EncoderDecoder and type(m.cfg) is TransformerConfig and m.cfg.norm_first
    assert type(m.encoder.positional).__name__ == "RelativePositionBias"
    assert m.encoder.positional.causal is False and m.decoder.positional.causal is True
    assert _model(None).encoder.positional.__class__.__name__ == "SinusoidalPositionalEncoding"


def test_state_dict_keys_are_the_checkpoint_format():
    """Checkpoints and the CTranslate2 export read the weights by these names, in this order."""
    m = EncoderDecoder(TransformerConfig(vocab_size=20, pad_id=0, d_model=8, n_heads=2, n_encoder_layers=1,
                                         n_decoder_layers=1, d_ff=16, positional=POSITIONALS["learned"],
                                         norm_first=True, max_len=8))
    attn = [f"{name}.w_{w}.{p}" for name in ("{a}",) for w in "qkvo" for p in ("weight", "bias")]
    ffn = [f"ffn.w_{i}.{p}" for i in (1, 2) for p in ("weight", "bias")]

    def norms(n):
        return [f"norm_{i}.{p}" for i in range(1, n + 1) for p in ("weight", "bias")]

    def stack(side, attentions, n_norms):
        layer = [k.format(a=a) for a in attentions for k in attn] + ffn + norms(n_norms)
        return ([f"{side}.embedding.weight", f"{side}.positional.embedding.weight"]
                + [f"{side}.layers.0.{k}" for k in layer] + [f"{side}.final_norm.weight", f"{side}.final_norm.bias"])

    expected = stack("encoder", ["self_attn"], 2) + stack("decoder", ["self_attn", "cross_attn"], 3)
    assert list(m.state_dict()) == expected + ["decoder.output_proj.weight"]
