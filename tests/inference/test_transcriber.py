"""The speech transcriber's frames: per utterance by default; for a speaker-normalised checkpoint
(``data.normalize=speaker``) each file normalised with its speaker's statistics among the inputs,
or with all the inputs of the call taken as one speaker. A fake search records what it is given."""

from __future__ import annotations

from dataclasses import asdict, replace

import pytest
import torch

from transformer.data.speech.audio import load_audio
from transformer.data.speech.features import FeatureSettings, compute_features, frame_statistics, normalize_with
from transformer.inference.transcriber import Transcriber

SETTINGS = FeatureSettings(sample_rate=8000, n_mels=40, n_ceps=20)


class Words:
    def decode(self, ids):
        return " ".join(str(i) for i in ids)


def recorded(data: dict, paths: list[str], speakers=None) -> list[torch.Tensor]:
    """Each input's frames as the search saw them, in input order."""
    seen: dict[int, torch.Tensor] = {}

    def search(src, src_lengths):  # (B, T, K), (B,)
        answers = []
        for b in range(src.size(0)):  # each row answers with the number it was seen under
            answers.append([([len(seen)], 0.0)])
            seen[len(seen)] = src[b, : int(src_lengths[b])].clone()
        return answers

    nbest = Transcriber(search, Words(), data, max_frames=1).translate(paths, speakers=speakers)
    return [seen[int(n[0][0])] for n in nbest]


@pytest.fixture
def files(mirror_root):
    folder = mirror_root / "fsdd" / "recordings"
    if not folder.is_dir():
        pytest.skip("the dataset mirror has no fsdd/")
    return [str(folder / name) for name in ("3_george_5.wav", "7_george_6.wav", "3_theo_5.wav", "7_theo_6.wav")]


def raw(path: str) -> torch.Tensor:
    return compute_features(load_audio(path, 8000), replace(SETTINGS, normalize=False))


def test_utterance_mode_is_each_files_own_normalisation(files):
    data = {"features": asdict(SETTINGS)}  # a checkpoint from before data.normalize: per utterance
    for got, path in zip(recorded(data, files), files):
        assert torch.equal(got, compute_features(load_audio(path, 8000), SETTINGS))


def test_speaker_mode_uses_the_speakers_statistics_or_the_calls(files):
    data = {"features": asdict(replace(SETTINGS, normalize=False)), "normalize": "speaker"}
    speakers = ["george", "george", "theo", "theo"]
    by_speaker = recorded(data, files, speakers)
    for i, got in enumerate(by_speaker):
        mine = [raw(p) for p, s in zip(files, speakers) if s == speakers[i]]
        assert torch.allclose(got, normalize_with(raw(files[i]), *frame_statistics(mine)), atol=1e-5)
    one_call = recorded(data, files)  # no speakers: the call's files are one speaker's
    everyone = frame_statistics(raw(p) for p in files)
    for i, got in enumerate(one_call):
        assert torch.allclose(got, normalize_with(raw(files[i]), *everyone), atol=1e-5)
    assert not torch.allclose(one_call[0], by_speaker[0], atol=1e-3)
    mean_only = recorded({**data, "normalize": "speaker_mean"}, files, speakers)
    george_mean, _ = frame_statistics(raw(p) for p in files[:2])
    assert torch.allclose(mean_only[0], raw(files[0]) - george_mean, atol=1e-5)
