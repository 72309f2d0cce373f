"""LightningDataModules for translation (Multi30k) and tagging (UD GUM, CoNLL-2000).

The only module of ``transformer.data`` that imports Lightning.

Both modules, on ``setup()``: read the raw splits (fetching from cache, mirror or
upstream), train or load the tokenizer (cached as ``tokenizer.json`` under
``data_dir/tokenizers/`` keyed by training data and options, and verified by the sha256
recorded beside it), tokenize every split into
a cached Arrow dataset (:mod:`transformer.data.preprocess`), and length-filter the
training split only (dropped examples are logged and kept in ``filter_report``;
evaluation splits are never filtered, so references stay complete).

Dataloaders: ``train_dataloader`` uses a shuffled :class:`TokenBudgetBatchSampler`
sharded by the trainer's rank/world size (so DDP needs
``Trainer(use_distributed_sampler=False)``); ``dataloader(split)`` gives length-sorted
batches of a whole split on every rank, each batch carrying ``index`` so outputs can
be put back in split order (:func:`transformer.data.batching.restore_order`).
"""

from __future__ import annotations

import dataclasses

import logging
import os
from pathlib import Path
from typing import Any, Sequence

import lightning as L
import torch
from torch.utils.data import DataLoader

from transformer.data.batching import TaggingCollator, TokenBudgetBatchSampler, TranslationCollator, translation_length
from transformer.data.preprocess import (
    cache_key,
    check_cache,
    int_column,
    record_cache,
    tokenize_tagging,
    tokenize_translation,
)
from transformer.data.readers import (
    FilterResult,
    TaggedSentence,
    UposFromXpos,
    drop_one_sided,
    iter_words,
    length_filter,
    read_conll2000,
    read_conllu,
    read_gum,
    read_multi30k,
    read_parallel,
)
from transformer.data.sources import (
    CONLL2000_RELPATH,
    DATASETS,
    gum_relpath,
    multi30k_relpath,
    sha256_file,
)
from transformer.data.tokenizer import SubwordTokenizer

log = logging.getLogger(__name__)

MULTI30K_EVAL_SPLITS = ("val", "test_2016_flickr", "test_2017_flickr", "test_2017_mscoco")


