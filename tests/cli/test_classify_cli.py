"""Sentence classification end to end on a toy set: a tiny model learns it to 100 %, the
checkpoint evaluates and classifies on its own (line order and count kept, top-k, JSON lines),
an ensemble averages its members' probabilities, averaging and inspection work, and bad label
files end with one ``error:`` line."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from hydra_helpers import compose_cfg, main_status

from transformer.cli import classify, train
from transformer.cli.average import average_checkpoints
from transformer.cli.evaluate import evaluate_checkpoint
from transformer.tasks.checkpoint import load_task
from model_configs import TINY

GOOD = "great superb lovely moving brilliant".split()
BAD = "dull awful boring clumsy tedious".split()
FILLER = "the film a plot was it and story".split()


def toy_rows(n: int, seed: int) -> list[str]:
    """``text<TAB>label`` rows: a sentence is positive iff it holds a GOOD word (never both)."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        label = ("neg", "pos")[i % 2]
        words = rng.sample(FILLER, 3) + [rng.choice(GOOD if label == "pos" else BAD)]
        rng.shuffle(words)
        rows.append(f"{' '.join(words)}\t{label}")
    return rows


def write_split(path: Path, rows: list[str]) -> str:
    path.write_text("".join(r + "\n" for r in rows), encoding="utf-8")
    return str(path)


