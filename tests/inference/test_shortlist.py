"""The CTC output shortlist (``inference.shortlist``): a projection cut to the ids of a
target-side text decodes like the whole vocabulary with the other ids banned."""

from __future__ import annotations

import pytest
import torch

from transformer.accel.quantize import int8_dynamic, is_quantized
from transformer.decoding.ctc import ctc_one_pass
from transformer.inference.shortlist import restrict_output, shortlist_ids
from transformer.models.ctc import CTCConfig, CTCNonAutoregressiveModel

PAD, BOS, EOS, BLANK, V = 0, 1, 2, 4, 40


def tiny_ctc(seed: int = 0) -> CTCNonAutoregressiveModel:
    torch.manual_seed(seed)
    return CTCNonAutoregressiveModel(CTCConfig(vocab_size=V, pad_id=PAD, blank_id=BLANK, d_model=32, n_heads=4,
                                               n_encoder_layers=1, n_decoder_layers=1, d_ff=64, dropout=0.0)).eval()


def decode(model, src, ban=()):
    return ctc_one_pass(model, src, pad_id=PAD, eos_id=EOS, ban_ids=(BOS, *ban), return_stats=True)


def test_a_shortlist_of_every_id_decodes_exactly_as_the_whole_vocabulary():
    model = tiny_ctc()
    src = torch.tensor([[5, 6, 7, 8], [9, 10, PAD, PAD]])
    full, full_stats = decode(model, src)
    cut, cut_stats = decode(restrict_output(model, torch.arange(V)), src)
    assert cut == full
    assert cut_stats.scores == pytest.approx(full_stats.scores, abs=1e-5)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_shortlist_decodes_like_banning_every_other_id(seed):
    model = tiny_ctc(seed)
    src = torch.randint(5, V, (4, 6))
    keep = torch.tensor([3, 7, 11, 12, 20, 21, 22, 30, 35])
    cut = restrict_output(model, keep)
    assert cut.decoder.output_proj.weight.shape == (len(keep) + 1, 32)  # the blank joins
    assert cut.output_ids.tolist() == sorted(keep.tolist() + [BLANK])
    others = [i for i in range(V) if i not in keep.tolist() and i not in (BLANK, PAD, BOS)]
    banned, _ = decode(model, src, ban=others)
    ids, _ = decode(cut, src)
    assert ids == banned
    assert all(i in keep.tolist() for row in ids for i in row)
    assert model.output_ids is None and model.decoder.output_proj.weight.shape == (V, 32)  # untouched


def test_a_quantized_model_gets_a_quantized_shortlist():
    model = int8_dynamic(tiny_ctc())
    cut = restrict_output(model, torch.tensor([6, 7, 8]))
    assert is_quantized(cut.decoder.output_proj)
    ids = ctc_one_pass(cut, torch.tensor([[5, 6, 7]]), pad_id=PAD)
    assert all(i in (6, 7, 8) for row in ids for i in row)


class Pieces:
    """A tokenizer whose pieces are characters, id = code point."""

    def encode_batch(self, texts):
        return [[ord(c) for c in t] for t in texts]


def test_shortlist_ids_are_every_token_of_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr("transformer.inference.shortlist.CHUNK_LINES", 2)  # several chunks
    path = tmp_path / "targets.txt"
    path.write_text("ab\nba\ncd\n\ne\n", encoding="utf-8")
    assert shortlist_ids(path, Pieces()).tolist() == [ord(c) for c in "abcde"]


@pytest.mark.parametrize("content, message", [(b"", "no tokens"), (b"ok\n\xff\xfe\n", "not UTF-8")])
def test_an_empty_or_binary_shortlist_file_is_named(tmp_path, content, message):
    path = tmp_path / "bad.txt"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=f"decode.shortlist={path}: {message}"):
        shortlist_ids(path, Pieces())


def test_ids_outside_the_vocabulary_are_refused():
    with pytest.raises(ValueError, match="shortlist ids"):
        restrict_output(tiny_ctc(), torch.tensor([V]))


def blank_positions(model, src, penalty: float) -> int:
    """How many real decoder positions choose the blank under ``penalty``."""
    from transformer.decoding.ctc import banned_scores
    scores, real, vocab = banned_scores(model, src, PAD, (BOS,), blank_penalty=penalty)
    path = scores.argmax(-1)
    path = vocab[path] if vocab is not None else path
    return int((path.eq(BLANK) & real).sum())


@pytest.mark.parametrize("shortlisted", [False, True])
def test_a_blank_penalty_only_ever_trades_blanks_for_tokens(shortlisted):
    model = tiny_ctc(3)
    if shortlisted:  # the penalty must find the blank's column, not column BLANK
        model = restrict_output(model, torch.tensor([3, 7, 11, 12, 20, 21, 22, 30, 35]))
    src = torch.randint(5, V, (4, 6))
    counts = [blank_positions(model, src, p) for p in (-50.0, -1.0, 0.0, 1.0, 50.0)]
    assert counts == sorted(counts, reverse=True) and counts[0] > counts[-1]
    assert counts[-1] == 0  # a huge penalty: the blank never wins
    assert ctc_one_pass(model, src, pad_id=PAD, ban_ids=(BOS,), blank_penalty=-50.0) == [[]] * 4
    assert ctc_one_pass(model, src, pad_id=PAD, ban_ids=(BOS,), blank_penalty=0.0) == \
        ctc_one_pass(model, src, pad_id=PAD, ban_ids=(BOS,))
