"""Several translation directions in one model: a target-language token in the source.

Johnson et al. (2017, "Google's Multilingual Neural Machine Translation System") train one
encoder-decoder on many language pairs by prefixing each source sentence with a token naming the
language to translate into: ``<2fr> A dog runs.`` → ``Un chien court.``. The model itself is
unchanged; the tag is one more source token. So every search (greedy, beam, n-best, ensembles,
Mask-Predict, CTC, an exported CTranslate2 model) translates into the language asked for once the
source ids start with the tag, and nothing else needs to know about languages.

What a checkpoint records (``hyper_parameters``):

- ``data.directions``: the directions it was trained on, ``["en-de", "en-fr"]``, in the order
  of ``data.pairs``; absent (or null) for a bilingual model, which takes untagged sources as
  before;
- ``src_lang`` / ``tgt_lang``: for a multilingual model, the single source language (else
  ``mul``) and ``mul``; a bilingual model keeps its pair.

Where the model reads the tag, ``data.tag_side`` (recorded as ``data.tag_side`` where it is not
the default): ``source``, in front of the source as above; or ``decoder``, as the decoder's first
token in place of BOS (as mBART does with its language codes): ``A dog runs.`` →
``<2fr> Un chien court.``. Either way a source is *framed* the same, tag first
(:func:`tagged_source_ids`), and with ``decoder`` the collator and the :class:`Translator
<transformer.inference.translator.Translator>` move that first id to the start of the target, so
every caller (pivoting, the server's mixed batches, evaluation) frames one way. Greedy and beam
search (ensembles and the compiled path too) take the start token per row; the CTranslate2
export passes it as a one-token target prefix; the non-autoregressive students, which have no
start token, read the tag in the source only.

A pretrained multilingual family (M2M100, NLLB, mBART-50: ``hub.languages``) records
``data.tag_side=codes``, its ``data.languages`` (it translates between any two of them) and
``data.language_codes`` (each language's token: ``fr`` -> ``__fr__``, ``fra_Latn``, ``fr_XX``):
a source is framed ``[code of src_lang] pieces </s>``, and the decoder starts from its start
token then the code of ``tgt_lang``, forced as ``generate`` forces it (:func:`coded_framing`).

The tag of language ``xx`` is :func:`tag` (``<2xx>``), a special token of the source tokenizer's
vocabulary: it is never split, and it enters the ids only through :func:`tagged_source_ids`
(the tokenizers read a literal ``<2fr>`` in a sentence as ordinary text).

Every check here raises one ``ValueError`` whose message names the setting; the CLIs print it
as their ``error:`` line.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Sequence

#: The ``src_lang``/``tgt_lang`` a multilingual checkpoint records where one code cannot name a side.
MULTI = "mul"
#: Where a multilingual model reads its target-language tag (``data.tag_side``).
TAG_SIDES = ("source", "decoder")
#: The ``data.tag_side`` of a pretrained family's checkpoint: a code of each side's language.
CODES = "codes"
_CODE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")

Direction = tuple[str, str]


def tag(lang: str) -> str:
    """The source token asking for a translation into ``lang``: ``<2fr>``."""
    return f"<2{lang}>"


def tags(languages: Iterable[str]) -> list[str]:
    """The tags of ``languages``, sorted and without repeats (the special tokens a joint
    vocabulary adds)."""
    return [tag(lang) for lang in sorted(set(languages))]


def direction_name(direction: Direction) -> str:
    """``("en", "de")`` → ``"en-de"``."""
    return f"{direction[0]}-{direction[1]}"


def parse_direction(item: Any, where: str = "data.pairs") -> Direction:
    """``"en-de"`` → ``("en", "de")``; a malformed item or ``en-en`` is a ``ValueError`` naming
    ``where``."""
    if not isinstance(item, str) or item.count("-") != 1:
        raise ValueError(f"{where}: {item!r} is not a direction; write <src>-<tgt>, e.g. en-de")
    src, tgt = (part.strip() for part in item.split("-"))
    for code in (src, tgt):
        if not _CODE.match(code):
            raise ValueError(f"{where}: {item!r} is not a direction; write <src>-<tgt> with language codes, "
                             f"e.g. en-de")
    if src == tgt:
        raise ValueError(f"{where}: {item!r} translates {src} into itself; a direction needs two languages")
    return src, tgt


def parse_pairs(value: Any, languages: Sequence[str] | None = None, where: str = "data.pairs") -> list[Direction]:
    """The directions of a ``data.pairs`` value: a list (or comma-separated string) of
    ``src-tgt`` items, or ``all`` for every direction between ``languages`` (the languages the
    files hold). An empty list, a malformed item, ``en-en``, a direction given twice, or a
    language outside ``languages`` (when given) is a ``ValueError`` naming ``where``."""
    if isinstance(value, str):
        if value.strip() == "all":
            if not languages or len(languages) < 2:
                raise ValueError(f"{where}=all: needs the languages of the files (at least two), got "
                                 f"{list(languages or [])}")
            return [(s, t) for s in languages for t in languages if s != t]
        value = [v for v in value.split(",")] if value.strip() else []
    if isinstance(value, Mapping) or not isinstance(value, Iterable):  # a list, tuple or a config's ListConfig
        raise ValueError(f"{where}={value!r}: expected a list of directions, e.g. [en-de,en-fr], or all")
    value = list(value)
    if not value:
        raise ValueError(f"{where}=[]: empty; name at least one direction, e.g. [en-de], or all")
    directions: list[Direction] = []
    for item in value:
        direction = parse_direction(item.strip() if isinstance(item, str) else item, where)
        if direction in directions:
            raise ValueError(f"{where}: {direction_name(direction)} is given twice")
        if languages is not None:
            for lang in direction:
                if lang not in languages:
                    raise ValueError(f"{where}: {direction_name(direction)}: unknown language {lang!r}; the "
                                     f"files hold {', '.join(languages)}")
        directions.append(direction)
    return directions


# ---------------------------------------------------------------------------- a checkpoint's languages


def directions_of(hparams: Mapping[str, Any]) -> list[Direction] | None:
    """The directions a checkpoint's ``hyper_parameters`` record (every one between its
    ``data.languages``, a pretrained family's), or None for a bilingual model."""
    data = hparams.get("data") or {}
    names = data.get("directions") if isinstance(data, Mapping) else None
    if not names:
        langs = languages_of(hparams)
        return None if langs is None else [(s, t) for s in langs for t in langs if s != t]
    return [parse_direction(name, "data.directions") for name in names]


