"""The checks of a labelled-text config (:class:`~transformer.data.labelled.datamodule.ClassificationDataModule`),
run by :func:`transformer.data.core.checks.check_data_config` before any file is read: a text
and a label column, each its own; one source per split and a validation split; each local
file a table whose first row has both columns.
"""

from __future__ import annotations

from pathlib import Path

from transformer.data.core.checks import check_holdout
from transformer.data.core.readers import check_column, first_row, infer_format, same_column


def check_labelled(d: dict, where: str) -> None:
    """A labelled-text config (:class:`~transformer.data.labelled.datamodule.ClassificationDataModule`)."""
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


__all__ = ["check_labelled"]
