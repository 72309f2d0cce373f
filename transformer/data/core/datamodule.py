"""What the LightningDataModules share: token-budget dataloaders, the resumable training
loader, the length filter's bookkeeping and the cached tokenizer.

On ``setup()`` a data module reads the raw splits (fetching from cache, mirror or upstream),
trains or loads the tokenizer (cached as ``tokenizer.json`` under ``data_dir/tokenizers/``
keyed by training data and options, and verified by the sha256 recorded beside it),
tokenizes every split into a cached Arrow dataset (:mod:`transformer.data.core.cache`), and
length-filters the training split only (dropped examples are logged and kept in
``filter_report``; evaluation splits are never filtered, so references stay complete).
Lengths and the filter work on numpy columns: besides the memory-mapped tables, a data
module holds a few bytes per example.

Dataloaders: ``train_dataloader`` uses a shuffled :class:`TokenBudgetBatchSampler` sharded
by the trainer's rank/world size (so DDP needs ``Trainer(use_distributed_sampler=False)``);
``dataloader(split)`` gives length-sorted batches of a whole split on every rank, each batch
carrying ``index`` so outputs can be put back in split order
(:func:`transformer.data.core.batching.restore_order`).

Before any of that, training checks the composed ``data`` node as a whole
(:func:`check_data_config`, before any file is read or the run folder exists): the tokenizer
settings every kind shares (:func:`transformer.data.core.tokenizer.check_tokenizer`), then the
checks the node's data module names as its ``check_config``, kept in each kind's ``corpus.py``
with the corpus it describes (:func:`transformer.data.parallel.corpus.check_parallel`,
:func:`transformer.data.labelled.corpus.check_labelled`, :func:`transformer.data.text.corpus.check_text`,
:func:`transformer.data.tagged.corpus.check_tagged`). What a data module would only find out
while preparing (or never: a column map that misses a language trains on one language twice)
is a ``ValueError`` naming the key, printed by the command as one ``error:`` line. A config
without a training source is a preset waiting for the user's files: it is checked for what it
says, and asked for the files it lacks only as a run's config (``complete=True``).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import lightning as L
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from torch.utils.data import DataLoader

from transformer.data.core.batching import TokenBudgetBatchSampler
from transformer.data.core.cache import cache_lock, check_cache, publish_cache
from transformer.data.core.tokenizer import SubwordTokenizer, check_tokenizer
from transformer.ranges import Range

log = logging.getLogger(__name__)


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
        if batches >= self.batch_sampler.batches_in(epoch):  # saved after the epoch's last batch
            epoch, batches = epoch + 1, 0
        self.batch_sampler.resume_at(epoch, batches)


class TokenBudgetDataModule(L.LightningDataModule):
    """Shared dataloader plumbing over ``self._datasets[split]`` and ``self._lengths[split]``
    (filled by ``_add_split`` in a subclass's ``setup``). A subclass sets ``max_len`` (the
    training length filter) and gives ``_collator()`` and ``_lengths_of(dataset)``."""

    train_split = "train"
    val_split = "val"
    # The checks of a config for this data module, ``(config dict, where, complete=...) -> None``,
    # run by check_data_config before any file is read (each kind's corpus.py).
    check_config = None
    # Whether ``vocab_size`` was the user's own choice (the command line sets it): a smaller
    # real vocabulary is then worth a warning, not when a recipe's generous default was used.
    vocab_size_chosen = True
    # The most pieces the model reads (a learned position table's rows; None: any length). A data
    # module that takes it cuts longer rows of every split in its collator, named in a warning.
    max_positions: int | None = None

    def __init__(self, max_tokens: Annotated[int, Range(1, 2**31)], num_workers: Annotated[int, Range(0, 1024)],
                 seed: int):
        super().__init__()
        self.max_tokens = max_tokens
        self.pad_to_multiple = 1  # batch widths rounded up to multiples of this (see batching.py)
        self.num_workers = num_workers
        self.seed = seed
        self._datasets: dict[str, Any] = {}
        self._lengths: dict[str, np.ndarray] = {}
        self.filter_report: dict[str, FilterResult] = {}
        self._ready = False

    def setup(self, stage: str | None = None) -> None:
        """Read, tokenize and cache every split once (:meth:`_build`), holding the cache
        folder's lock: runs sharing a cache never build the same file at once."""
        if self._ready:
            return
        with cache_lock(self.data_dir):
            self._build()
        self._ready = True

    def _build(self) -> None:
        raise NotImplementedError

    @property
    def splits(self) -> list[str]:
        """Every split available after ``setup()``."""
        return list(self._datasets)

    def _collator(self):
        raise NotImplementedError

    def dataset(self, split: str):
        """The tokenized ``datasets.Dataset`` of a split (train: after the length filter)."""
        return self._datasets[split]

    def _rank_world(self) -> tuple[int, int]:
        trainer = self.trainer
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
            pad_to_multiple=self.pad_to_multiple, draw=self._epoch_draw(),
        )
        if self.trainer is not None:
            # A loader made again at an epoch's start (``draws_each_epoch``) counts that epoch's
            # batches: Lightning reads its length before it calls ``set_epoch``.
            sampler.set_epoch(self.trainer.current_epoch)
        return self._loader(split, sampler)

    @property
    def draws_each_epoch(self) -> bool:
        """Whether each epoch trains on a sample of its own (so its batch count varies): the
        trainer then makes the training loader again every epoch
        (``reload_dataloaders_every_n_epochs=1``), which reads each epoch's count."""
        return self._epoch_draw() is not None

    def _epoch_draw(self):
        """``epoch -> indices`` of the training examples an epoch uses (the batch sampler's
        ``draw``), or None: every example once."""
        return None

    def dataloader(self, split: str) -> DataLoader:
        """Length-sorted, unshuffled batches of a whole split (no filtering, no sharding)."""
        if split not in self._datasets:
            raise KeyError(f"split {split!r} not set up; available: {self.splits}")
        return DataLoader(
            self._eval_dataset(split),
            batch_sampler=TokenBudgetBatchSampler(self._eval_lengths(split), self.max_tokens, shuffle=False,
                                                  pad_to_multiple=self.pad_to_multiple),
            collate_fn=self._collator(),
            num_workers=self.num_workers,
            generator=self._generator(),
        )

    def _eval_dataset(self, split: str):
        """A split's whole dataset (train: before the length filter)."""
        return self._unfiltered_train if split == self.train_split else self._datasets[split]

    def _eval_lengths(self, split: str) -> np.ndarray:
        return np.asarray(self._lengths_of(self._eval_dataset(split)))

    def _lengths_of(self, ds) -> np.ndarray | list[int]:
        """Each example's length as the token budget counts it."""
        raise NotImplementedError

    def val_dataloader(self) -> DataLoader:
        return self.dataloader(self.val_split)

    def test_dataloader(self, split: str | None = None) -> DataLoader | list[DataLoader]:
        """One split's loader, or (for Lightning) a list over ``self.test_splits``."""
        if split is not None:
            return self.dataloader(split)
        return [self.dataloader(s) for s in self.test_splits]

    def _add_split(self, split: str, ds, lengths, filter_lengths, name: str) -> None:
        """Keep a tokenized split and its examples' batching ``lengths`` (a numpy column);
        the training split first goes through :func:`length_filter_columns` on
        ``filter_lengths`` (one length per example, or a column per side; remembered in
        ``filter_report``, the unfiltered dataset kept for ``dataloader("train")``)."""
        lengths = np.asarray(lengths)
        rows = np.arange(len(lengths))
        if split == self.train_split:
            self._unfiltered_train = ds
            result = length_filter_columns(filter_lengths, self.max_len, name=name)
            self.filter_report[split] = result
            if result.n_dropped:
                ds, lengths, rows = ds.select(result.kept), lengths[result.kept], rows[result.kept]
        if self.max_positions is not None:
            long = rows[lengths > self.max_positions]
            if len(long):
                first = ", ".join(str(i + 1) for i in long[:10].tolist()) + (" ..." if len(long) > 10 else "")
                log.warning("%s: %d of %d rows are longer than the %d pieces the model reads (its learned position "
                            "table) and are cut to them (row %s)", name, len(long), len(lengths), self.max_positions,
                            first)
            lengths = np.minimum(lengths, self.max_positions)
        self._datasets[split] = ds
        self._lengths[split] = lengths

    def prepare_data(self) -> None:
        """Fetch, train the tokenizer and tokenize once (Lightning runs this on rank 0)."""
        self.setup()

    def _record_vocab_size(self, tokenizer: SubwordTokenizer) -> None:
        """Record the tokenizer's real size as the ``vocab_size`` hyperparameter.

        A training split with fewer distinct pieces than ``vocab_size`` gives a smaller
        vocabulary. The hyperparameter then says what the model was built with (the task's
        own ``vocab_size``) rather than the unreachable request: with a warning when the user
        chose the size (``vocab_size_chosen``), silently (debug level) when a recipe did.
        """
        real = tokenizer.vocab_size
        if self.hparams.get("vocab_size") is None or real >= self.hparams["vocab_size"]:
            return
        log.log(logging.WARNING if self.vocab_size_chosen else logging.DEBUG,
                "data.vocab_size=%d asked for, but the tokenizer has %d pieces (its training data "
                "gives no more): recorded as vocab_size=%d", self.hparams["vocab_size"], real, real)
        self.save_hyperparameters({**self.hparams, "vocab_size": real})


