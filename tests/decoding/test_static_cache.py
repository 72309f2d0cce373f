"""The static KV cache and compiled decoding give the outputs of the growing cache.

Greedy, beam and n-best search on tiny real models (every positional kind, and an ensemble)
with a ``StaticKVCache`` in place of the ``KVCache``, eager; then the compiled step
(``decoding.compiled``), which must compile during a warm-up and never again over 200 sentences
of varied lengths, and must read each model's own weights.
"""

from __future__ import annotations

from copy import deepcopy

import pytest
import torch

from transformer.decoding import EnsembleModel, beam_search, greedy_search
from transformer.decoding.common import reserve_steps
from transformer.decoding.compiled import CompiledDecoding, compiled_decoding
from transformer.models import EncoderDecoder, TransformerConfig
from transformer.modules.kv_cache import KVCache, StaticKVCache, bucket
from transformer.modules.positional import LearnedPositionalEncoding, RelativePositionBias

PAD, BOS, EOS, V = 0, 1, 2, 40
SPECIALS = {"bos_id": BOS, "eos_id": EOS, "pad_id": PAD}
TINY = dict(d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=2, d_ff=32, dropout=0.0, max_len=128)


def _model(seed: int, **kw) -> EncoderDecoder:
    torch.manual_seed(seed)
    model = EncoderDecoder(TransformerConfig(vocab_size=V, pad_id=PAD, **TINY, **kw)).eval()
    with torch.no_grad():  # a larger EOS row (tied embedding): outputs end at varied lengths
        model.decoder.output_proj.weight[EOS] *= 3.0
    return model


class _Static(torch.nn.Module):
    """The model with a static cache, eager: what the compiled step runs, uncompiled."""

    def __init__(self, model):
        super().__init__()
        self.model, self.vocab_size = model, model.vocab_size
        self.encode, self.decode_step = model.encode, model.decode_step
        self.decode_step_logits = model.decode_step_logits

    def init_cache(self, enc, beams=1):
        return self.model.init_cache(enc, static=True, beams=beams)


class _Limited(_Static):
    """As the compiled wrapper runs a step, eager: the cache shows it only the filled steps."""

    def decode_step(self, tokens, enc, cache):
        cache.limit(tokens.size(1))
        try:
            return self.model.decode_step(tokens, enc, cache)
        finally:
            cache.limit(None)


def _sources(n: int, seed: int = 0, max_len: int = 12) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, max_len + 1, (n,), generator=g)
    src = torch.randint(3, V, (n, max_len), generator=g)
    src[torch.arange(max_len) >= lengths[:, None]] = PAD
    return src


POSITIONAL = {
    "sinusoidal": None,
    "learned": LearnedPositionalEncoding,
    "relative": RelativePositionBias,
}


@pytest.mark.parametrize("wrapper", [_Static, _Limited])
@pytest.mark.parametrize("positional", list(POSITIONAL))
def test_static_cache_search_equals_the_growing_cache(positional, wrapper):
    model, src = _model(1, positional=POSITIONAL[positional]), _sources(6, seed=1)
    args = dict(**SPECIALS, max_len_a=1.5, max_len_b=4)
    for search, kw in ((greedy_search, {"return_scores": True}), (beam_search, {"beam_size": 4, "n_best": 3})):
        grow = search(model, src, **args, **kw)
        static = search(wrapper(model), src, **args, **kw)
        if search is greedy_search:
            assert [t for t, _ in static] == [t for t, _ in grow]
            assert [s for _, s in static] == pytest.approx([s for _, s in grow], abs=1e-4)
        else:
            assert [[h.tokens for h in n] for n in static] == [[h.tokens for h in n] for n in grow]
            assert [h.score for n in static for h in n] == pytest.approx(
                [h.score for n in grow for h in n], abs=1e-4)


@pytest.mark.parametrize("wrapper", [lambda m: m, _Static])
def test_greedy_drops_finished_rows_into_the_buffers_of_an_earlier_drop(wrapper):
    """Sentences leave a greedy batch at different steps; after the first drop, each drop writes
    the rows that go on into buffers the search already holds: two allocations per buffer for
    the whole search, however many drops."""
    model, src = _model(1), _sources(8, seed=1)
    args = dict(**SPECIALS, max_len_a=1.5, max_len_b=4)
    want = greedy_search(model, src, **args)
    search = wrapper(model)
    storages, rows = set(), []
    step = search.decode_step_logits  # what greedy search without scores calls

    def spy(tokens, enc, cache):
        rows.append(tokens.size(0))
        if cache.length:
            storages.add(cache._k[0].untyped_storage().data_ptr())
        return step(tokens, enc, cache)

    search.decode_step_logits = spy
    assert greedy_search(search, src, **args) == want
    drops = sum(a > b for a, b in zip(rows, rows[1:]))
    assert drops >= 3  # the sentences end at several steps
    assert len(storages) == 2


