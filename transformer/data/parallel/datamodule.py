"""The translation LightningDataModule: any parallel corpus (see :mod:`transformer.data.parallel.corpus`),
from a user's files, the Hugging Face hub, or a built-in preset such as Multi30k (see
:mod:`transformer.data.core.datamodule` for what every data module does on ``setup()``).

A split is prepared in two cached steps (:mod:`transformer.data.core.cache`), neither of which
holds the corpus in memory:

1. :func:`raw_pairs_dataset` writes the pairs the corpus streams into an Arrow table
   (``src_text, tgt_text, index``), a few thousand rows at a time;
2. :func:`tokenize_translation` maps that table, batch by batch and optionally in
   ``num_proc`` worker processes, into the tokenized table (``src, tgt, index, src_len,
   tgt_len``).

A raw pairs table is read back as a sequence of ``(src, tgt)`` tuples (:class:`ArrowPairs`).
"""

from __future__ import annotations

import itertools
import logging
import os
from dataclasses import replace
from pathlib import Path
from collections.abc import Sequence
from typing import Annotated, Any, Callable, Iterable, Iterator

import datasets
import numpy as np
import pyarrow as pa
from datasets.arrow_writer import ArrowWriter

from transformer.data.core.batching import TranslationCollator
from transformer.data.core.cache import (ID_LIST, TOKENIZER_TRAIN_ROWS, WRITE_ROWS, cache_key, check_cache,
                                         column_arrays, default_num_proc, ids_column, iter_text_batches,
                                         list_column_ids, map_cached, publish_cache)
from transformer.data.core.datamodule import TokenBudgetDataModule, load_or_train_tokenizer
from transformer.data.core.tokenizer import SubwordTokenizer
from transformer.data.parallel.corpus import (MULTI30K, ParallelCorpus, available, check_parallel, config_sources,
                                              make_corpus, split_names)
from transformer.data.parallel.languages import CODES, Languages, add_tags, direction_name, distill_train
from transformer.data.parallel.multilingual import (TaggedSource, describe_mix, direction_corpus, sample_counts,
                                                    sample_indices)
from transformer.files import inside, write_text
from transformer.ranges import Range

log = logging.getLogger(__name__)

RAW_PAIR_FEATURES = datasets.Features(
    {"src_text": datasets.Value("string"), "tgt_text": datasets.Value("string"), "index": datasets.Value("int64")}
)
TRANSLATION_FEATURES = datasets.Features(
    {
        "src": ID_LIST,
        "tgt": ID_LIST,
        "index": datasets.Value("int64"),
        "src_len": datasets.Value("int32"),
        "tgt_len": datasets.Value("int32"),
    }
)


def _one_sided_warning(label: str, lines: list[int], n: int) -> str:
    shown = ", ".join(map(str, lines)) + (" ..." if n > len(lines) else "")
    return f"{label}: {n} pair(s) with one side empty left out of training (line {shown})"


def _write_pairs(pairs: Iterable[tuple[str, str]], path: Path, drop_one_sided: bool) -> tuple[list[int], int]:
    """Stream ``pairs`` into the Arrow file ``path``, ``WRITE_ROWS`` at a time; with
    ``drop_one_sided``, pairs with exactly one empty (or whitespace) side are left out.
    Returns the first ten left-out line numbers (1-based positions in ``pairs``) and how many."""
    dropped: list[int] = []
    n_dropped = n_kept = 0
    src: list[str] = []
    tgt: list[str] = []
    with ArrowWriter(features=RAW_PAIR_FEATURES, path=str(path), writer_batch_size=WRITE_ROWS) as writer:
        def flush() -> None:
            nonlocal n_kept
            index = pa.array(np.arange(n_kept, n_kept + len(src), dtype=np.int64))
            writer.write_table(pa.table({"src_text": pa.array(src, pa.string()), "tgt_text": pa.array(tgt, pa.string()),
                                         "index": index}))
            n_kept += len(src)
            src.clear()
            tgt.clear()

        for line, (s, t) in enumerate(pairs, 1):
            if drop_one_sided and bool(s.strip()) != bool(t.strip()):
                n_dropped += 1
                if len(dropped) < 10:
                    dropped.append(line)
                continue
            src.append(s)
            tgt.append(t)
            if len(src) == WRITE_ROWS:
                flush()
        if src or not n_kept:
            flush()
        writer.finalize()
    return dropped, n_dropped


