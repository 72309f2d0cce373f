"""``decode.dtype=bf16``: search over a bf16 copy of the model, scores in fp32.

bf16 greedy, beam, n-best and ensemble search give what the same search gives on the model cast
with ``.to(torch.bfloat16)``; the compiled bf16 step gives eager bf16's tokens; the fp32 model
is left as it is; beam search ranks its best candidates by scores summed in fp32; a CPU without
bf16 instructions refuses ``decode.dtype=bf16``.
"""

from __future__ import annotations

import copy

import pytest
import torch

from transformer.decoding import EnsembleModel, beam_search, greedy_search
from transformer.decoding import beam, precision
from transformer.decoding.compiled import compiled_decoding
from transformer.decoding.precision import decoding_model
from transformer.decoding.settings import DecodeSettings
from transformer.models import EncoderDecoder, TransformerConfig
from transformer.modules.positional import RelativePositionBias
from transformer.tasks.translation import TranslationTask

PAD, BOS, EOS, V = 0, 1, 2, 40
SPECIALS = {"bos_id": BOS, "eos_id": EOS, "pad_id": PAD}
TINY = dict(d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=2, d_ff=32, dropout=0.0, max_len=128)
ARGS = dict(**SPECIALS, max_len_a=1.5, max_len_b=4)

needs_bf16 = pytest.mark.skipif(not precision.cpu_has_bf16(), reason="this CPU has no bf16 instructions")


def _model(seed: int, **kw) -> EncoderDecoder:
    torch.manual_seed(seed)
    model = EncoderDecoder(TransformerConfig(vocab_size=V, pad_id=PAD, **TINY, **kw)).eval()
    with torch.no_grad():  # a larger EOS row (tied embedding): outputs end at varied lengths
        model.decoder.output_proj.weight[EOS] *= 3.0
    return model


def _sources(n: int, seed: int = 0, max_len: int = 12) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, max_len + 1, (n,), generator=g)
    src = torch.randint(3, V, (n, max_len), generator=g)
    src[torch.arange(max_len) >= lengths[:, None]] = PAD
    return src


def _task(seed: int) -> TranslationTask:
    torch.manual_seed(seed)
    task = TranslationTask(model={"_target_": "transformer.models.EncoderDecoder", **TINY}, vocab_size=V,
                           pad_id=PAD, bos_id=BOS, eos_id=EOS, src_lang="de", tgt_lang="en").eval()
    with torch.no_grad():
        task.model.decoder.output_proj.weight[EOS] *= 3.0
    return task


def _search(model, src, strategy: str):
    if strategy == "greedy":
        return [[(toks, s)] for toks, s in greedy_search(model, src, **ARGS, max_len=128, return_scores=True)]
    return [[(h.tokens, h.score) for h in n]
            for n in beam_search(model, src, **ARGS, max_len=128, beam_size=4, n_best=3 if strategy == "n_best" else 1)]


STRATEGIES = {"greedy": {"strategy": "greedy"}, "beam": {"strategy": "beam", "beam_size": 4},
              "n_best": {"strategy": "beam", "beam_size": 4, "n_best": 3}}


@needs_bf16
@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_bf16_search_is_the_search_of_the_model_cast_to_bf16(strategy):
    task, src = _task(1), _sources(8, seed=1)
    settings = {**STRATEGIES[strategy], **{k: v for k, v in ARGS.items() if k.startswith("max_len")}}
    bf16 = task.search_fn({**settings, "dtype": "bf16"})(src)
    reference = _search(copy.deepcopy(task.model).to(torch.bfloat16), src, strategy)
    assert bf16 == reference  # token ids and fp32 scores, exactly
    fp32 = task.search_fn(settings)(src)
    assert fp32 == _search(task.model, src, strategy)
    # the bf16 copy is what searched (scores differ from fp32's), and the task's model stays fp32
    assert [s for n in bf16 for _, s in n] != [s for n in fp32 for _, s in n]
    assert {p.dtype for p in task.model.parameters()} == {torch.float32}


