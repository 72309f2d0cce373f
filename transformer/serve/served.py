"""One checkpoint behind the API: a loaded task as a served model of its kind.

Each kind answers with the predictor its command uses: ``task.translator`` as
``transformer-decode`` (alignments as its ``decode.print_alignment``), ``task.tagger`` with the
words split as ``transformer-tag`` splits a text line, ``task.classifier`` as
``transformer-classify``; so a sentence gets the same answer from the server and the command.
Attention for the page is what ``transformer-inspect`` draws: ``translation_attention`` (a
teacher-forced pass over the model's own output) and ``classification_attention``, over pieces
and over words (:func:`word_groups`, :func:`word_attention`): a person reads words, and a word
cut into pieces would otherwise spread its weight over columns nobody can read alone.

A request's decoding overrides are checked against what the model's decoding takes and the
server's limits, and become a hashable settings key: the batcher decodes together only requests
with equal settings. ``predict`` runs on the model's worker thread, one call at a time.

A multilingual translation model (Johnson et al. 2017: the target language is a ``<2xx>`` token
in front of the source, ``data.parallel.languages``) takes ``tgt_lang`` (and ``src_lang``) per
request. The language is no decoding setting: it travels with each sentence (:class:`Source`,
what :meth:`ServedModel.texts` makes of a request's inputs) and is tagged onto that sentence's
source ids, so requests into different languages decode together in one batch.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import logging
import tempfile
from pathlib import Path
from collections import OrderedDict
from dataclasses import dataclass
from typing import Hashable, Iterator, Sequence

import torch

from transformer import kinds
from transformer.data.parallel import languages
from transformer.decoding import strategies
from transformer.decoding.settings import DecodeSettings
from transformer.inference.pivot import tagging_encode, target_of
from transformer.inference.tagger import split_tokens
from transformer.inference.translator import one_line
from transformer.inspect.attention import translate_with_alignments, translation_attention
from transformer.inspect.classification import classification_attention
from transformer.inspect.report import piece_labels

log = logging.getLogger(__name__)

# Decoding settings a model keeps built (a CTC shortlist copies the model): the newest few.
TRANSLATORS_KEPT = 8
# The request keys that change a decoding setting, in the order a model lists them, each with the
# setting that a strategy must read for the key to apply (max_len: max_len_a=0, max_len_b=max_len).
DECODE_OPTIONS = {"beam_size": "beam_size", "n_best": "n_best", "max_len": "max_len_b", "max_len_a": "max_len_a",
                  "max_len_b": "max_len_b", "top_k": "top_k"}


class RequestError(ValueError):
    """A request the model cannot take; ``status`` is the HTTP status that says why."""

    def __init__(self, message: str, status: int = 422):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Limits:
    """What a request may ask for: beams up to ``max_beam_size``, outputs up to ``max_len``
    pieces (a model's own positional range caps them too)."""

    max_beam_size: int = 16
    max_len: int = 512


def decode_options(strategy: strategies.Strategy) -> tuple[str, ...]:
    """The request keys (``DECODE_OPTIONS``) that change a setting ``strategy`` reads."""
    return tuple(option for option, key in DECODE_OPTIONS.items() if key in strategy.keys)


class ServedModel:
    """A model the server answers for: its ``kind``, the endpoint that takes it, the request
    keys it takes beyond ``model`` and ``inputs`` (``options``), and ``predict``."""

    kind = ""
    endpoint = ""
    decoding: DecodeSettings | None = None  # a translation model's decoding settings
    top_k: int | None = None  # a classification model's default number of labels
    device: str | None = None  # where a model that searches runs
    #: What the server's warm-up call sends (``app.Dispatcher.warm_up``): a short input of the model's kind.
    warm_up_input = "warm up ."

    def __init__(self, model_id: str, task, checkpoint: str, limits: Limits = Limits()):
        self.id, self.task, self.checkpoint, self.limits = model_id, task, checkpoint, limits
        self.options: tuple[str, ...] = ()
        self.attends = False

    def info(self) -> dict:
        """What ``GET /v1/models`` says of this model."""
        audio = kinds.input_kind(getattr(self.task, "hparams", None)) is kinds.FRAMES  # uploads in base64
        return {"id": self.id, "kind": self.kind, "endpoint": self.endpoint, "checkpoint": self.checkpoint,
                "options": list(self.options), "attention": self.attends, **({"input": "audio"} if audio else {})}

    def settings(self, overrides: dict) -> Hashable:
        """The settings key of a request's ``overrides`` (keys given, values set); a key this
        model does not take, or a value past the limits, is a :class:`RequestError`."""
        overrides = {k: v for k, v in overrides.items() if not (k == "attention" and v is False)}
        for key in overrides:
            if key not in self.options:
                takes = ", ".join(self.options) or "no options"
                raise RequestError(f"{key} does not apply to model '{self.id}' ({self.describe()}); it takes {takes}",
                                   400)
        return self._settings(overrides)

    def describe(self) -> str:
        return f"a {self.kind} model"

    def texts(self, inputs: Sequence[str], overrides: dict) -> list:
        """The request's ``inputs`` as ``predict`` takes them (checked against ``overrides``)."""
        return list(inputs)

    def next_leg(self, outputs: list[dict], overrides: dict) -> list | None:
        """The texts a second model call takes after the first's ``outputs`` (a pivot's second
        leg), or None: the outputs are the answer."""
        return None

    def _settings(self, overrides: dict) -> Hashable:
        return bool(overrides.get("attention", False))

    def count_tokens(self, text: str) -> int:
        """The pieces ``text`` costs the model (for the batch budget and the request limit)."""
        raise NotImplementedError

    def predict(self, texts: Sequence[str], settings: Hashable) -> list[dict]:
        """One output per text, in order (runs on the model's worker thread)."""
        raise NotImplementedError


class Source(str):
    """A sentence to translate into ``tgt_lang`` (None: a bilingual model's untagged source).
    Equal only to the same sentence into the same language, so that the attention view and
    the alignments, which key sources by text, keep a sentence asked in two languages apart."""

    tgt_lang: str | None
    src_lang: str | None  # its language, where the model reads it (a pretrained family's code)

    def __new__(cls, text: str, tgt_lang: str | None, src_lang: str | None = None):
        source = super().__new__(cls, text)
        source.tgt_lang, source.src_lang = tgt_lang, src_lang
        return source

    def __eq__(self, other: object) -> bool:
        return (str.__eq__(self, other) and getattr(other, "tgt_lang", None) == self.tgt_lang
                and getattr(other, "src_lang", None) == self.src_lang)

    def __hash__(self) -> int:
        return hash((str(self), self.tgt_lang, self.src_lang))


SPIECE = "\u2581"  # SentencePiece's word-start marker


def word_start_rule(tokenizer):
    """``starts(id) -> bool``: whether a piece begins a word, as the tokenizer marks it:
    ``SubwordTokenizer.word_starts`` (byte-level ``Ġ``, not WordPiece's ``##``, every piece of a
    word-level vocabulary), else SentencePiece's ``▁``; special tokens always."""
    if hasattr(tokenizer, "word_starts"):
        table = tokenizer.word_starts()
        return lambda i: i >= len(table) or table[i]
    # ``<unk>`` stands for characters the vocabulary lacks, inside a word (``l<unk>uft``).
    specials = tokenizer.special_ids - {tokenizer.unk_id}
    return lambda i: i in specials or (i != tokenizer.unk_id and (tokenizer.id_to_token(i) or SPIECE).startswith(SPIECE))


def word_groups(tokenizer, ids: Sequence[int], starts=None) -> tuple[list[int], list[str]]:
    """Each piece's word index and each word's text (special tokens by name, alone).

    The first piece, a special token and the piece after one start a word (``<unk>`` is no
    such token: it stands for characters within a word); a word of only whitespace (a lone
    byte-level ``Ġ``) joins the word after it, so no word reads as blank.
    ``starts``: :func:`word_start_rule` of the tokenizer, when the caller keeps it.
    """
    starts = starts or word_start_rule(tokenizer)
    unk = tokenizer.unk_id
    specials = set(tokenizer.special_ids) - {unk}
    groups: list[list[int]] = []  # piece positions of each word
    for pos, i in enumerate(ids):
        new = not groups or i in specials or ids[pos - 1] in specials or starts(int(i))
        if new:
            groups.append([pos])
        else:
            groups[-1].append(pos)

    def text(group: list[int]) -> str:
        if len(group) == 1 and ids[group[0]] in specials:
            return tokenizer.id_to_token(int(ids[group[0]])) or ""
        runs: list[list[int]] = [[]]  # the pieces between ``<unk>``s, decoded run by run
        for p in group:
            if ids[p] == unk:
                runs.append([])
            else:
                runs[-1].append(int(ids[p]))
        return (tokenizer.id_to_token(unk) or "<unk>").join(tokenizer.decode(r) if r else "" for r in runs).strip()

    def special(group: list[int]) -> bool:
        return len(group) == 1 and ids[group[0]] in specials

    merged: list[list[int]] = []
    pending: list[int] = []  # blank pieces waiting for a word
    for group in [*groups, None]:
        if group is not None and not special(group) and not text(group):
            pending += group
            continue
        if pending:
            if group is not None and not special(group):
                group = pending + group
            elif merged and not special(merged[-1]):
                merged[-1] += pending  # before a special token or the end: the word before takes it
            else:
                merged.append(pending)
            pending = []
        if group is not None:
            merged.append(group)
    word_of = [0] * len(ids)
    for w, group in enumerate(merged):
        for pos in group:
            word_of[pos] = w
    return word_of, [text(g) or "\u2423" for g in merged]


def word_attention(att: torch.Tensor, tgt_word: Sequence[int], src_word: Sequence[int]) -> torch.Tensor:
    """``att (..., T, S)`` over pieces as ``(..., T_w, S_w)`` over words: a source word gets the
    sum of its pieces' weights (so a row still sums to 1) and a target word the mean of its
    pieces' rows (each piece was one prediction). ``tgt_word``/``src_word``: each piece's word."""
    n_t, n_s = max(tgt_word) + 1, max(src_word) + 1
    src_sum = torch.zeros(len(src_word), n_s, dtype=att.dtype)  # (S, S_w): one-hot
    src_sum[torch.arange(len(src_word)), torch.as_tensor(src_word)] = 1
    tgt_mean = torch.zeros(n_t, len(tgt_word), dtype=att.dtype)  # (T_w, T): 1/k over a word's pieces
    tgt_mean[torch.as_tensor(tgt_word), torch.arange(len(tgt_word))] = 1
    tgt_mean /= tgt_mean.sum(-1, keepdim=True)
    return tgt_mean @ att.to("cpu") @ src_sum  # (T_w, T) @ (..., T, S) @ (S, S_w) -> (..., T_w, S_w)


def rounded(t: torch.Tensor, digits: int = 4) -> list:
    """``t`` as nested lists of floats with ``digits`` decimals (attention for JSON)."""
    scale = 10.0 ** digits
    return (t.double() * scale).round().div(scale).tolist()


class TranslationModel(ServedModel):
    """An autoregressive, Mask-Predict or CTC translation checkpoint with its decode preset.

    Requests may change the beam (``beam_size``, ``n_best``: beam search; ``beam_size``,
    ``top_k``: CTC prefix beam), the length cap of autoregressive search (``max_len``, or
    ``max_len_a`` and ``max_len_b``) and ask for ``attention`` (autoregressive, one model).
    Any translation model takes ``tgt_lang``/``src_lang`` naming one of its directions (a
    bilingual model its own pair); a multilingual one tags each sentence for its ``tgt_lang``.
    """

    kind, endpoint = "translation", "/v1/translate"

    def __init__(self, model_id: str, task, checkpoint: str, decoding: DecodeSettings | dict,
                 device: torch.device | str = "cpu", limits: Limits = Limits()):
        super().__init__(model_id, task, checkpoint, limits)
        self.decoding, self.device = DecodeSettings.of(decoding), device
        # a strategy the checkpoint cannot decode with fails here, at start-up
        self.strategy = strategies.choose(self.decoding, task.model_kind)
        self.autoregressive = kinds.task_kind(task).generates_from_start
        model = task.model
        # a pretrained family's model starts its decoder with two ids: no attention view of it
        self.attends = (self.autoregressive and hasattr(model, "encoder") and not task.languages.coded
                        and hasattr(getattr(model, "decoder", None), "init_cache"))
        self.options = (*decode_options(self.strategy), *(["attention"] if self.attends else []))
        self._languages(task.languages)
        self._translators: OrderedDict[tuple, object] = OrderedDict()
        translator = self._translator(())
        if self.decoding.compile:
            # decode.compile: the step compiles here, on a single sentence and on a batch, not
            # within the first requests' time limit (one to two minutes on a CPU).
            for batch in (["a"], ["a b c", "a b c d e f g h i j"]):
                translator.translate(batch)

    def describe(self) -> str:
        return f"{kinds.task_kind(self.task).what.removeprefix('a ').removeprefix('an ')}, decode={self.strategy.name}"

    def info(self) -> dict:
        return {**super().info(), "decode": self.decoding.to_dict(), **self.languages.info()}

    def _languages(self, model_languages: languages.Languages) -> None:
        """The model's languages: a multilingual model takes ``tgt_lang`` and ``src_lang`` per
        request and tags its sources."""
        self.languages = model_languages
        self.multilingual = model_languages.multilingual
        # a plain sentence (the warm-up call) goes into the first target language
        self.default_tgt = model_languages.targets[0] if self.multilingual else None
        # a pretrained family's model reads the source's language too: a plain sentence's is the first other one
        self.coded = model_languages.coded
        self.default_src = (next(s for s in model_languages.sources if s != self.default_tgt)
                            if self.coded and self.multilingual else None)
        if self.multilingual:
            self.options = (*self.options, "tgt_lang", "src_lang", "pivot", "zero_shot")

    def settings(self, overrides: dict) -> Hashable:
        # the languages are the sentences' own (``texts``), never a reason to decode apart; a
        # bilingual model takes its own pair, so a client may name the languages to any model
        # (a pivot it refuses in ``texts``, naming why)
        return super().settings({k: v for k, v in overrides.items()
                                 if k not in ("tgt_lang", "src_lang", "pivot", "zero_shot")})

    def texts(self, inputs: Sequence[str], overrides: dict) -> list:
        """Each input as a :class:`Source` into the request's ``tgt_lang`` (a multilingual
        model), or as it is (a bilingual one); a language or direction the model was not
        trained on is a :class:`RequestError` naming the model's. With ``pivot``: the first
        leg's sources, into the pivot language (:meth:`next_leg` gives the second's)."""
        src, tgt = overrides.get("src_lang"), overrides.get("tgt_lang")
        try:
            if overrides.get("pivot") is not None:
                self.languages.check_pivot(src, overrides["pivot"], tgt, key="pivot")
                if overrides.get("attention"):
                    raise ValueError("attention: not available with pivot (the answer is the second leg's, "
                                     "from a source the client did not send)")
                return [Source(text, overrides["pivot"]) for text in inputs]
            if src is not None or (self.coded and self.multilingual):
                src, target = self.languages.check_direction(src, tgt, bool(overrides.get("zero_shot")), "zero_shot")
                target = target if self.multilingual else None
            else:
                target = self.languages.check_target(tgt)
        except ValueError as exc:
            raise RequestError(f"model '{self.id}': {exc}") from None
        return list(inputs) if target is None else [Source(text, target, src if self.coded else None) for text in inputs]

    def next_leg(self, outputs: list[dict], overrides: dict) -> list | None:
        """A pivot's second leg: the best translation of each input into the pivot language,
        into ``tgt_lang`` (``transformer-decode decode.pivot=``, :mod:`transformer.inference.pivot`)."""
        if overrides.get("pivot") is None:
            return None
        return [Source(out["translation"], overrides["tgt_lang"]) for out in outputs]

    def _settings(self, overrides: dict) -> Hashable:
        cfg = {}
        beam = overrides.get("beam_size", self.decoding.beam_size)
        if "beam_size" in overrides:
            if not 1 <= beam <= self.limits.max_beam_size:
                raise RequestError(f"beam_size={beam}: expected 1 to {self.limits.max_beam_size}")
            cfg["beam_size"] = beam
        if "n_best" in overrides:
            if not 1 <= overrides["n_best"] <= beam:
                raise RequestError(f"n_best={overrides['n_best']}: expected 1 to beam_size={beam}")
            cfg["n_best"] = overrides["n_best"]
        if "top_k" in overrides:
            if not 1 <= overrides["top_k"] <= 1024:
                raise RequestError(f"top_k={overrides['top_k']}: expected 1 to 1024")
            cfg["top_k"] = overrides["top_k"]
        cfg.update(self._length_cap(overrides))
        return tuple(sorted(cfg.items())), bool(overrides.get("attention", False))

    def _length_cap(self, overrides: dict) -> dict:
        """``max_len`` as ``max_len_a=0, max_len_b=max_len``, or ``max_len_a``/``max_len_b``
        over the preset's; the cap stays within ``limits.max_len`` and allows a piece."""
        cap = self.limits.max_len
        if "max_len" in overrides:
            if set(overrides) & {"max_len_a", "max_len_b"}:
                raise RequestError("give max_len or max_len_a/max_len_b, not both")
            if not 1 <= overrides["max_len"] <= cap:
                raise RequestError(f"max_len={overrides['max_len']}: expected 1 to {cap}")
            return {"max_len_a": 0, "max_len_b": overrides["max_len"]}
        if not set(overrides) & {"max_len_a", "max_len_b"}:
            return {}
        a = overrides.get("max_len_a", self.decoding.max_len_a)
        b = overrides.get("max_len_b", self.decoding.max_len_b)
        if not (0 <= a <= 10 and 0 <= b <= cap and (a > 0 or b >= 1)):
            raise RequestError(f"max_len_a={a} max_len_b={b}: expected 0 <= max_len_a <= 10 and 0 <= max_len_b "
                               f"<= {cap}, allowing at least one output piece")
        return {"max_len_a": a, "max_len_b": b}

    def _translator(self, decode: tuple):
        """The ``task.translator`` of the preset with ``decode`` over it, built once."""
        if decode not in self._translators:
            translator = self.task.translator(self.decoding.replace(**dict(decode)), device=self.device)
            if self.multilingual:
                translator.encode = tagging_encode(translator, self.task.src_tokenizer, self.default_tgt,
                                                   self.default_src)
            self._translators[decode] = translator
            while len(self._translators) > TRANSLATORS_KEPT:
                self._translators.popitem(last=False)
        self._translators.move_to_end(decode)
        return self._translators[decode]

    def count_tokens(self, text: str) -> int:
        """Pieces, EOS and the language tag of a multilingual model."""
        tag = target_of(text, self.default_tgt) is not None
        return len(self.task.src_tokenizer.encode(text)) + 1 + tag if text.strip() else 0

    def predict(self, texts: Sequence[str], settings: Hashable) -> list[dict]:
        decode, attention = settings
        translator = self._translator(decode)
        before = translator.truncated
        if attention:
            nbest, alignments, views = self._translate_attending(translator, texts)
        else:
            nbest, alignments, views = translator.translate(texts), None, None
        if translator.truncated > before:
            log.warning("%s: %d input(s) longer than the model reads were cut", self.id, translator.truncated - before)
        outputs = []
        for i, hyps in enumerate(nbest):
            hypotheses = [{"text": text, "score": score} for text, score in hyps]
            if alignments is not None:
                for hyp, line in zip(hypotheses, alignments[i]):
                    hyp["alignment"] = line
            outputs.append({"translation": hyps[0][0] if hyps else "", "hypotheses": hypotheses,
                            "attention": views[i] if views is not None else None})
        return outputs

    def _translate_attending(self, translator, texts: Sequence[str]):
        """``translate_with_alignments`` (the command line's ``print_alignment``), and per
        sentence the cross-attention of every layer and head over its best hypothesis."""
        hp = self.task.hparams
        best: dict[tuple[int, ...], list[int]] = {}
        sources: dict[str, list[int]] = {}
        search, encode = translator.search, translator.encode

        def recording_search(src: torch.Tensor, start: torch.Tensor | None = None):
            results = search(src) if start is None else search(src, start=start)
            starts = [None] * len(results) if start is None else start.tolist()  # a decoder-side tag per row
            for row, begin, hyps in zip(src.tolist(), starts, results):
                key = languages.rejoin_tag([t for t in row if t not in (hp.pad_id, hp.eos_id)], begin)
                best[key] = list(hyps[0][0]) if hyps else []
            return results

        def recording_encode(text: str) -> list[int]:
            sources[text] = ids = encode(text)
            return ids

        translator.search, translator.encode = recording_search, recording_encode
        try:
            layer = self.decoding.alignment_layer
            nbest, alignments = translate_with_alignments(self.task, translator, texts, layer)
        finally:
            translator.search, translator.encode = search, encode
        views = [self._attention_view(sources[t], best[tuple(sources[t])]) if t in sources else None for t in texts]
        return nbest, alignments, views

    @torch.no_grad()
    def _attention_view(self, ids: list[int], hyp: list[int]) -> dict:
        """Cross-attention ``(layer, head, T, S)`` of one sentence, with its axis labels."""
        hp = self.task.hparams
        ids, start = self.task.languages.split_tag(ids)  # a decoder-side tag starts the target instead
        src = torch.tensor([ids + [hp.eos_id]], dtype=torch.long, device=self.device)  # (1, S)
        att = translation_attention(self.task.model, src, [hyp], hp.bos_id if start is None else start, hp.pad_id)
        layer = self.decoding.alignment_layer
        src_ids, tgt_ids = src[0].tolist(), [*hyp, hp.eos_id]
        src_word, source_words = word_groups(self.task.src_tokenizer, src_ids, self._starts("src"))
        tgt_word, target_words = word_groups(self.task.tgt_tokenizer, tgt_ids, self._starts("tgt"))
        return {"source": piece_labels(self.task.src_tokenizer, src_ids),
                "target": piece_labels(self.task.tgt_tokenizer, tgt_ids),
                "cross": [rounded(w[0]) for w in att.cross],  # [(H, T, S)] * n_layers
                "alignment_layer": len(att.cross) - 1 if layer is None else int(layer) % len(att.cross),
                "source_words": source_words, "source_word": src_word,
                "target_words": target_words, "target_word": tgt_word,
                "cross_words": [rounded(word_attention(w[0], tgt_word, src_word)) for w in att.cross]}

    def _starts(self, side: str):
        """The word-start rule of the ``src`` or ``tgt`` tokenizer, built once."""
        rules = self.__dict__.setdefault("_start_rules", {})
        if side not in rules:
            rules[side] = word_start_rule(self.task.src_tokenizer if side == "src" else self.task.tgt_tokenizer)
        return rules[side]


class CTranslate2Model(TranslationModel):
    """A CTranslate2 export (``transformer-export format=ctranslate2``): greedy or beam search
    run by CTranslate2 under our length rule (``export.ctranslate2.CTranslate2Translator``), so
    a float32 export answers as its checkpoint does. Requests may change ``beam_size`` and
    ``n_best`` (beam) and the length cap; no attention (CTranslate2 does not give every layer's)."""

    def __init__(self, model_id: str, model_dir: str, label: str, decoding: DecodeSettings | dict, device: str = "cpu",
                 threads: int = 1, limits: Limits = Limits()):
        from transformer.export.ctranslate2 import CTranslate2Translator

        ServedModel.__init__(self, model_id, None, label, limits)
        self.decoding, self.device = DecodeSettings.of(decoding), device
        self.strategy = strategies.choose(self.decoding, strategies.AUTOREGRESSIVE)
        self.autoregressive = True
        self.translator = CTranslate2Translator(model_dir, device=device, threads=threads)
        self.options = decode_options(self.strategy)
        self._languages(self.translator.languages)

    def describe(self) -> str:
        return f"CTranslate2 export, decode={self.strategy.name}"

    def info(self) -> dict:
        return {**super().info(), "backend": "ctranslate2"}

    def count_tokens(self, text: str) -> int:
        tag = target_of(text, self.default_tgt) is not None
        return len(self.translator.src_tok.encode(text)) + 1 + tag if text.strip() else 0

    def predict(self, texts: Sequence[str], settings: Hashable) -> list[dict]:
        decode, _ = settings
        cfg = self.decoding.replace(**dict(decode))
        # one call at a time on the model's worker thread: the cap can be set for this call
        self.translator.max_len_a, self.translator.max_len_b = cfg.max_len_a, cfg.max_len_b
        beam = cfg.beam_size if "beam_size" in self.strategy.reads else 1
        targets = [target_of(t, self.default_tgt) for t in texts]  # each sentence its own tag
        sources = [getattr(t, "src_lang", None) or self.default_src for t in texts]  # a pretrained family's codes
        nbest = self.translator.translate_nbest(list(texts), beam, cfg.length_penalty, cfg.n_best, targets, sources)
        return [{"translation": one_line(hyps[0][0]), "hypotheses": [{"text": one_line(t), "score": v} for t, v in hyps],
                 "attention": None} for hyps in nbest]


class TaggingModel(ServedModel):
    """A tagger: each input is one line of words separated by spaces or tabs, as
    ``transformer-tag`` reads text; every word gets its tag (and its auxiliary tag)."""

    kind, endpoint = "tagging", "/v1/tag"

    def __init__(self, model_id: str, task, checkpoint: str, max_tokens: int = 4096, device=None,
                 limits: Limits = Limits()):
        super().__init__(model_id, task, checkpoint, limits)
        self.tagger = task.tagger(max_tokens, device)
        if any(tokenizer is None for _, tokenizer, _ in self.tagger.members):
            raise ValueError("this checkpoint has no tokenizer; it cannot tag raw words")

    def info(self) -> dict:
        return {**super().info(), "tagset": self.tagger.tagset, "labels": list(self.tagger.tags)}

    def count_tokens(self, text: str) -> int:
        words = split_tokens(text)
        return len(self.tagger.members[0][1].encode_words(words)[0]) if words else 0

    def predict(self, texts: Sequence[str], settings: Hashable) -> list[dict]:
        words = [split_tokens(t) for t in texts]
        fields = self.tagger.tag_fields(words)
        main = fields[self.tagger.tagset]
        return [{"words": w, "tags": main[i], "fields": {name: tags[i] for name, tags in fields.items()}}
                for i, w in enumerate(words)]


class ClassificationModel(ServedModel):
    """A sentence classifier: the label, its probability, the ``top_k`` best labels (``top_k``
    per request, else the model's), every label's probability, and with ``attention`` the
    attention pooling's weight on each token (``classification_attention``)."""

    kind, endpoint = "classification", "/v1/classify"

    def __init__(self, model_id: str, task, checkpoint: str, max_tokens: int = 4096, top_k: int = 1, device=None,
                 limits: Limits = Limits()):
        super().__init__(model_id, task, checkpoint, limits)
        self.classifier = task.classifier(max_tokens, device)
        self.labels = list(self.classifier.labels)
        self.top_k = min(int(top_k), len(self.labels))
        self.attends = hasattr(task.model, "pool")
        self.options = ("top_k", "attention") if self.attends else ("top_k",)

    def info(self) -> dict:
        return {**super().info(), "labels": self.labels}

    def _settings(self, overrides: dict) -> Hashable:
        k = overrides.get("top_k", self.top_k)
        if not 1 <= k <= len(self.labels):
            raise RequestError(f"top_k={k}: expected 1 to {len(self.labels)} (the model's labels)")
        return k, bool(overrides.get("attention", False))

    def count_tokens(self, text: str) -> int:
        return len(self.classifier.members[0][1].encode(text))

    def predict(self, texts: Sequence[str], settings: Hashable) -> list[dict]:
        k, attention = settings
        ranked = self.classifier.top_k(texts, len(self.labels))  # every label, best first
        outputs = []
        for text, pairs in zip(texts, ranked):
            out = {"label": pairs[0][0], "probability": pairs[0][1],
                   "top": [{"label": label, "probability": p} for label, p in pairs[:k]],
                   "probabilities": {label: p for label, p in pairs}, "attention": None}
            if attention and text:
                out["attention"] = self._attention_view(text)
            outputs.append(out)
        return outputs


    def _attention_view(self, text: str) -> dict:
        """The pooling's weights ``(H, T)`` on each token (``classification_attention``) and
        summed over each word's pieces ``(H, W)``; a ``[CLS]`` the pooling adds is a word alone."""
        arrays = classification_attention(self.task, text)
        tokens = [str(t) for t in arrays["tokens"]]
        tokenizer = self.task.tokenizer
        if "_starts" not in self.__dict__:
            self._starts = word_start_rule(tokenizer)
        ids = tokenizer.encode(text)[: self.task.members()[0][2] - 1]  # as classification_attention reads it
        offset = len(tokens) - len(ids)
        word_of, words = word_groups(tokenizer, ids, self._starts)
        word_of = [*range(offset), *(w + offset for w in word_of)]
        words = ["[CLS]"] * offset + words
        pooling = arrays.get("pooling")
        view = {"tokens": tokens, "words": words, "word": word_of, "pooling": None, "pooling_words": None}
        if pooling is not None:
            weights = torch.from_numpy(pooling)  # (H, T)
            view["pooling"] = rounded(weights)
            # a word's weight is its pieces' sum; each head is a row of its own: (H, T) -> (H, W)
            view["pooling_words"] = rounded(word_attention(weights, list(range(len(weights))), word_of))
        return view


class UploadClassificationModel(ClassificationModel):
    """A classifier whose inputs are files (``transformer.kinds``: an input kind other than text)
    on ``/v1/classify``: each input is one file encoded in base64, as a JSON body carries an upload
    (:func:`uploaded`); a file the model cannot read (``refused()``, the reader's error) is a 422."""

    #: What one input is, for messages.
    upload = "a file"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.attends, self.options = False, ("top_k",)

    def predict(self, texts: Sequence[str], settings: Hashable) -> list[dict]:
        with uploaded(texts, self.upload, self.refused()) as paths:
            return super().predict(paths, settings)


@contextlib.contextmanager
def uploaded(texts: Sequence[str], what: str, refused: type[Exception]) -> Iterator[list[str]]:
    """Each base64 input decoded into a file of a private temporary folder, removed afterwards: their
    paths, in order. An input that is not base64 (not ``what``), or a file the reader refuses
    (``refused``), is a :class:`RequestError` naming the input, the private folder left out."""
    with tempfile.TemporaryDirectory(prefix="transformer-serve-") as folder:
        paths = []
        for i, text in enumerate(texts):
            try:
                data = base64.b64decode(text, validate=True)
            except (binascii.Error, ValueError):
                raise RequestError(f"input {i}: not {what} in base64") from None
            (path := Path(folder) / f"input{i}").write_bytes(data)
            paths.append(str(path))
        try:
            yield paths
        except refused as exc:
            raise RequestError(str(exc).replace(folder + "/", "")) from None


def audio_warm_up(sample_rate: int) -> str:
    """A speech model's warm-up input: half a second of silence, a WAV in base64."""
    from transformer.data.speech.audio import silent_wav

    return base64.b64encode(silent_wav(sample_rate)).decode()


class AudioClassificationModel(UploadClassificationModel):
    """A speech classifier (input kind ``frames``) on ``/v1/classify``: each input is one audio
    file (WAV, FLAC ...) in base64 (:class:`UploadClassificationModel`)."""

    upload = "an audio file"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.frames_per_byte = 100 / (2 * self.classifier.data["features"].get("sample_rate", 16_000))
        self.warm_up_input = audio_warm_up(self.classifier.data["features"].get("sample_rate", 16_000))

    def count_tokens(self, text: str) -> int:
        return max(1, int(len(text) * 3 / 4 * self.frames_per_byte))  # frames of 16-bit audio, about

    def refused(self) -> type[Exception]:
        from transformer.data.speech.audio import AudioError

        return AudioError


class ImageClassificationModel(UploadClassificationModel):
    """An image classifier (input kind ``patches``) on ``/v1/classify``: each input is one image
    file (PNG, JPEG ...) in base64 (:class:`UploadClassificationModel`), of the model's size."""

    upload = "an image file"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.warm_up_input = image_warm_up(self.classifier.data)

    def count_tokens(self, text: str) -> int:
        return 1  # the batcher's budget counts images

    def refused(self) -> type[Exception]:
        from transformer.data.images.folder import ImageError

        return ImageError


def image_warm_up(data: dict) -> str:
    """An image model's warm-up input: a blank PNG of the model's size, in base64."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB" if data.get("channels", 1) == 3 else "L", (data["width"], data["height"])).save(buffer, "PNG")
    return base64.b64encode(buffer.getvalue()).decode()


__all__ = ["AudioClassificationModel", "ClassificationModel", "CTranslate2Model", "ImageClassificationModel", "Limits", "RequestError", "ServedModel", "Source", "TaggingModel",
           "TranslationModel", "UploadClassificationModel", "audio_warm_up", "image_warm_up", "uploaded", "word_attention",
           "word_groups", "word_start_rule"]
