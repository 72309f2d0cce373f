"""Translation evaluation in one place: metrics through sacreBLEU's public API, translating and
scoring a split, the files an evaluation writes, and the Markdown table of several evaluations.
"""

from __future__ import annotations

import importlib.util
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

from sacrebleu.metrics import BLEU, CHRF

from transformer.data.core.readers import iter_lines
from transformer.data.parallel.corpus import MULTI30K, ParallelCorpus, available, make_corpus, split_names
from transformer.data.parallel.languages import Direction, Languages, direction_name
from transformer.data.parallel.multilingual import direction_corpus
from transformer.decoding import strategies
from transformer.decoding.settings import DecodeSettings
from transformer.files import inside, write_text
from transformer.inference import Translator

MAX_NGRAM = 4


def bleu_tokenizer(lang: str | None, override: str | None = None) -> str:
    """The sacreBLEU tokenizer for references in ``lang``: ``zh`` for Chinese, ``ja-mecab``
    for Japanese where its extra (MeCab + ipadic) is installed, else ``char`` (BLEU over words
    needs a segmenter, and Japanese has no spaces), ``13a`` for everything else; ``override``
    (a config's ``bleu_tokenize``) wins. The choice shows in each signature (``tok:zh``)."""
    if override:
        return str(override)
    base = (lang or "").lower().replace("_", "-").split("-")[0]
    if base == "zh":
        return "zh"
    if base == "ja":
        has_mecab = all(importlib.util.find_spec(m) is not None for m in ("MeCab", "ipadic"))
        return "ja-mecab" if has_mecab else "char"
    return "13a"


class CorpusBLEU:
    """Corpus BLEU accumulated over batches (and ranks), scored once.

    Corpus BLEU is not a mean of per-batch scores: each ``update`` adds sacreBLEU's sufficient
    statistics (hypothesis and reference lengths, matched and total n-grams for n = 1..4), and
    ``score`` turns a sum of them into the same number ``BLEU().corpus_score`` gives on the
    whole corpus (13a tokenisation, exponential smoothing). ``stats`` is a plain list of ints,
    so ranks can sum it as a tensor before scoring. ``tokenize`` is sacreBLEU's tokenizer
    (:func:`bleu_tokenizer` picks it from the target language).
    """

    N_STATS = 2 + 2 * MAX_NGRAM

    def __init__(self, tokenize: str = "13a") -> None:
        self.stats = [0] * self.N_STATS
        self.tokenize = tokenize

    def update(self, hyps: Sequence[str], refs: Sequence[str]) -> None:
        """Add one batch of detokenized hypotheses and their single references."""
        if not hyps:
            return
        s = BLEU(tokenize=self.tokenize).corpus_score(list(hyps), [list(refs)])
        batch = [s.sys_len, s.ref_len, *s.counts, *s.totals]
        self.stats = [a + b for a, b in zip(self.stats, batch)]

    def reset(self) -> None:
        self.stats = [0] * self.N_STATS

    @staticmethod
    def score(stats: Sequence[int]) -> float:
        """BLEU of summed statistics (0.0 when nothing was scored)."""
        sys_len, ref_len = int(stats[0]), int(stats[1])
        counts = [int(x) for x in stats[2: 2 + MAX_NGRAM]]
        totals = [int(x) for x in stats[2 + MAX_NGRAM:]]
        if totals[0] == 0:
            return 0.0
        return BLEU.compute_bleu(counts, totals, sys_len, ref_len, smooth_method="exp").score


def score_translations(hyps: list[str], refs: list[str], tokenize: str = "13a") -> dict:
    """Cased sacreBLEU (``tokenize``: 13a unless the target language needs another, see
    :func:`bleu_tokenizer`), lowercased BLEU and chrF, each with its signature."""
    cased, lower, chrf = BLEU(tokenize=tokenize), BLEU(lowercase=True, tokenize=tokenize), CHRF()
    b, bl, c = cased.corpus_score(hyps, [refs]), lower.corpus_score(hyps, [refs]), chrf.corpus_score(hyps, [refs])
    return {
        "bleu": round(b.score, 2), "bleu_signature": str(cased.get_signature()),
        "bleu_detail": str(b),
        "bleu_lowercase": round(bl.score, 2), "bleu_lowercase_signature": str(lower.get_signature()),
        "chrf": round(c.score, 2), "chrf_signature": str(chrf.get_signature()),
    }


