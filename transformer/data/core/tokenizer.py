"""Subword tokenizer: a thin wrapper over a Hugging Face ``tokenizers.Tokenizer``.

Models: byte-level BPE (default), byte-level Unigram, or a word-level vocabulary (for
tagging baselines). Special tokens of a tokenizer trained here take the first ids, in this
order: ``<pad>``=0, ``<s>``=1 (BOS), ``</s>``=2 (EOS), ``<unk>``=3, ``<mask>``=4 (the
mask-predict NAT decoder needs a mask token).

A pretrained family's tokenizer (``transformer.hub``: BERT's WordPiece, RoBERTa's byte-level
BPE) keeps its own ids and names: ``[PAD]``/``[CLS]``/``[SEP]``/``[UNK]``/``[MASK]`` or
``<pad>``/``<s>``/``</s>``/``<unk>``/``<mask>`` wherever its vocabulary puts them (``[CLS]`` and
``[SEP]`` serve as BOS and EOS), and its post-processor's framing of a text (``[CLS] … [SEP]``,
``<s> … </s>``) is what :meth:`SubwordTokenizer.frame` adds; its normalizer and pre-tokenizer
are its own, so the ``decode(encode(text)) == text`` identity below holds for ours only.

Why byte-level pre-tokenization without a normalizer: the GPT-2 byte-level mapping
(Radford et al. 2019) is lossless, so ``decode(encode(text)) == text`` for every input
(double spaces, tabs, leading/trailing spaces and characters unseen in training
included) and sacreBLEU scores the decoded text directly, with no detokenizer. A
normalizer (NFKC, lowercasing, strip) would break that identity, so none is used.
``add_prefix_space=False`` keeps the first word's bytes exact as well.

A tokenizer for pretraining is trained with ``prefix_space=True`` (RoBERTa's choice): every
word, the first included, is then read with the space before it, so a sentence and the same
words given one by one (``encode_words``, as a tagger reads them) give the same pieces; such a
tokenizer drops the space it added when it decodes.

``encode`` adds no special tokens: collate functions add BOS/EOS where needed.
The whole state is ``tokenizer.json`` (``to_str``), so a checkpoint can carry it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Iterable, Sequence

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from transformer.data.core.sentencepiece_tokenizer import KIND as SENTENCEPIECE
from transformer.data.core.sentencepiece_tokenizer import SentencePieceTokenizer
from transformer.files import write_text

PAD, BOS, EOS, UNK, MASK = "<pad>", "<s>", "</s>", "<unk>", "<mask>"
SPECIAL_TOKENS = [PAD, BOS, EOS, UNK, MASK]
#: The roles of the special tokens, in the order of ``SPECIAL_TOKENS``, with BERT's names for them.
ROLES = ("pad", "bos", "eos", "unk", "mask")
BERT_NAMES = ("[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]")
MODELS = ("bpe", "unigram", "word")


def min_vocab_size(model: str) -> int:
    """The smallest vocabulary a tokenizer ``model`` can have: byte-level BPE and unigram hold
    all 256 bytes and the special tokens; a word-level one, the special tokens."""
    if model == "word":
        return len(SPECIAL_TOKENS)
    return len(pre_tokenizers.ByteLevel.alphabet()) + len(SPECIAL_TOKENS)


def check_tokenizer(d: dict, where: str) -> None:
    """A data config's ``tokenizer_model`` is one this project trains and its ``vocab_size`` one
    that model can reach (every data module's config, before any file is read)."""
    model, size = d.get("tokenizer_model"), d.get("vocab_size")
    if model is None:
        return
    if model not in MODELS:
        raise ValueError(f"{where}.tokenizer_model={model!r}: choose from {', '.join(MODELS)}")
    if isinstance(size, int) and not isinstance(size, bool) and size < min_vocab_size(model):
        raise ValueError(f"{where}.vocab_size={size}: a {model} tokenizer needs at least {min_vocab_size(model)} "
                         f"pieces" + (" (the 256 bytes and the special tokens)" if model != "word" else ""))


class SubwordTokenizer:
    """Encode text to ids and back; ``encode_words`` keeps word boundaries for tagging.

    Build with :meth:`train`, :meth:`load` or :meth:`from_str`.
    """

    def __init__(self, tokenizer: Tokenizer):
        # Specials enter only as ids (collate adds BOS/EOS); a literal "<pad>" in a
        # sentence is ordinary text, so it survives the round trip. (Not serialized by
        # tokenizers, hence set on every construction.)
        tokenizer.encode_special_tokens = True
        self._tok = tokenizer
        state = json.loads(tokenizer.to_str())
        self._ids = special_ids_of(tokenizer)
        self._special_ids = frozenset(self._ids.values()) | {
            t["id"] for t in state.get("added_tokens") or [] if t.get("special")}
        self._framing = framing_of(tokenizer)
        pre = state.get("pre_tokenizer") or {}
        self._prefix_space = bool(pre.get("type") == "ByteLevel" and pre.get("add_prefix_space"))
        model = state.get("model") or {}
        self._word_level = model.get("type") == "WordLevel"
        self._continuing_prefix = model.get("continuing_subword_prefix") if model.get("type") == "WordPiece" else None
        self._inner: Tokenizer | None = None  # the same tokenizer adding no space (encode_continuation)

    # ------------------------------------------------------------------ building

    @classmethod
    def train(
        cls,
        texts: Iterable[str] | Iterable[Sequence[str]],
        vocab_size: int,
        model: str = "bpe",
        min_frequency: int = 2,
        prefix_space: bool = False,
    ) -> "SubwordTokenizer":
        """Learn a vocabulary of ``vocab_size`` entries (specials included) from ``texts``.

        ``texts`` is consumed once, as a stream: strings, or batches (lists) of strings, which
        cross into the Rust trainer with less overhead. Pass an iterator over a corpus's
        Arrow column (:func:`transformer.data.core.cache.iter_text_batches`), not a list of
        every sentence: only the trainer's counts stay in memory.

        For tagging, pass the training *words* (one per item) so pieces never cross words.
        ``model``: ``"bpe"``, ``"unigram"`` or ``"word"`` (word-level; unseen words → ``<unk>``).
        ``prefix_space``: read the first word with a space before it, as every other word (see
        the module docstring; byte-level models only).
        """
        if model not in MODELS:
            raise ValueError(f"tokenizer model {model!r} unknown; choose from {MODELS}")
        if model == "word":
            tok = Tokenizer(models.WordLevel(unk_token=UNK))
            tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
            trainer = trainers.WordLevelTrainer(
                vocab_size=vocab_size, min_frequency=1, special_tokens=SPECIAL_TOKENS, show_progress=False
            )
        else:
            alphabet = pre_tokenizers.ByteLevel.alphabet()
            if vocab_size < min_vocab_size(model):
                raise ValueError(f"vocab_size {vocab_size} is below the byte alphabet + specials ({min_vocab_size(model)})")
            common = dict(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, initial_alphabet=alphabet,
                          show_progress=False)
            if model == "bpe":
                tok, trainer = Tokenizer(models.BPE(unk_token=UNK)), trainers.BpeTrainer(min_frequency=min_frequency,
                                                                                         **common)
            else:
                tok, trainer = Tokenizer(models.Unigram()), trainers.UnigramTrainer(unk_token=UNK, **common)
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix_space, use_regex=True)
            tok.decoder = decoders.ByteLevel()
        tok.train_from_iterator(texts, trainer=trainer)
        # Re-read the serialized form so the object equals what load() gives (Unigram
        # scores can print differently before the first round trip): stable content_hash.
        return cls.from_str(tok.to_str())

    @classmethod
    def from_str(cls, s: str) -> "SubwordTokenizer":
        """Rebuild from :meth:`to_str` output (e.g. stored in a checkpoint)."""
        return cls(Tokenizer.from_str(s))

    def to_str(self) -> str:
        """The complete tokenizer as a JSON string (``tokenizer.json`` content)."""
        return self._tok.to_str()

    def save(self, path: str | os.PathLike) -> Path:
        """Write ``tokenizer.json`` (``path`` is the file, or a folder to put it in); atomic."""
        path = Path(path)
        if path.is_dir() or path.suffix != ".json":
            path = path / "tokenizer.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        return write_text(path, self.to_str())

    @classmethod
    def load(cls, path: str | os.PathLike) -> "SubwordTokenizer":
        """Read a ``tokenizer.json`` written by :meth:`save` (file or its folder)."""
        path = Path(path)
        if path.is_dir():
            path = path / "tokenizer.json"
        return cls.from_str(path.read_text(encoding="utf-8"))

    # ------------------------------------------------------------------ use

    def encode(self, text: str) -> list[int]:
        """Piece ids of ``text``, without special tokens."""
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """:meth:`encode` for many texts at once (parallel in Rust)."""
        return [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def encode_continuation(self, text: str) -> list[int]:
        """Piece ids of ``text`` read as the continuation of a sentence: no space is added
        before it, even by a ``prefix_space`` tokenizer (the text after a ``[MASK]``)."""
        if not self._prefix_space:
            return self.encode(text)
        if self._inner is None:
            state = json.loads(self.to_str())
            state["pre_tokenizer"]["add_prefix_space"] = False
            self._inner = Tokenizer.from_str(json.dumps(state))
            self._inner.encode_special_tokens = True
        return self._inner.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        """Detokenized text; special tokens (pad, BOS, EOS, mask) are skipped."""
        return self._drop_prefix(self._tok.decode(list(ids), skip_special_tokens=True))

    def decode_batch(self, batch: Sequence[Sequence[int]]) -> list[str]:
        """:meth:`decode` for many sequences."""
        return [self._drop_prefix(t) for t in self._tok.decode_batch([list(x) for x in batch], skip_special_tokens=True)]

    def _drop_prefix(self, text: str) -> str:
        """The text without the space a ``prefix_space`` tokenizer put before its first word."""
        return text[1:] if self._prefix_space and text.startswith(" ") else text

    def word_starts(self) -> list[bool]:
        """For each piece id, whether it begins a word: a byte-level piece that begins with a
        space (``Ġ``), every piece of a word-level vocabulary, and the special tokens. What
        whole-word masking groups pieces by; punctuation written against a word (``great.``)
        stays with it, as in the text."""
        if self._continuing_prefix:  # WordPiece: every piece but the "##" continuations
            return [not (self.id_to_token(i) or "").startswith(self._continuing_prefix) for i in range(self.vocab_size)]
        return [self._word_level or i in self._special_ids or (self.id_to_token(i) or "").startswith("\u0120")
                for i in range(self.vocab_size)]

    def frame(self, ids: Sequence[int]) -> list[int]:
        """``ids`` with the tokenizer's own framing of one text around them (BERT's ``[CLS] …
        [SEP]``, RoBERTa's ``<s> … </s>``); a tokenizer trained here has none."""
        prefix, suffix = self._framing
        return prefix + list(ids) + suffix

    def frame_words(self, ids: Sequence[int], word_ids: Sequence[int]) -> tuple[list[int], list[int]]:
        """:meth:`encode_words`'s pieces framed by :meth:`frame`, the framing pieces of no word
        (word index ``-1``)."""
        prefix, suffix = self._framing
        return self.frame(ids), [-1] * len(prefix) + list(word_ids) + [-1] * len(suffix)

    @property
    def framing(self) -> tuple[list[int], list[int]]:
        """The ids :meth:`frame` puts before and after a text's pieces."""
        return list(self._framing[0]), list(self._framing[1])

    @property
    def trained_here(self) -> bool:
        """Whether the special tokens are ours at ids 0..4 (``train``), not a pretrained family's."""
        return self._ids == dict(zip(ROLES, range(len(ROLES)))) and self._ids["pad"] == 0 and \
            self.token_to_id(PAD) == 0

    @property
    def special_ids(self) -> frozenset[int]:
        """The ids of every special token: the five roles and any other the tokenizer marks
        special (BERT's ``[unused…]`` are ordinary pieces)."""
        return self._special_ids

    def encode_words(self, words: Sequence[str]) -> tuple[list[int], list[int]]:
        """Pieces of pre-split words and, for each piece, the index of its word.

        Every word gets at least one piece (``<unk>`` if the model yields none, e.g. a
        whitespace-only word under the word-level model), so ``max(word_ids) + 1 ==
        len(words)`` and each word's pieces are contiguous.
        """
        if not words:
            return [], []
        enc = self._tok.encode(list(words), is_pretokenized=True, add_special_tokens=False)
        per_word: list[list[int]] = [[] for _ in words]
        for tid, w in zip(enc.ids, enc.word_ids):
            per_word[w].append(tid)
        ids: list[int] = []
        word_ids: list[int] = []
        for w, pieces in enumerate(per_word):
            pieces = pieces or [self.unk_id]
            ids.extend(pieces)
            word_ids.extend([w] * len(pieces))
        return ids, word_ids

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def id_to_token(self, i: int) -> str | None:
        return self._tok.id_to_token(i)

    @property
    def backend(self) -> Tokenizer:
        """The wrapped ``tokenizers.Tokenizer``."""
        return self._tok

    @functools.cached_property
    def content_hash(self) -> str:
        """sha256 of :meth:`to_str`: identifies the vocabulary in cache keys."""
        return hashlib.sha256(self.to_str().encode("utf-8")).hexdigest()

    # The id of each special role (``ROLES``), read-only.
    pad_id, bos_id, eos_id, unk_id, mask_id = (property(lambda self, role=role: self._ids[role]) for role in ROLES)

    @property
    def prefix_space(self) -> bool:
        """Whether the first word is read with a space before it (``train(prefix_space=True)``)."""
        return self._prefix_space

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    @property
    def max_id(self) -> int:
        """The largest id a piece has: a model needs that many embedding rows and one more (a
        file's vocabulary may leave ids out, which ``vocab_size`` does not count)."""
        return max(self._tok.get_vocab(with_added_tokens=True).values(), default=-1)

    def __len__(self) -> int:
        return self.vocab_size

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SubwordTokenizer) and other.to_str() == self.to_str()

    __hash__ = None  # type: ignore[assignment]