def test_static_caches_in_an_ensemble_equal_growing_ones():
    members = [_model(8), _model(9, positional=RelativePositionBias)]
    src = _sources(5, seed=2)
    args = dict(**SPECIALS, max_len_a=1.5, max_len_b=4)
    grow, static = EnsembleModel(members), EnsembleModel([_Static(m) for m in members])
    assert greedy_search(static, src, **args) == greedy_search(grow, src, **args)
    beams = [beam_search(e, src, **args, beam_size=3, n_best=2) for e in (grow, static)]
    assert [[h.tokens for h in n] for n in beams[1]] == [[h.tokens for h in n] for n in beams[0]]


def test_static_cache_keeps_its_shapes_and_masks_its_unfilled_steps():
    cache = StaticKVCache.empty(1).reserve(10)
    assert cache.capacity == bucket(10) == 16
    k = torch.randn(3, 2, 1, 4)
    for step in range(3):
        full_k, full_v = cache.append_self(0, k + step, k - step)
        assert full_k.shape == (3, 2, 16, 4)  # the whole buffer, every step
    assert cache.length == 3
    assert torch.equal(full_k[:, :, 2:3], k + 2) and torch.equal(full_k[:, :, 3:], torch.zeros(3, 2, 13, 4))
    # The next query (position 3) sees keys 0..3 only.
    t_k, mask = cache.self_attention_keys(1, k.device)
    assert t_k == 16 and mask.shape == (1, 1, 1, 16)
    assert mask[0, 0, 0].tolist() == [True] * 4 + [False] * 12
    # Rows leave the batch: a new buffer of the same capacity, no uninitialised memory.
    fewer = cache.reorder(torch.tensor([2, 0]))
    assert fewer.length == 3 and fewer.self_k[0].shape == (2, 2, 3, 4)
    assert torch.isfinite(fewer._k[0]).all() and torch.equal(fewer._k[0][0], full_k[2])


def test_a_limited_static_cache_shows_a_step_its_filled_steps_only():
    cache = StaticKVCache.empty(1).reserve(10).allocate(torch.zeros(3, 2, 5, 4))
    k = torch.randn(3, 2, 1, 4)
    for step in range(3):
        cache.limit(1)
        seen = max(step + 1, 2)  # the filled steps and the new one; two at least (one masked)
        t_k, mask = cache.self_attention_keys(1, k.device)  # as a step asks, before it appends
        assert t_k == seen and mask[0, 0, 0].tolist() == [True] * (step + 1) + [False] * (seen - step - 1)
        seen_k, seen_v = cache.append_self(0, k + step, k - step)
        assert seen_k.shape == seen_v.shape == (3, 2, seen, 4)
        cache.limit(None)
    assert cache.self_attention_keys(1, k.device)[0] == 16  # unlimited: the whole buffer again
    # The writes went into the buffer itself.
    assert torch.equal(cache._k[0][:, :, :3], torch.cat([k, k + 1, k + 2], dim=2))
    assert torch.equal(cache._v[0][:, :, 3:], torch.zeros(3, 2, 13, 4))


def test_a_growing_cache_still_grows():
    cache = KVCache.empty(1, capacity=2)
    for _ in range(5):
        k, _ = cache.append_self(0, torch.ones(1, 1, 1, 2), torch.ones(1, 1, 1, 2))
    assert k.shape == (1, 1, 5, 2) and cache.self_attention_keys(1, k.device)[0] == 6


