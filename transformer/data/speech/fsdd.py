"""The Free Spoken Digit Dataset (FSDD) as a preset of the manifest path, and the connected
digit strings made from it.

FSDD (github.com/Jakobovski/free-spoken-digit-dataset, CC BY-SA 4.0) holds 3,000 WAV files, mono
8 kHz 16-bit, 6 speakers x 10 digits x 50 recordings, named ``{digit}_{speaker}_{index}.wav``.
Each file is fetched like every other dataset file (:func:`~transformer.data.core.sources.fetch_source`:
cache, then the mirror root, then the commit-pinned upstream URL, sha256-checked); the checksums
ship beside this module in ``fsdd.sha256``.

What this module writes is ordinary files a user could have made: manifests for the official
split (indices 0-4 are the test set, upstream's README) and for leave-one-speaker-out folds, and
connected digit strings (the classic connected-digit task, as TIDIGITS): WAV files that join 2-7
recordings of one speaker with silences, and their manifests with targets like ``4 1 7 9``.
"""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path
from typing import Iterable, Mapping, NamedTuple, Sequence

import numpy as np
import soundfile as sf

from transformer.data.core.sources import Source, fetch_source, pinned_sources
from transformer.data.speech.audio import read_audio, resample
from transformer.data.speech.manifest import write_manifest
from transformer.files import atomic_open, write_text

log = logging.getLogger(__name__)

FSDD_COMMIT = "26eb9aaf76e81b692f806f9140c2d2777410d7a1"
FSDD_URL = f"https://raw.githubusercontent.com/Jakobovski/free-spoken-digit-dataset/{FSDD_COMMIT}/"
FSDD_SPEAKERS = ("george", "jackson", "lucas", "nicolas", "theo", "yweweler")
FSDD_SAMPLE_RATE = 8000
N_INDICES = 50
TEST_INDICES = range(5)  # upstream's README: recordings 0-4 of each speaker and digit are the test set
SPLITS = ("train", "dev", "test")


class Recording(NamedTuple):
    """One FSDD recording: what was said, by whom, which take, and the local file."""

    digit: int
    speaker: str
    index: int
    path: Path

    @property
    def split(self) -> str:
        """``"test"`` or ``"train"`` in the official split."""
        return "test" if self.index in TEST_INDICES else "train"

    @property
    def name(self) -> str:
        """Upstream's file stem, ``{digit}_{speaker}_{index}``."""
        return f"{self.digit}_{self.speaker}_{self.index}"


def fsdd_relpath(digit: int, speaker: str, index: int) -> str:
    """A recording's path under a dataset root (the mirror's and the cache's layout)."""
    return f"fsdd/recordings/{digit}_{speaker}_{index}.wav"


@functools.lru_cache(maxsize=1)
def fsdd_sources() -> dict[str, Source]:
    """Every recording's :class:`Source` (relative path, pinned URL, sha256), keyed by relpath."""
    return pinned_sources(Path(__file__).with_name("fsdd.sha256"), FSDD_URL)


def _choice(name: str, given: Iterable | None, allowed: Sequence) -> list:
    if given is None:
        return list(allowed)
    given = list(given)
    unknown = [g for g in given if g not in allowed]
    if unknown:
        raise ValueError(f"FSDD has no {name} {unknown}; choose from {list(allowed)}")
    return given


def fsdd_recordings(
    cache_dir: str | os.PathLike = "data/cache",
    mirror_root: str | os.PathLike | None = None,
    base_url: str | None = None,
    speakers: Iterable[str] | None = None,
    digits: Iterable[int] | None = None,
    indices: Iterable[int] | None = None,
) -> list[Recording]:
    """Local, checksum-verified FSDD recordings (all 3,000 by default, or the chosen subset).

    Args:
        cache_dir: where fetched files are kept (``cache_dir/fsdd/recordings/...``).
        mirror_root: the offline mirror (else ``$TRANSFORMER_DATA_MIRROR``); see
            :func:`~transformer.data.core.sources.fetch`.
        base_url: replaces the upstream URL (tests stand a local server in for GitHub).
        speakers, digits, indices: keep only these (``None``: all).

    Returns:
        The recordings, ordered by speaker, digit and index.
    """
    speakers = _choice("speaker", speakers, FSDD_SPEAKERS)
    digits = _choice("digit", digits, range(10))
    indices = _choice("index", indices, range(N_INDICES))
    sources = fsdd_sources()
    recordings = []
    # One line a speaker, not one a file: the fetcher's per-file lines are for data sets of a few files.
    fetch_log = logging.getLogger(fetch_source.__module__)
    level = fetch_log.level
    fetch_log.setLevel(max(level, logging.WARNING))
    try:
        for speaker in speakers:
            for digit in digits:
                for index in indices:
                    src = sources[fsdd_relpath(digit, speaker, index)]
                    path = fetch_source(src, cache_dir, mirror_root, base_url)
                    recordings.append(Recording(digit, speaker, index, path))
            log.info("FSDD: %d recordings of %s ready", len(digits) * len(indices), speaker)
    finally:
        fetch_log.setLevel(level)
    return recordings


