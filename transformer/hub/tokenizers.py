"""A family's tokenizer built from the files older hub folders keep instead of ``tokenizer.json``:
BERT's and DistilBERT's ``vocab.txt`` (WordPiece), RoBERTa's ``vocab.json`` and ``merges.txt``
(byte-level BPE), each with ``tokenizer_config.json`` (and ``special_tokens_map.json``) for its
settings and special tokens. The result is the ``tokenizers`` library's own pipeline, as the
family's fast tokenizer assembles it, so the ids are those of ``transformers``' tokenizers read
from the same files:

* WordPiece: ``BertNormalizer`` (text cleaning, spaces around CJK characters, lowercasing and
  accent stripping as ``do_lower_case``/``strip_accents`` say: accents go with lowercasing
  unless ``strip_accents`` is false), ``BertPreTokenizer``, ``##`` continuations, one text
  framed ``[CLS] … [SEP]`` (a pair ``[CLS] a [SEP] b [SEP]``, token types 0 then 1).
* Byte-level BPE: GPT-2's byte mapping, the merges in file order, ``add_prefix_space`` as the
  config says (off by default), ``<s> … </s>`` framing (a pair ``<s> a </s></s> b </s>``), and
  ``<mask>`` taking the space before it, as ``RobertaTokenizer`` makes it.

Tokens of ``added_tokens.json`` are added after the vocabulary, at the ids the file gives.

A folder's own ``tokenizer.json`` is read as ``transformers`` reads it (:func:`as_transformers_reads`):
the padding and truncation it may set (sentence-transformers writes ``"padding": {"strategy":
{"Fixed": 128}}`` and ``"truncation": {"max_length": 128}``) are switched off, since a text is
encoded alone and framed by the caller, and the ``tokenizer_config.json`` options a family's
tokenizer class rebuilds its pipeline with (BERT's ``do_lower_case``, ``strip_accents``,
``tokenize_chinese_chars``; RoBERTa's ``add_prefix_space``, ``trim_offsets``) win over the file's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from transformer.files import read_json_object

#: Ids a tokenizer file may give: rows of an embedding (the ``tokenizers`` library's are u32).
ID_LIMIT = 2**31
#: What a folder's tokenizer is read from, in the order tried.
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json + merges.txt")

_BERT_SPECIALS = {"cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "unk_token": "[UNK]",
                  "mask_token": "[MASK]"}
_ROBERTA_SPECIALS = {"bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>",
                     "unk_token": "<unk>", "pad_token": "<pad>", "mask_token": "<mask>"}


class TokenizerFilesError(ValueError):
    """A tokenizer file that cannot be read, named with what is wrong."""


def _json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        return read_json_object(path)
    except ValueError as exc:
        raise TokenizerFilesError(str(exc)) from None


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise TokenizerFilesError(f"{path}: not UTF-8 text") from None


def _check_ids(ids: dict[str, Any], path: Path) -> None:
    """Every id of a piece -> id file a whole number from 0 (a row of the embedding)."""
    for piece, i in ids.items():
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < ID_LIMIT:
            raise TokenizerFilesError(f"{path}: {piece!r} has id {i!r}: expected an id from 0 to {ID_LIMIT - 1}")


def settings(folder: Path) -> dict[str, Any]:
    """``tokenizer_config.json`` with ``special_tokens_map.json`` over it (the map wins, as
    ``transformers`` reads them); a special token saved as ``{"content": ...}`` becomes its text."""
    config = {**_json(folder / "tokenizer_config.json"), **_json(folder / "special_tokens_map.json")}
    for key, value in list(config.items()):
        if key.endswith("_token") and isinstance(value, dict):
            config[key] = value.get("content")
    return config


def _specials(config: dict[str, Any], defaults: dict[str, str]) -> dict[str, str]:
    out = {}
    for key, default in defaults.items():
        value = config.get(key, default)
        if not isinstance(value, str) or not value:
            raise TokenizerFilesError(f"tokenizer_config.json: {key}={value!r}: expected the token's text")
        out[key] = value
    return out


def _check_in(vocab: dict[str, int], specials: dict[str, str], where: Path) -> None:
    """Every special token must be a piece of the file: one it lacks would get an id the model
    has no row for (or another piece's)."""
    for key, token in specials.items():
        if token not in vocab:
            raise TokenizerFilesError(f"{where}: no {token} (the {key.removesuffix('_token')} token) in the vocabulary")


def _id(tok: Tokenizer, token: str, where: str) -> int:
    i = tok.token_to_id(token)
    if i is None:
        raise TokenizerFilesError(f"{where}: no {token} in the vocabulary")
    return i


def _added_tokens(tok: Tokenizer, folder: Path) -> None:
    """The tokens of ``added_tokens.json`` at their ids, after the vocabulary."""
    added = _json(folder / "added_tokens.json")
    _check_ids(added, folder / "added_tokens.json")
    for token, i in sorted(added.items(), key=lambda item: item[1]):
        if tok.token_to_id(token) == i:
            continue
        if i != tok.get_vocab_size(with_added_tokens=True):
            raise TokenizerFilesError(f"{folder / 'added_tokens.json'}: {token!r} at id {i}, but the next free id "
                                      f"is {tok.get_vocab_size(with_added_tokens=True)}")
        tok.add_tokens([AddedToken(token, normalized=False)])


def wordpiece(folder: Path) -> Tokenizer:
    """BERT's (DistilBERT's) WordPiece tokenizer from ``vocab.txt``, one piece a line, its id the
    line number."""
    path = folder / "vocab.txt"
    text = _text(path)
    lines = text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")
    # A repeated line takes the later id, as BertTokenizer's own reading of the file does.
    vocab = {token: i for i, token in enumerate(lines)}
    config = settings(folder)
    specials = _specials(config, _BERT_SPECIALS)
    _check_in(vocab, specials, path)
    lower = bool(config.get("do_lower_case", True))
    strip = config.get("strip_accents")
    tok = Tokenizer(models.WordPiece(vocab, unk_token=specials["unk_token"], continuing_subword_prefix="##",
                                     max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=bool(config.get("tokenize_chinese_chars", True)),
        strip_accents=None if strip is None else bool(strip), lowercase=lower)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in dict.fromkeys(specials.values())])
    _added_tokens(tok, folder)
    cls, sep = specials["cls_token"], specials["sep_token"]
    ids = [(cls, _id(tok, cls, str(path))), (sep, _id(tok, sep, str(path)))]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0", pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1", special_tokens=ids)
    return tok


