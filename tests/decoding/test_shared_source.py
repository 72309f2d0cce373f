"""The beams of a sentence share one copy of its cross-attention keys and values.

Beam search makes its cache with ``init_cache(enc, beams=K)``: the cross entries keep one row
per sentence, the decoder attends with the K beams' queries as queries of that row, and a
reorder moves each sentence's group of rows together. Checked against the layout where every
beam holds its own copy of the encoder output (``_OwnCopies``): the same step scores and
attention weights, and the same hypotheses, with the growing and the static cache, when
sentences leave the batch, and with a source that is all padding.
"""

from __future__ import annotations

import pytest
import torch

from test_static_cache import PAD, SPECIALS, V, _model, _sources, _Static

from transformer.decoding import beam_search
from transformer.modules.kv_cache import KVCache, StaticKVCache
from transformer.modules.positional import RelativePositionBias


class _OwnCopies:
    """The model with every beam holding its own copy of the encoder output and cross K/V."""

    def __init__(self, model, static: bool = False):
        self.model, self.static, self.vocab_size = model, static, model.vocab_size
        self.beams = 1

    def encode(self, src):
        return self.model.encode(src)

    def _rows(self, enc):
        return torch.arange(enc.memory.size(0)).repeat_interleave(self.beams)

    def init_cache(self, enc, beams=1):
        self.beams = beams
        return self.model.init_cache(enc.index_select(self._rows(enc)), static=self.static)

    def decode_step(self, tokens, enc, cache):
        rows = self._rows(enc)
        if tokens.size(0) != rows.numel():  # beam search's first step, once per sentence:
            tokens = tokens.repeat_interleave(self.beams, dim=0)  # every copy decodes it
        return self.model.decode_step(tokens, enc.index_select(rows), cache)


