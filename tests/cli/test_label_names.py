"""Label names: a classifier trained on files that write ids (``0``/``1``, as SST-2 does) with
``data.label_names=[negative,positive]`` keeps the names in its checkpoint, and every output
says them: ``transformer-classify``, ``transformer-evaluate``'s per-class rows and predictions,
and the server's answer. A checkpoint without names says the ids; bad names are one ``error:``
line naming the key, before any folder is made."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from hydra_helpers import compose_cfg, main_status

from transformer.cli import classify, train
from transformer.cli.evaluate import evaluate_checkpoint
from transformer.tasks.checkpoint import load_task
from model_configs import TINY

GOOD = "great superb lovely moving brilliant".split()
BAD = "dull awful boring clumsy tedious".split()
FILLER = "the film a plot was it and story".split()
NAMES = ["negative", "positive"]


def toy_rows(n: int, seed: int) -> list[str]:
    """``text<TAB>0|1`` rows: label 1 iff the sentence holds a GOOD word."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        words = rng.sample(FILLER, 3) + [rng.choice(GOOD if i % 2 else BAD)]
        rng.shuffle(words)
        rows.append(f"{' '.join(words)}\t{i % 2}")
    return rows


def write(path: Path, rows: list[str]) -> str:
    path.write_text("".join(r + "\n" for r in rows), encoding="utf-8")
    return str(path)


def overrides(root: Path, run_dir: Path, *extra: str) -> list[str]:
    return ["experiment=classify", *TINY["classifier_tiny"], f"data.train={root / 'train.tsv'}",
            f"data.dev={root / 'dev.tsv'}", f"data.test={root / 'test.tsv'}", "test_splits=[test]",
            "data.tokenizer_model=word", "data.vocab_size=100", f"data.data_dir={root / 'cache'}",
            "data.max_tokens=160", "task.lr=5e-3", "task.warmup_steps=5", "trainer.max_epochs=8",
            "+trainer.enable_model_summary=false", "trainer.num_sanity_val_steps=0", "callbacks.progress_bar=null",
            "callbacks.early_stopping=null", "logger.tensorboard=null", f"output_dir={run_dir}", *extra]


@pytest.fixture(scope="module")
def named(tmp_path_factory):
    root = tmp_path_factory.mktemp("label_names")
    write(root / "train.tsv", toy_rows(200, 0))
    write(root / "dev.tsv", toy_rows(40, 1))
    write(root / "test.tsv", toy_rows(40, 2))
    torch.manual_seed(0)
    summary = train.run(compose_cfg("train", overrides(root, root / "run", "data.label_names=[negative,positive]")))
    return root, summary


def test_the_names_travel_in_the_checkpoint_and_the_test_report(named):
    _, summary = named
    ckpt = torch.load(summary["best_checkpoint"], map_location="cpu", weights_only=True)
    assert ckpt["hyper_parameters"]["labels"] == ["0", "1"]
    assert ckpt["hyper_parameters"]["label_names"] == NAMES
    test = summary["test"]["test"]
    assert {k: v["gold"] for k, v in test["per_class"].items()} == {"negative": 20, "positive": 20}


def test_classify_says_the_names(named, tmp_path):
    _, summary = named
    src = write(tmp_path / "in.txt", ["a lovely film", "boring and dull"])
    args = [f"ckpt_path={summary['best_checkpoint']}", f"input={src}", "output=-", "device=cpu"]
    out = classify.run(compose_cfg("classify", args + ["top_k=2"]))
    cells = [line.split("\t") for line in out]
    assert [c[0] for c in cells] == ["positive", "negative"] and {c[2] for c in cells} == set(NAMES)
    rows = [json.loads(line) for line in classify.run(compose_cfg("classify", args + ["format=jsonl"]))]
    assert [r["label"] for r in rows] == ["positive", "negative"]


def test_evaluate_reports_each_class_by_name(named, tmp_path):
    root, summary = named
    metrics = evaluate_checkpoint(summary["best_checkpoint"], "dev", {}, tmp_path, device="cpu")
    assert set(metrics["per_class"]) == set(NAMES) and metrics["n"] == 40
    lines = (tmp_path / f"{root.name}.dev.predictions.tsv").read_text().splitlines()
    gold = [row.split("\t")[1] for row in toy_rows(40, 1)]
    assert [line.split("\t")[2] for line in lines] == [NAMES[int(g)] for g in gold]
    assert {line.split("\t")[0] for line in lines} <= set(NAMES)


def test_the_server_answers_with_the_names(named):
    pytest.importorskip("fastapi")
    from transformer.serve.served import ClassificationModel

    _, summary = named
    served = ClassificationModel("sst", load_task(summary["best_checkpoint"]), summary["best_checkpoint"])
    assert served.info()["labels"] == NAMES
    (out,) = served.predict(["a lovely film"], served.settings({"top_k": 2}))
    assert out["label"] == "positive" and set(out["probabilities"]) == set(NAMES)


def test_a_checkpoint_without_names_says_the_ids(named, tmp_path):
    """A checkpoint made before names were kept (no ``label_names``) classifies and evaluates
    with the labels as its files write them."""
    root, summary = named
    ckpt = torch.load(summary["best_checkpoint"], map_location="cpu", weights_only=True)
    del ckpt["hyper_parameters"]["label_names"]
    old = tmp_path / "old.ckpt"
    torch.save(ckpt, old)
    assert load_task(str(old)).classifier().top_k(["a lovely film"])[0][0][0] == "1"
    metrics = evaluate_checkpoint(str(old), "dev", {}, tmp_path, device="cpu")
    assert set(metrics["per_class"]) == {"0", "1"}


def test_a_wrong_count_of_names_is_one_error_line_before_any_folder(named, tmp_path, capsys, monkeypatch):
    root, _ = named
    run_dir = tmp_path / "run"
    monkeypatch.chdir(tmp_path)
    code, err = main_status(train, overrides(root, run_dir, "data.label_names=[bad,good,ugly]",
                                             f"hydra.run.dir={run_dir}"), capsys, monkeypatch)
    assert code == 2, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: data.label_names=") and "3 name(s) for the training file's 2 labels" in last
    assert "Traceback" not in err and not run_dir.exists()


@pytest.mark.parametrize("names, says", [("[good,good]", "'good' names two labels"),
                                         ("['',good]", "'' is not a name")])
def test_repeated_or_empty_names_are_refused_naming_the_key(named, tmp_path, names, says):
    root, _ = named
    run_dir = tmp_path / "run"
    with pytest.raises(ValueError, match="data.label_names") as err:
        train.run(compose_cfg("train", overrides(root, run_dir, f"data.label_names={names}")))
    assert says in str(err.value) and "\n" not in str(err.value) and not run_dir.exists()