def _merges(path: Path) -> list[tuple[str, str]]:
    """``merges.txt``: one merge a line, ``a b``, after an optional ``#version`` line."""
    out = []
    for n, line in enumerate(_text(path).split("\n"), 1):
        if not line.strip() or (n == 1 and line.startswith("#version")):
            continue
        parts = line.split(" ")
        if len(parts) != 2:
            raise TokenizerFilesError(f"{path}:{n}: expected two pieces separated by one space, got {line!r}")
        out.append((parts[0], parts[1]))
    return out


def byte_level_bpe(folder: Path) -> Tokenizer:
    """RoBERTa's byte-level BPE tokenizer from ``vocab.json`` (piece -> id) and ``merges.txt``."""
    vocab = _json(folder / "vocab.json")
    if not vocab:
        raise TokenizerFilesError(f"{folder / 'vocab.json'}: expected a mapping of pieces to ids")
    _check_ids(vocab, folder / "vocab.json")
    config = settings(folder)
    specials = _specials(config, _ROBERTA_SPECIALS)
    _check_in(vocab, specials, folder / "vocab.json")
    prefix_space = bool(config.get("add_prefix_space", False))
    tok = Tokenizer(models.BPE(vocab, _merges(folder / "merges.txt"), continuing_subword_prefix="",
                               end_of_word_suffix="", fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix_space)
    tok.decoder = decoders.ByteLevel()
    mask = specials["mask_token"]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in dict.fromkeys(specials.values())
                            if t != mask] + [AddedToken(mask, lstrip=True, special=True, normalized=False)])
    _added_tokens(tok, folder)
    where = str(folder / "vocab.json")
    cls, sep = specials["cls_token"], specials["sep_token"]
    tok.post_processor = processors.RobertaProcessing(
        (sep, _id(tok, sep, where)), (cls, _id(tok, cls, where)),
        trim_offsets=bool(config.get("trim_offsets", True)), add_prefix_space=prefix_space)
    return tok


