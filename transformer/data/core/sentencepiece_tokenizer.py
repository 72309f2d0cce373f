"""A SentencePiece model read through a vocabulary of its own: Marian's tokenizers (the
Helsinki-NLP opus-mt models), with :class:`~transformer.data.core.tokenizer.SubwordTokenizer`'s
interface, so that a translation task, its ``Translator`` and its checkpoint use it as they use ours.

Marian splits text with a SentencePiece model (``source.spm`` for the source side,
``target.spm`` for the target) and numbers the pieces by ``vocab.json``, not by the model's own
ids; a piece the vocabulary lacks is ``<unk>``. A text's framing is its pieces then ``</s>``;
there is no BOS: the decoder starts from the padding id, which :attr:`bos_id` therefore gives.
Decoding drops the special tokens and joins the pieces with ``decode_model`` (Hugging Face's
``MarianTokenizer`` decodes targets with the *source* model unless the vocabularies are separate,
and so does :func:`marian_tokenizers`). A leading ``>>xx<<`` language code is one piece of its own.
``MarianTokenizer`` also runs sacremoses' punctuation normaliser where that package is installed;
this class does not.

The whole state (both SentencePiece models as base64, the vocabulary, the special tokens) is one
JSON string (:meth:`to_str`), which a checkpoint carries as it carries a ``tokenizer.json``;
:func:`transformer.data.core.tokenizer.tokenizer_from_str` reads either. ``sentencepiece`` is the optional ``hub`` extra.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
from pathlib import Path
from typing import Any, Sequence

from transformer.files import read_json_object

#: The ``type`` of :meth:`SentencePieceTokenizer.to_str`'s JSON.
KIND = "sentencepiece-vocab"
#: SentencePiece's word-boundary mark.
SPIECE_UNDERLINE = "\u2581"


#: Ids a vocabulary may give: rows of an embedding.
ID_LIMIT = 2**31


def _processor(model: bytes, where: object = "the SentencePiece model"):
    """A processor of the serialized ``model``; bytes that are not one (empty, text, random, cut
    short) are a ``ValueError`` naming ``where`` (its file)."""
    try:
        import sentencepiece
    except ImportError:
        raise ImportError("a SentencePiece tokenizer (Marian's) needs the sentencepiece package: "
                          "pip install 'transformer[hub]'") from None
    if not model:  # the library takes no bytes for no model, and logs on stderr when asked anything
        raise ValueError(f"{where}: not a SentencePiece model (empty)")
    try:
        return sentencepiece.SentencePieceProcessor(model_proto=model)
    except RuntimeError as exc:  # the library's protobuf parse: "INTERNAL: ... ParseFromArray"
        reason = str(exc).strip().rsplit("] ", 1)[-1] if "ParseFromArray" not in str(exc) else ""
        raise ValueError(f"{where}: not a SentencePiece model" + (f" ({reason})" if reason else "")) from None


class SentencePieceTokenizer:
    """Encode with ``model``, number pieces by ``vocab``, decode with ``decode_model``.

    Args:
        model: the serialized SentencePiece model that splits text.
        vocab: piece -> id (Marian's ``vocab.json``).
        decode_model: the model that joins pieces back into text (``model`` when None).
        unk, eos, pad: the special tokens' names in ``vocab``.
        start: the decoder's first input (:attr:`bos_id`); None: ``pad`` (Marian's). M2M100
            starts from ``</s>``.
        others: more special tokens of ``vocab``, skipped by :meth:`decode` (M2M100's ``<s>`` and
            language codes).
    """

    def __init__(self, model: bytes, vocab: dict[str, int], decode_model: bytes | None = None,
                 unk: str = "<unk>", eos: str = "</s>", pad: str = "<pad>", start: str | None = None,
                 others: Sequence[str] = ()):
        for token in (unk, eos, pad, *([start] if start else []), *others):
            if token not in vocab:
                raise ValueError(f"the vocabulary has no {token}")
        self._model, self._decode_model = model, decode_model if decode_model is not None else model
        self._vocab = dict(vocab)
        self._pieces = {i: p for p, i in self._vocab.items()}
        self._names = {"unk": unk, "eos": eos, "pad": pad, **({"start": start} if start else {})}
        self._others = list(others)
        self._sp = _processor(self._model)
        self._sp_decode = self._sp if decode_model is None or decode_model == model else _processor(decode_model)
        self._special_ids = frozenset(self._vocab[t] for t in (unk, eos, pad, *self._others))

    # ------------------------------------------------------------------ building

    @classmethod
    def from_str(cls, s: str) -> "SentencePieceTokenizer":
        """Rebuild from :meth:`to_str` output."""
        state = json.loads(s)
        if state.get("type") != KIND:
            raise ValueError(f"not a {KIND} tokenizer")
        decode = state.get("decode_model")
        return cls(base64.b64decode(state["model"]), state["vocab"],
                   None if decode is None else base64.b64decode(decode), **state["specials"],
                   others=state.get("others", ()))

    def to_str(self) -> str:
        """The whole tokenizer as one JSON string."""
        decode = None if self._decode_model == self._model else base64.b64encode(self._decode_model).decode()
        others = {"others": self._others} if self._others else {}
        return json.dumps({"type": KIND, "model": base64.b64encode(self._model).decode(), "decode_model": decode,
                           "vocab": self._vocab, "specials": self._names, **others}, ensure_ascii=False)

    # ------------------------------------------------------------------ use

    def encode(self, text: str) -> list[int]:
        """Piece ids of ``text`` (a leading ``>>xx<<`` is one piece), without ``</s>``."""
        code: list[str] = []
        if text.startswith(">>") and (end := text.find("<<")) != -1:
            code, text = [text[: end + 2]], text[end + 2:]
        unk = self._vocab[self._names["unk"]]
        return [self._vocab.get(p, unk) for p in code + self._sp.encode(text, out_type=str)]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def decode(self, ids: Sequence[int]) -> str:
        """Detokenized text; special tokens (``<unk>``, ``</s>``, ``<pad>``) are skipped."""
        pieces = [self._piece(i) for i in ids if int(i) not in self._special_ids]
        return self._sp_decode.decode_pieces(pieces).replace(SPIECE_UNDERLINE, " ").strip()

    def decode_batch(self, batch: Sequence[Sequence[int]]) -> list[str]:
        return [self.decode(ids) for ids in batch]

    def _piece(self, i: int) -> str:
        i = int(i)
        if i in self._pieces:
            return self._pieces[i]
        piece = self._sp_decode.id_to_piece(i) if 0 <= i < self._sp_decode.get_piece_size() else ""
        return piece or self._names["unk"]

    def frame(self, ids: Sequence[int]) -> list[int]:
        """``ids`` then ``</s>``: Marian's framing of one text."""
        return list(ids) + [self.eos_id]

    @property
    def framing(self) -> tuple[list[int], list[int]]:
        return [], [self.eos_id]

    def token_to_id(self, token: str) -> int | None:
        return self._vocab.get(token)

    def id_to_token(self, i: int) -> str | None:
        return self._pieces.get(i)

    @property
    def trained_here(self) -> bool:
        return False

    @property
    def prefix_space(self) -> bool:
        return False

    @property
    def special_ids(self) -> frozenset[int]:
        return self._special_ids

    @functools.cached_property
    def content_hash(self) -> str:
        """sha256 of :meth:`to_str`: identifies the vocabulary in cache keys."""
        return hashlib.sha256(self.to_str().encode("utf-8")).hexdigest()

    @property
    def pad_id(self) -> int:
        return self._vocab[self._names["pad"]]

    @property
    def bos_id(self) -> int:
        """The decoder's first input: Marian has no BOS and starts from the padding id, M2M100
        from ``</s>`` (``start``)."""
        return self._vocab[self._names.get("start", self._names["pad"])]

    @property
    def eos_id(self) -> int:
        return self._vocab[self._names["eos"]]

    @property
    def unk_id(self) -> int:
        return self._vocab[self._names["unk"]]

    @property
    def vocab_size(self) -> int:
        return len(self._vocab)

    @property
    def max_id(self) -> int:
        """The largest id a piece has: a model needs that many embedding rows and one more."""
        return max(self._vocab.values())

    def __len__(self) -> int:
        return self.vocab_size

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SentencePieceTokenizer) and other.to_str() == self.to_str()

    __hash__ = None  # type: ignore[assignment]


