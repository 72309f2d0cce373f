"""CTC best-path decoding: collapsing (merge repeats, drop blanks) and ``ctc_one_pass`` on a
scripted model."""

from __future__ import annotations

import pytest
import torch

from transformer.decoding.ctc import collapse_paths, ctc_collapse, ctc_one_pass
from transformer.models.encoder import EncoderOut

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
