"""Tagging metrics on word-aligned tag sequences: token, unseen-word and sentence accuracy,
per-tag precision/recall/F1, the most confused tag pairs, and the most-frequent-tag baseline
(their plain-text report: ``transformer.evaluation.tagging.format_report``).

Plain Python on lists of strings, so the numbers are easy to check by hand (see
``tests/evaluation/test_tag_metrics.py``) and identical whoever produced the predictions
(model, baseline, another tool).

"Unseen" means the word form (case-sensitive, exactly as written) does not occur in the
training split; such words are where a tagger must generalise from spelling and context.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Iterable, Sequence


def _check_aligned(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]],
                   words: Sequence[Sequence[str]] | None) -> None:
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold sentences but {len(pred)} predicted")
    if words is not None and len(words) != len(gold):
        raise ValueError(f"{len(gold)} gold sentences but {len(words)} word sequences")
    for i, (g, p) in enumerate(zip(gold, pred)):
        if len(g) != len(p):
            raise ValueError(f"sentence {i}: {len(g)} gold tags but {len(p)} predicted")
        if words is not None and len(words[i]) != len(g):
            raise ValueError(f"sentence {i}: {len(words[i])} words but {len(g)} tags")


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def _count(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]], words: Sequence[Sequence[str]] | None,
           vocab: set[str] | None) -> dict:
    """The counts behind :func:`tagging_metrics`: words and sentences right, unseen words
    (right), and per tag the gold, predicted and correct counts and the error pairs."""
    c = {"correct": 0, "total": 0, "sentences_right": 0, "unseen": 0, "unseen_correct": 0,
         "tp": Counter(), "gold": Counter(), "pred": Counter(), "confusions": Counter()}
    for i, (g_seq, p_seq) in enumerate(zip(gold, pred)):
        errors = 0
        for j, (g, p) in enumerate(zip(g_seq, p_seq)):
            ok = g == p
            c["total"] += 1
            c["correct"] += ok
            c["gold"][g] += 1
            c["pred"][p] += 1
            if ok:
                c["tp"][g] += 1
            else:
                c["confusions"][(g, p)] += 1
                errors += 1
            if vocab is not None and words is not None and words[i][j] not in vocab:
                c["unseen"] += 1
                c["unseen_correct"] += ok
        c["sentences_right"] += errors == 0
    return c


def _per_tag(tp: Counter, n_gold: Counter, n_pred: Counter) -> dict:
    """``{tag: {precision, recall, f1, support, predicted}}`` over every gold or predicted tag."""
    per_tag = {}
    for tag in sorted(set(n_gold) | set(n_pred)):
        precision = _ratio(tp[tag], n_pred[tag])
        recall = _ratio(tp[tag], n_gold[tag])
        # A tag never predicted (or never gold) has no true positive: F1 = 0, as in sklearn.
        f1 = 2 * precision * recall / (precision + recall) if precision and recall else 0.0
        per_tag[tag] = {"precision": precision, "recall": recall, "f1": f1,
                        "support": n_gold[tag], "predicted": n_pred[tag]}
    return per_tag


def tagging_metrics(
    gold: Sequence[Sequence[str]],
    pred: Sequence[Sequence[str]],
    words: Sequence[Sequence[str]] | None = None,
    train_words: Iterable[str] | None = None,
    top_confusions: int = 10,
) -> dict:
    """Score predicted tags against gold tags, sentence by sentence.

    Args:
        gold, pred: one list of tags per sentence; the two must align word for word.
        words: the word forms (needed for the unseen-word accuracy).
        train_words: the word forms seen in training; with ``words`` gives ``unseen_acc``.
        top_confusions: how many (gold, predicted) error pairs to list, most frequent first.

    Returns a JSON-ready dict:
        ``acc`` token accuracy; ``tokens``, ``correct``;
        ``unseen_acc``, ``unseen_tokens`` (null when not computable or no unseen word),
        ``seen_acc``; ``sentence_acc`` fraction of sentences with every tag right (empty
        sentences count as right), ``sentences``; ``macro_f1`` over tags with gold support;
        ``per_tag``: ``{tag: {precision, recall, f1, support, predicted}}`` (precision is
        null for a tag never predicted, recall null for a tag never in gold);
        ``confusions``: ``[{gold, pred, count}]``.
    """
    _check_aligned(gold, pred, words)
    vocab = set(train_words) if train_words is not None else None
    c = _count(gold, pred, words, vocab)
    per_tag = _per_tag(c["tp"], c["gold"], c["pred"])
    gold_f1 = [v["f1"] or 0.0 for v in per_tag.values() if v["support"]]
    known = vocab is not None and words is not None
    correct, total, unseen, unseen_correct = c["correct"], c["total"], c["unseen"], c["unseen_correct"]
    return {
        "acc": _ratio(correct, total),
        "tokens": total,
        "correct": correct,
        "unseen_acc": _ratio(unseen_correct, unseen) if known else None,
        "unseen_tokens": unseen if known else None,
        "seen_acc": _ratio(correct - unseen_correct, total - unseen) if known else None,
        "sentence_acc": _ratio(c["sentences_right"], len(gold)),
        "sentences": len(gold),
        "macro_f1": sum(gold_f1) / len(gold_f1) if gold_f1 else None,
        "per_tag": per_tag,
        "confusions": [{"gold": g, "pred": p, "count": n} for (g, p), n in
                       sorted(c["confusions"].items(), key=lambda kv: (-kv[1], kv[0]))[:top_confusions]],
    }


class MostFrequentTagBaseline:
    """Each training word gets its most frequent training tag (ties: the tag seen first);
    an unseen word gets the most frequent tag overall (ties: seen first). The classic
    lower bound every tagger must beat (Charniak et al. 1993 report ~90% on the WSJ).
    """

    def __init__(self) -> None:
        self.word_tag: dict[str, str] = {}
        self.default: str | None = None

    def fit(self, words: Sequence[Sequence[str]], tags: Sequence[Sequence[str]]) -> "MostFrequentTagBaseline":
        counts: dict[str, Counter] = defaultdict(Counter)
        overall: Counter = Counter()
        for ws, ts in zip(words, tags):
            for w, t in zip(ws, ts):
                counts[w][t] += 1
                overall[t] += 1
        if not overall:
            raise ValueError("no tagged words to fit the baseline on")
        # Counter.most_common keeps insertion order among equal counts: ties go to the tag seen first.
        self.word_tag = {w: c.most_common(1)[0][0] for w, c in counts.items()}
        self.default = overall.most_common(1)[0][0]
        return self

    def predict(self, words: Sequence[Sequence[str]]) -> list[list[str]]:
        if self.default is None:
            raise RuntimeError("fit the baseline first")
        return [[self.word_tag.get(w, self.default) for w in ws] for ws in words]