def write_outputs(output_dir: Path, stem: str, lang: str, hyps: list[str], metrics: dict) -> None:
    """Hypotheses one per line in input order, and the metrics JSON beside them."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    # The stem and language come from the checkpoint and the command line: one file name each.
    write_text(inside(output_dir, f"{stem}.hyp.{lang}"), "".join(h + "\n" for h in hyps))
    write_text(inside(output_dir, f"{stem}.json"), json.dumps(metrics, indent=2, ensure_ascii=False) + "\n")


class TranslationTaskLike(Protocol):
    """What evaluation needs from a task: its settings (the corpus), its languages and a raw-text
    translator (``TranslationTask`` and its non-autoregressive subclass)."""

    hparams: dict
    languages: Languages

    def translator(self, decode: DecodeSettings, device: str = "cpu") -> Translator: ...


@dataclass
class SplitTranslation:
    """A split translated: its sources and references, the best hypothesis of each,
    and how the decoding went."""

    sources: list[str]
    refs: list[str]
    hyps: list[str]
    seconds: float
    translator: Translator

    def decoding_stats(self, decode: DecodeSettings) -> dict:
        """The decoding settings, time, speed and truncated sources, for a report."""
        return dict(decode=decode.to_dict(), decode_seconds=round(self.seconds, 3),
                    sentences_per_second=round(len(self.sources) / max(self.seconds, 1e-9), 2),
                    truncated_sources=self.translator.truncated)


def corpus_of(hparams) -> dict:
    """The corpus a checkpoint was trained on (its ``data`` hyperparameter); a checkpoint
    that names only a Multi30k language pair gets the Multi30k preset."""
    data = dict(hparams.get("data") or {})
    if "sources" in data:
        return data
    return make_corpus(hparams["src_lang"], hparams["tgt_lang"], dict(MULTI30K["sources"]), name="multi30k",
                       valid_name=MULTI30K["valid_name"])


def translate_sources(task: TranslationTaskLike, sources: list[str], refs: list[str],
                      decode: DecodeSettings | Mapping[str, Any], device: str = "cpu", tgt_lang: str | None = None,
                      src_lang: str | None = None) -> "SplitTranslation":
    """Translate ``sources`` with ``task`` (best hypothesis each, input order), timed; a
    multilingual model into ``tgt_lang`` (its sources tagged, ``Translator.set_target_language``),
    through ``decode.pivot`` when it names one (from ``src_lang``, ``inference.pivot``: the time
    and the truncated sources are both legs')."""
    decode = DecodeSettings.of(decode)
    if decode.pivot is not None:
        from transformer.inference.pivot import pivot_translate, translator_into

        translator = translator_into(task, decode, tgt_lang, device, decode.pivot)  # the second leg's, for its statistics
        start = time.perf_counter()
        nbest, translator.truncated = pivot_translate(task, decode, sources, src_lang, tgt_lang, device)
    else:
        translator = task.translator(decode, device=device)
        if tgt_lang is not None:
            translator.set_target_language(tgt_lang, src_lang)
        start = time.perf_counter()
        nbest = translator.translate(sources)
    hyps = [n[0][0] if n else "" for n in nbest]
    seconds = time.perf_counter() - start
    return SplitTranslation(sources, refs, hyps, seconds, translator)


def translate_split(task: TranslationTaskLike, split: str, decode: DecodeSettings | Mapping[str, Any],
                    data_dir: str = "data/cache", mirror_root: str | None = None, device: str = "cpu",
                    limit: int | None = None, direction: Direction | None = None) -> SplitTranslation:
    """Translate a split (its first ``limit`` pairs, if given) of the corpus the checkpoint
    was trained on, read by name (:func:`corpus_of`); of a multilingual checkpoint, one
    ``direction``'s pairs."""
    corpus = corpus_of(task.hparams) if direction is None else direction_corpus(corpus_of(task.hparams), direction)
    stream = ParallelCorpus(corpus, data_dir, mirror_root).stream(split)
    pairs = [p for _, p in zip(range(int(limit)), stream)] if limit is not None else list(stream)
    return translate_sources(task, [s for s, _ in pairs], [t for _, t in pairs], decode, device,
                             tgt_lang=None if direction is None else direction[1],
                             src_lang=None if direction is None else direction[0])


def _report(task: TranslationTaskLike, translated: "SplitTranslation", split: str, decode: DecodeSettings,
            output_dir: Path, stem: str, bleu_tokenize: str | None, direction: Direction | None = None) -> dict:
    """Score ``translated`` and write its files; of a multilingual checkpoint, as ``direction``."""
    src, tgt = direction or (task.languages.src_lang, task.languages.tgt_lang)
    tokenize = bleu_tokenizer(tgt, bleu_tokenize or corpus_of(task.hparams).get("bleu_tokenize"))
    metrics = score_translations(translated.hyps, translated.refs, tokenize)
    metrics.update(split=split, pair=f"{src}-{tgt}", sentences=len(translated.hyps),
                   **translated.decoding_stats(decode), **translated.translator.extra_stats())
    write_outputs(output_dir, f"{stem}.{decode.strategy}", tgt, translated.hyps, metrics)
    return metrics


def evaluate_split(task: TranslationTaskLike, split: str, decode: DecodeSettings | Mapping[str, Any],
                   output_dir: Path, data_dir: str = "data/cache", mirror_root: str | None = None,
                   device: str = "cpu", bleu_tokenize: str | None = None, direction: Direction | None = None) -> dict:
    """Translate a split with ``task`` and the settings ``decode``, score it against the
    references, and write ``<split>.<strategy>.hyp.<tgt>`` and ``<split>.<strategy>.json`` to
    ``output_dir``. Returns the metrics: BLEU (tokenizer from the target language unless
    ``bleu_tokenize`` or the corpus says otherwise), lowercased BLEU and chrF with their
    signatures, speed, truncated sources and the search's own statistics. Of a multilingual
    checkpoint, one ``direction`` (files ``<split>.<src>-<tgt>.<strategy>...``)."""
    decode = DecodeSettings.of(decode)
    translated = translate_split(task, split, decode, data_dir, mirror_root, device, direction=direction)
    if direction is None:
        return _report(task, translated, split, decode, output_dir, split, bleu_tokenize)
    return _report(task, translated, split, decode, output_dir, f"{split}.{direction_name(direction)}",
                   bleu_tokenize, direction)


def evaluation_plan(task: TranslationTaskLike, splits: Sequence[str] | None, src_lang: str | None = None,
                    tgt_lang: str | None = None, zero_shot: bool = False,
                    pivot: str | None = None) -> list[tuple[str, Direction | None]]:
    """The ``(split, direction)`` pairs to score a checkpoint's ``task`` on. A bilingual checkpoint: each
    split (default ``test_2016_flickr``) with direction None (``src_lang``/``tgt_lang`` must be
    its own). A multilingual one: every direction, or the one ``src_lang``/``tgt_lang`` pick
    (:meth:`~transformer.data.parallel.languages.Languages.check_direction`), on each split (default:
    every split of its corpus but train and validation), skipping a split a direction lacks
    (Multi30k has no 2017 test sets in Czech). ``zero_shot`` admits a direction the model was
    not trained on (``decode.zero_shot``); with ``pivot`` the one direction scored is
    ``src_lang``→``tgt_lang`` through it (``Languages.check_pivot``)."""
    languages = task.languages
    directions = languages.directions
    if pivot is not None:
        directions = [languages.check_pivot(src_lang, pivot, tgt_lang)]
        src_lang = tgt_lang = None
    if directions is None:
        if src_lang is not None or tgt_lang is not None:
            languages.check_direction(src_lang, tgt_lang)
        return [(split, None) for split in (splits or ["test_2016_flickr"])]
    if src_lang is not None or tgt_lang is not None:
        if tgt_lang is None:  # every direction from src_lang
            directions = [d for d in directions if d[0] == languages.check_direction(src_lang, d[1])[0]]
        else:
            directions = [languages.check_direction(src_lang, tgt_lang, zero_shot)]
    corpus = corpus_of(task.hparams)
    names = split_names(corpus)
    if not splits:
        splits = [s for s in names if s not in ("train", corpus.get("valid_name"))]
    for split in splits:
        if split not in names:
            raise ValueError(f"split {split!r} unknown; the corpus has {names}")
    plan = [(split, d) for split in splits for d in directions if available(direction_corpus(corpus, d), split)]
    if not plan:
        raise ValueError(f"split={','.join(splits)}: no direction of {', '.join(map(direction_name, directions))} "
                         f"has it")
    return plan


def evaluate_files(task: TranslationTaskLike, src: str | Path, ref: str | Path,
                   decode: DecodeSettings | Mapping[str, Any], output_dir: Path, device: str = "cpu",
                   bleu_tokenize: str | None = None) -> dict:
    """:func:`evaluate_split` on any line-aligned ``src`` + ``ref`` file pair (``.gz`` too);
    outputs are named after the source file."""
    sources = [line for _, line in iter_lines(src)]
    refs = [line for _, line in iter_lines(ref)]
    if len(sources) != len(refs):
        raise ValueError(f"{ref}: {len(refs)} lines, but {src} has {len(sources)}: a reference per source")
    decode = DecodeSettings.of(decode)
    translated = translate_sources(task, sources, refs, decode, device)
    return _report(task, translated, str(src), decode, output_dir, Path(src).name, bleu_tokenize)


def decoding_name(decode: Mapping[str, Any]) -> str:
    """A table label for a report's decoding block (``strategies.label``): ``greedy``, ``beam 5``,
    or the strategy; a key the block leaves out has its declared default."""
    return strategies.label({**DecodeSettings.defaults(), **decode})


def direction_table(results: Sequence[dict]) -> str:
    """The scores of a multilingual checkpoint as a Markdown table, a row per split and a
    column per direction, each cell ``BLEU / chrF`` (cased BLEU), then the BLEU signature."""
    pairs = list(dict.fromkeys(m["pair"] for m in results))
    splits = list(dict.fromkeys(m["split"] for m in results))
    cell = {(m["split"], m["pair"]): f"{m['bleu']:.2f} / {m['chrf']:.2f}" for m in results}
    lines = ["| split | " + " | ".join(pairs) + " |", "|---|" + "---|" * len(pairs)]
    lines += [f"| {s} | " + " | ".join(cell.get((s, p), "-") for p in pairs) + " |" for s in splits]
    if results:
        lines += ["", f"cells: BLEU (cased) / chrF; signature: {results[0]['bleu_signature']}"]
    return "\n".join(lines)


def markdown_table(results: Sequence[dict]) -> str:
    """One Markdown row per evaluation (the metrics ``evaluate_split`` returns), then the
    cased BLEU signature they share."""
    lines = ["| pair | split | decoding | BLEU (cased) | BLEU (lowercased) | chrF | sentences | sentences/s |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {m['pair']} | {m['split']} | {decoding_name(m['decode'])} | {m['bleu']:.2f} "
              f"| {m['bleu_lowercase']:.2f} | {m['chrf']:.2f} | {m['sentences']} "
              f"| {m['sentences_per_second']:.1f} |" for m in results]
    if results:
        lines += ["", f"signature: {results[0]['bleu_signature']}"]
    return "\n".join(lines)
