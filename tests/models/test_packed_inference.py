"""At inference (no autograd) the encoder computes only the real positions of a padded batch and
the decoder projects cross-attention keys/values only there: the same states at every real
position, the same search results and scores as the autograd path, which computes every
position; states at padding are zeros."""

import pytest
import torch
from tiny_models import POSITIONALS, TINY

from transformer.decoding.beam import beam_search
from transformer.decoding.greedy import greedy_search
from transformer.models.transformer import EncoderDecoder, StackConfig, TransformerConfig, TransformerEncoder

SRC = torch.tensor([[5, 6, 7, 8, 9, 4, 3], [5, 6, 0, 0, 0, 0, 0], [7, 3, 4, 0, 0, 0, 0]])  # (B, S), pad 0


def _rows_seen(module: torch.nn.Module, run) -> list[int]:
    """How many rows each call of ``module`` received, over ``run()``."""
    seen = []
    handle = module.register_forward_hook(lambda m, args, out: seen.append(args[0].reshape(-1, args[0].size(-1)).size(0)))
    try:
        run()
    finally:
        handle.remove()
    return seen


@pytest.mark.parametrize("name", ["sinusoidal", "learned", "relative"])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("window", [None, 2])
def test_encoder_at_inference_equals_the_autograd_path_on_real_positions(name, norm_first, window):
    enc = TransformerEncoder(StackConfig(vocab_size=20, pad_id=0, positional=POSITIONALS[name], window=window,
                                         norm_first=norm_first, **TINY), 2).eval()
    full = enc(SRC)  # autograd on: every position computed
    with torch.inference_mode():
        packed = enc(SRC)
        rows = _rows_seen(enc.layers[0].ffn.w_1, lambda: enc(SRC))
    real = SRC.ne(0)
    assert rows == [int(real.sum())]  # the FFN saw the 12 real positions, not 3 x 7
    torch.testing.assert_close(packed[real], full[real], atol=1e-6, rtol=0)
    assert (packed[~real] == 0).all()


def test_a_fully_padded_row_stays_zero_and_finite():
    enc = TransformerEncoder(StackConfig(vocab_size=20, pad_id=0, **TINY), 2).eval()
    src = torch.tensor([[5, 6, 7], [0, 0, 0]])
    with torch.inference_mode():
        out = enc(src)
    assert torch.isfinite(out).all() and (out[1] == 0).all()
    torch.testing.assert_close(out[0], enc(src)[0], atol=1e-6, rtol=0)


@pytest.mark.parametrize("norm_first", [False, True])
def test_search_at_inference_equals_the_autograd_path(norm_first, monkeypatch):
    torch.manual_seed(0)
    model = EncoderDecoder(TransformerConfig(vocab_size=24, pad_id=0, n_encoder_layers=2, n_decoder_layers=2,
                                             norm_first=norm_first, **TINY)).eval()
    ids = dict(bos_id=1, eos_id=2, pad_id=0)
    src = SRC.clone()
    src[src.eq(2)] = 3  # no EOS inside the sources
    greedy = greedy_search(model, src, **ids, max_len_a=0, max_len_b=9, return_scores=True)
    beam = beam_search(model, src, **ids, beam_size=3, max_len_a=0, max_len_b=9)
    cross_rows = _rows_seen(model.decoder.layers[0].cross_attn.w_k,
                            lambda: greedy_search(model, src, **ids, max_len_a=0, max_len_b=9))
    assert cross_rows == [int(src.ne(0).sum())]  # keys projected at the real source positions only
    import transformer.models.transformer as transformer_module

    monkeypatch.setattr(transformer_module, "packable", lambda: False)  # every position computed
    again = greedy_search(model, src, **ids, max_len_a=0, max_len_b=9, return_scores=True)
    assert [h for h, _ in again] == [h for h, _ in greedy] and any(h for h, _ in greedy)
    assert [s for _, s in again] == pytest.approx([s for _, s in greedy], abs=1e-6)
    assert beam_search(model, src, **ids, beam_size=3, max_len_a=0, max_len_b=9) == beam
