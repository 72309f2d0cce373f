"""Speech classification end to end from the command line on a few real recordings: a user's
manifests train a tiny frames classifier (through the classification task, the encoder behind a
convolutional front end), the checkpoint evaluates (accuracy) and classifies audio files, and
bad audio or manifest rows end with one ``error:`` line naming the file and row, nothing written.

The commands run their ``main()`` in this process; transformer-classify also runs as a process
of its own, on good files and on a ten-minute recording (whose memory is that process's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra_helpers import main_output

from tests.peak_memory import run_with_peak

pytest.importorskip("soundfile")


def run_cli(module: str, *args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", f"transformer.cli.{module}", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=600, input=stdin)


def in_process(command: str, *args: str, cwd: Path, capsys, monkeypatch,
               stdin: str | None = None) -> subprocess.CompletedProcess:
    """What :func:`run_cli` gives, from the command's ``main()`` run in this process."""
    import importlib

    with monkeypatch.context() as m:
        m.chdir(cwd)
        code, out, err = main_output(importlib.import_module(f"transformer.cli.{command}"), list(args), capsys, m,
                                     stdin=stdin)
    return subprocess.CompletedProcess(command, code, out, err)


def one_error(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and lines[-1].startswith("error: "), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    return lines[-1]


def manifest(path: Path, recordings: Path, names: list[str]) -> Path:
    """``audio path<TAB>digit`` rows, paths relative to the manifest (copies beside it)."""
    folder = path.parent / "audio"
    folder.mkdir(exist_ok=True)
    rows = []
    for name in names:
        (folder / name).write_bytes((recordings / name).read_bytes())
        rows.append(f"audio/{name}\t{name.split('_')[0]}")
    path.write_text("\n".join(rows) + "\n")
    return path


TINY_MODEL = ["model.d_model=32", "model.n_heads=2", "model.n_layers=1", "model.d_ff=64", "model.frontend.channels=8",
              "data.n_mels=20", "data.sample_rate=8000", "data.max_tokens=600", "task.warmup_steps=2",
              "trainer.max_epochs=2", "callbacks.progress_bar=null", "logger.tensorboard=null"]


N_CEPS = 12  # of TINY_MODEL's 20 mel bands


def train_tiny(recordings: Path, root: Path, write_manifest, *overrides: str) -> tuple[Path, dict]:
    """A tiny classifier of 0s and 1s from george and theo (takes 5-10 train, 0-1 test), trained
    by transformer-train's ``run`` in ``root``: ``(root, its train_summary.json)``."""
    from hydra_helpers import compose_cfg

    from transformer.cli import train as train_cli

    names = [f"{d}_{s}_{i}.wav" for d in (0, 1) for s in ("george", "theo") for i in range(5, 11)]
    tests = [f"{d}_{s}_{i}.wav" for d in (0, 1) for s in ("george", "theo") for i in range(2)]
    train = write_manifest(root / "train.tsv", recordings, names)
    test = write_manifest(root / "test.tsv", recordings, tests)
    run = root / "run"
    train_cli.run(compose_cfg("train", ["experiment=speech_classify", f"data.train={train}", f"data.test={test}",
                                        f"data.data_dir={root / 'cache'}", f"output_dir={run}", *TINY_MODEL,
                                        *overrides]))
    return root, json.loads((run / "train_summary.json").read_text())


@pytest.fixture(scope="module")
def trained(mirror_root, tmp_path_factory):
    # MFCCs (data.n_ceps): the checkpoint must carry them for evaluate, classify and serve
    return train_tiny(mirror_root / "fsdd" / "recordings", tmp_path_factory.mktemp("speech"), manifest,
                      f"data.n_ceps={N_CEPS}")


def test_a_speech_classifier_trains_evaluates_and_classifies_audio_files(trained, capsys, monkeypatch):
    root, summary = trained
    ckpt = summary["last_checkpoint"]
    assert summary["global_step"] > 0
    import torch

    hp = torch.load(ckpt, map_location="cpu", weights_only=False)["hyper_parameters"]
    assert hp["data"]["features"]["n_ceps"] == N_CEPS  # the features travel with the weights
    assert hp["model"]["frontend"]["n_mels"] == N_CEPS  # the front end reads one value a cepstrum
    proc = in_process("evaluate", f"ckpt_path={ckpt}", "split=test", f"output_dir={root / 'eval'}", cwd=root,
                      capsys=capsys, monkeypatch=monkeypatch)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (written,) = (root / "eval").glob("*.test.metrics.json")
    metrics = json.loads(written.read_text())
    assert 0 <= metrics["acc"] <= 1 and metrics["n"] == 8
    paths = [str(root / "audio" / "1_theo_0.wav"), str(root / "audio" / "0_george_1.wav")]
    proc = run_cli("classify", f"ckpt_path={ckpt}", "top_k=2", cwd=root, stdin="\n".join(paths) + "\n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 2 and all({ln.split("\t")[0], ln.split("\t")[2]} == {"0", "1"} for ln in lines)


@pytest.mark.parametrize("damage", ["not_audio", "empty", "missing"])
def test_a_bad_audio_file_to_classify_is_one_line_naming_it(trained, tmp_path, damage, capsys, monkeypatch):
    _, summary = trained
    bad = tmp_path / "bad.wav"
    if damage == "not_audio":
        bad.write_text("this is not a recording\n")
    elif damage == "empty":
        bad.write_bytes(b"")
    proc = in_process("classify", f"ckpt_path={summary['last_checkpoint']}", cwd=tmp_path, stdin=f"{bad}\n",
                      capsys=capsys, monkeypatch=monkeypatch)
    assert "bad.wav" in one_error(proc)
    assert sorted(p.name for p in tmp_path.iterdir()) == (["bad.wav"] if damage != "missing" else [])


def test_a_manifest_row_whose_file_is_missing_is_one_line_naming_the_row(mirror_root, tmp_path, capsys, monkeypatch):
    recordings = mirror_root / "fsdd" / "recordings"
    train = manifest(tmp_path / "train.tsv", recordings, ["0_george_5.wav", "1_george_5.wav"])
    with train.open("a") as f:
        f.write("audio/nowhere.wav\t1\n")
    proc = in_process("train", "experiment=speech_classify", f"data.train={train}", f"data.data_dir={tmp_path / 'c'}",
                      f"hydra.run.dir={tmp_path / 'run'}", *TINY_MODEL, cwd=tmp_path, capsys=capsys,
                      monkeypatch=monkeypatch)
    line = one_error(proc)
    assert "train.tsv:3" in line and "nowhere.wav" in line
    assert not (tmp_path / "run").exists()


def test_the_server_classifies_an_uploaded_recording(trained):
    pytest.importorskip("fastapi")
    import base64

    from fastapi.testclient import TestClient

    from transformer.serve.app import ServeConfig, create_app
    from transformer.serve.served import AudioClassificationModel
    from transformer.tasks.checkpoint import load_task

    root, summary = trained
    model = AudioClassificationModel("digits", load_task(summary["last_checkpoint"]), "last.ckpt", top_k=2)
    audio = base64.b64encode((root / "audio" / "1_theo_0.wav").read_bytes()).decode()
    with TestClient(create_app([model], ServeConfig(warm_up=True))) as client:
        deadline = time.monotonic() + 30  # the warm-up call (half a second of silence) makes it ready
        while (ready := client.get("/ready")).status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        listed = client.get("/v1/models").json()["models"][0]
        ok = client.post("/v1/classify", json={"model": "digits", "inputs": [audio, audio]})
        garbage = client.post("/v1/classify", json={"model": "digits", "inputs": ["not base64!"]})
        not_audio = client.post("/v1/classify", json={"model": "digits",
                                                      "inputs": [base64.b64encode(b"hello there").decode()]})
    assert ready.status_code == 200, ready.text
    assert listed["input"] == "audio"  # the page offers a file picker
    assert ok.status_code == 200, ok.text
    outputs = ok.json()["outputs"]
    assert len(outputs) == 2 and outputs[0]["label"] in ("0", "1") and len(outputs[0]["top"]) == 2
    # the same recording twice: the same labels, the same probabilities up to float32 rounding
    # (the batch's two rows can take different kernel paths: 6e-8 apart has been seen)
    first, second = outputs
    assert [t["label"] for t in first["top"]] == [t["label"] for t in second["top"]] and first["label"] == second["label"]
    assert second["probability"] == pytest.approx(first["probability"], abs=1e-6)
    assert [t["probability"] for t in second["top"]] == pytest.approx([t["probability"] for t in first["top"]], abs=1e-6)
    assert second["probabilities"] == pytest.approx(first["probabilities"], abs=1e-6)
    assert garbage.status_code == 422 and "base64" in garbage.text
    assert not_audio.status_code == 422 and "not a readable audio file" in not_audio.text


def test_inspect_draws_attention_over_a_recording_s_frames(trained, tmp_path):
    from hydra_helpers import compose_cfg

    from transformer.cli import inspect

    root, summary = trained
    recording = root / "audio" / "1_theo_0.wav"
    cfg = compose_cfg("inspect", [f"ckpt_path={summary['last_checkpoint']}", f"text={recording}",
                                  f"output_dir={tmp_path}"])
    written = {p.name for p in inspect.run(cfg)}
    assert {"encoder_layer0.png", "attention.npz", "index.html"} <= written
    import numpy as np

    arrays = np.load(tmp_path / "sentence_0" / "attention.npz")
    n = len(arrays["tokens"])
    assert arrays["encoder.layer0"].shape == (2, n, n) and np.allclose(arrays["encoder.layer0"].sum(-1), 1, atol=1e-5)
    assert list(arrays["tokens"][:3]) == ["0 ms", "40 ms", "80 ms"]


def test_a_ten_minute_recording_classifies_in_bounded_memory(trained, tmp_path):
    """60,000 frames (15,000 positions after the front end) through the encoder: one answer, and
    the process stays far below what (T, T) attention scores per head and layer would take."""
    import numpy as np
    import soundfile as sf

    _, summary = trained
    long = tmp_path / "ten_minutes.wav"
    sf.write(long, (np.random.default_rng(0).standard_normal(8000 * 600) * 0.1).astype(np.float32), 8000,
             subtype="PCM_16")
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1")
    proc, peak = run_with_peak([sys.executable, "-m", "transformer.cli.classify", f"ckpt_path={summary['last_checkpoint']}"],
                               input=f"{long}\n", cwd=tmp_path, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(proc.stdout.strip().splitlines()) == 1
    assert peak < 2 * 1024 * 1024  # KiB: this process's peak under 2 GB


# ----------------------------------------------------------------------------- per-speaker normalisation
def speaker_manifest(path: Path, recordings: Path, names: list[str]) -> Path:
    """``audio path<TAB>digit<TAB>speaker`` rows (the speaker from FSDD's file name)."""
    manifest(path, recordings, names)
    rows = [f"{line}\t{line.split('_')[1]}" for line in path.read_text().splitlines()]
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.fixture(scope="module")
def trained_per_speaker(mirror_root, tmp_path_factory):
    return train_tiny(mirror_root / "fsdd" / "recordings", tmp_path_factory.mktemp("speech-speaker"),
                      speaker_manifest, "data.normalize=speaker", "data.trim_db=40", "data.channel_eq=6")


def test_a_speaker_normalised_classifier_records_it_and_evaluates_by_the_speaker_column(trained_per_speaker, capsys,
                                                                                       monkeypatch):
    """The checkpoint keeps data.normalize=speaker (and the endpointing, data.trim_db; the training
    recordings went through random microphones, data.channel_eq); evaluation normalises each test
    row with its speaker's statistics from the manifest, as the data module did in training, so
    the accuracy read back equals the one the training's test reported."""
    import torch

    root, summary = trained_per_speaker
    ckpt = summary["best_checkpoint"]
    hp = torch.load(ckpt, map_location="cpu", weights_only=False)["hyper_parameters"]
    assert hp["data"]["normalize"] == "speaker" and hp["data"]["features"]["normalize"] is False
    assert hp["data"]["features"]["trim_db"] == 40
    proc = in_process("evaluate", f"ckpt_path={ckpt}", "split=test", f"output_dir={root / 'eval'}", cwd=root,
                      capsys=capsys, monkeypatch=monkeypatch)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (written,) = (root / "eval").glob("*.test.metrics.json")
    metrics = json.loads(written.read_text())
    assert metrics["n"] == 8 and metrics["acc"] == summary["test"]["test"]["acc"]
    # the classifier's probabilities are the model's on the data module's frames (speaker statistics
    # of the test split), not on frames normalised any other way
    from transformer.data.speech.datamodule import feature_settings
    from transformer.data.speech.dataset import SpeechDataset
    from transformer.data.speech.manifest import read_manifest
    from transformer.tasks.checkpoint import load_task

    task = load_task(ckpt)
    rows = read_manifest(root / "test.tsv")
    ds = SpeechDataset(rows, feature_settings(hp["data"]), normalize="speaker")
    model = task.members()[0][0].eval()
    with torch.no_grad():
        expected = torch.cat([torch.softmax(model(ds[i]["src"][None], src_lengths=torch.tensor([len(ds[i]["src"])])),
                                            -1) for i in range(len(ds))])  # (N, C)
    got = task.classifier().probabilities([str(r.path) for r in rows], speakers=[r.speaker for r in rows])
    assert torch.allclose(got, expected, atol=1e-5)
    assert not torch.allclose(task.classifier().probabilities([str(r.path) for r in rows]), expected, atol=1e-3)


def test_files_without_speakers_are_one_speaker_a_call(trained_per_speaker, capsys, monkeypatch):
    """transformer-classify's files (no speaker column) are normalised together as one speaker's:
    the answer for each file depends on the others of the call, and equals the in-process
    classifier's with every file given one speaker; a manifest to evaluate without the speaker
    column is one error line."""
    from transformer.tasks.checkpoint import load_task

    root, summary = trained_per_speaker
    ckpt = summary["best_checkpoint"]
    paths = [str(root / "audio" / n) for n in ("1_theo_0.wav", "0_george_1.wav", "0_theo_1.wav")]
    proc = in_process("classify", f"ckpt_path={ckpt}", "top_k=2", cwd=root, stdin="\n".join(paths) + "\n",
                      capsys=capsys, monkeypatch=monkeypatch)
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = [[float(x) for x in line.split("\t")[1::2]] for line in proc.stdout.strip().splitlines()]
    classifier = load_task(ckpt).classifier()
    together = classifier.probabilities(paths)
    assert torch_close(together, classifier.probabilities(paths, speakers=["x", "x", "x"]))
    apart = classifier.probabilities(paths, speakers=["theo", "george", "theo"])
    assert not torch_close(together, apart)  # the statistics follow the speakers
    assert [sorted(p, reverse=True) for p in printed] == [sorted(round(v, 4) for v in row)[::-1][:2]
                                                          for row in together.tolist()]
    no_speakers = manifest(root / "plain.tsv", root / "audio", ["1_theo_0.wav", "0_george_1.wav"])
    line = one_error(in_process("evaluate", f"ckpt_path={ckpt}", f"split={no_speakers}",
                                f"output_dir={root / 'eval-plain'}", cwd=root, capsys=capsys, monkeypatch=monkeypatch))
    assert "plain.tsv" in line and "no speaker column" in line
    assert not (root / "eval-plain").exists()


def torch_close(a, b) -> bool:
    import torch

    return bool(torch.allclose(a, b, atol=1e-6))


@pytest.mark.parametrize("setting", ["data.normalize=speaker", "task.speaker_adversarial=0.5"])
def test_a_setting_that_needs_speakers_without_the_column_is_one_line_before_training(mirror_root, tmp_path, setting,
                                                                                      capsys, monkeypatch):
    recordings = mirror_root / "fsdd" / "recordings"
    train = manifest(tmp_path / "train.tsv", recordings, ["0_george_5.wav", "1_george_5.wav"])
    proc = in_process("train", "experiment=speech_classify", f"data.train={train}", f"data.data_dir={tmp_path / 'c'}",
                      f"hydra.run.dir={tmp_path / 'run'}", *TINY_MODEL, setting, cwd=tmp_path,
                      capsys=capsys, monkeypatch=monkeypatch)
    line = one_error(proc)
    assert "train.tsv:1" in line and "no speaker column" in line and setting in line
    assert not (tmp_path / "run").exists() and not (tmp_path / "c").exists()


def test_the_server_refuses_a_speaker_normalised_model_in_one_line(trained_per_speaker):
    """One upload gives no speaker's statistics, and a batch mixes clients: refused at start."""
    pytest.importorskip("fastapi")
    from hydra_helpers import compose_cfg

    from transformer.cli import serve

    _, summary = trained_per_speaker
    cfg = compose_cfg("serve", [f"models=[{{id:digits,ckpt_path:{summary['best_checkpoint']}}}]"])
    with pytest.raises(ValueError, match=r"models\[0\].ckpt_path: a model trained with data.normalize=speaker") as e:
        serve.check(cfg)
    assert "\n" not in str(e.value)


def test_mixup_of_recordings_trains_and_is_recorded(mirror_root, tmp_path, monkeypatch):
    """task.mixup on speech frames: pairs of recordings blended over the longer one's frames."""
    import torch

    from transformer.tasks import mixing

    calls = []
    real = mixing.mix_frames

    def counted(src, lengths, mixup):
        calls.append((tuple(src.shape), lengths.tolist()))
        return real(src, lengths, mixup)

    monkeypatch.setattr("transformer.tasks.classification.mix_frames", counted)
    _, summary = train_tiny(mirror_root / "fsdd" / "recordings", tmp_path, manifest, "task.mixup=0.4")
    assert summary["global_step"] > 0 and len(calls) == summary["global_step"]  # every training batch
    assert all(len(shape) == 3 and shape[0] == len(lengths) for shape, lengths in calls)
    hp = torch.load(summary["last_checkpoint"], map_location="cpu", weights_only=False)["hyper_parameters"]
    assert hp["mixup"] == 0.4


def test_speaker_adversarial_training_learns_the_speakers_and_the_checkpoint_evaluates(mirror_root, tmp_path,
                                                                                      capsys, monkeypatch):
    """task.speaker_adversarial on a manifest with a speaker column: the training voices travel in
    the checkpoint with the speaker classifier, every training batch scores its speakers, and the
    checkpoint evaluates and classifies as any other."""
    import torch

    from transformer.tasks import classification

    seen = []
    real = classification.ClassificationTask._speaker_loss

    def counted(self, vector, speakers, mixed):
        seen.append(list(speakers))
        return real(self, vector, speakers, mixed)

    monkeypatch.setattr(classification.ClassificationTask, "_speaker_loss", counted)
    root, summary = train_tiny(mirror_root / "fsdd" / "recordings", tmp_path, speaker_manifest,
                               "task.speaker_adversarial=1.0")
    assert summary["global_step"] > 0 and len(seen) == summary["global_step"]
    assert {s for batch in seen for s in batch} == {"george", "theo"}
    ckpt = torch.load(summary["last_checkpoint"], map_location="cpu", weights_only=False)
    assert ckpt["hyper_parameters"]["speaker_adversarial"] == 1.0
    assert ckpt["hyper_parameters"]["speakers"] == ["george", "theo"]
    assert any(key.startswith("speaker_adversary.") for key in ckpt["state_dict"])
    proc = in_process("evaluate", f"ckpt_path={summary['last_checkpoint']}", "split=test",
                      f"output_dir={root / 'eval'}", cwd=root, capsys=capsys, monkeypatch=monkeypatch)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (written,) = (root / "eval").glob("*.test.metrics.json")
    assert json.loads(written.read_text())["n"] == 8