class ResumableLoader(DataLoader):
    """The training ``DataLoader``, with the state Lightning stores in checkpoints.

    Lightning saves ``state_dict()`` of a training loader that has one and hands it back
    through ``load_state_dict`` when a run resumes mid-epoch: here the epoch and how many
    of its batches were handed out (counted as they leave the loader, so worker prefetching
    does not count), so that the resumed run continues with the next batch, not the
    epoch's first. Its ``batch_sampler`` must be a :class:`TokenBudgetBatchSampler`.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._served = 0

    def __iter__(self):
        self._served = self.batch_sampler.first_batch
        for batch in super().__iter__():
            self._served += 1
            yield batch

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.batch_sampler.epoch, "batches": self._served}

    def load_state_dict(self, state: dict[str, int]) -> None:
        epoch, batches = int(state["epoch"]), int(state["batches"])
        if batches >= len(self.batch_sampler):  # saved after the epoch's last batch
            epoch, batches = epoch + 1, 0
        self.batch_sampler.resume_at(epoch, batches)


class _TokenBudgetDataModule(L.LightningDataModule):
    """Shared dataloader plumbing: ``self._datasets[split]``, ``self._lengths[split]``."""

    train_split = "train"
    val_split = "val"

    def __init__(self, max_tokens: int, num_workers: int, seed: int):
        super().__init__()
        self.max_tokens = max_tokens
        self.pad_to_multiple = 1  # batch widths rounded up to multiples of this (see batching.py)
        self.num_workers = num_workers
        self.seed = seed
        self._datasets: dict[str, Any] = {}
        self._lengths: dict[str, list[int]] = {}
        self.filter_report: dict[str, FilterResult] = {}
        self._ready = False

    @property
    def splits(self) -> list[str]:
        """Every split available after ``setup()``."""
        return list(self._datasets)

    def _collator(self):
        raise NotImplementedError

    def _rank_world(self) -> tuple[int, int]:
        trainer = getattr(self, "trainer", None)
        if trainer is None:
            return 0, 1
        return trainer.global_rank, trainer.world_size

    def _generator(self) -> torch.Generator:
        """A loader's own seeded generator: creating its iterator then draws nothing from
        torch's global one, so validation does not shift training's dropout masks."""
        return torch.Generator().manual_seed(self.seed)

    def _loader(self, split: str, sampler: TokenBudgetBatchSampler) -> DataLoader:
        return ResumableLoader(
            self._datasets[split],
            batch_sampler=sampler,
            collate_fn=self._collator(),
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            generator=self._generator(),
        )

    def train_dataloader(self) -> DataLoader:
        rank, world = self._rank_world()
        split = self.train_split
        sampler = TokenBudgetBatchSampler(
            self._lengths[split], self.max_tokens, shuffle=True, seed=self.seed, num_replicas=world, rank=rank,
            pad_to_multiple=self.pad_to_multiple,
        )
        return self._loader(split, sampler)

    def dataloader(self, split: str) -> DataLoader:
        """Length-sorted, unshuffled batches of a whole split (no filtering, no sharding)."""
        if split not in self._datasets:
            raise KeyError(f"split {split!r} not set up; available: {self.splits}")
        ds = self._unfiltered_train if split == self.train_split else self._datasets[split]
        return DataLoader(
            ds,
            batch_sampler=TokenBudgetBatchSampler(self._eval_lengths(split), self.max_tokens, shuffle=False,
                                                  pad_to_multiple=self.pad_to_multiple),
            collate_fn=self._collator(),
            num_workers=self.num_workers,
            generator=self._generator(),
        )

    def _eval_lengths(self, split: str) -> list[int]:
        raise NotImplementedError

    def val_dataloader(self) -> DataLoader:
        return self.dataloader(self.val_split)

    def test_dataloader(self, split: str | None = None) -> DataLoader | list[DataLoader]:
        """One split's loader, or (for Lightning) a list over ``self.test_splits``."""
        if split is not None:
            return self.dataloader(split)
        return [self.dataloader(s) for s in self.test_splits]

    def _filter_train(self, ds, lengths: Sequence, max_len: int, name: str):
        """Apply :func:`length_filter` to the training dataset; remember the outcome."""
        self._unfiltered_train = ds
        result = length_filter(lengths, max_len, name=name)
        self.filter_report[self.train_split] = result
        return ds.select(result.kept) if result.dropped else ds

    def prepare_data(self) -> None:
        """Fetch, train the tokenizer and tokenize once (Lightning runs this on rank 0)."""
        self.setup()

    def _record_vocab_size(self, tokenizer: SubwordTokenizer) -> None:
        """Record the tokenizer's real size as the ``vocab_size`` hyperparameter.

        A training split with fewer distinct pieces than ``vocab_size`` gives a smaller
        vocabulary. The hyperparameter then says what the model was built with (the task's
        own ``vocab_size``), with a warning, rather than the unreachable request.
        """
        real = tokenizer.vocab_size
        if self.hparams.get("vocab_size") is None or real >= self.hparams["vocab_size"]:
            return
        log.warning("data.vocab_size=%d asked for, but the tokenizer has %d pieces (its training data "
                    "gives no more): recorded as vocab_size=%d", self.hparams["vocab_size"], real, real)
        self.save_hyperparameters({**self.hparams, "vocab_size": real})


def _load_or_train(path: Path, texts_fn, vocab_size: int, model: str) -> SubwordTokenizer:
    """The cached tokenizer at ``path`` when its recorded sha256 matches, else a new one
    trained and cached there (with its sha256)."""
    if check_cache(path):
        log.info("loading cached tokenizer %s", path)
        return SubwordTokenizer.load(path)
    tok = SubwordTokenizer.train(texts_fn(), vocab_size, model=model)
    tok.save(path)
    record_cache(path)
    log.info("trained tokenizer (%s, %d) saved to %s", model, tok.vocab_size, path)
    return tok


