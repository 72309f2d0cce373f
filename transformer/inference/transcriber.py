"""Audio files in, transcripts out: a sequence-to-sequence speech model's batched predictor
(an input kind with a front end, ``transformer.kinds.FRAMES``), shared by ``transformer-decode``
and ``transformer-evaluate``.

It answers as :class:`~transformer.inference.translator.Translator` does (``translate``: an
n-best list of ``(text, score)`` per input, in input order; ``truncated``, ``extra_stats``), so a
command that decodes reads either without asking which.

Shape legend: B utterances, T frames, M mel bins.
"""

from __future__ import annotations

from typing import Sequence

import torch

from transformer.data.core.batching import token_budget_batches
from transformer.inference.translator import SearchFn, one_line


class Transcriber:
    """Audio paths in, detokenized n-best transcripts out, in input order.

    Each input is a file's path, read into frames with the checkpoint's feature settings
    (``data``: its data settings, ``data.speech.datamodule.frames_of``); a batch holds up to
    ``max_frames`` frames (padding counted). An empty (or whitespace-only) input transcribes to
    ``""``; a file that cannot be read is one ``AudioError`` naming it and its input line. A
    speaker-normalised checkpoint (``data.normalize=speaker``) normalises each file with the
    statistics of its speaker's files among the inputs (``speakers``), or of all the files of the
    call when none are given (``data.speech.datamodule.input_statistics``).

    Args:
        search: the task's search (``search(src (B, T, M), src_lengths=(B,))``).
        tgt_tokenizer: turns the output ids into text.
        data: the checkpoint's data settings (``features``).
        max_frames: the frame budget of a batch.
        device: where the frames go.
    """

    def __init__(self, search: SearchFn, tgt_tokenizer, data: dict, max_frames: int = 20_000,
                 device: str | torch.device = "cpu") -> None:
        self.search, self.tgt_tok, self.data = search, tgt_tokenizer, dict(data)
        self.max_frames, self.device = max_frames, torch.device(device)
        self.truncated = 0  # frames are never cut (the front end and positions take any length)
        self.stats: dict[str, float] = {}

    def set_target_language(self, tgt_lang: str | None, src_lang: str | None = None) -> "Transcriber":
        """A transcriber writes one language: nothing to set (``Translator``'s call, answered)."""
        return self

    def extra_stats(self) -> dict:
        """Strategy-specific statistics (the CTC search's ``avg_iterations``)."""
        return dict(self.stats)

    @torch.no_grad()
    def translate(self, paths: Sequence[str], wheres: Sequence[str] | None = None,
                  speakers: Sequence[str] | None = None) -> list[list[tuple[str, float]]]:
        """Transcribe the audio files at ``paths``: an n-best list each, in input order. A bad file
        is one ``AudioError`` naming it and where it was given (``wheres``, one per path, e.g.
        a manifest's ``test.tsv:12``; default ``input:<1-based position>``); ``speakers``, one
        per path, group the files for a speaker-normalised checkpoint."""
        from transformer.data.speech.audio import audio_samples, load_audio
        from transformer.data.speech.dataset import SpeechCollator
        from transformer.data.speech.datamodule import feature_settings, input_statistics
        from transformer.data.speech.features import compute_features, normalize_with

        settings = feature_settings(self.data)
        out: list[list[tuple[str, float]]] = [[("", 0.0)] for _ in paths]
        wheres = list(wheres) if wheres is not None else [f"input:{i + 1}" for i in range(len(paths))]
        todo = [(i, str(p).strip()) for i, p in enumerate(paths) if str(p).strip()]
        # every file's header first (no decoding): a bad one stops the run before any work
        lengths = [settings.num_frames(audio_samples(p, settings.sample_rate, where=wheres[i]))
                   for i, p in todo]
        stats = input_statistics([p for _, p in todo], self.data, [wheres[i] for i, _ in todo],
                                 [speakers[i] for i, _ in todo] if speakers is not None else None)
        for batch in token_budget_batches(lengths, self.max_frames):
            feats = [compute_features(load_audio(todo[b][1], settings.sample_rate, where=wheres[todo[b][0]]),
                                      settings) for b in batch]  # (T, M) each
            if stats is not None:
                feats = [normalize_with(f, *stats[b]) for b, f in zip(batch, feats)]
            ready = SpeechCollator()([{"src": f, "target": 0, "index": b} for b, f in zip(batch, feats)])
            results = self.search(ready["src"].to(self.device),  # (B, T, M)
                                  src_lengths=ready["src_lengths"].to(self.device))  # (B,)
            for b, nbest in zip(batch, results):
                out[todo[b][0]] = [(one_line(self.tgt_tok.decode(ids)), score) for ids, score in nbest]
        return out

    transcribe = translate


__all__ = ["Transcriber"]
