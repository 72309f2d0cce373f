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

import os
from pathlib import Path
from typing import Any, Iterator

_BATCH = 1000
OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
# Files `datasets.load_dataset` reads from a plain folder (its packaged builders), compressed or not.
DATA_FILE_SUFFIXES = (".parquet", ".arrow", ".jsonl", ".json", ".csv", ".tsv", ".txt")


def _saved(folder: Path) -> bool:
    """Whether ``folder`` was written by ``Dataset(Dict).save_to_disk``."""
    return (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file()


def _has_data_files(folder: Path) -> bool:
    """Whether ``folder`` holds a file ``load_dataset`` can read (the first one found ends the
    walk); like ``datasets``, hidden files and folders (``.x``, ``__x``) do not count."""
    for path in folder.rglob("*"):
        if any(part.startswith((".", "__")) for part in path.relative_to(folder).parts):
            continue
        name = path.name.lower()
        for packed in (".gz", ".zst", ".bz2", ".xz", ".zip"):
            name = name.removesuffix(packed)
        if name.endswith(DATA_FILE_SUFFIXES) and path.is_file():
            return True
    return False


def offline() -> list[str]:
    """The variables that switch the hub off (``HF_HUB_OFFLINE=1`` ...), as set now."""
    return [v for v in OFFLINE_VARIABLES if os.environ.get(v, "").strip().upper() in ("1", "ON", "YES", "TRUE")]


def _cached(name: str) -> bool:
    """Whether a hub dataset has a copy in the local caches (what ``datasets`` reads offline)."""
    import datasets.config
    from huggingface_hub import constants

    return ((Path(datasets.config.HF_DATASETS_CACHE) / name.replace("/", "___")).is_dir()
            or (Path(constants.HF_HUB_CACHE) / f"datasets--{name.replace('/', '--')}").is_dir())


def check_hub(hub: Any, where: str = "data.hub") -> None:
    """What can be known of a hub source without loading it, as a ``ValueError`` naming
    ``where``: a dataset name is given; a local folder is a dataset (written by
    ``save_to_disk``, or holding data files); and offline (:func:`offline`), a name that is no
    folder has a cached copy. Without that last check ``datasets`` retries the network before
    it fails, with a traceback."""
    if not isinstance(hub, dict):
        raise ValueError(f"{where}={hub!r}: expected {{name: <dataset>, config: <config or null>}}")
    name, config = hub.get("name"), hub.get("config")
    if not isinstance(name, str) or name in ("", "???"):
        raise ValueError(f"{where}.name: required (a Hugging Face dataset, e.g. {where}.name=wmt16, "
                         "or a local folder)")
    if config is not None and not isinstance(config, str):
        raise ValueError(f"{where}.config={config!r}: expected a config name (e.g. ro-en) or null")
    folder = Path(name).expanduser()
    if folder.is_dir():
        if not _saved(folder) and not _has_data_files(folder):
            raise ValueError(f"{where}.name={name}: a folder, but not a dataset: no dataset_dict.json or "
                             f"state.json (save_to_disk) and no data files ({', '.join(DATA_FILE_SUFFIXES)})")
        return
    switched_off = offline()
    if switched_off and not _cached(name):
        setting = " ".join(f"{v}={os.environ[v]}" for v in switched_off)
        raise ValueError(f"{where}.name={name}: not a local folder, and {setting} keeps the hub offline with no "
                         f"cached copy of it: give a folder written by save_to_disk, or unset "
                         f"{' and '.join(switched_off)} to download it")


def _load(hub: dict, split: str):
    import datasets

    name, config = str(hub["name"]), hub.get("config")
    folder = Path(name)
    try:
        if not (folder.is_dir() and _saved(folder)):
            return datasets.load_dataset(name, config, split=split)
        ds = datasets.load_from_disk(str(folder))
    except ValueError as e:  # an unknown split: datasets names the ones there are
        raise ValueError(f"dataset {name}{'/' + config if config else ''}: {e}") from None
    except (OSError, datasets.exceptions.DatasetsError) as e:  # unreachable, unknown, or not a dataset
        cause = e.__cause__ if isinstance(e, datasets.exceptions.DatasetGenerationError) and e.__cause__ else e
        raise ValueError(f"data.hub.name={name}: cannot load it ({type(cause).__name__}: {cause})") from None
    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise ValueError(f"{name}: no split {split!r}; it has {list(ds)}")
        ds = ds[split]
    return ds


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


__all__ = ["check_hub", "hub_columns", "hub_fingerprint", "hub_pairs", "offline"]
