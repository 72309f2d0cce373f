"""The speech data module: the FSDD preset's official split and leave-one-speaker-out folds,
labels from the training manifest, batches of frames counted by the frame budget."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import _mirror_root
from transformer.data.speech.datamodule import SpeechDataModule

MIRROR = str(_mirror_root() or "")
pytestmark = pytest.mark.skipif(not MIRROR, reason="dataset mirror not found: set TRANSFORMER_DATA_MIRROR")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("speech-cache")


def test_the_fsdd_preset_is_the_official_split(cache):
    dm = SpeechDataModule(preset="fsdd", data_dir=cache, mirror_root=MIRROR, sample_rate=8000, n_mels=20, max_tokens=3000)
    dm.setup()
    rows = {split: dm.raw(split) for split in ("train", "dev", "test")}
    assert [len(rows[s]) for s in ("train", "dev", "test")] == [2430, 270, 300]
    index = {s: {int(r.path.stem.split("_")[2]) for r in rows[s]} for s in rows}
    assert index["test"] == set(range(5)) and not index["train"] & index["test"] and not index["dev"] & index["test"]
    assert dm.labels == [str(d) for d in range(10)]
    assert dm.settings()["input"] == "frames" and dm.settings()["features"]["n_mels"] == 20
    batch = next(iter(dm.train_dataloader()))
    assert batch["src"].dim() == 3 and batch["src"].size(2) == 20
    assert int(batch["src_lengths"].max()) == batch["src"].size(1) and batch["labels"].dtype == torch.long
    assert batch["src"].size(0) * batch["src"].size(1) <= 3000


def test_a_speaker_fold_holds_that_speaker_out(cache):
    dm = SpeechDataModule(preset="fsdd", fold="theo", data_dir=cache, mirror_root=MIRROR, sample_rate=8000, n_mels=20)
    dm.setup()
    speakers = {s: {r.path.stem.split("_")[1] for r in dm.raw(s)} for s in ("train", "dev", "test")}
    assert speakers["test"] == {"theo"} and "theo" not in speakers["train"] | speakers["dev"]
    assert len(dm.raw("test")) == 500


def test_an_unknown_fold_or_preset_is_refused_by_name(cache):
    with pytest.raises(ValueError, match="data.preset='timit'"):
        SpeechDataModule(preset="timit", data_dir=cache)
    with pytest.raises(ValueError, match="data.fold='alice'"):
        SpeechDataModule(preset="fsdd", fold="alice", data_dir=cache, mirror_root=MIRROR).setup()


def test_warps_apply_to_training_frames_only(cache):
    """data.time_stretch / data.freq_warp warp the training split's items (drawn per epoch), never
    dev or test, on the user's manifests as on a preset (the data module is the same)."""
    dm = SpeechDataModule(preset="fsdd", data_dir=cache, mirror_root=MIRROR, sample_rate=8000, n_mels=20,
                          time_stretch=0.2, freq_warp=0.1)
    dm.setup()
    train, dev, test = (dm._datasets[s] for s in ("train", "dev", "test"))
    assert torch.equal(dev[0]["src"], dev.features(0)) and torch.equal(test[0]["src"], test.features(0))
    changed = [not torch.equal(train[i]["src"], train.features(i)) for i in range(10)]
    lengths = {train[i]["src"].shape[0] - train.features(i).shape[0] for i in range(10)}
    assert all(changed) and len(lengths) > 1
    first = train[0]["src"]
    assert torch.equal(train[0]["src"], first)
    train.set_epoch(1)
    assert not torch.equal(train[0]["src"], first)
    plain = SpeechDataModule(preset="fsdd", data_dir=cache, mirror_root=MIRROR, sample_rate=8000, n_mels=20)
    plain.setup()
    assert torch.equal(plain._datasets["train"][0]["src"], plain._datasets["train"].features(0))
    cropped = SpeechDataModule(preset="fsdd", data_dir=cache, mirror_root=MIRROR, sample_rate=8000, n_mels=20,
                               edge_crop=0.3)
    cropped.setup()
    train, dev = cropped._datasets["train"], cropped._datasets["dev"]
    assert torch.equal(dev[0]["src"], dev.features(0))
    cut = [train.features(i).shape[0] - train[i]["src"].shape[0] for i in range(10)]
    assert all(c >= 0 for c in cut) and sum(c > 0 for c in cut) >= 5
    eq = SpeechDataModule(preset="fsdd", data_dir=cache, mirror_root=MIRROR, sample_rate=8000, n_mels=20,
                          channel_eq=10, normalize="speaker_mean")
    eq.setup()
    train, dev = eq._datasets["train"], eq._datasets["dev"]
    assert torch.equal(dev[0]["src"], dev.features(0))
    offsets = [train[i]["src"] - train.features(i) for i in range(3)]  # one microphone a recording
    assert all(torch.allclose(o, o[0].expand_as(o), atol=1e-5) and o.abs().max() > 0 for o in offsets)
    assert not torch.allclose(offsets[0][0], offsets[1][0])
    with pytest.raises(ValueError, match="data.channel_eq"):
        SpeechDataModule(preset="fsdd", data_dir=cache, channel_eq=10)



