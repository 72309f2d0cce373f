"""The tagging LightningDataModule: POS (or chunk) tags of UD English-GUM 2.5 or CoNLL-2000,
one tag per word over subword pieces (see :mod:`transformer.data.datamodule_base` for what
every data module does on ``setup()``; the splits come from
:mod:`transformer.data.tagged_splits`)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Sequence

from transformer.data.batching import TaggingCollator
from transformer.data.datamodule_base import TokenBudgetDataModule, load_or_train_tokenizer
from transformer.data.preprocess import cache_key, int_column, tokenize_tagging
from transformer.data.readers import TaggedSentence, iter_words
from transformer.data.sources import CONLL2000_RELPATH, DATASETS, gum_relpath, sha256_file
from transformer.data.tagged_splits import TAG_FIELDS, TAGGING_SPLITS, read_aux_corpus, read_extra_train, read_tagged_splits
from transformer.data.tokenizer import SubwordTokenizer

log = logging.getLogger(__name__)


def check_tagging_options(dataset: str, tagset: str, aux_tagset: str | None, aux_corpus: str | None,
               aux_corpus_upos: bool, extra_train: Sequence[Path]) -> tuple[str, str | None]:
    """The ``TaggedSentence`` fields of the main and the auxiliary tags; a ``ValueError``
    names any option that does not fit the dataset or the other options."""
    if dataset not in TAG_FIELDS:
        raise ValueError(f"dataset must be 'gum' or 'conll2000', got {dataset!r}")
    allowed = TAG_FIELDS[dataset]
    for key, value in (("tagset", tagset), ("aux_tagset", aux_tagset)):
        if value is not None and value not in allowed:
            raise ValueError(f"{key} {value!r} not available for {dataset}; choose from {sorted(allowed)}")
    field, aux_field = allowed[tagset], (allowed[aux_tagset] if aux_tagset is not None else None)
    if aux_field == field:
        raise ValueError(f"aux_tagset {aux_tagset!r} is the same annotation as tagset {tagset!r}")
    if aux_corpus is not None and (aux_corpus != "conll2000" or dataset != "gum" or aux_field != "xpos"):
        raise ValueError(f"aux_corpus {aux_corpus!r}: only 'conll2000', with dataset 'gum' and aux_tagset 'xpos' "
                         "(both Penn Treebank tags)")
    if aux_corpus_upos and (aux_corpus is None or field != "upos"):
        raise ValueError("aux_corpus_upos needs an aux_corpus and tagset 'upos'")
    for path in extra_train:
        if not path.is_file():
            raise FileNotFoundError(f"data.extra_train: file not found: {path}")
    if extra_train and "chunk" in (field, aux_field):
        raise ValueError("data.extra_train reads CoNLL-U files, which have no chunk tags")
    return field, aux_field


class TaggingDataModule(TokenBudgetDataModule):
    """POS tagging on UD English-GUM 2.5 or CoNLL-2000.

    Args:
        dataset: ``"gum"`` (splits train/dev/test) or ``"conll2000"`` (train/dev/test;
            upstream has no dev set, so the last ``dev_size`` sentences of the training
            file become ``dev`` and are removed from ``train``; deterministic).
        tagset: ``"upos"`` | ``"xpos"`` (GUM); ``"pos"`` is the corpus's own POS column
            (UPOS for GUM, Penn Treebank for CoNLL-2000, where ``"xpos"`` means the same);
            ``"chunk"`` for CoNLL-2000 chunk tags.
        aux_tagset: a second annotation of the same words (e.g. ``"xpos"`` beside
            ``tagset: upos`` on GUM) for multi-task training: batches then carry
            ``aux_tags`` too and ``aux_tag_vocab`` lists its tags. ``null``: none.
        aux_corpus: ``"conll2000"``: add CoNLL-2000's whole training file (WSJ, Penn
            Treebank tags) to the training set with only auxiliary tags (their main tags are
            ignored by the loss); needs ``dataset: gum`` and ``aux_tagset: xpos``, GUM's XPOS
            being Penn Treebank tags too. The tokenizer then also learns from its words;
            ``raw("train")`` and the training-word list stay GUM's.
        aux_corpus_upos: with ``aux_corpus`` and ``tagset: upos``, give the auxiliary
            corpus's words UPOS tags too, converted from their Penn Treebank tags by a table
            learnt on GUM's training split (:class:`~transformer.data.readers.UposFromXpos`);
            words it cannot decide keep ``None`` (ignored by the loss).
        extra_train: CoNLL-U files whose sentences are added to the training set (more gold
            data, or silver data: another corpus tagged by ``transformer-tag``, for
            self-training). Their UPOS / XPOS columns give the main tags (and the auxiliary
            tags with ``aux_tagset``); a ``_`` field is ignored by the loss. Their words train
            the tokenizer; ``raw("train")``, the training-word list (unseen-word accuracy),
            dev and test stay the dataset's own. Not for ``tagset: chunk`` (CoNLL-U has no
            chunk column).
        tokenizer_model: ``"bpe"`` | ``"unigram"`` | ``"word"``; trained on the training
            words (each word an item, so pieces never cross words; unseen words still
            encode as byte-level pieces, or ``<unk>`` for ``"word"``).
        max_len: training sentences with more pieces are dropped (``filter_report``).
        train_subset: use only the first N training sentences.

    After ``setup()``: ``tokenizer``, ``tag_vocab`` (sorted training tags, then any tag
    seen only in dev/test appended, so every split encodes), ``aux_tag_vocab`` (the same for
    ``aux_tagset``; empty without one), ``raw(split)``.
    """

    val_split = "dev"

    def __init__(
        self,
        dataset: str = "gum",
        tagset: str = "upos",
        data_dir: str | os.PathLike = "data/cache",
        mirror_root: str | os.PathLike | None = None,
        vocab_size: int = 4000,
        tokenizer_model: str = "bpe",
        max_tokens: int = 4096,
        max_len: int = 256,
        num_workers: int = 0,
        seed: int = 0,
        tokenizer_path: str | os.PathLike | None = None,
        train_subset: int | None = None,
        dev_size: int = 500,
        aux_tagset: str | None = None,
        aux_corpus: str | None = None,
        aux_corpus_upos: bool = False,
        extra_train: Sequence[str | os.PathLike] | None = None,
    ):
        super().__init__(max_tokens, num_workers, seed)
        self.save_hyperparameters()
        if isinstance(extra_train, (str, os.PathLike)):
            extra_train = [extra_train]
        self.extra_train = [Path(p) for p in (extra_train or [])]
        self._field, self._aux_field = check_tagging_options(dataset, tagset, aux_tagset, aux_corpus,
                                                             aux_corpus_upos, self.extra_train)
        self.dataset_name, self.tagset, self.aux_tagset = dataset, tagset, aux_tagset
        self.aux_corpus, self.aux_corpus_upos = aux_corpus, aux_corpus_upos
        self.data_dir, self.mirror_root = Path(data_dir), mirror_root
        self.vocab_size, self.tokenizer_model, self.tokenizer_path = vocab_size, tokenizer_model, tokenizer_path
        self.max_len, self.train_subset, self.dev_size = max_len, train_subset, dev_size
        self.test_splits = ["test"]
        self.tokenizer: SubwordTokenizer | None = None
        self.tag_vocab: list[str] = []
        self.aux_tag_vocab: list[str] = []
        self._raw: dict[str, list[TaggedSentence]] = {}
        self._extra_sents: list[TaggedSentence] = []
        self._aux_corpus_sents: list[TaggedSentence] = []

    def _read_all(self) -> None:
        """Read every split, the auxiliary corpus and the extra training files, and the
        hashes that key their caches."""
        self._raw = read_tagged_splits(self.dataset_name, TAGGING_SPLITS, self.data_dir, self.mirror_root,
                                       self.dev_size)
        if self.dataset_name == "gum":
            self._hashes = {s: [DATASETS[gum_relpath(s)].sha256] for s in self._raw}
        else:
            sha = DATASETS[CONLL2000_RELPATH].sha256
            self._hashes = {s: [sha, s, self.dev_size] for s in self._raw}
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
        return getattr(sent, field or self._field)

    def _vocab(self, field: str, name: str) -> list[str]:
        """Sorted training tags of ``field``, then any tag seen only in dev/test."""
        train = self._raw["train"] + (self._aux_corpus_sents if field == self._aux_field else []) + self._extra_sents
        seen = sorted({t for s in train for t in self._tags(s, field) if t is not None})
        extra = sorted({t for sp in ("dev", "test") for s in self._raw[sp] for t in self._tags(s, field)} - set(seen))
        if extra:
            log.warning("%s %s: tags only in dev/test appended to the tag vocabulary: %s", self.dataset_name, name, extra)
        return seen + extra

    def _load_tokenizer(self) -> SubwordTokenizer:
        """The given tokenizer, or one trained on every training word (cached)."""
        if self.tokenizer_path is not None:
            return SubwordTokenizer.load(self.tokenizer_path)
        words = self._raw["train"] + self._aux_corpus_sents + self._extra_sents
        key = cache_key("tagtok", self._hashes["train"], len(words), self.tokenizer_model, self.vocab_size)[:16]
        path = self.data_dir / "tokenizers" / f"{self.dataset_name}-{self.tokenizer_model}{self.vocab_size}-{key}.json"
        return load_or_train_tokenizer(path, lambda: iter_words(words), self.vocab_size, self.tokenizer_model)

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

    def setup(self, stage: str | None = None) -> None:
        if self._ready:
            return
        self._read_all()
        self.tokenizer = self._load_tokenizer()
        self._record_vocab_size(self.tokenizer)
        self.tag_vocab = self._vocab(self._field, self.tagset)
        aux = self._aux_field
        if aux is not None:
            self.aux_tag_vocab = self._vocab(aux, self.aux_tagset)
        for split in self._raw:
            name = f"{self.dataset_name}-{self.tagset}-{split}"
            sents, tags = self._split_sentences(split)
            ds = tokenize_tagging(
                sents, tags, self.tokenizer, self.tag_vocab, self.data_dir, name, self._hashes[split],
                aux_tags=[self._tags(s, aux) for s in sents] if aux is not None else None,
                aux_vocab=self.aux_tag_vocab if aux is not None else None,
            ).with_format(None)
            lengths = self._lengths_of(ds)
            self._add_split(split, ds, lengths, lengths, name)
        self._ready = True

    def _lengths_of(self, ds) -> list[int]:
        return int_column(ds, "n_pieces")

    def _collator(self) -> TaggingCollator:
        return TaggingCollator(pad_id=self.tokenizer.pad_id)

    def raw(self, split: str) -> list[TaggedSentence]:
        """The split's sentences in file order (train: before the length filter)."""
        return self._raw[split]


__all__ = ["TaggingDataModule", "check_tagging_options"]
