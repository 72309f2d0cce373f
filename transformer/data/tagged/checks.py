"""The checks of a tagging config (:class:`~transformer.data.tagged.datamodule.TaggingDataModule`):
its options against its corpus's file format and each other. The data module runs them when it
is built, as its reader names problems with the files themselves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from transformer.data.tagged.corpus import FORMAT_FIELDS


def check_tagging_options(fmt: str, tagset: str, aux_tagset: str | None, aux_corpus: str | None,
                          aux_corpus_upos: bool, extra_train: Sequence[Path]) -> tuple[str, str | None]:
    """The ``TaggedSentence`` fields of the main and the auxiliary tags of a corpus in format
    ``fmt`` (``conllu`` | ``conll2000``); a ``ValueError`` names any option that does not fit
    the format or the other options."""
    if fmt not in FORMAT_FIELDS:
        raise ValueError(f"data.format must be one of {sorted(FORMAT_FIELDS)}, got {fmt!r}")
    allowed = FORMAT_FIELDS[fmt]
    for key, value in (("tagset", tagset), ("aux_tagset", aux_tagset)):
        if value is not None and value not in allowed:
            raise ValueError(f"data.{key} {value!r} not available for {fmt} files; choose from {sorted(allowed)}")
    field, aux_field = allowed[tagset], (allowed[aux_tagset] if aux_tagset is not None else None)
    if aux_field == field:
        raise ValueError(f"aux_tagset {aux_tagset!r} is the same annotation as tagset {tagset!r}")
    if aux_corpus is not None and (aux_corpus != "conll2000" or fmt != "conllu" or aux_field != "xpos"):
        raise ValueError(f"aux_corpus {aux_corpus!r}: only 'conll2000', with a CoNLL-U corpus and aux_tagset 'xpos' "
                         "(Penn Treebank tags, as GUM's)")
    if aux_corpus_upos and (aux_corpus is None or field != "upos"):
        raise ValueError("aux_corpus_upos needs an aux_corpus and tagset 'upos'")
    for path in extra_train:
        if not path.is_file():
            raise FileNotFoundError(f"data.extra_train: file not found: {path}")
    if extra_train and "chunk" in (field, aux_field):
        raise ValueError("data.extra_train reads CoNLL-U files, which have no chunk tags")
    return field, aux_field


__all__ = ["check_tagging_options"]
