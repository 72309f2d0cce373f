"""Search on tiny randomly initialised real models from ``transformer.models``.

Properties rather than pins: beam size 1 equals greedy; greedy with the KV cache picks the argmax
of the uncached teacher-forced model; beam hypotheses' log-probs equal the teacher-forced sum
(so the cache followed the beams correctly); NAT decoding runs on the real NAT model.
"""

from __future__ import annotations

import pytest
import torch

models = pytest.importorskip("transformer.models")

from transformer.decoding import (  # noqa: E402
    beam_search,
    greedy_search,
    mask_predict,
    nat_length_beam,
    nat_one_pass,
)

PAD, BOS, EOS, MASK, V = 0, 1, 2, 11, 12
SPECIALS = {"bos_id": BOS, "eos_id": EOS, "pad_id": PAD}
TINY = dict(d_model=16, n_heads=2, n_encoder_layers=2, n_decoder_layers=2, d_ff=32, dropout=0.0, max_len=64)


def _encoder_decoder(seed: int, **kw) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = models.EncoderDecoder(models.TransformerConfig(vocab_size=V, pad_id=PAD, **TINY, **kw)).eval()
    with torch.no_grad():  # a larger EOS row (tied embedding): some outputs end before the cap
        model.decoder.output_proj.weight[EOS] *= 2.0
    return model


def _src(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, V, (4, 7), generator=g)
    src[1, 5:] = PAD
    src[2, 2:] = PAD
    return src


def _teacher_forced(model, src_row: torch.Tensor, tokens: list[int]) -> torch.Tensor:
    """Uncached log-probs ``(len(tokens) + 1, V)`` after BOS + tokens."""
    tgt_in = torch.tensor([[BOS] + tokens])
    with torch.no_grad():
        return torch.log_softmax(model(src_row.unsqueeze(0), tgt_in)[0].float(), dim=-1)


@pytest.mark.parametrize("seed", [0, 3, 5])
def test_beam_size_one_equals_greedy(seed):
    model, src = _encoder_decoder(seed), _src(seed)
    greedy = greedy_search(model, src, **SPECIALS, max_len_a=1.0, max_len_b=3, return_scores=True)
    beam = beam_search(model, src, **SPECIALS, beam_size=1, max_len_a=1.0, max_len_b=3)
    assert [h[0].tokens for h in beam] == [g[0] for g in greedy]
    assert [h[0].logprob for h in beam] == pytest.approx([g[1] for g in greedy], abs=1e-4)


@pytest.mark.parametrize("seed", [0, 3])
def test_greedy_on_logits_equals_greedy_on_log_probs(seed):
    model, src = _encoder_decoder(seed), _src(seed)
    fast = greedy_search(model, src, **SPECIALS, max_len_a=1.0, max_len_b=3)  # decode_step_logits
    scored = greedy_search(model, src, **SPECIALS, max_len_a=1.0, max_len_b=3, return_scores=True)
    assert fast == [tokens for tokens, _ in scored]


def test_greedy_matches_uncached_argmax():
    # a seed whose rows both end in EOS and reach the cap (with post-norm layers)
    model, src = _encoder_decoder(1, norm_first=False), _src(1)
    out = greedy_search(model, src, **SPECIALS, max_len_a=1.0, max_len_b=3)
    caps = ((src != PAD).sum(1) + 3).tolist()
    lengths_seen = set()
    for row, tokens, cap in zip(src, out, caps):
        log_probs = _teacher_forced(model, row, tokens)
        log_probs[:, [PAD, BOS]] = float("-inf")
        want = log_probs.argmax(-1).tolist()  # (len + 1,)
        assert tokens == want[: len(tokens)]
        if len(tokens) < cap:
            assert want[len(tokens)] == EOS
        lengths_seen.add(len(tokens) < cap)
    assert lengths_seen == {True, False}, "test needs rows both ending in EOS and cut at the cap"


@pytest.mark.parametrize("positional", ["sinusoidal", "relative"])
def test_beam_logprobs_equal_teacher_forced_sums(positional):
    kw = {}
    if positional == "relative":
        from transformer.modules.positional import RelativePositionBias

        kw["positional"] = RelativePositionBias
    model, src = _encoder_decoder(0, **kw), _src(0)
    out = beam_search(model, src, **SPECIALS, beam_size=4, n_best=4, max_len_a=1.0, max_len_b=3)
    caps = ((src != PAD).sum(1) + 3).tolist()
    for row, hyps, cap in zip(src, out, caps):
        assert len(hyps) == 4
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        for h in hyps:
            log_probs = _teacher_forced(model, row, h.tokens)
            total = log_probs[torch.arange(len(h.tokens)), h.tokens].sum().item()
            if len(h.tokens) < cap:  # finished with EOS, whose log-prob counts too
                total += log_probs[len(h.tokens), EOS].item()
            assert h.logprob == pytest.approx(total, abs=1e-4)


def _nat(**kw) -> torch.nn.Module:
    torch.manual_seed(0)
    return models.NonAutoregressiveModel(models.NATConfig(vocab_size=V, pad_id=PAD, **TINY, max_length=12, **kw)).eval()


@pytest.mark.parametrize("length_mode", ["absolute", "offset"])
def test_nat_decoding_on_the_real_model(length_mode):
    model = _nat(decoder_input="mask", mask_id=MASK, length_mode=length_mode, max_offset=4)
    src = _src(5)
    kw = dict(pad_id=PAD, eos_id=EOS, ban_ids=(BOS,))
    one, stats = nat_one_pass(model, src, **kw, return_stats=True)
    assert [len(t) for t in one] <= stats.lengths
    assert all(tok not in (PAD, BOS, MASK, EOS) for t in one for tok in t)
    assert mask_predict(model, src, iterations=1, **kw) == one
    assert nat_length_beam(model, src, length_beam=1, **kw) == one
    refined, mp_stats = mask_predict(model, src, iterations=4, length_beam=3, **kw, return_stats=True)
    assert len(refined) == 4 and all(1 <= it <= 4 for it in mp_stats.iterations)
    beam, lb_stats = nat_length_beam(model, src, length_beam=3, **kw, return_stats=True)
    assert all(b >= s - 1e-6 for b, s in zip(lb_stats.scores, stats.scores))  # best of 3 >= top-1


def test_nat_copy_mode_one_pass():
    model = _nat(decoder_input="copy")
    out = nat_one_pass(model, _src(6), pad_id=PAD)
    assert len(out) == 4 and all(isinstance(tok, int) for t in out for tok in t)


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_search_sizes_the_cache_once_for_its_longest_output(search, monkeypatch):
    # Outputs of up to 40 steps exceed the cache's initial 16-step buffers: search reserves
    # them up front, so each layer's K and V buffers are allocated once and never regrown.
    from transformer.modules.kv_cache import KVCache

    grows = []
    real_grow = KVCache._grow
    monkeypatch.setattr(KVCache, "_grow", lambda self, layer, like, needed: (grows.append(layer), real_grow(self, layer, like, needed))[1])
    model, src = _encoder_decoder(0), _src(0)
    kw = dict(SPECIALS, eos_id=PAD, max_len_a=0.0, max_len_b=40)  # EOS = PAD is never emitted: 40 steps
    out = greedy_search(model, src, **kw) if search == "greedy" else [h[0].tokens for h in beam_search(model, src, beam_size=2, **kw)]
    assert [len(o) for o in out] == [40] * 4
    assert sorted(grows) == [0, 1]  # one allocation per decoder layer
