"""Tagged corpora by split, without Lightning: a corpus is a file format and one file per
split (train, dev, test and any named test sets), each a local path or a file of the data
registry; UD English-GUM 2.5 (CoNLL-U) and CoNLL-2000 (word-per-line columns) are presets that
name their files this way. The files are read by :mod:`transformer.data.core.readers`
(:func:`~transformer.data.core.readers.read_conllu`, :func:`~transformer.data.core.readers.read_columns`).

A file reference is a path, or ``registry:<relpath>`` for a file of
:data:`transformer.data.core.sources.DATASETS` (cache, mirror or download, sha256-checked); a file
inside a zip is ``<zip>!<member>`` (CoNLL-2000's, in NLTK's zip). ``TaggingDataModule`` and
checkpoint-only evaluation read splits through the same functions, so both see exactly the
same sentences (a corpus without a dev file has its ``dev`` cut from the training file).
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter, defaultdict
from pathlib import Path
from typing import Mapping, Sequence

from transformer.data.core.readers import WORD_POS_CHUNK, TaggedSentence, read_columns, read_conllu
from transformer.data.core.sources import CONLL2000_RELPATH, DATASETS, fetch, gum_relpath
from transformer.files import sha256_file

# Which TaggedSentence field holds each tag set, by file format (``conll2000``: word-per-line
# columns in CoNLL-2000's WORD POS CHUNK layout, whoever's file it is).
FORMAT_FIELDS = {
    "conllu": {"upos": "upos", "xpos": "xpos", "pos": "upos"},
    "conll2000": {"pos": "xpos", "xpos": "xpos", "chunk": "chunk"},
}
REGISTRY = "registry:"
_CONLL2000_ZIP = f"{REGISTRY}{CONLL2000_RELPATH}"
# The built-in corpora, as the data configs name them; also how a checkpoint that records only
# its dataset's name finds its files.
PRESETS: dict[str, dict] = {
    "gum": {"format": "conllu", "label": "GUM",
            "files": {s: f"{REGISTRY}{gum_relpath(s)}" for s in ("train", "dev", "test")}},
    "conll2000": {"format": "conll2000", "label": "CoNLL-2000",
                  "files": {"train": f"{_CONLL2000_ZIP}!conll2000/train.txt", "dev": None,
                            "test": f"{_CONLL2000_ZIP}!conll2000/test.txt"}},
}
# Which TaggedSentence field holds the tags of each (preset, tagset) pair.
TAG_FIELDS = {name: FORMAT_FIELDS[p["format"]] for name, p in PRESETS.items()}
TAGGING_SPLITS = ("train", "dev", "test")
SPLIT_ALIASES = {"val": "dev", "validation": "dev"}
# CoNLL-2000's bracket tags in GUM's spelling (WSJ writes "(" ")", GUM "-LRB-" "-RRB-").
GUM_BRACKETS = {"(": "-LRB-", ")": "-RRB-"}


def corpus_of(data: Mapping) -> dict:
    """``{"format", "files", "dev_size", "label"}`` of a corpus description: a tagging
    checkpoint's or data module's ``data`` (``{"name", "format", "files", "dev_size"}``), or a
    preset's name alone (``{"name": "gum"}``)."""
    name = data.get("name")
    if data.get("files"):
        fmt = data.get("format") or "conllu"
        files, label = dict(data["files"]), name or "corpus"
    elif name in PRESETS:
        fmt, files, label = PRESETS[name]["format"], dict(PRESETS[name]["files"]), PRESETS[name]["label"]
    else:
        raise ValueError(f"unknown tagging dataset {name!r}: give its files (train, dev, test) "
                         f"or one of {sorted(PRESETS)}")
    if fmt not in FORMAT_FIELDS:
        raise ValueError(f"tagging data format {fmt!r} unknown; choose from {sorted(FORMAT_FIELDS)}")
    return {"format": fmt, "files": files, "dev_size": int(data.get("dev_size") or 500), "label": label}


