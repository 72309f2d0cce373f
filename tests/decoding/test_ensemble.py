"""Ensembles of encoder-decoders: averaged probabilities, cached equals uncached, search intact."""

import math

import pytest
import torch

from transformer.decoding import EnsembleModel, beam_search, greedy_search
from transformer.models import EncoderDecoder, TransformerConfig

TINY = dict(d_model=16, n_heads=2, d_ff=32, dropout=0.0, max_len=64)  # as tests/models/tiny_models.py

IDS = dict(bos_id=1, eos_id=2, pad_id=0)


def _model(seed: int, **kw) -> EncoderDecoder:
    torch.manual_seed(seed)
    args = dict(vocab_size=24, pad_id=0, n_encoder_layers=2, n_decoder_layers=2)
    return EncoderDecoder(TransformerConfig(**{**args, **TINY, **kw})).eval()


@torch.no_grad()
def _full_probs(model: EncoderDecoder, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
    return torch.softmax(model(src, tgt_in), dim=-1)  # (B, T, V)


def test_stepwise_ensemble_equals_mean_of_members_full_forward_probabilities():
    members = [_model(1), _model(2), _model(3)]
    ens = EnsembleModel(members).eval()
    src = torch.tensor([[5, 6, 7, 8, 9], [10, 11, 12, 0, 0]])
    tgt_in = torch.tensor([[1, 13, 14, 15], [1, 16, 17, 18]])
    expected = torch.stack([_full_probs(m, src, tgt_in) for m in members]).mean(0)  # (B, T, V)
    enc = ens.encode(src)
    cache = ens.init_cache(enc)
    steps = []
    for t in range(tgt_in.size(1)):
        lp, cache = ens.decode_step(tgt_in[:, t : t + 1], enc, cache)  # (B, V)
        steps.append(lp)
    got = torch.stack(steps, 1).exp()  # (B, T, V)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
    # a proper distribution, and not any single member's
    torch.testing.assert_close(got.sum(-1), torch.ones(2, 4), atol=1e-5, rtol=0)
    assert not torch.allclose(got, _full_probs(members[0], src, tgt_in), atol=1e-3)


def test_one_member_and_a_model_twice_search_exactly_like_the_model():
    m = _model(4)
    src = torch.tensor([[5, 6, 7, 8], [9, 10, 0, 0], [11, 12, 13, 0]])
    lengths = dict(max_len_a=0.0, max_len_b=7)
    ref_greedy = greedy_search(m, src, **IDS, **lengths, return_scores=True)
    ref_beam = beam_search(m, src, **IDS, **lengths, beam_size=3, n_best=3)
    for ens in (EnsembleModel([m]), EnsembleModel([m, m])):
        out = greedy_search(ens, src, **IDS, **lengths, return_scores=True)
        assert [t for t, _ in out] == [t for t, _ in ref_greedy]
        assert [s for _, s in out] == pytest.approx([s for _, s in ref_greedy], abs=1e-4)
        beams = beam_search(ens, src, **IDS, **lengths, beam_size=3, n_best=3)
        assert [[h.tokens for h in hyps] for hyps in beams] == [[h.tokens for h in hyps] for hyps in ref_beam]


def test_beam_search_with_an_ensemble_scores_its_hypotheses_by_the_averaged_probabilities():
    members = [_model(5), _model(6)]
    ens = EnsembleModel(members)
    src = torch.tensor([[5, 6, 7, 8, 9], [10, 11, 12, 0, 0]])
    hyps = beam_search(ens, src, **IDS, max_len_a=0.0, max_len_b=6, beam_size=4, n_best=2, length_penalty=0.0)
    for b, sent_hyps in enumerate(hyps):
        for h in sent_hyps:
            tgt = torch.tensor([[1, *h.tokens]])
            probs = torch.stack([_full_probs(m, src[b : b + 1], tgt) for m in members]).mean(0)[0]  # (T, V)
            nxt = [*h.tokens, 2] if len(h.tokens) < 6 else h.tokens  # EOS scored unless cut at the cap
            logprob = sum(math.log(float(probs[i, tok])) for i, tok in enumerate(nxt))
            assert h.logprob == pytest.approx(logprob, abs=1e-3)


def test_members_must_share_the_target_vocabulary():
    with pytest.raises(ValueError, match="vocabulary size"):
        EnsembleModel([_model(1), _model(2, vocab_size=30)])
    with pytest.raises(ValueError, match="at least one"):
        EnsembleModel([])
