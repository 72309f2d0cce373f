"""The checks of an unlabelled-text config (:class:`~transformer.data.text.datamodule.TextDataModule`),
run by :func:`transformer.data.core.checks.check_data_config` before any file is read: every
source a format can read, its local file there, a table's first row holding the column, a hub
dataset that can be loaded, and a held-out share when no validation source is given.
"""

from __future__ import annotations

from transformer.data.core.checks import check_hub
from transformer.data.text.corpus import make_sources, probe


def check_text(d: dict, where: str) -> None:
    """An unlabelled-text config (:class:`~transformer.data.text.datamodule.TextDataModule`)."""
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


__all__ = ["check_text"]
