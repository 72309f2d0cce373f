"""Log-mel features and their cepstra (MFCCs) equal librosa's reference; frames follow the 10 ms rule; normalisation and
SpecAugment masking do what they say, seeded."""

from __future__ import annotations

import librosa
import numpy as np
import pytest
import torch

from transformer.data.speech.audio import load_audio
from transformer.data.speech.features import (LOG_OFFSET, NORM_EPS, FeatureSettings, MaskingSettings, WarpSettings,
                                              compute_features, feature_width, log_mel, normalize_utterance,
                                              channel_curve, draw_channel, spec_augment, trim_silence, warp)
from tests.data.speech.speech_files import sine


def _librosa_log_mel(y: np.ndarray, s: FeatureSettings) -> np.ndarray:
    """The reference: librosa's own melspectrogram with the same parameters, then log; (T, M)."""
    mel = librosa.feature.melspectrogram(
        y=y, sr=s.sample_rate, n_fft=s.fft_size, hop_length=s.hop_length, win_length=s.win_length, window="hann",
        center=True, pad_mode="constant", power=2.0, n_mels=s.n_mels, fmin=0.0, fmax=None, htk=False, norm="slaney")
    return np.log(mel + LOG_OFFSET).T


def test_window_and_hop_in_samples():
    s = FeatureSettings()
    assert (s.sample_rate, s.win_length, s.hop_length, s.fft_size, s.n_mels) == (16000, 400, 160, 512, 80)
    assert FeatureSettings(sample_rate=8000).win_length == 200 and FeatureSettings(sample_rate=8000).fft_size == 256


