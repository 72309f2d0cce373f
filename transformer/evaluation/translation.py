"""Translation metrics through sacreBLEU's public API, and the files an evaluation writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from sacrebleu.metrics import BLEU, CHRF

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