def write_tokenizers(out: Path, name: str, text: str | dict) -> str | dict[str, str]:
    """Tokenizer JSON (one, or ``{src, tgt}``) written into ``out`` as ``<name>.json``, or as
    ``<name>.src.json`` and ``<name>.tgt.json`` when the two differ: the path(s) written."""
    if isinstance(text, dict):
        src, tgt = text.get("src") or text["tgt"], text.get("tgt")
        if tgt is not None and tgt != src:
            paths = {side: out / f"{name}.{side}.json" for side in ("src", "tgt")}
            write_text(paths["src"], src)
            write_text(paths["tgt"], tgt)
            return {side: str(p) for side, p in paths.items()}
        text = src
    write_text(out / f"{name}.json", text)
    return str(out / f"{name}.json")


def special_ids_of(tokenizer: Tokenizer) -> dict[str, int]:
    """The id of each special role (``ROLES``): ids 0..4 of a tokenizer trained here, else the
    token of either name (``<pad>`` or ``[PAD]`` ...) wherever the vocabulary has it; a
    ``ValueError`` names the role it lacks."""
    ids = [tokenizer.token_to_id(t) for t in SPECIAL_TOKENS]
    if ids == list(range(len(SPECIAL_TOKENS))):
        return dict(zip(ROLES, ids))
    found = {}
    for role, ours, bert in zip(ROLES, SPECIAL_TOKENS, BERT_NAMES):
        found[role] = next((i for i in (tokenizer.token_to_id(ours), tokenizer.token_to_id(bert)) if i is not None),
                           None)
        if found[role] is None:
            raise ValueError(f"the tokenizer has no {role} token ({ours} or {bert}); special tokens are "
                             f"{SPECIAL_TOKENS} at ids 0..4 or a family's own names")
    return found


