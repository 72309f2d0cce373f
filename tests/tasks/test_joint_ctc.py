"""Joint CTC-attention training (``task.ctc_weight``, ``models.JointCTCEncoderDecoder``): at 0 the
translation task's loss and parameters are the plain encoder-decoder's, exactly; above 0 the loss
is ``w * CTC + (1 - w) * cross-entropy``, the CTC term that of a head over the encoder output,
and it sends gradients into the encoder; the head travels in the checkpoint and decoding does
not read it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from transformer.models import EncoderDecoder, JointCTCEncoderDecoder, TransformerConfig
from transformer.tasks.translation import TranslationTask, label_smoothed_nll

MODEL = {"d_model": 16, "n_heads": 2, "n_encoder_layers": 1, "n_decoder_layers": 1, "d_ff": 32, "dropout": 0.0}
PLAIN, JOINT = "transformer.models.EncoderDecoder", "transformer.models.JointCTCEncoderDecoder"
PAD, BOS, EOS = 0, 1, 2


def task(target: str = PLAIN, **kw) -> TranslationTask:
    torch.manual_seed(0)
    return TranslationTask(model={"_target_": target, **MODEL}, vocab_size=30, pad_id=PAD, bos_id=BOS, eos_id=EOS,
                           src_lang="de", tgt_lang="en", label_smoothing=0.1, **kw)


def batch() -> dict:
    src = torch.tensor([[5, 6, 7, 8, 9, 2], [8, 9, 10, 2, 0, 0]])  # (B, S), EOS then PAD
    tgt_in = torch.tensor([[1, 10, 11, 11, 0], [1, 13, 0, 0, 0]])  # BOS + target
    tgt_out = torch.tensor([[10, 11, 11, 2, 0], [13, 2, 0, 0, 0]])  # target + EOS
    return {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out}


def test_a_zero_weight_leaves_the_loss_and_the_parameters_as_the_plain_encoder_decoder_s():
    plain = task()
    assert plain.ctc_weight == 0.0 and type(plain.model) is EncoderDecoder
    torch.manual_seed(0)
    reference = EncoderDecoder(TransformerConfig(vocab_size=30, pad_id=PAD, **MODEL))
    assert plain.model.state_dict().keys() == reference.state_dict().keys()
    for key, value in reference.state_dict().items():
        assert torch.equal(plain.model.state_dict()[key], value), key
    b = batch()
    loss, nll, n_tokens, ctc = plain._loss(b)
    expected, expected_nll = label_smoothed_nll(reference(b["src"], b["tgt_in"]), b["tgt_out"], 0.1, PAD)
    assert ctc is None and n_tokens == 6
    assert torch.equal(loss, expected) and torch.equal(nll, expected_nll)
    # the joint model at weight 0: the same encoder-decoder weights, the same loss; its head unused
    joint = task(JOINT)
    for key, value in reference.state_dict().items():
        assert torch.equal(joint.model.state_dict()[key], value), key
    assert set(joint.model.state_dict()) - set(reference.state_dict()) == {"ctc_proj.weight"}
    assert torch.equal(joint._loss(b)[0], expected)


def test_a_positive_weight_mixes_in_the_ctc_loss_of_the_encoder_positions():
    w = 0.3
    joint = task(JOINT, ctc_weight=w)
    b = batch()
    loss, nll, _, ctc = joint._loss(b)
    model = joint.model
    enc = model.encode(b["src"])
    ce, ce_nll = label_smoothed_nll(model(b["src"], b["tgt_in"]), b["tgt_out"], 0.1, PAD)
    # F.ctc_loss by hand: targets without BOS/EOS, the blank is PAD, per target token
    log_probs = F.log_softmax(model.ctc_proj(enc.memory), -1)  # (B, S, V)
    targets, lengths = torch.tensor([[10, 11, 11], [13, 0, 0]]), torch.tensor([3, 1])
    per_sentence = F.ctc_loss(log_probs.transpose(0, 1), targets, torch.tensor([6, 4]), lengths, blank=PAD,
                              reduction="none")
    torch.testing.assert_close(ctc, per_sentence.sum() / lengths.sum())
    torch.testing.assert_close(nll, ce_nll)
    torch.testing.assert_close(loss, w * ctc + (1 - w) * ce)
    assert ctc.item() > 1.0


def test_the_ctc_term_sends_gradients_into_the_encoder():
    joint, b = task(JOINT, ctc_weight=0.3), batch()
    enc = joint.model.encode(b["src"])
    from transformer.tasks.translation import encoder_ctc_loss

    encoder_ctc_loss(joint.model, enc, b["tgt_in"], PAD)[0].backward()
    grads = {name: p.grad for name, p in joint.model.named_parameters()}
    assert grads["ctc_proj.weight"].abs().sum() > 0
    assert all(g is not None and g.abs().sum() > 0 for n, g in grads.items() if n.startswith("encoder.layers."))
    assert all(g is None for n, g in grads.items() if n.startswith("decoder."))  # the CTC term reads no decoder
    # without the term (weight 0) the head learns nothing
    joint = task(JOINT)
    joint._loss(b)[0].backward()
    assert joint.model.ctc_proj.weight.grad is None


def test_a_positive_weight_needs_the_head_and_the_range_is_declared():
    with pytest.raises(ValueError, match="JointCTCEncoderDecoder"):
        task(PLAIN, ctc_weight=0.3)
    from transformer.tasks.build import HyperparameterError, check_arguments

    with pytest.raises(HyperparameterError, match="ctc_weight=1"):
        check_arguments("task", {"ctc_weight": 1.0}, TranslationTask.__init__)


def test_the_head_survives_the_checkpoint_and_decoding_is_the_decoder_s(tmp_path):
    joint = task(JOINT, ctc_weight=0.3)
    with torch.no_grad():
        joint.model.ctc_proj.weight.normal_()
    ckpt = {"state_dict": joint.state_dict(), "hyper_parameters": dict(joint.hparams)}
    back = TranslationTask.from_checkpoint_dict(ckpt)
    assert back.ctc_weight == 0.3 and isinstance(back.model, JointCTCEncoderDecoder)
    assert torch.equal(back.model.ctc_proj.weight, joint.model.ctc_proj.weight)
    src = batch()["src"]
    search = back.eval().search_fn({"strategy": "greedy", "max_len_a": 0.0, "max_len_b": 6})
    plain = back.model.attention_model()
    assert type(plain) is EncoderDecoder and plain.encoder is back.model.encoder
    assert "ctc_proj.weight" not in plain.state_dict()
    back.model = plain
    assert back.search_fn({"strategy": "greedy", "max_len_a": 0.0, "max_len_b": 6})(src) == search(src)


def test_the_ctc_alignment_numbers_the_tokens_of_the_best_path():
    """Each position of the Viterbi path (tasks.glancing.ctc_best_alignment, tested against every
    path in test_ctc_task.py) gets the index of the target token it emits: two recordings of one
    digit, a blank between them, are tokens j and j + 1."""
    from transformer.tasks.ctc_loss import ctc_alignment
    from transformer.tasks.glancing import ctc_best_alignment

    torch.manual_seed(0)
    blank = 0
    log_probs = torch.randn(3, 8, 4).log_softmax(-1)
    target, lengths, frames = torch.tensor([[1, 2, 2], [3, 3, 3], [2, 0, 0]]), torch.tensor([3, 3, 1]), torch.tensor([8, 4, 5])
    index = ctc_alignment(log_probs, frames, target, lengths, blank)  # (B, U)
    ids, feasible = ctc_best_alignment(log_probs, frames, target, lengths, blank, pad_id=-1)
    assert feasible.tolist() == [True, False, True]  # 3 3 3 needs 5 positions
    assert index[1].tolist() == [-1] * 8 and index[2, 5:].tolist() == [-1] * 3
    for b in (0, 2):
        emitted = [(u, int(i)) for u, i in enumerate(index[b].tolist()) if i >= 0]
        assert [int(target[b, i]) for _, i in emitted] == [int(ids[b, u]) for u, _ in emitted]
        assert sorted({i for _, i in emitted}) == list(range(int(lengths[b])))  # each token, in order
        assert [i for _, i in emitted] == sorted(i for _, i in emitted)
        blanks = [u for u in range(int(frames[b])) if int(ids[b, u]) == blank]
        assert blanks == [u for u in range(int(frames[b])) if int(index[b, u]) == -1]


def test_the_attention_guide_adds_the_mass_off_the_ctc_path_and_trains_the_decoder_s_attention():
    from transformer.tasks.translation import encoder_ctc_loss, guided_attention_losses

    g, w = 0.5, 0.3
    guided, plain = task(JOINT, ctc_weight=w, attention_guide=g), task(JOINT, ctc_weight=w)
    b = batch()
    loss, nll, _, ctc = guided._loss(b)
    base_loss, base_nll, _, base_ctc = plain._loss(b)  # the same weights (seed 0)
    torch.testing.assert_close(ctc, base_ctc)
    torch.testing.assert_close(nll, base_nll)
    enc = guided.model.encode(b["src"])
    _, path = encoder_ctc_loss(guided.model, enc, b["tgt_in"], PAD, align=True)
    _, _, guide = guided_attention_losses(guided.model, enc, b["tgt_in"], b["tgt_out"], path, 0.1, PAD)
    torch.testing.assert_close(loss, base_loss + g * guide)
    # by hand: head 0 of the last cross-attention, row j's weight on the frames emitting token j
    _, weights = guided.model.decoder(b["tgt_in"], enc.memory, enc.src_pad_mask, None, need_weights=True)
    cross = weights[-1][1][:, 0]  # (B, T, S)
    terms = [-torch.log(cross[s, j][path[s] == j].sum()) for s in range(2) for j in range(3) if (path[s] == j).any()]
    assert len(terms) == 4  # 3 tokens + 1 (the sentences' real tokens)
    torch.testing.assert_close(guide, torch.stack(terms).mean())
    # the guide trains the decoder's cross-attention (its queries) and the encoder, not the CTC head
    guide.backward()
    grads = {name: p.grad for name, p in guided.model.named_parameters()}
    assert grads["decoder.layers.0.cross_attn.w_q.weight"].abs().sum() > 0
    assert grads["ctc_proj.weight"] is None


def test_the_attention_guide_needs_the_ctc_head_trained():
    with pytest.raises(ValueError, match=r"task.attention_guide=0.5 follows the CTC head's alignment"):
        task(JOINT, attention_guide=0.5)
