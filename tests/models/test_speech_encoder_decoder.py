"""The encoder-decoder over speech frames: the x8 front end's padding reaches the decoder's
cross-attention at the subsampled lengths, and ``memory_positions`` gives cross-attention the
positions of the encoder output, in teacher forcing and in cached decoding alike."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from transformer.models import EncoderDecoder, TransformerConfig
from transformer.modules.frontends import ConvSubsampling

N_MELS, D_MODEL = 16, 32


def _model(subsampling: int = 8, **kw) -> EncoderDecoder:
    torch.manual_seed(0)
    cfg = TransformerConfig(vocab_size=12, pad_id=0, d_model=D_MODEL, n_heads=4, d_ff=64, dropout=0.0,
                            n_encoder_layers=2, n_decoder_layers=2, share_embeddings=False, tie_output=False,
                            frontend=partial(ConvSubsampling, n_mels=N_MELS, channels=8, subsampling=subsampling),
                            **kw)
    return EncoderDecoder(cfg).eval()


def _batch(lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded frames ``(B, T, M)`` of ``lengths``, zeros after each utterance's frames."""
    torch.manual_seed(1)
    src = torch.zeros(len(lengths), max(lengths), N_MELS)
    for b, n in enumerate(lengths):
        src[b, :n] = torch.randn(n, N_MELS)
    return src, torch.tensor(lengths)


@pytest.mark.parametrize("subsampling", [4, 8])
def test_cross_attention_never_reads_padded_encoder_positions(subsampling):
    m = _model(subsampling)
    src, lengths = _batch([161, 97, 40])
    enc = m.encode(src, lengths)
    n_convs = {4: 2, 8: 3}[subsampling]
    real = ConvSubsampling.output_lengths(lengths, n_convs)  # x8: 19, 11, 3 of 19 positions
    assert enc.src_pad_mask.sum(1).tolist() == real.tolist()
    tgt_in = torch.tensor([[1, 5, 6, 7], [1, 8, 9, 0], [1, 4, 0, 0]])
    _, weights = m.decoder(tgt_in, enc.memory, enc.src_pad_mask, need_weights=True)
    for _, cross in weights:  # (B, H, T, S) per layer
        for b, n in enumerate(real.tolist()):
            assert cross[b, :, :, n:].abs().sum() == 0  # nothing on the padded positions
            torch.testing.assert_close(cross[b, :, :, :n].sum(-1), torch.ones(cross.shape[1:3]))


def test_an_utterance_decodes_the_same_alone_and_in_a_padded_batch_at_x8():
    m = _model(8)
    src, lengths = _batch([161, 97, 40])
    tgt_in = torch.tensor([[1, 5, 6], [1, 8, 9], [1, 4, 3]])
    together = m(src, tgt_in, src_lengths=lengths)  # (B, T, V)
    for b, n in enumerate(lengths.tolist()):
        alone = m(src[b:b + 1, :n], tgt_in[b:b + 1], src_lengths=lengths[b:b + 1])
        torch.testing.assert_close(together[b:b + 1], alone, atol=1e-5, rtol=1e-5)


def _permuted_memory(m: EncoderDecoder, src: torch.Tensor, lengths: torch.Tensor, tgt_in: torch.Tensor):
    """Teacher-forced logits from the encoder output as it is and with its positions reversed
    (one unpadded utterance, so the padding mask is all True either way)."""
    enc = m.encode(src, lengths)
    flipped = enc.memory.flip(1)  # (1, S, D), positions S - 1 .. 0
    return (m.decoder(tgt_in, enc.memory, enc.src_pad_mask),
            m.decoder(tgt_in, flipped, enc.src_pad_mask))


def test_without_memory_positions_cross_attention_cannot_tell_the_order_of_the_encoder_output():
    src, lengths = _batch([161])
    tgt_in = torch.tensor([[1, 5, 6, 7]])
    as_is, flipped = _permuted_memory(_model(), src, lengths, tgt_in)
    torch.testing.assert_close(as_is, flipped, atol=1e-5, rtol=1e-5)  # a set of vectors, no order
    as_is, flipped = _permuted_memory(_model(memory_positions=True), src, lengths, tgt_in)
    assert not torch.allclose(as_is, flipped, atol=1e-3)  # each step now sees where a vector sits


@pytest.mark.parametrize("memory_positions", [False, True])
def test_cached_decoding_equals_teacher_forcing_with_memory_positions(memory_positions):
    m = _model(memory_positions=memory_positions)
    src, lengths = _batch([161, 97])
    tgt_in = torch.tensor([[1, 5, 6, 7], [1, 8, 9, 3]])
    full = torch.log_softmax(m(src, tgt_in, src_lengths=lengths), dim=-1)  # (B, T, V)
    enc = m.encode(src, lengths)
    cache = m.init_cache(enc)  # cross-attention keys and values projected once, positions included
    for t in range(tgt_in.size(1)):
        step, cache = m.decode_step(tgt_in[:, t:t + 1], enc, cache)  # (B, V)
        torch.testing.assert_close(step, full[:, t], atol=1e-5, rtol=1e-5)


def test_memory_positions_adds_no_weights():
    """A fixed sinusoid table: the same parameters and state-dict keys as without it."""
    assert _model().state_dict().keys() == _model(memory_positions=True).state_dict().keys()