def write_fsdd_manifests(out_dir: str | os.PathLike, recordings: Sequence[Recording]) -> dict[str, Path]:
    """Manifests of the digit classification presets, label = the digit, speaker = the file
    name's speaker (the third column, for ``data.normalize=speaker``).

    Writes ``train.tsv`` and ``test.tsv`` (the official split) and, for each speaker, the
    leave-one-speaker-out fold ``speaker=<name>/{train,test}.tsv`` (that speaker's recordings are
    the test set, everyone else's the training set: a speaker-independent test).

    Returns:
        ``{"train": path, "test": path, "speaker=george/train": path, ...}``.
    """
    out_dir = Path(out_dir)
    folds = {"": lambda r: r.split == "test"}
    for speaker in sorted({r.speaker for r in recordings}):
        folds[f"speaker={speaker}/"] = lambda r, s=speaker: r.speaker == s
    written = {}
    for prefix, is_test in folds.items():
        (out_dir / prefix).mkdir(parents=True, exist_ok=True)
        for split in ("train", "test"):
            rows = [(r.path, str(r.digit), r.speaker) for r in recordings if is_test(r) == (split == "test")]
            written[prefix + split] = write_manifest(out_dir / prefix / f"{split}.tsv", rows)
    return written


def string_pools(recordings: Sequence[Recording], seed: int = 0, dev_fraction: float = 0.1) -> dict[str, list[Recording]]:
    """The recordings each split's strings may use: ``test`` the official test recordings,
    ``dev`` a seeded ``dev_fraction`` of the official training recordings of each speaker and
    digit, ``train`` the rest. No recording is in two pools."""
    rng = np.random.default_rng([seed, 99])
    pools: dict[str, list[Recording]] = {s: [] for s in SPLITS}
    groups: dict[tuple[str, int], list[Recording]] = {}
    for r in recordings:
        if r.split == "test":
            pools["test"].append(r)
        else:
            groups.setdefault((r.speaker, r.digit), []).append(r)
    for key in sorted(groups):
        group = sorted(groups[key], key=lambda r: r.index)
        # at least one dev take per speaker and digit, while a take stays for training
        n_dev = min(max(1, round(dev_fraction * len(group))), len(group) - 1) if dev_fraction > 0 else 0
        dev = set(rng.choice(len(group), size=n_dev, replace=False).tolist())
        for i, r in enumerate(group):
            pools["dev" if i in dev else "train"].append(r)
    return pools


class DigitString(NamedTuple):
    """One connected digit string: its recordings in order, the silences between them (ms),
    each recording's gain (dB) and a gain for the whole string that keeps it from clipping (dB,
    0 or below)."""

    recordings: tuple[Recording, ...]
    silences_ms: tuple[int, ...]
    gains_db: tuple[float, ...]
    scale_db: float = 0.0

    @property
    def text(self) -> str:
        """The target: the digits spoken, separated by spaces (``"4 1 7 9"``)."""
        return " ".join(str(r.digit) for r in self.recordings)


def plan_strings(
    pool: Sequence[Recording],
    n: int,
    rng: np.random.Generator,
    n_digits: tuple[int, int] = (2, 7),
    silence_ms: tuple[int, int] = (50, 300),
    gain_db: tuple[float, float] = (-6.0, 6.0),
) -> list[DigitString]:
    """Draw ``n`` strings from ``pool``: each picks a speaker, a length uniform in ``n_digits``,
    that many of the speaker's recordings (distinct while the speaker has enough), silences
    uniform in ``silence_ms`` between them and gains uniform in ``gain_db``."""
    by_speaker: dict[str, list[Recording]] = {}
    for r in sorted(pool, key=lambda r: (r.speaker, r.digit, r.index)):
        by_speaker.setdefault(r.speaker, []).append(r)
    speakers = sorted(by_speaker)
    if n > 0 and not speakers:
        raise ValueError("no recordings to make digit strings from")
    strings = []
    for _ in range(n):
        mine = by_speaker[speakers[rng.integers(len(speakers))]]
        k = int(rng.integers(n_digits[0], n_digits[1] + 1))
        picks = rng.choice(len(mine), size=k, replace=k > len(mine))
        silences = rng.integers(silence_ms[0], silence_ms[1] + 1, size=k - 1)
        gains = rng.uniform(gain_db[0], gain_db[1], size=k)
        strings.append(DigitString(tuple(mine[i] for i in picks), tuple(int(s) for s in silences),
                                   tuple(round(float(g), 4) for g in gains)))
    return strings


