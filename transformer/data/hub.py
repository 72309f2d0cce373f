"""Parallel corpora from the Hugging Face hub by name (``datasets.load_dataset``).

``hub = {"name": "wmt16", "config": "ro-en"}`` in a corpus (:mod:`transformer.data.corpora`)
makes each split's source the name of a split of that dataset. A folder written by
``Dataset(Dict).save_to_disk`` is read with ``load_from_disk``; anything else (a hub name, a
local folder of parquet/JSON files) goes through ``load_dataset``, which caches the Arrow
table and memory-maps it, so rows are streamed from disk here, never held as a list.

Columns are dotted keys into each row (default ``translation.<lang>``, the layout of wmt16,
iwslt2017 and opus datasets); ``columns`` maps a language code or ``src``/``tgt`` to another.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

_BATCH = 1000


def _load(hub: dict, split: str):
    import datasets

    name, config = str(hub["name"]), hub.get("config")
    folder = Path(name)
    if folder.is_dir() and ((folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file()):
        ds = datasets.load_from_disk(str(folder))
        if isinstance(ds, datasets.DatasetDict):
            if split not in ds:
                raise ValueError(f"{name}: no split {split!r}; it has {list(ds)}")
            ds = ds[split]
        return ds
    try:
        return datasets.load_dataset(name, config, split=split)
    except ValueError as e:  # an unknown split: datasets names the ones there are
        raise ValueError(f"dataset {name}{'/' + config if config else ''}: {e}") from None


def _value(row: dict, key: str, where: str, i: int) -> str:
    value: Any = row
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            raise ValueError(f"{where}, row {i}: no column {key!r} (set data.columns)")
        value = value[part]
    if not isinstance(value, str):
        raise ValueError(f"{where}, row {i}: column {key!r} holds {type(value).__name__}, not text")
    return value


def hub_columns(corpus: dict) -> tuple[str, str]:
    """The dotted column of each side."""
    columns = corpus.get("columns") or {}
    out = []
    for side in ("src", "tgt"):
        lang = corpus[f"{side}_lang"]
        out.append(str(columns.get(lang, columns.get(side, "translation.{lang}"))).format(lang=lang))
    return out[0], out[1]


def hub_pairs(corpus: dict, split: str) -> Iterator[tuple[str, str]]:
    """``(src, tgt)`` of one split of the corpus's hub dataset, in dataset order."""
    hub = corpus["hub"]
    ds = _load(hub, split)
    src_col, tgt_col = hub_columns(corpus)
    where = f"{hub['name']} split {split}"
    tops = list(dict.fromkeys(c.split(".")[0] for c in (src_col, tgt_col)))
    missing = [c for c in tops if c not in ds.column_names]
    if missing:
        raise ValueError(f"{where}: no column {missing[0]!r}; it has {ds.column_names} (set data.columns)")
    i = 0
    for batch in ds.select_columns(tops).iter(batch_size=_BATCH):
        rows = [dict(zip(batch, values)) for values in zip(*batch.values())]
        for row in rows:
            i += 1
            yield _value(row, src_col, where, i), _value(row, tgt_col, where, i)


def hub_fingerprint(corpus: dict, split: str) -> str:
    """The ``datasets`` fingerprint of a split (changes when its data does)."""
    return str(_load(corpus["hub"], split)._fingerprint)


__all__ = ["hub_columns", "hub_fingerprint", "hub_pairs"]
