"""Speech recognition evaluation: transcribe a manifest's recordings with a sequence-to-sequence
speech checkpoint (CTC or autoregressive) and score the transcripts.

Metrics: the word error rate (torchmetrics: word-level edit distance over the reference words;
on connected digit strings it is the digit error rate, each digit a word) and the whole-string
accuracy (the share of utterances transcribed exactly), with the decoding time and speed.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from transformer.decoding.settings import DecodeSettings
from transformer.data.speech.datamodule import check_speakers, check_transcripts
from transformer.data.speech.manifest import read_manifest
from transformer.files import inside, write_text


def transcript_scores(hyps: Sequence[str], refs: Sequence[str]) -> dict:
    """``wer``: word errors (substitutions, deletions, insertions) over the reference words, as
    torchmetrics counts them; ``string_acc``: the share of exact transcripts (words compared, so
    spacing does not count); both fractions, rounded to 4 places."""
    from torchmetrics.functional.text import word_error_rate

    exact = sum(h.split() == r.split() for h, r in zip(hyps, refs))
    return {"wer": round(float(word_error_rate(list(hyps), list(refs))), 4),
            "string_acc": round(exact / max(len(refs), 1), 4)}


def manifest_path(data: Mapping[str, Any], split: str) -> Path:
    """A named split's manifest, as the checkpoint's data settings recorded it, or ``split``
    itself when it is a manifest file."""
    paths = data.get("paths", {})
    if split in paths:
        return Path(paths[split])
    if Path(split).is_file():
        return Path(split)
    raise ValueError(f"split={split!r}: not one of the checkpoint's splits {sorted(paths)} nor a manifest file")


def evaluate_transcripts(task, split: str, decode_cfg: DecodeSettings | dict, output_dir: Path | str,
                         device: str = "cpu") -> dict:
    """Transcribe a split (``train``/``dev``/``test`` of the checkpoint's manifests, or a manifest
    file) with ``task`` (a ``tasks.seq2seq.Seq2SeqTask`` over frames) and ``decode_cfg``; write
    ``<split>.<strategy>.hyp`` (a transcript a line, manifest order) and ``<split>.<strategy>.json``
    into ``output_dir``; return the metrics (:func:`transcript_scores`, decoding time and speed).

    A manifest row whose audio file is missing, or whose transcript has a word the checkpoint's
    vocabulary lacks, is one ``DataFormatError`` naming the manifest and row, before any decoding.
    A speaker-normalised checkpoint takes each row's speaker from the manifest's third column,
    as its training did; a manifest without one is a ``DataFormatError``.
    """
    decode_cfg = DecodeSettings.of(decode_cfg)
    data = dict(task.hparams.data)
    path = manifest_path(data, split)
    rows = read_manifest(path)
    check_transcripts({split: rows}, task.tgt_tokenizer)
    transcriber = task.translator(decode_cfg, device=device)
    start = time.perf_counter()
    speakers = None
    if data.get("normalize", "utterance") != "utterance":  # each row's speaker, as in training
        check_speakers(rows, f"the checkpoint's data.normalize={data['normalize']}")
        speakers = [r.speaker for r in rows]
    nbest = transcriber.translate([str(r.path) for r in rows], wheres=[r.where for r in rows], speakers=speakers)
    seconds = time.perf_counter() - start
    hyps, refs = [n[0][0] if n else "" for n in nbest], [r.text for r in rows]
    metrics = {"split": split, "file": str(path), "dataset": data.get("name"), "utterances": len(rows),
               **transcript_scores(hyps, refs), "decode": decode_cfg.to_dict(), "decode_seconds": round(seconds, 3),
               "utterances_per_second": round(len(rows) / max(seconds, 1e-9), 2), **transcriber.extra_stats()}
    stem = f"{split if split in data.get('paths', {}) else path.stem}.{decode_cfg.strategy}"
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_text(inside(out, f"{stem}.hyp"), "".join(h + "\n" for h in hyps))
    write_text(inside(out, f"{stem}.json"), json.dumps(metrics, indent=2, ensure_ascii=False) + "\n")
    return metrics


__all__ = ["evaluate_transcripts", "manifest_path", "transcript_scores"]
