"""Non-autoregressive model: no causal mask, uniform copy, length prediction."""

import pytest
import torch
from tiny_models import POSITIONALS, TINY

from transformer.models import NATConfig, NonAutoregressiveModel
from transformer.models.nat import LengthPredictor, uniform_copy, uniform_copy_indices

MASK = 3


def _model(**kw):
    args = dict(vocab_size=24, pad_id=0, n_encoder_layers=1, n_decoder_layers=2, mask_id=MASK)
    return NonAutoregressiveModel(NATConfig(**{**args, **TINY, **kw})).eval()


@pytest.mark.parametrize("name", ["sinusoidal", "relative"])
def test_a_later_input_changes_an_earlier_output(name):
    m = _model(positional=POSITIONALS[name])
    src = torch.randint(4, 24, (1, 5))
    tgt = torch.tensor([[MASK, MASK, MASK, 7]])
    changed = torch.tensor([[MASK, MASK, MASK, 8]])
    a, _ = m(src, tgt)
    b, _ = m(src, changed)
    assert a.shape == (1, 4, 24)
    assert not torch.allclose(a[:, 0], b[:, 0], atol=1e-4)


def test_decode_ignores_target_padding():
    m = _model()
    enc = m.encode(torch.randint(4, 24, (1, 5)))
    tgt = torch.tensor([[MASK, 9, MASK]])
    padded = torch.tensor([[MASK, 9, MASK, 0, 0]])
    torch.testing.assert_close(m.decode(enc, padded)[:, :3], m.decode(enc, tgt), atol=1e-5, rtol=0)


def test_decoder_layers_get_the_padding_masks():
    m = _model()
    seen = []
    for layer in m.decoder.layers:
        layer.register_forward_pre_hook(lambda mod, args: seen.append((args[2], args[3])))
    enc = m.encode(torch.tensor([[5, 6, 7, 0]]))
    m.decode(enc, torch.tensor([[MASK, 9, 0]]))
    assert all(s is not None and c is not None for s, c in seen)


def test_uniform_copy_mapping():
    # round(j (S-1) / (T-1)) of each row's real lengths.
    idx = uniform_copy_indices(torch.tensor([7, 4, 5, 3]), torch.tensor([4, 3, 1, 2]), 4)
    assert idx.tolist() == [
        [0, 2, 4, 6],  # S=7, T=4: j * 6/3
        [0, 2, 3, 3],  # S=4, T=3: j * 3/2 = 0, 1.5 (round half to even -> 2), 3; padding clamped
        [0, 4, 4, 4],  # T=1: position 0 copies the first source token
        [0, 2, 2, 2],  # S=3, T=2: first and last
    ]
    emb = torch.arange(7.0).view(1, 7, 1).expand(1, 7, 2)
    out = uniform_copy(emb, torch.ones(1, 7, dtype=torch.bool), torch.ones(1, 4, dtype=torch.bool))
    assert out[0, :, 0].tolist() == [0.0, 2.0, 4.0, 6.0]


def test_copy_mode_uses_source_embeddings_and_ignores_tokens():
    m = _model(decoder_input="copy", mask_id=None)
    assert m.mask_id is None
    src = torch.randint(4, 24, (2, 5))
    enc = m.encode(src)
    assert enc.src_embed.shape == (2, 5, 16)
    real = torch.ones(2, 4, dtype=torch.bool)
    a = m.decode(enc, torch.randint(4, 24, (2, 4)), real)
    b = m.decode(enc, torch.randint(4, 24, (2, 4)), real)
    torch.testing.assert_close(a, b)
    other = m.decode(m.encode(src.flip(1)), torch.zeros(2, 4, dtype=torch.long), real)
    assert not torch.allclose(a, other, atol=1e-4)
    # Beam-style expansion keeps the embeddings.
    assert enc.index_select(torch.tensor([1, 1, 0])).src_embed.shape == (3, 5, 16)


def test_mask_mode_needs_mask_id():
    with pytest.raises(ValueError):
        _model(mask_id=None)


@pytest.mark.parametrize("mode", ["absolute", "offset"])
def test_length_predictor_shapes_and_classes(mode):
    m = _model(length_mode=mode, max_length=40, max_offset=5)
    src = torch.tensor([[5, 6, 7, 8, 0, 0], [5, 6, 7, 8, 9, 10]])
    enc = m.encode(src)
    logits = m.predict_length(enc)
    assert logits.shape == (2, 40 if mode == "absolute" else 11)
    top = m.top_k_lengths(logits, 3, enc)
    assert top.shape == (2, 3) and (top >= 1).all()
    assert all(len(set(row)) == 3 for row in top.tolist())
    targets = m.length_targets(torch.tensor([6, 5]), enc)
    if mode == "offset":
        assert targets.tolist() == [5 + 2, 5 - 1]  # offsets +2 and -1 around max_offset=5
        lp = m.length_predictor
        assert lp.to_lengths(targets, enc.src_pad_mask.sum(1)).tolist() == [6, 5]
    else:
        assert targets.tolist() == [6, 5]


def test_length_predictor_pools_only_real_positions():
    lp = LengthPredictor(8, mode="absolute", max_length=10)
    memory = torch.randn(1, 3, 8)
    padded = torch.cat([memory, torch.randn(1, 2, 8) * 100], 1)
    real = torch.tensor([[True, True, True, False, False]])
    torch.testing.assert_close(lp(padded, real), lp(memory, torch.ones(1, 3, dtype=torch.bool)))


def test_top_k_lengths_excludes_lengths_below_one():
    lp = LengthPredictor(8, mode="absolute", max_length=4)
    logits = torch.tensor([[10.0, 1.0, 3.0, 2.0]])  # class 0 (length 0) is the most probable
    assert lp.top_k_lengths(logits, k=5).tolist() == [[2, 3, 1]]
