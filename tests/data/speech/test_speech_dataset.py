"""The speech Dataset computes features lazily (equal to compute_features), masks only when
asked (seeded by seed, epoch and index), knows lengths from headers; the collate pads."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from speech_files import sine, write_wav

from transformer.data.core.batching import IGNORE_INDEX
from transformer.data.speech.audio import AudioError, load_audio
from transformer.data.speech.dataset import SpeechCollator, SpeechDataset
from transformer.data.speech.features import FeatureSettings, compute_features
from transformer.data.speech.manifest import SpeechRow, read_manifest, write_manifest


@pytest.fixture
def rows(fsdd_few, tmp_path):
    manifest = write_manifest(tmp_path / "m.tsv", [(r.path, str(r.digit)) for r in fsdd_few[:6]])
    return read_manifest(manifest)


def test_items_are_the_features_of_their_audio(rows):
    ds = SpeechDataset(rows)
    assert len(ds) == 6 and ds._cache is None  # nothing kept unless asked: memory stays flat
    item = ds[2]
    assert item["index"] == 2 and item["target"] == rows[2].text
    expected = compute_features(load_audio(rows[2].path))
    assert torch.equal(item["src"], expected) and item["src"].shape[1] == 80
    assert ds.lengths() == [ds[i]["src"].shape[0] for i in range(len(ds))]


def test_targets_are_encoded_when_asked(rows):
    ds = SpeechDataset(rows, encode_target=int)
    assert ds[0]["target"] == int(rows[0].text)


def test_spec_augment_only_when_asked_seeded_by_epoch(rows):
    plain = SpeechDataset(rows)
    masked = SpeechDataset(rows, spec_augment=True, seed=1)
    again = SpeechDataset(rows, spec_augment=True, seed=1)
    assert not torch.equal(masked[0]["src"], plain[0]["src"])
    assert torch.equal(masked[0]["src"], again[0]["src"])  # same seed, epoch, index: same masks
    first = masked[0]["src"]
    masked.set_epoch(1)
    assert not torch.equal(masked[0]["src"], first)  # a new epoch draws new masks
    assert torch.equal(plain[0]["src"], plain.features(0))


def test_cache_keeps_unmasked_features_and_reads_each_file_once(rows, tmp_path):
    """With ``cache``, an utterance's file is read once: after it is gone the item still comes
    (masked afresh from the kept, unmasked features), where a dataset without a cache fails."""
    import shutil

    copy = tmp_path / "copy.wav"
    shutil.copy(rows[1].path, copy)
    moved = [rows[0], SpeechRow(copy, rows[1].text, rows[1].where), *rows[2:]]
    unmasked = compute_features(load_audio(copy))
    cached = SpeechDataset(moved, cache=True, spec_augment=True)
    plain = SpeechDataset(moved)
    first = cached[1]["src"]
    copy.unlink()
    assert torch.equal(cached.features(1), unmasked)  # kept unmasked, not read again
    assert torch.equal(cached[1]["src"], first)  # same epoch and index: the same masks over it
    assert not torch.equal(first, unmasked)
    with pytest.raises(AudioError, match="copy.wav"):
        plain.features(1)


def test_a_bad_file_names_the_manifest_row(tmp_path):
    good = write_wav(tmp_path / "good.wav", sine(200.0, 0.3, 8000), 8000)
    (tmp_path / "bad.wav").write_bytes(b"RIFF....not really")
    rows = read_manifest(write_manifest(tmp_path / "m.tsv", [(good, "a"), (tmp_path / "bad.wav", "b")]))
    ds = SpeechDataset(rows)
    assert ds[0]["src"].shape == (1 + 4800 // 160, 80)
    with pytest.raises(AudioError, match=rf"^{tmp_path}/m.tsv:2: {tmp_path}/bad.wav: not a readable audio file"):
        ds[1]
    with pytest.raises(AudioError, match=r"m.tsv:2: "):
        ds.num_frames(1)


def test_other_settings_and_resampled_lengths(tmp_path):
    path = write_wav(tmp_path / "a.wav", sine(300.0, 0.77, 44100), 44100)
    ds = SpeechDataset([SpeechRow(path, "x")], FeatureSettings(n_mels=40))
    assert ds[0]["src"].shape == (ds.num_frames(0), 40) == (78, 40)


def test_collate_pads_frames_and_targets():
    a, b = torch.randn(5, 4), torch.randn(9, 4)
    batch = SpeechCollator()([{"src": a, "target": [3, 1], "index": 7}, {"src": b, "target": [2, 2, 2], "index": 0}])
    assert batch["src"].shape == (2, 9, 4) and batch["src"].dtype == torch.float32
    assert torch.equal(batch["src"][0, :5], a) and torch.equal(batch["src"][0, 5:], torch.zeros(4, 4))
    assert torch.equal(batch["src"][1], b)
    assert batch["src_lengths"].tolist() == [5, 9] and batch["index"].tolist() == [7, 0]
    assert batch["target"].tolist() == [[3, 1, IGNORE_INDEX], [2, 2, 2]] and batch["target_lengths"].tolist() == [2, 3]
    labels = SpeechCollator(pad_to_multiple=8)([{"src": a, "target": 3, "index": 0}, {"src": b, "target": np.int64(4), "index": 1}])
    assert labels["src"].shape == (2, 16, 4) and labels["target"].tolist() == [3, 4]
    texts = SpeechCollator()([{"src": a, "target": "4 1", "index": 0}])
    assert texts["target"] == ["4 1"]


def test_works_in_a_dataloader(rows):
    loader = torch.utils.data.DataLoader(SpeechDataset(rows, encode_target=int), batch_size=3, collate_fn=SpeechCollator())
    batches = list(loader)
    assert [b["src"].shape[0] for b in batches] == [3, 3]
    assert batches[0]["src"].shape[1] == int(batches[0]["src_lengths"].max())
    assert batches[1]["target"].dtype == torch.long


def test_speed_perturbation_resamples_the_waveform_pitch_and_all(tmp_path):
    """A factor f plays the recording f times as fast: N / f samples, and a 1 kHz tone comes out
    at f kHz (a time stretch of the frames would keep it at 1 kHz); the factor is drawn per item
    and epoch, only from the factors given."""
    from transformer.data.speech.audio import resample

    rate, settings = 8000, FeatureSettings(sample_rate=8000, n_mels=40)
    path = write_wav(tmp_path / "tone.wav", sine(1000.0, 0.5, rate), rate)
    rows = [SpeechRow(path, "1", "m.tsv:1")]
    fast = SpeechDataset(rows, settings, speeds=(1.25,))
    expected = compute_features(resample(load_audio(path, rate), 10_000, rate), settings)
    assert torch.equal(fast[0]["src"], expected) and expected.shape[0] == settings.num_frames(3200)
    higher = compute_features(sine(1250.0, 0.4, rate), settings)
    mid = expected.shape[0] // 2
    assert int(expected[mid].argmax()) == int(higher[mid].argmax())
    assert int(expected[mid].argmax()) > int(compute_features(sine(1000.0, 0.5, rate), settings)[mid].argmax())
    drawn = SpeechDataset(rows, settings, speeds=(0.8, 1.25), cache=True)
    lengths = set()
    for epoch in range(8):
        drawn.set_epoch(epoch)
        lengths.add(drawn[0]["src"].shape[0])
    assert lengths == {settings.num_frames(5000), settings.num_frames(3200)}
    assert torch.equal(SpeechDataset(rows, settings, speeds=(1.0,))[0]["src"], compute_features(load_audio(path, rate), settings))
    with pytest.raises(ValueError, match="speed factors"):
        SpeechDataset(rows, settings, speeds=(0.0,))


# ----------------------------------------------------------------------------- per-speaker normalisation
MFCC = FeatureSettings(sample_rate=8000, n_mels=40, n_ceps=20)


@pytest.fixture
def two_speakers(fsdd_few, tmp_path):
    """Four recordings of george and three of theo, with the speaker column."""
    picked = [r for r in fsdd_few if r.speaker == "george"][:4] + [r for r in fsdd_few if r.speaker == "theo"][:3]
    manifest = write_manifest(tmp_path / "spk.tsv", [(r.path, str(r.digit), r.speaker) for r in picked])
    return read_manifest(manifest)


def test_speaker_statistics_are_the_mean_and_variance_of_all_their_frames(two_speakers):
    """Each speaker's statistics equal numpy's over the concatenated frames of their recordings
    (features without per-utterance normalisation), and every item is normalised by them."""
    from dataclasses import replace

    from transformer.data.speech.features import NORM_EPS

    ds = SpeechDataset(two_speakers, MFCC, normalize="speaker", cache=True)
    raw = {i: compute_features(load_audio(r.path, 8000), replace(MFCC, normalize=False)).numpy()
           for i, r in enumerate(two_speakers)}
    assert set(ds.speaker_stats) == {"george", "theo"}
    for speaker in ("george", "theo"):
        frames = np.concatenate([raw[i] for i, r in enumerate(two_speakers) if r.speaker == speaker]).astype(np.float64)
        mean, var = ds.speaker_stats[speaker]
        np.testing.assert_allclose(mean.numpy(), frames.mean(axis=0), rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(var.numpy(), frames.var(axis=0), rtol=1e-4, atol=1e-4)
    for i, row in enumerate(two_speakers):
        mean, var = ds.speaker_stats[row.speaker]
        expected = (raw[i] - mean.numpy()) / np.sqrt(var.numpy() + NORM_EPS)
        np.testing.assert_allclose(ds[i]["src"].numpy(), expected, rtol=1e-5, atol=1e-5)
    # over all of a speaker's frames, each feature has mean 0 and variance about 1
    george = torch.cat([ds[i]["src"] for i, r in enumerate(two_speakers) if r.speaker == "george"])
    assert george.mean(0).abs().max() < 1e-4 and (george.var(0, unbiased=False) - 1).abs().max() < 0.02


def test_a_speakers_utterances_share_one_shift(two_speakers):
    """``speaker_mean``: every frame of one speaker's recordings moves by the same vector (the
    speaker's mean), another speaker's by another; per-utterance normalisation moves each
    recording by its own."""
    from dataclasses import replace

    raw = [compute_features(load_audio(r.path, 8000), replace(MFCC, normalize=False)) for r in two_speakers]
    shifted = SpeechDataset(two_speakers, MFCC, normalize="speaker_mean")
    shifts = [(raw[i] - shifted[i]["src"]) for i in range(len(two_speakers))]  # (T_i, K) each
    for shift in shifts:  # one vector over an utterance's frames
        assert torch.allclose(shift, shift[0].expand_as(shift), atol=1e-4)
    george = [s[0] for s, r in zip(shifts, two_speakers) if r.speaker == "george"]
    theo = [s[0] for s, r in zip(shifts, two_speakers) if r.speaker == "theo"]
    assert all(torch.allclose(s, george[0], atol=1e-4) for s in george)
    assert all(torch.allclose(s, theo[0], atol=1e-4) for s in theo)
    assert not torch.allclose(george[0], theo[0], atol=1e-2)
    own = SpeechDataset(two_speakers, MFCC)  # per utterance: its own shift
    own_shifts = [(raw[i] - own[i]["src"] * raw[i].std(0, unbiased=False))[0] for i in range(2)]
    assert not torch.allclose(own_shifts[0], own_shifts[1], atol=1e-2)


def test_utterance_mode_is_the_per_utterance_features(two_speakers):
    """The default is unchanged: each item is ``compute_features`` of its audio, whatever the
    speaker column says, and no statistics are taken."""
    ds = SpeechDataset(two_speakers, MFCC)
    assert ds.normalize == "utterance" and ds.speaker_stats == {} and ds.settings.normalize
    for i, row in enumerate(two_speakers):
        assert torch.equal(ds[i]["src"], compute_features(load_audio(row.path, 8000), MFCC))


def test_speaker_statistics_come_from_unperturbed_audio(two_speakers):
    """With speed perturbation a speaker's statistics are those of the recordings as they are,
    and a perturbed item is normalised by them."""
    plain = SpeechDataset(two_speakers, MFCC, normalize="speaker")
    perturbed = SpeechDataset(two_speakers, MFCC, normalize="speaker", speeds=(0.9, 1.1), seed=3)
    for speaker, (mean, var) in plain.speaker_stats.items():
        assert torch.equal(perturbed.speaker_stats[speaker][0], mean)
        assert torch.equal(perturbed.speaker_stats[speaker][1], var)
    kept = perturbed.select([0, 5])
    assert kept.speaker_stats is not perturbed.speaker_stats and kept.speaker_stats == perturbed.speaker_stats


def test_speaker_modes_need_every_rows_speaker(rows):
    with pytest.raises(ValueError, match=r"m.tsv:1: normalize=speaker needs each row's speaker"):
        SpeechDataset(rows, MFCC, normalize="speaker")
    with pytest.raises(ValueError, match="normalize='corpus'"):
        SpeechDataset(rows, MFCC, normalize="corpus")
