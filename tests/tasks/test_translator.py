"""The Translator glue: order, empty lines, truncation and the positional ceiling."""

import pytest
import torch

from transformer.data.tokenizer import SubwordTokenizer
from transformer.tasks.translation import TranslationTask

SENTENCES = ["ein hund läuft über die wiese .", "a dog runs across the meadow .",
             "zwei männer stehen auf der straße .", "two men stand on the street ."] * 5


@pytest.fixture(scope="module")
def task():
    tok = SubwordTokenizer.train(SENTENCES, vocab_size=300)
    model = {
        "_target_": "transformer.models.EncoderDecoder", "d_model": 16, "n_heads": 2,
        "n_encoder_layers": 1, "n_decoder_layers": 1, "d_ff": 32, "dropout": 0.0, "max_len": 16,
        "positional": {"_target_": "transformer.modules.positional.LearnedPositionalEncoding",
                       "_partial_": True},
    }
    t = TranslationTask(model=model, vocab_size=tok.vocab_size, pad_id=tok.pad_id, bos_id=tok.bos_id,
                        eos_id=tok.eos_id, src_lang="de", tgt_lang="en",
                        tokenizers={"src": tok.to_str(), "tgt": tok.to_str()})
    return t.eval()


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_learned_positions_never_run_past_max_len(task, strategy):
    long = " ".join(["hund"] * 40)
    cfg = {"strategy": strategy, "beam_size": 2, "max_len_a": 3.0, "max_len_b": 10}
    tr = task.translator(cfg)
    tr.translate([long])  # would raise past the learned table's 16 positions
    assert tr.truncated == 1
    ids = tr.encode(long)
    assert len(ids) + 1 == 16  # source cut to the positional range, EOS kept
    src = torch.tensor([ids + [task.hparams.eos_id]])  # (1, 16)
    (tokens, _), = task.search_fn(cfg)(src)[0][:1]
    assert len(tokens) <= 16


def test_empty_and_blank_lines_translate_to_empty_strings_in_place(task):
    tr = task.translator({"strategy": "greedy", "max_len_a": 0, "max_len_b": 3})
    out = tr.translate(["ein hund .", "", "  \t", "zwei männer ."])
    assert [o[0][0] for o in out][1:3] == ["", ""]
    assert out[0][0][0] == tr.translate(["ein hund ."])[0][0][0]
    assert out[3][0][0] == tr.translate(["zwei männer ."])[0][0][0]


def test_outputs_are_single_lines_even_if_the_model_emits_newlines(task, monkeypatch):
    tr = task.translator({"strategy": "greedy", "max_len_a": 0, "max_len_b": 3})
    monkeypatch.setattr(tr.tgt_tok, "decode", lambda ids: "a\nb\r\nc")
    assert tr.translate(["ein hund ."])[0][0][0] == "a b  c"
