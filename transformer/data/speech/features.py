"""Log-mel (or MFCC) features and SpecAugment masking: a waveform in, ``(T, K)`` frames out.

Shape legend: N samples, T frames, F = n_fft // 2 + 1 frequency bins, M = n_mels,
C = n_ceps, K = the features per frame (C with cepstra, else M).

The lectures' framing: a 25 ms window every 10 ms, so one second is 100 frames. The short-time
Fourier transform is ``torch.stft`` (Hann window, zero-padded to ``n_fft``, the next power of two),
the mel filterbank is librosa's (Slaney's mel scale and area normalisation, librosa's default), and
the features are ``log(mel power + LOG_OFFSET)``. This is exactly
``log(librosa.feature.melspectrogram(..., center=True, pad_mode="constant") + LOG_OFFSET)``, which
the tests check.

Cepstra (``n_ceps``): the first ``n_ceps`` coefficients of an orthonormal DCT-II of each frame's
log-mel bands, ``scipy.fft.dct(log_mel, type=2, norm="ortho")``, librosa's ``mfcc`` on the same
log-mel. The DCT decorrelates the bands and keeps the spectral envelope (the vocal tract's shape)
while dropping the fine structure that the pitch leaves, which varies most between speakers.

Frame rule: frames are centred (the signal is zero-padded by ``n_fft // 2`` at both ends), so
``N`` samples give ``T = 1 + N // hop`` frames and frame ``t`` is centred on sample ``t * hop``.

Normalisation is per utterance and per mel bin (mean 0, variance 1 over the utterance's frames):
it removes a recording's channel and level without corpus statistics to keep in a checkpoint.
Per speaker instead (``NORMALIZE_MODES``; Kaldi's per-speaker CMVN): the mean (and variance) of
every frame of one speaker's recordings in a split (:func:`frame_statistics`,
:func:`normalize_with`), which removes the voice and the microphone but not the word: a 0.4 s
word's own mean is that word's average spectrum, which per-utterance normalisation removes too.
Masking (Park et al. 2019, SpecAugment) comes after it, so a masked value is the utterance mean.
Warping (:func:`warp`: a stretch of the time axis, as speed perturbation changes an utterance's
duration, and of the mel axis, as vocal tract length perturbation moves its formants) comes before
the masks, on the same normalised frames.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Iterable

import numpy as np
import torch
from torch import Tensor

from transformer.data.speech.audio import MODEL_SAMPLE_RATE

# log(mel + 1e-6): a floor about 50 dB under a loud frame's bins at 16-bit full scale; quieter
# detail is recording noise, and digital silence (the string maker's gaps, upsampled 8 kHz audio
# above 4 kHz) stays finite instead of reaching log(0).
LOG_OFFSET = 1e-6
# A variance floor of (0.1 nat)^2 for normalisation. Speech moves a bin by nats (std 2-3), which
# this leaves as it is; a bin that barely moves (the empty band of upsampled 8 kHz audio, digital
# silence) stays near 0 instead of being scaled up into noise, and a constant one is exactly 0.
NORM_EPS = 1e-2
#: What features are normalised over (``data.normalize``): each utterance's own frames; every
#: frame of its speaker's recordings in the split, mean and variance (Kaldi's per-speaker CMVN with
#: ``--norm-vars``); or the speaker's mean alone (Kaldi's default, ``norm_vars=false``).
NORMALIZE_MODES = ("utterance", "speaker", "speaker_mean")


def feature_width(n_mels: int, n_ceps: int | None = None) -> int:
    """Features per frame: ``n_ceps`` when set, else ``n_mels``. The configs' ``${feature_width:
    ${data.n_mels},${data.n_ceps}}`` gives the front end this width, so the two cannot disagree."""
    return int(n_mels) if n_ceps is None else int(n_ceps)


@dataclass(frozen=True)
class FeatureSettings:
    """How a waveform becomes frames; stored with a model so that inference computes the same.

    Attributes:
        sample_rate: the rate audio is resampled to before framing (Hz).
        n_mels: mel bins per frame (M).
        n_ceps: keep this many cepstral coefficients of the log-mel bands (MFCCs, C <= M);
            ``None`` keeps the log-mel bands themselves.
        win_ms: window length; 25 ms is 400 samples at 16 kHz.
        hop_ms: hop between frames; 10 ms gives 100 frames a second.
        n_fft: FFT size; ``None`` is the next power of two at or above the window.
        f_min, f_max: the filterbank's band; ``f_max=None`` is half the sample rate.
        normalize: per-utterance mean/variance normalisation of each mel bin (off when a
            speaker's statistics normalise instead, ``data.normalize=speaker``).
        trim_db: cut the leading and trailing stretches quieter than this many dB under the
            waveform's loudest window (:func:`trim_silence`); ``None`` keeps the whole waveform.
    """

    sample_rate: int = MODEL_SAMPLE_RATE
    n_mels: int = 80
    n_ceps: int | None = None
    win_ms: float = 25.0
    hop_ms: float = 10.0
    n_fft: int | None = None
    f_min: float = 0.0
    f_max: float | None = None
    normalize: bool = True
    trim_db: float | None = None

    def __post_init__(self):
        if self.trim_db is not None and not self.trim_db > 0:
            raise ValueError(f"trim_db={self.trim_db}: a positive number of dB under the loudest window, or None")
        if self.n_mels < 1 or self.sample_rate < 1 or self.win_ms <= 0 or self.hop_ms <= 0:
            raise ValueError(f"feature settings must be positive: {self}")
        nyquist = self.sample_rate / 2
        if not 0 <= self.f_min < (self.f_max if self.f_max is not None else nyquist) <= nyquist:
            raise ValueError(f"f_min={self.f_min}, f_max={self.f_max}: a band within 0 to half the sample rate "
                             f"({nyquist:g} Hz), f_min below f_max")
        if self.n_ceps is not None and not 1 <= self.n_ceps <= self.n_mels:
            raise ValueError(f"n_ceps={self.n_ceps}: keep between 1 and n_mels={self.n_mels} cepstral coefficients")
        if self.n_fft is not None and self.n_fft < self.win_length:
            raise ValueError(f"n_fft={self.n_fft} is shorter than the {self.win_ms} ms window "
                             f"({self.win_length} samples)")

    @property
    def n_features(self) -> int:
        """Features per frame (K): ``n_ceps`` with cepstra, else ``n_mels``."""
        return feature_width(self.n_mels, self.n_ceps)

    @property
    def win_length(self) -> int:
        """Window length in samples."""
        return round(self.sample_rate * self.win_ms / 1000)

    @property
    def hop_length(self) -> int:
        """Hop length in samples."""
        return round(self.sample_rate * self.hop_ms / 1000)

    @property
    def fft_size(self) -> int:
        """``n_fft``, or the next power of two at or above the window."""
        return self.n_fft if self.n_fft is not None else 1 << (self.win_length - 1).bit_length()

    def num_frames(self, n_samples: int) -> int:
        """Frames that ``n_samples`` samples give (centred frames: ``1 + N // hop``)."""
        return 1 + n_samples // self.hop_length


@functools.lru_cache(maxsize=8)
def mel_filterbank(sample_rate: int, n_fft: int, n_mels: int, f_min: float, f_max: float | None) -> Tensor:
    """librosa's mel filterbank, ``(M, F)`` float32 (Slaney mel scale, area-normalised)."""
    import librosa  # imported here: it loads numba, which a process that never frames audio skips

    fb = librosa.filters.mel(sr=sample_rate, n_fft=n_fft, n_mels=n_mels, fmin=f_min, fmax=f_max,
                             htk=False, norm="slaney", dtype=np.float32)
    return torch.from_numpy(fb)  # (M, F)


def log_mel(waveform: Tensor | np.ndarray, settings: FeatureSettings = FeatureSettings()) -> Tensor:
    """Log-mel power spectrogram of one waveform, without normalisation.

    Args:
        waveform: ``(N,)`` float samples at ``settings.sample_rate``.

    Returns:
        ``(T, M)`` float32, ``T = 1 + N // hop``.
    """
    x = torch.as_tensor(waveform, dtype=torch.float32)
    if x.dim() != 1:
        raise ValueError(f"log_mel expects one channel (N,), got shape {tuple(x.shape)}")
    window = torch.hann_window(settings.win_length, periodic=True, dtype=torch.float32)
    # pad_mode="constant": zeros at the edges, librosa's default, so no reflected speech
    spec = torch.stft(x, n_fft=settings.fft_size, hop_length=settings.hop_length, win_length=settings.win_length,
                      window=window, center=True, pad_mode="constant", return_complex=True)  # (F, T)
    power = spec.real.square() + spec.imag.square()  # (F, T)
    fb = mel_filterbank(settings.sample_rate, settings.fft_size, settings.n_mels, settings.f_min, settings.f_max)
    mel = fb @ power  # (M, F) @ (F, T) -> (M, T)
    return torch.log(mel + LOG_OFFSET).transpose(0, 1).contiguous()  # (M, T) -> (T, M)


def cepstra(log_mel_frames: Tensor, n_ceps: int) -> Tensor:
    """MFCCs: the first ``n_ceps`` coefficients of each frame's orthonormal DCT-II,
    ``(T, M) -> (T, C)`` float32."""
    from scipy.fft import dct

    ceps = dct(log_mel_frames.numpy(), type=2, norm="ortho", axis=1)[:, :n_ceps]  # (T, M) -> (T, C)
    return torch.from_numpy(np.ascontiguousarray(ceps, dtype=np.float32))


def normalize_utterance(features: Tensor) -> Tensor:
    """Mean 0 and variance 1 for each feature over one utterance's frames: ``(T, K) -> (T, K)``."""
    mean = features.mean(dim=0, keepdim=True)  # (1, M)
    var = features.var(dim=0, unbiased=False, keepdim=True)  # (1, M)
    return (features - mean) / torch.sqrt(var + NORM_EPS)


def frame_statistics(utterances: Iterable[Tensor]) -> tuple[Tensor, Tensor]:
    """Mean and (population) variance of each feature over every frame of ``utterances``
    (``(T_i, K)`` each; float64 sums): ``(K,)`` and ``(K,)`` float32. A speaker's statistics for
    ``normalize=speaker``: a long utterance weighs by its frames, as Kaldi's ``compute-cmvn-stats``."""
    count, total, squares = 0, None, None
    for u in utterances:
        u = u.double()
        total = u.sum(dim=0) if total is None else total + u.sum(dim=0)  # (K,)
        squares = u.square().sum(dim=0) if squares is None else squares + u.square().sum(dim=0)  # (K,)
        count += u.shape[0]
    if not count:
        raise ValueError("no frames to take statistics of")
    mean = total / count
    var = (squares / count - mean.square()).clamp(min=0.0)
    return mean.float(), var.float()


def normalize_with(features: Tensor, mean: Tensor, var: Tensor | None) -> Tensor:
    """``(features - mean) / sqrt(var + NORM_EPS)`` with a speaker's statistics, or the mean
    alone removed with ``var=None``: ``(T, K) -> (T, K)``."""
    centred = features - mean  # (T, K) - (K,)
    return centred if var is None else centred / torch.sqrt(var + NORM_EPS)


def trim_silence(waveform: Tensor | np.ndarray, settings: FeatureSettings) -> np.ndarray:
    """Endpointing: ``waveform`` without its leading and trailing windows quieter than
    ``settings.trim_db`` dB under its loudest (``librosa.effects.trim`` over the features' 25 ms
    windows and 10 ms hops). Recordings cut by different people keep different margins of silence
    (FSDD's speakers from none to a third of a recording), which frame-averaged statistics and
    mean pooling would otherwise read as part of the voice. A waveform with nothing above the
    threshold's floor (digital silence) stays whole. ``(N,) -> (N',)``, ``N' <= N``."""
    import librosa

    x = np.asarray(waveform, dtype=np.float32)
    trimmed, _ = librosa.effects.trim(x, top_db=settings.trim_db, frame_length=settings.win_length,
                                      hop_length=settings.hop_length)
    return trimmed if trimmed.size else x


def compute_features(waveform: Tensor | np.ndarray, settings: FeatureSettings = FeatureSettings()) -> Tensor:
    """The model's input frames for one waveform: its speech between endpoints (with
    ``trim_db``), log-mel (and its cepstra with ``n_ceps``), then (by default) per-utterance
    normalisation. ``(N,)`` at ``settings.sample_rate`` -> ``(T, K)`` float32."""
    if settings.trim_db is not None:
        waveform = trim_silence(waveform, settings)  # (N,) -> (N',)
    features = log_mel(waveform, settings)  # (T, M)
    if settings.n_ceps is not None:
        features = cepstra(features, settings.n_ceps)  # (T, M) -> (T, C)
    return normalize_utterance(features) if settings.normalize else features


@dataclass(frozen=True)
class MaskingSettings:
    """SpecAugment's masks (Park et al. 2019, sec. 2): ``freq_masks`` bands of width uniform in
    ``[0, freq_width]`` mel bins, ``time_masks`` spans of width uniform in ``[0, time_width]`` frames.

    The paper's LibriSpeech policy (F=27, T=100) is for utterances of 10-20 s; a time mask is also
    capped at ``max_time_fraction`` of the utterance (the paper's p), so a 0.4 s spoken digit
    loses at most a fifth of its frames to one mask instead of all of them.
    """

    freq_masks: int = 2
    freq_width: int = 27
    time_masks: int = 2
    time_width: int = 40
    max_time_fraction: float = 0.2


def spec_augment(features: Tensor, generator: torch.Generator,
                 settings: MaskingSettings = MaskingSettings()) -> Tensor:
    """SpecAugment time and frequency masking (no time warping), for training only.

    Args:
        features: ``(T, M)`` normalised frames (a masked value is set to 0, their mean).
        generator: the source of every random draw, so one seed gives one set of masks.

    Returns:
        A masked copy, ``(T, M)``; ``features`` is left as it was.
    """
    t, m = features.shape
    out = features.clone()

    def draw(high: int) -> int:  # uniform in [0, high]
        return int(torch.randint(0, high + 1, (), generator=generator))

    for _ in range(settings.freq_masks):
        width = draw(min(settings.freq_width, m))
        start = draw(m - width)
        out[:, start:start + width] = 0.0
    time_cap = min(settings.time_width, int(settings.max_time_fraction * t))
    for _ in range(settings.time_masks):
        width = draw(time_cap)
        start = draw(t - width)
        out[start:start + width, :] = 0.0
    return out


@dataclass(frozen=True)
class WarpSettings:
    """Training-time warps of an utterance's frames, each drawn per item and epoch; 0 is off.

    Attributes:
        time_stretch: the time axis is resampled to ``T * r`` frames, ``r`` uniform in
            ``[1 - time_stretch, 1 + time_stretch]``: a faster or slower talker (Ko et al. 2015's
            speed perturbation, 0.9-1.1, keeps the pitch here: a tempo change).
        freq_warp: the mel axis is stretched by ``a`` uniform in ``[1 - freq_warp, 1 + freq_warp]``,
            bin ``j`` taking the value at ``j / a`` (Jaitly & Hinton 2013's vocal tract length
            perturbation, factors 0.9-1.1, on the mel axis instead of Hz): a longer or shorter
            vocal tract, another speaker's formants.
        edge_crop: up to this fraction of the frames is cut from each end, the two cuts drawn
            uniformly and apart: a recording whose onset or final consonant was trimmed away, as
            recordings cut by other people or an endpointer arrive.
        channel_eq: another microphone chain (:func:`draw_channel`): a second-order high-pass
            with its corner uniform in 0-300 Hz and two shelves (below 300 Hz, above 2 kHz) with
            gains uniform in ``± channel_eq`` dB, added to the unnormalised log-mel frames (a
            filter multiplies the power spectrum). Applied by ``SpeechDataset`` before a
            speaker's statistics normalise the frames, not by :func:`warp`.
    """

    time_stretch: float = 0.0
    freq_warp: float = 0.0
    edge_crop: float = 0.0
    channel_eq: float = 0.0

    def __post_init__(self):
        for name in ("time_stretch", "freq_warp"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if not 0.0 <= self.edge_crop < 0.5:
            raise ValueError(f"edge_crop must be in [0, 0.5), got {self.edge_crop}")
        if not 0.0 <= self.channel_eq <= 30.0:
            raise ValueError(f"channel_eq must be in [0, 30] dB, got {self.channel_eq}")

    @property
    def active(self) -> bool:
        """Whether any warp is on."""
        return self.time_stretch > 0 or self.freq_warp > 0 or self.edge_crop > 0 or self.channel_eq > 0


# A high-pass's attenuation is held to 40 dB (in nats of power): below it a recording holds its
# noise floor, not the filtered speech.
CHANNEL_FLOOR = -np.log(1e4)


def channel_curve(settings: FeatureSettings, highpass_hz: float, low_db: float, high_db: float) -> Tensor:
    """What a microphone chain adds to each log-mel band (nats of power, at the band's centre):
    a second-order Butterworth high-pass at ``highpass_hz`` (0: none), a low shelf of ``low_db``
    below 300 Hz and a high shelf of ``high_db`` above 2 kHz; with cepstra, the curve's first
    ``n_ceps`` DCT-II coefficients (the DCT is linear, so the offset carries over). ``(K,)``."""
    import librosa
    from scipy.fft import dct

    f_max = settings.f_max if settings.f_max is not None else settings.sample_rate / 2
    f = librosa.mel_frequencies(settings.n_mels + 2, fmin=settings.f_min, fmax=f_max)[1:-1]  # (M,) band centres
    power = np.ones_like(f)
    if highpass_hz > 0:
        power *= (f / highpass_hz) ** 4 / (1 + (f / highpass_hz) ** 4)
    power *= 1 + (10 ** (low_db / 10) - 1) / (1 + (f / 300.0) ** 2)
    power *= 1 + (10 ** (high_db / 10) - 1) * (f / 2000.0) ** 2 / (1 + (f / 2000.0) ** 2)
    curve = np.maximum(np.log(power), CHANNEL_FLOOR)  # (M,)
    if settings.n_ceps is not None:
        curve = dct(curve, type=2, norm="ortho")[:settings.n_ceps]  # (M,) -> (C,)
    return torch.as_tensor(curve, dtype=torch.float32)


def draw_channel(generator: torch.Generator, max_db: float, settings: FeatureSettings) -> Tensor:
    """A random microphone chain's :func:`channel_curve`: the high-pass corner uniform in 0-300 Hz,
    each shelf's gain uniform in ``± max_db``. ``(K,)``."""
    u = torch.rand(3, generator=generator).tolist()
    return channel_curve(settings, 300.0 * u[0], max_db * (2 * u[1] - 1), max_db * (2 * u[2] - 1))


def _resample_axis(x: Tensor, positions: Tensor) -> Tensor:
    """Linear interpolation of ``x (L, K)`` along its first axis at fractional ``positions (L',)``
    (clamped to the axis): ``(L', K)``."""
    positions = positions.clamp(0, x.shape[0] - 1)
    lo = positions.floor().long()  # (L',)
    hi = (lo + 1).clamp(max=x.shape[0] - 1)
    frac = (positions - lo).unsqueeze(1)  # (L', 1)
    return x[lo] * (1 - frac) + x[hi] * frac


def warp(features: Tensor, generator: torch.Generator, settings: WarpSettings) -> Tensor:
    """Stretch an utterance's time and mel axes by factors drawn from ``generator`` (training only).

    Args:
        features: ``(T, M)`` normalised frames.
        generator: the source of both draws, so one seed gives one warp.

    Returns:
        ``(T', M)`` float32, ``T' = round(T * r)`` less the edges cut (never shorter than
        ``min(T, 16)`` frames, so a short item stays long enough for the front end);
        ``features`` is left as it was.
    """
    t, m = features.shape
    r, a = (1.0 + s * (2 * float(torch.rand((), generator=generator)) - 1)
            for s in (settings.time_stretch, settings.freq_warp))
    out = features
    if settings.time_stretch > 0:
        new_t = max(round(t * r), min(t, 16))
        positions = torch.arange(new_t, dtype=torch.float32) * ((t - 1) / max(new_t - 1, 1))  # (T',)
        out = _resample_axis(out, positions)  # (T, M) -> (T', M)
    if settings.freq_warp > 0:
        positions = torch.arange(m, dtype=torch.float32) / a  # (M,)
        out = _resample_axis(out.transpose(0, 1), positions).transpose(0, 1)  # (M, T') -> (M, T') -> (T', M)
    if settings.edge_crop > 0:
        n = out.shape[0]
        head, tail = (int(float(torch.rand((), generator=generator)) * settings.edge_crop * n) for _ in range(2))
        spare = max(n - min(n, 16), 0)  # frames that may go
        head, tail = min(head, spare), min(tail, spare - min(head, spare))
        out = out[head:n - tail]  # (T', M) -> (T' - head - tail, M)
    return out.contiguous() if out is not features else features.clone()
