"""Speech as a data module: manifests of ``audio path<TAB>label`` rows in, batches of frames out.

A user's own recordings are the main path: ``data=speech data.train=<manifest> data.dev=<manifest>
data.test=<manifest>`` (``manifest.read_manifest``: paths relative to the manifest). The Free
Spoken Digit Dataset is a preset of it: ``data.preset=fsdd`` writes the official split's manifests
(``fsdd.write_fsdd_manifests``) into the cache, and ``data.fold=<speaker>`` holds that speaker
out (a speaker-independent test).

Batches: ``src (B, T, M)`` log-mel frames (``features``), ``src_lengths (B,)``, ``labels (B,)``
and ``index (B,)``. The token budget counts frames (``max_tokens`` frames a batch); SpecAugment
masks training frames when ``spec_augment`` is on. The input kind is declared here, once:
``settings()["input"] = "frames"`` travels into the checkpoint (``transformer.kinds``).
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Sequence

import numpy as np
import torch

from transformer.data.core.datamodule import TokenBudgetDataModule
from transformer.data.core.readers import DataFormatError
from transformer.data.speech.dataset import SpeechCollator, SpeechDataset
from transformer.data.speech.features import FeatureSettings, MaskingSettings
from transformer.data.speech.manifest import SpeechRow, read_manifest
from transformer.ranges import Range

log = logging.getLogger(__name__)

PRESETS = ("fsdd",)


def feature_settings(data: dict) -> FeatureSettings:
    """The feature settings a data config (or a checkpoint's ``data`` settings) names."""
    return FeatureSettings(**data.get("features", {}))


def check_speech(d: dict, where: str, complete: bool = False) -> None:
    """A speech config, before anything is written: the preset is known, and every manifest
    reads, each row's audio file there (``manifest.read_manifest`` names the manifest and row);
    ``complete``: a run's, which needs a training manifest or a preset."""
    preset = d.get("preset")
    if preset is not None and preset not in PRESETS:
        raise ValueError(f"{where}.preset={preset!r}: unknown (known: {', '.join(PRESETS)}; null for your own "
                         f"manifests)")
    if d.get("input", "frames") != "frames":
        raise ValueError(f"{where}.input={d.get('input')!r}: a speech data module reads frames")
    if complete and preset is None and d.get("train") is None:
        raise ValueError(f"{where}.train: required (a manifest of audio path<TAB>label rows, or {where}.preset=fsdd)")
    for split in ("train", "dev", "test"):
        if d.get(split) is not None:
            read_manifest(d[split])


class LabelCollator(SpeechCollator):
    """:class:`SpeechCollator` whose targets are the label ids, under ``labels``."""

    def __call__(self, examples):
        batch = super().__call__(examples)
        batch["labels"] = batch.pop("target")
        return batch


class SpeechDataModule(TokenBudgetDataModule):
    """Labelled recordings from manifests (or a preset that writes them).

    Args:
        train, dev, test: manifest paths (``audio path<TAB>label``); dev may instead be carved
            from train (``dev_fraction``).
        name: a short name for run folders.
        preset: ``fsdd`` (the Free Spoken Digit Dataset's official split, written from the
            mirror or a download into ``data_dir``), or None for your own manifests.
        fold: with ``preset=fsdd``, hold this speaker out as the test set (leave one speaker out).
        dev_fraction: without a dev manifest, this seeded share of the training rows validates.
        sample_rate, n_mels: the features (25 ms windows every 10 ms: 100 frames a second).
        spec_augment: mask time and frequency bands of training frames (Park et al. 2019): two
            bands of up to ``freq_mask_width`` mel bins and two spans of up to
            ``time_mask_width`` frames (at most a fifth of the utterance) each.
        max_tokens: frames per batch; max_len: training utterances with more frames are dropped.
        cache_features: keep each utterance's features in memory once computed (small sets).
        input: the input kind (``transformer.kinds``): frames.
        mirror_root: a preset's offline mirror (else ``$TRANSFORMER_DATA_MIRROR``).
    """

    val_split = "dev"
    vocab_size_chosen = False
    check_config = staticmethod(check_speech)  # its config's checks, before the run folder is written

    def __init__(
        self,
        train: str | None = None,
        dev: str | None = None,
        test: str | None = None,
        name: str = "speech",
        preset: str | None = None,
        fold: str | None = None,
        dev_fraction: Annotated[float, Range(0.0, 0.5)] = 0.1,
        sample_rate: Annotated[int, Range(1000, 192_000)] = 16_000,
        n_mels: Annotated[int, Range(1, 512)] = 80,
        spec_augment: bool = False,
        freq_mask_width: Annotated[int, Range(0, 512)] = 27,
        time_mask_width: Annotated[int, Range(0, 100_000)] = 40,
        data_dir: str | os.PathLike = "data/cache",
        max_tokens: Annotated[int, Range(1, 2**31)] = 20_000,
        max_len: Annotated[int, Range(1, 2**24)] = 60_000,
        num_workers: Annotated[int, Range(0, 1024)] = 0,
        seed: int = 0,
        cache_features: bool = True,
        input: str = "frames",
        label_names: Sequence[str] | None = None,
        mirror_root: str | None = None,
    ):
        super().__init__(max_tokens, num_workers, seed)
        self.save_hyperparameters()
        if preset is not None and preset not in PRESETS:
            raise ValueError(f"data.preset={preset!r}: unknown (known: {', '.join(PRESETS)}; null for your own "
                             f"manifests)")
        if input != "frames":
            raise ValueError(f"data.input={input!r}: a speech data module reads frames")
        self.paths = {s: Path(p).resolve() for s, p in (("train", train), ("dev", dev), ("test", test)) if p}
        self.name, self.preset, self.fold, self.dev_fraction = name, preset, fold, dev_fraction
        self.data_dir, self.max_len, self.cache_features = Path(data_dir), max_len, cache_features
        self.spec_augment = spec_augment
        self.masking = MaskingSettings(freq_width=freq_mask_width, time_width=time_mask_width)
        self.features = FeatureSettings(sample_rate=sample_rate, n_mels=n_mels)
        self.test_splits = ["test"] if "test" in self.paths or preset else []
        self.tokenizer = None
        self.labels: list[str] = []
        self.label_names = list(label_names) if label_names else None
        self.mirror_root = mirror_root

    def settings(self) -> dict:
        """What a checkpoint keeps to read a split and an input again: the manifests (absolute),
        the input kind and the feature settings."""
        return {"name": self.name, "input": "frames", "paths": {s: str(p) for s, p in self.paths.items()},
                "features": asdict(self.features)}

    # ----------------------------------------------------------------- reading
    def _preset_manifests(self) -> None:
        """``preset=fsdd``: the official split (or a held-out speaker's fold) written from the
        recordings into ``data_dir/fsdd``."""
        from transformer.data.speech.fsdd import FSDD_SPEAKERS, fsdd_recordings, write_fsdd_manifests

        if self.fold is not None and self.fold not in FSDD_SPEAKERS:
            raise ValueError(f"data.fold={self.fold!r}: not an FSDD speaker ({', '.join(FSDD_SPEAKERS)})")
        recordings = fsdd_recordings(self.data_dir, self.mirror_root)
        written = write_fsdd_manifests(self.data_dir / "fsdd" / "manifests", recordings)
        prefix = f"speaker={self.fold}/" if self.fold else ""
        self.paths = {"train": written[prefix + "train"], "test": written[prefix + "test"], **(
            {"dev": self.paths["dev"]} if "dev" in self.paths else {})}

    def _rows(self) -> dict[str, list[SpeechRow]]:
        """Every split's rows; dev carved from train by seed when it has no manifest."""
        if "train" not in self.paths:
            raise ValueError("data.train is required: a manifest of audio path<TAB>label rows (or data.preset=fsdd)")
        rows = {split: read_manifest(path) for split, path in self.paths.items()}
        if "dev" not in rows:
            order = np.random.default_rng(self.seed).permutation(len(rows["train"]))
            n_dev = max(1, int(round(self.dev_fraction * len(order))))
            dev = set(order[:n_dev].tolist())
            rows["dev"] = [r for i, r in enumerate(rows["train"]) if i in dev]
            rows["train"] = [r for i, r in enumerate(rows["train"]) if i not in dev]
        return rows

    def _build(self) -> None:
        if self.preset is not None:
            self._preset_manifests()
        rows = self._rows()
        self.labels = sorted({r.text for r in rows["train"]}, key=lambda t: (len(t), t) if t.isdigit() else (0, t))
        if len(self.labels) < 2:
            raise ValueError(f"{self.paths['train']}: {len(self.labels)} label(s); a classifier needs at least 2")
        ids = {label: i for i, label in enumerate(self.labels)}
        for split, split_rows in rows.items():
            for row in split_rows:
                if row.text not in ids:
                    path, _, line = row.where.rpartition(":")
                    raise DataFormatError(path, int(line), f"label {row.text!r} is not among the training labels "
                                                           f"({', '.join(self.labels)})")
        for split, split_rows in rows.items():
            ds = SpeechDataset(split_rows, self.features, spec_augment=self.spec_augment and split == "train",
                               masking=self.masking, encode_target=ids.__getitem__, cache=self.cache_features,
                               seed=self.seed)
            lengths = ds.lengths()  # frames, from the files' headers
            self._add_split(split, ds, lengths, lengths, f"{self.name}-{split}")
        log.info("speech data: %s", ", ".join(f"{s} {len(d)} utterances" for s, d in self._datasets.items()))

    def _lengths_of(self, ds) -> list[int]:
        return ds.lengths()

    def _collator(self) -> LabelCollator:
        return LabelCollator(pad_to_multiple=self.pad_to_multiple)

    def raw(self, split: str) -> list[SpeechRow]:
        """A split's rows in manifest order."""
        return self._eval_dataset(split).rows


def frames_of(paths: Sequence[str], data: dict, where: str = "input") -> tuple[torch.Tensor, torch.Tensor]:
    """Audio files -> a padded batch ``(frames (B, T, M), lengths (B,))`` with a checkpoint's
    feature settings (``data["features"]``); a bad file is one ``AudioError`` naming it."""
    from transformer.data.speech.audio import load_audio
    from transformer.data.speech.features import compute_features

    settings = feature_settings(data)
    feats = [compute_features(load_audio(p, settings.sample_rate, where=f"{where}:{i + 1}"), settings)
             for i, p in enumerate(paths)]
    batch = SpeechCollator()([{"src": f, "target": 0, "index": i} for i, f in enumerate(feats)])
    return batch["src"], batch["src_lengths"]


__all__ = ["LabelCollator", "check_speech", "SpeechDataModule", "feature_settings", "frames_of"]
