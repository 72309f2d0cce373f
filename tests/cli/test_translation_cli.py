"""Train → evaluate → resume → decode → average through the real command lines, on a slice
of Multi30k de→en from the mirror (tiny model, a few dozen steps, CPU): the first training,
evaluation and decoding in processes of their own, the rest through the commands' ``main()`` in
this process."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra_helpers import compose_cfg, main_output, main_status

from transformer.cli import average as average_cli
from transformer.cli import decode as decode_cli
from transformer.cli import evaluate as evaluate_cli
from transformer.cli import train as train_cli
from transformer.cli.evaluate import evaluate_checkpoint, evaluate_grid
from transformer.tasks.checkpoint import CheckpointError, load_task

REPO = Path(__file__).resolve().parents[2]
TRAIN_ARGS = [
    "model=tiny", "data.vocab_size=400", "data.train_subset=512", "data.max_tokens=1200",
    "trainer.max_epochs=1", "trainer.log_every_n_steps=5",
    "task.warmup_steps=20", "task.lr=3e-3", "callbacks.progress_bar=null",
    "callbacks.early_stopping=null", "logger.tensorboard=null",
    # decoding during validation stays short: a tiny model rarely emits EOS
    "task.val_decode.max_len_a=0", "task.val_decode.max_len_b=12",
]


def cli(module: str, args: list[str], env: dict, stdin: str | None = None, check: bool = True,
        cwd: Path = REPO):
    proc = subprocess.run(
        [sys.executable, "-m", f"transformer.cli.{module}", *args], input=stdin, text=True,
        capture_output=True, env=env, cwd=cwd, timeout=900,  # generous: the suite may run beside other work
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{module} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


@pytest.fixture(scope="module")
def env(mirror_root, tmp_path_factory):
    e = dict(os.environ, TRANSFORMER_DATA_MIRROR=str(mirror_root), HF_DATASETS_OFFLINE="1",
             PYTHONUNBUFFERED="1")
    e["CACHE"] = str(tmp_path_factory.mktemp("cache"))
    return e


@pytest.fixture(scope="module")
def trained(env, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    cli("train", [*TRAIN_ARGS, f"hydra.run.dir={out}", f"data.data_dir={env['CACHE']}",
                  "test_splits=[test_2017_mscoco]", "test_decode.max_len_a=0", "test_decode.max_len_b=8"], env)
    return out


def test_train_writes_checkpoints_tokenizer_and_summary(trained):
    summary = json.loads((trained / "train_summary.json").read_text())
    assert summary["global_step"] > 5
    assert Path(summary["best_checkpoint"]).is_file() and Path(summary["last_checkpoint"]).is_file()
    ckpt = torch.load(summary["last_checkpoint"], map_location="cpu", weights_only=False)
    # self-describing: model config, language pair and tokenizer travel with the weights
    hp = ckpt["hyper_parameters"]
    assert hp["model"]["_target_"] == "transformer.models.EncoderDecoder"
    assert (hp["src_lang"], hp["tgt_lang"]) == ("de", "en")
    assert json.loads(ckpt["tokenizers"]["src"])["model"]["type"] == "BPE"
    assert ckpt["transformer_task"] == "translation"
    # the best checkpoint was evaluated on the requested test split after fitting
    test = summary["test"]["test_2017_mscoco"]
    assert test["sentences"] == 461 and test["checkpoint"] == summary["best_checkpoint"]
    assert (trained / "eval" / "test_2017_mscoco.greedy.json").is_file()
    metrics = (trained / "csv" / "metrics.csv").read_text().splitlines()[0]
    for key in ("train/loss", "val/loss", "val/bleu", "lr"):
        assert key in metrics


def test_evaluate_reads_everything_from_the_checkpoint(trained, env, tmp_path):
    summary = json.loads((trained / "train_summary.json").read_text())
    ckpt = torch.load(summary["best_checkpoint"], map_location="cpu", weights_only=False)
    best = [v for k, v in ckpt["callbacks"].items() if k.startswith("ModelCheckpoint")][0]
    proc = cli("evaluate", [f"ckpt_path={summary['best_checkpoint']}", "split=val", f"output_dir={tmp_path}",
                            f"data_dir={env['CACHE']}", "decode.max_len_a=0", "decode.max_len_b=12"], env)
    metrics = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert metrics["sentences"] == 1014 and metrics["pair"] == "de-en"
    assert "tok:13a" in metrics["bleu_signature"] and "case:mixed" in metrics["bleu_signature"]
    assert "case:lc" in metrics["bleu_lowercase_signature"]
    assert metrics["chrf"] > 0 and metrics["decode_seconds"] > 0
    # the validation BLEU stored in the checkpoint is recomputed from the raw references
    assert metrics["bleu"] == pytest.approx(float(best["best_model_score"]), abs=0.02)
    hyps = (tmp_path / "val.greedy.hyp.en").read_text(encoding="utf-8").split("\n")
    assert len(hyps) == 1014 + 1  # one line per sentence, in input order
    saved = json.loads((tmp_path / "val.greedy.json").read_text())
    assert saved["bleu"] == metrics["bleu"]


def test_evaluate_grid_runs_every_split_and_decoding_and_writes_a_summary(trained, env):
    best = json.loads((trained / "train_summary.json").read_text())["best_checkpoint"]
    short = {"max_len_a": 0, "max_len_b": 6}
    decodes = [{"strategy": "greedy", **short}, {"strategy": "beam", "beam_size": 2, **short}]
    results = evaluate_grid(best, ["test_2017_mscoco"], decodes, data_dir=env["CACHE"], device="cpu")
    assert [(m["split"], m["decode"]["strategy"]) for m in results] == [("test_2017_mscoco", "greedy"),
                                                                          ("test_2017_mscoco", "beam")]
    out = trained / "eval"  # the default: the run folder's eval/, where training wrote its test scores
    assert json.loads((out / "summary.json").read_text()) == results
    assert (out / "test_2017_mscoco.beam.hyp.en").is_file() and results[1]["checkpoint"] == best


def test_resume_continues_step_count_and_lr_schedule(trained, env, tmp_path, capsys, monkeypatch):
    first = json.loads((trained / "train_summary.json").read_text())
    ckpt0 = torch.load(first["last_checkpoint"], map_location="cpu", weights_only=False)
    steps = first["global_step"]
    # resumed in place: a copy of the first run's folder, from its own last.ckpt (a resume never
    # writes into another run's folder)
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    monkeypatch.setenv("TRANSFORMER_DATA_MIRROR", env["TRANSFORMER_DATA_MIRROR"])
    monkeypatch.chdir(tmp_path)
    code, _, err = main_output(train_cli, [*TRAIN_ARGS, "trainer.max_epochs=2", f"ckpt_path={run / 'checkpoints/last.ckpt'}",
                                           f"hydra.run.dir={run}", f"data.data_dir={env['CACHE']}"], capsys, monkeypatch)
    assert code == 0, err[-3000:]
    second = json.loads((run / "train_summary.json").read_text())
    with (trained / "csv" / "metrics.csv").open(newline="") as f:
        before = list(csv.DictReader(f))
    with (run / "csv" / "metrics.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [{k: r[k] for k in before[0]} for r in rows[: len(before)]] == before  # history kept
    assert sorted({r["epoch"] for r in rows if r.get("val/bleu")}) == ["0", "1"]
    assert max(int(r["step"]) for r in before) < min(int(r["step"]) for r in rows[len(before):])
    assert second["global_step"] == 2 * steps
    ckpt = torch.load(second["last_checkpoint"], map_location="cpu", weights_only=False)
    assert ckpt["lr_schedulers"][0]["last_epoch"] == 2 * steps
    assert ckpt0["lr_schedulers"][0]["last_epoch"] == steps
    adam_step = next(iter(ckpt["optimizer_states"][0]["state"].values()))["step"]
    assert int(adam_step) == 2 * steps
    assert ckpt["tokenizers"] == ckpt0["tokenizers"]  # the resumed run kept the tokenizer


def test_decode_keeps_order_and_count_including_empty_lines(trained, env, tmp_path):
    ckpt = trained / "checkpoints" / "last.ckpt"
    lines = ["Ein Hund läuft.", "", "Zwei Männer stehen auf der Straße.", "   ", "Eine Frau."]
    proc = cli("decode", [f"ckpt_path={ckpt}", "decode.max_len_a=0", "decode.max_len_b=6"], env,
               stdin="\n".join(lines) + "\n", cwd=tmp_path)
    assert list(tmp_path.iterdir()) == []  # no log file or output folder left in the user's folder
    out = proc.stdout.split("\n")
    assert len(out) == len(lines) + 1 and out[-1] == ""
    assert out[1] == "" and out[3] == ""
    # batching sorts by length; each output still matches decoding its line alone
    translator = load_task(ckpt).translator({"strategy": "greedy", "max_len_a": 0, "max_len_b": 6})
    for i in (0, 2, 4):
        assert translator.translate([lines[i]])[0][0][0] == out[i]


def test_decode_beam_nbest_format(trained, tmp_path, capsys):
    ckpt = trained / "checkpoints" / "last.ckpt"
    src = tmp_path / "src.de"
    src.write_text("Ein Hund.\nEine Katze.\n", encoding="utf-8")
    cfg = compose_cfg("decode", [f"ckpt_path={ckpt}", "decode.strategy=beam", "decode.beam_size=3", "decode.n_best=3",
                                   "decode.max_len_a=0", "decode.max_len_b=5", f"input={src}",
                                   f"output={tmp_path / 'out.txt'}"])
    decode_cli.run(cfg)
    rows = [r.split(" ||| ") for r in (tmp_path / "out.txt").read_text(encoding="utf-8").strip().split("\n")]
    assert [r[0] for r in rows] == ["0"] * 3 + ["1"] * 3
    for k in (0, 3):
        scores = [float(r[2]) for r in rows[k:k + 3]]
        assert scores == sorted(scores, reverse=True)


def test_average_checkpoints(trained, tmp_path):
    ckpts = sorted((trained / "checkpoints").glob("*.ckpt"))
    out = tmp_path / "avg.ckpt"
    average_cli.run(compose_cfg("average", [f"inputs=[{','.join(str(c) for c in ckpts)}]", f"output={out}"]))
    avg = torch.load(out, map_location="cpu", weights_only=False)
    states = [torch.load(c, map_location="cpu", weights_only=False)["state_dict"] for c in ckpts]
    key = next(k for k, v in states[0].items() if v.is_floating_point())
    expected = sum(s[key] for s in states) / len(states)
    assert torch.allclose(avg["state_dict"][key], expected, atol=1e-6)
    assert "optimizer_states" not in avg and avg["tokenizers"]
    assert load_task(out).hparams.src_lang == "de"  # still a usable checkpoint


def test_bad_inputs_give_clear_errors(trained, env, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, err = main_status(evaluate_cli, [f"ckpt_path={tmp_path}/nope.ckpt"], capsys, monkeypatch)
    assert code == 2 and "checkpoint not found" in err and "Traceback" not in err
    code, err = main_status(train_cli, ["data.src_lang=xx", "model=tiny", f"hydra.run.dir={tmp_path}",
                                        f"data.data_dir={env['CACHE']}"], capsys, monkeypatch)
    assert code == 2 and "'xx'" in err and "Traceback" not in err
    corrupt = tmp_path / "corrupt.ckpt"
    corrupt.write_bytes(b"\x00garbage")
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        load_task(corrupt)
    with pytest.raises(ValueError, match="test_2018_mscoco"):
        evaluate_checkpoint(trained / "checkpoints" / "last.ckpt", "test_2018_mscoco", {"strategy": "greedy"},
                            tmp_path, data_dir=env["CACHE"], device="cpu")
    with pytest.raises(ValueError, match="strategy='nat_one_pass'"):
        load_task(trained / "checkpoints" / "last.ckpt").search_fn({"strategy": "nat_one_pass"})


def test_over_long_input_is_truncated_and_reported(trained, tmp_path, capsys):
    ckpt = trained / "checkpoints" / "last.ckpt"
    src = tmp_path / "long.de"
    src.write_text(" ".join(["Hund"] * 400) + "\nEin Hund.\n", encoding="utf-8")  # > max_len pieces
    cfg = compose_cfg("decode", [f"ckpt_path={ckpt}", "decode.max_len_a=0", "decode.max_len_b=4",
                                   f"input={src}", "output=-"])
    lines = decode_cli.run(cfg)
    assert len(lines) == 2
    assert "1 input(s) longer than the model's maximum source length were truncated" in capsys.readouterr().err


def test_evaluate_and_decode_an_ensemble_of_checkpoints(trained, env, tmp_path, capsys, monkeypatch):
    best = json.loads((trained / "train_summary.json").read_text())["best_checkpoint"]
    avg = tmp_path / "avg.ckpt"  # a second, different model with the same tokenizer
    ckpts = sorted(str(c) for c in (trained / "checkpoints").glob("*.ckpt"))
    average_cli.run(compose_cfg("average", [f"inputs=[{','.join(ckpts)}]", f"output={avg}"]))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRANSFORMER_DATA_MIRROR", env["TRANSFORMER_DATA_MIRROR"])
    code, out, err = main_output(evaluate_cli, [f"ckpt_path=[{best},{avg}]", "split=test_2017_mscoco",
                                                "decode.max_len_a=0", "decode.max_len_b=6", f"data_dir={env['CACHE']}"],
                                 capsys, monkeypatch)
    assert code == 0, err[-3000:]
    metrics = json.loads(out[out.index("{"):])
    assert metrics["checkpoint"] == [best, str(avg)] and metrics["sentences"] == 461
    # default output folder for an ensemble: in the first checkpoint's run folder, beside its eval/
    assert (Path(best).parent.parent / "eval_ensemble" / "test_2017_mscoco.greedy.json").is_file()
    # the decode command takes the same list; with beam search (each member's cache reordered with
    # the beams) each line matches the ensemble translating it alone
    lines = ["Ein Hund läuft.", "", "Zwei Männer stehen auf der Straße."]
    beam = {"strategy": "beam", "beam_size": 2, "max_len_a": 0, "max_len_b": 6}
    code, out, err = main_output(decode_cli, [f"ckpt_path=[{best},{avg}]", *(f"decode.{k}={v}" for k, v in beam.items())],
                                 capsys, monkeypatch, stdin="\n".join(lines) + "\n")
    assert code == 0, err[-3000:]
    task = load_task([best, str(avg)])
    assert type(task.model).__name__ == "EnsembleModel" and len(task.model.members) == 2
    translator = task.translator(beam)
    assert out.split("\n")[:3] == [translator.translate([s])[0][0][0] if s else "" for s in lines]


def test_ensemble_members_must_agree_on_language_pair_and_kind(trained):
    from transformer.tasks.translation import TranslationTask

    last = trained / "checkpoints" / "last.ckpt"
    a, b = load_task(last), load_task(last)
    b.hparams.tgt_lang = "fr"
    with pytest.raises(ValueError, match="member 2 has tgt_lang='fr'"):
        TranslationTask.ensemble([a, b])
    with pytest.raises(CheckpointError, match="no checkpoint"):
        load_task([])


@pytest.mark.slow  # compiling a training step on a CPU: one to two minutes
def test_compiled_bucketed_training_with_sparse_bleu_and_recent_checkpoints(env, tmp_path):
    """task.compile through Lightning, batches padded to multiples of 8, BLEU every second
    epoch (NaN in between, and early stopping skips it), the last epochs kept for averaging."""
    out = tmp_path / "run"
    args = [a for a in TRAIN_ARGS if not a.startswith(("trainer.max_epochs", "callbacks.early_stopping"))]
    cli("train", [*args, "trainer.max_epochs=2", "data.train_subset=128", "task.compile=true",
                  "task.val_bleu_every=2", "data.pad_to_multiple=8", "callbacks.recent_checkpoints.save_top_k=2",
                  "callbacks.early_stopping.patience=1", "trainer.num_sanity_val_steps=0",
                  f"hydra.run.dir={out}", f"data.data_dir={env['CACHE']}"], env)
    rows = [r for r in csv.DictReader((out / "csv" / "metrics.csv").open()) if r.get("val/bleu")]
    assert [r["epoch"] for r in rows] == ["0", "1"]
    assert rows[0]["val/bleu"] == "nan" and float(rows[1]["val/bleu"]) >= 0.0
    recent = sorted((out / "checkpoints" / "recent").glob("*.ckpt"))
    assert len(recent) == 2
    ckpt = torch.load(recent[-1], map_location="cpu", weights_only=False)
    assert not any(k.startswith("_orig_mod") or "._orig_mod" in k for k in ckpt["state_dict"])
    assert ckpt["hyper_parameters"]["compile"] is True
    avg = average_cli.average_checkpoints(recent, tmp_path / "avg.ckpt")
    assert load_task(avg).model.encoder.embedding.weight.shape[0] > 0
