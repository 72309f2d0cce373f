"""Tagging metrics on word-aligned tag sequences: token, unseen-word and sentence accuracy,
per-tag precision/recall/F1, the most confused tag pairs, and the most-frequent-tag baseline.

Plain Python on lists of strings, so the numbers are easy to check by hand (see
``tests/tasks/test_tag_metrics.py``) and identical whoever produced the predictions
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
    correct = total = sent_correct = 0
    unseen_total = unseen_correct = 0
    tp: Counter = Counter()
    n_gold: Counter = Counter()
    n_pred: Counter = Counter()
    confusions: Counter = Counter()
    for i, (g_seq, p_seq) in enumerate(zip(gold, pred)):
        all_right = True
        for j, (g, p) in enumerate(zip(g_seq, p_seq)):
            ok = g == p
            total += 1
            correct += ok
            n_gold[g] += 1
            n_pred[p] += 1
            if ok:
                tp[g] += 1
            else:
                all_right = False
                confusions[(g, p)] += 1
            if vocab is not None and words is not None and words[i][j] not in vocab:
                unseen_total += 1
                unseen_correct += ok
        sent_correct += all_right

    per_tag = {}
    for tag in sorted(set(n_gold) | set(n_pred)):
        precision = _ratio(tp[tag], n_pred[tag])
        recall = _ratio(tp[tag], n_gold[tag])
        # A tag never predicted (or never gold) has no true positive: F1 = 0, as in sklearn.
        f1 = 2 * precision * recall / (precision + recall) if precision and recall else 0.0
        per_tag[tag] = {
            "precision": precision, "recall": recall, "f1": f1,
            "support": n_gold[tag], "predicted": n_pred[tag],
        }
    gold_f1 = [v["f1"] or 0.0 for v in per_tag.values() if v["support"]]
    unseen_known = vocab is not None and words is not None
    return {
        "acc": _ratio(correct, total),
        "tokens": total,
        "correct": correct,
        "unseen_acc": _ratio(unseen_correct, unseen_total) if unseen_known else None,
        "unseen_tokens": unseen_total if unseen_known else None,
        "seen_acc": _ratio(correct - unseen_correct, total - unseen_total) if unseen_known else None,
        "sentence_acc": _ratio(sent_correct, len(gold)),
        "sentences": len(gold),
        "macro_f1": sum(gold_f1) / len(gold_f1) if gold_f1 else None,
        "per_tag": per_tag,
        "confusions": [
            {"gold": g, "pred": p, "count": c}
            for (g, p), c in sorted(confusions.items(), key=lambda kv: (-kv[1], kv[0]))[:top_confusions]
        ],
    }


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f}"


def format_report(metrics: dict, title: str = "") -> str:
    """A plain-text report of :func:`tagging_metrics` output: summary, per-tag table,
    confusions (fixed-width, for reading in a terminal)."""
    lines = [title] if title else []
    unseen = (f"{_pct(metrics['unseen_acc'])} % of {metrics['unseen_tokens']} unseen words"
              if metrics.get("unseen_tokens") is not None else "n/a (no training vocabulary)")
    lines += [
        f"token accuracy     {_pct(metrics['acc'])} % ({metrics['correct']}/{metrics['tokens']})",
        f"unseen-word acc.   {unseen}",
        f"seen-word acc.     {_pct(metrics.get('seen_acc'))} %",
        f"sentence accuracy  {_pct(metrics['sentence_acc'])} % of {metrics['sentences']} sentences",
        f"macro F1           {_pct(metrics['macro_f1'])}",
        "",
        f"{'tag':<10} {'prec':>7} {'rec':>7} {'f1':>7} {'support':>8} {'predicted':>10}",
    ]
    for tag, s in sorted(metrics["per_tag"].items(), key=lambda kv: (-kv[1]["support"], kv[0])):
        lines.append(f"{tag:<10} {_pct(s['precision']):>7} {_pct(s['recall']):>7} {_pct(s['f1']):>7} "
                     f"{s['support']:>8} {s['predicted']:>10}")
    if metrics["confusions"]:
        lines += ["", "most confused (gold -> predicted: count)"]
        lines += [f"  {c['gold']} -> {c['pred']}: {c['count']}" for c in metrics["confusions"]]
    return "\n".join(lines) + "\n"


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
