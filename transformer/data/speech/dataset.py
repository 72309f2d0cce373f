"""Speech rows as a torch Dataset of frames, and the collate that pads them into a batch.

Shape legend: B batch, T frames (the longest in the batch), M mel bins, L target length.

Batch (``SpeechCollator``)::

    src          (B, T, M) float  features, zero-padded after each utterance's frames
    src_lengths  (B,)      long   real frames per utterance
    target                        a label per utterance ``(B,)`` long, or token ids ``(B, L)`` long
                                  padded with ``target_pad``, or the texts as a list of str
    target_lengths (B,)    long   with token ids only: real ids per utterance
    index        (B,)      long   position of each utterance in its dataset
    speakers                      each utterance's speaker, a list of str ("" where the manifest
                                  names none)

Memory stays flat in the corpus size: an item's audio is decoded and framed when it is asked for
(in the loader's workers), and only the rows, plus the frame counts if a batch sampler asks for
them (read from the file headers, no decoding), stay in RAM. ``cache=True`` keeps each item's
unmasked features once computed, for small sets such as FSDD's (about 9 MB of frames).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from transformer.data.core.batching import IGNORE_INDEX
from transformer.data.speech.audio import MAX_SECONDS, audio_samples, load_audio, resample
from transformer.data.speech.features import (NORMALIZE_MODES, FeatureSettings, MaskingSettings, WarpSettings,
                                              compute_features, draw_channel, frame_statistics, normalize_with, spec_augment,
                                              warp)
from transformer.data.speech.manifest import SpeechRow


class SpeechDataset(Dataset):
    """Utterances as ``{"src": (T, M) float32 frames, "target": ..., "index": int, "speaker": str}``.

    Args:
        rows: :class:`SpeechRow` s (from :func:`~transformer.data.speech.manifest.read_manifest`).
        settings: how audio becomes frames.
        spec_augment: mask each item's frames (training only); the masks are drawn from a
            generator seeded by ``(seed, epoch, index)``, so they are the same whatever the
            number of loader workers, and differ from epoch to epoch (:meth:`set_epoch`).
        masking: the masks' numbers and widths.
        warping: time and mel-axis warps of each item's frames (training only; before the masks,
            from the same per-item generator); the default is none.
        speeds: speed perturbation (Ko et al. 2015, Kaldi's 0.9 / 1.0 / 1.1): each item's
            waveform is resampled by one of these factors, drawn per item and epoch from the same
            generator (first), before its features are computed. A factor ``f`` plays the
            recording ``f`` times as fast: ``N / f`` samples, every frequency times ``f``, so the
            pitch and formants move with the tempo (``warping``'s time stretch keeps them). Empty
            (the default) is off; with ``cache`` each factor's features are kept.
        encode_target: turns a row's text into the target (a label id, token ids); ``None``
            keeps the text.
        cache: keep each item's unmasked features in memory once computed (small sets).
        seed: the masks' seed.
        max_seconds: longer audio files are refused (one error line naming file and row).
        normalize: ``utterance`` (``settings.normalize``: each utterance over its own frames),
            ``speaker`` (mean and variance of every frame of the row's speaker in these rows,
            from unperturbed audio) or ``speaker_mean`` (that mean alone). The speaker modes need
            every row's speaker (a manifest's third column) and compute the statistics once, here
            (:attr:`speaker_stats`), unless ``speaker_stats`` gives them.
        speaker_stats: ``{speaker: (mean (K,), var (K,))}`` to normalise with instead.
    """

    def __init__(
        self,
        rows: Sequence[SpeechRow],
        settings: FeatureSettings = FeatureSettings(),
        spec_augment: bool = False,
        masking: MaskingSettings = MaskingSettings(),
        encode_target: Callable[[str], Any] | None = None,
        cache: bool = False,
        seed: int = 0,
        max_seconds: float = MAX_SECONDS,
        warping: WarpSettings = WarpSettings(),
        speeds: Sequence[float] = (),
        normalize: str = "utterance",
        speaker_stats: Mapping[str, tuple[Tensor, Tensor]] | None = None,
    ):
        if normalize not in NORMALIZE_MODES:
            raise ValueError(f"normalize={normalize!r}: one of {', '.join(NORMALIZE_MODES)}")
        if warping.channel_eq and normalize == "utterance":
            raise ValueError("channel_eq needs normalize=speaker or speaker_mean: each utterance's own "
                             "normalisation removes a channel already")
        self.rows = list(rows)
        self.normalize = normalize
        # the speaker's statistics replace the utterance's own
        self.settings = settings if normalize == "utterance" else replace(settings, normalize=False)
        self.masking = masking
        self.spec_augment, self.encode_target = spec_augment, encode_target
        self.seed, self.epoch, self.max_seconds = seed, 0, max_seconds
        self.warping = warping
        self.speeds = tuple(float(f) for f in speeds)
        if any(not 0.5 <= f <= 2.0 for f in self.speeds):
            raise ValueError(f"speed factors must be in [0.5, 2], got {list(self.speeds)}")
        self._cache: dict[tuple[int, float], Tensor] | None = {} if cache else None
        self.speaker_stats: dict[str, tuple[Tensor, Tensor]] = {}
        if normalize != "utterance":
            missing = next((r for r in self.rows if not r.speaker), None)
            if missing is not None:
                raise ValueError(f"{missing.where or missing.path}: normalize={normalize} needs each row's speaker "
                                 f"(a third manifest column: audio path<TAB>text<TAB>speaker)")
            self.speaker_stats = dict(speaker_stats) if speaker_stats is not None else self._speaker_statistics()

    def _speaker_statistics(self) -> dict[str, tuple[Tensor, Tensor]]:
        """Each speaker's frame mean and variance over their rows, unperturbed audio."""
        by_speaker: dict[str, list[int]] = {}
        for i, row in enumerate(self.rows):
            by_speaker.setdefault(row.speaker, []).append(i)
        return {spk: frame_statistics(self._raw_features(i) for i in items) for spk, items in by_speaker.items()}

    def __len__(self) -> int:
        return len(self.rows)

    def select(self, indices: Sequence[int]) -> "SpeechDataset":
        """The same dataset over the rows at ``indices`` (the training length filter's survivors)."""
        kept = SpeechDataset([self.rows[i] for i in indices], self.settings, self.spec_augment, self.masking,
                             self.encode_target, self._cache is not None, self.seed, self.max_seconds, self.warping,
                             self.speeds, self.normalize, self.speaker_stats)
        return kept

    def set_epoch(self, epoch: int) -> None:
        """Draw a new set of masks: called by the training loop at the start of each epoch."""
        self.epoch = epoch

    def features(self, i: int, speed: float = 1.0, channel: Tensor | None = None) -> Tensor:
        """Unmasked, normalised frames of item ``i`` (its waveform played ``speed`` times as fast;
        ``channel``, ``(K,)``, added to every frame before the speaker's statistics normalise
        them): ``(T, M)`` float32."""
        feats = self._raw_features(i, speed)
        if channel is not None:
            feats = feats + channel  # (T, K) + (K,)
        if self.normalize == "utterance":
            return feats
        mean, var = self.speaker_stats[self.rows[i].speaker]
        return normalize_with(feats, mean, var if self.normalize == "speaker" else None)

    def _raw_features(self, i: int, speed: float = 1.0) -> Tensor:
        """Item ``i``'s frames before any speaker's statistics (cached with ``cache``)."""
        key = (i, speed)
        if self._cache is not None and key in self._cache:
            return self._cache[key]
        row = self.rows[i]
        rate = self.settings.sample_rate
        waveform = load_audio(row.path, rate, self.max_seconds, where=row.where or None)  # (N,)
        if speed != 1.0:
            # read as if recorded at speed x rate, brought back to rate: (N,) -> (N / speed,)
            waveform = resample(waveform, round(rate * speed), rate)
        feats = compute_features(waveform, self.settings)  # (T, M)
        if self._cache is not None:
            self._cache[key] = feats
        return feats

    def mask_generator(self, i: int) -> torch.Generator:
        """The generator item ``i``'s masks are drawn from in the current epoch."""
        state = np.random.SeedSequence([self.seed, self.epoch, i]).generate_state(1, dtype=np.uint64)[0]
        return torch.Generator().manual_seed(int(state) & ((1 << 63) - 1))

    def __getitem__(self, i: int) -> dict:
        generator = self.mask_generator(i) if self.spec_augment or self.warping.active or self.speeds else None
        speed = 1.0
        if self.speeds:
            speed = self.speeds[int(torch.randint(0, len(self.speeds), (), generator=generator))]
        channel = draw_channel(generator, self.warping.channel_eq, self.settings) if self.warping.channel_eq else None
        feats = self.features(i, speed, channel)
        if self.warping.active:
            feats = warp(feats, generator, self.warping)
        if self.spec_augment:
            feats = spec_augment(feats, generator, self.masking)
        text = self.rows[i].text
        target = self.encode_target(text) if self.encode_target is not None else text
        return {"src": feats, "target": target, "index": i, "speaker": self.rows[i].speaker}

    def num_frames(self, i: int) -> int:
        """Frames item ``i`` will have, from its file's header (no decoding)."""
        row = self.rows[i]
        n = audio_samples(row.path, self.settings.sample_rate, self.max_seconds, where=row.where or None)
        return self.settings.num_frames(n)

    def lengths(self) -> list[int]:
        """Frame counts of every item, for length-bucketed batching (headers only)."""
        return [self.num_frames(i) for i in range(len(self))]


class SpeechCollator:
    """Pads :class:`SpeechDataset` items into one batch (see the module docstring).

    Args:
        pad_to_multiple: round the frame width T up to a multiple of this (a compiled step sees
            fewer shapes).
        target_pad: the value token-id targets are padded with (ignored by cross-entropy).
    """

    def __init__(self, pad_to_multiple: int = 1, target_pad: int = IGNORE_INDEX):
        self.pad_to_multiple, self.target_pad = pad_to_multiple, target_pad

    def __call__(self, examples: Sequence[dict]) -> dict:
        feats = [e["src"] for e in examples]
        lengths = torch.tensor([f.shape[0] for f in feats], dtype=torch.long)  # (B,)
        m = self.pad_to_multiple
        width = -(-int(lengths.max()) // m) * m
        src = feats[0].new_zeros(len(feats), width, feats[0].shape[1])  # (B, T, M)
        for b, f in enumerate(feats):
            src[b, : f.shape[0]] = f
        batch = {"src": src, "src_lengths": lengths,
                 "index": torch.tensor([e["index"] for e in examples], dtype=torch.long),
                 "speakers": [e.get("speaker", "") for e in examples]}
        batch.update(self._targets([e["target"] for e in examples]))
        return batch

    def _targets(self, targets: list) -> dict:
        if all(isinstance(t, str) for t in targets):
            return {"target": targets}
        if all(isinstance(t, (int, np.integer)) for t in targets):
            return {"target": torch.tensor(targets, dtype=torch.long)}  # (B,)
        seqs = [torch.as_tensor(t, dtype=torch.long) for t in targets]
        lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)  # (B,)
        padded = torch.full((len(seqs), max((len(q) for q in seqs), default=0)), self.target_pad,
                            dtype=torch.long)  # (B, L)
        for b, s in enumerate(seqs):
            padded[b, : len(s)] = s
        return {"target": padded, "target_lengths": lengths}