def train_overrides(root: Path, run_dir: Path, dev: str) -> list[str]:
    return ["experiment=classify", *TINY["classifier_tiny"], f"data.train={root / 'train.tsv'}", f"data.dev={dev}",
            f"data.test={root / 'test.tsv'}", "test_splits=[test]", "data.tokenizer_model=word",
            "data.vocab_size=100", f"data.data_dir={root / 'cache'}", "data.max_tokens=160", "task.lr=5e-3",
            "task.warmup_steps=5", "trainer.max_epochs=12", "+trainer.enable_model_summary=false",
            "trainer.num_sanity_val_steps=0", "callbacks.progress_bar=null", "callbacks.early_stopping=null",
            "logger.tensorboard=null", f"output_dir={run_dir}"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("classify")
    write_split(root / "train.tsv", toy_rows(200, 0))
    dev = write_split(root / "dev.tsv", toy_rows(40, 1))
    write_split(root / "test.tsv", toy_rows(40, 2))
    torch.manual_seed(0)
    summary = train.run(compose_cfg("train", train_overrides(root, root / "run", dev)))
    return root, summary


def test_a_tiny_model_learns_a_separable_toy_set(trained):
    _, summary = trained
    assert summary["best_score"] == 1.0  # val/acc
    test = summary["test"]["test"]
    assert test["acc"] == 1.0 and test["macro_f1"] == 1.0 and test["n"] == 40
    assert {k: v["gold"] for k, v in test["per_class"].items()} == {"neg": 20, "pos": 20}


def test_evaluate_reads_everything_from_the_checkpoint(trained, tmp_path):
    root, summary = trained
    metrics = evaluate_checkpoint(summary["best_checkpoint"], "dev", {}, tmp_path, device="cpu")
    assert metrics["acc"] == pytest.approx(summary["best_score"]) and metrics["split"] == "dev"
    # the corpus is named after its training file's folder (<root>/train.tsv)
    lines = (tmp_path / f"{root.name}.dev.predictions.tsv").read_text().splitlines()
    assert len(lines) == 40 and lines[0].split("\t")[2:] == toy_rows(40, 1)[0].split("\t")[::-1]
    # a file in the same format can be scored too
    other = write_split(tmp_path / "extra.tsv", ["lovely story\tpos", "awful plot\tneg"])
    assert evaluate_checkpoint(summary["best_checkpoint"], other, {}, tmp_path, device="cpu")["n"] == 2


def classify_cfg(ckpt, input_path, output, **extra):
    args = [f"ckpt_path={ckpt}", f"input={input_path}", f"output={output}", "device=cpu"]
    return compose_cfg("classify", args + [f"{k}={v}" for k, v in extra.items()])


def test_classify_keeps_line_order_and_count(trained, tmp_path):
    _, summary = trained
    lines = ["a lovely film", "", "boring and dull", "a lovely film", "tedious story", "brilliant"]
    src = write_split(tmp_path / "in.txt", lines)
    out = classify.run(classify_cfg(summary["best_checkpoint"], src, tmp_path / "out.tsv"))
    assert (tmp_path / "out.tsv").read_text().splitlines() == out and len(out) == len(lines)
    labels = [line.split("\t")[0] for line in out]
    assert [labels[i] for i in (0, 2, 4, 5)] == ["pos", "neg", "neg", "pos"] and out[0] == out[3]
    backwards = write_split(tmp_path / "rev.txt", lines[::-1])
    assert classify.run(classify_cfg(summary["best_checkpoint"], backwards, "-")) == out[::-1]


def test_classify_top_k_and_jsonl(trained, tmp_path):
    _, summary = trained
    src = write_split(tmp_path / "in.txt", ["superb plot", "clumsy"])
    top = classify.run(classify_cfg(summary["best_checkpoint"], src, "-", top_k=2))
    cells = [line.split("\t") for line in top]
    assert [c[0] for c in cells] == ["pos", "neg"] and all(len(c) == 4 for c in cells)
    assert all(abs(float(c[1]) + float(c[3]) - 1) < 1e-3 and float(c[1]) >= float(c[3]) for c in cells)
    rows = [json.loads(x) for x in classify.run(classify_cfg(summary["best_checkpoint"], src, "-", format="jsonl"))]
    assert [r["label"] for r in rows] == ["pos", "neg"] and "top" not in rows[0]


def perturbed_copy(ckpt: str, path: Path) -> str:
    """The checkpoint with its classifier weights moved: a second, different model."""
    c = torch.load(ckpt, map_location="cpu", weights_only=True)
    g = torch.Generator().manual_seed(1)
    w = c["state_dict"]["model.classifier.weight"]
    c["state_dict"]["model.classifier.weight"] = w + torch.randn(w.shape, generator=g)
    torch.save(c, path)
    return str(path)


def test_an_ensemble_averages_probabilities(trained, tmp_path):
    _, summary = trained
    a = summary["best_checkpoint"]
    b = perturbed_copy(a, tmp_path / "b.ckpt")
    texts = ["a lovely film", "dull", "the story"]
    pa, pb = (load_task(p).classifier().probabilities(texts) for p in (a, b))
    assert not torch.allclose(pa, pb)
    both = load_task([a, b]).classifier().probabilities(texts)
    torch.testing.assert_close(both, (pa + pb) / 2)
    src = write_split(tmp_path / "in.txt", texts)
    out = classify.run(classify_cfg(f"[{a},{b}]", src, "-", top_k=2))
    assert [float(line.split("\t")[1]) for line in out] == pytest.approx(both.max(-1).values.tolist(), abs=1e-4)


def test_averaged_checkpoint_classifies(trained, tmp_path):
    root, summary = trained
    recent = sorted((root / "run" / "checkpoints").glob("epoch*.ckpt"))
    avg = average_checkpoints(recent, tmp_path / "avg.ckpt")
    assert load_task(avg).classifier().top_k(["brilliant"])[0][0][0] == "pos"


def test_inspect_draws_pooling_and_encoder_attention(trained, tmp_path):
    pytest.importorskip("matplotlib")
    from transformer.cli import inspect

    _, summary = trained
    cfg = compose_cfg("inspect", [f"ckpt_path={summary['best_checkpoint']}", "text='a lovely film'",
                                  f"output_dir={tmp_path}"])
    written = {p.name for p in inspect.run(cfg)}
    assert {"pooling.png", "encoder_layer0.png", "attention.npz", "index.html"} <= written
    import numpy as np

    arrays = np.load(tmp_path / "sentence_0" / "attention.npz")
    assert arrays["pooling"].shape == (2, 3) and np.allclose(arrays["pooling"].sum(-1), 1.0)
    assert list(arrays["tokens"]) == ["a", "lovely", "film"]


def test_bad_label_file_is_one_error_line(trained, tmp_path, capsys, monkeypatch):
    root, _ = trained
    dev = write_split(tmp_path / "dev.tsv", ["lovely\tpos", "so so\tmeh", "dull\tneg"])
    monkeypatch.chdir(tmp_path)
    code, err = main_status(train, [*train_overrides(root, tmp_path / "run", dev)[:-1],
                                    f"hydra.run.dir={tmp_path / 'run'}"], capsys, monkeypatch)
    assert code == 2
    assert err.strip().splitlines()[-1] == (f"error: {dev}:2: label 'meh' is not one of the training "
                                            "file's labels ['neg', 'pos']")
    assert "Traceback" not in err


def test_classify_refuses_a_bad_top_k_and_a_missing_input(trained, tmp_path):
    _, summary = trained
    with pytest.raises(ValueError, match="top_k=0"):
        classify.run(classify_cfg(summary["best_checkpoint"], "-", "-", top_k=0))
    with pytest.raises(FileNotFoundError, match="input file not found"):
        classify.run(classify_cfg(summary["best_checkpoint"], tmp_path / "nope.txt", "-"))


def test_training_resumes_from_a_checkpoint_with_its_tokenizer(trained, tmp_path):
    root, summary = trained
    last = root / "run" / "checkpoints" / "last.ckpt"
    before = torch.load(last, map_location="cpu", weights_only=True)
    overrides = train_overrides(root, tmp_path / "resumed", str(root / "dev.tsv"))
    overrides = [o for o in overrides if not o.startswith("trainer.max_epochs")]
    resumed = train.run(compose_cfg("train", overrides + ["trainer.max_epochs=13", f"ckpt_path={last}"]))
    assert resumed["global_step"] == before["global_step"] + summary["global_step"] // 12
    after = torch.load(resumed["last_checkpoint"], map_location="cpu", weights_only=True)
    assert after["tokenizers"] == before["tokenizers"] and after["transformer_task"] == "classification"


def test_a_student_learns_its_teachers_labels(trained, tmp_path):
    """Trained on a copy of the training file with every label swapped, a student that learns
    only from the teacher (``distill_weight=1``) still classifies the real labels: the loss
    comes from the teacher's probabilities, row by row (the batch's ``index``)."""
    root, summary = trained
    swapped = [r.replace("\tpos", "\tPOS").replace("\tneg", "\tpos").replace("\tPOS", "\tneg")
               for r in toy_rows(200, 0)]
    write_split(tmp_path / "train.tsv", swapped)
    write_split(tmp_path / "test.tsv", toy_rows(40, 2))
    teacher = summary["best_checkpoint"]
    overrides = train_overrides(tmp_path, tmp_path / "run", str(root / "dev.tsv"))
    student = train.run(compose_cfg("train", overrides + [f"task.teacher=[{teacher},{teacher}]",
                                                          "task.distill_weight=1.0", "task.distill_temperature=2.0"]))
    assert student["test"]["test"]["acc"] >= 0.9  # learning the swapped labels gives under 0.5
    cached = list((tmp_path / "cache" / "teachers").glob("*.pt"))
    assert len(cached) == 1 and torch.load(cached[0]).shape == (200, 2)
    ckpt = torch.load(student["best_checkpoint"], map_location="cpu", weights_only=True)
    assert not any("teacher" in k for k in ckpt["state_dict"])  # the student classifies on its own


def test_a_teacher_must_be_a_classifier_with_the_same_labels(trained, tmp_path):
    root, summary = trained
    overrides = train_overrides(root, tmp_path / "run", str(root / "dev.tsv"))
    with pytest.raises(ValueError, match=r"task.teacher: checkpoint not found: .*nope.ckpt"):
        train.run(compose_cfg("train", overrides + [f"task.teacher={tmp_path / 'nope.ckpt'}"]))
    other = ["\t".join([r.split("\t")[0], {"pos": "good", "neg": "bad"}[r.split("\t")[1]]]) for r in toy_rows(60, 3)]
    write_split(tmp_path / "train.tsv", other)
    write_split(tmp_path / "test.tsv", other[:10])
    dev = write_split(tmp_path / "dev.tsv", other[:10])
    with pytest.raises(ValueError, match=r"task.teacher: .* has the labels \['neg', 'pos'\], the training file "
                                         r"\['bad', 'good'\]"):
        train.run(compose_cfg("train", train_overrides(tmp_path, tmp_path / "run2", dev)
                              + [f"task.teacher={summary['best_checkpoint']}"]))


def test_a_run_stopped_by_max_steps_before_its_first_validation_ends_cleanly(trained, tmp_path):
    """Early stopping judges validations: an epoch cut short by ``trainer.max_steps`` before
    any validation has nothing to judge, and the run still ends with its ``last.ckpt``."""
    root, _ = trained
    overrides = [o for o in train_overrides(root, tmp_path / "run", str(root / "dev.tsv"))
                 if not o.startswith(("callbacks.early_stopping", "trainer.max_epochs"))]
    summary = train.run(compose_cfg("train", overrides + ["trainer.max_steps=2"]))
    assert summary["global_step"] == 2 and summary["best_checkpoint"] is None
    assert torch.load(summary["last_checkpoint"], map_location="cpu", weights_only=True)["global_step"] == 2


def test_early_stopping_still_ends_a_run_whose_metric_stops_rising(trained, tmp_path):
    root, full = trained
    overrides = [o for o in train_overrides(root, tmp_path / "run", str(root / "dev.tsv"))
                 if not o.startswith("callbacks.early_stopping")]
    summary = train.run(compose_cfg("train", overrides + ["callbacks.early_stopping.patience=1"]))
    assert summary["best_score"] == 1.0 and summary["global_step"] < full["global_step"]  # stopped before 12 epochs
