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


def test_training_loss_scores_only_real_positions_and_matches_the_full_loss(task):
    from transformer.tasks.losses import label_smoothed_nll

    hp = task.hparams
    src = torch.tensor([[5, 6, 7, hp.eos_id], [8, 9, hp.eos_id, hp.pad_id]])
    tgt_in = torch.tensor([[hp.bos_id, 10, 11, 12], [hp.bos_id, 13, hp.pad_id, hp.pad_id]])
    tgt_out = torch.tensor([[10, 11, 12, hp.eos_id], [13, hp.eos_id, hp.pad_id, hp.pad_id]])
    batch = {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out}
    task.zero_grad()
    loss, nll, n_tokens = task._loss(batch)
    loss.backward()
    fast = {n: p.grad.clone() for n, p in task.named_parameters() if p.grad is not None}
    task.zero_grad()
    ref_loss, ref_nll = label_smoothed_nll(task.model(src, tgt_in), tgt_out, hp.label_smoothing, hp.pad_id)
    ref_loss.backward()
    assert n_tokens == 6
    torch.testing.assert_close(loss, ref_loss)
    torch.testing.assert_close(nll, ref_nll)
    for name, p in task.named_parameters():
        if p.grad is not None:
            torch.testing.assert_close(fast[name], p.grad, atol=1e-6, rtol=1e-5, msg=name)
    task.zero_grad()
