"""Reading audio files: a float32 mono waveform at the model's sample rate, or one error line.

libsndfile (through ``soundfile``) decodes the file (WAV, FLAC, OGG and the other formats it
knows); soxr resamples. The model rate is 16 kHz (:data:`MODEL_SAMPLE_RATE`): the rate of
LibriSpeech and of Common Voice's usual conversions, so a user's speech keeps its whole band up
to 8 kHz. 8 kHz recordings (FSDD, telephone speech) are upsampled to it, which adds no
information: their mel bins above 4 kHz hold only the log floor. A data config that knows all its
audio is 8 kHz can choose ``sample_rate=8000`` instead and skip that work.

Every problem with an input file is one :class:`AudioError` whose message is a single line that
names the file (and the manifest row it came from): not audio, truncated, empty, no samples,
longer than the bound. The bound (:data:`MAX_SECONDS`, checked from the header before anything
is decoded) keeps memory flat whatever a manifest points at; a 10-minute recording reads fine.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

try:
    import soundfile as sf
    import soxr
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError(f"speech input needs the speech extra: pip install 'transformer[speech]' ({e})") from e

MODEL_SAMPLE_RATE = 16_000
# 20 minutes: a 10-minute recording (60,000 frames, the long-input case) reads, and
# the waveform of the longest accepted file stays under 80 MB of float32 at 16 kHz.
MAX_SECONDS = 1200.0

# libsndfile repairs a WAV whose data chunk is cut short and reads what is there; its header
# report says so ("data : 4768 (should be 56)"). Writers that stream set the size to 0 or
# all ones when they cannot seek back, which is not a truncation.
_SHORT_CHUNK = re.compile(r"^data\s*:\s*(\d+)\s*\(should be (\d+)\)", re.MULTILINE)
_UNKNOWN_SIZES = {0, 0xFFFFFFFF, 0x7FFFFFFF}


class AudioError(ValueError):
    """An audio file cannot be used: ``[where: ]path: problem``, on one line.

    ``where`` is the manifest row the file came from (``train.tsv:12``), when there is one.
    """

    def __init__(self, path: str | os.PathLike, problem: str, where: str | None = None):
        problem = " ".join(str(problem).split())  # libsndfile's messages may span lines
        prefix = f"{where}: " if where else ""
        super().__init__(f"{prefix}{path}: {problem}")
        self.path, self.problem, self.where = str(path), problem, where


def _checked_info(path: Path, max_seconds: float, where: str | None):
    """The file's header as libsndfile reads it, once every problem the header shows is ruled
    out: missing, empty, not audio, truncated, no samples, too long."""
    if not path.is_file():
        raise AudioError(path, "no such file", where)
    if path.stat().st_size == 0:
        raise AudioError(path, "empty file (0 bytes)", where)
    try:
        info = sf.info(str(path))
    except (sf.LibsndfileError, RuntimeError) as e:
        reason = str(e).split(": ", 1)[-1] if "Error opening" in str(e) else str(e)
        raise AudioError(path, f"not a readable audio file ({reason})", where) from None
    match = _SHORT_CHUNK.search(info.extra_info or "")
    if match:
        declared, present = int(match.group(1)), int(match.group(2))
        if declared not in _UNKNOWN_SIZES and present < declared:
            raise AudioError(path, f"truncated file: its header declares {declared} bytes of audio, "
                                   f"the file holds {present}", where)
    if info.frames <= 0:
        raise AudioError(path, "no audio samples (0 frames)", where)
    seconds = info.frames / info.samplerate
    if seconds > max_seconds:
        raise AudioError(path, f"{seconds:.1f} s long, over the {max_seconds:g} s bound (max_seconds)", where)
    return info


def read_audio(
    path: str | os.PathLike, max_seconds: float = MAX_SECONDS, where: str | None = None
) -> tuple[np.ndarray, int]:
    """Decode ``path`` at its own sample rate.

    Returns:
        ``(waveform, sample_rate)``: ``(N,)`` float32 in [-1, 1]; several channels are mixed
        down to one by their mean.

    Raises:
        AudioError: the file is missing, empty, not audio, truncated, holds no samples, or is
            longer than ``max_seconds`` (checked from the header, before decoding).
    """
    path = Path(path)
    info = _checked_info(path, max_seconds, where)
    try:
        data, rate = sf.read(str(path), dtype="float32", always_2d=True)  # (N, channels)
    except (sf.LibsndfileError, RuntimeError) as e:
        reason = str(e).removeprefix("Error : ")
        raise AudioError(path, f"truncated or damaged file: decoding failed ({reason})", where) from None
    if len(data) < info.frames:  # a compressed stream (FLAC, OGG) that ends early
        raise AudioError(path, f"truncated file: {len(data)} of the {info.frames} frames its header declares",
                         where)
    # Mix down rather than pick a channel: a stereo recording's channels hold the same speech.
    return data.mean(axis=1, dtype=np.float32), rate  # (N, channels) -> (N,)


def resample(waveform: np.ndarray, orig_rate: int, rate: int) -> np.ndarray:
    """``(N,)`` float32 at ``orig_rate`` -> ``(M,)`` float32 at ``rate`` (soxr, high quality);
    ``M = N * rate / orig_rate`` rounded half up (:func:`resampled_length`): the duration is kept."""
    if orig_rate == rate:
        return waveform
    return soxr.resample(waveform, orig_rate, rate, quality="HQ").astype(np.float32, copy=False)


def resampled_length(n_samples: int, orig_rate: int, rate: int) -> int:
    """Length of :func:`resample`'s output, known from a header without decoding."""
    # soxr rounds half up; integer arithmetic keeps that exact for any length.
    return (2 * n_samples * rate + orig_rate) // (2 * orig_rate)


def load_audio(
    path: str | os.PathLike,
    sample_rate: int = MODEL_SAMPLE_RATE,
    max_seconds: float = MAX_SECONDS,
    where: str | None = None,
) -> np.ndarray:
    """Read ``path`` as one float32 channel at ``sample_rate`` (resampled when the file's rate
    differs, channels mixed down by their mean).

    Args:
        path: a WAV, FLAC or other libsndfile-readable file.
        sample_rate: the rate the model's features expect (16 kHz by default).
        max_seconds: longer files are refused from their header, before decoding.
        where: the manifest row the path came from, for error messages (``train.tsv:12``).

    Returns:
        ``(N,)`` float32 waveform.

    Raises:
        AudioError: one line naming the file (and row) for every unusable input.
    """
    waveform, rate = read_audio(path, max_seconds=max_seconds, where=where)
    return resample(waveform, rate, sample_rate)


def audio_samples(
    path: str | os.PathLike,
    sample_rate: int = MODEL_SAMPLE_RATE,
    max_seconds: float = MAX_SECONDS,
    where: str | None = None,
) -> int:
    """How many samples :func:`load_audio` will return, from the header alone (lengths for
    batching without decoding a corpus). Raises :class:`AudioError` as :func:`read_audio` does
    for what the header shows (missing, not audio, truncated, empty, too long)."""
    info = _checked_info(Path(path), max_seconds, where)
    return resampled_length(info.frames, info.samplerate, sample_rate)


def silent_wav(sample_rate: int = MODEL_SAMPLE_RATE, seconds: float = 0.5) -> bytes:
    """The bytes of a 16-bit WAV file of ``seconds`` of silence (a served speech model's
    warm-up upload)."""
    import io

    buffer = io.BytesIO()
    sf.write(buffer, np.zeros(int(sample_rate * seconds), dtype=np.float32), sample_rate, format="WAV",
             subtype="PCM_16")
    return buffer.getvalue()