def framing_of(tokenizer: Tokenizer) -> tuple[list[int], list[int]]:
    """The ids a tokenizer's post-processor puts before and after one text: what encoding a
    word with special tokens adds to it without."""
    bare = tokenizer.encode("a", add_special_tokens=False).ids
    full = tokenizer.encode("a", add_special_tokens=True).ids
    for start in range(len(full) - len(bare) + 1):
        if full[start:start + len(bare)] == bare:
            return full[:start], full[start + len(bare):]
    return [], []


def roundtrip_exactness(tokenizer: SubwordTokenizer, texts: Sequence[str]) -> tuple[float, list[str]]:
    """Fraction of ``texts`` with ``decode(encode(t)) == t``, and the failing texts."""
    if not texts:
        return 1.0, []
    decoded = tokenizer.decode_batch(tokenizer.encode_batch(texts))
    bad = [t for t, d in zip(texts, decoded) if t != d]
    return 1.0 - len(bad) / len(texts), bad


def tokenizer_from_str(s: str) -> "SubwordTokenizer | SentencePieceTokenizer":
    """A tokenizer from the string a checkpoint carries: a SentencePiece model's
    (:class:`~transformer.data.core.sentencepiece_tokenizer.SentencePieceTokenizer`, a MarianMT
    vocabulary), or a ``tokenizer.json`` (:class:`SubwordTokenizer`)."""
    if is_sentencepiece(s):
        return SentencePieceTokenizer.from_str(s)
    return SubwordTokenizer.from_str(s)


def is_sentencepiece(s: str) -> bool:
    """Whether the string a checkpoint carries is a SentencePiece model's (a MarianMT vocabulary,
    :class:`~transformer.data.core.sentencepiece_tokenizer.SentencePieceTokenizer`), not a
    ``tokenizer.json``."""
    return s.lstrip().startswith("{") and f'"type": "{SENTENCEPIECE}"' in s[:40]