def languages_of(hparams: Mapping[str, Any]) -> list[str] | None:
    """The languages of a checkpoint that translates between any two of them (a pretrained
    family's ``data.languages``), or None."""
    data = hparams.get("data") or {}
    langs = data.get("languages") if isinstance(data, Mapping) else None
    return list(langs) if langs else None


def is_multilingual(hparams: Mapping[str, Any]) -> bool:
    """Whether the checkpoint was trained on several directions with target tags."""
    return directions_of(hparams) is not None


def tag_side(hparams: Mapping[str, Any]) -> str:
    """Where a checkpoint reads its target-language tag: ``source`` (also every bilingual
    model's answer) or ``decoder``."""
    data = hparams.get("data") or {}
    return (data.get("tag_side") if isinstance(data, Mapping) else None) or "source"


def source_languages(hparams: Mapping[str, Any]) -> list[str]:
    """The languages a checkpoint reads, in the order of its directions."""
    if languages_of(hparams) is not None:
        return languages_of(hparams)
    directions = directions_of(hparams)
    if directions is None:
        return [hparams["src_lang"]]
    return list(dict.fromkeys(s for s, _ in directions))


def target_languages(hparams: Mapping[str, Any]) -> list[str]:
    """The languages a checkpoint writes, in the order of its directions."""
    if languages_of(hparams) is not None:
        return languages_of(hparams)
    directions = directions_of(hparams)
    if directions is None:
        return [hparams["tgt_lang"]]
    return list(dict.fromkeys(t for _, t in directions))


def _known(hparams: Mapping[str, Any]) -> str:
    if languages_of(hparams) is not None:
        return f"any two of its languages: {', '.join(languages_of(hparams))}"
    directions = directions_of(hparams) or [(hparams["src_lang"], hparams["tgt_lang"])]
    return f"its directions: {', '.join(map(direction_name, directions))}"


def check_target_language(hparams: Mapping[str, Any], tgt_lang: str | None) -> str | None:
    """The target language to tag sources with, or None for a bilingual model (untagged).

    A multilingual model needs ``tgt_lang`` when it writes several languages (one it writes
    alone is taken by default); a language it was not trained to produce is a ``ValueError``
    naming the ones it knows. A bilingual model accepts its own target language or none.
    """
    targets = target_languages(hparams)
    if tgt_lang is not None and tgt_lang not in targets:
        raise ValueError(f"tgt_lang={tgt_lang}: this model translates into {', '.join(targets)} ({_known(hparams)})")
    if not is_multilingual(hparams):
        return None
    if tgt_lang is None:
        if len(targets) > 1:
            raise ValueError(f"tgt_lang: required, this model translates into {', '.join(targets)} "
                             f"({_known(hparams)}); e.g. tgt_lang={targets[0]}")
        return targets[0]
    return tgt_lang