@pytest.mark.slow  # compiling on a CPU: about a minute
def test_compiled_decoding_compiles_once_and_matches_eager(monkeypatch):
    """One warm-up pass compiles; 200 sentences of varied lengths in batches of every size
    then decode with no recompilation and the outputs of eager search."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    model = _model(2, positional=RelativePositionBias)
    compiled = compiled_decoding(model)
    src = _sources(200, seed=3, max_len=16)
    # Fresh tensors per batch, as the translator builds them.
    batches = [src[i:j].clone() for i, j in ((0, 1), (1, 40), (40, 41), (41, 105), (105, 128), (128, 200))]
    args = dict(**SPECIALS, max_len_a=1.2, max_len_b=3)

    before = counters["stats"]["unique_graphs"]
    for batch in (src[:1].clone(), src[1:9].clone()):  # the warm-up: a single row, and several
        greedy_search(compiled, batch, **args, return_scores=True)
    frames = counters["stats"]["unique_graphs"]
    # The encoder and the step, each for one row and for several: well inside dynamo's limit
    # of graphs per function, past which it would decode eagerly without a word.
    assert frames - before <= 4, frames - before
    recompiles = []
    monkeypatch.setattr(torch._dynamo.config, "error_on_recompile", True)
    for batch in batches:
        try:
            out = greedy_search(compiled, batch, **args, return_scores=True)
        except Exception as exc:  # error_on_recompile raises on any recompilation
            recompiles.append(repr(exc)[:300])
            continue
        ref = greedy_search(model, batch, **args, return_scores=True)
        assert [t for t, _ in out] == [t for t, _ in ref]
        assert [s for _, s in out] == pytest.approx([s for _, s in ref], abs=1e-4)
    assert not recompiles, recompiles
    assert counters["stats"]["unique_graphs"] == frames
    # one sentence's steps: a single program, compiled in the warm-up
    assert [len(step.exported._programs) for step in compiled._steps.values()] == [1]


@pytest.mark.slow  # compiling on a CPU: about a minute
def test_two_compiled_models_each_decode_with_their_own_weights():
    torch._dynamo.reset()
    src = _sources(8, seed=4)
    args = dict(**SPECIALS, max_len_a=1.5, max_len_b=4)
    outputs = []
    for seed in (5, 6):
        model = _model(seed)
        eager = greedy_search(model, src, **args)
        assert greedy_search(compiled_decoding(model), src, **args) == eager
        outputs.append(eager)
    assert outputs[0] != outputs[1]  # the two models do differ


def test_compiled_decoding_needs_one_autoregressive_model():
    with pytest.raises(ValueError, match="one autoregressive model"):
        compiled_decoding(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="EnsembleModel"):
        compiled_decoding(EnsembleModel([_model(1), _model(2)]))


def test_compiled_decoding_refuses_an_int8_model():
    from transformer.accel.quantize import apply_quantize

    with pytest.raises(ValueError, match="quantize=int8"):
        compiled_decoding(apply_quantize(_model(7), "int8"))


def test_decode_compile_is_a_boolean_for_autoregressive_checkpoints_only():
    from transformer.decoding.settings import DecodeSettings
    from transformer.decoding.strategies import CTC, choose

    with pytest.raises(ValueError, match=r"decode\.compile='yes'"):
        DecodeSettings.check({"compile": "yes"})
    assert DecodeSettings.check({"compile": True})["compile"] is True
    with pytest.raises(ValueError, match="autoregressive"):
        choose(DecodeSettings(compile=True), CTC)
    choose(DecodeSettings(compile=False), CTC)  # the default says nothing


@pytest.mark.slow  # compiling on a CPU: about a minute
def test_on_a_cpu_the_step_freezes_its_weights_and_calls_them_from_cpp():
    """The settings a step's speed rests on take effect: inductor's freezing (the weights
    constants of the graph, a batch's products on weights packed once for oneDNN) and the C++
    wrapper (no Python between kernels)."""
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    model = _model(7)
    src = _sources(3, seed=8)
    args = dict(**SPECIALS, max_len_a=1.0, max_len_b=2)
    out, codes = run_and_get_code(lambda: greedy_search(compiled_decoding(model), src, **args))
    assert out == greedy_search(model, src, **args)
    code = "\n".join(codes)
    assert "_frozen_param" in code  # the weights are constants of the graph
    assert "_linear_pointwise" in code and "_mkl_linear" not in code  # packed for oneDNN, not MKL
    assert "RAIIAtenTensorHandle" in code  # the wrapper is C++


def test_only_a_single_fp32_row_keeps_the_plain_product():
    """A compiled program freezes its weights and packs them for oneDNN unless its products have
    one fp32 row (a sentence's greedy step), which is not frozen, so that it keeps MKL's plain
    product; a GPU freezes nothing."""
    fp32 = CompiledDecoding(_model(7))
    bf16 = CompiledDecoding(deepcopy(_model(7)).to(torch.bfloat16))
    assert fp32.program_settings(1) == {"freezing": False}
    for wrapper, rows in ((fp32, 5), (fp32, 40), (bf16, 1), (bf16, 5)):
        assert wrapper.program_settings(rows) == {"freezing": True, "cpp.weight_prepack": True}
    assert CompiledDecoding(_model(7), "cuda").program_settings(5) == {"freezing": False}


@pytest.mark.slow  # compiling on a CPU: about a minute
def test_one_sentence_packs_its_beams_products_and_not_its_greedy_rows():
    """In one process, after programs that pack their weights, a sentence's greedy step (one
    row) still compiles without packing, and its beam step (several rows) with it; outputs equal
    eager search's."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    model, src = _model(7), _sources(1, seed=8)
    wrapper = compiled_decoding(model)
    args = dict(**SPECIALS, max_len_a=1.0, max_len_b=2)
    packed = lambda: counters["inductor"]["mkldnn_linear_weight_pack_matcher_count"]  # noqa: E731
    before = packed()
    assert beam_search(wrapper, src, beam_size=3, **args) == beam_search(model, src, beam_size=3, **args)
    after_beam = packed()
    assert greedy_search(wrapper, src, **args) == greedy_search(model, src, **args)
    assert after_beam > before  # the encoder's and the beams' products were packed
    assert packed() == after_beam  # the greedy row's were not


@pytest.mark.slow  # compiling three models on a CPU: about a minute
def test_each_compiled_model_keeps_its_own_graphs():
    """Wrappers of models of one class do not share dynamo's graphs: the entries each wrapper's
    step compiles are its own (a call never tries another model's first), so three compiled
    models fit a list limit that one model fits."""
    from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list

    torch._dynamo.reset()
    src = _sources(3, seed=8)
    args = dict(**SPECIALS, max_len_a=1.0, max_len_b=3)
    def graphs(wrapper):  # the graphs dynamo keeps for a wrapper's greedy step-and-choice
        (choose,) = wrapper._steps.values()
        return [id(e) for e in _debug_get_cache_entry_list(choose.compiled._torchdynamo_orig_callable.__code__)]

    wrappers, own = [], []
    with torch._dynamo.config.patch(recompile_limit=3, fail_on_recompile_limit_hit=True):
        for seed in (7, 8, 9):
            model = _model(seed)
            wrappers.append(compiled_decoding(model))
            assert greedy_search(wrappers[-1], src, **args) == greedy_search(model, src, **args)
            assert greedy_search(wrappers[-1], src[1:3], **args) == greedy_search(model, src[1:3], **args)
            own.append(graphs(wrappers[-1]))  # what this model compiled, before the next one exists
    # the later models' graphs went to lists of their own: each wrapper's list is still its own
    assert [graphs(w) for w in wrappers] == own
    assert not set(own[0]) & set(own[1]) and not set(own[1]) & set(own[2])


@pytest.mark.slow  # compiling on a CPU: about a minute
def test_compiled_beam_search_decodes_each_later_step_as_one_graph(monkeypatch):
    """Beam search's step after the first (the decoder step, its candidates over a vocabulary
    large enough to be ranked in blocks, and the beams that survive) is one compiled call, and
    the hypotheses are eager search's."""
    from transformer.decoding.common import MIN_BLOCKED_VOCAB
    from transformer.decoding.compiled import CompiledDecoding, _CompiledStep
    from transformer.decoding.exported import ExportedStep

    torch._dynamo.reset()
    torch.manual_seed(5)
    model = EncoderDecoder(TransformerConfig(vocab_size=2 * MIN_BLOCKED_VOCAB, pad_id=PAD, **TINY)).eval()
    with torch.no_grad():
        model.decoder.output_proj.weight[EOS] *= 3.0
    compiled, src = compiled_decoding(model), _sources(6, seed=6)
    args = dict(**SPECIALS, beam_size=3, n_best=2, max_len_a=1.0, max_len_b=3)
    calls = []  # (step, how it ran)
    run = CompiledDecoding._run
    monkeypatch.setattr(CompiledDecoding, "_run", lambda self, fn, *a: calls.append("compiled") or run(self, fn, *a))
    exported = ExportedStep.__call__
    monkeypatch.setattr(ExportedStep, "__call__", lambda self, *a: calls.append("exported") or exported(self, *a))
    step_call = _CompiledStep.__call__
    monkeypatch.setattr(_CompiledStep, "__call__", lambda self, *a: calls.append(self.key[0]) or step_call(self, *a))
    for batch in (src[:1], src[1:4], src[4:]):
        calls.clear()
        ours = beam_search(compiled, batch, **args)
        ref = beam_search(model, batch, **args)
        assert [[h.tokens for h in n] for n in ours] == [[h.tokens for h in n] for n in ref]
        assert [h.score for n in ours for h in n] == pytest.approx([h.score for n in ref for h in n], abs=1e-4)
        # in a batch the first step once per sentence (then copied to the beams), every later
        # one a single call: a compiled graph while several sentences remain, then a program
        # compiled ahead of time for the one left; a single sentence's first step is a later one
        steps, how = calls[0::2], calls[1::2]
        first = "beam_search" if len(batch) == 1 else "decode_step"
        assert steps == [first] + ["beam_search"] * (len(steps) - 1) and len(steps) > 2
        several = how.count("compiled")
        assert how == ["compiled"] * several + ["exported"] * (len(how) - several)
        assert (several == 0) == (len(batch) == 1)


def test_on_a_cpu_the_graphs_are_traced_from_input_major_weights_and_the_model_is_left_alone():
    """The compiled wrapper traces a copy whose linear weights hold the same values stored as
    their transpose (MKL's faster layout for a few rows); an embedding tied to the output layer
    keeps its rows contiguous (the output layer gets a copy), and the wrapped model keeps its
    own tensors and layout."""
    from transformer.decoding.compiled import CompiledDecoding

    model = _model(4)
    before = {name: (p.data_ptr(), p.stride()) for name, p in model.named_parameters()}
    wrapper = CompiledDecoding(model, "cpu")
    assert wrapper.model is model and wrapper._traced is not model
    assert {name: (p.data_ptr(), p.stride()) for name, p in model.named_parameters()} == before
    linears = [(n, m) for n, m in wrapper._traced.named_modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(m.weight.t().is_contiguous() and not m.weight.is_contiguous() for _, m in linears)
    originals = dict(model.named_parameters(remove_duplicate=False))
    assert all(torch.equal(p, originals[n]) for n, p in wrapper._traced.named_parameters())
    traced = wrapper._traced.decoder
    assert model.decoder.output_proj.weight is model.decoder.embedding.weight  # tied in the model
    assert traced.embedding.weight.is_contiguous() and torch.equal(traced.embedding.weight, traced.output_proj.weight)
    src = _sources(4, seed=5)
    args = dict(**SPECIALS, max_len_a=1.5, max_len_b=4, beam_size=3)
    assert beam_search(_Static(wrapper._traced), src, **args)[0][0].tokens == beam_search(model, src, **args)[0][0].tokens


@pytest.mark.slow  # compiling on a CPU: about a minute
def test_one_sentence_runs_a_program_compiled_ahead_of_time_that_checks_its_inputs():
    """A single sentence's encoder (with the cross-attention keys and values) and steps run
    AOTInductor programs, the same for sentences of other lengths, with eager search's outputs;
    inputs a program was not compiled for are refused rather than misread."""
    model = _model(3)
    compiled = compiled_decoding(model)
    args = dict(**SPECIALS, max_len_a=1.5, max_len_b=4)
    for n, src in enumerate(_sources(4, seed=9, max_len=12).split(1)):
        src = src[:, : 4 + 2 * n].clone()  # lengths 4, 6, 8, 10
        out = greedy_search(compiled, src, **args, return_scores=True)
        ref = greedy_search(model, src, **args, return_scores=True)
        assert [t for t, _ in out] == [t for t, _ in ref]
        assert [s for _, s in out] == pytest.approx([s for _, s in ref], abs=1e-4)
    (step,) = compiled._steps.values()
    (program,) = step.exported._programs.values()
    enc = compiled.encode(src)  # one sentence: the encoder's program, cross-attention keys too
    cache = reserve_steps(compiled.init_cache(enc), 8)
    with torch.no_grad():
        eager = model.init_cache(model.encode(src), static=True)
    real = src[0] != PAD  # padded keys are masked: eager leaves them zero, the program projects them
    for layer in range(len(model.decoder.layers)):
        for ours, ref in zip(cache.cross(layer), eager.cross(layer)):
            torch.testing.assert_close(ours[:, :, real], ref[:, :, real], rtol=1e-5, atol=1e-5)
    cache.allocate(cache.cross(0)[0])
    cache.limit(1)
    fields = [enc.memory, enc.src_pad_mask, enc.src_embed]
    good = [torch.full((1, 1), BOS), *fields, *cache.tensors(1)]
    program.shapes.check(good)
    wide = good[1].new_zeros(1, good[1].size(1), good[1].size(2) + 1)  # another model width
    with pytest.raises(ValueError, match="size"):
        program.shapes.check([good[0], wide, *good[2:]])
