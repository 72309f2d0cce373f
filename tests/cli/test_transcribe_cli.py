"""Connected digit strings end to end through the command line: a tiny autoregressive model and
a tiny CTC model train on a few strings made from mirror recordings (a user's manifests), then
transformer-evaluate reports word (digit) error rate and string accuracy from the checkpoint alone
and transformer-decode transcribes audio paths; bad manifests are one ``error:`` line."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
from hydra_helpers import compose_cfg

from transformer.evaluation.speech import transcript_scores

FEW = {"speakers": ["george", "theo"], "digits": range(10), "indices": [0, 1, 2, 5, 6, 7, 8]}
# A tiny model over the recipes' front end: a few thousand parameters, a few steps.
TINY = ["model.d_model=32", "model.n_heads=2", "model.n_encoder_layers=1", "model.n_decoder_layers=1",
        "model.d_ff=64", "model.frontend.channels=8", "trainer.max_epochs=2", "+trainer.enable_model_summary=false",
        "trainer.num_sanity_val_steps=0", "callbacks.progress_bar=null", "callbacks.early_stopping=null",
        "logger.tensorboard=null"]


@pytest.fixture(scope="module")
def strings(mirror_root: Path, tmp_path_factory) -> dict[str, Path]:
    """A few digit strings a split, written as manifests from a few mirror recordings."""
    from transformer.data.speech.fsdd import fsdd_recordings, make_digit_strings

    if not (mirror_root / "fsdd" / "recordings").is_dir():
        pytest.skip("the dataset mirror has no fsdd/")
    root = tmp_path_factory.mktemp("strings")
    recordings = fsdd_recordings(root / "cache", mirror_root=mirror_root, **FEW)
    return make_digit_strings(recordings, root / "strings", n_strings={"train": 16, "dev": 4, "test": 4}, seed=0)


def train_overrides(experiment: str, strings: dict[str, Path], run_dir: Path) -> list[str]:
    return [f"experiment={experiment}", "data.preset=null", *(f"data.{s}={p}" for s, p in strings.items()),
            *TINY, f"data.data_dir={run_dir.parent / 'cache'}", f"output_dir={run_dir}"]


@pytest.fixture(scope="module", params=["fsdd_strings", "fsdd_strings_ctc"])
def trained(request, strings, tmp_path_factory):
    from transformer.cli import train

    torch.manual_seed(0)
    run_dir = tmp_path_factory.mktemp(request.param) / "run"
    return request.param, train.run(compose_cfg("train", train_overrides(request.param, strings, run_dir)))


def test_a_tiny_model_trains_and_is_scored_on_test(trained):
    experiment, summary = trained
    test = summary["test"]["test"]
    assert test["utterances"] == 4 and 0.0 <= test["string_acc"] <= 1.0 and test["wer"] >= 0.0
    assert test["decode"]["strategy"] == ("ctc_one_pass" if experiment.endswith("ctc") else "greedy")
    ckpt = torch.load(summary["best_checkpoint"], map_location="cpu", weights_only=True)
    # the checkpoint describes itself: frames in (features), the target tokenizer, no source one
    assert ckpt["hyper_parameters"]["data"]["input"] == "frames"
    assert ckpt["hyper_parameters"]["data"]["features"]["n_mels"] == 40
    assert set(ckpt["tokenizers"]) == {"tgt"}


def test_both_recipes_keep_and_score_an_average_of_the_weights(trained):
    experiment, summary = trained
    ckpt = torch.load(summary["best_checkpoint"], map_location="cpu", weights_only=True)
    # callbacks.ema: the checkpoint's state_dict (what validation, the test and evaluate read) is the
    # moving average; the trained weights travel beside it, for a resume
    average, trained_weights = ckpt["state_dict"], ckpt["current_model_state"]
    assert average.keys() == trained_weights.keys()
    assert any(not torch.equal(average[k], trained_weights[k]) for k in average)


def test_the_autoregressive_recipe_trains_a_ctc_head_and_decodes_with_it(trained, strings, tmp_path):
    """experiment=fsdd_strings: joint CTC-attention training (task.ctc_weight) of a model with a CTC
    head, whose prefix scores its search reads (decode.ctc_weight); evaluate takes either."""
    from transformer.cli import evaluate

    experiment, summary = trained
    if experiment != "fsdd_strings":
        pytest.skip("the autoregressive recipe's")
    ckpt = torch.load(summary["best_checkpoint"], map_location="cpu", weights_only=True)
    assert ckpt["hyper_parameters"]["ctc_weight"] == 0.5
    assert "model.ctc_proj.weight" in ckpt["state_dict"]
    assert summary["test"]["test"]["decode"]["ctc_weight"] == 0.9
    scores = {}
    for w in (0.0, 0.9):
        report = evaluate.run(compose_cfg("eval", [f"ckpt_path={summary['best_checkpoint']}", "split=test",
                                                   f"output_dir={tmp_path / str(w)}", f"decode.ctc_weight={w}",
                                                   "decode.max_len_a=0", "decode.max_len_b=16", "device=cpu"]))
        scores[w] = report
        assert report["decode"]["ctc_weight"] == w and report["utterances"] == 4
    assert scores[0.9]["wer"] == pytest.approx(summary["test"]["test"]["wer"])


def test_evaluate_reads_the_checkpoint_alone(trained, strings, tmp_path):
    from transformer.cli import evaluate

    experiment, summary = trained
    strategies = ["ctc_one_pass", "ctc_beam"] if experiment.endswith("ctc") else ["greedy", "beam"]
    for strategy in strategies:
        metrics = evaluate.run(compose_cfg("eval", [
            f"ckpt_path={summary['best_checkpoint']}", "split=test", f"decode.strategy={strategy}",
            "decode.max_len_a=0", "decode.max_len_b=12", f"output_dir={tmp_path}", "device=cpu"]))
        written = json.loads((tmp_path / f"test.{strategy}.json").read_text())
        assert written["wer"] == metrics["wer"] and written["string_acc"] == metrics["string_acc"]
        assert metrics["utterances"] == 4 and metrics["utterances_per_second"] > 0
        hyps = (tmp_path / f"test.{strategy}.hyp").read_text().splitlines()
        refs = [line.split("\t")[1] for line in Path(strings["test"]).read_text().splitlines()]
        assert transcript_scores(hyps, refs) == {"wer": metrics["wer"], "string_acc": metrics["string_acc"]}


def test_evaluate_reads_a_manifest_named_as_training_names_it(trained, strings, tmp_path):
    """``data=speech_transcripts data.test=<manifest>`` scores that manifest (split null: its test),
    as ``split=<manifest>`` does; a text corpus is refused, naming the input kinds."""
    from transformer.cli import evaluate

    _, summary = trained
    common = [f"ckpt_path={summary['best_checkpoint']}", "decode.max_len_a=0", "decode.max_len_b=12", "device=cpu"]
    by_file = evaluate.run(compose_cfg("eval", [*common, f"split={strings['test']}", f"output_dir={tmp_path / 'a'}"]))
    named = evaluate.run(compose_cfg("eval", [*common, "data=speech_transcripts", f"data.test={strings['test']}",
                                              f"output_dir={tmp_path / 'b'}"]))
    assert named["split"] == "test" and named["utterances"] == 4
    assert {k: named[k] for k in ("wer", "string_acc", "file")} == {k: by_file[k] for k in ("wer", "string_acc", "file")}
    assert (tmp_path / "b" / f"test.{named['decode']['strategy']}.hyp").read_text() == \
        (tmp_path / "a" / f"test.{by_file['decode']['strategy']}.hyp").read_text()
    with pytest.raises(ValueError, match="a corpus of text inputs; .* reads frames"):
        evaluate.run(compose_cfg("eval", [*common, "data=parallel", "data.src_lang=de", "data.tgt_lang=en",
                                          f"data.test={strings['test']}", f"output_dir={tmp_path / 'c'}"]))
    assert not (tmp_path / "c").exists()


def test_decode_transcribes_audio_paths_in_order(trained, strings, tmp_path):
    from transformer.cli import decode
    from transformer.tasks.checkpoint import load_task

    _, summary = trained
    folder = Path(strings["test"]).parent
    paths = [str(folder / line.split("\t")[0]) for line in Path(strings["test"]).read_text().splitlines()]
    listing = tmp_path / "paths.txt"
    listing.write_text("\n".join([paths[0], "", *paths[1:]]) + "\n")
    cfg = compose_cfg("decode", [f"ckpt_path={summary['best_checkpoint']}", f"input={listing}",
                                 f"output={tmp_path / 'out.txt'}", "device=cpu", "decode.max_len_a=0",
                                 "decode.max_len_b=12"])
    lines = decode.run(cfg)
    assert len(lines) == len(paths) + 1 and lines[1] == ""
    task = load_task(summary["best_checkpoint"])
    direct = task.translator({"strategy": cfg.decode.strategy, "max_len_a": 0, "max_len_b": 12}).translate(paths)
    assert [lines[0], *lines[2:]] == [n[0][0] for n in direct]
    assert all(word.isdigit() for line in lines for word in line.split())


def test_word_error_rate_and_string_accuracy():
    scores = transcript_scores(["4 1 7 9", "1 2", "3"], ["4 1 7 9", "1 2 5", "3 3"])
    assert scores == {"wer": round(2 / 9, 4), "string_acc": round(1 / 3, 4)}


def test_bad_transcripts_and_missing_files_are_one_error_line(trained, strings, tmp_path, capsys, monkeypatch):
    """Through transformer-evaluate's ``main()`` (tests/cli/test_checkpoint_is_data.py runs it as a
    process of its own to an error line)."""
    from hydra_helpers import main_status

    from transformer.cli import evaluate

    _, summary = trained
    folder = Path(strings["test"]).parent
    rows = Path(strings["test"]).read_text().splitlines()
    unknown = tmp_path / "unknown.tsv"
    unknown.write_text(f"{folder / rows[0].split(chr(9))[0]}\t4 1 seven\n")
    missing = tmp_path / "missing.tsv"
    missing.write_text(f"{folder / rows[0].split(chr(9))[0]}\t4 1\nnope.wav\t1 2\n")
    monkeypatch.chdir(tmp_path)
    for manifest, message in ((unknown, f"error: {unknown}:1: transcript word 'seven' is not in the vocabulary"),
                              (missing, f"error: {missing}:2: nope.wav: no such audio file")):
        out = tmp_path / manifest.stem
        code, err = main_status(evaluate, [f"ckpt_path={summary['best_checkpoint']}", f"split={manifest}",
                                           f"output_dir={out}", "device=cpu"], capsys, monkeypatch)
        assert code == 2, err[-2000:]
        assert err.strip().splitlines()[-1].startswith(message) and "Traceback" not in err
        assert not out.exists()  # nothing written


def test_the_server_transcribes_an_uploaded_recording(trained, strings):
    """A transcript checkpoint behind transformer-serve: base64 audio on /v1/translate, the
    transcript transformer-decode writes for the same file; bad uploads are a 422 of one line;
    the warm-up call (a short silence) makes the server ready."""
    pytest.importorskip("fastapi")
    import base64

    from fastapi.testclient import TestClient
    from omegaconf import OmegaConf

    from transformer.cli.serve import load_model
    from transformer.serve.app import ServeConfig, create_app
    from transformer.serve.served import Limits
    from transformer.serve.transcription import TranscriptionModel
    from transformer.tasks.checkpoint import load_task

    _, summary = trained
    cfg = OmegaConf.create({"device": "cpu"})
    model = load_model({"id": "digits", "ckpt_path": summary["best_checkpoint"], "max_len_a": 0, "max_len_b": 12},
                       "models[0]", cfg, Limits())
    assert isinstance(model, TranscriptionModel) and "attention" not in model.options
    folder = Path(strings["test"]).parent
    path = folder / Path(strings["test"]).read_text().splitlines()[0].split("\t")[0]
    audio = base64.b64encode(path.read_bytes()).decode()
    direct = load_task(summary["best_checkpoint"]).translator(model.decoding).translate([str(path)])[0][0][0]
    with TestClient(create_app([model], ServeConfig(warm_up=True))) as client:
        deadline = time.monotonic() + 30
        while (ready := client.get("/ready")).status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        ok = client.post("/v1/translate", json={"model": "digits", "inputs": [audio, audio]})
        listed = client.get("/v1/models").json()["models"][0]
        garbage = client.post("/v1/translate", json={"model": "digits", "inputs": ["not base64!"]})
        not_audio = client.post("/v1/translate", json={"model": "digits",
                                                       "inputs": [base64.b64encode(b"hello there").decode()]})
        wrong = client.post("/v1/classify", json={"model": "digits", "inputs": [audio]})
    assert ready.status_code == 200, ready.text
    assert ok.status_code == 200, ok.text
    outputs = ok.json()["outputs"]
    assert [o["translation"] for o in outputs] == [direct, direct]
    assert all(word.isdigit() for word in direct.split())
    assert listed["input"] == "audio" and listed["endpoint"] == "/v1/translate"
    for bad, says in ((garbage, "input 0: not an audio file in base64"), (not_audio, "not a readable audio file")):
        assert bad.status_code == 422 and says in bad.json()["error"] and "\n" not in bad.json()["error"]
        assert "transformer-serve-" not in bad.json()["error"]  # the private folder is not shown
    assert wrong.status_code == 400 and "/v1/translate" in wrong.text


def test_a_run_resumes_from_its_last_checkpoint_with_the_checkpoint_s_vocabulary(trained, strings, tmp_path):
    """ckpt_path=<last.ckpt> continues a speech run: the transcripts are read with the checkpoint's
    tokenizer (its ids), and training goes on from the saved step to the new epoch count."""
    from transformer.cli import train

    experiment, summary = trained
    last = Path(summary["last_checkpoint"])
    args = [o for o in train_overrides(experiment, strings, tmp_path / "run") if o != "trainer.max_epochs=2"]
    resumed = train.run(compose_cfg("train", [*args, "trainer.max_epochs=3", f"ckpt_path={last}"]))
    assert resumed["epochs"] == 3 and resumed["global_step"] > summary["global_step"]
    saved = torch.load(last, map_location="cpu", weights_only=False)["tokenizers"]
    again = torch.load(resumed["last_checkpoint"], map_location="cpu", weights_only=False)["tokenizers"]
    assert again == saved


def test_the_server_decodes_with_the_ctc_prefix_scores_its_model_entry_asks_for(trained, strings):
    """decode.ctc_weight behind transformer-serve: a model entry's ctc_weight is the served search's
    (the transcript transformer-decode writes at that weight); a CTC model, which has no decoder to
    mix the scores into, refuses it in one line naming the entry."""
    pytest.importorskip("fastapi")
    import base64

    from fastapi.testclient import TestClient
    from omegaconf import OmegaConf

    from transformer.cli.serve import load_model
    from transformer.serve.app import ServeConfig, create_app
    from transformer.serve.served import Limits
    from transformer.tasks.checkpoint import load_task

    experiment, summary = trained
    entry = {"id": "digits", "ckpt_path": summary["best_checkpoint"], "max_len_a": 0, "max_len_b": 12, "ctc_weight": 0.9}
    cfg = OmegaConf.create({"device": "cpu"})
    if experiment == "fsdd_strings_ctc":
        with pytest.raises(ValueError, match=r"^models\[0\]\.[^\n]*ctc_weight[^\n]*$"):
            load_model(entry, "models[0]", cfg, Limits())
        return
    model = load_model(entry, "models[0]", cfg, Limits())
    assert model.decoding.ctc_weight == 0.9
    folder = Path(strings["test"]).parent
    paths = [folder / line.split("\t")[0] for line in Path(strings["test"]).read_text().splitlines()]
    direct = [n[0][0] for n in load_task(summary["best_checkpoint"]).translator(model.decoding).translate(
        [str(p) for p in paths])]
    with TestClient(create_app([model], ServeConfig())) as client:
        ok = client.post("/v1/translate", json={"model": "digits",
                                                "inputs": [base64.b64encode(p.read_bytes()).decode() for p in paths]})
    assert ok.status_code == 200, ok.text
    assert [o["translation"] for o in ok.json()["outputs"]] == direct


def test_inspect_draws_encoder_attention_over_a_recording_s_frames(trained, strings, tmp_path):
    """transformer-inspect on a transcript checkpoint: the encoder's (H, T, T) self-attention over
    the front end's positions, labelled by time, with the model's own transcript; with a window
    every weight outside the band is zero."""
    import numpy as np

    from transformer.cli import inspect
    from transformer.inspect.speech import transcription_attention
    from transformer.tasks.checkpoint import load_task

    experiment, summary = trained
    folder = Path(strings["test"]).parent
    recording = folder / Path(strings["test"]).read_text().splitlines()[0].split("\t")[0]
    step = 80  # ms a position: both recipes' front ends are x8
    cfg = compose_cfg("inspect", [f"ckpt_path={summary['best_checkpoint']}", f"text={recording}",
                                  f"output_dir={tmp_path}", "decode.max_len_a=0", "decode.max_len_b=12"])
    written = {p.name for p in inspect.run(cfg)}
    assert {"encoder_layer0.png", "attention.npz", "index.html"} <= written
    arrays = np.load(tmp_path / "sentence_0" / "attention.npz")
    n = len(arrays["tokens"])
    assert n > 10 and list(arrays["tokens"][:3]) == ["0 ms", f"{step} ms", f"{2 * step} ms"]
    full = arrays["encoder.layer0"]
    assert full.shape == (2, n, n) and np.allclose(full.sum(-1), 1, atol=1e-5)
    task = load_task(summary["best_checkpoint"])
    assert str(arrays["transcript"]) == task.translator({"max_len_a": 0, "max_len_b": 12, "strategy": cfg.decode.strategy}
                                                        ).translate([str(recording)])[0][0][0]
    assert (np.abs(np.subtract.outer(np.arange(n), np.arange(n))) > 3).any() and (full > 0).all()
    task.model.encoder.window = 3  # truncated attention: each position sees +-3 positions
    band = transcription_attention(task, str(recording))["encoder.layer0"]
    outside = np.abs(np.subtract.outer(np.arange(n), np.arange(n))) > 3  # (T, T)
    assert np.allclose(band.sum(-1), 1, atol=1e-5) and (band[:, outside] == 0).all() and (band[:, ~outside] > 0).all()


def test_validation_logs_the_word_error_rate_that_chooses_checkpoints(trained, tmp_path):
    """``val/wer`` during training: the recipes monitor it (lower is better), and the best
    checkpoint's score is the word error rate of that checkpoint's validation transcripts,
    decoded with the run's ``task.val_decode``."""
    from transformer.evaluation.speech import evaluate_transcripts
    from transformer.tasks.checkpoint import load_task

    _, summary = trained
    assert summary["monitor"] == "val/wer"
    ckpt = torch.load(summary["best_checkpoint"], map_location="cpu", weights_only=False)
    (ranked,) = [k for k in ckpt["callbacks"] if k.startswith("ModelCheckpoint") and "'monitor': 'val/wer'" in k]
    assert "'mode': 'min'" in ranked and ckpt["callbacks"][ranked]["best_model_score"] is not None
    task = load_task(summary["best_checkpoint"])
    dev = evaluate_transcripts(task, "dev", dict(task.hparams.val_decode), tmp_path)
    assert float(summary["best_score"]) == pytest.approx(dev["wer"], abs=1e-4)


