"""The data half of training's validation step: a composed config's ``data`` node, checked as
a whole before any file is prepared or the run folder exists.

What a data module would only find out while preparing (or never: a column map that misses a
language trains on one language twice) is a ``ValueError`` naming the key here, printed by the
command as one ``error:`` line:

- the language pair: two different codes; a column map names each of them (or ``src``/``tgt``)
  once and gives them two columns (:func:`transformer.data.corpora.check_columns`);
- columns are 0-based indexes or names, and a local table's first row has them (a
  :class:`~transformer.data.readers.DataFormatError` naming the file and line);
- every split has one source: a file or a share held out of the training file, not both, and
  training has a validation split to validate on;
- a hub dataset can be loaded: a named local folder is a dataset, and offline a name has a
  cached copy (:func:`check_hub`);
- text to pretrain on: every source a format can read, its local file there, a table's first
  row holding the column (:func:`check_text`).

A config without a training source is a preset waiting for the user's files: it is checked
for what it says, and not yet asked for the files it lacks.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from transformer.data.corpora import MULTI30K, check_columns, config_sources, make_corpus, probe_tables
from transformer.data.readers import check_column, first_row, infer_format, same_column, saved_dataset
from transformer.data.text import make_sources, probe
from transformer.data.tokenizer import MODELS as TOKENIZER_MODELS
from transformer.data.tokenizer import min_vocab_size


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


def _check_languages(d: dict, where: str) -> None:
    src, tgt = d.get("src_lang"), d.get("tgt_lang")
    for key, lang in (("src_lang", src), ("tgt_lang", tgt)):
        if lang is not None and (not isinstance(lang, str) or not lang.strip()):
            raise ValueError(f"{where}.{key}={lang!r}: expected a language code (en, zh, ...)")
    if src is not None and src == tgt:
        raise ValueError(f"{where}.src_lang={src} and {where}.tgt_lang={tgt}: the same language twice; "
                         f"a pair needs two (e.g. {where}.src_lang=en {where}.tgt_lang=zh)")


def check_parallel(d: dict, where: str) -> None:
    """A translation data config (:class:`~transformer.data.translation_datamodule.TranslationDataModule`)."""
    _check_languages(d, where)
    src, tgt, hub = d.get("src_lang"), d.get("tgt_lang"), d.get("hub")
    if hub is not None:
        check_hub(hub, f"{where}.hub")
    check_columns(d.get("columns"), src, tgt, f"{where}.columns")
    corpus_name, train_files = d.get("corpus_name", "multi30k"), d.get("train_files")
    sources, valid_name = config_sources(corpus_name, d.get("train"), d.get("valid"), d.get("test"), d.get("tests"),
                                         d.get("valid_name") or "valid", hub, train_files)
    if corpus_name == MULTI30K["name"] and d.get("train") is None and hub is None:  # the preset's own files
        keys = {"train": "train_files"} if train_files else {}
    else:
        keys = {"train": "train_files" if train_files else "train", valid_name: "valid", "test": "test",
                **{name: f"tests.{name}" for name in d.get("tests") or {}}}
    files = {split: (keys.get(split), source) for split, source in sources.items()}
    holdout = d.get("holdout")
    check_holdout(holdout, files, where)
    if "train" not in sources:
        return
    if not src or not tgt:
        raise ValueError(f"{where}.src_lang and {where}.tgt_lang: required with {where}.train (language codes, "
                         f"e.g. {where}.src_lang=en {where}.tgt_lang=zh)")
    if valid_name not in sources and valid_name not in (holdout or {}):
        raise ValueError(f"{where}.valid: training needs a validation split; set {where}.valid=<file(s)> (as "
                         f"{where}.train), or carve it from the training file with "
                         f"{where}.holdout={{{valid_name}: 1000}}")
    eval_splits = d.get("eval_splits")
    if isinstance(eval_splits, list) and valid_name not in eval_splits:
        raise ValueError(f"{where}.eval_splits={eval_splits}: leaves out the validation split {valid_name!r}, "
                         f"which training validates on")
    probe_tables(make_corpus(src, tgt, sources, valid_name=valid_name, format=d.get("format"),
                             columns=d.get("columns"), header=d.get("header", False), holdout=holdout, hub=hub))


def check_classification(d: dict, where: str) -> None:
    """A labelled-text config (:class:`~transformer.data.classification_datamodule.ClassificationDataModule`)."""
    fmt = d.get("file_format")
    if fmt not in (None, "tsv", "csv", "jsonl"):
        raise ValueError(f"{where}.file_format={fmt!r}: expected tsv, csv, jsonl or null (from each file's "
                         "extension); labelled data needs two columns")
    text, label = d.get("text_column", 0), d.get("label_column", 1)
    check_column(f"{where}.text_column", text)
    check_column(f"{where}.label_column", label)
    if same_column(text, label):
        raise ValueError(f"{where}.text_column={text!r} and {where}.label_column={label!r}: one column for both; "
                         "the text and its label need a column each")
    files = {split: (split, d[split]) for split in ("train", "dev", "test") if d.get(split) is not None}
    check_holdout(d.get("holdout"), files, where)
    if "train" not in files:
        return
    if "dev" not in files and "dev" not in (d.get("holdout") or {}):
        raise ValueError(f"{where}.dev: training needs a validation split; set {where}.dev=<file>, or carve it "
                         f"from the training file with {where}.holdout={{dev: 0.1}}")
    for split, (_, path) in files.items():
        if isinstance(path, str) and Path(path).is_file():
            if (fmt or infer_format(path)) == "text":
                raise ValueError(f"{where}.{split}={path}: read as plain text, one column; labelled data needs "
                                 f"two (a .tsv, .csv or .jsonl file, or set {where}.file_format)")
            first_row(path, (text, label), fmt, bool(d.get("header", False)))


def check_text(d: dict, where: str) -> None:
    """An unlabelled-text config (:class:`~transformer.data.text_datamodule.TextDataModule`)."""
    settings = (d.get("format"), d.get("column", 0), bool(d.get("header", False)))
    train = make_sources(d.get("files"), *settings, f"{where}.files")
    valid = make_sources(d.get("valid"), *settings, f"{where}.valid")
    fraction = d.get("valid_fraction")
    if train and not valid and (isinstance(fraction, bool) or not isinstance(fraction, (int, float))
                                or not 0 < fraction < 1):
        raise ValueError(f"{where}.valid_fraction={fraction!r}: expected a share between 0 and 1 of the training "
                         f"passages to validate on (or give {where}.valid=<file>)")
    for key, sources in (("files", train), ("valid", valid)):
        for i, source in enumerate(sources):
            if "hub" in source:
                check_hub({"name": source["hub"], "config": source.get("config")}, f"{where}.{key}[{i}].hub")
                continue
            try:
                probe(source)
            except (FileNotFoundError, IsADirectoryError) as exc:
                raise type(exc)(f"{where}.{key}[{i}]: {exc}") from None


# The checks of each data module, by the class name its config's _target_ ends with.
CHECKS: dict[str, Callable[[dict, str], None]] = {
    "TranslationDataModule": check_parallel,
    "ClassificationDataModule": check_classification,
    "TextDataModule": check_text,
}


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


def check_data_config(data_cfg: DictConfig | None, where: str = "data") -> None:
    """Check a composed ``data`` node (see the module docstring) before any data is read;
    a data module without checks of its own here (tagging: its reader names its own problems)
    still has its tokenizer settings checked."""
    if not isinstance(data_cfg, DictConfig) or "_target_" not in data_cfg:
        return
    d = plain(data_cfg)
    check_tokenizer(d, where)
    check = CHECKS.get(str(data_cfg._target_).rsplit(".", 1)[-1])
    if check is not None:
        check(d, where)


__all__ = ["check_classification", "check_data_config", "check_holdout", "check_hub", "check_parallel",
           "check_text", "check_tokenizer", "offline", "plain"]