@dataclass
class FilterResult:
    """Outcome of :func:`length_filter_columns`: kept indices (input order) and the dropped ones."""

    kept: np.ndarray
    dropped: np.ndarray

    @property
    def n_dropped(self) -> int:
        return len(self.dropped)


def length_filter_columns(lengths, max_len: int, name: str = "data") -> FilterResult:
    """Keep the examples whose length (every side's, for an ``(N, 2)`` array of source and
    target lengths) is ``<= max_len``; ``kept`` and ``dropped`` are numpy index arrays. The
    drops are counted in a warning naming the first of them (1-based positions in the split)."""
    lengths = np.asarray(lengths)
    longest = lengths.max(axis=1) if lengths.ndim == 2 else lengths
    fits = longest <= max_len
    kept, dropped = np.flatnonzero(fits), np.flatnonzero(~fits)
    if len(dropped):
        first = ", ".join(str(i + 1) for i in dropped[:10].tolist()) + (" ..." if len(dropped) > 10 else "")
        log.warning("%s: length filter (max_len=%d) dropped %d of %d examples (example %s)",
                    name, max_len, len(dropped), len(longest), first)
    else:
        log.info("%s: length filter (max_len=%d) dropped nothing", name, max_len)
    return FilterResult(kept, dropped)


def load_or_train_tokenizer(path: Path, texts_fn, vocab_size: int, model: str,
                            prefix_space: bool = False) -> SubwordTokenizer:
    """The cached tokenizer at ``path`` when its recorded sha256 matches, else a new one
    trained and cached there (with its sha256). ``texts_fn()`` gives the training text as an
    iterator of strings or of batches (lists) of strings, read as the trainer consumes it
    (e.g. :func:`transformer.data.core.cache.iter_text_batches` over an Arrow column);
    ``prefix_space`` as in :meth:`SubwordTokenizer.train` (part of ``path``'s key)."""
    if check_cache(path):
        log.info("loading cached tokenizer %s", path)
        return SubwordTokenizer.load(path)
    tok = SubwordTokenizer.train(texts_fn(), vocab_size, model=model, prefix_space=prefix_space)
    built = tok.save(path.with_name(f".{path.stem}.{os.getpid()}.json"))
    publish_cache(built, path)
    log.info("trained tokenizer (%s, %d) saved to %s", model, tok.vocab_size, path)
    return tok


