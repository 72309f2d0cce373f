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
token then the code of ``tgt_lang``, forced as ``generate`` forces it (:meth:`Languages.coded_framing`).

The tag of language ``xx`` is :func:`tag` (``<2xx>``), a special token of the source tokenizer's
vocabulary: it is never split, and it enters the ids only through :func:`tagged_source_ids`
(the tokenizers read a literal ``<2fr>`` in a sentence as ordinary text).

A data config names its directions with ``data.pairs`` (:func:`check_pairs`: a list, or ``all``
between the languages its training files hold, :func:`languages_held`). What a model knows of
its languages, from that config or from a checkpoint, is one :class:`Languages` value, which
answers every question asked of them.

Every check here raises one ``ValueError`` whose message names the setting; the CLIs print it
as their ``error:`` line.
"""

from __future__ import annotations

import glob
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from transformer.data.core.readers import infer_format, iter_lines
from transformer.data.core.sources import DATASETS
from transformer.data.parallel.corpus import REGISTRY, config_sources

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


# ---------------------------------------------------------------------------- a data config's directions


def _lang_pattern(path: str) -> tuple[str, re.Pattern]:
    """A glob and a regex capturing ``{lang}`` of a path holding ``{lang}``."""
    head, tail = path.split("{lang}", 1)
    return head + "*" + tail, re.compile(re.escape(head) + r"([A-Za-z][A-Za-z0-9_]*)" + re.escape(tail) + "$")


def languages_held(source: Any, columns: Mapping | None = None, fmt: str | None = None) -> list[str] | None:
    """The languages a training source holds, sorted: the ``{lang}`` values its files take
    (registry, local files, or a fairseq prefix), the language keys of ``columns`` for a table,
    or a JSON-lines file's first ``translation`` row; None where that cannot be known (a hub
    split, a table without a column map)."""
    if columns:
        langs = [str(k) for k in columns if k not in ("src", "tgt")]
        return sorted(langs) or None
    if not isinstance(source, str):
        return None
    if source.startswith(REGISTRY):
        if "{lang}" not in source:
            return None
        _, regex = _lang_pattern(source[len(REGISTRY):])
        return sorted({m.group(1) for rel in DATASETS if (m := regex.match(rel))})
    if "{lang}" in source:
        pattern, regex = _lang_pattern(source)
        return sorted({m.group(1) for p in glob.glob(pattern) if (m := regex.match(p))})
    path = Path(source)
    if path.is_file():
        if (fmt or infer_format(path)) == "jsonl":
            for _, line in iter_lines(path):
                row = json.loads(line)
                return sorted(row.get("translation", {})) if isinstance(row, dict) else None
        return None
    found = set()
    for ext in ("", ".gz"):  # fairseq's prefix: corpus/train -> corpus/train.<lang>
        pattern, regex = _lang_pattern(f"{source}.{{lang}}{ext}")
        found |= {m.group(1) for p in glob.glob(pattern) if (m := regex.match(p))}
    return sorted(found)


def check_pairs(d: Mapping[str, Any], where: str = "data") -> list[Direction]:
    """The directions of a data config with ``pairs``, checked before any file is read: a
    well-formed, non-empty list of two-language directions (or ``all``) whose languages the
    training files hold, and settings a multilingual corpus can take (``Languages.of_config``
    checks ``tag_side``). One ``ValueError`` naming the key."""
    if d.get("joint_vocab") is False:
        raise ValueError(f"{where}.joint_vocab=false: a multilingual model ({where}.pairs) needs one joint "
                         f"vocabulary (every language's pieces, and the target tags, in one tokenizer)")
    if d.get("train_files"):
        raise ValueError(f"{where}.train_files: not available with {where}.pairs (a single-pair setting; "
                         f"{where}.train=corpus/train reads corpus/train.<lang>)")
    temperature = d.get("temperature", 1.0)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"{where}.temperature={temperature!r}: expected a number > 0 (1: proportional to each "
                         f"direction's size; larger: closer to uniform)")
    sources, _ = config_sources(d.get("corpus_name", "multi30k"), d.get("train"), d.get("valid"), d.get("test"),
                                d.get("tests"), d.get("valid_name") or "valid", d.get("hub"), None)
    train_key = "train"
    if d.get("distill_dir"):
        sources["train"], train_key = distill_train(d["distill_dir"]), "distill_dir"
    if "train" not in sources:
        raise ValueError(f"{where}.train: required with {where}.pairs (e.g. {where}.train=corpus/train for "
                         f"corpus/train.<lang>, one file per language)")
    langs = None if d.get("hub") else languages_held(sources["train"], d.get("columns"), d.get("format"))
    if d.get("pairs") == "all" and not langs:
        raise ValueError(f"{where}.pairs=all: cannot tell which languages {sources['train']} holds; list the "
                         f"directions ({where}.pairs=[en-de,en-fr]) or name each language's column "
                         f"({where}.columns={{en: 0, de: 1, fr: 2}})")
    if langs is not None and not langs:
        expected = f"{sources['train']}.en, transformer-distill's output" if train_key == "distill_dir" else \
            "corpus/train.en, corpus/train.de"
        raise ValueError(f"{where}.{train_key}={d.get(train_key)}: no file per language found (expected e.g. "
                         f"{expected})")
    try:
        directions = parse_pairs(d.get("pairs"), langs, f"{where}.pairs")
    except ValueError as e:
        if langs and "unknown language" in str(e):
            raise ValueError(f"{e} (no {where}.{train_key} file for it: {sources['train']}.<lang>)") from None
        raise
    if langs is not None:
        _check_split_files(d, sources, {lang for direction in directions for lang in direction}, where)
    return directions


def distill_train(distill_dir: str) -> str:
    """The training source of a multilingual student: a multilingual teacher's
    ``transformer-distill`` output, ``<distill_dir>/train.<lang>`` for each language."""
    return f"{distill_dir}/train"


def _check_split_files(d: Mapping[str, Any], sources: Mapping[str, Any], languages: set[str], where: str) -> None:
    """Every local split given as one file per language has a file for each language of the
    directions (a registry split a language lacks, as Multi30k's 2017 tests in Czech, is left
    out of that language's directions instead)."""
    keys = {"valid": None, "test": None, **{name: None for name in d.get("tests") or {}}}
    for split, source in sources.items():
        if split == "train" or not isinstance(source, str) or source.startswith(REGISTRY) or Path(source).is_file():
            continue
        held = languages_held(source)
        missing = sorted(languages - set(held or []))
        if missing:
            key = "valid" if split == (d.get("valid_name") or "valid") else \
                ("test" if split == "test" else f"tests.{split}" if split in keys else split)
            raise ValueError(f"{where}.{key}={source}: no file for {', '.join(missing)} (expected "
                             f"{source if '{lang}' in source else source + '.{lang}'} for each language of "
                             f"{where}.pairs)")


# ---------------------------------------------------------------------------- a model's languages


@dataclass(frozen=True)
class Languages:
    """What a model knows of languages, read once from a checkpoint (:meth:`of_checkpoint`) or a
    data config (:meth:`of_config`) and passed to whatever asks a language question of it.

    Attributes:
        src_lang, tgt_lang: the pair a checkpoint records; for a multilingual model the single
            source (target) language, else :data:`MULTI`.
        directions: the directions a multilingual model was trained on, in the order of
            ``data.pairs``; None for a bilingual model (untagged sources).
        tag_side: where the model reads its target-language tag (:data:`TAG_SIDES`), or
            :data:`CODES` for a pretrained family's model.
        languages: the languages of a model that translates between any two of them (a
            pretrained family's ``data.languages``; its :attr:`directions` are every such pair);
            None otherwise.
        codes: a pretrained family's code of each language (``data.language_codes``: ``fr`` ->
            ``__fr__``); None otherwise.
    """

    src_lang: str | None
    tgt_lang: str | None
    directions: tuple[Direction, ...] | None = None
    tag_side: str = "source"
    languages: tuple[str, ...] | None = None
    codes: Mapping[str, str] | None = field(default=None, hash=False)

    @classmethod
    def of_checkpoint(cls, hparams: Mapping[str, Any]) -> "Languages":
        """The languages a checkpoint's ``hyper_parameters`` record (``src_lang``, ``tgt_lang``,
        ``data.directions``, ``data.tag_side``, a pretrained family's ``data.languages`` and
        ``data.language_codes``; see the module's docstring). A checkpoint that records no
        ``tag_side`` reads its tag in the source; one with ``data.languages`` and no directions
        translates between any two of them."""
        data = hparams.get("data") or {}
        data = data if isinstance(data, Mapping) else {}
        names, langs, codes = data.get("directions"), data.get("languages"), data.get("language_codes")
        langs = tuple(langs) if langs else None
        if names:
            directions = tuple(parse_direction(name, "data.directions") for name in names)
        else:
            directions = tuple((s, t) for s in langs for t in langs if s != t) if langs else None
        return cls(hparams.get("src_lang"), hparams.get("tgt_lang"), directions, data.get("tag_side") or "source",
                   langs, dict(codes) if codes else None)

    @classmethod
    def of_config(cls, data: Mapping[str, Any], where: str = "data") -> "Languages":
        """The languages a data config (``cfg.data``) trains on: its pair, or with ``pairs`` the
        directions :func:`check_pairs` reads from it
        (checking the config and the training files' languages), and where the target tag goes,
        which needs several directions unless it is ``source``. A ``ValueError`` names the key."""
        tag_side = data.get("tag_side") or "source"
        if tag_side not in TAG_SIDES:
            raise ValueError(f"{where}.tag_side={tag_side!r}: expected one of {', '.join(TAG_SIDES)} (the "
                             f"target-language tag in front of the source, or as the decoder's first token)")
        if data.get("pairs") is None:
            if tag_side != "source":
                raise ValueError(f"{where}.tag_side={tag_side}: a target-language tag needs several "
                                 f"directions ({where}.pairs=[en-de,en-fr]); one pair is read untagged")
            return cls(data.get("src_lang"), data.get("tgt_lang"), None, tag_side)
        return cls.of_directions(check_pairs(data, where), tag_side)

    @classmethod
    def of_directions(cls, directions: Sequence[Direction], tag_side: str = "source") -> "Languages":
        """A multilingual model's languages: the pair it records is each side's one language, or
        :data:`MULTI` where a side has several."""
        src_langs, tgt_langs = ({d[i] for d in directions} for i in (0, 1))
        src = next(iter(src_langs)) if len(src_langs) == 1 else MULTI
        tgt = next(iter(tgt_langs)) if len(tgt_langs) == 1 else MULTI
        return cls(src, tgt, tuple(directions), tag_side)

    # ------------------------------------------------------------------ what it is
    @property
    def multilingual(self) -> bool:
        """Whether the model was trained on several directions with target tags."""
        return self.directions is not None

    @property
    def coded(self) -> bool:
        """Whether a pretrained family's model reads a code of each side's language
        (``data.tag_side=codes``: the source's in front of the source, the target's after the
        decoder's start)."""
        return self.tag_side == CODES

    @property
    def tag_to_decoder(self) -> bool:
        """Whether the decoder reads the target tag as its first token (``data.tag_side=decoder``)."""
        return self.tag_side == "decoder"

    @property
    def trained(self) -> list[Direction]:
        """The directions the model was trained on; a bilingual model's one pair."""
        return list(self.directions) if self.directions is not None else [(self.src_lang, self.tgt_lang)]

    def _side(self, side: int) -> list[str]:
        """The languages on one side (0: read, 1: written) of the model's directions, in their
        order (of a model between any two of its languages, those languages in their order)."""
        if self.languages is not None:
            return list(self.languages)
        return list(dict.fromkeys(d[side] for d in self.trained))

    @property
    def sources(self) -> list[str]:
        """The languages the model reads (:meth:`_side`)."""
        return self._side(0)

    @property
    def targets(self) -> list[str]:
        """The languages the model writes (:meth:`_side`)."""
        return self._side(1)

    def record(self) -> dict[str, Any]:
        """What a checkpoint records of these languages, in ``hyper_parameters``' shape
        (:meth:`of_checkpoint` reads it back to an equal value)."""
        names = [direction_name(d) for d in self.directions] if self.directions and self.languages is None else None
        data: dict[str, Any] = {"directions": names, "tag_side": self.tag_side}
        if self.languages is not None:  # every direction between them, derived again on reading
            data["languages"] = list(self.languages)
        if self.codes is not None:
            data["language_codes"] = dict(self.codes)
        return {"src_lang": self.src_lang, "tgt_lang": self.tgt_lang, "data": data}

    def info(self) -> dict[str, Any]:
        """What ``GET /v1/models`` says of a translation model's languages."""
        return {"directions": [direction_name(d) for d in self.trained], "source_languages": self.sources,
                "target_languages": self.targets, "multilingual": self.multilingual}

    def _known(self) -> str:
        if self.languages is not None:
            return f"any two of its languages: {', '.join(self.languages)}"
        return f"its directions: {', '.join(map(direction_name, self.trained))}"

    # ------------------------------------------------------------------ what it is asked
    def check_target(self, tgt_lang: str | None) -> str | None:
        """The target language to tag sources with, or None for a bilingual model (untagged).

        A multilingual model needs ``tgt_lang`` when it writes several languages (one it writes
        alone is taken by default); a language it was not trained to produce is a ``ValueError``
        naming the ones it knows. A bilingual model accepts its own target language or none.
        """
        targets = self.targets
        if tgt_lang is not None and tgt_lang not in targets:
            raise ValueError(f"tgt_lang={tgt_lang}: this model translates into {', '.join(targets)} ({self._known()})")
        if not self.multilingual:
            return None
        if tgt_lang is None:
            if len(targets) > 1:
                raise ValueError(f"tgt_lang: required, this model translates into {', '.join(targets)} "
                                 f"({self._known()}); e.g. tgt_lang={targets[0]}")
            return targets[0]
        return tgt_lang

    def check_direction(self, src_lang: str | None, tgt_lang: str | None, zero_shot: bool = False,
                        zero_shot_key: str = "decode.zero_shot") -> Direction:
        """The direction ``(src, tgt)`` asked of the model, each side defaulting to the one
        language it has there; a direction it was not trained on is a ``ValueError`` naming
        them. With ``zero_shot`` a multilingual model is also asked for a direction it was not
        trained on, between a language it reads and another it writes (de→fr from a model
        trained on en↔de and en↔fr: the tag asks for French whatever the source, Johnson et
        al.'s zero-shot)."""
        sources = self.sources
        if src_lang is not None and src_lang not in sources:
            raise ValueError(f"src_lang={src_lang}: this model translates from {', '.join(sources)} ({self._known()})")
        target = self.check_target(tgt_lang) or self.tgt_lang
        if src_lang is None:
            candidates = [s for s, t in self.trained if t == target]
            if len(candidates) > 1:
                raise ValueError(f"src_lang: required, this model translates into {target} from "
                                 f"{', '.join(candidates)} ({self._known()})")
            src_lang = candidates[0]
        if self.languages is not None:  # any two of its languages
            if src_lang == target:
                raise ValueError(f"{src_lang}-{target}: source and target are the same language")
            return src_lang, target
        if self.directions is not None and (src_lang, target) not in self.directions:
            if src_lang == target:
                raise ValueError(f"{src_lang}-{target}: source and target are the same language ({self._known()})")
            if not zero_shot:
                raise ValueError(f"{src_lang}-{target}: this model was not trained on that direction "
                                 f"({self._known()}; {zero_shot_key}=true asks for it anyway)")
        return src_lang, target

    def check_pivot(self, src_lang: str | None, pivot: str, tgt_lang: str | None,
                    key: str = "decode.pivot") -> Direction:
        """The source and target of ``src_lang`` → ``pivot`` → ``tgt_lang`` (each defaulting as
        :meth:`check_direction` defaults it), both legs directions the model was trained on;
        otherwise one ``ValueError`` line, starting with ``key`` (the setting's name where it was
        given), naming the missing leg and the model's directions."""
        if not self.multilingual:
            raise ValueError(f"{key}={pivot}: the checkpoint translates {self.src_lang}-{self.tgt_lang} only; a "
                             f"pivot needs a multilingual model (data.pairs)")
        if tgt_lang is None:
            raise ValueError(f"{key}={pivot}: give tgt_lang, the language to reach through {pivot}")
        if pivot in (src_lang, tgt_lang):
            raise ValueError(f"{key}={pivot}: the pivot must differ from src_lang and tgt_lang")
        try:
            src, _ = self.check_direction(src_lang, pivot)
        except ValueError as exc:
            raise ValueError(f"{key}={pivot}: the first leg into {pivot}: {exc}") from None
        if src == tgt_lang:
            raise ValueError(f"{key}={pivot}: src_lang={src} is tgt_lang; nothing to translate")
        try:
            self.check_direction(pivot, tgt_lang)
        except ValueError as exc:
            raise ValueError(f"{key}={pivot}: the second leg {pivot}-{tgt_lang}: {exc}") from None
        return src, tgt_lang

    def split_tag(self, ids: Sequence[int]) -> tuple[list[int], int | None]:
        """A framed source (:func:`tagged_source_ids`) as the model reads it: with
        ``data.tag_side=decoder`` the first id, the tag, comes off and is returned as the
        decoder's start token; otherwise ``(ids, None)`` (the decoder starts from BOS)."""
        if self.tag_to_decoder and ids:
            return list(ids[1:]), int(ids[0])
        return list(ids), None

    def coded_framing(self, tokenizer, src_lang: str | None, tgt_lang: str) -> list[int]:
        """A pretrained family's framing (``data.tag_side=codes``) of a sentence from ``src_lang``
        into ``tgt_lang``, in front of its pieces, tag first as :func:`tagged_source_ids` frames
        one: the target's code, which the collator moves after the decoder's start (where search
        forces it), then the source's, which starts the source. ``src_lang`` None, or a language
        without a code, is a ``ValueError`` naming the key."""
        codes = self.codes or {}
        if src_lang is None:
            raise ValueError(f"src_lang: required, this model reads the source's language code ({self._known()})")
        ids = []
        for key, lang in (("tgt_lang", tgt_lang), ("src_lang", src_lang)):
            i = tokenizer.token_to_id(codes[lang]) if lang in codes else None
            if i is None:
                raise ValueError(f"{key}={lang}: not a language of this model ({self._known()})")
            ids.append(i)
        return ids


# ---------------------------------------------------------------------------- framing a source


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


def rejoin_tag(row: Sequence[int], start: int | None) -> tuple[int, ...]:
    """:meth:`Languages.split_tag` undone: the framed source of a source ``row`` and its start token (None:
    BOS, the row is framed already), to match a searched row back to its sentence."""
    return (*([] if start is None else [int(start)]), *row)


def tagged_source_ids(tokenizer, text: str, tgt_lang: str | None) -> list[int]:
    """The source ids a model reads for ``text`` translated into ``tgt_lang``: ``<2xx>`` then
    the text's pieces (no BOS/EOS: the collator appends EOS as in training). ``tgt_lang`` None
    (a bilingual model, :meth:`Languages.check_target`): the pieces alone."""
    return tag_ids(tokenizer, tokenizer.encode(text), tgt_lang)


__all__ = ["CODES", "MULTI", "TAG_SIDES", "Direction", "Languages", "add_tags", "check_pairs", "direction_name", "distill_train",
           "languages_held", "parse_direction", "parse_pairs", "rejoin_tag", "tag", "tag_id", "tag_ids",
           "tagged_source_ids", "tags"]
