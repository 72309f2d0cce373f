"""CTC best-path decoding: collapsing (merge repeats, drop blanks) and ``ctc_one_pass`` on a
scripted model."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from transformer.decoding.ctc import collapse_paths, ctc_beam, ctc_collapse, ctc_one_pass, prefix_beam
from transformer.models.transformer import EncoderOut

BLANK, PAD, BOS, EOS = 4, 0, 1, 2


@pytest.mark.parametrize("path, expected", [
    ([], []),
    ([BLANK, BLANK], []),
    ([7, 7, 7], [7]),
    ([7, BLANK, 7], [7, 7]),
    ([7, 7, BLANK, BLANK, 8, 8, 7], [7, 8, 7]),
    ([BLANK, 5, 6, BLANK, 6, 6, BLANK], [5, 6, 6]),
])
def test_collapse_merges_repeats_then_drops_blanks(path, expected):
    assert ctc_collapse(path, BLANK) == expected
    padded = torch.tensor([path + [PAD] * 3]) if path else torch.full((1, 3), PAD)
    real = torch.zeros(padded.shape, dtype=torch.bool)
    real[0, : len(path)] = True
    assert collapse_paths(padded, real, BLANK) == [expected]


class ScriptedCTC:
    """Logits favouring a fixed path per row; two real decoder positions per source token."""

    blank_id = BLANK
    output_ids = None  # the whole vocabulary, no shortlist

    def __init__(self, paths: list[list[int]], vocab: int = 12):
        self.paths, self.vocab = paths, vocab

    def encode(self, src):
        mask = src.ne(PAD)
        return EncoderOut(torch.zeros(*src.shape, 1), mask)

    def decoder_mask(self, enc):
        n = enc.src_pad_mask.sum(1) * 2
        return torch.arange(enc.src_pad_mask.size(1) * 2).unsqueeze(0) < n.unsqueeze(1)

    def decode(self, enc):
        u = enc.src_pad_mask.size(1) * 2
        logits = torch.zeros(len(self.paths), u, self.vocab)
        logits[..., PAD] = 50.0  # padding positions prefer PAD, which decoding must ban and ignore
        for b, path in enumerate(self.paths):
            for t, tok in enumerate(path):
                logits[b, t, tok] = 10.0
        return logits


def test_one_pass_takes_the_argmax_path_of_the_real_positions():
    src = torch.tensor([[5, 6, 7], [8, 9, PAD]])
    model = ScriptedCTC([[BLANK, 7, 7, BLANK, 8, 8], [9, BLANK, 9, 10]])
    ids, stats = ctc_one_pass(model, src, pad_id=PAD, eos_id=EOS, ban_ids=(BOS,), return_stats=True)
    assert ids == [[7, 8], [9, 9, 10]]
    assert stats.lengths == [2, 3] and stats.iterations == [1, 1]
    assert all(s < 0 for s in stats.scores)


def test_one_pass_cuts_at_eos_and_never_emits_banned_ids():
    src = torch.tensor([[5, 6, 7]])
    model = ScriptedCTC([[7, BOS, EOS, 8, 8, 9]])
    assert ctc_one_pass(model, src, pad_id=PAD, eos_id=EOS, ban_ids=(BOS,)) == [[7]]


# ------------------------------------------------------------------ prefix beam search
def exact_best_output(log_probs: np.ndarray, blank: int) -> tuple[list[int], float]:
    """Every path enumerated, collapsed, and its probability added to its output's."""
    totals: dict[tuple[int, ...], float] = {}
    for path in itertools.product(range(log_probs.shape[1]), repeat=log_probs.shape[0]):
        out = tuple(ctc_collapse(path, blank))
        totals[out] = np.logaddexp(totals.get(out, -np.inf), sum(log_probs[t, c] for t, c in enumerate(path)))
    best = max(totals, key=totals.get)
    return list(best), float(totals[best])


@pytest.mark.parametrize("seed", range(6))
def test_prefix_beam_with_room_for_every_prefix_finds_the_most_probable_output(seed):
    rng = np.random.default_rng(seed)
    u, k, blank = 5, 3, 0
    log_probs = torch.log_softmax(torch.from_numpy(rng.normal(0, 1.5, (u, k))), -1).numpy()
    expected, lp = exact_best_output(log_probs, blank)
    ids, score = prefix_beam(log_probs, blank, beam_size=1000, top_k=k)
    assert ids == expected and score == pytest.approx(lp, abs=1e-9)


def test_prefix_beam_can_beat_the_best_path():
    # The best path is all blanks (0.4^3 = 0.064), but the output "1" gathers six paths
    # (1__, _1_, __1, 11_, _11, 111): 0.168 + 0.098 + 0.043 = 0.309.
    log_probs = np.log(np.array([[0.4, 0.35, 0.25]] * 3))
    path = log_probs.argmax(1).tolist()
    assert ctc_collapse(path, 0) == []
    ids, _ = prefix_beam(log_probs, 0, beam_size=8, top_k=3)
    assert ids != [] and ids == exact_best_output(log_probs, 0)[0]


def test_ctc_beam_on_a_peaked_model_equals_the_one_pass_and_bans_ids():
    src = torch.tensor([[5, 6, 7], [8, 9, PAD]])
    model = ScriptedCTC([[BLANK, 7, 7, BLANK, 8, 8], [9, BLANK, 9, 10]])
    one = ctc_one_pass(model, src, pad_id=PAD, eos_id=EOS, ban_ids=(BOS,))
    beam, stats = ctc_beam(model, src, pad_id=PAD, beam_size=4, top_k=3, eos_id=EOS, ban_ids=(BOS,))
    assert beam == one == [[7, 8], [9, 9, 10]]
    assert stats.lengths == [2, 3] and all(s <= 0 for s in stats.scores)


def test_a_blank_penalty_lets_a_close_runner_up_token_replace_the_blank():
    src = torch.tensor([[5, 6, 7]])
    model = ScriptedCTC([[7, BLANK, 8, BLANK, 9, 9]])
    real_decode = model.decode

    def decode(enc):  # token 6 trails the blank by 3 at the two blank positions
        logits = real_decode(enc)
        logits[0, [1, 3], 6] = 7.0
        return logits
    model.decode = decode
    for search in (ctc_one_pass, lambda *a, **k: ctc_beam(*a, beam_size=4, top_k=3, **k)[0]):
        assert search(model, src, pad_id=PAD, ban_ids=(BOS,), blank_penalty=2.9) == [[7, 8, 9]]
        assert search(model, src, pad_id=PAD, ban_ids=(BOS,), blank_penalty=3.1) == [[7, 6, 8, 6, 9]]
