"""The data half of training's validation step: a composed config's ``data`` node, checked as
a whole before any file is prepared or the run folder exists.

What a data module would only find out while preparing (or never: a column map that misses a
language trains on one language twice) is a ``ValueError`` naming the key, printed by the
command as one ``error:`` line. :func:`check_data_config` runs the checks every kind shares
(the tokenizer settings), then the checks the config's data module names as its
``check_config`` (kept in each kind's ``corpus.py`` with the corpus it describes:
:func:`transformer.data.parallel.corpus.check_parallel`, :func:`transformer.data.labelled.corpus.check_labelled`,
:func:`transformer.data.text.corpus.check_text`, :func:`transformer.data.tagged.corpus.check_tagged`).
What those kinds share is here: held-out splits (:func:`check_holdout`), hub datasets
(:func:`check_hub`) and the config as plain values (:func:`plain`).

A config without a training source is a preset waiting for the user's files: it is checked
for what it says, and asked for the files it lacks only as a run's config (``complete=True``,
training's validation step), still before the run folder exists.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from transformer.data.core.readers import saved_dataset
from transformer.data.core.tokenizer import MODELS as TOKENIZER_MODELS
from transformer.data.core.tokenizer import min_vocab_size



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


def check_holdout(holdout: Any, files: dict[str, tuple[str | None, Any]], where: str) -> None:
    """``holdout`` carves splits out of the training file: ``{split: row count or fraction
    below 1}``, never ``train`` itself, and never a split that also has a file (``files``:
    each split with a source, and the key that gives it; None for a preset's own)."""
    if holdout is None:
        return
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


# ---------------------------------------------------------------------------- hub datasets

OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
# Files `datasets.load_dataset` reads from a plain folder (its packaged builders), compressed or not.
DATA_FILE_SUFFIXES = (".parquet", ".arrow", ".jsonl", ".json", ".csv", ".tsv", ".txt")


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
        if not saved_dataset(folder) and not _has_data_files(folder):
            raise ValueError(f"{where}.name={name}: a folder, but not a dataset: no dataset_dict.json or "
                             f"state.json (save_to_disk) and no data files ({', '.join(DATA_FILE_SUFFIXES)})")
        return
    switched_off = offline()
    if switched_off and not _cached(name):
        setting = " ".join(f"{v}={os.environ[v]}" for v in switched_off)
        raise ValueError(f"{where}.name={name}: not a local folder, and {setting} keeps the hub offline with no "
                         f"cached copy of it: give a folder written by save_to_disk, or unset "
                         f"{' and '.join(switched_off)} to download it")


def check_tokenizer(d: dict, where: str) -> None:
    """A tokenizer model this project trains, and a vocabulary it can reach (every data module)."""
    model, size = d.get("tokenizer_model"), d.get("vocab_size")
    if model is None:
        return
    if model not in TOKENIZER_MODELS:
        raise ValueError(f"{where}.tokenizer_model={model!r}: choose from {', '.join(TOKENIZER_MODELS)}")
    if isinstance(size, int) and not isinstance(size, bool) and size < min_vocab_size(model):
        raise ValueError(f"{where}.vocab_size={size}: a {model} tokenizer needs at least {min_vocab_size(model)} "
                         f"pieces" + (" (the 256 bytes and the special tokens)" if model != "word" else ""))


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
    """Check a composed ``data`` node (see the module docstring) before any data is read;
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


__all__ = ["check_data_config", "check_holdout", "check_hub", "check_tokenizer", "data_module_checks", "offline",
           "plain"]