def check_direction(hparams: Mapping[str, Any], src_lang: str | None, tgt_lang: str | None,
                    zero_shot: bool = False, zero_shot_key: str = "decode.zero_shot") -> Direction:
    """The direction ``(src, tgt)`` asked of a checkpoint, each side defaulting to the one
    language it has there; a direction it was not trained on is a ``ValueError`` naming them.
    With ``zero_shot`` a multilingual checkpoint is also asked for a direction it was not trained
    on, between a language it reads and another it writes (de→fr from a model trained on en↔de
    and en↔fr: the tag asks for French whatever the source, Johnson et al.'s zero-shot)."""
    sources = source_languages(hparams)
    if src_lang is not None and src_lang not in sources:
        raise ValueError(f"src_lang={src_lang}: this model translates from {', '.join(sources)} ({_known(hparams)})")
    target = check_target_language(hparams, tgt_lang) or hparams["tgt_lang"]
    if src_lang is None:
        candidates = [s for s, t in (directions_of(hparams) or [(hparams["src_lang"], hparams["tgt_lang"])])
                      if t == target]
        if len(candidates) > 1:
            raise ValueError(f"src_lang: required, this model translates into {target} from "
                             f"{', '.join(candidates)} ({_known(hparams)})")
        src_lang = candidates[0]
    if languages_of(hparams) is not None:  # any two of its languages
        if src_lang == target:
            raise ValueError(f"{src_lang}-{target}: source and target are the same language")
        return src_lang, target
    directions = directions_of(hparams)
    if directions is not None and (src_lang, target) not in directions:
        if src_lang == target:
            raise ValueError(f"{src_lang}-{target}: source and target are the same language ({_known(hparams)})")
        if not zero_shot:
            raise ValueError(f"{src_lang}-{target}: this model was not trained on that direction ({_known(hparams)}; "
                             f"{zero_shot_key}=true asks for it anyway)")
    return src_lang, target


# ---------------------------------------------------------------------------- framing a source


def coded_framing(hparams: Mapping[str, Any], tokenizer, src_lang: str | None, tgt_lang: str) -> list[int]:
    """A pretrained family's framing (``data.tag_side=codes``) of a sentence from ``src_lang``
    into ``tgt_lang``, in front of its pieces, tag first as :func:`tagged_source_ids` frames
    one: the target's code, which the collator moves after the decoder's start (where search
    forces it), then the source's, which starts the source. ``src_lang`` None, or a language
    without a code, is a ``ValueError`` naming the key."""
    codes = (hparams.get("data") or {}).get("language_codes") or {}
    if src_lang is None:
        raise ValueError(f"src_lang: required, this model reads the source's language code ({_known(hparams)})")
    ids = []
    for key, lang in (("tgt_lang", tgt_lang), ("src_lang", src_lang)):
        i = tokenizer.token_to_id(codes[lang]) if lang in codes else None
        if i is None:
            raise ValueError(f"{key}={lang}: not a language of this model ({_known(hparams)})")
        ids.append(i)
    return ids


def add_tags(tokenizer, languages: Iterable[str]):
    """The tokenizer with the tag of every language in ``languages`` added as a special token
    (new ids after its vocabulary; a tag it has already keeps its id)."""
    from tokenizers import Tokenizer

    from transformer.data.core.tokenizer import SubwordTokenizer

    backend = Tokenizer.from_str(tokenizer.to_str())
    backend.add_special_tokens([t for t in tags(languages) if tokenizer.token_to_id(t) is None])
    return SubwordTokenizer(backend)


def tag_id(tokenizer, tgt_lang: str) -> int:
    """The id of ``<2xx>`` in the source tokenizer; a tokenizer without it is a ``ValueError``."""
    i = tokenizer.token_to_id(tag(tgt_lang))
    if i is None:
        raise ValueError(f"the source tokenizer has no {tag(tgt_lang)} token: the model was not trained to "
                         f"translate into {tgt_lang}")
    return i


def tag_ids(tokenizer, ids: Sequence[int], tgt_lang: str | None) -> list[int]:
    """Source piece ids with the tag of ``tgt_lang`` in front; ``tgt_lang`` None: as they are
    (a bilingual model)."""
    return list(ids) if tgt_lang is None else [tag_id(tokenizer, tgt_lang), *ids]


def split_tag(hparams: Mapping[str, Any], ids: Sequence[int]) -> tuple[list[int], int | None]:
    """A framed source (:func:`tagged_source_ids`) as the model reads it: with
    ``data.tag_side=decoder`` the first id, the tag, comes off and is returned as the decoder's
    start token; otherwise ``(ids, None)`` (the decoder starts from BOS)."""
    if tag_side(hparams) == "decoder" and ids:
        return list(ids[1:]), int(ids[0])
    return list(ids), None


def rejoin_tag(row: Sequence[int], start: int | None) -> tuple[int, ...]:
    """:func:`split_tag` undone: the framed source of a source ``row`` and its start token (None:
    BOS, the row is framed already), to match a searched row back to its sentence."""
    return (*([] if start is None else [int(start)]), *row)


def tagged_source_ids(tokenizer, text: str, tgt_lang: str | None) -> list[int]:
    """The source ids a model reads for ``text`` translated into ``tgt_lang``: ``<2xx>`` then
    the text's pieces (no BOS/EOS: the collator appends EOS as in training). ``tgt_lang`` None
    (a bilingual model, :func:`check_target_language`): the pieces alone."""
    return tag_ids(tokenizer, tokenizer.encode(text), tgt_lang)


__all__ = ["CODES", "MULTI", "TAG_SIDES", "Direction", "add_tags", "check_direction", "check_target_language",
           "coded_framing", "direction_name", "directions_of", "languages_of",
           "is_multilingual", "parse_direction", "parse_pairs", "rejoin_tag", "source_languages", "split_tag", "tag", "tag_side", "tag_id", "tag_ids",
           "tagged_source_ids", "tags", "target_languages"]