@needs_bf16
def test_a_bf16_ensemble_is_the_ensemble_of_bf16_members():
    members = [_model(8), _model(9, positional=RelativePositionBias)]
    src = _sources(5, seed=2)
    bf16 = decoding_model(EnsembleModel(members), "bf16")
    reference = EnsembleModel([copy.deepcopy(m).to(torch.bfloat16) for m in members])
    assert greedy_search(bf16, src, **ARGS, return_scores=True) == greedy_search(reference, src, **ARGS,
                                                                                 return_scores=True)
    beams = [beam_search(e, src, **ARGS, beam_size=3, n_best=2) for e in (bf16, reference)]
    assert beams[0] == beams[1]
    assert {p.dtype for m in members for p in m.parameters()} == {torch.float32}


@needs_bf16
def test_bf16_weights_and_cache_with_fp32_log_probs():
    model = decoding_model(_model(3), "bf16")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    enc = model.encode(_sources(3, seed=3))
    cache = model.init_cache(enc)
    log_probs, cache = model.decode_step(torch.full((3, 1), BOS), enc, cache)
    assert enc.memory.dtype == torch.bfloat16 and cache.cross(0)[0].dtype == torch.bfloat16
    assert log_probs.dtype == torch.float32  # the log-softmax runs on fp32 logits
    assert torch.allclose(log_probs.exp().sum(-1), torch.ones(3), atol=1e-5)


class _ScoreTable:
    """A model whose output states are row numbers into a table of ``exact`` fp32 scores:
    ``project`` rounds them to bf16, as a bf16 model's product does; ``project_ids`` gives them
    as summed in fp32 (``EncoderDecoder.project_ids``)."""

    def __init__(self, exact: torch.Tensor):
        self.exact = exact

    def project(self, states: torch.Tensor) -> torch.Tensor:
        return self.exact[states[:, 0].long()].bfloat16()

    def project_ids(self, states: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return self.exact[states[:, 0].long()].gather(1, ids)


@pytest.mark.parametrize("vocab", [V, 4096])  # a row at once, and by blocks of the vocabulary
def test_bf16_beam_candidates_are_ranked_by_their_scores_summed_in_fp32(vocab):
    """Two sentences of two beams, two likely tokens a row. Rounded to bf16 (a multiple of 1/16
    near 12), beam 1's token 7 overtakes beam 0's token 5 of the first sentence; the search
    ranks and scores the candidates as the fp32 scores do."""
    exact = torch.full((4, vocab), -30.0)  # (N, V): rows 0, 1 are sentence 0's beams
    for row, entries in enumerate([{5: 12.03, 9: 11.2}, {7: 12.04, 9: 11.5}, {5: 9.7, 6: 9.69}, {8: 3.0, 5: 2.0}]):
        for token, score in entries.items():
            exact[row, token] = score
    scores, k, banned = torch.tensor([[-1.0, -0.91], [-1.0, -1.5]]), 2, (PAD, BOS)  # (B, K)

    def ranked(logits):
        return beam._top_candidates(scores, beam._next_log_probs(torch.log_softmax(logits, -1), k, banned))
    expected, as_rounded = ranked(exact), ranked(exact.bfloat16().float())
    assert expected.tokens[0, :2].tolist() == [5, 7] and as_rounded.tokens[0, :2].tolist() == [7, 5]
    states = torch.arange(4.0).unsqueeze(1)  # (N, 1): each row's number
    table = _ScoreTable(exact)
    got = beam._rescored_candidates(scores, states, table.project(states), table, k, banned)
    assert torch.equal(got.tokens, expected.tokens) and torch.equal(got.beams, expected.beams)
    assert torch.allclose(got.scores, expected.scores, atol=1e-5)


@pytest.mark.parametrize("output_bias", [False, True])
def test_a_bf16_model_s_scores_of_a_few_ids_are_summed_in_fp32(output_bias):
    model = _model(5, output_bias=output_bias).to(torch.bfloat16)
    if output_bias:
        torch.nn.init.normal_(model.decoder.output_bias)
    states = (3 * torch.randn(6, TINY["d_model"])).bfloat16()  # (N, D)
    ids = torch.randint(0, V, (6, 3))  # (N, m)
    summed = states.float() @ model.decoder.output_proj.weight.float().T  # (N, V), fp32 sums
    if output_bias:
        summed = summed + model.decoder.output_bias.float()
    assert torch.allclose(model.project_ids(states, ids), summed.gather(1, ids), atol=1e-5)
    assert (model.project(states).float() - summed).abs().max() > 1e-2  # the product's bf16 rounding


def test_bf16_beam_search_rescores_every_step_and_fp32_search_none(monkeypatch):
    calls = []
    rescore = beam._rescored_candidates
    monkeypatch.setattr(beam, "_rescored_candidates", lambda *a: calls.append(a[1].dtype) or rescore(*a))
    model, src = _model(6), _sources(4, seed=6)
    beam_search(model, src, **ARGS, beam_size=3)
    assert calls == []
    beam_search(decoding_model(model, "bf16") if precision.cpu_has_bf16() else model.to(torch.bfloat16), src,
                **ARGS, beam_size=3)
    assert len(calls) > 1 and set(calls) == {torch.bfloat16}  # the first step's states and every later's


def test_fp32_decoding_uses_the_model_itself():
    model = _model(4)
    assert decoding_model(model, "fp32") is model


def _distinct_sources(n: int, seed: int, max_len: int = 10) -> torch.Tensor:
    """``(n, max_len)`` sources of distinct tokens each (a repeated token is where a small copying
    model stays unsure which one it has copied)."""
    g = torch.Generator().manual_seed(seed)
    src = torch.stack([torch.randperm(V - 3, generator=g)[:max_len] + 3 for _ in range(n)])  # (n, max_len)
    lengths = torch.randint(1, max_len + 1, (n,), generator=g)
    src[torch.arange(max_len) >= lengths[:, None]] = PAD
    return src


def _copying_model(steps: int = 800) -> EncoderDecoder:
    """A tiny model trained to copy its source (about ten seconds): confident where a random
    model's next-token scores are near-ties, which bf16's 8-bit mantissa breaks either way."""
    torch.manual_seed(0)
    model = EncoderDecoder(TransformerConfig(vocab_size=V, pad_id=PAD, d_model=32, n_heads=2, n_encoder_layers=1,
                                             n_decoder_layers=1, d_ff=64, dropout=0.0, max_len=64))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    rows = torch.arange(64)
    for step in range(steps):
        src = _distinct_sources(64, seed=100 + step)  # (64, 10)
        tgt_out = torch.cat([src, torch.full((64, 2), PAD)], 1)  # (64, 12): the source, EOS, PAD
        tgt_out[rows, (src != PAD).sum(1)] = EOS
        tgt_in = torch.cat([torch.full((64, 1), BOS), tgt_out[:, :-1]], 1)  # (64, 12)
        logits = model(src, tgt_in)  # (64, 12, V)
        loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), tgt_out, ignore_index=PAD)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


