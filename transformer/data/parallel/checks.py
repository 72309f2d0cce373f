"""The checks of a parallel corpus's config (:class:`~transformer.data.parallel.datamodule.TranslationDataModule`),
run by :func:`transformer.data.core.checks.check_data_config` before any file is read:

- the language pair: two different codes; a column map names each of them (or ``src``/``tgt``)
  once and gives them two columns (:func:`transformer.data.parallel.corpus.check_columns`);
- columns are 0-based indexes or names, and a local table's first row has them (a
  :class:`~transformer.data.core.readers.DataFormatError` naming the file and line);
- every split has one source: a file or a share held out of the training file, not both, and
  training has a validation split to validate on;
- a hub dataset can be loaded (:func:`transformer.data.core.checks.check_hub`).
"""

from __future__ import annotations

from transformer.data.core.checks import check_holdout, check_hub
from transformer.data.parallel.corpus import MULTI30K, check_columns, config_sources, make_corpus, probe_tables


def _check_languages(d: dict, where: str) -> None:
    src, tgt = d.get("src_lang"), d.get("tgt_lang")
    for key, lang in (("src_lang", src), ("tgt_lang", tgt)):
        if lang is not None and (not isinstance(lang, str) or not lang.strip()):
            raise ValueError(f"{where}.{key}={lang!r}: expected a language code (en, zh, ...)")
    if src is not None and src == tgt:
        raise ValueError(f"{where}.src_lang={src} and {where}.tgt_lang={tgt}: the same language twice; "
                         f"a pair needs two (e.g. {where}.src_lang=en {where}.tgt_lang=zh)")


def check_parallel(d: dict, where: str) -> None:
    """A translation data config (:class:`~transformer.data.parallel.datamodule.TranslationDataModule`)."""
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


__all__ = ["check_parallel"]