class TranslationDataModule(_TokenBudgetDataModule):
    """Multi30k (task 1) translation between any two of en/de/fr/cs.

    Args:
        src_lang, tgt_lang: language codes.
        data_dir: download / Arrow / tokenizer cache.
        mirror_root: local dataset mirror (else ``$TRANSFORMER_DATA_MIRROR``, else HTTP).
        vocab_size, joint_vocab, tokenizer_model: subword vocabulary ("bpe" | "unigram" |
            "word"), one shared by both sides when ``joint_vocab``; trained on the training
            split only.
        max_tokens: padded-token budget per batch. max_len: training pairs with either side
            longer than this many pieces are dropped (counted in ``filter_report``).
        pad_to_multiple: round batch widths up to multiples of this (8 on GPUs: few shapes for
            a compiled step, aligned matrix sizes; 1 on CPUs, where padding is only cost).
        train_files: ``{"src": path, "tgt": path}`` plain-text parallel corpus replacing the
            Multi30k training split (e.g. distilled targets); also trains the tokenizer
            unless ``tokenizer_path`` is given.
        eval_splits: splits besides train to prepare; None = val and every test split
            upstream has for the pair except test_2018_flickr (not in the mirror; name it
            explicitly to download it).
        tokenizer_path: reuse saved tokenizer(s): one ``tokenizer.json`` (both sides) or
            ``{"src": path, "tgt": path}``.
        train_subset: use only the first N training pairs.

    After ``setup()``: ``src_tokenizer``, ``tgt_tokenizer``, ``raw(split)``, ``test_splits``.
    """

    def __init__(
        self,
        src_lang: str,
        tgt_lang: str,
        data_dir: str | os.PathLike = "data/cache",
        mirror_root: str | os.PathLike | None = None,
        vocab_size: int = 8000,
        joint_vocab: bool = True,
        tokenizer_model: str = "bpe",
        max_tokens: int = 4096,
        max_len: int = 256,
        num_workers: int = 0,
        seed: int = 0,
        train_files: dict[str, str] | None = None,
        eval_splits: Sequence[str] | None = None,
        tokenizer_path: str | os.PathLike | dict[str, str] | None = None,
        train_subset: int | None = None,
        pad_to_multiple: int = 1,
    ):
        super().__init__(max_tokens, num_workers, seed)
        self.save_hyperparameters()
        self.pad_to_multiple = pad_to_multiple
        self.src_lang, self.tgt_lang = src_lang, tgt_lang
        self.data_dir = Path(data_dir)
        self.mirror_root = mirror_root
        self.vocab_size = vocab_size
        self.joint_vocab = joint_vocab
        self.tokenizer_model = tokenizer_model
        self.max_len = max_len
        self.train_files = dict(train_files) if train_files else None
        self.tokenizer_path = tokenizer_path
        self.train_subset = train_subset
        if eval_splits is None:
            eval_splits = [s for s in MULTI30K_EVAL_SPLITS if self._has_split(s)]
        else:
            for s in eval_splits:  # fail early with the registry's clear message
                multi30k_relpath(s, src_lang)
                multi30k_relpath(s, tgt_lang)
        self.eval_splits = [s for s in dict.fromkeys(eval_splits) if s != "train"]
        self.test_splits = [s for s in self.eval_splits if s != self.val_split]
        self.src_tokenizer: SubwordTokenizer | None = None
        self.tgt_tokenizer: SubwordTokenizer | None = None
        self._raw: dict[str, list[tuple[str, str]]] = {}

    def _has_split(self, split: str) -> bool:
        return all(f"multi30k/data/task1/raw/{split}.{lang}.gz" in DATASETS for lang in (self.src_lang, self.tgt_lang))

    def _split_hashes(self, split: str) -> list[str]:
        if split == "train" and self.train_files:
            return [sha256_file(self.train_files["src"]), sha256_file(self.train_files["tgt"])]
        return [DATASETS[multi30k_relpath(split, lang)].sha256 for lang in (self.src_lang, self.tgt_lang)]

    def _read(self, split: str) -> list[tuple[str, str]]:
        if split == "train" and self.train_files:
            pairs = read_parallel(self.train_files["src"], self.train_files["tgt"])
        else:
            pairs = read_multi30k(split, self.src_lang, self.tgt_lang, self.data_dir, self.mirror_root)
        if split == "train" and self.train_subset is not None:
            pairs = pairs[: self.train_subset]
        if split == "train":
            name = self.train_files["tgt"] if self.train_files else f"multi30k {self.src_lang}-{self.tgt_lang} train"
            pairs = drop_one_sided(pairs, str(name))
        return pairs

    def _tokenizers(self) -> tuple[SubwordTokenizer, SubwordTokenizer]:
        tp = self.tokenizer_path
        if tp is not None:
            if isinstance(tp, (str, os.PathLike)):
                tok = SubwordTokenizer.load(tp)
                return tok, tok
            return SubwordTokenizer.load(tp["src"]), SubwordTokenizer.load(tp["tgt"])
        train = self._raw["train"]
        key = cache_key("tok", self._split_hashes("train"), len(train), self.tokenizer_model, self.vocab_size,
                        self.joint_vocab, self.src_lang, self.tgt_lang)[:16]
        folder = self.data_dir / "tokenizers"
        stem = f"{self.src_lang}-{self.tgt_lang}-{self.tokenizer_model}{self.vocab_size}"
        if self.joint_vocab:
            tok = _load_or_train(folder / f"{stem}-joint-{key}.json",
                                 lambda: [s for s, _ in train] + [t for _, t in train], self.vocab_size, self.tokenizer_model)
            return tok, tok
        src = _load_or_train(folder / f"{stem}-src-{key}.json", lambda: [s for s, _ in train], self.vocab_size, self.tokenizer_model)
        tgt = _load_or_train(folder / f"{stem}-tgt-{key}.json", lambda: [t for _, t in train], self.vocab_size, self.tokenizer_model)
        return src, tgt

    def setup(self, stage: str | None = None) -> None:
        if self._ready:
            return
        for split in ["train", *self.eval_splits]:
            self._raw[split] = self._read(split)
        self.src_tokenizer, self.tgt_tokenizer = self._tokenizers()
        self._record_vocab_size(self.src_tokenizer)
        for split, pairs in self._raw.items():
            name = f"multi30k-{self.src_lang}-{self.tgt_lang}-{split}"
            if split == "train" and self.train_files:
                name = f"parallel-{self.src_lang}-{self.tgt_lang}-train"
            ds = tokenize_translation(
                pairs, self.src_tokenizer, self.tgt_tokenizer, self.data_dir, name, self._split_hashes(split)
            ).with_format(None)
            src_len, tgt_len = int_column(ds, "src_len"), int_column(ds, "tgt_len")
            if split == "train":
                ds = self._filter_train(ds, list(zip(src_len, tgt_len)), self.max_len, name)
                keep = self.filter_report["train"].kept
                src_len, tgt_len = [src_len[i] for i in keep], [tgt_len[i] for i in keep]
            self._datasets[split] = ds
            self._lengths[split] = [translation_length(s, t) for s, t in zip(src_len, tgt_len)]
        self._ready = True

    def _eval_lengths(self, split: str) -> list[int]:
        ds = self._unfiltered_train if split == "train" else self._datasets[split]
        return [translation_length(s, t) for s, t in zip(int_column(ds, "src_len"), int_column(ds, "tgt_len"))]

    def _collator(self) -> TranslationCollator:
        t = self.tgt_tokenizer
        return TranslationCollator(pad_id=t.pad_id, bos_id=t.bos_id, eos_id=t.eos_id,
                                   pad_to_multiple=self.pad_to_multiple)

    def raw(self, split: str) -> list[tuple[str, str]]:
        """Untokenized ``(src, tgt)`` pairs of a split in file order (BLEU references);
        for train, before the length filter."""
        return self._raw[split]

    def dataset(self, split: str):
        """The tokenized ``datasets.Dataset`` of a split (train: after the length filter)."""
        return self._datasets[split]


