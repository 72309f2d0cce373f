"""The Translator glue: order, empty lines, truncation and the positional ceiling."""

import pytest
import torch

from transformer.data.core.tokenizer import SubwordTokenizer
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


def _batch(hp, extra_pad=0):
    p = [hp.pad_id] * extra_pad
    src = torch.tensor([[5, 6, 7, hp.eos_id] + p, [8, 9, hp.eos_id, hp.pad_id] + p])
    tgt_in = torch.tensor([[hp.bos_id, 10, 11, 12] + p, [hp.bos_id, 13, hp.pad_id, hp.pad_id] + p])
    tgt_out = torch.tensor([[10, 11, 12, hp.eos_id] + p, [13, hp.eos_id, hp.pad_id, hp.pad_id] + p])
    return {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out}


def _loss_and_grads(task, loss_fn):
    task.zero_grad()
    loss, nll = loss_fn()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in task.named_parameters() if p.grad is not None}
    task.zero_grad()
    return loss.detach(), nll.detach(), grads


def test_fixed_shape_loss_equals_the_loss_over_real_positions_only(task):
    from transformer.tasks.translation import label_smoothed_nll

    hp = task.hparams
    batch = _batch(hp)
    n_tokens = []
    loss, nll, grads = _loss_and_grads(task, lambda: (lambda r: (n_tokens.append(r[2]), r[:2])[1])(task._loss(batch)))
    real = batch["tgt_out"].ne(hp.pad_id)

    def indexed():  # the boolean-index loss: only real positions reach the vocabulary
        logits = task.model(batch["src"], batch["tgt_in"])[real]  # (N, V)
        return label_smoothed_nll(logits, batch["tgt_out"][real], hp.label_smoothing, hp.pad_id)

    ref_loss, ref_nll, ref_grads = _loss_and_grads(task, indexed)
    assert n_tokens == [6]
    torch.testing.assert_close(loss, ref_loss)
    torch.testing.assert_close(nll, ref_nll)
    assert ref_grads.keys() == grads.keys()
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], atol=1e-6, rtol=1e-5, msg=name)
    # Extra padding columns (a batch rounded up to a multiple) change nothing.
    padded, _, _ = _loss_and_grads(task, lambda: task._loss(_batch(hp, extra_pad=4))[:2])
    torch.testing.assert_close(padded, loss)


def test_bleu_runs_every_val_bleu_every_epochs(task):
    from types import SimpleNamespace

    task.hparams.val_bleu_every = 3
    try:
        due = []
        for epoch in range(6):
            task._trainer = SimpleNamespace(sanity_checking=False, current_epoch=epoch)
            due.append(task._bleu_due())
        task._trainer = SimpleNamespace(sanity_checking=True, current_epoch=0)
        assert due == [False, False, True, False, False, True] and task._bleu_due()
    finally:
        task._trainer = None
        task.hparams.val_bleu_every = 1