def marian_tokenizers(folder: str | Path, config: dict[str, Any] | None = None) -> tuple[
        SentencePieceTokenizer, SentencePieceTokenizer]:
    """The source and target tokenizers of a Marian folder (``source.spm``, ``target.spm``,
    ``vocab.json`` and, with ``separate_vocabs``, ``target_vocab.json``), as Hugging Face's
    ``MarianTokenizer`` reads them; ``config`` is its ``tokenizer_config.json``. A file that is
    not what its name says is a ``ValueError`` naming it."""
    folder = Path(folder)
    config = dict(config or {})
    specials = {k: _special(config, f"{k}_token", d) for k, d in (("unk", "<unk>"), ("eos", "</s>"), ("pad", "<pad>"))}
    source, target = (folder / "source.spm").read_bytes(), (folder / "target.spm").read_bytes()
    for name, model in (("source.spm", source), ("target.spm", target)):
        _processor(model, folder / name)
    vocab = _vocabulary(folder / "vocab.json")
    if config.get("separate_vocabs"):
        name = config.get("target_vocab_file", "target_vocab.json")
        if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
            raise ValueError(f"tokenizer_config.json: target_vocab_file={name!r}: expected the name of a file in "
                             f"the folder")
        tgt_vocab = _vocabulary(folder / name)
        return (SentencePieceTokenizer(source, vocab, **specials),
                SentencePieceTokenizer(target, tgt_vocab, **specials))
    return (SentencePieceTokenizer(source, vocab, **specials),
            SentencePieceTokenizer(target, vocab, decode_model=source, **specials))