# CoNLL-2000's bracket tags in GUM's spelling (for ``aux_corpus``).
GUM_BRACKETS = {"(": "-LRB-", ")": "-RRB-"}


class TaggingDataModule(_TokenBudgetDataModule):
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
        if dataset not in ("gum", "conll2000"):
            raise ValueError(f"dataset must be 'gum' or 'conll2000', got {dataset!r}")
        allowed = {"gum": {"upos": "upos", "xpos": "xpos", "pos": "upos"},
                   "conll2000": {"pos": "xpos", "xpos": "xpos", "chunk": "chunk"}}[dataset]
        for key, value in (("tagset", tagset), ("aux_tagset", aux_tagset)):
            if value is not None and value not in allowed:
                raise ValueError(f"{key} {value!r} not available for {dataset}; choose from {sorted(allowed)}")
        self.dataset_name, self.tagset, self._field = dataset, tagset, allowed[tagset]
        self.aux_tagset = aux_tagset
        self._aux_field = allowed[aux_tagset] if aux_tagset is not None else None
        if self._aux_field == self._field:
            raise ValueError(f"aux_tagset {aux_tagset!r} is the same annotation as tagset {tagset!r}")
        if aux_corpus is not None and (aux_corpus != "conll2000" or dataset != "gum" or self._aux_field != "xpos"):
            raise ValueError(f"aux_corpus {aux_corpus!r}: only 'conll2000', with dataset 'gum' and aux_tagset 'xpos' "
                             "(both Penn Treebank tags)")
        if aux_corpus_upos and (aux_corpus is None or self._field != "upos"):
            raise ValueError("aux_corpus_upos needs an aux_corpus and tagset 'upos'")
        self.aux_corpus = aux_corpus
        self.aux_corpus_upos = aux_corpus_upos
        if isinstance(extra_train, (str, os.PathLike)):
            extra_train = [extra_train]
        self.extra_train = [Path(p) for p in (extra_train or [])]
        for path in self.extra_train:
            if not path.is_file():
                raise FileNotFoundError(f"data.extra_train: file not found: {path}")
        if self.extra_train and "chunk" in (self._field, self._aux_field):
            raise ValueError("data.extra_train reads CoNLL-U files, which have no chunk tags")
        self._extra_sents: list[TaggedSentence] = []
        self._aux_corpus_sents: list[TaggedSentence] = []
        self.data_dir = Path(data_dir)
        self.mirror_root = mirror_root
        self.vocab_size = vocab_size
        self.tokenizer_model = tokenizer_model
        self.max_len = max_len
        self.tokenizer_path = tokenizer_path
        self.train_subset = train_subset
        self.dev_size = dev_size
        self.test_splits = ["test"]
        self.tokenizer: SubwordTokenizer | None = None
        self.tag_vocab: list[str] = []
        self.aux_tag_vocab: list[str] = []
        self._raw: dict[str, list[TaggedSentence]] = {}

    def _read_all(self) -> None:
        if self.dataset_name == "gum":
            for split in ("train", "dev", "test"):
                self._raw[split] = read_gum(split, self.data_dir, self.mirror_root)
            self._hashes = {s: [DATASETS[gum_relpath(s)].sha256] for s in self._raw}
        else:
            full = read_conll2000("train", self.data_dir, self.mirror_root)
            if not 0 < self.dev_size < len(full):
                raise ValueError(f"dev_size {self.dev_size} must be in 1..{len(full) - 1}")
            self._raw["train"], self._raw["dev"] = full[: -self.dev_size], full[-self.dev_size :]
            self._raw["test"] = read_conll2000("test", self.data_dir, self.mirror_root)
            sha = DATASETS[CONLL2000_RELPATH].sha256
            self._hashes = {s: [sha, s, self.dev_size] for s in self._raw}
        if self.train_subset is not None:
            self._raw["train"] = self._raw["train"][: self.train_subset]
        if self.aux_corpus is not None:
            # WSJ writes round brackets as "(" ")", GUM as "-LRB-" "-RRB-": one tag each.
            self._aux_corpus_sents = [
                dataclasses.replace(s, xpos=[GUM_BRACKETS.get(t, t) for t in s.xpos])
                for s in read_conll2000("train", self.data_dir, self.mirror_root)
            ]
            self._hashes["train"] = [*self._hashes["train"], "aux", DATASETS[CONLL2000_RELPATH].sha256]
            if self.aux_corpus_upos:
                convert = UposFromXpos(self._raw["train"])
                self._aux_corpus_sents = [dataclasses.replace(s, upos=convert(s.words, s.xpos))
                                          for s in self._aux_corpus_sents]
                decided = sum(t is not None for s in self._aux_corpus_sents for t in s.upos)
                total = sum(len(s.words) for s in self._aux_corpus_sents)
                log.info("aux_corpus_upos: %d of %d %s words get a converted UPOS tag; the rest are ignored",
                         decided, total, self.aux_corpus)
                self._hashes["train"].append("upos-from-xpos")
        if self.extra_train:
            # "_" (no annotation) -> None: ignored by the loss, never a tag of the vocabulary.
            for path in self.extra_train:
                for s in read_conllu(path, missing_upos=True):
                    self._extra_sents.append(dataclasses.replace(
                        s, upos=[None if t == "_" else t for t in s.upos],
                        xpos=[None if t == "_" else t for t in s.xpos]))
                self._hashes["train"] = [*self._hashes["train"], "extra", sha256_file(path)]
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

    def setup(self, stage: str | None = None) -> None:
        if self._ready:
            return
        self._read_all()
        train = self._raw["train"]
        if self.tokenizer_path is not None:
            self.tokenizer = SubwordTokenizer.load(self.tokenizer_path)
        else:
            words = train + self._aux_corpus_sents + self._extra_sents
            key = cache_key("tagtok", self._hashes["train"], len(words), self.tokenizer_model, self.vocab_size)[:16]
            path = self.data_dir / "tokenizers" / f"{self.dataset_name}-{self.tokenizer_model}{self.vocab_size}-{key}.json"
            self.tokenizer = _load_or_train(path, lambda: iter_words(words), self.vocab_size, self.tokenizer_model)
        self._record_vocab_size(self.tokenizer)
        self.tag_vocab = self._vocab(self._field, self.tagset)
        aux = self._aux_field
        if aux is not None:
            self.aux_tag_vocab = self._vocab(aux, self.aux_tagset)
        for split, sents in self._raw.items():
            name = f"{self.dataset_name}-{self.tagset}-{split}"
            tags = [self._tags(s) for s in sents]
            if split == "train" and self._aux_corpus_sents:
                # The auxiliary corpus has no main tags (unless converted): None -> ignored by the loss.
                sents = sents + self._aux_corpus_sents
                tags = tags + [s.upos if self.aux_corpus_upos else [None] * len(s.words)
                               for s in self._aux_corpus_sents]
            if split == "train" and self._extra_sents:
                sents = sents + self._extra_sents
                tags = tags + [self._tags(s) for s in self._extra_sents]
            ds = tokenize_tagging(
                sents, tags, self.tokenizer, self.tag_vocab, self.data_dir, name, self._hashes[split],
                aux_tags=[self._tags(s, aux) for s in sents] if aux is not None else None,
                aux_vocab=self.aux_tag_vocab if aux is not None else None,
            ).with_format(None)
            lengths = int_column(ds, "n_pieces")
            if split == "train":
                ds = self._filter_train(ds, lengths, self.max_len, name)
                lengths = [lengths[i] for i in self.filter_report["train"].kept]
            self._datasets[split] = ds
            self._lengths[split] = lengths
        self._ready = True

    def _eval_lengths(self, split: str) -> list[int]:
        ds = self._unfiltered_train if split == "train" else self._datasets[split]
        return int_column(ds, "n_pieces")

    def _collator(self) -> TaggingCollator:
        return TaggingCollator(pad_id=self.tokenizer.pad_id)

    def raw(self, split: str) -> list[TaggedSentence]:
        """The split's sentences in file order (train: before the length filter)."""
        return self._raw[split]

    def dataset(self, split: str):
        """The tokenized ``datasets.Dataset`` of a split (train: after the length filter)."""
        return self._datasets[split]


__all__ = ["TaggingDataModule", "TranslationDataModule"]
