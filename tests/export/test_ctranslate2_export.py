"""CTranslate2 export: the exported model searches as ours does (greedy token for token; beam 5
on >= 97 % of sentences of a tiny, barely trained model, whose repetitive outputs are where
CTranslate2's beam and ours rank finished hypotheses differently: 292/300 here), for every layer arrangement and position scheme it can
express; what it cannot express is refused with the reason."""

from __future__ import annotations

import json

import pytest
import torch
from tiny_translation import multi30k_slice, src_batch, tiny_task, trained_tiny_task

from transformer.export.ctranslate2 import CTranslate2Translator, export_ctranslate2
from transformer.export.folder import ExportError

ctranslate2 = pytest.importorskip("ctranslate2")


MAX_B = 30  # output cap (tokens, EOS included) for both engines


@pytest.fixture(scope="module")
def test_sources(mirror_root, tmp_path_factory):
    return [s for s, _ in multi30k_slice(mirror_root, "test_2016_flickr", 300, tmp_path_factory.mktemp("cache"))]


def ours(task, sentences, strategy, beam_size=5):
    search = task.search_fn({"strategy": strategy, "beam_size": beam_size, "max_len_a": 0, "max_len_b": MAX_B})
    out = []
    for i in range(0, len(sentences), 50):  # batched, as the Translator does
        out += [nbest[0][0] for nbest in search(src_batch(task, sentences[i:i + 50]))]
    return out


def exported(task, tmp_path, sentences, beam_size, quantization=None):
    out = export_ctranslate2(task, tmp_path / "ct2", quantization)
    ct2 = CTranslate2Translator(out, max_len_a=0, max_len_b=MAX_B)
    return ct2.translate_ids([task.src_tokenizer.encode(s) for s in sentences], beam_size=beam_size)


def test_greedy_equal_token_for_token_and_beam_on_97_percent(mirror_root, test_sources, tmp_path):
    task = trained_tiny_task(str(mirror_root))
    greedy = ours(task, test_sources, "greedy")
    assert sum(bool(h) and len(h) < MAX_B for h in greedy) > 200  # a model that ends its sentences
    assert exported(task, tmp_path, test_sources, 1) == greedy
    beam_ours, beam_ct2 = ours(task, test_sources, "beam"), exported(task, tmp_path / "b", test_sources, 5)
    same = sum(a == b for a, b in zip(beam_ours, beam_ct2))
    print(f"beam 5: CTranslate2 equals ours on {same}/{len(test_sources)} sentences")
    assert same >= 0.97 * len(test_sources), f"beam 5 equal on {same}/{len(test_sources)}"


def test_greedy_under_a_length_rule_with_many_caps_equals_ours_and_the_call_per_cap(mirror_root, test_sources,
                                                                                    tmp_path):
    """Greedy decodes a batch to its longest cap once and again only the sentences their own cap
    cuts: the same outputs as our search under the same rule, and the same outputs and scores
    as one CTranslate2 call per cap."""
    task = trained_tiny_task(str(mirror_root))
    a, b, sentences = 0.6, 2, test_sources[:120]
    search = task.search_fn({"strategy": "greedy", "max_len_a": a, "max_len_b": b})
    ids = [task.src_tokenizer.encode(s) for s in sentences]
    want = [nbest[0][0] for i in range(0, len(sentences), 40) for nbest in search(src_batch(task, sentences[i:i + 40]))]
    ct2 = CTranslate2Translator(export_ctranslate2(task, tmp_path / "ct2"), max_len_a=a, max_len_b=b)
    got = ct2.translate_scored_ids(ids)
    caps = [int(a * (len(x) + 1) + b) for x in ids]
    cut = sum(len(out) == cap for (out, _), cap in zip(got, caps))
    assert len(set(caps)) > 5 and 10 < cut < len(sentences) - 10  # both kinds of sentence are here
    assert [out for out, _ in got] == want
    per_cap = {}
    for i, cap in enumerate(caps):
        per_cap.setdefault(cap, []).append(i)
    for cap, rows in per_cap.items():  # scores: equal up to the batch's float summation order
        alone = [nbest[0] for nbest in ct2._search(rows, ids, cap, 1, 0.0)]
        assert [got[i][0] for i in rows] == [out for out, _ in alone]
        assert [got[i][1] for i in rows] == pytest.approx([score for _, score in alone], abs=1e-4)


