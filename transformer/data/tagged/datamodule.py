"""The tagging LightningDataModule: POS (or chunk) tags of any CoNLL-U treebank given by its
files (UD English-GUM 2.5 and CoNLL-2000 are presets naming theirs), one tag per word over
subword pieces (see :mod:`transformer.data.core.datamodule` for what every data module does on
``setup()``; the splits come from :mod:`transformer.data.tagged.corpus`). Each split is
tokenized into a cached Arrow table (:func:`tokenize_tagging`, :mod:`transformer.data.core.cache`)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Annotated, Mapping, Sequence

import datasets

from transformer.data.core.batching import IGNORE_INDEX, TaggingCollator
from transformer.data.core.cache import ID_LIST, cache_key, int_column, map_cached
from transformer.data.core.datamodule import TokenBudgetDataModule, load_or_train_tokenizer
from transformer.data.core.readers import TaggedSentence
from transformer.data.core.sources import CONLL2000_RELPATH, DATASETS
from transformer.files import sha256_file
from transformer.data.core.tokenizer import SubwordTokenizer
from transformer.data.tagged.corpus import (check_tagged, check_tagging_options, corpus_files, file_hash,
                                            read_aux_corpus, read_extra_train, read_tagged_splits, unknown_tags)
from transformer.files import inside
from transformer.ranges import Range

log = logging.getLogger(__name__)

TAGGING_FEATURES = datasets.Features(
    {
        "src": ID_LIST,
        "word_ids": ID_LIST,
        "tags": ID_LIST,
        "index": datasets.Value("int64"),
        "n_pieces": datasets.Value("int32"),
    }
)
# With an auxiliary tag set (multi-task tagging): a second tag id per word.
TAGGING_AUX_FEATURES = datasets.Features({**TAGGING_FEATURES, "aux_tags": ID_LIST})


def tokenize_tagging(
    sentences: Sequence[TaggedSentence],
    tags: Sequence[Sequence[str]],
    tokenizer: SubwordTokenizer,
    tag_vocab: Sequence[str],
    cache_dir: str | os.PathLike,
    name: str,
    source_hashes: Sequence[str],
    aux_tags: Sequence[Sequence[str]] | None = None,
    aux_vocab: Sequence[str] | None = None,
) -> datasets.Dataset:
    """Dataset with ``src`` (pieces), ``word_ids`` (word of each piece), ``tags`` (tag id
    per word), ``index``, ``n_pieces``, and with ``aux_tags``/``aux_vocab`` an ``aux_tags``
    column (a second tag id per word); cached under ``cache_dir/arrow/{name}-{hash}.arrow``. A tag
    ``None`` (a word without that annotation) becomes ``IGNORE_INDEX``: no loss, no score."""
    if (aux_tags is None) != (aux_vocab is None):
        raise ValueError("aux_tags and aux_vocab go together")
    aux = list(aux_vocab) if aux_vocab is not None else None
    key = cache_key("tagging", list(source_hashes), len(sentences), tokenizer.content_hash, list(tag_vocab),
                    *([aux] if aux is not None else []))
    cache_file = inside(Path(cache_dir) / "arrow", f"{name}-{key[:16]}.arrow")
    tag_to_id = {None: IGNORE_INDEX, **{t: i for i, t in enumerate(tag_vocab)}}
    aux_to_id = {None: IGNORE_INDEX, **{t: i for i, t in enumerate(aux or [])}}
    columns = {"words": [s.words for s in sentences], "tag_names": [list(t) for t in tags],
               "index": list(range(len(sentences)))}
    if aux_tags is not None:
        columns["aux_names"] = [list(t) for t in aux_tags]

    def fn(batch: dict[str, list]) -> dict[str, list]:
        out: dict[str, list] = {"src": [], "word_ids": [], "tags": [], "index": batch["index"], "n_pieces": []}
        for words, names in zip(batch["words"], batch["tag_names"]):
            ids, word_ids = tokenizer.frame_words(*tokenizer.encode_words(words))
            out["src"].append(ids)
            out["word_ids"].append(word_ids)
            out["tags"].append([tag_to_id[t] for t in names])
            out["n_pieces"].append(len(ids))
        if "aux_names" in batch:
            out["aux_tags"] = [[aux_to_id[t] for t in names] for names in batch["aux_names"]]
        return out

    features = TAGGING_AUX_FEATURES if aux_tags is not None else TAGGING_FEATURES
    remove = [c for c in columns if c != "index"]
    return map_cached(datasets.Dataset.from_dict(columns), fn, cache_file, key, features, remove)


class TaggingDataModule(TokenBudgetDataModule):
    """Part-of-speech (or chunk) tagging on any treebank given by its files.

    Args:
        dataset: the corpus's name (cache files, reports). ``"gum"`` (UD English-GUM 2.5) and
            ``"conll2000"`` are presets: without ``train`` they read their own files.
        tagset: ``"upos"`` | ``"xpos"`` (CoNLL-U); ``"pos"`` is the corpus's own POS column
            (UPOS for CoNLL-U, Penn Treebank for CoNLL-2000, where ``"xpos"`` means the same);
            ``"chunk"`` for CoNLL-2000 chunk tags. The tag set is the training file's tags.
        train, dev, test: the files (a path, or ``registry:<relpath>`` for a file of the data
            registry, fetched from the cache, the mirror or upstream). Without ``dev`` the last
            ``dev_size`` sentences of the training file become ``dev`` and are removed from
            ``train`` (deterministic); without ``test`` there is no test split.
        tests: more test files by split name (``{name: path}``), scored like ``test``.
        format: ``"conllu"`` | ``"conll2000"`` (``WORD POS CHUNK`` lines); ``None``: the
            preset's, else CoNLL-U.
        aux_tagset: a second annotation of the same words (e.g. ``"xpos"`` beside
            ``tagset: upos``) for multi-task training: batches then carry ``aux_tags`` too and
            ``aux_tag_vocab`` lists its tags. ``null``: none.
        aux_corpus: ``"conll2000"``: add CoNLL-2000's whole training file (WSJ, Penn
            Treebank tags) to the training set with only auxiliary tags (their main tags are
            ignored by the loss); needs a CoNLL-U corpus and ``aux_tagset: xpos`` with Penn
            Treebank XPOS (as GUM's). The tokenizer then also learns from its words;
            ``raw("train")`` and the training-word list stay the corpus's own.
        aux_corpus_upos: with ``aux_corpus`` and ``tagset: upos``, give the auxiliary
            corpus's words UPOS tags too, converted from their Penn Treebank tags by a table
            learnt on the training split (:class:`~transformer.data.tagged.corpus.UposFromXpos`);
            words it cannot decide keep ``None`` (ignored by the loss).
        extra_train: CoNLL-U files whose sentences are added to the training set (more gold
            data, or silver data from ``transformer-tag``, for self-training); a ``_`` field is
            ignored by the loss. Their words train the tokenizer; ``raw("train")``, the
            training-word list, dev and test stay the corpus's own. Not for ``tagset: chunk``.
        tokenizer_model: ``"bpe"`` | ``"unigram"`` | ``"word"``; trained on the training
            words (each word an item, so pieces never cross words, and a word containing a
            space stays one word; unseen words still encode as byte-level pieces, or ``<unk>``
            for ``"word"``).
        max_len: training sentences with more pieces are dropped (``filter_report``).
        max_positions: the most pieces the model reads (a learned position table: training sets
            it from the model config); longer rows of every split are cut to it, with a warning,
            and the words they lose are not scored.
        train_subset: use only the first N training sentences.

    After ``setup()``: ``tokenizer``, ``tag_vocab`` (the training split's sorted tags: the
    model's classes), ``aux_tag_vocab`` (the same for ``aux_tagset``; empty without one),
    ``unknown_tags`` (``{split: {tag: count}}`` of dev/test tags outside the training tag set,
    also logged in a warning: such a word is encoded with an id past the model's classes, so
    the loss leaves it out and the accuracy counts it as an error), ``raw(split)``,
    ``test_splits``.
    """

    val_split = "dev"
    check_config = staticmethod(check_tagged)  # its config's checks, before any file is read

    def __init__(
        self,
        dataset: str = "gum",
        tagset: str = "upos",
        data_dir: str | os.PathLike = "data/cache",
        mirror_root: str | os.PathLike | None = None,
        vocab_size: Annotated[int, Range(1, 2**24)] = 4000,
        tokenizer_model: str = "bpe",
        max_tokens: Annotated[int, Range(1, 2**31)] = 4096,
        max_len: Annotated[int, Range(1, 2**20)] = 256,
        num_workers: Annotated[int, Range(0, 1024)] = 0,
        seed: int = 0,
        tokenizer_path: str | os.PathLike | None = None,
        train_subset: Annotated[int | None, Range(1, 2**40)] = None,
        dev_size: int = 500,
        aux_tagset: str | None = None,
        aux_corpus: str | None = None,
        aux_corpus_upos: bool = False,
        extra_train: Sequence[str | os.PathLike] | None = None,
        train: str | os.PathLike | None = None,
        dev: str | os.PathLike | None = None,
        test: str | os.PathLike | None = None,
        tests: Mapping[str, str | os.PathLike] | None = None,
        format: str | None = None,
        max_positions: Annotated[int | None, Range(1, 2**20)] = None,
    ):
        super().__init__(max_tokens, num_workers, seed)
        self.save_hyperparameters()
        self.max_positions = max_positions
        if isinstance(extra_train, (str, os.PathLike)):
            extra_train = [extra_train]
        self.extra_train = [Path(p) for p in (extra_train or [])]
        self.format, self.files = corpus_files(dataset, format, train, dev, test, tests)
        self._field, self._aux_field = check_tagging_options(self.format, tagset, aux_tagset, aux_corpus,
                                                             aux_corpus_upos, self.extra_train)
        self.dataset_name, self.tagset, self.aux_tagset = dataset, tagset, aux_tagset
        self.aux_corpus, self.aux_corpus_upos = aux_corpus, aux_corpus_upos
        self.data_dir, self.mirror_root = Path(data_dir), mirror_root
        self.vocab_size, self.tokenizer_model, self.tokenizer_path = vocab_size, tokenizer_model, tokenizer_path
        self.max_len, self.train_subset, self.dev_size = max_len, train_subset, dev_size
        self.test_splits = [s for s in self.files if s not in ("train", "dev") and self.files[s] is not None]
        self.tokenizer: SubwordTokenizer | None = None
        self.tag_vocab: list[str] = []
        self.aux_tag_vocab: list[str] = []
        self.unknown_tags: dict[str, dict[str, int]] = {}
        self._raw: dict[str, list[TaggedSentence]] = {}
        self._extra_sents: list[TaggedSentence] = []
        self._aux_corpus_sents: list[TaggedSentence] = []

    @property
    def corpus(self) -> dict:
        """The corpus as a checkpoint records it: name, format, files, dev size, tag sets."""
        return {"name": self.dataset_name, "format": self.format, "files": dict(self.files),
                "dev_size": self.dev_size, "tagset": self.tagset, "aux_tagset": self.aux_tagset}

    def _read_all(self) -> None:
        """Read every split, the auxiliary corpus and the extra training files, and the
        hashes that key their caches."""
        splits = ["train", "dev", *self.test_splits]
        self._raw = read_tagged_splits(self.corpus, splits, self.data_dir, self.mirror_root, self.dev_size)
        self._hashes = {s: [file_hash(self.files[s])] for s in splits if self.files.get(s) is not None}
        if self.files.get("dev") is None:  # dev held out of train
            self._hashes["dev"] = [*self._hashes["train"], "dev", self.dev_size]
            self._hashes["train"] = [*self._hashes["train"], "train", self.dev_size]
        if self.train_subset is not None:
            self._raw["train"] = self._raw["train"][: self.train_subset]
        if self.aux_corpus is not None:
            upos_from = self._raw["train"] if self.aux_corpus_upos else None
            self._aux_corpus_sents = read_aux_corpus(self.data_dir, self.mirror_root, upos_from)
            self._hashes["train"] = [*self._hashes["train"], "aux", DATASETS[CONLL2000_RELPATH].sha256]
            if self.aux_corpus_upos:
                decided = sum(t is not None for s in self._aux_corpus_sents for t in s.upos)
                total = sum(len(s.words) for s in self._aux_corpus_sents)
                log.info("aux_corpus_upos: %d of %d %s words get a converted UPOS tag; the rest are ignored",
                         decided, total, self.aux_corpus)
                self._hashes["train"].append("upos-from-xpos")
        for path in self.extra_train:
            self._extra_sents += read_extra_train(path)
            self._hashes["train"] = [*self._hashes["train"], "extra", sha256_file(path)]
        if self.extra_train:
            log.info("extra_train: %d sentences, %d words from %s", len(self._extra_sents),
                     sum(len(s.words) for s in self._extra_sents), ", ".join(map(str, self.extra_train)))

    def _tags(self, sent: TaggedSentence, field: str | None = None) -> list[str]:
        return sent.tags(field or self._field)

    def _vocab(self, field: str, name: str) -> tuple[list[str], list[str]]:
        """The sorted training tags of ``field`` (the model's classes), and the sorted tags
        seen only in dev/test (counted in ``unknown_tags`` and a warning)."""
        train = self._raw["train"] + (self._aux_corpus_sents if field == self._aux_field else []) + self._extra_sents
        seen = sorted({t for s in train for t in self._tags(s, field) if t is not None})
        unknown: set[str] = set()
        for split in self._raw:
            counts = unknown_tags(self._raw[split], field, seen) if split != "train" else {}
            if counts:
                self.unknown_tags.setdefault(split, {}).update(counts)
                unknown |= set(counts)
                log.warning("%s %s: %d %s word(s) carry a tag not in the training file (%s); they count as "
                            "errors in accuracy and are left out of the loss", self.dataset_name, split,
                            sum(counts.values()), name, ", ".join(f"{t}: {n}" for t, n in sorted(counts.items())))
        return seen, sorted(unknown)

    def _load_tokenizer(self) -> SubwordTokenizer:
        """The given tokenizer, or one trained on every training word (cached)."""
        if self.tokenizer_path is not None:
            return SubwordTokenizer.load(self.tokenizer_path)
        words = self._raw["train"] + self._aux_corpus_sents + self._extra_sents
        key = cache_key("tagtok", self._hashes["train"], len(words), self.tokenizer_model, self.vocab_size)[:16]
        path = inside(self.data_dir / "tokenizers", f"{self.dataset_name}-{self.tokenizer_model}{self.vocab_size}-{key}.json")
        return load_or_train_tokenizer(path, lambda: (w for s in words for w in s.words), self.vocab_size,
                                       self.tokenizer_model)

    def _split_sentences(self, split: str) -> tuple[list[TaggedSentence], list[list[str | None]]]:
        """A split's sentences and main tags; training adds the auxiliary corpus (no main tags
        unless converted: ``None`` is ignored by the loss) and the extra training files."""
        sents = self._raw[split]
        tags = [self._tags(s) for s in sents]
        if split == "train" and self._aux_corpus_sents:
            sents = sents + self._aux_corpus_sents
            tags = tags + [s.upos if self.aux_corpus_upos else [None] * len(s.words) for s in self._aux_corpus_sents]
        if split == "train" and self._extra_sents:
            sents = sents + self._extra_sents
            tags = tags + [self._tags(s) for s in self._extra_sents]
        return sents, tags

    def _build(self) -> None:
        self._read_all()
        self.tokenizer = self._load_tokenizer()
        self._record_vocab_size(self.tokenizer)
        # Tags only in dev/test get ids past the model's classes: never predicted, never right.
        self.tag_vocab, unknown = self._vocab(self._field, self.tagset)
        aux, aux_unknown = self._aux_field, []
        if aux is not None:
            self.aux_tag_vocab, aux_unknown = self._vocab(aux, self.aux_tagset)
        for split in self._raw:
            name = f"{self.dataset_name}-{self.tagset}-{split}"
            sents, tags = self._split_sentences(split)
            ds = tokenize_tagging(
                sents, tags, self.tokenizer, self.tag_vocab + unknown, self.data_dir, name, self._hashes[split],
                aux_tags=[self._tags(s, aux) for s in sents] if aux is not None else None,
                aux_vocab=self.aux_tag_vocab + aux_unknown if aux is not None else None,
            ).with_format(None)
            lengths = self._lengths_of(ds)
            self._add_split(split, ds, lengths, lengths, name)

    def _lengths_of(self, ds) -> list[int]:
        return int_column(ds, "n_pieces")

    def _collator(self) -> TaggingCollator:
        return TaggingCollator(pad_id=self.tokenizer.pad_id, max_positions=self.max_positions,
                               suffix=self.tokenizer.framing[1])

    def raw(self, split: str) -> list[TaggedSentence]:
        """The split's sentences in file order (train: before the length filter)."""
        return self._raw[split]


__all__ = ["TAGGING_AUX_FEATURES", "TAGGING_FEATURES", "TaggingDataModule", "tokenize_tagging"]