def m2m100_tokenizer(folder: str | Path, codes: Sequence[str], config: dict[str, Any] | None = None
                     ) -> SentencePieceTokenizer:
    """M2M100's tokenizer, one for both sides, as ``M2M100Tokenizer`` reads its folder:
    ``sentencepiece.bpe.model`` splits, ``vocab.json`` numbers the pieces, and the language
    ``codes`` (``__fr__``, in their order) take the ids after the vocabulary. ``<s>`` and the codes
    are special; the decoder starts from ``</s>``."""
    folder = Path(folder)
    config = dict(config or {})
    specials = {k: _special(config, f"{k}_token", d) for k, d in (("unk", "<unk>"), ("eos", "</s>"), ("pad", "<pad>"))}
    bos = _special(config, "bos_token", "<s>")
    model = (folder / "sentencepiece.bpe.model").read_bytes()
    _processor(model, folder / "sentencepiece.bpe.model")
    vocab = _vocabulary(folder / "vocab.json")
    size = len(vocab)
    for i, code in enumerate(codes):
        vocab[code] = size + i  # after the vocabulary, whatever ids vocab.json gives
    return SentencePieceTokenizer(model, vocab, **specials, start=specials["eos"],
                                  others=[bos, *codes] if bos in vocab else list(codes))


def _special(config: dict[str, Any], key: str, default: str) -> str:
    """A special token of ``tokenizer_config.json``: its text, or ``{"content": text}``."""
    value = config.get(key) or default
    if isinstance(value, dict):
        value = value.get("content")
    if not isinstance(value, str) or not value:
        raise ValueError(f"tokenizer_config.json: {key}={config.get(key)!r}: expected the token's text")
    return value


def _vocabulary(path: Path) -> dict[str, int]:
    """A piece -> id file (``vocab.json``), each id a whole number from 0 (a row of the embedding)."""
    vocab = read_json_object(path)
    for piece, i in vocab.items():
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < ID_LIMIT:
            raise ValueError(f"{path}: {piece!r} has id {i!r}: expected an id from 0 to {ID_LIMIT - 1}")
    return vocab


__all__ = ["KIND", "SentencePieceTokenizer", "m2m100_tokenizer", "marian_tokenizers"]
