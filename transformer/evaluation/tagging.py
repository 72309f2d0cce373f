"""Tagging evaluation: score a tagger on a split of its dataset and write the report files;
score an ensemble of checkpoints (optionally choosing its members on another split); the
most-frequent-tag baseline. Every number comes from :func:`tagging_metrics`, so a model,
an ensemble and the baseline are scored alike.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections import Counter
from pathlib import Path
from typing import Sequence

import torch

from transformer import kinds
from transformer.data.tagged.corpus import read_tagged_file, read_tagged_split, tag_field
from transformer.evaluation.tag_metrics import MostFrequentTagBaseline, tagging_metrics
from transformer.files import atomic_open, inside, write_text

log = logging.getLogger(__name__)


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
    ]
    if metrics.get("unknown_tags"):
        counts = ", ".join(f"{t}: {n}" for t, n in sorted(metrics["unknown_tags"].items()))
        lines.append(f"not in training     {sum(metrics['unknown_tags'].values())} words whose gold tag the training "
                     f"file lacks ({counts}), each counted as an error")
    lines += [
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


def write_tagging_scores(out: Path, stem: str, title: str, metrics: dict, words, gold, pred) -> dict:
    """Write ``<stem>.json`` (metrics), ``.txt`` (:func:`format_report`) and ``.pred.tsv``
    (``word<TAB>gold<TAB>predicted`` a line, a blank line between sentences) under ``out``;
    return the metrics with the file paths under ``outputs``."""
    # The stem holds the dataset's and tag set's names, from the checkpoint: one file name each.
    paths = {k: inside(out, f"{stem}{ext}") for k, ext in
             (("metrics", ".json"), ("report", ".txt"), ("predictions", ".pred.tsv"))}
    write_text(paths["metrics"], json.dumps(metrics, indent=2, ensure_ascii=False) + "\n")
    write_text(paths["report"], format_report(metrics, title))
    with atomic_open(paths["predictions"]) as f:
        for ws, gs, ps in zip(words, gold, pred):
            f.writelines(f"{w}\t{g}\t{p}\n" for w, g, p in zip(ws, gs, ps))
            f.write("\n")
    metrics["outputs"] = {k: str(p) for k, p in paths.items()}
    return metrics


def evaluate_tagging(tagger, data: dict, train_words, split: str, output_dir: Path | str = "eval",
                     data_dir: str = "data/cache", mirror_root: str | None = None) -> dict:
    """Tag a split of the dataset ``data`` describes with ``tagger`` (an
    ``inference.tagger.WordTagger``) and score it against the gold tags.

    ``split`` is a split name, or a file of the corpus's format (named by its file name in
    the outputs). Gold tags outside the tagger's tag set (the training file's) are counted
    under ``unknown_tags``, in the report and in a warning; each is an error in the accuracy.

    Writes to ``output_dir``: ``<split>.<tagset>.json`` / ``.txt`` / ``.pred.tsv`` (see
    :func:`write_tagging_scores`). A tagger with auxiliary tags gets the same three files for
    its tag set (``<split>.<aux_tagset>.*``, from the same encoder pass), and the returned
    metrics carry that head's summary under ``aux``. ``train_words``: the training word forms
    (for unseen-word accuracy), or ``None``.
    """
    sents = read_tagged_split(data, split, data_dir, mirror_root)
    name = Path(split).name if Path(split).is_file() else split  # a CoNLL-U file given as the split
    words = [s.words for s in sents]
    start = time.perf_counter()
    preds = tagger.tag_fields(words)  # {field: tags} for each head
    seconds = time.perf_counter() - start
    heads = [(data["tagset"], tagger.tagset)]
    if tagger.aux_field is not None:
        heads.append((data["aux_tagset"], tagger.aux_field))
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for (tagset, field), known in zip(heads, (tagger.tags, tagger.aux_tags)):
        gold = [s.tags(field) for s in sents]
        metrics = tagging_metrics(gold, preds[field], words, train_words)
        metrics = {
            "split": split, "dataset": data["name"], "tagset": tagset, **metrics,
            "unknown_tags": _unknown(gold, known, f"{data['name']} {name} ({tagset})"),
            "tag_seconds": round(seconds, 3),
            "words_per_second": round(metrics["tokens"] / max(seconds, 1e-9), 1),
        }
        results.append(write_tagging_scores(out, f"{name}.{tagset}", f"{data['name']} {name} ({tagset})",
                                            metrics, words, gold, preds[field]))
    metrics = results[0]
    if len(results) > 1:
        metrics["aux"] = _summary(results[1])
    return metrics


def _unknown(gold, known, where: str) -> dict[str, int]:
    """``{tag: count}`` of gold tags outside ``known`` (the tagger's training tag set), with a
    warning: no such word can be tagged right, and the accuracy counts each as an error."""
    if known is None:
        return {}
    known = set(known)
    counts = Counter(t for sent in gold for t in sent if t not in known)
    if counts:
        log.warning("%s: %d words carry a gold tag not in the training tag set (%s); each counts as an error",
                    where, sum(counts.values()), ", ".join(f"{t}: {n}" for t, n in sorted(counts.items())))
    return dict(sorted(counts.items()))


def _summary(metrics: dict) -> dict:
    """The metrics without the per-tag table and the confusions."""
    return {k: v for k, v in metrics.items() if k not in ("per_tag", "confusions")}


def most_frequent_tag_baseline(dataset: str, tagset: str, split: str, data_dir: str = "data/cache",
                               mirror_root: str | None = None, dev_size: int = 500,
                               files: dict[str, str] | None = None, fmt: str | None = None) -> dict:
    """Fit :class:`MostFrequentTagBaseline` on the training split (for CoNLL-2000: without the
    last ``dev_size`` sentences, held out as dev) and score ``split``; the tagging metrics
    with the dataset, tag set, split and training size. ``dataset`` is a preset's name, or with
    ``files`` (``{"train": path, ...}``, format ``fmt``, default CoNLL-U) the name of a user's
    treebank; ``split`` is then one of those splits or any file of that format."""
    data = {"name": dataset, "tagset": tagset, "dev_size": dev_size}
    if files:  # the training file whole (no dev held out of it), and a split or any file to score
        data.update(files=dict(files), format=fmt or "conllu")
        field = tag_field(data)
        train = read_tagged_file(files["train"], data["format"], data_dir, mirror_root)
    else:
        field = tag_field(data)
        train = read_tagged_split(data, "train", data_dir, mirror_root)
    test = read_tagged_split(data, split, data_dir, mirror_root)
    model = MostFrequentTagBaseline().fit([s.words for s in train], [s.tags(field) for s in train])
    words = [s.words for s in test]
    metrics = tagging_metrics([s.tags(field) for s in test], model.predict(words), words,
                              {w for s in train for w in s.words})
    return {"dataset": dataset, "tagset": tagset, "split": split, "baseline": "most_frequent_tag",
            "train_sentences": len(train), **metrics}


# ----------------------------------------------------------------------------- ensembles
def rank_subsets(member_probs: list[list[torch.Tensor]], gold_ids: list[list[int]]) -> list[dict]:
    """Every non-empty subset of the members, by the number of words its mean probability
    tags right: most first, then fewer members, then earlier members.

    ``member_probs[m][s]`` is member m's (n_words, n_tags) probabilities for sentence s;
    ``gold_ids[s]`` the gold tag indices (-1 for a tag outside the inventory: never right).
    Returns ``[{"members": (indices), "correct": int, "tokens": int, "acc": fraction}]``.
    """
    gold = torch.tensor([i for sent in gold_ids for i in sent], dtype=torch.long)
    flat = []
    for m, probs in enumerate(member_probs):
        if [len(p) for p in probs] != [len(g) for g in gold_ids]:
            raise ValueError(f"member {m}: its sentences do not align with the gold tags")
        flat.append(torch.cat([p.float() for p in probs]) if probs else torch.zeros(0, 1))
    ranked = []
    for size in range(1, len(flat) + 1):
        for subset in itertools.combinations(range(len(flat)), size):
            pred = sum(flat[i] for i in subset).argmax(-1) if len(gold) else gold
            correct = int((pred == gold).sum())
            ranked.append({"members": subset, "correct": correct, "tokens": len(gold),
                           "acc": correct / len(gold) if len(gold) else None})
    ranked.sort(key=lambda r: (-r["correct"], len(r["members"]), r["members"]))
    return ranked


def _words_and_gold(task, split: str, data_dir: str, mirror_root: str | None):
    sents = read_tagged_split(task.hparams.data, split, data_dir, mirror_root)
    return [s.words for s in sents], [s.tags(task.tagset) for s in sents]


def choose_members(tasks, labels: Sequence[str], split: str, data_dir: str = "data/cache",
                   mirror_root: str | None = None, device: str = "cpu", top: int = 10) -> tuple[list[int], dict]:
    """The subset of ``tasks`` (tagging tasks named by ``labels``) that tags the most words of
    ``split`` right with its mean probabilities (:func:`rank_subsets`), and the selection
    report: the ``top`` subsets, every member's own accuracy."""
    first = tasks[0]
    words, gold = _words_and_gold(first, split, data_dir, mirror_root)
    index = {t: i for i, t in enumerate(first.tags)}
    gold_ids = [[index.get(t, -1) for t in sent] for sent in gold]
    ranked = rank_subsets([t.tagger(device=device).tag_probabilities(words) for t in tasks], gold_ids)
    chosen = list(ranked[0]["members"])
    listing = [{"checkpoints": [labels[i] for i in r["members"]], "acc": r["acc"], "correct": r["correct"]}
               for r in ranked[:top]]
    singles = {r["members"][0]: r["acc"] for r in ranked if len(r["members"]) == 1}
    return chosen, {"split": split, "tokens": ranked[0]["tokens"], "subsets": len(ranked),
                    "chosen": [labels[i] for i in chosen], "best": listing,
                    "single_acc": [singles[i] for i in range(len(tasks))]}


def score_ensemble(tasks, labels: Sequence[str], split: str, data_dir: str = "data/cache",
                   mirror_root: str | None = None, device: str = "cpu") -> dict:
    """Each member's accuracy on ``split`` and the metrics of their mean probabilities
    (unseen words: the first member's training words)."""
    first = tasks[0]
    words, gold = _words_and_gold(first, split, data_dir, mirror_root)
    members, total = [], None
    for label, task in zip(labels, tasks):
        probs = task.tagger(device=device).tag_probabilities(words)  # per sentence (n_words, C)
        pred = [[task.tags[i] for i in p.argmax(-1).tolist()] for p in probs]
        m = tagging_metrics(gold, pred, words, first.train_words)
        members.append({"checkpoint": label, "acc": m["acc"], "unseen_acc": m.get("unseen_acc")})
        total = probs if total is None else [a + b for a, b in zip(total, probs)]
    pred = [[first.tags[i] for i in p.argmax(-1).tolist()] for p in total]
    metrics = tagging_metrics(gold, pred, words, first.train_words)
    return {"split": split, "dataset": first.hparams.data["name"], "tagset": first.hparams.data["tagset"],
            "members": members, "ensemble": _summary(metrics)}


def ensemble_report(tasks: Sequence, paths: Sequence[str], split: str = "test", data_dir: str = "data/cache",
                    mirror_root: str | None = None, device: str = "cpu", choose_on: str | None = None,
                    top: int = 10) -> dict:
    """:func:`score_ensemble` tagging tasks loaded from the checkpoints ``paths`` (the caller
    loads them: ``tasks.checkpoint.load_task``) on ``split``; with ``choose_on``, only the subset
    :func:`choose_members` picks on that split (listed under ``selection``). A ``ValueError``
    names a checkpoint that is no tagger, or whose dataset, tag set or tag inventory differs
    from the first's."""
    from transformer.models.tagger_ensemble import TaggerSpec, check_tagger_ensemble

    paths = [str(p) for p in paths]
    tasks = [task.to(device) for task in tasks]
    for path, task in zip(paths, tasks):
        if kinds.task_kind(task) is not kinds.TAGGING:
            raise ValueError(f"{path}: not a tagging checkpoint")
    check_tagger_ensemble([TaggerSpec(t.hparams.data, t.tags, t.aux_tags) for t in tasks])
    selection = None
    if choose_on:
        chosen, selection = choose_members(tasks, paths, choose_on, data_dir, mirror_root, device, top)
        paths, tasks = [paths[i] for i in chosen], [tasks[i] for i in chosen]
    report = score_ensemble(tasks, paths, split, data_dir, mirror_root, device)
    if selection is not None:
        report["selection"] = selection
    return report


__all__ = ["choose_members", "ensemble_report", "evaluate_tagging", "format_report", "most_frequent_tag_baseline",
           "rank_subsets", "score_ensemble", "write_tagging_scores"]
