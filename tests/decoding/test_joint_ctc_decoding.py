"""Joint CTC/attention decoding (``decoding.joint_ctc``, ``decode.ctc_weight``): the CTC prefix
score of a prefix is the summed CTC probability of every output it starts, and of a whole output
(at EOS) its CTC probability, so at weight 1 the steps of a hypothesis add up to ``-F.ctc_loss``;
greedy and beam search take the wrapped model as they are, and the row bookkeeping of beam search
(first step once per sentence, reorders, dropped sentences) keeps each row's prefix."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from transformer.decoding.beam import beam_search
from transformer.decoding.greedy import greedy_search
from transformer.decoding.joint_ctc import JointCTCDecoding
from transformer.models import JointCTCEncoderDecoder, TransformerConfig

PAD, BOS, EOS, V = 0, 1, 2, 6  # the blank is PAD; real tokens 3..5


def model() -> JointCTCEncoderDecoder:
    torch.manual_seed(0)
    m = JointCTCEncoderDecoder(TransformerConfig(vocab_size=V, pad_id=PAD, d_model=16, n_heads=2, n_encoder_layers=1,
                                                 n_decoder_layers=1, d_ff=32, dropout=0.0))
    with torch.no_grad():
        m.ctc_proj.weight.mul_(8.0)  # a peaked CTC head: the scores differ a lot between outputs
    return m.eval()


def ctc_log_prob(log_probs: torch.Tensor, y: list[int]) -> float:
    """``log p_ctc(y)`` over one row's ``log_probs (S, V)``."""
    if not y:
        return float(log_probs[:, PAD].sum())
    return -float(F.ctc_loss(log_probs.unsqueeze(1), torch.tensor([y]), torch.tensor([log_probs.size(0)]),
                             torch.tensor([len(y)]), blank=PAD, reduction="sum", zero_infinity=False))


@torch.no_grad()
def step_scores(joint: JointCTCDecoding, src: torch.Tensor, prefix: list[int]):
    """Each step's joint scores ``(V,)`` along ``prefix``, one row, greedy bookkeeping."""
    enc = joint.encode(src)
    cache, tokens, out = joint.init_cache(enc), torch.tensor([[BOS]]), []
    for token in [*prefix, None]:
        scores, cache = joint.decode_step(tokens, enc, cache)
        out.append(scores[0])
        tokens = torch.tensor([[token]]) if token is not None else None
    return enc, out


def test_at_weight_one_the_steps_add_up_to_prefix_and_output_ctc_probabilities():
    joint = JointCTCDecoding(model(), 1.0, EOS)
    src = torch.tensor([[3, 4, 5, 3, 2]])  # 5 encoder positions
    y = [4, 4, 3]
    enc, steps = step_scores(joint, src, y)
    x = enc.log_probs[0]  # (S, V)
    # every output the head can emit (each id but the blank), with its CTC log-probability
    outputs = {o: ctc_log_prob(x, list(o)) for n in range(x.size(0) + 1) for o in itertools.product(range(1, V), repeat=n)}
    total = 0.0
    for i, token in enumerate(y):
        total += float(steps[i][token])
        prefix = tuple(y[: i + 1])
        # ψ(prefix): the probability of every output that starts with it
        psi = torch.logsumexp(torch.tensor([lp for o, lp in outputs.items() if o[: len(prefix)] == prefix]), 0)
        assert total == pytest.approx(float(psi), abs=1e-4)
    assert total + float(steps[len(y)][EOS]) == pytest.approx(ctc_log_prob(x, y), abs=1e-4)
    assert float(steps[0][EOS]) == pytest.approx(ctc_log_prob(x, []), abs=1e-4)  # the empty output


@torch.no_grad()
def test_the_weight_mixes_the_decoder_s_log_probabilities():
    m = model()
    src, w = torch.tensor([[3, 4, 5, 3, 2]]), 0.3
    _, joint = step_scores(JointCTCDecoding(m, w, EOS), src, [4])
    _, ctc = step_scores(JointCTCDecoding(m, 1.0, EOS), src, [4])
    enc = m.encode(src)
    cache = m.init_cache(enc)
    att0, cache = m.decode_step(torch.tensor([[BOS]]), enc, cache)
    att1, _ = m.decode_step(torch.tensor([[4]]), enc, cache)
    for got, c, a in zip(joint, ctc, (att0[0], att1[0])):
        real = torch.isfinite(c)
        torch.testing.assert_close(got[real], (w * c + (1 - w) * a)[real])


def test_beam_and_greedy_search_keep_each_row_s_prefix():
    """A batch decoded together gives each sentence what it gets alone: the first step's rows are
    copied to the beams, beams reorder and finished sentences leave the batch with their state."""
    joint = JointCTCDecoding(model(), 0.5, EOS)
    src = torch.tensor([[3, 4, 5, 3, 2, 0, 0], [5, 5, 4, 3, 4, 3, 2], [4, 2, 0, 0, 0, 0, 0]])
    together = beam_search(joint, src, BOS, EOS, PAD, beam_size=3, max_len_a=0.0, max_len_b=6, n_best=3)
    for i in range(src.size(0)):
        row = src[i : i + 1, : int(src[i].ne(PAD).sum())]
        alone = beam_search(joint, row, BOS, EOS, PAD, beam_size=3, max_len_a=0.0, max_len_b=6, n_best=3)[0]
        assert [h.tokens for h in together[i]] == [h.tokens for h in alone]
        assert [h.score for h in together[i]] == pytest.approx([h.score for h in alone], abs=1e-4)
    greedy = greedy_search(joint, src, BOS, EOS, PAD, max_len_a=0.0, max_len_b=6)
    assert greedy == [greedy_search(joint, src[i : i + 1, : int(src[i].ne(PAD).sum())], BOS, EOS, PAD,
                                    max_len_a=0.0, max_len_b=6)[0] for i in range(src.size(0))]


def test_a_model_without_a_ctc_head_is_refused():
    from transformer.models import EncoderDecoder

    plain = EncoderDecoder(TransformerConfig(vocab_size=V, pad_id=PAD, d_model=16, n_heads=2, n_encoder_layers=1,
                                             n_decoder_layers=1, d_ff=32))
    with pytest.raises(ValueError, match="needs a model with a CTC head"):
        JointCTCDecoding(plain, 0.3, EOS)