# ---------------------------------------------------------------------------- checking a data config


def plain(node: DictConfig) -> dict[str, Any]:
    """The node's values as plain Python, each resolved where it can be; a value whose
    interpolation does not resolve before Hydra runs (``${hydra:...}``) is kept as written,
    and a required value left unset as ``"???"``."""
    try:
        return OmegaConf.to_container(node, resolve=True)
    except OmegaConfBaseException:
        pass
    out = {}
    for key in node:
        try:
            value = node[key]
            out[key] = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
        except OmegaConfBaseException:
            raw = node._get_node(key)
            out[key] = OmegaConf.to_container(raw, resolve=False) if OmegaConf.is_config(raw) else raw._value()
    return out


def data_module_checks(target: str):
    """The checks the data module ``target`` (a config's ``_target_``) names as its
    ``check_config`` (``check(d, where, complete=...)``), or None: a module without them, or a
    target that does not import (``instantiate`` reports that itself)."""
    import hydra.utils

    try:
        cls = hydra.utils.get_class(target)
    except Exception:  # an unknown target is reported by instantiate itself
        return None
    return getattr(cls, "check_config", None)


def check_data_config(data_cfg: DictConfig | None, where: str = "data", complete: bool = False) -> None:
    """Check a composed ``data`` node (the module docstring says what) before any data is read;
    a data module without checks of its own still has its tokenizer settings checked.
    ``complete``: a run's config, which must also name its training source (a preset alone
    may leave it to the user)."""
    if not isinstance(data_cfg, DictConfig) or "_target_" not in data_cfg:
        return
    d = plain(data_cfg)
    check_tokenizer(d, where)
    check = data_module_checks(str(data_cfg._target_))
    if check is not None:
        check(d, where, complete=complete)


__all__ = ["FilterResult", "ResumableLoader", "TokenBudgetDataModule", "check_data_config", "data_module_checks",
           "length_filter_columns", "load_or_train_tokenizer", "plain"]
