"""Reading audio: resampling keeps duration and pitch, stereo is mixed down, and every bad
input is one AudioError line naming the file (and the manifest row)."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from transformer.data.speech.audio import AudioError, audio_samples, load_audio, read_audio, resampled_length
from speech_files import sine, write_wav


def _peak_hz(x: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.fft.rfftfreq(len(x), 1 / rate)[spectrum.argmax()])


def test_8k_is_resampled_to_16k_keeping_duration_and_pitch(tmp_path):
    path = write_wav(tmp_path / "a.wav", sine(440.0, 1.25, 8000), 8000)
    y = load_audio(path, sample_rate=16000)
    assert y.dtype == np.float32 and y.shape == (20000,)  # 1.25 s at 16 kHz
    assert abs(_peak_hz(y, 16000) - 440.0) < 2.0  # the same tone, not a sped-up one
    assert audio_samples(path, sample_rate=16000) == len(y)


def test_real_recording_resampled(fsdd_few):
    rec = fsdd_few[0]
    native, rate = read_audio(rec.path)
    assert rate == 8000
    y = load_audio(rec.path)
    assert len(y) == 2 * len(native) and np.abs(y).max() <= 1.0


@pytest.mark.parametrize("orig", [11025, 22050, 44100, 48000])
def test_header_length_matches_decoded_length(tmp_path, orig):
    path = write_wav(tmp_path / "a.wav", sine(300.0, 0.3337, orig), orig)
    n = sf.info(str(path)).frames
    assert len(load_audio(path)) == resampled_length(n, orig, 16000) == audio_samples(path)
    assert abs(len(load_audio(path)) / 16000 - n / orig) < 1 / 16000


def test_stereo_is_mixed_down_by_mean(tmp_path):
    left, right = sine(300.0, 0.5, 16000, 0.6), sine(500.0, 0.5, 16000, 0.2)
    path = write_wav(tmp_path / "st.wav", np.stack([left, right], axis=1), 16000, subtype="FLOAT")
    y = load_audio(path)
    assert y.shape == left.shape
    np.testing.assert_allclose(y, (left + right) / 2, atol=1e-6)


def test_flac_reads(tmp_path):
    sf.write(str(tmp_path / "a.flac"), sine(300.0, 0.5, 16000), 16000, format="FLAC")
    assert load_audio(tmp_path / "a.flac").shape == (8000,)


def test_ten_minutes_read_fine_and_a_bound_exists(tmp_path):
    rate = 8000
    path = write_wav(tmp_path / "long.wav", np.zeros(600 * rate, dtype=np.float32), rate)
    assert audio_samples(path) == 600 * 16000  # 60,000 frames at a 10 ms hop
    assert len(load_audio(path)) == 600 * 16000
    with pytest.raises(AudioError, match=r"long.wav: 600.0 s long, over the 300 s bound"):
        load_audio(path, max_seconds=300)


def _bad_files(tmp_path, mirror_root):
    good = (mirror_root / "fsdd/recordings/0_george_0.wav").read_bytes()
    files = {
        "text.wav": (b"this is not audio at all, just text " * 4, "not a readable audio file"),
        "empty.wav": (b"", "empty file (0 bytes)"),
        "cut-header.wav": (good[:20], "not a readable audio file"),
        "truncated.wav": (good[: len(good) // 2], "truncated file: its header declares 4768 bytes"),
        "header-only.wav": (good[:44], "truncated file"),
    }
    for name, (data, _) in files.items():
        (tmp_path / name).write_bytes(data)
    no_samples = tmp_path / "no-samples.wav"
    sf.write(str(no_samples), np.zeros(0, dtype=np.float32), 8000, subtype="PCM_16")
    return {**{tmp_path / n: msg for n, (_, msg) in files.items()},
            no_samples: "no audio samples (0 frames)", tmp_path / "missing.wav": "no such file"}


def test_every_bad_input_is_one_line_naming_file_and_row(tmp_path, mirror_root):
    for path, expected in _bad_files(tmp_path, mirror_root).items():
        for read in (load_audio, audio_samples):
            with pytest.raises(AudioError) as e:
                read(path, where="train.tsv:7")
            msg = str(e.value)
            assert "\n" not in msg
            assert msg.startswith(f"train.tsv:7: {path}: "), msg
            assert expected in msg, msg
            assert e.value.where == "train.tsv:7" and e.value.path == str(path)


def test_truncated_flac(tmp_path):
    path = tmp_path / "a.flac"
    sf.write(str(path), np.random.default_rng(0).uniform(-0.5, 0.5, 16000).astype(np.float32), 16000, format="FLAC")
    data = path.read_bytes()
    (tmp_path / "cut.flac").write_bytes(data[: len(data) // 2])
    with pytest.raises(AudioError, match=r"cut.flac: .*truncated") as e:
        load_audio(tmp_path / "cut.flac")
    assert "\n" not in str(e.value)


def test_audio_error_is_a_value_error():
    assert issubclass(AudioError, ValueError)
