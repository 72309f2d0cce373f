"""The tagging corpora by split, without Lightning: UD English-GUM 2.5 and CoNLL-2000 as
``TaggedSentence`` lists, which annotation a (dataset, tagset) pair reads, and the extra
training material of the tagging recipes (CoNLL-2000 beside GUM, CoNLL-U files).

``TaggingDataModule`` and checkpoint-only evaluation read splits through the same function,
so both see exactly the same sentences (CoNLL-2000's ``dev`` is cut from its training file).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Sequence

from transformer.data.readers import TaggedSentence, UposFromXpos, read_conll2000, read_conllu, read_gum

# Which TaggedSentence field holds the tags of each (dataset, tagset) pair.
TAG_FIELDS = {
    "gum": {"upos": "upos", "xpos": "xpos", "pos": "upos"},
    "conll2000": {"pos": "xpos", "xpos": "xpos", "chunk": "chunk"},
}
TAGGING_SPLITS = ("train", "dev", "test")
SPLIT_ALIASES = {"val": "dev", "validation": "dev"}
# CoNLL-2000's bracket tags in GUM's spelling (WSJ writes "(" ")", GUM "-LRB-" "-RRB-").
GUM_BRACKETS = {"(": "-LRB-", ")": "-RRB-"}


def read_tagged_splits(name: str, splits: Sequence[str] = TAGGING_SPLITS, data_dir: str | os.PathLike = "data/cache",
                       mirror_root: str | os.PathLike | None = None, dev_size: int = 500) -> dict[str, list[TaggedSentence]]:
    """``{split: sentences}`` of dataset ``name`` (``"gum"`` or ``"conll2000"``), in ``splits``
    order. CoNLL-2000 has no dev set upstream: its ``dev`` is the last ``dev_size`` sentences
    of the training file, and its ``train`` the rest (deterministic)."""
    if name == "gum":
        return {s: read_gum(s, data_dir, mirror_root) for s in splits}
    if name != "conll2000":
        raise ValueError(f"unknown tagging dataset {name!r}")
    out: dict[str, list[TaggedSentence]] = {}
    if {"train", "dev"} & set(splits):
        full = read_conll2000("train", data_dir, mirror_root)
        if not 0 < dev_size < len(full):
            raise ValueError(f"dev_size {dev_size} must be in 1..{len(full) - 1}")
        out["train"], out["dev"] = full[:-dev_size], full[-dev_size:]
    if "test" in splits:
        out["test"] = read_conll2000("test", data_dir, mirror_root)
    return {s: out[s] for s in splits}


def read_tagged_split(data: dict, split: str, data_dir: str | os.PathLike = "data/cache",
                      mirror_root: str | os.PathLike | None = None) -> list[TaggedSentence]:
    """The sentences of ``split`` (``val``/``validation`` mean ``dev``) of the dataset that
    ``data`` describes (``{"name", "tagset", "dev_size"}``, as a tagging checkpoint stores it)."""
    split, name = SPLIT_ALIASES.get(split, split), data["name"]
    if split not in TAGGING_SPLITS and name == "gum":
        raise ValueError(f"GUM has splits train, dev, test; got {split!r}")
    if split not in TAGGING_SPLITS and name == "conll2000":
        raise ValueError(f"CoNLL-2000 has splits train, dev (held out from train), test; got {split!r}")
    return read_tagged_splits(name, [split], data_dir, mirror_root, int(data.get("dev_size", 500)))[split]


def read_aux_corpus(data_dir: str | os.PathLike = "data/cache", mirror_root: str | os.PathLike | None = None,
                    upos_from: Sequence[TaggedSentence] | None = None) -> list[TaggedSentence]:
    """CoNLL-2000's whole training file (WSJ, Penn Treebank tags in ``xpos``) with GUM's
    bracket tags, as auxiliary training data beside GUM. With ``upos_from`` (sentences tagged
    with both annotations) its words also get UPOS tags converted from their XPOS
    (:class:`UposFromXpos`; ``None`` where the table cannot decide)."""
    sents = [dataclasses.replace(s, xpos=[GUM_BRACKETS.get(t, t) for t in s.xpos])
             for s in read_conll2000("train", data_dir, mirror_root)]
    if upos_from is not None:
        convert = UposFromXpos(upos_from)
        sents = [dataclasses.replace(s, upos=convert(s.words, s.xpos)) for s in sents]
    return sents


def read_extra_train(path: str | os.PathLike) -> list[TaggedSentence]:
    """A CoNLL-U file of extra training sentences; an annotation of ``_`` becomes ``None``
    (ignored by the loss, never a tag of the vocabulary)."""
    return [dataclasses.replace(s, upos=[None if t == "_" else t for t in s.upos],
                                xpos=[None if t == "_" else t for t in s.xpos])
            for s in read_conllu(path, missing_upos=True)]


__all__ = ["GUM_BRACKETS", "SPLIT_ALIASES", "TAGGING_SPLITS", "TAG_FIELDS", "read_aux_corpus", "read_extra_train",
           "read_tagged_split", "read_tagged_splits"]
