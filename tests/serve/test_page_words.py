"""Attention between words for the page: pieces grouped into words as each tokenizer marks a
word's start (byte-level ``Ġ``, SentencePiece ``▁``), a source word the sum of its pieces'
weights and a target word the mean of its pieces' rows, and the served answers that carry them."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("fastapi")

from serve_models import SENTENCES  # noqa: E402

from transformer.data.core.tokenizer import SubwordTokenizer  # noqa: E402
from transformer.serve.served import word_attention, word_groups  # noqa: E402


@pytest.fixture(scope="module")
def tok() -> SubwordTokenizer:
    return SubwordTokenizer.train(SENTENCES, vocab_size=300)


def test_byte_level_pieces_group_into_the_sentence_words(tok):
    text = "ein hund läuft über die wiesenblumen .  x"
    ids = tok.encode(text) + [tok.eos_id]
    word_of, words = word_groups(tok, ids)
    assert len(ids) > len(words)  # the test means something only if words were cut into pieces
    assert words == text.split() + ["</s>"]
    assert word_of == sorted(word_of) and set(word_of) == set(range(len(words)))  # contiguous, none empty
    for w, word in enumerate(words[:-1]):
        assert tok.decode([i for i, v in zip(ids, word_of) if v == w]).strip() == word


class SentencePieceLike:
    """Pieces marked as SentencePiece marks them: ``▁`` starts a word; ``</s>`` special."""

    unk_id = 8

    def __init__(self, pieces: list[str]):
        self.pieces = pieces
        self.special_ids = frozenset({0, self.unk_id})

    def id_to_token(self, i: int) -> str:
        return self.pieces[i]

    def decode(self, ids) -> str:
        return "".join(self.pieces[i] for i in ids if i not in self.special_ids).replace("\u2581", " ").strip()


def test_sentencepiece_word_starts():
    fake = SentencePieceLike(["</s>", "\u2581Ein", "\u2581Hund", "e", "\u2581", "lä", "uft", "\u2581.", "<unk>",
                              "\u2581l"])
    word_of, words = word_groups(fake, [1, 2, 3, 4, 5, 6, 7, 9, 8, 6, 0])
    # the lone ▁ joins the word after it; <unk> stays inside its word
    assert words == ["Ein", "Hunde", "läuft", ".", "l<unk>uft", "</s>"]
    assert word_of == [0, 1, 1, 2, 2, 2, 3, 4, 4, 4, 5]


def test_word_attention_sums_source_pieces_and_averages_target_pieces():
    g = torch.Generator().manual_seed(0)
    att = torch.softmax(torch.randn(2, 3, 5, 6, generator=g), dim=-1)  # (L, H, T, S)
    tgt_word, src_word = [0, 0, 1, 2, 2], [0, 1, 1, 1, 2, 3]
    words = word_attention(att, tgt_word, src_word)
    assert words.shape == (2, 3, 3, 4)
    for t in range(3):
        rows = [i for i, w in enumerate(tgt_word) if w == t]
        for s in range(4):
            cols = [j for j, w in enumerate(src_word) if w == s]
            expected = att[..., rows, :][..., cols].sum(-1).mean(-1)
            torch.testing.assert_close(words[..., t, s], expected)
    torch.testing.assert_close(words.sum(-1), torch.ones(2, 3, 3))  # a row is still a distribution


def test_a_translation_answer_carries_the_word_view(served):
    model = next(m for m in served if m.id == "at")
    (out,) = model.predict(["ein hund läuft über die wiese ."], model.settings({"attention": True}))
    att = out["attention"]
    assert att["source_words"] == "ein hund läuft über die wiese .".split() + ["</s>"]
    assert len(att["source_word"]) == len(att["source"]) and len(att["target_word"]) == len(att["target"])
    assert att["target_words"][-1] == "</s>" and "\u00b7" not in att["target_words"]
    layers, heads = len(att["cross"]), len(att["cross"][0])
    words = torch.tensor(att["cross_words"])
    assert words.shape == (layers, heads, len(att["target_words"]), len(att["source_words"]))
    expected = word_attention(torch.tensor(att["cross"]), att["target_word"], att["source_word"])
    torch.testing.assert_close(words, expected.float(), atol=2e-4, rtol=0)


def test_a_classification_answer_sums_the_pooling_over_words(served):
    model = next(m for m in served if m.id == "sent")
    (out,) = model.predict(["a dog runs across the meadow"], model.settings({"attention": True}))
    att = out["attention"]
    assert att["words"] == "a dog runs across the meadow".split()
    pooling, words = torch.tensor(att["pooling"]), torch.tensor(att["pooling_words"])
    assert words.shape == (pooling.shape[0], len(att["words"]))
    torch.testing.assert_close(words.sum(-1), pooling.sum(-1), atol=1e-3, rtol=0)
    for w in range(len(att["words"])):
        pieces = [i for i, v in enumerate(att["word"]) if v == w]
        torch.testing.assert_close(words[:, w], pooling[:, pieces].sum(-1), atol=1e-3, rtol=0)


def test_a_marian_folder_groups_its_sentencepiece_pieces_into_words(tmp_path):
    """A SentencePiece tokenizer (a Marian folder served as ``hf:``) marks a word's start with
    ``▁``: its pieces group into the sentence's words, ``</s>`` alone."""
    pytest.importorskip("transformers")
    pytest.importorskip("sentencepiece")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hub"))
    from marian_folder import write_marian_folder
    from serve_models import serve_cfg

    from transformer.cli import serve as serve_cli

    folder = write_marian_folder(tmp_path / "marian")
    (model,) = serve_cli.check(serve_cfg(f"models=[{{id:m,ckpt_path:'hf:{folder}',max_len_a:0,max_len_b:6}}]"))
    text = "ein hund läuft über die wiese ."
    (out,) = model.predict([text], model.settings({"attention": True}))
    att = out["attention"]
    tokenizer = model.task.src_tokenizer
    assert type(tokenizer).__name__ == "SentencePieceTokenizer" and not hasattr(tokenizer, "word_starts")
    # the tiny vocabulary lacks "ä": that word keeps an <unk> inside
    assert att["source_words"] == [w.replace("ä", "<unk>") for w in text.split()] + ["</s>"]
    assert len(att["source"]) > len(att["source_words"])
    assert len(att["target_word"]) == len(att["target"]) and att["target_words"][-1] == "</s>"


def test_the_hidden_attribute_wins_over_a_class_s_display():
    """The page hides controls a model does not take with ``hidden`` (the language row of a
    bilingual model); a class that sets ``display`` (``.row`` is a flex box) would show them again
    unless the stylesheet gives ``[hidden]`` the last word."""
    import re
    from pathlib import Path

    import transformer.serve

    css = (Path(transformer.serve.__file__).parent / "static" / "page.css").read_text(encoding="utf-8")
    html = (Path(transformer.serve.__file__).parent / "static" / "index.html").read_text(encoding="utf-8")
    assert re.search(r'class="row" id="langs-row" hidden', html)  # the case this guards
    assert re.search(r"\[hidden\]\s*\{\s*display:\s*none\s*!important;?\s*\}", css)
