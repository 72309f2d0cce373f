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

import functools
import logging
import math
import os
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Sequence

import numpy as np
import torch

from transformer.data.core.datamodule import TokenBudgetDataModule
from transformer.data.core.tokenizer import SubwordTokenizer
from transformer.data.core.readers import DataFormatError
from transformer.data.speech.dataset import SpeechCollator, SpeechDataset
from transformer.data.speech.features import NORMALIZE_MODES, FeatureSettings, MaskingSettings, WarpSettings
from transformer.data.speech.manifest import SpeechRow, read_manifest
from transformer.ranges import Range

log = logging.getLogger(__name__)

PRESETS = ("fsdd",)
#: The transcript presets (:class:`SpeechTranscriptDataModule`).
TRANSCRIPT_PRESETS = ("fsdd_strings",)
#: Connected digit strings per split of ``preset=fsdd_strings`` (``fsdd.make_digit_strings``).
FSDD_STRINGS = {"train": 3000, "dev": 300, "test": 600}
# Transcript pieces a second of speech holds, for a checkpoint that recorded none: generous for
# words (read speech runs at about 3 a second), short of characters (about 15).
DEFAULT_PIECES_PER_SECOND = 8.0


def feature_settings(data: dict) -> FeatureSettings:
    """The feature settings a data config (or a checkpoint's ``data`` settings) names."""
    return FeatureSettings(**data.get("features", {}))


def check_speech(d: dict, where: str, complete: bool = False, presets: Sequence[str] = PRESETS) -> None:
    """A speech config, before anything is written: the preset is one of ``presets``, and every
    manifest reads, each row's audio file there (``manifest.read_manifest`` names the manifest and
    row); ``complete``: a run's, which needs a training manifest or a preset."""
    preset = d.get("preset")
    if preset is not None and preset not in presets:
        raise ValueError(f"{where}.preset={preset!r}: unknown (known: {', '.join(presets)}; null for your own "
                         f"manifests)")
    if d.get("input", "frames") != "frames":
        raise ValueError(f"{where}.input={d.get('input')!r}: a speech data module reads frames")
    if complete and preset is None and d.get("train") is None:
        raise ValueError(f"{where}.train: required (a manifest of audio path<TAB>text rows, or {where}.preset="
                         f"{presets[0]})")
    normalize = d.get("normalize", "utterance")
    if normalize not in NORMALIZE_MODES:
        raise ValueError(f"{where}.normalize={normalize!r}: one of {', '.join(NORMALIZE_MODES)}")
    for split in ("train", "dev", "test"):
        if d.get(split) is not None:
            rows = read_manifest(d[split])
            if normalize != "utterance":
                check_speakers(rows, f"{where}.normalize={normalize}")