def corpus_files(dataset: str, fmt: str | None = None, train=None, dev=None, test=None,
                 tests: Mapping | None = None) -> tuple[str, dict[str, str | None]]:
    """``(format, {split: file reference})`` of a data module's arguments: the given files
    (local paths made absolute, so a checkpoint finds them from any folder), or, without
    ``train``, the files of the preset ``dataset`` names (none for another name: reading then
    asks for ``data.train``)."""
    preset = PRESETS.get(dataset)
    fmt = fmt or (preset["format"] if preset else "conllu")
    if train is None and preset is not None and dev is None and test is None and not tests:
        return fmt, dict(preset["files"])
    files = {"train": train, "dev": dev, "test": test, **dict(tests or {})}
    for split, ref in files.items():
        if ref is not None and not str(ref).startswith(REGISTRY):
            files[split] = str(Path(ref).expanduser().absolute())
    return fmt, files


def tag_field(data: Mapping, tagset: str | None = None) -> str:
    """The ``TaggedSentence`` field that holds ``tagset`` (default ``data["tagset"]``) in the
    corpus ``data`` describes; a ``ValueError`` names a tag set the format lacks."""
    tagset = tagset if tagset is not None else data["tagset"]
    fields = FORMAT_FIELDS[corpus_of(data)["format"]]
    if tagset not in fields:
        raise ValueError(f"tagset {tagset!r} not available for {data.get('name')!r}; choose from {sorted(fields)}")
    return fields[tagset]


def _local(ref: str, data_dir, mirror_root) -> tuple[Path, str | None]:
    """The local path of a file reference (fetching a registry file) and its zip member."""
    ref, _, member = str(ref).partition("!")
    if ref.startswith(REGISTRY):
        return fetch(ref[len(REGISTRY):], data_dir, mirror_root), member or None
    path = Path(ref).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"tagging data file not found: {ref}")
    return path, member or None


def file_hash(ref: str) -> str:
    """What identifies a file reference's content in cache keys: the registry's sha256, or
    the local file's."""
    base, _, member = str(ref).partition("!")
    if base.startswith(REGISTRY):
        return DATASETS[base[len(REGISTRY):]].sha256 + member
    return sha256_file(Path(base).expanduser()) + member


def read_tagged_file(ref: str, fmt: str = "conllu", data_dir: str | os.PathLike = "data/cache",
                     mirror_root: str | os.PathLike | None = None) -> list[TaggedSentence]:
    """The sentences of one file reference in format ``fmt``: ``conllu``, or ``conll2000`` for
    word-per-line columns in CoNLL-2000's ``WORD POS CHUNK`` layout."""
    path, member = _local(ref, data_dir, mirror_root)
    if fmt == "conll2000":
        return read_columns(path, WORD_POS_CHUNK, member=member)
    return read_conllu(path, member=member)


def read_tagged_splits(corpus: str | Mapping, splits: Sequence[str] = TAGGING_SPLITS,
                       data_dir: str | os.PathLike = "data/cache", mirror_root: str | os.PathLike | None = None,
                       dev_size: int | None = None) -> dict[str, list[TaggedSentence]]:
    """``{split: sentences}`` of a corpus (a preset's name, or a description as
    :func:`corpus_of` takes), in ``splits`` order. A corpus without a dev file has as
    ``dev`` the last ``dev_size`` sentences of its training file, and as ``train`` the rest
    (deterministic)."""
    c = corpus_of({"name": corpus} if isinstance(corpus, str) else corpus)
    files, dev_size = c["files"], dev_size if dev_size is not None else c["dev_size"]
    if files.get("train") is None:
        raise ValueError("tagging data: no training file given (data.train=PATH)")
    for split in splits:
        if split not in files:
            raise ValueError(f"{c['label']} has splits {', '.join(files)}; got {split!r}")
        if files[split] is None and split != "dev":
            raise ValueError(f"tagging data: no {split} file given (data.{split}=PATH)")
    read = lambda split: read_tagged_file(files[split], c["format"], data_dir, mirror_root)  # noqa: E731
    out: dict[str, list[TaggedSentence]] = {}
    if files.get("dev") is None and {"train", "dev"} & set(splits):
        full = read("train")
        if not 0 < dev_size < len(full):
            raise ValueError(f"dev_size {dev_size} must be in 1..{len(full) - 1} (the dev sentences held out "
                             f"of {files['train']}, which has no dev file)")
        out["train"], out["dev"] = full[:-dev_size], full[-dev_size:]
    return {s: out[s] if s in out else read(s) for s in splits}


