"""A tokenizer that carries its own special tokens (BERT's names at BERT's ids) and framing."""

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, processors

from transformer.data.core.tokenizer import SubwordTokenizer


def _wordpiece(specials=("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")) -> Tokenizer:
    vocab = {t: i for i, t in enumerate(["[unused0]", *specials, "the", "movie", "##s", "was", "good"])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.add_special_tokens(list(specials))
    if "[CLS]" in vocab:
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    return tok


def test_a_family_tokenizer_keeps_its_special_ids_and_framing():
    tok = SubwordTokenizer(_wordpiece())
    assert (tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id, tok.mask_id) == (1, 2, 3, 4, 5)
    assert tok.special_ids == {1, 2, 3, 4, 5}
    ids = tok.encode("the movies was good")
    assert ids == [6, 7, 8, 9, 10]
    assert tok.frame(ids) == [3, *ids, 4] and tok.framing == ([3], [4])
    assert tok.word_starts()[7] and not tok.word_starts()[8]  # "##s" continues a word
    assert SubwordTokenizer.from_str(tok.to_str()).mask_id == 5  # the JSON carries it all


def test_our_tokenizer_has_the_first_ids_and_no_framing():
    tok = SubwordTokenizer.train(["the movie was good"] * 20, vocab_size=300)
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id, tok.mask_id) == (0, 1, 2, 3, 4)
    assert tok.framing == ([], []) and tok.frame([7, 8]) == [7, 8]


def test_a_tokenizer_without_a_mask_token_is_refused_by_role():
    with pytest.raises(ValueError, match="no mask token"):
        SubwordTokenizer(_wordpiece(("[PAD]", "[UNK]", "[CLS]", "[SEP]")))
