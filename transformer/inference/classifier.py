"""Sentences in, label probabilities out, in input order: one classifier or the mean of
several (an ensemble), each reading the text with its own tokenizer.

Shape legend: N sentences, B a batch of them, T pieces, C labels.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from transformer.data.core.batching import pad_ids, token_budget_batches
from transformer.models.pooling import ClsPooling

# (model, its tokenizer, the most pieces its encoder reads)
Member = tuple[nn.Module, object, int]


class SentenceClassifier:
    """Label probabilities of raw sentences.

    Args:
        members: ``(model, tokenizer, max_len)`` per model; an ensemble averages the members'
            probabilities (not their logits), so each member's calibration counts alike.
        labels: label strings; column ``c`` of every result is ``labels[c]``.
        max_tokens: pieces per inference batch (padding included).
        device: where the inputs go; ``None`` = the first member's parameters' device.

    Sentences longer than a member's ``max_len`` are cut to their first ``max_len`` pieces
    (``truncated`` counts them); an empty sentence is classified from no pieces at all.
    """

    def __init__(self, members: Sequence[Member], labels: Sequence[str], max_tokens: int = 4096,
                 device: str | torch.device | None = None):
        if not members:
            raise ValueError("a classifier needs at least one model")
        self.members = list(members)
        self.labels = list(labels)
        self.max_tokens = max_tokens
        self.device = torch.device(device) if device is not None else next(members[0][0].parameters()).device
        self.truncated = 0

    @torch.no_grad()
    def _member_probs(self, model: nn.Module, tokenizer, max_len: int, texts: Sequence[str]) -> torch.Tensor:
        """``(N, C)`` one member's probabilities, rows in input order."""
        ids = tokenizer.encode_batch(list(texts))
        prefix, suffix = tokenizer.framing  # a pretrained family's [CLS] … [SEP]
        # a [CLS] pooling adds one position; a family's first piece (FirstPooling) is one of the pieces
        added = 1 if isinstance(getattr(model, "pooling", None), ClsPooling) else 0
        room = max_len - added - len(prefix) - len(suffix)
        self.truncated += sum(len(x) > room for x in ids)
        ids = [tokenizer.frame(x[:room]) for x in ids]
        out = torch.zeros(len(ids), len(self.labels))  # (N, C)
        for batch in token_budget_batches([max(len(x), 1) for x in ids], self.max_tokens):
            src = pad_ids([ids[i] for i in batch], tokenizer.pad_id).to(self.device)  # (B, T)
            logits = model(src).float()  # (B, C)
            out[torch.as_tensor(batch)] = torch.softmax(logits, dim=-1).cpu()
        return out

    def probabilities(self, texts: Sequence[str]) -> torch.Tensor:
        """``(N, C)``: each sentence's label probabilities, the members' mean."""
        self.truncated = 0
        if not texts:
            return torch.zeros(0, len(self.labels))
        for model, _, _ in self.members:
            model.eval()
        probs = [self._member_probs(m, tok, n, texts) for m, tok, n in self.members]
        return torch.stack(probs).mean(dim=0)  # (M, N, C) -> (N, C)

    def top_k(self, texts: Sequence[str], k: int = 1) -> list[list[tuple[str, float]]]:
        """Per sentence its ``k`` most probable ``(label, probability)`` pairs, best first."""
        probs = self.probabilities(texts)  # (N, C)
        values, indices = probs.topk(min(k, len(self.labels)), dim=-1)  # (N, k)
        return [[(self.labels[i], float(p)) for p, i in zip(vs, ix)] for vs, ix in zip(values.tolist(), indices.tolist())]


class FileClassifier(SentenceClassifier):
    """Label probabilities of files (an input kind other than text, ``transformer.kinds``): each
    input is a file's path, read with the checkpoint's data settings (``data``); ``max_tokens``
    bounds a batch in the input kind's own units."""

    def __init__(self, members: Sequence[Member], labels: Sequence[str], data: dict, max_tokens: int,
                 device: str | torch.device | None = None):
        super().__init__(members, labels, max_tokens, device)
        self.data = dict(data)


class AudioClassifier(FileClassifier):
    """Label probabilities of audio files (a speech classifier, ``transformer.kinds.FRAMES``), read
    into frames with the checkpoint's feature settings; a batch holds up to ``max_tokens`` frames.
    A speaker-normalised checkpoint (``data.normalize=speaker``) normalises each file with the
    statistics of its speaker's files among the inputs (``speakers``), or of all the inputs of
    the call when no speakers are given (``data.speech.datamodule.input_statistics``)."""

    def probabilities(self, texts: Sequence[str], speakers: Sequence[str] | None = None) -> torch.Tensor:
        """``(N, C)``: each file's label probabilities, the members' mean; ``speakers``: one per
        file (a manifest's speaker column), for a speaker-normalised checkpoint."""
        from transformer.data.speech.datamodule import input_statistics

        self.truncated = 0
        if not texts:
            return torch.zeros(0, len(self.labels))
        stats = input_statistics(list(texts), self.data, speakers=speakers)  # once for every member
        for model, _, _ in self.members:
            model.eval()
        probs = [self._member_probs(m, tok, n, texts, stats) for m, tok, n in self.members]
        return torch.stack(probs).mean(dim=0)  # (M, N, C) -> (N, C)

    @torch.no_grad()
    def _member_probs(self, model: nn.Module, tokenizer, max_len: int, paths: Sequence[str],
                      stats: list | None = None) -> torch.Tensor:
        from transformer.data.speech.datamodule import feature_settings, frames_of
        from transformer.data.speech.audio import audio_samples

        settings = feature_settings(self.data)
        lengths = [settings.num_frames(audio_samples(p, settings.sample_rate, where=f"input:{i + 1}"))
                   for i, p in enumerate(paths)]
        out = torch.zeros(len(paths), len(self.labels))  # (N, C)
        for batch in token_budget_batches(lengths, self.max_tokens):
            src, src_lengths = frames_of([paths[i] for i in batch], self.data,
                                         stats=[stats[i] for i in batch] if stats is not None else None)  # (B, T, M), (B,)
            logits = model(src.to(self.device), src_lengths=src_lengths.to(self.device)).float()  # (B, C)
            out[torch.as_tensor(batch)] = torch.softmax(logits, dim=-1).cpu()
        return out


class ImageClassifier(FileClassifier):
    """Label probabilities of image files (an image classifier, ``transformer.kinds.PATCHES``), read
    at the checkpoint's image size (a file of another size is refused, naming it); a batch holds up
    to ``max_tokens`` images."""

    @torch.no_grad()
    def _member_probs(self, model: nn.Module, tokenizer, max_len: int, paths: Sequence[str]) -> torch.Tensor:
        from transformer.data.images.datamodule import images_of

        out = torch.zeros(len(paths), len(self.labels))  # (N, C)
        for start in range(0, len(paths), self.max_tokens):
            src = images_of(paths[start:start + self.max_tokens], self.data)  # (B, C, H, W)
            logits = model(src.to(self.device)).float()  # (B, C)
            out[start:start + len(src)] = torch.softmax(logits, dim=-1).cpu()
        return out


__all__ = ["AudioClassifier", "FileClassifier", "ImageClassifier", "Member", "SentenceClassifier"]