#: The tokenizer classes ``tokenizer_config.json`` names (``BertTokenizerFast`` too) whose options
#: rebuild BERT's normalizer, and RoBERTa's byte-level pre-tokenizer and framing.
_BERT_CLASSES = ("BertTokenizer", "DistilBertTokenizer")
_ROBERTA_CLASSES = ("RobertaTokenizer",)


#: The tokenizer class ``transformers`` picks by ``config.json``'s ``model_type`` where
#: ``tokenizer_config.json`` names none (``bert-base-uncased``'s has only ``do_lower_case``).
MODEL_TYPE_CLASSES = {"bert": "BertTokenizer", "distilbert": "DistilBertTokenizer", "roberta": "RobertaTokenizer"}


def _class_of(config: dict[str, Any]) -> str:
    name = config.get("tokenizer_class")
    if name is None:
        name = MODEL_TYPE_CLASSES.get(config.get("model_type"))
    return name.removesuffix("Fast") if isinstance(name, str) else ""


def _flag(config: dict[str, Any], key: str, default: bool | None) -> bool | None:
    value = config.get(key, default)
    if value is not None and not isinstance(value, bool):
        raise TokenizerFilesError(f"{key}={value!r}: expected true or false")
    return value


def as_transformers_reads(state: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """A ``tokenizer.json`` state as ``transformers``' ``AutoTokenizer`` encodes with it: no
    padding, no truncation (set per call there, off by default), and the options of
    ``tokenizer_config.json`` (``config``, :func:`settings`; ``model_type``, ``config.json``'s,
    names the class where the file names none) that its tokenizer class applies:
    a BERT-family class sets the ``BertNormalizer``'s lowercasing (``do_lower_case``, default
    true), accent stripping and CJK spacing; RoBERTa's, ``add_prefix_space`` and
    ``trim_offsets`` of its byte-level pre-tokenizer and framing, where the config gives them."""
    state = {**state, "padding": None, "truncation": None}
    name = _class_of(config)
    normalizer = state.get("normalizer")
    if name in _BERT_CLASSES and isinstance(normalizer, dict) and normalizer.get("type") == "BertNormalizer":
        state["normalizer"] = {**normalizer, "lowercase": _flag(config, "do_lower_case", True),
                               "strip_accents": _flag(config, "strip_accents", None),
                               "handle_chinese_chars": _flag(config, "tokenize_chinese_chars", True)}
    if name in _ROBERTA_CLASSES:
        for part in ("pre_tokenizer", "post_processor"):
            node = state.get(part)
            if isinstance(node, dict) and node.get("type") in ("ByteLevel", "RobertaProcessing"):
                state[part] = {**node, **{k: _flag(config, k, None) for k in ("add_prefix_space", "trim_offsets")
                                          if config.get(k) is not None}}
    return state


def from_vocabulary_files(folder: Path) -> Tokenizer | None:
    """The tokenizer of ``folder``'s ``vocab.txt`` or ``vocab.json`` + ``merges.txt``; None: it
    has neither."""
    if (folder / "vocab.txt").is_file():
        return wordpiece(folder)
    if (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file():
        return byte_level_bpe(folder)
    return None


__all__ = ["TOKENIZER_FILES", "TokenizerFilesError", "as_transformers_reads", "byte_level_bpe", "from_vocabulary_files",
           "settings",
           "wordpiece"]