def read_tagged_split(data: Mapping, split: str, data_dir: str | os.PathLike = "data/cache",
                      mirror_root: str | os.PathLike | None = None) -> list[TaggedSentence]:
    """The sentences of ``split`` (``val``/``validation`` mean ``dev``) of the corpus ``data``
    describes (as a tagging checkpoint stores it), or of a file of the corpus's format when
    ``split`` names one that exists."""
    split, c = SPLIT_ALIASES.get(split, split), corpus_of(data)
    if split not in c["files"]:
        if Path(split).is_file():
            return read_tagged_file(split, c["format"], data_dir, mirror_root)
        held = " (held out from train)" if c["files"].get("dev") is None else ""
        names = ", ".join(s + (held if s == "dev" else "") for s, f in c["files"].items()
                          if f is not None or s == "dev")
        raise ValueError(f"{c['label']} has splits {names}; got {split!r} (neither a split nor a file)")
    return read_tagged_splits(data, [split], data_dir, mirror_root)[split]


def unknown_tags(sentences: Sequence[TaggedSentence], field: str, known: Sequence[str]) -> Counter:
    """How often each tag of ``field`` outside ``known`` (the training tag set) occurs."""
    known_set = set(known)
    return Counter(t for s in sentences for t in s.tags(field) if t is not None and t not in known_set)


class UposFromXpos:
    """UPOS for Penn-Treebank-tagged words, learnt from a corpus annotated with both.

    A word gets the UPOS that its (lowercased form, XPOS) pair has in ``sentences`` when one
    UPOS makes up at least ``word_purity`` of that pair's occurrences; an unseen pair falls
    back to the XPOS alone, if one UPOS makes up at least ``tag_purity`` of that tag's
    occurrences (NN -> NOUN; not IN, which is ADP or SCONJ). Otherwise the answer is ``None``:
    undecided, never a guess. Built from GUM's training split, it gets 99.0 % of GUM's dev
    words right and decides 92 % of them.
    """

    def __init__(self, sentences: Sequence[TaggedSentence], word_purity: float = 0.8, tag_purity: float = 0.9):
        by_word: dict[tuple[str, str], Counter] = defaultdict(Counter)
        by_tag: dict[str, Counter] = defaultdict(Counter)
        for s in sentences:
            if s.upos is None:
                raise ValueError(f"sentence {s.sent_id}: no UPOS column to learn the conversion from")
            for w, u, x in zip(s.words, s.upos, s.xpos):
                by_word[(w.lower(), x)][u] += 1
                by_tag[x][u] += 1
        self.by_word = {k: _majority(c, word_purity) for k, c in by_word.items()}
        self.by_tag = {k: _majority(c, tag_purity) for k, c in by_tag.items()}

    def __call__(self, words: Sequence[str], xpos: Sequence[str]) -> list[str | None]:
        out = []
        for w, x in zip(words, xpos, strict=True):
            key = (w.lower(), x)
            out.append(self.by_word[key] if key in self.by_word else self.by_tag.get(x))
        return out


def _majority(counts: Counter, purity: float) -> str | None:
    tag, n = counts.most_common(1)[0]
    return tag if n >= purity * sum(counts.values()) else None