@pytest.mark.parametrize("overrides", [
    dict(norm_first=False, activation="gelu"),
    dict(positional={"_target_": "transformer.modules.positional.LearnedPositionalEncoding", "_partial_": True},
         share_embeddings=False, tie_output=False),
    dict(positional={"_target_": "transformer.modules.positional.RelativePositionBias", "_partial_": True},
         n_encoder_layers=2, n_decoder_layers=2),
], ids=["post_norm_gelu", "learned_positions_untied", "relative_positions"])
def test_every_arrangement_greedy_equal(mirror_root, test_sources, tmp_path, overrides):
    pairs = multi30k_slice(mirror_root, "train", 300, tmp_path / "cache")
    task = tiny_task(pairs, steps=30, **overrides)
    sentences = test_sources[:60]
    assert exported(task, tmp_path, sentences, 1) == ours(task, sentences, "greedy")


def test_directory_config_and_int8(mirror_root, test_sources, tmp_path):
    task = trained_tiny_task(str(mirror_root))
    out = export_ctranslate2(task, tmp_path / "int8", "int8")
    config = json.loads((out / "config.json").read_text())
    assert (config["decoder_start_token"], config["eos_token"], config["add_source_eos"]) == ("<s>", "</s>", True)
    assert config["layer_norm_epsilon"] == 1e-5
    assert (out / "source_tokenizer.json").is_file() and (out / "model.bin").is_file()
    # int8 weights change the numbers a little, not the language: most outputs agree
    ct2 = CTranslate2Translator(out, max_len_a=0, max_len_b=MAX_B)
    int8 = ct2.translate_ids([task.src_tokenizer.encode(s) for s in test_sources[:100]])
    assert sum(a == b for a, b in zip(int8, ours(task, test_sources[:100], "greedy"))) >= 50
    with pytest.raises(ExportError, match="not empty"):
        export_ctranslate2(task, out)
    with pytest.raises(ExportError, match="quantization"):
        export_ctranslate2(task, tmp_path / "q", "int3")


def test_text_round_trip_and_empty_lines(mirror_root, tmp_path):
    task = trained_tiny_task(str(mirror_root))
    out = export_ctranslate2(task, tmp_path / "ct2")
    lines = ["Ein Hund rennt über die Wiese.", "", "Zwei Männer spielen Fußball."]
    got = CTranslate2Translator(out).translate(lines)
    want = task.translator({"strategy": "greedy"}).translate(lines)
    assert got == [nbest[0][0] for nbest in want] and got[1] == ""


def test_refuses_a_local_window_with_the_reason(mirror_root, tmp_path):
    task = tiny_task([("a b", "c d")] * 4, steps=0, vocab_size=270, window=2)
    with pytest.raises(ExportError, match="local window"):
        export_ctranslate2(task, tmp_path / "w")
    assert not (tmp_path / "w").exists()


def test_refuses_positions_added_to_the_encoder_output_with_the_reason(tmp_path):
    task = tiny_task([("a b", "c d")] * 4, steps=0, vocab_size=270, memory_positions=True)
    with pytest.raises(ExportError, match="memory_positions"):
        export_ctranslate2(task, tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_missing_ctranslate2_says_how_to_install(monkeypatch, tmp_path):
    import sys

    task = tiny_task([("a b", "c d")] * 4, steps=0, vocab_size=270)
    monkeypatch.setitem(sys.modules, "ctranslate2", None)
    with pytest.raises(ExportError, match=r'pip install "transformer\[export\]"'):
        export_ctranslate2(task, tmp_path / "x")


def test_same_rules_as_our_search_bos_banned_and_empty_output_allowed(tmp_path):
    """A model whose every step ranks BOS first, then EOS: our search never picks BOS, so it
    stops at once with an empty output; the export must do the same."""
    task = tiny_task([("a b", "c d")] * 4, steps=0, vocab_size=270, share_embeddings=False, tie_output=False)
    dec = task.model.decoder
    with torch.no_grad():
        dec.final_norm.weight.zero_()
        dec.final_norm.bias.copy_(torch.nn.functional.one_hot(torch.tensor(0), dec.d_model).float())  # h = e_0
        dec.output_proj.weight[:, 0] = torch.linspace(-1, 1, dec.vocab_size)
        dec.output_proj.weight[task.hparams.bos_id, 0] = 20.0
        dec.output_proj.weight[task.hparams.eos_id, 0] = 10.0
    sentences = ["a b", "b a a"]
    assert ours(task, sentences, "greedy") == [[], []]
    assert exported(task, tmp_path, sentences, 1) == [[], []]
    assert exported(task, tmp_path / "beam", sentences, 5) == ours(task, sentences, "beam") == [[], []]