def test_the_autoregressive_length_cap_counts_seconds_not_frames(trained, strings, tmp_path, monkeypatch):
    """A long recording (several test strings end to end) decodes with the default length cap:
    ``max_len_a`` counts the pieces its duration holds at the training transcripts' highest rate
    (recorded in the checkpoint), not its frames; ``max_len_a=0`` still caps at ``max_len_b``."""
    import math

    import numpy as np
    import soundfile as sf

    from transformer.decoding import greedy
    from transformer.tasks.checkpoint import load_task

    experiment, summary = trained
    if experiment.endswith("ctc"):
        pytest.skip("CTC writes one piece per frame at most: no length cap")
    task = load_task(summary["best_checkpoint"])
    rows = [line.split("\t") for line in Path(strings["train"]).read_text().splitlines()]
    folder = Path(strings["train"]).parent
    seconds = [sf.info(folder / path).duration for path, _ in rows]
    rate = max(len(text.split()) / s for (_, text), s in zip(rows, seconds))  # + EOS: a piece per word
    assert task.hparams.data["pieces_per_second"] == pytest.approx(rate, abs=0.011)
    test = [folder / line.split("\t")[0] for line in Path(strings["test"]).read_text().splitlines()]
    audio = np.concatenate([sf.read(p, dtype="float32")[0] for p in test])
    long = tmp_path / "long.wav"
    sf.write(long, audio, 8000, subtype="PCM_16")
    frames = int(np.ceil(len(audio) / 80))  # 10 ms a frame at 8 kHz, about

    caps = []
    original = greedy.max_target_lengths

    def recording(*args, **kwargs):
        lengths = original(*args, **kwargs)  # (B,)
        caps.append(lengths.tolist())
        return lengths

    monkeypatch.setattr(greedy, "max_target_lengths", recording)
    (hyps,) = task.translator({"strategy": "greedy"}).translate([str(long)])
    expected = math.floor(1.2 * task.hparams.data["pieces_per_second"] * len(audio) / 8000 + 10)
    assert caps[-1][0] == pytest.approx(expected, abs=1) and caps[-1][0] < frames / 10
    assert len(hyps[0][0].split()) <= caps[-1][0]  # cut at the cap (an untrained model never ends)
    task.translator({"strategy": "greedy", "max_len_a": 0, "max_len_b": 5}).translate([str(long)])
    assert caps[-1] == [5]
