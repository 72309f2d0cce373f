"""Connected digit strings: seeded and deterministic, one speaker each, never mixing splits,
targets that are the digits joined, silences in range, and audio that is exactly the gained
recordings with those silences between them."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from transformer.data.speech.audio import read_audio
from transformer.data.speech.fsdd import make_digit_strings, string_pools
from transformer.data.speech.manifest import read_manifest

COUNTS = {"train": 12, "dev": 4, "test": 8}


def _sources(out, split):
    """``{wav name: (recording names, silences ms, gains dB, scale dB)}`` from the sidecar file."""
    lines = (out / f"{split}.sources.tsv").read_text().splitlines()
    assert lines[0] == "audio\trecordings\tsilences_ms\tgains_db\tscale_db"
    table = {}
    for line in lines[1:]:
        wav, recs, sil, gains, scale = line.split("\t")
        table[wav] = (recs.split(), [int(s) for s in sil.split()], [float(g) for g in gains.split()], float(scale))
    return table


@pytest.fixture(scope="module")
def strings(fsdd_few, tmp_path_factory):
    out = tmp_path_factory.mktemp("strings")
    return out, make_digit_strings(fsdd_few, out, COUNTS, seed=3)


def _folder_bytes(out):
    return {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_same_seed_same_files_other_seed_other_files(fsdd_few, strings, tmp_path):
    out, _ = strings
    make_digit_strings(fsdd_few, tmp_path / "again", COUNTS, seed=3)
    make_digit_strings(fsdd_few, tmp_path / "other", COUNTS, seed=4)
    first = _folder_bytes(out)
    assert _folder_bytes(tmp_path / "again") == first
    other = _folder_bytes(tmp_path / "other")
    assert other.keys() == first.keys() and other != first
    assert all(other[k] != first[k] for k in first if k.name.endswith("sources.tsv"))


def test_manifests_and_counts(strings):
    out, written = strings
    assert set(written) == set(COUNTS)
    for split, n in COUNTS.items():
        rows = read_manifest(written[split])
        assert len(rows) == n and written[split] == out / f"{split}.tsv"
        assert all(r.path.parent == out / split for r in rows)
        assert (out / f"{split}.tsv").read_text().startswith(f"{split}/00000.wav\t")
        info = sf.info(str(rows[0].path))
        assert (info.samplerate, info.channels, info.subtype) == (8000, 1, "PCM_16")


def test_more_training_strings_leave_dev_and_test_alone(fsdd_few, strings, tmp_path):
    # experiment=fsdd_strings_ctc trains on more strings than the preset's default: its scores
    # compare with other counts' only if dev and test are the same files, and the larger training
    # set begins with the smaller one
    out, _ = strings
    more = tmp_path / "more"
    make_digit_strings(fsdd_few, more, {**COUNTS, "train": 3 * COUNTS["train"]}, seed=3)
    for split in ("dev", "test"):
        assert _folder_bytes(more / split) == _folder_bytes(out / split)
        assert (more / f"{split}.sources.tsv").read_bytes() == (out / f"{split}.sources.tsv").read_bytes()
    fewer, larger = _sources(out, "train"), _sources(more, "train")
    assert len(larger) == 3 * len(fewer) and all(larger[k] == v for k, v in fewer.items())


def test_never_mixes_splits_one_speaker_per_string(fsdd_few, strings):
    out, _ = strings
    pools = string_pools(fsdd_few, seed=3)
    pool_names = {s: {r.name for r in recs} for s, recs in pools.items()}
    assert not (pool_names["train"] & pool_names["dev"]) and pool_names["dev"]
    used = {}
    for split in COUNTS:
        used[split] = set()
        for recs, *_ in _sources(out, split).values():
            assert set(recs) <= pool_names[split], (split, recs)
            assert len({name.split("_")[1] for name in recs}) == 1  # one speaker
            indices = {int(name.split("_")[2]) for name in recs}
            assert (max(indices) < 5) if split == "test" else (min(indices) >= 5)
            used[split] |= set(recs)
    assert not (used["train"] & used["dev"]) and not (used["train"] & used["test"]) and not (used["dev"] & used["test"])


def test_targets_silences_gains_and_audio(fsdd_few, strings):
    out, written = strings
    by_name = {r.name: r for r in fsdd_few}
    lengths = set()
    for split in COUNTS:
        table = _sources(out, split)
        for row in read_manifest(written[split]):
            recs, silences, gains, scale = table[f"{split}/{row.path.name}"]
            assert row.text == " ".join(name.split("_")[0] for name in recs)  # "4 1 7 9"
            assert 2 <= len(recs) <= 7 and len(silences) == len(recs) - 1 and len(gains) == len(recs)
            assert all(50 <= s <= 300 for s in silences)
            assert all(-6.0 <= g <= 6.0 for g in gains) and scale <= 0.0
            lengths.add(len(recs))
            expected = []
            for i, (name, g) in enumerate(zip(recs, gains)):
                if i:
                    expected.append(np.zeros(silences[i - 1] * 8, dtype=np.float32))
                expected.append(read_audio(by_name[name].path)[0] * 10 ** ((g + scale) / 20))
            expected = np.concatenate(expected)
            wave, rate = read_audio(row.path)
            assert rate == 8000 and wave.shape == expected.shape
            np.testing.assert_allclose(wave, expected, atol=1e-4)  # 16-bit rounding
            assert np.abs(wave).max() < 1.0
    assert len(lengths) > 2  # lengths vary


def test_bad_settings(fsdd_few, tmp_path):
    with pytest.raises(ValueError, match="unknown splits"):
        make_digit_strings(fsdd_few, tmp_path, {"valid": 3})
    with pytest.raises(ValueError, match="bad ranges"):
        make_digit_strings(fsdd_few, tmp_path, {"test": 3}, n_digits=(3, 2))


def test_a_loud_string_is_scaled_down_not_clipped(tmp_path):
    from transformer.data.speech.fsdd import DigitString, Recording, render_string

    a, b = Recording(1, "x", 5, tmp_path / "a.wav"), Recording(2, "x", 6, tmp_path / "b.wav")
    audio = {a: np.full(100, 0.9, np.float32), b: np.full(50, -0.5, np.float32)}
    wave, string = render_string(DigitString((a, b), (50,), (6.0, 0.0)), audio)
    assert string.scale_db < -6.0 + 20 * np.log10(0.99 / 0.9) + 1e-3 and string.gains_db == (6.0, 0.0)
    assert 0.985 < np.abs(wave).max() <= 0.99
    assert wave.shape == (100 + 400 + 50,) and np.all(wave[100:500] == 0)
    np.testing.assert_allclose(wave[500:] / wave[0], -0.5 / (0.9 * 10 ** (6 / 20)), rtol=1e-5)
    quiet, same = render_string(DigitString((a, b), (50,), (-6.0, 0.0)), audio)
    assert same.scale_db == 0.0 and np.isclose(quiet[0], 0.9 * 10 ** (-6 / 20))
