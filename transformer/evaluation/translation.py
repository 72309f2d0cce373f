"""Translation evaluation in one place: metrics through sacreBLEU's public API, translating and
scoring a split, the files an evaluation writes, and the Markdown table of several evaluations.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

from sacrebleu.metrics import BLEU, CHRF

from transformer.data.readers import read_multi30k
from transformer.inference import Translator

MAX_NGRAM = 4


class CorpusBLEU:
    """Corpus BLEU accumulated over batches (and ranks), scored once.

    Corpus BLEU is not a mean of per-batch scores: each ``update`` adds sacreBLEU's sufficient
    statistics (hypothesis and reference lengths, matched and total n-grams for n = 1..4), and
    ``score`` turns a sum of them into the same number ``BLEU().corpus_score`` gives on the
    whole corpus (13a tokenisation, exponential smoothing). ``stats`` is a plain list of ints,
    so ranks can sum it as a tensor before scoring.
    """

    N_STATS = 2 + 2 * MAX_NGRAM

    def __init__(self) -> None:
        self.stats = [0] * self.N_STATS

    def update(self, hyps: Sequence[str], refs: Sequence[str]) -> None:
        """Add one batch of detokenized hypotheses and their single references."""
        if not hyps:
            return
        s = BLEU().corpus_score(list(hyps), [list(refs)])
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


def score_translations(hyps: list[str], refs: list[str]) -> dict:
    """Cased sacreBLEU (13a), lowercased BLEU and chrF, each with its signature."""
    cased, lower, chrf = BLEU(), BLEU(lowercase=True), CHRF()
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
    (output_dir / f"{stem}.hyp.{lang}").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    (output_dir / f"{stem}.json").write_text(json.dumps(metrics, indent=2, ensure_ascii=False) + "\n")


class TranslationTaskLike(Protocol):
    """What evaluation needs from a task: its language pair and a raw-text translator
    (``TranslationTask`` and its non-autoregressive subclass)."""

    hparams: dict

    def translator(self, decode_cfg: dict | None, device: str = "cpu") -> Translator: ...


@dataclass
class SplitTranslation:
    """A Multi30k split translated: its sources and references, the best hypothesis of each,
    and how the decoding went."""

    sources: list[str]
    refs: list[str]
    hyps: list[str]
    seconds: float
    translator: Translator

    def decoding_stats(self, decode_cfg: dict) -> dict:
        """The decoding settings, time, speed and truncated sources, for a report."""
        return dict(decode=dict(decode_cfg), decode_seconds=round(self.seconds, 3),
                    sentences_per_second=round(len(self.sources) / max(self.seconds, 1e-9), 2),
                    truncated_sources=self.translator.truncated)


def translate_split(task: TranslationTaskLike, split: str, decode_cfg: dict, data_dir: str = "data/cache",
                    mirror_root: str | None = None, device: str = "cpu",
                    limit: int | None = None) -> SplitTranslation:
    """Translate a Multi30k split (its first ``limit`` pairs, if given) with ``task``."""
    hp = task.hparams
    pairs = read_multi30k(split, hp["src_lang"], hp["tgt_lang"], cache_dir=data_dir, mirror_root=mirror_root)
    if limit is not None:
        pairs = pairs[: int(limit)]
    sources = [s for s, _ in pairs]
    translator = task.translator(decode_cfg, device=device)
    start = time.perf_counter()
    hyps = [n[0][0] if n else "" for n in translator.translate(sources)]
    seconds = time.perf_counter() - start
    return SplitTranslation(sources, [t for _, t in pairs], hyps, seconds, translator)


def evaluate_split(task: TranslationTaskLike, split: str, decode_cfg: dict, output_dir: Path,
                   data_dir: str = "data/cache", mirror_root: str | None = None, device: str = "cpu") -> dict:
    """Translate a Multi30k split with ``task`` and ``decode_cfg``, score it against the
    references, and write ``<split>.<strategy>.hyp.<tgt>`` and ``<split>.<strategy>.json`` to
    ``output_dir``. Returns the metrics: BLEU, lowercased BLEU and chrF with their signatures,
    speed, truncated sources and the search's own statistics."""
    hp = task.hparams
    translated = translate_split(task, split, decode_cfg, data_dir, mirror_root, device)
    metrics = score_translations(translated.hyps, translated.refs)
    metrics.update(split=split, pair=f"{hp['src_lang']}-{hp['tgt_lang']}", sentences=len(translated.hyps),
                   **translated.decoding_stats(decode_cfg), **translated.translator.extra_stats())
    stem = f"{split}.{decode_cfg.get('strategy', 'greedy')}"
    write_outputs(output_dir, stem, hp["tgt_lang"], translated.hyps, metrics)
    return metrics


def decoding_name(decode_cfg: dict) -> str:
    """A table label for a decoding configuration: ``greedy``, ``beam 5``, or the strategy."""
    strategy = decode_cfg.get("strategy", "greedy")
    return f"beam {decode_cfg.get('beam_size', 5)}" if strategy == "beam" else strategy


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