def raw_pairs_dataset(
    pairs_fn: Callable[[], Iterable[tuple[str, str]]],
    cache_dir: str | os.PathLike,
    name: str,
    key: Any,
    drop_one_sided: str | None = None,
) -> datasets.Dataset:
    """A split's sentence pairs as a memory-mapped Arrow table with columns ``src_text,
    tgt_text`` and ``index`` (position in the table), cached under
    ``cache_dir/arrow/{name}-raw-{hash}.arrow``.

    ``pairs_fn()`` streams the ``(src, tgt)`` pairs; it is called only when the cache has no
    valid table for ``key``, which must identify the text (the files' sha256, a subset
    size, ...). The pairs are written as they come, so memory does not grow with the corpus.

    ``drop_one_sided``: a label (the file or corpus name) to leave out pairs with one side
    empty and the other not, counted in a warning naming their lines; such a pair teaches
    the model to translate a sentence into nothing. The warning is repeated whenever the
    cached table is reused. None keeps every pair (evaluation splits).
    """
    full = cache_key("pairs", key, drop_one_sided is not None)
    path = inside(Path(cache_dir) / "arrow", f"{name}-raw-{full[:16]}.arrow")
    note = path.with_name(path.name + ".dropped")
    if not check_cache(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            lines, n = _write_pairs(pairs_fn(), tmp, drop_one_sided is not None)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        note.unlink(missing_ok=True)
        if n:
            write_text(note, _one_sided_warning(drop_one_sided, lines, n) + "\n")
        publish_cache(tmp, path)
    if note.is_file():
        log.warning("%s", note.read_text(encoding="utf-8").strip())
    return datasets.Dataset.from_file(str(path))


def tokenize_translation(
    raw: datasets.Dataset,
    src_tokenizer: SubwordTokenizer,
    tgt_tokenizer: SubwordTokenizer,
    cache_dir: str | os.PathLike,
    name: str,
    key: Any,
    num_proc: int | None = None,
    prefixes: tuple[list[int], list[int]] = ([], []),
) -> datasets.Dataset:
    """Dataset with columns ``src, tgt`` (piece ids, no specials), ``index`` (the raw row's
    ``index``), ``src_len, tgt_len``; cached under ``cache_dir/arrow/{name}-{hash}.arrow``
    (``..._0000r_of_0000n.arrow`` per worker with ``num_proc=n``).

    ``raw`` has the columns ``src_text, tgt_text, index`` (:func:`raw_pairs_dataset`);
    ``key`` must identify its text. It is read and written in batches, in ``num_proc``
    worker processes (None: :func:`default_num_proc`); the result is memory-mapped. ``prefixes``:
    ids in front of every source and every target (a pretrained family's language codes).
    """
    key = cache_key("translation", key, len(raw), src_tokenizer.content_hash, tgt_tokenizer.content_hash,
                    *([prefixes] if any(prefixes) else []))
    src_prefix, tgt_prefix = prefixes
    cache_file = inside(Path(cache_dir) / "arrow", f"{name}-{key[:16]}.arrow")

    def fn(batch: pa.Table) -> pa.Table:
        src, src_len = ids_column([src_prefix + ids for ids in
                                   src_tokenizer.encode_batch(batch.column("src_text").to_pylist())])
        tgt, tgt_len = ids_column([tgt_prefix + ids for ids in
                                   tgt_tokenizer.encode_batch(batch.column("tgt_text").to_pylist())])
        return pa.table({"src": src, "tgt": tgt, "index": batch.column("index"),
                         "src_len": pa.array(src_len), "tgt_len": pa.array(tgt_len)})

    n = default_num_proc(len(raw)) if num_proc is None else num_proc
    ds = map_cached(raw.with_format("arrow"), fn, cache_file, key, TRANSLATION_FEATURES,
                     ["src_text", "tgt_text"], n)
    return ds.with_format(None)


def load_tokenizer(path: str | os.PathLike):
    """A saved tokenizer (a file or its folder's ``tokenizer.json``): a ``tokenizer.json``, or the
    JSON of a SentencePiece tokenizer a checkpoint carries (a Marian model's, which training
    started from ``init_from=hf:<folder>`` reads its pairs with)."""
    from transformer.data.core.tokenizer import tokenizer_from_str

    path = Path(path)
    if path.is_dir():
        path = path / "tokenizer.json"
    return tokenizer_from_str(path.read_text(encoding="utf-8"))


class ArrowPairs(Sequence):
    """A raw pairs table (:func:`raw_pairs_dataset`) seen as a sequence of ``(src, tgt)``
    tuples, read from disk on access: ``len``, indexing (an int or 0-d tensor) and iteration
    in batches, without a list of the corpus in memory."""

    def __init__(self, ds: datasets.Dataset):
        self.dataset = ds

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        row = self.dataset[int(i)]
        return row["src_text"], row["tgt_text"]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        texts = iter_text_batches(self.dataset, ["src_text", "tgt_text"])
        for src in texts:
            yield from zip(src, next(texts))


def check_translation(d: dict, where: str, complete: bool = False) -> None:
    """A translation data config's checks: its languages (:meth:`Languages.of_config
    <transformer.data.parallel.languages.Languages.of_config>`: with ``pairs``, several directions'),
    and one pair's corpus (:func:`~transformer.data.parallel.corpus.check_parallel`)."""
    if not Languages.of_config(d, where).multilingual:
        check_parallel(d, where, complete)


MULTI30K_EVAL_SPLITS = tuple(s for s in MULTI30K["sources"] if s != "train")


def _first(pairs: Iterator[tuple[str, str]], n: int) -> Iterator[tuple[str, str]]:
    """The first ``n`` pairs of a stream, which is still read to its end (the rest dropped as
    it comes, so memory stays flat): a shorter partner file or a corrupt ``.gz`` past the
    subset is an error now, not in the full run that follows a ``debug=fast`` one."""
    for i, pair in enumerate(pairs):
        if i < n:
            yield pair


class TranslationDataModule(TokenBudgetDataModule):
    """Translation data: a parallel corpus's splits, tokenized and batched by token budget.

    Args:
        src_lang, tgt_lang: language codes (any; they pick files, columns and BLEU's tokenizer).
        train, valid, test: where each split comes from (a source, see
            :mod:`transformer.data.parallel.corpus`: ``path.{lang}``, ``{src: path, tgt: path}``, one
            TSV/CSV/JSON-lines file, or a hub split name).
        tests: more named test splits, ``{name: source}``.
        valid_name: the validation split's name (``val`` for Multi30k).
        format, columns, header: how tables are read (``format`` tsv | csv | jsonl, else the
            extension; ``columns`` by language code or ``src``/``tgt``; ``header``: the first
            row names the columns).
        holdout, holdout_seed: splits carved from the training source, ``{name: count or
            fraction}``, seeded, no source sentence in two splits (:mod:`transformer.data.core.holdout`).
        hub: ``{name, config}`` of a Hugging Face dataset; sources are then its split names.
        bleu_tokenize: sacreBLEU tokenizer for this corpus's scores (None: from the target
            language, :func:`transformer.evaluation.translation.bleu_tokenizer`).
        corpus_name: names cache files and the dataset in checkpoints; ``multi30k`` without
            ``train`` is the Multi30k preset (:data:`transformer.data.parallel.corpus.MULTI30K`).
        data_dir: download / Arrow / tokenizer cache.
        mirror_root: local dataset mirror (else ``$TRANSFORMER_DATA_MIRROR``, else HTTP).
        vocab_size, joint_vocab, tokenizer_model: subword vocabulary ("bpe" | "unigram" |
            "word"), one shared by both sides when ``joint_vocab``; trained on the training
            split only.
        max_tokens: padded-token budget per batch. max_len: training pairs with either side
            longer than this many pieces are dropped (counted in ``filter_report``).
        pad_to_multiple: round batch widths up to multiples of this (8 on GPUs, 1 on CPUs).
        train_files: ``{"src": path, "tgt": path}`` replacing the training source (e.g.
            distilled targets); also trains the tokenizer unless ``tokenizer_path`` is given.
        eval_splits: splits besides train to prepare; None = every split of the corpus whose
            files exist for the pair.
        distill_dir: the ``output_dir`` of ``transformer-distill`` (sequence-level knowledge
            distillation, Kim & Rush 2016): its ``train.<lang>`` files are the training split and
            its ``tokenizer.json`` the tokenizer, unless ``train_files``/``tokenizer_path`` say
            otherwise; validation and test keep their references. With ``pairs``: a multilingual
            teacher's, one ``train.<lang>`` per language of the directions.
        tokenizer_path: reuse saved tokenizer(s): one ``tokenizer.json`` (both sides) or
            ``{"src": path, "tgt": path}``.
        train_subset: use only the first N training pairs (of each direction).
        pairs: several directions in one model (``["en-de", "en-fr"]``, or ``"all"``: every
            direction between the languages the training files hold); each source is read
            with its target language's tag in front (:mod:`transformer.data.parallel.languages`),
            one joint tokenizer learns every language (each language's share of its training
            text the same) plus the tags, and ``src_lang``/``tgt_lang`` are ignored. None: one pair.
        temperature: how training mixes the directions, ``p_i ∝ n_i^(1/T)``
            (:mod:`transformer.data.parallel.multilingual`); 1 keeps the corpus proportions.
        tag_side: where a multilingual model reads its target-language tag: ``source``, in
            front of the source (Johnson et al. 2017), or ``decoder``, as the decoder's first
            token in place of BOS (as mBART); see :mod:`transformer.data.parallel.languages`.
        language_codes, start_id: set by training started from an M2M100, NLLB or mBART-50 model
            (``init_from``): each language's code, which frames the pair's source and target as
            the family does, and the decoder's start token (its EOS).

    After ``setup()``: ``src_tokenizer``, ``tgt_tokenizer``, ``raw(split)``, ``test_splits``;
    ``corpus`` (the dictionary checkpoints record) from construction on.
    """

    check_config = staticmethod(check_translation)  # its config's checks, before any file is read
    src_tokenizer: SubwordTokenizer | None = None  # both set up by setup()
    tgt_tokenizer: SubwordTokenizer | None = None
    _mix_counts: tuple[list[int], list[int]] | None = None  # the directions' sizes and per-epoch counts, by setup()

    def __init__(
        self,
        src_lang: str | None,
        tgt_lang: str | None,
        data_dir: str | os.PathLike = "data/cache",
        mirror_root: str | os.PathLike | None = None,
        vocab_size: Annotated[int, Range(1, 2**24)] = 8000,
        joint_vocab: bool = True,
        tokenizer_model: str = "bpe",
        max_tokens: Annotated[int, Range(1, 2**31)] = 4096,
        max_len: Annotated[int, Range(1, 2**20)] = 256,
        num_workers: Annotated[int, Range(0, 1024)] = 0,
        seed: int = 0,
        train_files: dict[str, str] | None = None,
        eval_splits: Sequence[str] | None = None,
        tokenizer_path: str | os.PathLike | dict[str, str] | None = None,
        train_subset: Annotated[int | None, Range(1, 2**40)] = None,
        pad_to_multiple: Annotated[int, Range(1, 2**16)] = 1,
        train: Any = None,
        valid: Any = None,
        test: Any = None,
        tests: dict[str, Any] | None = None,
        valid_name: str = "valid",
        format: str | None = None,
        columns: dict | None = None,
        header: bool = False,
        holdout: dict[str, float | int] | None = None,
        holdout_seed: int = 0,
        hub: dict | None = None,
        bleu_tokenize: str | None = None,
        corpus_name: str = "multi30k",
        distill_dir: str | None = None,
        pairs: Any = None, temperature: Annotated[float, Range(0, 1e6)] = 1.0,
        tag_side: str = "source",
        language_codes: dict[str, str] | None = None, start_id: Annotated[int | None, Range(0, 2**24)] = None,
    ):
        super().__init__(max_tokens, num_workers, seed)
        self.save_hyperparameters()
        self.languages = Languages.of_config(dict(self.hparams))  # with pairs: checked, the files' languages too
        self.directions = list(self.languages.directions) if self.languages.multilingual else None
        self.temperature, self.pad_to_multiple, self.max_len = float(temperature), pad_to_multiple, max_len
        self.src_lang, self.tgt_lang, self.start_id = src_lang, tgt_lang, start_id
        self.data_dir, self.mirror_root = Path(data_dir), mirror_root
        self.vocab_size, self.joint_vocab, self.tokenizer_model = vocab_size, joint_vocab, tokenizer_model
        if distill_dir and not self.directions:  # transformer-distill's output: its translations and the teacher's tokenizer
            train_files = train_files or {"src": f"{distill_dir}/train.{src_lang}", "tgt": f"{distill_dir}/train.{tgt_lang}"}
        if distill_dir:
            tokenizer_path = tokenizer_path or f"{distill_dir}/tokenizer.json"
        self.train_files = dict(train_files) if train_files else None
        self.tokenizer_path, self.train_subset = tokenizer_path, train_subset
        sources, valid_name = config_sources(corpus_name, train, valid, test, tests, valid_name, hub, self.train_files)
        if distill_dir and self.directions:  # a multilingual teacher's: train.<lang>, one file per language
            sources["train"] = distill_train(distill_dir)
        self.val_split = valid_name
        corpus_args = dict(name=corpus_name, valid_name=valid_name, format=format, columns=columns, header=header,
                           holdout=holdout, holdout_seed=holdout_seed, hub=hub, bleu_tokenize=bleu_tokenize)
        (self._set_directions if self.directions else self._set_pair)(sources, corpus_args, eval_splits)
        self._raw: dict[str, datasets.Dataset] = {}
        self._reader: ParallelCorpus | None = None

    def _choose_eval_splits(self, eval_splits: Sequence[str] | None) -> list[str]:
        names = split_names(self.corpus)
        if eval_splits is None:
            eval_splits = [s for s in names if available(self.corpus, s)]
        for s in eval_splits:
            if s not in names:
                raise ValueError(f"split {s!r} unknown; the corpus has {names}")
            if not available(self.corpus, s):
                raise ValueError(f"split {s!r} is not published for {self.src_lang}-{self.tgt_lang}")
        return [s for s in dict.fromkeys(eval_splits) if s != "train"]

    def _set_pair(self, sources: dict, corpus_args: dict, eval_splits: Sequence[str] | None) -> None:
        """The corpus and splits of one language pair."""
        self.corpus = make_corpus(self.src_lang, self.tgt_lang, sources, **corpus_args)
        codes = self.hparams.get("language_codes")
        if codes:  # a pretrained family's (init_from): each side framed with its language's code
            for key, lang in (("src_lang", self.src_lang), ("tgt_lang", self.tgt_lang)):
                if lang not in codes:
                    raise ValueError(f"data.{key}={lang}: not a language of the pretrained model (its languages: "
                                     f"{', '.join(sorted(codes))})")
            self.languages = replace(self.languages, tag_side=CODES,
                                     codes={lang: codes[lang] for lang in (self.src_lang, self.tgt_lang)})
            self.corpus.update(tag_side=CODES, language_codes=dict(self.languages.codes))
        self.eval_splits = self._choose_eval_splits(eval_splits)
        self.test_splits = [s for s in self.eval_splits if s != self.val_split]

    def _set_directions(self, sources: dict, corpus_args: dict, eval_splits: Sequence[str] | None) -> None:
        """The corpus, languages and splits of a multilingual data module: the languages it
        records are the single source (target) language, or :data:`~transformer.data.parallel.languages.MULTI`."""
        self.src_lang, self.tgt_lang = self.languages.src_lang, self.languages.tgt_lang
        # what the model records too (Lightning refuses two values of one hyperparameter)
        self.save_hyperparameters({**self.hparams, "src_lang": self.src_lang, "tgt_lang": self.tgt_lang})
        self.corpus = {**make_corpus(None, None, sources, **corpus_args), "src_lang": self.src_lang,
                       "tgt_lang": self.tgt_lang, "directions": [direction_name(d) for d in self.directions]}
        if self.languages.tag_to_decoder:  # recorded where it differs from the default
            self.corpus["tag_side"] = self.languages.tag_side
        self.eval_splits = self._choose_direction_splits(eval_splits)
        self.test_splits = [f"{s}.{direction_name(d)}" for s in self.eval_splits if s != self.val_split
                            for d in self.directions if available(direction_corpus(self.corpus, d), s)]

    def _choose_direction_splits(self, eval_splits: Sequence[str] | None) -> list[str]:
        """The evaluation splits of a multilingual corpus: those some direction has (Multi30k
        has no 2017 test sets in Czech); validation must exist for every direction."""
        names = split_names(self.corpus)
        corpora = [direction_corpus(self.corpus, d) for d in self.directions]
        if eval_splits is None:
            eval_splits = [s for s in names if any(available(c, s) for c in corpora)]
        for s in eval_splits:
            if s not in names:
                raise ValueError(f"split {s!r} unknown; the corpus has {names}")
        for c in corpora:
            if not available(c, self.val_split):
                raise ValueError(f"split {self.val_split!r} is not published for {c['src_lang']}-{c['tgt_lang']}")
        return [s for s in dict.fromkeys(eval_splits) if s != "train"]

    @property
    def reader(self) -> ParallelCorpus:
        """The corpus's splits as streams (:class:`~transformer.data.parallel.corpus.ParallelCorpus`)."""
        if self._reader is None:
            self._reader = ParallelCorpus(self.corpus, self.data_dir, self.mirror_root)
        return self._reader

    def _split_hashes(self, split: str) -> list[str]:
        subset = [f"subset={self.train_subset}"] if split == "train" and self.train_subset is not None else []
        return [*self.reader.fingerprint(split), *subset]

    def _stream(self, split: str) -> Iterator[tuple[str, str]]:
        pairs = self.reader.stream(split)
        if split == "train" and self.train_subset is not None:
            # a hub dataset was checked whole when it was loaded; its rows need no second pass
            subset = itertools.islice if self.corpus.get("hub") else _first
            pairs = subset(pairs, self.train_subset)
        return pairs

    def _raw_table(self, split: str) -> datasets.Dataset:
        """A split's raw pairs as a cached Arrow table, written as they are read; training
        leaves out pairs with one side empty (counted in a warning naming their lines)."""
        label = f"{self.corpus['name']} {self.src_lang}-{self.tgt_lang} train" if split == "train" else None
        return raw_pairs_dataset(lambda: self._stream(split), self.data_dir, self._name(split),
                                 self._split_hashes(split), drop_one_sided=label)

    def _name(self, split: str) -> str:
        return f"{self.corpus['name']}-{self.src_lang}-{self.tgt_lang}-{split}"

    def _tokenizers(self) -> tuple[SubwordTokenizer, SubwordTokenizer]:
        tp = self.tokenizer_path
        if tp is not None:
            if isinstance(tp, (str, os.PathLike)):
                tok = load_tokenizer(tp)
                return tok, tok
            return load_tokenizer(tp["src"]), load_tokenizer(tp["tgt"])
        train = self._raw["train"]
        key = cache_key("tok", self._split_hashes("train"), len(train), self.tokenizer_model, self.vocab_size,
                        self.joint_vocab, self.src_lang, self.tgt_lang, min(len(train), TOKENIZER_TRAIN_ROWS))[:16]
        folder = self.data_dir / "tokenizers"
        stem = f"{self.src_lang}-{self.tgt_lang}-{self.tokenizer_model}{self.vocab_size}"
        n, model = self.vocab_size, self.tokenizer_model

        def texts(*columns: str):  # streamed from the Arrow table in batches (a sample of a large corpus)
            return lambda: iter_text_batches(train, columns, max_rows=TOKENIZER_TRAIN_ROWS)

        if self.joint_vocab:
            tok = load_or_train_tokenizer(inside(folder, f"{stem}-joint-{key}.json"), texts("src_text", "tgt_text"), n, model)
            return tok, tok
        src = load_or_train_tokenizer(inside(folder, f"{stem}-src-{key}.json"), texts("src_text"), n, model)
        tgt = load_or_train_tokenizer(inside(folder, f"{stem}-tgt-{key}.json"), texts("tgt_text"), n, model)
        return src, tgt

    def _build(self) -> None:
        if self.directions:
            return self._build_multilingual()
        for split in ["train", *self.eval_splits]:
            self._raw[split] = self._raw_table(split)
        self.src_tokenizer, self.tgt_tokenizer = self._tokenizers()
        self._record_vocab_size(self.src_tokenizer)
        for split, raw in self._raw.items():
            name = self._name(split)
            ds = tokenize_translation(raw, self.src_tokenizer, self.tgt_tokenizer, self.data_dir, name,
                                      self._split_hashes(split), prefixes=self._code_prefixes())
            sides = np.stack(column_arrays(ds, ["src_len", "tgt_len"]), axis=1)  # (N, 2)
            self._add_split(split, ds, sides.max(axis=1).astype(np.int64) + 1, sides, name)

    def _code_prefixes(self) -> tuple[list[int], list[int]]:
        """The ids in front of each source and target: a pretrained family's language codes
        (``language_codes``: its source's, and its target's, which the decoder predicts first
        after the start, as ``transformers`` trains it); none otherwise."""
        codes = self.languages.codes if self.languages.coded else None
        if not codes:
            return [], []
        out = []
        for tok, lang in ((self.src_tokenizer, self.src_lang), (self.tgt_tokenizer, self.tgt_lang)):
            i = tok.token_to_id(codes[lang])
            if i is None:
                raise ValueError(f"the pretrained tokenizer has no {codes[lang]} (the code of {lang})")
            out.append([i])
        return out[0], out[1]

    # ------------------------------------------------------------------ several directions

    def _direction_raw(self, direction, split: str) -> tuple[datasets.Dataset, list[str]]:
        """One direction's raw pairs of a split, cached as for one pair, and what identifies them."""
        corpus = direction_corpus(self.corpus, direction)
        reader = ParallelCorpus(corpus, self.data_dir, self.mirror_root)
        subset = self.train_subset if split == "train" else None

        def stream():
            pairs = reader.stream(split)
            return _first(pairs, subset) if subset is not None else pairs

        hashes = [*reader.fingerprint(split), *([f"subset={subset}"] if subset is not None else [])]
        label = f"{self.corpus['name']} {direction_name(direction)} train" if split == "train" else None
        return raw_pairs_dataset(stream, self.data_dir, self._direction_name(direction, split), hashes,
                                 drop_one_sided=label), hashes

    def _direction_name(self, direction, split: str) -> str:
        return f"{self.corpus['name']}-{direction_name(direction)}-{split}"

    def _joint_tokenizer(self, train: dict) -> SubwordTokenizer:
        """One tokenizer for every language of the directions, plus the target tags. Each
        language gives the same number of training sentences (the smallest language's, within
        the trainer's sample), so a language that is the source of every direction does not
        take the vocabulary over."""
        targets = [t for _, t in self.directions]
        if self.tokenizer_path is not None:
            tp = self.tokenizer_path
            return add_tags(load_tokenizer(tp if isinstance(tp, (str, os.PathLike)) else tp["src"]), targets)
        texts: dict[str, tuple[datasets.Dataset, str]] = {}  # language -> (a table holding it, its column)
        for d, (table, _) in train.items():
            texts.setdefault(d[0], (table, "src_text"))
            texts.setdefault(d[1], (table, "tgt_text"))
        per_language = min(min(len(t) for t, _ in texts.values()), max(TOKENIZER_TRAIN_ROWS // len(texts), 1))
        key = cache_key("tok-multi", [h for _, h in train.values()], sorted(texts), per_language, self.tokenizer_model,
                        self.vocab_size)[:16]
        langs = "-".join(sorted(texts))

        def balanced():
            for lang in sorted(texts):
                table, column = texts[lang]
                yield from iter_text_batches(table, [column], max_rows=per_language)

        path = inside(self.data_dir / "tokenizers", f"{langs}-{self.tokenizer_model}{self.vocab_size}-joint-{key}.json")
        return add_tags(load_or_train_tokenizer(path, balanced, self.vocab_size, self.tokenizer_model), targets)

    def _build_multilingual(self) -> None:
        """Every direction's splits read and tokenized (each source tagged with its target
        language); training draws the directions by temperature, validation joins them, and
        each direction's evaluation splits are kept apart as ``<split>.<src>-<tgt>``."""
        train = {d: self._direction_raw(d, "train") for d in self.directions}
        tok = self._joint_tokenizer(train)
        self.src_tokenizer = self.tgt_tokenizer = tok
        self._record_vocab_size(tok)
        if tok.vocab_size > self.hparams["vocab_size"]:  # the pieces asked for, plus the target tags
            self.save_hyperparameters({**self.hparams, "vocab_size": tok.vocab_size})

        def tokenized(d, split, raw, hashes):
            return tokenize_translation(raw, TaggedSource(tok, d[1]), tok, self.data_dir,
                                        self._direction_name(d, split), hashes)

        tables = {d: tokenized(d, "train", *train[d]) for d in self.directions}
        sizes = [len(tables[d]) for d in self.directions]
        counts = sample_counts(sizes, self.temperature)
        log.info("data.pairs (temperature %g): %s", self.temperature, describe_mix(self.directions, sizes, counts))
        self.mix = {direction_name(d): {"pairs": n, "per_epoch": c} for d, n, c in zip(self.directions, sizes, counts)}
        self._raw["train"] = datasets.concatenate_datasets([raw for raw, _ in train.values()])
        # Every direction's pairs once; each epoch draws its own temperature sample of them (_epoch_draw).
        joined = datasets.concatenate_datasets([tables[d] for d in self.directions])
        sides = np.stack(column_arrays(joined, ["src_len", "tgt_len"]), axis=1)  # (N, 2)
        self._add_split("train", joined, sides.max(axis=1).astype(np.int64) + 1, sides, self.corpus["name"] + "-train")
        self._mix_counts = (sizes, counts) if counts != sizes else None
        for split in self.eval_splits:
            parts, raws = [], []
            for i, d in enumerate(self.directions):
                if not available(direction_corpus(self.corpus, d), split):
                    continue
                raw, hashes = self._direction_raw(d, split)
                ds = tokenized(d, split, raw, hashes)
                name = f"{split}.{direction_name(d)}"
                self._raw[name] = raw
                self._add_split(name, ds, self._lengths_of(ds), None, name)
                # the joined validation split says which direction each pair is (validation BLEU per direction)
                parts.append(ds.add_column("direction", np.full(len(ds), i, dtype=np.int64)))
                raws.append(raw)
            if split == self.val_split:  # training validates on every direction at once
                joined = datasets.concatenate_datasets(parts)
                self._raw[split] = datasets.concatenate_datasets(raws)
                self._add_split(split, joined, self._lengths_of(joined), None, split)

    def _epoch_draw(self):
        """Training's temperature sample of the directions, drawn anew each epoch (seeded by
        ``(seed, epoch)``, so a run is reproducible): direction ``i`` gives ``per_epoch`` of its
        pairs, every pair as often as that count allows and the remainder drawn at random
        (:func:`~transformer.data.parallel.multilingual.sample_indices`), so an up-sampled small
        direction repeats a different part of itself each epoch and a down-sampled large one
        shows a different part. Pairs the length filter dropped are left out of the draw. None
        when every direction gives each pair once (``data.temperature=1``, or equal sizes)."""
        if self._mix_counts is None:
            return None
        sizes, counts = self._mix_counts
        offsets = np.cumsum([0, *sizes[:-1]])
        kept = self.filter_report[self.train_split].kept  # the joined table's rows after the length filter

        def draw(epoch: int) -> np.ndarray:
            rng = np.random.default_rng([self.seed, epoch])
            rows = np.concatenate([o + sample_indices(n, c, rng) for o, n, c in zip(offsets, sizes, counts) if n])
            at = np.searchsorted(kept, rows).clip(max=max(len(kept) - 1, 0))  # a row's position after the filter
            return at[kept[at] == rows] if len(kept) else at[:0]

        return draw

    def _lengths_of(self, ds) -> np.ndarray:
        """Each pair's padded width (:func:`~transformer.data.core.batching.translation_length`), as a column."""
        src_len, tgt_len = column_arrays(ds, ["src_len", "tgt_len"])
        return np.maximum(src_len, tgt_len).astype(np.int64) + 1

    def _collator(self) -> TranslationCollator:
        t = self.tgt_tokenizer
        bos = t.bos_id if self.start_id is None else self.start_id  # a pretrained family's decoder start
        return TranslationCollator(pad_id=t.pad_id, bos_id=bos, eos_id=t.eos_id,
                                   pad_to_multiple=self.pad_to_multiple,
                                   tag_to_decoder=self.languages.tag_to_decoder)

    def target_ids(self, split: str = "train") -> list[int]:
        """Every distinct target token id of a tokenized split, sorted (the ids a model trained
        on it learns to produce; a CTC model's output shortlist)."""
        return list_column_ids(self.dataset(split), "tgt").tolist()

    def raw(self, split: str) -> ArrowPairs:
        """Untokenized ``(src, tgt)`` pairs of a split in file order (BLEU references), read
        from the split's Arrow table; for train, before the length filter."""
        return ArrowPairs(self._raw[split])


__all__ = ["MULTI30K_EVAL_SPLITS", "RAW_PAIR_FEATURES", "TRANSLATION_FEATURES", "ArrowPairs", "TranslationDataModule",
           "check_translation",
           "load_tokenizer", "raw_pairs_dataset", "tokenize_translation"]