def read_aux_corpus(data_dir: str | os.PathLike = "data/cache", mirror_root: str | os.PathLike | None = None,
                    upos_from: Sequence[TaggedSentence] | None = None) -> list[TaggedSentence]:
    """CoNLL-2000's whole training file (WSJ, Penn Treebank tags in ``xpos``) with GUM's
    bracket tags, as auxiliary training data beside GUM. With ``upos_from`` (sentences tagged
    with both annotations) its words also get UPOS tags converted from their XPOS
    (:class:`UposFromXpos`; ``None`` where the table cannot decide)."""
    sents = [dataclasses.replace(s, xpos=[GUM_BRACKETS.get(t, t) for t in s.xpos])
             for s in read_tagged_file(PRESETS["conll2000"]["files"]["train"], "conll2000", data_dir, mirror_root)]
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


# ----------------------------------------------------------------------------- checking the config
# The checks of a tagging config (transformer.data.tagged.datamodule.TaggingDataModule):
# its options against its corpus's file format and each other. The data module runs them when it
# is built, as its reader names problems with the files themselves.


def check_tagging_options(fmt: str, tagset: str, aux_tagset: str | None, aux_corpus: str | None,
                          aux_corpus_upos: bool, extra_train: Sequence[Path]) -> tuple[str, str | None]:
    """The ``TaggedSentence`` fields of the main and the auxiliary tags of a corpus in format
    ``fmt`` (``conllu`` | ``conll2000``); a ``ValueError`` names any option that does not fit
    the format or the other options."""
    if fmt not in FORMAT_FIELDS:
        raise ValueError(f"data.format must be one of {sorted(FORMAT_FIELDS)}, got {fmt!r}")
    allowed = FORMAT_FIELDS[fmt]
    for key, value in (("tagset", tagset), ("aux_tagset", aux_tagset)):
        if value is not None and value not in allowed:
            raise ValueError(f"data.{key} {value!r} not available for {fmt} files; choose from {sorted(allowed)}")
    field, aux_field = allowed[tagset], (allowed[aux_tagset] if aux_tagset is not None else None)
    if aux_field == field:
        raise ValueError(f"aux_tagset {aux_tagset!r} is the same annotation as tagset {tagset!r}")
    if aux_corpus is not None and (aux_corpus != "conll2000" or fmt != "conllu" or aux_field != "xpos"):
        raise ValueError(f"aux_corpus {aux_corpus!r}: only 'conll2000', with a CoNLL-U corpus and aux_tagset 'xpos' "
                         "(Penn Treebank tags, as GUM's)")
    if aux_corpus_upos and (aux_corpus is None or field != "upos"):
        raise ValueError("aux_corpus_upos needs an aux_corpus and tagset 'upos'")
    for path in extra_train:
        if not path.is_file():
            raise FileNotFoundError(f"data.extra_train: file not found: {path}")
    if extra_train and "chunk" in (field, aux_field):
        raise ValueError("data.extra_train reads CoNLL-U files, which have no chunk tags")
    return field, aux_field


def check_tagged(d: dict, where: str, complete: bool = False) -> None:
    """A tagging data config (:class:`~transformer.data.tagged.datamodule.TaggingDataModule`)
    as training's validation step checks it: a run's (``complete``) names its training file, or
    a preset (``gum``, ``conll2000``) that has one. Everything else its reader names itself."""
    if not complete:
        return
    _, files = corpus_files(str(d.get("dataset") or ""), d.get("format"), d.get("train"), d.get("dev"),
                            d.get("test"), d.get("tests"))
    if files.get("train") is None:
        raise ValueError(f"{where}.train: required (a CoNLL-U or CoNLL-2000 training file: {where}.train=<file>, "
                         f"or a preset with its own files: {where}.dataset=gum or conll2000)")


__all__ = ["FORMAT_FIELDS", "GUM_BRACKETS", "PRESETS", "SPLIT_ALIASES", "TAGGING_SPLITS", "TAG_FIELDS",
           "UposFromXpos", "check_tagged", "check_tagging_options", "corpus_files", "corpus_of", "file_hash",
           "read_aux_corpus", "read_extra_train", "read_tagged_file", "read_tagged_split",
           "read_tagged_splits", "tag_field", "unknown_tags"]
