"""CTCTranslationTask and the CTC pieces it trains with: the loss against a brute-force sum over
alignments, the Viterbi alignment glancing reveals, sources too short for their target, glancing,
and a tiny model that learns a few sentences exactly in one pass."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from model_configs import model_config

from transformer.decoding.ctc import ctc_collapse
from transformer.tasks.build import task_class
from transformer.tasks.checkpoint import TASK_KEY
from transformer.tasks.ctc import CTCTranslationTask, ctc_losses
from transformer.tasks.glancing import ctc_best_alignment, ctc_required_lengths

PAD, BOS, EOS, MASK, V = 0, 1, 2, 4, 40


def make_task(**overrides) -> CTCTranslationTask:
    cfg = model_config("nat_ctc_tiny")
    cfg.update(overrides.pop("model", {}))
    kwargs = dict(model=cfg, vocab_size=V, pad_id=PAD, bos_id=BOS, eos_id=EOS, src_lang="de",
                  tgt_lang="en", mask_id=MASK)
    kwargs.update(overrides)
    return CTCTranslationTask(**kwargs)


def make_batch(sources, targets) -> dict:
    """Sources get EOS, targets BOS (``tgt_in``), both right-padded."""
    s = max(len(x) for x in sources) + 1
    t = max(len(x) for x in targets) + 1
    src = torch.full((len(sources), s), PAD)
    tgt_in = torch.full((len(targets), t), PAD)
    for i, (x, y) in enumerate(zip(sources, targets)):
        src[i, : len(x) + 1] = torch.tensor(x + [EOS])
        tgt_in[i, : len(y) + 1] = torch.tensor([BOS] + y)
    return {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_in}


def brute_force_nll(log_probs: torch.Tensor, target: list[int], blank: int) -> float:
    """-log of the summed probability of every path of ``log_probs (U, V)`` collapsing to ``target``."""
    u, v = log_probs.shape
    total = 0.0
    for path in itertools.product(range(v), repeat=u):
        if ctc_collapse(path, blank) == target:
            total += math.exp(sum(float(log_probs[t, k]) for t, k in enumerate(path)))
    return -math.log(total)


def best_path_brute_force(log_probs: torch.Tensor, target: list[int], blank: int) -> tuple[float, tuple]:
    u, v = log_probs.shape
    paths = [p for p in itertools.product(range(v), repeat=u) if ctc_collapse(p, blank) == target]
    return max((sum(float(log_probs[t, k]) for t, k in enumerate(p)), p) for p in paths)


@pytest.mark.parametrize("target", [[1, 2], [1, 1], [2], [1, 2, 1]])
def test_ctc_loss_is_the_sum_over_all_alignments(target):
    torch.manual_seed(len(target))
    blank, u = 3, 5
    log_probs = torch.randn(2, u, 4).log_softmax(-1)  # (B, U, V); row 1 has only 4 real positions
    targets = torch.tensor([target, target])
    loss_sum, n_tokens, n_bad = ctc_losses(log_probs, torch.tensor([u, u - 1]), targets,
                                           torch.tensor([len(target)] * 2), blank)
    expected = brute_force_nll(log_probs[0], target, blank) + brute_force_nll(log_probs[1, : u - 1], target, blank)
    assert float(loss_sum) == pytest.approx(expected, rel=1e-5)
    assert int(n_tokens) == 2 * len(target) and int(n_bad) == 0


@pytest.mark.parametrize("target", [[1, 2], [1, 1], [2, 2, 1], [1]])
def test_best_alignment_is_the_most_probable_valid_path(target):
    torch.manual_seed(7 + len(target))
    blank, u = 3, 6
    log_probs = torch.randn(1, u, 4).log_softmax(-1)
    path, feasible = ctc_best_alignment(log_probs, torch.tensor([u]), torch.tensor([target]),
                                        torch.tensor([len(target)]), blank, pad_id=0)
    assert bool(feasible[0])
    assert ctc_collapse(path[0].tolist(), blank) == target  # a valid alignment of the target
    best_score, _ = best_path_brute_force(log_probs[0], target, blank)
    score = float(log_probs[0].gather(1, path[0].unsqueeze(1)).sum())
    assert score == pytest.approx(best_score, abs=1e-5)


def test_best_alignment_respects_input_lengths_and_flags_infeasible_rows():
    log_probs = torch.randn(3, 6, 5).log_softmax(-1)
    targets = torch.tensor([[1, 2, 0], [1, 1, 1], [2, 0, 0]])
    path, feasible = ctc_best_alignment(log_probs, torch.tensor([4, 4, 6]), targets,
                                        torch.tensor([2, 3, 1]), blank_id=4, pad_id=0)
    assert feasible.tolist() == [True, False, True]  # 1 1 1 needs 5 positions (two blanks)
    assert path[0, 4:].tolist() == [0, 0] and ctc_collapse(path[0, :4].tolist(), 4) == [1, 2]
    assert path[1].tolist() == [0] * 6
    assert ctc_collapse(path[2].tolist(), 4) == [2]


def test_required_lengths_count_a_blank_between_equal_neighbours():
    targets = torch.tensor([[5, 5, 6, 6, 6], [5, 6, 5, 0, 0], [7, 7, 0, 0, 0]])
    assert ctc_required_lengths(targets, torch.tensor([5, 3, 1])).tolist() == [8, 3, 1]


def test_sources_too_short_for_their_target_give_a_finite_loss_and_are_counted():
    task = make_task()
    batch = make_batch([[5], [6, 7, 8]], [[9, 10, 11, 12, 13], [9, 10]])  # λ S = 4 < 5 for row 0
    out = task.compute_losses(batch)
    assert torch.isfinite(out["loss"]) and int(out["n_infeasible"]) == 1 and int(out["n_tokens"]) == 2
    out["loss"].backward()
    assert all(torch.isfinite(p.grad).all() for p in task.parameters() if p.grad is not None)


def test_ctc_glancing_reveals_floor_ratio_times_the_distance_to_the_best_alignment():
    task = make_task()
    batch = make_batch([[5, 6, 7], [8, 9]], [[10, 11], [12, 13, 14]])
    enc = task.model.encode(batch["src"])
    real = task.model.decoder_mask(enc)
    target = batch["tgt_in"][:, 1:]
    lengths = target.ne(PAD).sum(1)
    log_probs = task.model.decode(enc).log_softmax(-1)
    align, _ = ctc_best_alignment(log_probs, real.sum(1), target, lengths, MASK, PAD)
    errors = (log_probs.argmax(-1).ne(align) & real).sum(1)
    for ratio in (0.3, 0.5, 1.0):
        tokens, reveal = task.glance(enc, real, target, lengths, ratio)
        assert reveal.sum(1).tolist() == [math.floor(ratio * e) for e in errors.tolist()]
        assert not bool((reveal & ~real).any())
        assert torch.equal(tokens[real], align[real])
        assert all(ctc_collapse(tokens[b, : int(real[b].sum())].tolist(), MASK) == target[b, : int(lengths[b])].tolist()
                   for b in range(2))


def test_glancing_second_pass_reads_the_revealed_alignment_tokens():
    task = make_task().eval()
    batch = make_batch([[5, 6, 7]], [[10, 11]])
    enc = task.model.encode(batch["src"])
    reveal = torch.zeros(1, 8, dtype=torch.bool)
    reveal[0, 2] = True
    tokens = torch.full((1, 8), MASK)
    tokens[0, 2] = 10
    plain, glanced = task.model.decode(enc), task.model.decode(enc, tokens, reveal)
    assert not torch.allclose(plain, glanced)
    tokens[0, 5] = 11  # an unrevealed position's token is never read
    torch.testing.assert_close(task.model.decode(enc, tokens, reveal), glanced)


def test_tiny_ctc_model_learns_a_few_sentences_exactly_in_one_pass():
    torch.manual_seed(0)
    task = make_task(model={"d_model": 64, "d_ff": 128, "n_heads": 4, "n_decoder_layers": 2},
                     glancing={"ratio_start": 0.5, "ratio_end": 0.3, "anneal_steps": 100})
    sources = [[5, 6, 7, 8], [9, 10, 11], [12, 13, 14, 15, 16], [17, 18]]
    targets = [[20, 21, 22], [23, 23, 24, 25], [26, 27, 28, 29, 30, 31], [32]]
    batch = make_batch(sources, targets)
    opt = torch.optim.Adam(task.parameters(), lr=3e-3)
    search = task.search_fn({"strategy": "ctc_one_pass"})
    for step in range(300):
        task.train()
        opt.zero_grad()
        task.compute_losses(batch, task.glancing.ratio(step))["loss"].backward()
        opt.step()
        if step % 20 == 19:  # stop as soon as one pass reproduces every target
            task.eval()
            hyps = [h[0][0] for h in search(batch["src"])]
            if hyps == targets:
                break
    assert hyps == targets


def test_checkpoint_round_trip_and_strategy_errors(tmp_path):
    task = make_task(glancing={"ratio_start": 0.5, "ratio_end": 0.3, "anneal_steps": 10}).eval()
    ckpt = {TASK_KEY: "nat_ctc", "hyper_parameters": dict(task.hparams), "state_dict": task.state_dict()}
    again = task_class("nat_ctc").from_checkpoint_dict(ckpt).eval()
    src = make_batch([[5, 6, 7]], [[8]])["src"]
    for strategy in ("ctc_one_pass", "nat_one_pass", "greedy"):
        assert again.search_fn({"strategy": strategy})(src) == task.search_fn({"strategy": "ctc_one_pass"})(src)
    with pytest.raises(ValueError, match="non-autoregressive CTC"):
        task.search_fn({"strategy": "mask_predict"})
    assert again.max_len == 256 // 2
    with pytest.raises(ValueError, match="ratios in"):
        make_task(glancing={"ratio_start": 1.5})
