"""NATTranslationTask on a real tiny NonAutoregressiveModel: targets, losses, length
prediction, the missing causal mask, and decoding through the task's search functions."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from model_configs import model_config

from transformer.tasks.nat import NATTranslationTask, nat_targets, random_mask

PAD, BOS, EOS, MASK, V = 0, 1, 2, 4, 40


def make_task(decoder_input: str = "mask", **overrides) -> NATTranslationTask:
    cfg = model_config("nat_tiny")
    cfg["decoder_input"] = decoder_input
    kwargs = dict(model=cfg, vocab_size=V, pad_id=PAD, bos_id=BOS, eos_id=EOS, src_lang="de",
                  tgt_lang="en", mask_id=MASK)
    kwargs.update(overrides)
    return NATTranslationTask(**kwargs).eval()


def make_batch() -> dict:
    """Two sentences: source lengths 6 and 4 (EOS included), targets of 5 and 3 tokens."""
    src = torch.tensor([[5, 6, 7, 8, 9, EOS], [10, 11, 12, EOS, PAD, PAD]])
    tgt = [[13, 14, 15, 16, 17], [18, 19, 20]]
    tgt_in = torch.full((2, 6), PAD)
    tgt_out = torch.full((2, 6), PAD)
    for i, t in enumerate(tgt):
        tgt_in[i, : len(t) + 1] = torch.tensor([BOS] + t)
        tgt_out[i, : len(t) + 1] = torch.tensor(t + [EOS])
    return {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out}


def force_length_offset(task: NATTranslationTask, offset: int) -> None:
    """Make the length predictor always answer ``source length + offset``."""
    proj = task.model.length_predictor.proj
    with torch.no_grad():
        proj.weight.zero_()
        proj.bias.fill_(-10.0)
        proj.bias[task.model.length_predictor.max_offset + offset] = 10.0


def test_nat_target_has_neither_bos_nor_eos():
    batch = make_batch()
    target, real = nat_targets(batch["tgt_in"], PAD)
    assert target.tolist() == [[13, 14, 15, 16, 17], [18, 19, 20, PAD, PAD]]
    assert real.sum(1).tolist() == [5, 3]
    assert not bool((target == BOS).any() or (target == EOS).any())


def test_random_mask_draws_between_one_and_all_real_positions_uniformly():
    real = torch.tensor([[True] * 4 + [False] * 2]).expand(4000, 6)
    gen = torch.Generator().manual_seed(0)
    masked = random_mask(real, gen)
    assert not bool((masked & ~real).any()), "padding must never be masked"
    counts = masked.sum(1)
    assert int(counts.min()) == 1 and int(counts.max()) == 4
    freq = torch.bincount(counts, minlength=5)[1:].float() / len(counts)
    assert torch.allclose(freq, torch.full((4,), 0.25), atol=0.04), freq
    # every real position gets masked sometimes: the positions themselves are random too
    assert bool(masked[:, :4].any(0).all())


def test_length_predictor_shapes_and_weighted_loss():
    task = make_task()
    batch = make_batch()
    masked = torch.tensor([[True, False, True, False, False], [False, True, False, False, False]])
    out = task.compute_losses(batch, masked)
    n_classes = task.model.length_predictor.n_classes
    assert out["length_logits"].shape == (2, n_classes)
    enc = task.model.encode(batch["src"])
    gold_classes = task.model.length_targets(torch.tensor([5, 3]), enc)
    expected = F.cross_entropy(out["length_logits"], gold_classes)
    assert torch.allclose(out["length_loss"], expected)
    assert torch.allclose(out["loss"], out["token_loss"] + 0.1 * out["length_loss"])
    # the weight is configurable and the length loss trains the length predictor
    for weight, has_grad in ((0.0, False), (2.0, True)):
        other = make_task(length_loss_weight=weight)
        other.load_state_dict(task.state_dict())
        o = other.compute_losses(batch, masked)
        assert torch.allclose(o["loss"], o["token_loss"] + weight * o["length_loss"])
        o["loss"].backward()
        grad = other.model.length_predictor.proj.weight.grad
        assert (grad is not None and bool(grad.abs().sum() > 0)) == has_grad


def test_length_accuracy_counts_exact_lengths():
    task = make_task()
    batch = make_batch()  # source lengths 6, 4; target lengths 5, 3: offset -1 for both
    force_length_offset(task, -1)
    assert float(task.compute_losses(batch)["length_acc"]) == 1.0
    force_length_offset(task, +1)
    assert float(task.compute_losses(batch)["length_acc"]) == 0.0


def test_mask_mode_loss_covers_masked_positions_only_and_copy_mode_all():
    batch = make_batch()
    masked = torch.zeros(2, 5, dtype=torch.bool)
    masked[0, 1] = masked[1, 2] = True
    out = make_task("mask").compute_losses(batch, masked)
    assert int(out["n_tokens"]) == 2
    out_copy = make_task("copy").compute_losses(batch)
    assert int(out_copy["n_tokens"]) == 8


@pytest.mark.parametrize("strategy", [{"strategy": "nat_one_pass"}, {"strategy": "nat_length_beam", "length_beam": 1},
                                      {"strategy": "mask_predict", "iterations": 3, "length_beam": 1}])
def test_decoding_uses_the_predicted_length(strategy):
    task = make_task()
    task.hparams.eos_id = PAD  # PAD is never predicted: no EOS cut, outputs keep their full length
    src = make_batch()["src"]  # source lengths 6 and 4
    for offset in (-2, 3):
        force_length_offset(task, offset)
        enc = task.model.encode(src)
        predicted = task.model.lengths_from_logits(task.model.predict_length(enc), enc)
        assert predicted.tolist() == [6 + offset, 4 + offset]
        hyps = task.search_fn(strategy)(src)
        assert [len(h[0][0]) for h in hyps] == predicted.tolist()


def test_decoder_has_no_causal_mask():
    task = make_task("mask")
    src = make_batch()["src"][:1]
    tokens = torch.tensor([[13, MASK, 15, MASK, 17]])
    enc = task.model.encode(src)
    real = torch.ones_like(tokens, dtype=torch.bool)
    before = task.model.decode(enc, tokens, real)
    changed = tokens.clone()
    changed[0, -1] = 30  # a later decoder input
    after = task.model.decode(enc, changed, real)
    assert not torch.allclose(before[0, 0], after[0, 0]), "the first position must see the last one"


def test_mask_predict_keeps_unmasked_tokens_and_one_iteration_is_one_pass():
    task = make_task()
    task.hparams.eos_id = PAD
    force_length_offset(task, 2)  # lengths 8 and 6
    src = make_batch()["src"]
    one_pass = task.search_fn({"strategy": "nat_one_pass"})(src)
    assert task.search_fn({"strategy": "mask_predict", "iterations": 1, "length_beam": 1})(src) == one_pass

    calls: list[torch.Tensor] = []
    decode = task.model.decode

    def recording_decode(enc, tgt_tokens, tgt_pad_mask=None):
        calls.append(tgt_tokens.clone())
        return decode(enc, tgt_tokens, tgt_pad_mask)

    task.model.decode = recording_decode
    iterations = 4
    hyps = task.search_fn({"strategy": "mask_predict", "iterations": iterations, "length_beam": 1})(src)
    final = [h[0][0] for h in hyps]
    assert len(calls) == iterations
    lengths = torch.tensor([8, 6])
    for t, tokens in enumerate(calls):
        n_masked = (tokens == MASK).sum(1)
        expected = lengths if t == 0 else lengths * (iterations - t) // iterations
        assert n_masked.tolist() == expected.tolist()
        kept = (tokens != MASK) & (tokens != PAD)  # (B, T): not re-predicted in this pass
        if t + 1 < len(calls):  # the state after this pass, where the next pass shows it
            after = calls[t + 1]
            visible = kept & (after != MASK)
        else:
            after = torch.tensor([f + [PAD] * (tokens.size(1) - len(f)) for f in final])
            visible = kept
        assert torch.equal(after[visible], tokens[visible]), f"iteration {t} changed a kept token"
    assert int((calls[1] != MASK).sum()) > 0  # something was kept, so the check above has teeth


def test_translator_reports_average_iterations():
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {t: i for i, t in enumerate(["<pad>", "<s>", "</s>", "<unk>", "<mask>"] + [f"w{i}" for i in range(5, V)])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = backend.to_str()
    task = make_task(tokenizers={"src": tok, "tgt": tok})
    force_length_offset(task, 3)
    translator = task.translator({"strategy": "mask_predict", "iterations": 4})
    out = translator.translate(["w5 w6 w7", "", "w8 w9 w10 w11 w12"])
    assert len(out) == 3 and out[1] == [("", 0.0)]
    assert translator.extra_stats() == {"avg_iterations": 4.0}
    one_pass = task.translator({"strategy": "greedy"})  # greedy is the one-pass alias
    one_pass.translate(["w5 w6 w7"])
    assert one_pass.extra_stats() == {"avg_iterations": 1.0}


def test_unsupported_strategies_are_clear_errors():
    with pytest.raises(ValueError, match="nat_one_pass"):
        make_task().search_fn({"strategy": "beam"})
    with pytest.raises(ValueError, match="decoder_input=mask"):
        make_task("copy").search_fn({"strategy": "mask_predict", "iterations": 4})
    make_task("copy").search_fn({"strategy": "mask_predict", "iterations": 1})  # = one pass: fine


def test_checkpoint_dict_round_trip_rebuilds_the_same_model():
    task = make_task("copy", length_loss_weight=0.3)
    ckpt = {"hyper_parameters": dict(task.hparams), "state_dict": task.state_dict()}
    again = NATTranslationTask.from_checkpoint_dict(ckpt).eval()
    assert again.hparams.length_loss_weight == 0.3 and again.decoder_input == "copy"
    src = make_batch()["src"]
    assert again.search_fn(None)(src) == task.search_fn(None)(src)


@pytest.mark.parametrize("strategy", ["nat_one_pass", "nat_length_beam", "mask_predict"])
def test_collapse_repeats_option_reaches_every_strategy(strategy):
    task = make_task()
    task.hparams.eos_id = PAD  # no EOS cut
    force_length_offset(task, 3)  # lengths 9 and 7: an untrained model repeats itself there
    src = make_batch()["src"]
    plain = [h[0][0] for h in task.search_fn({"strategy": strategy, "length_beam": 1, "iterations": 2})(src)]
    collapsed = [h[0][0] for h in task.search_fn(
        {"strategy": strategy, "length_beam": 1, "iterations": 2, "collapse_repeats": True})(src)]
    expected = [[t for i, t in enumerate(row) if i == 0 or t != row[i - 1]] for row in plain]
    assert collapsed == expected
    assert any(len(e) < len(p) for e, p in zip(expected, plain)), "the fixture should produce repeats"


@pytest.mark.parametrize("decoder_input", ["mask", "copy"])
def test_token_loss_projects_only_scored_positions_and_matches_the_full_loss(decoder_input):
    from transformer.tasks.translation import label_smoothed_nll

    task = make_task(decoder_input)
    batch = make_batch()
    masked = torch.tensor([[True, False, True, False, False], [False, True, True, False, False]])
    out = task.compute_losses(batch, masked)
    target, real = nat_targets(batch["tgt_in"], PAD)
    scored = (masked & real) if decoder_input == "mask" else real
    tokens = target.masked_fill(scored, MASK) if decoder_input == "mask" else target
    full = task.model.decode(task.model.encode(batch["src"]), tokens, real)  # (B, T, V)
    ref, _ = label_smoothed_nll(full, target.masked_fill(~scored, -100), task.hparams.label_smoothing, PAD)
    torch.testing.assert_close(out["token_loss"], ref)
    assert int(out["n_tokens"]) == int(scored.sum())
