"""Tokenized splits as Hugging Face ``datasets.Dataset`` objects, cached as Arrow files.

Each split is built with ``Dataset.from_dict`` + a batched ``.map`` whose
``cache_file_name`` and ``new_fingerprint`` are derived from :func:`cache_key` over
the source files' sha256, the tokenizer's content hash (and, for tagging, the tag
vocabulary) and :data:`FORMAT_VERSION`. A changed file or tokenizer therefore gets a
different Arrow file, never a stale one; an unchanged one is memory-mapped back by
``datasets`` without tokenizing again, once its sha256 matches the one recorded beside it
(``<file>.sha256``, written when it was built; :func:`check_cache`); a file that does not
match is rebuilt with a warning. Nothing here needs the network
(``HF_DATASETS_OFFLINE=1`` is fine).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any, Sequence

import datasets

from transformer.data.batching import IGNORE_INDEX
from transformer.data.readers import TaggedSentence
from transformer.data.sources import sha256_file
from transformer.data.tokenizer import SubwordTokenizer

log = logging.getLogger(__name__)

#: Bump when the layout of the cached columns changes.
FORMAT_VERSION = 1

_List = getattr(datasets, "List", None) or datasets.Sequence  # datasets<4 spells it Sequence

TRANSLATION_FEATURES = datasets.Features(
    {
        "src": _List(datasets.Value("int32")),
        "tgt": _List(datasets.Value("int32")),
        "index": datasets.Value("int64"),
        "src_len": datasets.Value("int32"),
        "tgt_len": datasets.Value("int32"),
    }
)
TAGGING_FEATURES = datasets.Features(
    {
        "src": _List(datasets.Value("int32")),
        "word_ids": _List(datasets.Value("int32")),
        "tags": _List(datasets.Value("int32")),
        "index": datasets.Value("int64"),
        "n_pieces": datasets.Value("int32"),
    }
)
# With an auxiliary tag set (multi-task tagging): a second tag id per word.
TAGGING_AUX_FEATURES = datasets.Features({**TAGGING_FEATURES, "aux_tags": _List(datasets.Value("int32"))})


def cache_key(*parts: Any) -> str:
    """sha256 over a JSON rendering of ``parts`` (plus the format version)."""
    blob = json.dumps([FORMAT_VERSION, *parts], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _digest_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def record_cache(path: str | os.PathLike) -> None:
    """Write ``<path>.sha256`` (the file's sha256) beside a cache file just built."""
    path = Path(path)
    digest = _digest_path(path)
    tmp = digest.with_name(f".{digest.name}.{os.getpid()}.tmp")
    tmp.write_text(f"{sha256_file(path)}  {path.name}\n", encoding="utf-8")
    os.replace(tmp, digest)


def check_cache(path: str | os.PathLike) -> bool:
    """True when the cache file ``path`` exists and matches the sha256 recorded when it was
    built. A file that does not match (truncated, corrupted, or from before digests were
    recorded) is removed, with a warning when a digest said otherwise, so it is rebuilt."""
    path = Path(path)
    digest = _digest_path(path)
    if not path.is_file():
        return False
    recorded = digest.read_text(encoding="utf-8").split()[:1] if digest.is_file() else []
    actual = sha256_file(path)
    if recorded == [actual]:
        return True
    if recorded:
        log.warning("cache file %s has sha256 %s, but %s was recorded when it was built: rebuilding it",
                    path, actual, recorded[0])
    else:
        log.info("cache file %s has no recorded sha256: rebuilding it", path)
    path.unlink()
    digest.unlink(missing_ok=True)
    return False


def _map_cached(ds: datasets.Dataset, fn, cache_file: Path, key: str, features, remove: list[str]) -> datasets.Dataset:
    """``ds.map(fn)`` cached in ``cache_file``; the file is reused only when its sha256 still
    matches the one recorded when it was written (a corrupted id is never trained on)."""
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    verified = check_cache(cache_file)
    out = ds.map(
        fn,
        batched=True,
        batch_size=2000,
        remove_columns=remove,
        features=features,
        cache_file_name=str(cache_file),
        new_fingerprint=key[:64],
        load_from_cache_file=True,
        desc=f"tokenizing {cache_file.stem}",
    )
    if not verified:
        record_cache(cache_file)
    return out


def tokenize_translation(
    pairs: Sequence[tuple[str, str]],
    src_tokenizer: SubwordTokenizer,
    tgt_tokenizer: SubwordTokenizer,
    cache_dir: str | os.PathLike,
    name: str,
    source_hashes: Sequence[str],
) -> datasets.Dataset:
    """Dataset with columns ``src, tgt`` (piece ids, no specials), ``index`` (position in
    the split), ``src_len, tgt_len``; cached under ``cache_dir/arrow/{name}-{key}.arrow``.

    ``source_hashes`` must identify the text (the files' sha256, plus any subset size).
    """
    key = cache_key("translation", list(source_hashes), len(pairs), src_tokenizer.content_hash, tgt_tokenizer.content_hash)
    cache_file = Path(cache_dir) / "arrow" / f"{name}-{key[:16]}.arrow"
    raw = datasets.Dataset.from_dict(
        {"src_text": [p[0] for p in pairs], "tgt_text": [p[1] for p in pairs], "index": list(range(len(pairs)))}
    )

    def fn(batch: dict[str, list]) -> dict[str, list]:
        src = src_tokenizer.encode_batch(batch["src_text"])
        tgt = tgt_tokenizer.encode_batch(batch["tgt_text"])
        return {
            "src": src,
            "tgt": tgt,
            "index": batch["index"],
            "src_len": [len(x) for x in src],
            "tgt_len": [len(x) for x in tgt],
        }

    return _map_cached(raw, fn, cache_file, key, TRANSLATION_FEATURES, ["src_text", "tgt_text"])


def tokenize_tagging(
    sentences: Sequence[TaggedSentence],
    tags: Sequence[Sequence[str]],
    tokenizer: SubwordTokenizer,
    tag_vocab: Sequence[str],
    cache_dir: str | os.PathLike,
    name: str,
    source_hashes: Sequence[str],
    aux_tags: Sequence[Sequence[str]] | None = None,
    aux_vocab: Sequence[str] | None = None,
) -> datasets.Dataset:
    """Dataset with ``src`` (pieces), ``word_ids`` (word of each piece), ``tags`` (tag id
    per word), ``index``, ``n_pieces``, and with ``aux_tags``/``aux_vocab`` an ``aux_tags``
    column (a second tag id per word); cached like :func:`tokenize_translation`. A tag
    ``None`` (a word without that annotation) becomes ``IGNORE_INDEX``: no loss, no score."""
    if (aux_tags is None) != (aux_vocab is None):
        raise ValueError("aux_tags and aux_vocab go together")
    aux = list(aux_vocab) if aux_vocab is not None else None
    key = cache_key("tagging", list(source_hashes), len(sentences), tokenizer.content_hash, list(tag_vocab),
                    *([aux] if aux is not None else []))
    cache_file = Path(cache_dir) / "arrow" / f"{name}-{key[:16]}.arrow"
    tag_to_id = {None: IGNORE_INDEX, **{t: i for i, t in enumerate(tag_vocab)}}
    aux_to_id = {None: IGNORE_INDEX, **{t: i for i, t in enumerate(aux or [])}}
    columns = {"words": [s.words for s in sentences], "tag_names": [list(t) for t in tags],
               "index": list(range(len(sentences)))}
    if aux_tags is not None:
        columns["aux_names"] = [list(t) for t in aux_tags]

    def fn(batch: dict[str, list]) -> dict[str, list]:
        out: dict[str, list] = {"src": [], "word_ids": [], "tags": [], "index": batch["index"], "n_pieces": []}
        for words, names in zip(batch["words"], batch["tag_names"]):
            ids, word_ids = tokenizer.encode_words(words)
            out["src"].append(ids)
            out["word_ids"].append(word_ids)
            out["tags"].append([tag_to_id[t] for t in names])
            out["n_pieces"].append(len(ids))
        if "aux_names" in batch:
            out["aux_tags"] = [[aux_to_id[t] for t in names] for names in batch["aux_names"]]
        return out

    features = TAGGING_AUX_FEATURES if aux_tags is not None else TAGGING_FEATURES
    remove = [c for c in columns if c != "index"]
    return _map_cached(datasets.Dataset.from_dict(columns), fn, cache_file, key, features, remove)


def int_column(ds: datasets.Dataset, column: str) -> list[int]:
    """A scalar column as Python ints, honouring any ``select`` indices mapping."""
    # One columnar read: iterating a Column formats row by row (slow).
    return ds.select_columns([column]).with_format("arrow")[:][column].to_pylist()