def check_speakers(rows: Sequence[SpeechRow], why: str) -> None:
    """Every row names its speaker, else one ``DataFormatError`` naming the first row without."""
    for row in rows:
        if not row.speaker:
            path, _, line = row.where.rpartition(":")
            raise DataFormatError(path, int(line or 0), f"no speaker column; {why} needs one (audio path<TAB>text"
                                                        f"<TAB>speaker)")


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
        n_ceps: keep this many cepstral coefficients of the log-mel bands (MFCCs); None keeps
            the bands. The front end's width follows (``${feature_width:...}`` in the configs).
        trim_db: endpointing (``features.trim_silence``): each waveform's leading and trailing
            stretches this many dB under its loudest window are cut before its features, in
            training and at inference alike; None keeps every sample.
        f_min, f_max: the band the mel filterbank spans (Hz; f_max None is half the sample
            rate): recordings whose microphones pass different bands (one cut below 100 Hz,
            another dark above 3 kHz) compared over the band they share.
        spec_augment: mask time and frequency bands of training frames (Park et al. 2019): two
            bands of up to ``freq_mask_width`` mel bins and two spans of up to
            ``time_mask_width`` frames (at most a fifth of the utterance) each.
        time_stretch, freq_warp: warp training frames (``features.WarpSettings``, 0 = off): the
            time axis by a factor in ``1 ± time_stretch`` (a tempo change), the mel axis by one in
            ``1 ± freq_warp`` (another vocal tract's formants), drawn per utterance and epoch. A
            stretched utterance has more frames than its header says: a batch can hold up to
            ``time_stretch`` more than ``max_tokens``.
        edge_crop: cut up to this fraction of each training utterance's frames from each end,
            drawn per utterance and epoch (``features.WarpSettings``): onsets and final
            consonants missing, as in recordings trimmed tightly by someone else; 0 = off.
        channel_eq: another microphone for each training utterance, drawn per epoch: a high-pass
            (corner 0-300 Hz) and shelves below 300 Hz and above 2 kHz of up to ``± channel_eq``
            dB (``features.draw_channel``), before the speaker's statistics; the speaker modes of
            ``normalize`` only; 0 = off.
        speed_perturb: speed perturbation of training audio (Ko et al. 2015; Kaldi's recipe is
            ``[0.9, 1.0, 1.1]``): each utterance's waveform resampled by one of these factors, drawn
            per utterance and epoch, before its features (``SpeechDataset``'s ``speeds``). Unlike
            ``time_stretch`` it moves pitch and formants with the tempo, as a faster talker with a
            shorter vocal tract would. None (or empty) is off; a factor below 1 lengthens an
            utterance, so a batch can hold up to ``1 / min(factors)`` times ``max_tokens``.
        max_tokens: frames per batch; max_len: training utterances with more frames are dropped.
        cache_features: keep each utterance's features in memory once computed (small sets).
        normalize: what each feature is normalised over (``features.NORMALIZE_MODES``):
            ``utterance``, each recording's own frames; ``speaker``, mean and variance of every
            frame of the recording's speaker in its split (Kaldi's per-speaker CMVN: the voice and
            microphone go, a short word's own spectrum stays); ``speaker_mean``, that mean alone.
            The speaker modes need a speaker column in every manifest (``audio path<TAB>label<TAB>
            speaker``; the FSDD preset writes it from the file names); inference takes all the
            files of one call as one speaker (``frames_of``).
        input: the input kind (``transformer.kinds``): frames.
        mirror_root: a preset's offline mirror (else ``$TRANSFORMER_DATA_MIRROR``).
    """

    val_split = "dev"
    vocab_size_chosen = False
    presets = PRESETS
    check_config = staticmethod(check_speech)  # its config's checks, before the run folder is written
    speakers: Sequence[str] = ()  # the training rows' speakers, sorted, once set up

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
        n_ceps: Annotated[int | None, Range(1, 512)] = None,
        trim_db: Annotated[float | None, Range(1.0, 200.0)] = None,
        f_min: Annotated[float, Range(0.0, 96_000.0)] = 0.0,
        f_max: Annotated[float | None, Range(1.0, 96_000.0)] = None,
        spec_augment: bool = False,
        freq_mask_width: Annotated[int, Range(0, 512)] = 27,
        time_mask_width: Annotated[int, Range(0, 100_000)] = 40,
        time_stretch: Annotated[float, Range(0.0, 0.5)] = 0.0,
        freq_warp: Annotated[float, Range(0.0, 0.5)] = 0.0,
        edge_crop: Annotated[float, Range(0.0, 0.45)] = 0.0,
        channel_eq: Annotated[float, Range(0.0, 30.0)] = 0.0,
        speed_perturb: Sequence[float] | None = None,
        data_dir: str | os.PathLike = "data/cache",
        max_tokens: Annotated[int, Range(1, 2**31)] = 20_000,
        max_len: Annotated[int, Range(1, 2**24)] = 60_000,
        num_workers: Annotated[int, Range(0, 1024)] = 0,
        seed: int = 0,
        cache_features: bool = True,
        normalize: str = "utterance",
        input: str = "frames",
        label_names: Sequence[str] | None = None,
        mirror_root: str | None = None,
    ):
        super().__init__(max_tokens, num_workers, seed)
        self.save_hyperparameters()
        if preset is not None and preset not in self.presets:
            raise ValueError(f"data.preset={preset!r}: unknown (known: {', '.join(self.presets)}; null for your own "
                             f"manifests)")
        if input != "frames":
            raise ValueError(f"data.input={input!r}: a speech data module reads frames")
        self.paths = {s: Path(p).resolve() for s, p in (("train", train), ("dev", dev), ("test", test)) if p}
        self.name, self.preset, self.fold, self.dev_fraction = name, preset, fold, dev_fraction
        self.data_dir, self.max_len, self.cache_features = Path(data_dir), max_len, cache_features
        self.spec_augment = spec_augment
        self.masking = MaskingSettings(freq_width=freq_mask_width, time_width=time_mask_width)
        self.warping = WarpSettings(time_stretch, freq_warp, edge_crop, channel_eq)
        self.speeds = tuple(float(f) for f in speed_perturb or ())
        if any(not 0.5 <= f <= 2.0 for f in self.speeds):
            raise ValueError(f"data.speed_perturb={list(self.speeds)}: factors must be in [0.5, 2]")
        if normalize not in NORMALIZE_MODES or (channel_eq and normalize == "utterance"):
            raise ValueError(f"data.normalize={normalize!r}: one of {', '.join(NORMALIZE_MODES[channel_eq > 0:])}"
                             + (" (data.channel_eq works before a speaker's statistics)" if channel_eq else ""))
        self.normalize = normalize
        # a speaker's statistics replace the utterance's own (SpeechDataset applies them)
        self.features = FeatureSettings(sample_rate=sample_rate, n_mels=n_mels, n_ceps=n_ceps, trim_db=trim_db,
                                        f_min=f_min, f_max=f_max, normalize=normalize == "utterance")
        self.test_splits = ["test"] if "test" in self.paths or preset else []
        self.tokenizer, self.labels, self.mirror_root = None, [], mirror_root
        self.label_names = list(label_names) if label_names else None

    def settings(self) -> dict:
        """What a checkpoint keeps to read a split and an input again: the manifests (absolute),
        the input kind, the feature settings and what they are normalised over."""
        return {"name": self.name, "input": "frames", "paths": {s: str(p) for s, p in self.paths.items()},
                "features": asdict(self.features), "normalize": self.normalize}

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
        if self.normalize != "utterance":
            for split_rows in rows.values():
                check_speakers(split_rows, f"data.normalize={self.normalize}")
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
        # the training voices, named by a manifest's third column (speaker-adversarial training)
        self.speakers = sorted({r.speaker for r in rows["train"] if r.speaker})
        ids = {label: i for i, label in enumerate(self.labels)}
        for split, split_rows in rows.items():
            for row in split_rows:
                if row.text not in ids:
                    path, _, line = row.where.rpartition(":")
                    raise DataFormatError(path, int(line), f"label {row.text!r} is not among the training labels "
                                                           f"({', '.join(self.labels)})")
        for split, split_rows in rows.items():
            ds = self._dataset(split, split_rows, ids.__getitem__)
            lengths = ds.lengths()  # frames, from the files' headers
            self._add_split(split, ds, lengths, lengths, f"{self.name}-{split}")
        log.info("speech data: %s", ", ".join(f"{s} {len(d)} utterances" for s, d in self._datasets.items()))

    def _dataset(self, split: str, rows: list[SpeechRow], encode_target) -> SpeechDataset:
        """``split``'s dataset: training's with its augmentations, each split's speakers
        normalised by their own statistics in that split (``normalize``)."""
        train = split == "train"
        return SpeechDataset(rows, self.features, spec_augment=self.spec_augment and train, masking=self.masking,
                             encode_target=encode_target, cache=self.cache_features, seed=self.seed,
                             warping=self._warping(split), speeds=self.speeds if train else (), normalize=self.normalize)

    def _warping(self, split: str) -> WarpSettings:
        """The warps of ``split``'s frames: the configured ones in training, none elsewhere."""
        return self.warping if split == "train" else WarpSettings()

    def _lengths_of(self, ds) -> list[int]:
        return ds.lengths()

    def _collator(self) -> LabelCollator:
        return LabelCollator(pad_to_multiple=self.pad_to_multiple)

    def raw(self, split: str) -> list[SpeechRow]:
        """A split's rows in manifest order."""
        return self._eval_dataset(split).rows


class TranscriptCollator(SpeechCollator):
    """:class:`SpeechCollator` whose targets are transcripts' token ids, framed as the translation
    collator frames a target: ``tgt_in (B, L + 1)`` BOS + ids and ``tgt_out (B, L + 1)`` ids + EOS,
    padded with ``pad_id``, and ``n_tokens`` (real ids of ``tgt_out``, EOS included)."""

    def __init__(self, pad_id: int, bos_id: int, eos_id: int, pad_to_multiple: int = 1):
        super().__init__(pad_to_multiple, target_pad=pad_id)
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id

    def __call__(self, examples):
        batch = super().__call__(examples)
        target, lengths = batch.pop("target"), batch.pop("target_lengths")  # (B, L), (B,)
        b = target.size(0)
        tgt_in = torch.cat([torch.full((b, 1), self.bos_id, dtype=torch.long), target], dim=1)  # (B, L + 1)
        tgt_out = torch.cat([target, torch.full((b, 1), self.pad_id, dtype=torch.long)], dim=1)  # (B, L + 1)
        tgt_out[torch.arange(b), lengths] = self.eos_id
        batch.update(tgt_in=tgt_in, tgt_out=tgt_out, n_tokens=int(lengths.sum()) + b)
        return batch


class SpeechTranscriptDataModule(SpeechDataModule):
    """Transcribed recordings from manifests (``audio path<TAB>transcript``), for the
    sequence-to-sequence tasks (autoregressive ``tasks.translation``, CTC ``tasks.ctc``): frames
    in, a transcript's token ids out.

    The target tokenizer is word-level over the training transcripts (``SubwordTokenizer``,
    ``model="word"``): digits and words are whole tokens, as word error rate counts them. A dev or
    test transcript with a word the training transcripts lack is one ``DataFormatError`` naming
    its manifest row.

    Args beyond :class:`SpeechDataModule`'s (``fold`` and ``label_names`` do not apply, nor
    ``edge_crop``: an utterance's cut edges would lose words its transcript keeps):
        preset: ``fsdd_strings``: connected digit strings made from the FSDD recordings
            (``fsdd.make_digit_strings``: test strings of test recordings only) into
            ``data_dir/fsdd/strings/...`` once, then read as manifests.
        n_strings: strings per split of the preset (default :data:`FSDD_STRINGS`).
        strings_seed: the seed the preset's strings are drawn from (a fixed test set whatever
            the training seed).
        src_lang, tgt_lang: names of the two sides, for the reports (``tgt_lang`` also picks
            validation BLEU's tokenizer).
        tokenizer_path: a saved ``tokenizer.json`` (or ``{tgt: path}``) to read the transcripts
            with instead of one trained on them: a resumed run's, so its ids stay the checkpoint's.
    """

    presets = TRANSCRIPT_PRESETS
    check_config = staticmethod(functools.partial(check_speech, presets=TRANSCRIPT_PRESETS))

    def __init__(self, train: str | None = None, dev: str | None = None, test: str | None = None,
                 name: str = "speech", preset: str | None = None, n_strings: dict | None = None,
                 strings_seed: int = 0, dev_fraction: Annotated[float, Range(0.0, 0.5)] = 0.1,
                 sample_rate: Annotated[int, Range(1000, 192_000)] = 16_000, n_mels: Annotated[int, Range(1, 512)] = 80,
                 n_ceps: Annotated[int | None, Range(1, 512)] = None,
                 trim_db: Annotated[float | None, Range(1.0, 200.0)] = None,
                 f_min: Annotated[float, Range(0.0, 96_000.0)] = 0.0,
                 f_max: Annotated[float | None, Range(1.0, 96_000.0)] = None,
                 spec_augment: bool = False, freq_mask_width: Annotated[int, Range(0, 512)] = 27,
                 time_mask_width: Annotated[int, Range(0, 100_000)] = 40,
                 time_stretch: Annotated[float, Range(0.0, 0.5)] = 0.0, freq_warp: Annotated[float, Range(0.0, 0.5)] = 0.0,
                 channel_eq: Annotated[float, Range(0.0, 30.0)] = 0.0,
                 speed_perturb: Sequence[float] | None = None,
                 data_dir: str | os.PathLike = "data/cache",
                 max_tokens: Annotated[int, Range(1, 2**31)] = 20_000, max_len: Annotated[int, Range(1, 2**24)] = 60_000,
                 num_workers: Annotated[int, Range(0, 1024)] = 0, seed: int = 0, cache_features: bool = True,
                 normalize: str = "utterance", input: str = "frames", src_lang: str = "speech", tgt_lang: str = "en",
                 tokenizer_path: str | os.PathLike | dict | None = None):
        super().__init__(train=train, dev=dev, test=test, name=name, preset=preset, dev_fraction=dev_fraction,
                         sample_rate=sample_rate, n_mels=n_mels, n_ceps=n_ceps, trim_db=trim_db,
                         f_min=f_min, f_max=f_max, spec_augment=spec_augment,
                         freq_mask_width=freq_mask_width, time_mask_width=time_mask_width,
                         time_stretch=time_stretch, freq_warp=freq_warp, channel_eq=channel_eq,
                         speed_perturb=speed_perturb,
                         data_dir=data_dir,
                         max_tokens=max_tokens, max_len=max_len, num_workers=num_workers, seed=seed,
                         cache_features=cache_features, normalize=normalize, input=input)
        self.n_strings = {**FSDD_STRINGS, **(n_strings or {})}
        self.strings_seed, self.src_lang, self.tgt_lang = strings_seed, src_lang, tgt_lang
        self.src_tokenizer = None  # frames have no source tokenizer (transformer.kinds)
        self.tgt_tokenizer: SubwordTokenizer | None = None
        self.tokenizer_path = tokenizer_path["tgt"] if isinstance(tokenizer_path, dict) else tokenizer_path
        self.pieces_per_second = DEFAULT_PIECES_PER_SECOND  # the training transcripts' (transcript_rate), once read

    @property
    def corpus(self) -> dict:
        """What the checkpoint keeps (``data``): :meth:`settings`, and ``pieces_per_second``."""
        return {**self.settings(), "pieces_per_second": self.pieces_per_second}

    def _preset_manifests(self) -> None:
        """``preset=fsdd_strings``: the strings' manifests under ``data_dir/fsdd/strings/<seed and
        counts>``, written once (a split's manifest is written after its audio, so three manifests
        mean a finished set)."""
        from transformer.data.speech.fsdd import fsdd_recordings, make_digit_strings

        counts = ",".join(f"{s}={self.n_strings[s]}" for s in ("train", "dev", "test"))
        out = self.data_dir / "fsdd" / "strings" / f"seed={self.strings_seed},{counts}"
        written = {s: out / f"{s}.tsv" for s in ("train", "dev", "test")}
        if not all(p.is_file() for p in written.values()):
            written = make_digit_strings(fsdd_recordings(self.data_dir), out, n_strings=self.n_strings,
                                         seed=self.strings_seed)
        self.paths = dict(written)

    def _build(self) -> None:
        if self.preset is not None:
            self._preset_manifests()
        rows = self._rows()
        self.tgt_tokenizer = (SubwordTokenizer.load(self.tokenizer_path) if self.tokenizer_path else
                              SubwordTokenizer.train((r.text for r in rows["train"]), vocab_size=100_000, model="word"))
        check_transcripts(rows, self.tgt_tokenizer)
        encode = self.tgt_tokenizer.encode
        for split, split_rows in rows.items():
            ds = self._dataset(split, split_rows, encode)
            lengths = ds.lengths()  # frames, from the files' headers
            self._add_split(split, ds, lengths, lengths, f"{self.name}-{split}")
            if split == "train":
                self.pieces_per_second = transcript_rate([encode(r.text) for r in split_rows], lengths,
                                                         self.features.hop_ms)
        log.info("speech transcripts: %s; %d words", ", ".join(f"{s} {len(d)} utterances" for s, d in
                                                                self._datasets.items()), self.tgt_tokenizer.vocab_size)

    def _collator(self) -> TranscriptCollator:
        tok = self.tgt_tokenizer
        return TranscriptCollator(tok.pad_id, tok.bos_id, tok.eos_id, pad_to_multiple=self.pad_to_multiple)

    def target_ids(self, split: str = "train") -> list[int]:
        """Every distinct token id of a split's transcripts, sorted (a CTC model's output shortlist)."""
        ds = self._eval_dataset(split) if split != "train" else self.dataset(split)
        return sorted({i for row in ds.rows for i in self.tgt_tokenizer.encode(row.text)})


def transcript_rate(targets: Sequence[Sequence[int]], frames: Sequence[int], hop_ms: float) -> float:
    """The most transcript pieces a second of audio holds among the training utterances (each
    at least a tenth of a second long), rounded up to 0.01: what the autoregressive decoder's
    length cap counts a recording's duration in (``tasks.translation.frames_length_cap``)."""
    rates = [len(ids) / max(n * hop_ms / 1000, 0.1) for ids, n in zip(targets, frames)]
    return math.ceil(max(rates, default=DEFAULT_PIECES_PER_SECOND) * 100) / 100


def check_transcripts(rows: dict[str, list[SpeechRow]], tokenizer) -> None:
    """Every word of every transcript is in ``tokenizer``'s vocabulary, else one
    ``DataFormatError`` naming the manifest row and the word."""
    for split_rows in rows.values():
        for row in split_rows:
            unknown = [w for w in row.text.split() if tokenizer.token_to_id(w) is None]
            if unknown:
                path, _, line = row.where.rpartition(":")
                raise DataFormatError(path, int(line), f"transcript word {unknown[0]!r} is not in the vocabulary "
                                                       f"of the training transcripts")


def input_statistics(paths: Sequence[str], data: dict, wheres: Sequence[str] | None = None,
                     speakers: Sequence[str] | None = None) -> list[tuple[torch.Tensor, torch.Tensor | None]] | None:
    """Under a speaker-normalised checkpoint (``data["normalize"]``: ``speaker`` or
    ``speaker_mean``), each input's statistics ``(mean (K,), var (K,) or None)``: those of every
    frame of the inputs that share its speaker (``speakers``, one per path: a manifest's column),
    or with ``speakers=None`` of all the inputs of the call, taken as one speaker's recordings (the
    files given to ``transformer-classify`` or ``transformer-transcribe`` at once; a single file is
    then normalised by its own frames). ``None`` under per-utterance normalisation. A bad file is
    one ``AudioError`` naming it and where it was given (``wheres``; default ``input:<n>``)."""
    from transformer.data.speech.audio import load_audio
    from transformer.data.speech.features import compute_features, frame_statistics

    mode = data.get("normalize", "utterance")
    if mode == "utterance":
        return None
    if mode not in NORMALIZE_MODES:
        raise ValueError(f"data.normalize={mode!r}: one of {', '.join(NORMALIZE_MODES)}")
    settings = feature_settings(data)
    wheres = list(wheres) if wheres is not None else [f"input:{i + 1}" for i in range(len(paths))]
    speakers = list(speakers) if speakers is not None else [""] * len(paths)
    groups: dict[str, list[int]] = {}
    for i, speaker in enumerate(speakers):
        groups.setdefault(speaker, []).append(i)
    stats = {}
    for speaker, items in groups.items():
        mean, var = frame_statistics(compute_features(load_audio(paths[i], settings.sample_rate, where=wheres[i]),
                                                      settings) for i in items)
        stats[speaker] = (mean, var if mode == "speaker" else None)
    return [stats[s] for s in speakers]


def frames_of(paths: Sequence[str], data: dict, where: str = "input",
              stats: Sequence[tuple[torch.Tensor, torch.Tensor | None]] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Audio files -> a padded batch ``(frames (B, T, M), lengths (B,))`` with a checkpoint's
    feature settings (``data["features"]``), each file normalised with its ``stats`` when given
    (:func:`input_statistics`; a speaker-normalised checkpoint without them takes ``paths`` as
    one speaker's); a bad file is one ``AudioError`` naming it."""
    from transformer.data.speech.audio import load_audio
    from transformer.data.speech.features import compute_features, normalize_with

    settings = feature_settings(data)
    if stats is None:
        stats = input_statistics(paths, data, [f"{where}:{i + 1}" for i in range(len(paths))])
    feats = [compute_features(load_audio(p, settings.sample_rate, where=f"{where}:{i + 1}"), settings)
             for i, p in enumerate(paths)]
    if stats is not None:
        feats = [normalize_with(f, *stats[i]) for i, f in enumerate(feats)]
    batch = SpeechCollator()([{"src": f, "target": 0, "index": i} for i, f in enumerate(feats)])
    return batch["src"], batch["src_lengths"]


__all__ = ["DEFAULT_PIECES_PER_SECOND", "LabelCollator", "SpeechDataModule", "SpeechTranscriptDataModule", "TranscriptCollator", "check_speech",
           "check_speakers", "check_transcripts", "feature_settings", "frames_of", "input_statistics", "transcript_rate"]