@needs_bf16
@pytest.mark.slow  # compiling on a CPU: about a minute
def test_compiled_bf16_gives_the_tokens_of_eager_bf16():
    """The compiled step fuses operations and so rounds bf16 differently from eager bf16: an
    untrained model's near-ties then flip (a random model's greedy outputs differed on 2 of 40
    sentences, a half-trained copier's on 2 of 40 too); a model that has learned its task
    decodes alike."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the tiny model's training, and one summation order for both searches
    try:
        _compiled_bf16_matches_eager_bf16()
    finally:
        torch.set_num_threads(threads)


def _compiled_bf16_matches_eager_bf16():
    model = decoding_model(_copying_model(), "bf16")
    torch._dynamo.reset()
    compiled = compiled_decoding(model)
    args = dict(**SPECIALS, max_len_a=1.0, max_len_b=3)
    for batch in (_distinct_sources(1, seed=5), _distinct_sources(40, seed=6), _distinct_sources(40, seed=8)):
        copies = [[t for t in row.tolist() if t != PAD] for row in batch]
        eager = greedy_search(model, batch, **args)
        assert eager == copies  # the model has learned its task: its choices are clear
        assert greedy_search(compiled, batch, **args) == eager
        beams = [beam_search(m, batch, **args, beam_size=3) for m in (compiled, model)]
        assert [[h.tokens for h in n] for n in beams[0]] == [[h.tokens for h in n] for n in beams[1]]


def test_bf16_is_refused_on_a_cpu_that_would_emulate_it(monkeypatch):
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: False)
    task = _task(6)
    with pytest.raises(ValueError, match=r"^decode\.dtype=bf16: this CPU has no bf16 instructions") as err:
        task.search_fn({"strategy": "beam", "dtype": "bf16"})
    assert "\n" not in str(err.value)
    task.search_fn({"strategy": "beam", "dtype": "fp32"})  # fp32 is always there


def test_the_cpu_check_reads_the_bf16_instructions(monkeypatch):
    import platform

    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False, raising=False)
    assert not precision.cpu_has_bf16()
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    assert precision.cpu_has_bf16()


def test_decode_dtype_is_fp32_or_bf16_for_autoregressive_checkpoints_only():
    from transformer.decoding.strategies import CTC, choose

    assert DecodeSettings().dtype == "fp32"
    with pytest.raises(ValueError, match=r"decode\.dtype='fp16': expected one of fp32, bf16"):
        DecodeSettings.check({"dtype": "fp16"})
    with pytest.raises(ValueError, match=r"decode\.dtype=bf16: applies to greedy and beam"):
        choose(DecodeSettings(dtype="bf16"), CTC)
    choose(DecodeSettings(dtype="fp32"), CTC)


def test_bf16_and_int8_do_not_combine():
    from transformer.accel.quantize import apply_quantize

    with pytest.raises(ValueError, match="quantize=int8"):
        decoding_model(apply_quantize(_model(7), "int8"), "bf16")


@needs_bf16
def test_the_server_decodes_in_the_dtype_of_its_settings():
    pytest.importorskip("fastapi")
    from transformer.cli.serve import load_export, translation_settings
    from transformer.data.core.tokenizer import SubwordTokenizer
    from transformer.serve.served import TranslationModel

    sentences = ["ein hund läuft über die wiese .", "zwei männer spielen fußball ."] * 3
    tok = SubwordTokenizer.train(sentences, vocab_size=300)
    torch.manual_seed(0)
    task = TranslationTask(model={"_target_": "transformer.models.EncoderDecoder", **TINY}, vocab_size=tok.vocab_size,
                           pad_id=tok.pad_id, bos_id=tok.bos_id, eos_id=tok.eos_id, src_lang="de", tgt_lang="en",
                           tokenizers={"src": tok.to_str(), "tgt": tok.to_str()}).eval()
    settings = translation_settings({"id": "m", "ckpt_path": "m.ckpt", "decode": "beam", "dtype": "bf16"}, "models[0]")
    assert settings.dtype == "bf16"
    served = TranslationModel("m", task, "m.ckpt", settings)
    answers = [[(h["text"], h["score"]) for h in a["hypotheses"]] for a in served.predict(sentences, served._settings({}))]
    assert answers == task.translator(settings).translate(sentences)
    assert answers != task.translator(settings.replace(dtype="fp32")).translate(sentences)  # the scores differ
    # a CTranslate2 export decodes as CTranslate2 does: the key is not one of its own
    with pytest.raises(ValueError, match=r"models\[0\]\.dtype: not a key of a CTranslate2 export"):
        load_export({"id": "m", "ckpt_path": "export", "dtype": "bf16"}, "models[0]", None, None)


def test_transformer_decode_refuses_bf16_in_one_error_line(monkeypatch, capsys, tmp_path):
    import sys

    from transformer.cli import decode as decode_cli
    from transformer.data.core.tokenizer import SubwordTokenizer
    from transformer.tasks.checkpoint import TASK_KEY

    tok = SubwordTokenizer.train(["ein hund läuft .", "zwei männer ."] * 3, vocab_size=300)
    task = TranslationTask(model={"_target_": "transformer.models.EncoderDecoder", **TINY}, vocab_size=tok.vocab_size,
                           pad_id=tok.pad_id, bos_id=tok.bos_id, eos_id=tok.eos_id, src_lang="de", tgt_lang="en",
                           tokenizers={"src": tok.to_str(), "tgt": tok.to_str()})
    ckpt = {"state_dict": task.state_dict(), "hyper_parameters": dict(task.hparams), TASK_KEY: "translation"}
    task.on_save_checkpoint(ckpt)
    torch.save(ckpt, tmp_path / "m.ckpt")
    (tmp_path / "src.de").write_text("ein hund läuft .\n")
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: False)
    monkeypatch.setattr(sys, "argv", ["transformer-decode", f"ckpt_path={tmp_path / 'm.ckpt'}", "decode.dtype=bf16",
                                      f"input={tmp_path / 'src.de'}", f"output={tmp_path / 'hyp.en'}"])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        decode_cli.main()
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: decode.dtype=bf16: this CPU has no bf16 instructions (AVX512-BF16 or AMX), so bf16 "
                   "products would be emulated, slower than fp32; set decode.dtype=fp32"]
    assert not (tmp_path / "hyp.en").exists()