@pytest.mark.parametrize("n_mels", [80, 40])
def test_log_mel_equals_librosa_on_real_recordings(fsdd_few, n_mels):
    s = FeatureSettings(n_mels=n_mels)
    for rec in fsdd_few[::23]:  # a handful across speakers, digits and takes
        y = load_audio(rec.path)
        ours = log_mel(y, s).numpy()
        ref = _librosa_log_mel(y, s)
        assert ours.shape == ref.shape == (1 + len(y) // 160, n_mels)
        np.testing.assert_allclose(ours, ref, atol=1e-4, rtol=0)
        # normalised features are the reference, normalised
        ref_norm = (ref - ref.mean(0)) / np.sqrt(ref.var(0) + NORM_EPS)
        np.testing.assert_allclose(compute_features(y, s).numpy(), ref_norm, atol=1e-4, rtol=0)


@pytest.mark.parametrize("n_mels, n_ceps", [(40, 20), (80, 13)])
def test_mfccs_equal_librosa_on_real_recordings(fsdd_few, n_mels, n_ceps):
    s = FeatureSettings(sample_rate=8000, n_mels=n_mels, n_ceps=n_ceps, normalize=False)
    for rec in fsdd_few[::23]:
        y = load_audio(rec.path, sample_rate=8000)
        ours = compute_features(y, s).numpy()
        assert ours.shape == (1 + len(y) // s.hop_length, n_ceps) and s.n_features == n_ceps
        # the cepstra of our log-mel: librosa's MFCC (an orthonormal DCT-II), to float32 rounding
        ref = librosa.feature.mfcc(S=log_mel(y, s).numpy().T, n_mfcc=n_ceps, dct_type=2, norm="ortho").T
        np.testing.assert_allclose(ours, ref, atol=1e-5, rtol=1e-6)
        # and the whole path from the waveform, librosa's log-mel included, as tight as log-mel's
        ref = librosa.feature.mfcc(S=_librosa_log_mel(y, s).T, n_mfcc=n_ceps, dct_type=2, norm="ortho").T
        np.testing.assert_allclose(ours, ref, atol=1e-4, rtol=0)
        ref_norm = (ref - ref.mean(0)) / np.sqrt(ref.var(0) + NORM_EPS)
        normalized = compute_features(y, FeatureSettings(sample_rate=8000, n_mels=n_mels, n_ceps=n_ceps)).numpy()
        np.testing.assert_allclose(normalized, ref_norm, atol=1e-4, rtol=0)


def test_the_feature_width_follows_n_ceps():
    assert FeatureSettings(n_mels=40).n_features == feature_width(40, None) == 40
    assert FeatureSettings(n_mels=40, n_ceps=20).n_features == feature_width(40, 20) == 20
    for bad in (0, 41):
        with pytest.raises(ValueError, match="n_ceps"):
            FeatureSettings(n_mels=40, n_ceps=bad)


def test_one_second_is_100_frames_and_ten_minutes_60000():
    s = FeatureSettings()
    assert log_mel(np.zeros(16000, np.float32), s).shape == (101, 80)  # 1 + N // hop: centred frames
    assert s.num_frames(16000) == 101 and s.num_frames(15999) == 100
    assert s.num_frames(600 * 16000) == 60001


def test_normalisation_per_bin():
    x = torch.randn(50, 8) * torch.arange(1, 9) + 3.0
    n = normalize_utterance(x)
    torch.testing.assert_close(n.mean(0), torch.zeros(8), atol=1e-5, rtol=0)
    torch.testing.assert_close(n.std(0, unbiased=False), torch.ones(8), atol=1e-2, rtol=0)
    # a constant bin (digital silence) becomes 0, not NaN
    assert torch.equal(normalize_utterance(torch.full((5, 3), -13.8)), torch.zeros(5, 3))
    y = np.random.default_rng(0).normal(0, 0.1, 8000).astype(np.float32)
    assert not torch.equal(compute_features(y), log_mel(y))
    assert torch.equal(compute_features(y, FeatureSettings(normalize=False)), log_mel(y))


def test_spec_augment_masks_are_seeded_bounded_and_leave_the_input():
    x = torch.randn(200, 80)
    before = x.clone()
    s = MaskingSettings(freq_masks=2, freq_width=10, time_masks=2, time_width=30, max_time_fraction=0.2)
    a = spec_augment(x, torch.Generator().manual_seed(1), s)
    b = spec_augment(x, torch.Generator().manual_seed(1), s)
    c = spec_augment(x, torch.Generator().manual_seed(2), s)
    assert torch.equal(x, before)
    assert torch.equal(a, b) and not torch.equal(a, c)
    masked_bins = (a == 0).all(dim=0)  # (M,) whole bins zeroed: frequency masks
    masked_frames = (a == 0).all(dim=1)  # (T,) whole frames zeroed: time masks
    assert 0 < masked_bins.sum() <= 20 and 0 < masked_frames.sum() <= 60
    # everything else untouched
    keep = ~masked_frames[:, None] & ~masked_bins[None, :]
    assert torch.equal(a[keep], x[keep])


def test_time_masks_capped_by_utterance_length():
    x = torch.randn(40, 80)  # a short digit: 0.4 s
    for seed in range(50):
        a = spec_augment(x, torch.Generator().manual_seed(seed), MaskingSettings(freq_masks=0, time_masks=1))
        assert int((a == 0).all(dim=1).sum()) <= 8  # 0.2 * 40


def test_time_stretch_resamples_the_time_axis_within_its_bounds():
    """A tempo change: 1 ± time_stretch times the frames, the first and last frame kept, a ramp
    along time still a ramp; the same generator seed gives the same stretch."""
    t = 100
    ramp = torch.arange(t, dtype=torch.float32).unsqueeze(1).repeat(1, 8)  # (T, M): frame index
    lengths = set()
    for seed in range(30):
        out = warp(ramp, torch.Generator().manual_seed(seed), WarpSettings(time_stretch=0.2))
        assert 80 <= out.shape[0] <= 120 and out.shape[1] == 8
        assert out[0, 0] == 0 and abs(float(out[-1, 0]) - (t - 1)) < 1e-3
        assert (out[1:, 0] >= out[:-1, 0]).all()  # still in order: no frame moves past another
        lengths.add(out.shape[0])
    assert len(lengths) > 5  # the factor is drawn, not fixed
    a = warp(ramp, torch.Generator().manual_seed(3), WarpSettings(time_stretch=0.2))
    assert torch.equal(a, warp(ramp, torch.Generator().manual_seed(3), WarpSettings(time_stretch=0.2)))
    short = torch.randn(16, 8)
    for seed in range(20):  # a short item is never stretched below the front end's reach
        assert warp(short, torch.Generator().manual_seed(seed), WarpSettings(time_stretch=0.4)).shape[0] >= 16


def test_freq_warp_moves_a_formant_by_its_factor():
    """Vocal tract length perturbation on the mel axis: a peak at bin 20 of 40 moves to about
    20 a, a in 1 ± freq_warp; the frame count and bin 0 stay; no warp gives an equal copy."""
    x = torch.zeros(10, 40)
    x[:, 20] = 1.0
    peaks = set()
    for seed in range(30):
        out = warp(x, torch.Generator().manual_seed(seed), WarpSettings(freq_warp=0.1))
        assert out.shape == x.shape
        peak = int(out[0].argmax())
        assert 18 <= peak <= 22 and torch.allclose(out[0].sum(), torch.tensor(1.0), atol=0.25)
        peaks.add(peak)
    assert len(peaks) > 1
    before = x.clone()
    same = warp(x, torch.Generator().manual_seed(0), WarpSettings())
    assert torch.equal(same, x) and same is not x and torch.equal(x, before)
    with pytest.raises(ValueError, match="freq_warp"):
        WarpSettings(freq_warp=1.5)



def test_trim_silence_cuts_quiet_margins_only():
    """Endpointing: 0.3 s of a tone between 0.2 s and 0.4 s of faint noise (60 dB down) keeps
    the tone and about a window of margin, as librosa's trim over 25 ms windows; a tone alone and
    digital silence stay whole."""
    rate = 8000
    s = FeatureSettings(sample_rate=rate, n_mels=40, trim_db=30)
    rng = np.random.default_rng(0)
    noise = lambda sec: (5e-4 * rng.standard_normal(int(sec * rate))).astype(np.float32)  # noqa: E731
    tone = sine(440, 0.3, rate)
    x = np.concatenate([noise(0.2), tone, noise(0.4)])
    y = trim_silence(x, s)
    assert abs(len(y) - len(tone)) <= 2 * s.win_length
    reference, _ = librosa.effects.trim(x, top_db=30, frame_length=s.win_length, hop_length=s.hop_length)
    np.testing.assert_array_equal(y, reference)
    assert len(trim_silence(tone, s)) == len(tone)
    assert len(trim_silence(np.zeros(800, np.float32), s)) == 800


def test_features_with_trim_db_are_the_trimmed_waveforms():
    """compute_features with trim_db frames the endpointed waveform (fewer frames than the whole
    recording's); without it every sample is framed; trim_db must be positive."""
    rate = 8000
    x = np.concatenate([np.zeros(2400, np.float32), sine(300, 0.3, rate), np.zeros(2400, np.float32)])
    plain = FeatureSettings(sample_rate=rate, n_mels=40, n_ceps=13)
    trimmed = FeatureSettings(sample_rate=rate, n_mels=40, n_ceps=13, trim_db=40)
    assert compute_features(x, plain).shape[0] == plain.num_frames(len(x))
    out = compute_features(x, trimmed)
    assert torch.equal(out, compute_features(trim_silence(x, trimmed), plain))
    assert out.shape[0] < plain.num_frames(len(x)) - 50
    for bad in (0, -20):
        with pytest.raises(ValueError, match="trim_db"):
            FeatureSettings(trim_db=bad)


def test_edge_crop_cuts_a_slice_from_each_end_within_its_bound():
    """data.edge_crop: a training utterance loses up to that fraction of its frames at each end,
    the two cuts drawn apart (both ends move over seeds); what stays is the middle, unchanged; a
    short utterance keeps min(T, 16) frames; 0.5 and above are refused."""
    x = torch.randn(100, 13)
    cuts = set()
    for seed in range(40):
        out = warp(x, torch.Generator().manual_seed(seed), WarpSettings(edge_crop=0.2))
        n = out.shape[0]
        head = next(h for h in range(21) if torch.equal(x[h:h + n], out))
        tail = 100 - n - head
        assert 0 <= head <= 20 and 0 <= tail <= 20
        cuts.add((head > 0, tail > 0))
    assert (True, True) in cuts and len({c for c in cuts}) >= 2
    short = torch.randn(18, 13)
    for seed in range(10):
        assert warp(short, torch.Generator().manual_seed(seed), WarpSettings(edge_crop=0.45)).shape[0] >= 16
    assert WarpSettings(edge_crop=0.1).active and not WarpSettings().active
    with pytest.raises(ValueError, match="edge_crop"):
        WarpSettings(edge_crop=0.5)


def test_the_filterbank_band_leaves_out_what_lies_outside_it():
    """f_min, f_max: a 100 Hz tone fills the low bands of the full band's features and is gone
    (but for the window's leakage, 35 dB down) from features over 400-3400 Hz; a band outside 0 to
    Nyquist is refused."""
    rate = 8000
    tone = sine(100, 0.5, rate)
    full = log_mel(tone, FeatureSettings(sample_rate=rate, n_mels=40))
    band = log_mel(tone, FeatureSettings(sample_rate=rate, n_mels=40, f_min=400, f_max=3400))
    assert full.max() > np.log(LOG_OFFSET) + 10
    assert band.max() < full.max() - 8
    for kw in (dict(f_min=300, f_max=200), dict(f_max=5000), dict(f_min=-1)):
        with pytest.raises(ValueError, match="f_min"):
            FeatureSettings(sample_rate=rate, **kw)


@pytest.mark.parametrize("corner", [100, 300])
def test_the_channel_curve_is_what_a_real_high_pass_does_to_the_bands(corner):
    """channel_curve models a microphone chain as an offset of each log-mel band: white noise
    through scipy's second-order Butterworth high-pass moves the bands by the curve, within 0.15
    nats above the two lowest bands (whose triangles straddle the corner); no filter, no offset."""
    from scipy import signal

    s = FeatureSettings(sample_rate=8000, n_mels=40, normalize=False)
    x = (0.1 * np.random.default_rng(0).standard_normal(80000)).astype(np.float32)
    y = signal.sosfilt(signal.butter(2, corner, "highpass", fs=8000, output="sos"), x).astype(np.float32)
    moved = (log_mel(y, s) - log_mel(x, s)).mean(dim=0)  # (M,)
    curve = channel_curve(s, corner, 0.0, 0.0)
    assert (moved - curve)[2:].abs().max() < 0.15 and curve[0] < -2
    assert torch.equal(channel_curve(s, 0.0, 0.0, 0.0), torch.zeros(40))


def test_a_channel_carries_into_cepstra_and_its_shelves_tilt_the_bands():
    """With cepstra the curve is the bands' curve through the same DCT-II as the features; a
    low shelf of +6 dB raises the low bands and a high shelf of -6 dB lowers the top ones; draws
    are seeded and bounded by channel_eq, which stays within 0-30 dB."""
    from scipy.fft import dct

    bands = FeatureSettings(sample_rate=8000, n_mels=40)
    ceps = FeatureSettings(sample_rate=8000, n_mels=40, n_ceps=13)
    curve = channel_curve(bands, 0.0, 6.0, -6.0)
    np.testing.assert_allclose(channel_curve(ceps, 0.0, 6.0, -6.0), dct(curve.numpy(), norm="ortho")[:13], atol=1e-5)
    assert curve[0] > 0.5 * np.log(10 ** 0.6) and curve[-1] < -0.5 * np.log(10 ** 0.6)
    g = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    assert torch.equal(draw_channel(g(), 10.0, bands), draw_channel(g(), 10.0, bands))
    assert draw_channel(g(), 10.0, bands).max() <= np.log(10.0) + 1e-5
    with pytest.raises(ValueError, match="channel_eq"):
        WarpSettings(channel_eq=40)
