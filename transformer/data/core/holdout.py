"""Held-out splits carved from one corpus: seeded, reproducible and leak-free.

A corpus without an official split (Tatoeba, a user's single file) is split by *key*, the
text whose copies must stay together: for a parallel corpus the source sentence (Tatoeba
repeats a sentence with several translations, and a test sentence seen in training with
another translation would flatter the model), for labelled text the text itself. Each
distinct key gets a rank from a seeded hash of its text, so the assignment depends only on
the key set and the seed, never on file order or ``PYTHONHASHSEED``; held-out splits are
filled in the order given, taking whole key groups in rank order while they fit, and every
other key goes to training.

Only the keys' 8-byte digests and counts are held in memory, never the texts, so a corpus is
read twice (count, then assign) as a stream.
"""

from __future__ import annotations

import hashlib
from typing import Any, Iterable, Mapping


def key_digest(key: str, seed: int) -> int:
    """A 64-bit seeded digest of ``key`` (blake2b: stable across runs and machines)."""
    h = hashlib.blake2b(key.encode("utf-8"), digest_size=8, salt=int(seed).to_bytes(8, "little", signed=True))
    return int.from_bytes(h.digest(), "little")


def _target_sizes(sizes: Mapping[str, float | int], total: int) -> dict[str, int]:
    """Row counts of the held-out splits: an int is a count, a float below 1 a fraction."""
    out: dict[str, int] = {}
    for name, size in sizes.items():
        if isinstance(size, bool) or not isinstance(size, (int, float)) or size < 0:
            raise ValueError(f"held-out split {name!r}: size {size!r} is not a count or a fraction")
        if isinstance(size, float) and size < 1:
            out[name] = int(round(size * total))
        elif float(size).is_integer():
            out[name] = int(size)
        else:
            raise ValueError(f"held-out split {name!r}: size {size!r} is neither a count nor a fraction below 1")
    if sum(out.values()) >= total:
        raise ValueError(f"held-out splits {dict(out)} take all {total} rows, leaving none to train on")
    return out


class KeySplit:
    """Which split each key belongs to, decided once from all the keys of a corpus.

    ``sizes`` maps each held-out split to a row count (int) or a fraction of all rows (float
    below 1); ``train_name`` gets the rest. Splits take whole key groups in rank order, a group
    too big for what is left skipped for a later smaller one, so a split falls short of its
    size by less than one group at most (exact when most keys are single, as in Tatoeba);
    ``counts`` holds the sizes reached.
    """

    def __init__(self, keys: Iterable[str], sizes: Mapping[str, float | int], seed: int = 0,
                 train_name: str = "train"):
        if train_name in sizes:
            raise ValueError(f"held-out split {train_name!r} has the training split's name")
        self.seed, self.train_name = int(seed), train_name
        counts: dict[int, int] = {}
        for key in keys:
            d = key_digest(key, self.seed)
            counts[d] = counts.get(d, 0) + 1
        total = sum(counts.values())
        self.sizes = _target_sizes(sizes, total)
        self._held: dict[int, str] = {}
        ranked = sorted(counts)
        for name, want in self.sizes.items():
            got = 0
            for d in ranked:
                if got == want:
                    break
                if d not in self._held and got + counts[d] <= want:
                    self._held[d] = name
                    got += counts[d]
        self.counts = {name: 0 for name in [train_name, *self.sizes]}
        for d, n in counts.items():
            self.counts[self._held.get(d, train_name)] += n

    def __call__(self, key: str) -> str:
        """The split of ``key`` (a key never seen is a training key)."""
        return self._held.get(key_digest(key, self.seed), self.train_name)


def check_holdout(holdout: Any, files: Mapping[str, tuple[str | None, Any]], where: str) -> None:
    """A data config's ``holdout`` (a corpus's checks call this where the config has one) carves
    splits out of the training file: ``{split: row count or fraction below 1}``, never ``train``
    itself, and never a split that also has a file (``files``: each split with a source, and the
    key that gives it; None for a preset's own). A bad value is a ``ValueError`` naming the key,
    before any file is read."""
    if not isinstance(holdout, dict) or not holdout:
        raise ValueError(f"{where}.holdout={holdout!r}: expected {{split: row count or fraction}}, e.g. {{dev: 0.1}}")
    for split, size in holdout.items():
        if split == "train":
            raise ValueError(f"{where}.holdout.train: the held-out splits are carved from the training file; "
                             "name the other splits (e.g. dev, test)")
        if split in files:
            key, value = files[split]
            given = f"{where}.{key}={value}" if key else f"the preset's own {split} file"
            raise ValueError(f"{where}.holdout.{split} and {given}: two sources for the {split} split; "
                             f"give a file or a held-out share, not both")
        if isinstance(size, bool) or not isinstance(size, (int, float)) or size <= 0 or (
                isinstance(size, float) and size >= 1 and not size.is_integer()):
            raise ValueError(f"{where}.holdout.{split}={size!r}: expected a row count (1, 2, ...) or a fraction "
                             "between 0 and 1")


__all__ = ["KeySplit", "check_holdout", "key_digest"]