def test_speed_perturbation_applies_to_training_audio_only(cache):
    """data.speed_perturb resamples the training split's waveforms (0.8: 1.25 times the frames),
    never dev or test's."""
    dm = SpeechDataModule(preset="fsdd", data_dir=cache, mirror_root=MIRROR, sample_rate=8000, n_mels=20,
                          speed_perturb=[0.8])
    dm.setup()
    train, dev, test = (dm._datasets[s] for s in ("train", "dev", "test"))
    assert torch.equal(dev[0]["src"], dev.features(0)) and torch.equal(test[0]["src"], test.features(0))
    for i in range(3):
        n = train.features(i).shape[0]
        assert abs(train[i]["src"].shape[0] - 1.25 * n) <= 2
    with pytest.raises(ValueError, match="data.speed_perturb"):
        SpeechDataModule(preset="fsdd", data_dir=cache, speed_perturb=[3.0])


def test_trim_db_endpoints_every_split_and_is_recorded(cache):
    """data.trim_db endpoints each split's waveforms before their features (the test split too,
    as inference will), and the checkpoint's feature settings carry it."""
    plain = SpeechDataModule(preset="fsdd", data_dir=cache, mirror_root=MIRROR, sample_rate=8000, n_mels=20)
    trimmed = SpeechDataModule(preset="fsdd", data_dir=cache, mirror_root=MIRROR, sample_rate=8000, n_mels=20,
                               trim_db=20)
    plain.setup(), trimmed.setup()
    for split in ("train", "test"):
        a, b = plain._datasets[split], trimmed._datasets[split]
        assert sum(b.features(i).shape[0] for i in range(20)) < sum(a.features(i).shape[0] for i in range(20))
    assert trimmed.settings()["features"]["trim_db"] == 20 and plain.settings()["features"]["trim_db"] is None
    band = SpeechDataModule(preset="fsdd", data_dir=cache, sample_rate=8000, f_min=200, f_max=3400).settings()
    assert (band["features"]["f_min"], band["features"]["f_max"]) == (200, 3400)


def test_speaker_normalisation_per_split_on_the_preset(cache):
    """data.normalize=speaker: each split's speakers normalised by their statistics in that split
    (the preset's manifests name the speakers); the checkpoint's settings record it, with the
    per-utterance normalisation of the features off."""
    dm = SpeechDataModule(preset="fsdd", data_dir=cache, mirror_root=MIRROR, sample_rate=8000, n_mels=20,
                          normalize="speaker")
    dm.setup()
    settings = dm.settings()
    assert settings["normalize"] == "speaker" and settings["features"]["normalize"] is False
    train, test = dm._datasets["train"], dm._datasets["test"]
    assert set(train.speaker_stats) == set(test.speaker_stats) == {"george", "jackson", "lucas", "nicolas", "theo",
                                                                    "yweweler"}
    assert not torch.equal(train.speaker_stats["theo"][0], test.speaker_stats["theo"][0])  # each split its own
    theo = torch.cat([test.features(i) for i, r in enumerate(test.rows) if r.speaker == "theo"])  # (T, K)
    assert theo.mean(0).abs().max() < 1e-4
    plain = SpeechDataModule(preset="fsdd", data_dir=cache, mirror_root=MIRROR, sample_rate=8000, n_mels=20)
    assert plain.settings()["normalize"] == "utterance" and plain.settings()["features"]["normalize"] is True


def test_speaker_normalisation_without_a_speaker_column_is_one_line(tmp_path, cache):
    """A manifest without the speaker column under data.normalize=speaker: one DataFormatError
    naming the manifest and its first row, from the config check and from the data module."""
    from transformer.data.core.readers import DataFormatError
    from transformer.data.speech.datamodule import check_speech
    from transformer.data.speech.fsdd import fsdd_recordings
    from transformer.data.speech.manifest import write_manifest

    recs = fsdd_recordings(cache, MIRROR, speakers=["theo"], digits=[0, 1], indices=[5, 6])
    train = write_manifest(tmp_path / "train.tsv", [(r.path, str(r.digit)) for r in recs])
    for check in (lambda: check_speech({"train": str(train), "normalize": "speaker"}, "data"),
                  lambda: SpeechDataModule(train=str(train), data_dir=cache, normalize="speaker").setup()):
        with pytest.raises(DataFormatError) as e:
            check()
        assert str(e.value).startswith(f"{train}:1: no speaker column") and "\n" not in str(e.value)
    with pytest.raises(ValueError, match="data.normalize='global'"):
        SpeechDataModule(train=str(train), normalize="global")