def _mix(string: DigitString, audio: Mapping[Recording, np.ndarray], sample_rate: int) -> np.ndarray:
    parts = []
    for i, (r, g) in enumerate(zip(string.recordings, string.gains_db)):
        if i:
            parts.append(np.zeros(string.silences_ms[i - 1] * sample_rate // 1000, dtype=np.float32))
        parts.append(audio[r] * np.float32(10 ** ((g + string.scale_db) / 20)))
    return np.concatenate(parts)  # (N,)


def render_string(string: DigitString, audio: Mapping[Recording, np.ndarray],
                  sample_rate: int = FSDD_SAMPLE_RATE) -> tuple[np.ndarray, DigitString]:
    """The string's waveform: each recording times its gain, zeros between them.

    A string whose peak would clip is scaled down as a whole (``scale_db`` of the string
    returned), so the WAV holds exactly the gained recordings and no clipped samples.

    Returns:
        ``(waveform (N,) float32, the string with its scale_db)``.
    """
    wave = _mix(string, audio, sample_rate)
    peak = float(np.abs(wave).max())
    if peak > 0.99:  # 16-bit PCM tops out at 1.0
        scale = round(20 * np.log10(0.99 / peak) - 1e-4, 4)  # rounded down: the peak ends under 0.99
        string = string._replace(scale_db=scale)
        wave = _mix(string, audio, sample_rate)
    return wave, string


def _write_wav(path: Path, wave: np.ndarray, sample_rate: int) -> None:
    with atomic_open(path, "wb") as f:
        sf.write(f, wave, sample_rate, format="WAV", subtype="PCM_16")


def _write_split(out_dir: Path, split: str, plans: Sequence[DigitString], audio: dict[Recording, np.ndarray]) -> Path:
    """One split's WAV files, then its sources table and manifest; returns the manifest."""
    (out_dir / split).mkdir(parents=True, exist_ok=True)
    rows, sources = [], []
    for i, plan in enumerate(plans):
        for r in plan.recordings:
            if r not in audio:
                wave, rate = read_audio(r.path)
                audio[r] = resample(wave, rate, FSDD_SAMPLE_RATE)
        wave, plan = render_string(plan, audio)
        path = out_dir / split / f"{i:05d}.wav"
        _write_wav(path, wave, FSDD_SAMPLE_RATE)
        rows.append((path, plan.text))
        sources.append(f"{split}/{path.name}\t{' '.join(r.name for r in plan.recordings)}\t"
                       f"{' '.join(map(str, plan.silences_ms))}\t{' '.join(f'{g:.4f}' for g in plan.gains_db)}\t"
                       f"{plan.scale_db:.4f}\n")
    write_text(out_dir / f"{split}.sources.tsv", "audio\trecordings\tsilences_ms\tgains_db\tscale_db\n" + "".join(sources))
    return write_manifest(out_dir / f"{split}.tsv", rows)


def make_digit_strings(
    recordings: Sequence[Recording],
    out_dir: str | os.PathLike,
    n_strings: Mapping[str, int] | None = None,
    seed: int = 0,
    dev_fraction: float = 0.1,
    n_digits: tuple[int, int] = (2, 7),
    silence_ms: tuple[int, int] = (50, 300),
    gain_db: tuple[float, float] = (-6.0, 6.0),
) -> dict[str, Path]:
    """Write connected digit strings and their manifests under ``out_dir``.

    Each split's strings use only that split's recordings (:func:`string_pools`: test strings the
    official test recordings; train and dev disjoint parts of the training recordings), each
    string one speaker's. Everything is drawn from ``seed``: the same recordings, seed and
    settings give the same files, byte for byte.

    Writes, per split: ``{split}/{i:05d}.wav`` (16-bit PCM, 8 kHz), the manifest ``{split}.tsv``
    (``{split}/00000.wav<TAB>4 1 7 9``) and ``{split}.sources.tsv`` (which recordings, silences,
    gains and anti-clipping scale made each file). The manifest is written after the split's audio.

    Args:
        recordings: FSDD recordings (:func:`fsdd_recordings`).
        n_strings: strings per split; default ``{"train": 3000, "dev": 300, "test": 600}``.
        seed: the seed of the dev carve and of every string.
        dev_fraction: share of each speaker's and digit's training recordings kept for dev.
        n_digits, silence_ms, gain_db: inclusive ranges of digits per string, of each silence
            between digits, and of each recording's gain.

    Returns:
        ``{split: manifest path}``.
    """
    n_strings = dict(n_strings) if n_strings is not None else {"train": 3000, "dev": 300, "test": 600}
    unknown = set(n_strings) - set(SPLITS)
    if unknown:
        raise ValueError(f"digit strings: unknown splits {sorted(unknown)}; choose from {SPLITS}")
    if not (1 <= n_digits[0] <= n_digits[1] and 0 <= silence_ms[0] <= silence_ms[1] and gain_db[0] <= gain_db[1]):
        raise ValueError(f"digit strings: bad ranges n_digits={n_digits} silence_ms={silence_ms} gain_db={gain_db}")
    out_dir = Path(out_dir)
    pools = string_pools(recordings, seed, dev_fraction)
    audio: dict[Recording, np.ndarray] = {}  # decoded once however many strings use a recording
    written = {}
    for split_id, split in enumerate(SPLITS):
        if not n_strings.get(split):
            continue
        rng = np.random.default_rng([seed, split_id])  # one stream per split: a split's count leaves the others alone
        plans = plan_strings(pools[split], n_strings[split], rng, n_digits, silence_ms, gain_db)
        written[split] = _write_split(out_dir, split, plans, audio)
        log.info("digit strings: %d %s strings in %s", len(plans), split, out_dir)
    return written