@pytest.mark.parametrize("positional", [None, RelativePositionBias])
def test_a_step_over_shared_source_rows_equals_one_over_copies(positional):
    model, k = _model(3, positional=positional), 3
    src = _sources(4, seed=4)
    enc = model.encode(src)
    rows = torch.arange(4).repeat_interleave(k)
    shared = model.init_cache(enc, beams=k)
    copies = model.init_cache(enc.index_select(rows))
    assert shared.cross(0)[0].size(0) == 4 and copies.cross(0)[0].size(0) == 12
    tokens = torch.randint(3, V, (12, 1))
    with torch.no_grad():
        for step in range(3):
            a, shared = model.decode_step(tokens, enc, shared)
            b, copies = model.decode_step(tokens, enc.index_select(rows), copies)
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
            tokens = torch.randint(3, V, (12, 1))
        # The cross-attention weights each beam gets, row by row.
        x = torch.randn(12, 1, 16)
        layer = model.decoder.layers[0]
        w_shared = layer._cross_attention(x, None, None, shared, 0, True)[1]
        w_copies = layer._cross_attention(x, None, None, copies, 0, True)[1]
    assert w_shared.shape == w_copies.shape == (12, 2, 1, src.size(1))
    torch.testing.assert_close(w_shared, w_copies, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("static", [False, True])
def test_beam_search_over_shared_source_rows_equals_copies(static):
    # 7 sentences of varied lengths: some finish early and leave the batch, so the reorder
    # that drops them must move the shared rows by sentence.
    model = _model(5, positional=RelativePositionBias)
    src = _sources(7, seed=6)
    args = dict(**SPECIALS, beam_size=4, n_best=4, max_len_a=1.5, max_len_b=4)
    ours = beam_search(_Static(model) if static else model, src, **args)
    ref = beam_search(_OwnCopies(model, static), src, **args)
    assert [[h.tokens for h in n] for n in ours] == [[h.tokens for h in n] for n in ref]
    assert [h.score for n in ours for h in n] == pytest.approx([h.score for n in ref for h in n], abs=1e-5)


def test_a_source_of_padding_only_decodes_as_with_copies():
    # A row with no real source token takes the bool-mask path (no additive bias).
    model = _model(7)
    src = _sources(3, seed=8)
    src[1] = PAD
    args = dict(**SPECIALS, beam_size=3, n_best=2, max_len_a=1.0, max_len_b=5)
    ours, ref = beam_search(model, src, **args), beam_search(_OwnCopies(model), src, **args)
    assert [[h.tokens for h in n] for n in ours] == [[h.tokens for h in n] for n in ref]


@pytest.mark.parametrize("cache_class", [KVCache, StaticKVCache])
def test_a_reorder_moves_each_group_with_its_source_row(cache_class):
    cache = cache_class.empty(1, group=2)
    cross = torch.arange(3.0).view(3, 1, 1, 1).expand(3, 1, 2, 4)  # source row r holds r
    cache.set_cross(0, cross, cross)
    cache.append_self(0, torch.arange(6.0).view(6, 1, 1, 1).expand(6, 1, 1, 4), torch.zeros(6, 1, 1, 4))
    # Beams move inside their sentence: the cross rows stay.
    kept = cache.reorder(torch.tensor([1, 1, 2, 3, 5, 4]), cross=False)
    assert kept.cross(0)[0][:, 0, 0, 0].tolist() == [0, 1, 2]
    # Sentence 1 leaves, sentences 2 and 0 remain (in that order): rows 4, 5 and 0, 1.
    moved = cache.reorder(torch.tensor([5, 4, 0, 0]))
    assert moved.cross(0)[0][:, 0, 0, 0].tolist() == [2, 0]
    assert moved.self_k[0][:, 0, 0, 0].tolist() == [5, 4, 0, 0]


@pytest.mark.slow  # compiling on a CPU: about a minute
def test_compiled_beam_search_over_shared_source_rows_equals_eager(monkeypatch):
    """After a warm-up (one sentence, then several), batches of one and of many sentences
    decode with no recompilation and the hypotheses of eager search with every beam's own
    copy of the source."""
    from transformer.decoding.compiled import compiled_decoding

    torch._dynamo.reset()
    model = _model(9, positional=RelativePositionBias)
    compiled = compiled_decoding(model)
    src = _sources(30, seed=10)
    args = dict(**SPECIALS, beam_size=4, n_best=2, max_len_a=1.5, max_len_b=4)
    for batch in (src[:1].clone(), src[1:9].clone()):
        beam_search(compiled, batch, **args)
    monkeypatch.setattr(torch._dynamo.config, "error_on_recompile", True)
    for batch in (src[9:10].clone(), src[10:11].clone(), src[11:30].clone()):
        ours = beam_search(compiled, batch, **args)
        ref = beam_search(_OwnCopies(model), batch, **args)
        assert [[h.tokens for h in n] for n in ours] == [[h.tokens for h in n] for n in ref]
        assert [h.score for n in ours for h in n] == pytest.approx([h.score for n in ref for h in n], abs=1e-4)


def test_beam_search_feeds_contiguous_tokens_at_every_step():
    # A strided view of the beams' last tokens changes its stride every step, which a compiled
    # step treats as a new input layout and recompiles for.
    model = _model(11)
    seen = []

    class Recording:
        vocab_size, encode, init_cache = model.vocab_size, model.encode, model.init_cache

        def decode_step(self, tokens, enc, cache):
            seen.append(tokens.is_contiguous())
            return model.decode_step(tokens, enc, cache)

    beam_search(Recording(), _sources(3, seed=12), **SPECIALS, beam_size=3, max_len_a=1.5, max_len_b=4)
    assert len(seen) > 2 and all(seen)


@pytest.mark.parametrize("cache_class", [KVCache, StaticKVCache])
def test_the_first_step_is_decoded_once_per_sentence_then_copied_to_its_beams(cache_class):
    model, k = _model(6), 4
    rows = []

    class Recording:
        vocab_size = model.vocab_size

        def encode(self, src):
            return model.encode(src)

        def init_cache(self, enc, beams=1):
            return model.init_cache(enc, static=cache_class is StaticKVCache, beams=beams)

        def decode_step(self, tokens, enc, cache):
            rows.append(tokens.size(0))
            return model.decode_step(tokens, enc, cache)

    src = _sources(3, seed=7)
    args = dict(**SPECIALS, beam_size=k, n_best=k, max_len_a=1.5, max_len_b=4)
    ours = beam_search(Recording(), src, **args)
    assert rows[0] == 3 and rows[1] == 3 * k  # BOS once per sentence, then every beam
    ref = beam_search(_OwnCopies(model), src, **args)
    assert [[h.tokens for h in n] for n in ours] == [[h.tokens for h in n] for n in ref]


def test_expanding_a_first_step_copies_each_sentence_row_to_its_beams():
    cache = KVCache.empty(1, group=3)
    k = torch.randn(2, 2, 1, 4)
    cache.append_self(0, k, -k)
    cache.expand_beams()
    assert torch.equal(cache.self_k[0], k.repeat_interleave(3, dim=0))
    assert torch.equal(cache.self_v[0], -k.repeat_interleave(3, dim=0))
    assert cache.length == 1
