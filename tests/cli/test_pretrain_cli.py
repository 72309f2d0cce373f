"""Pretraining end to end: ``transformer-train experiment=pretrain debug=fast`` on a tiny text
file and a CoNLL-U file (and on SST-2's GLUE phrase file, its text column alone); a classifier
and a tagger fine-tuned with ``init_from`` start from exactly its encoder and tokenizer and need
nothing of it afterwards; every mismatch is refused in one ``error: init_from:`` line before
any work; ``transformer-fill`` and ``transformer-inspect`` read the masked-LM checkpoint."""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra_helpers import compose_cfg, main_status
from model_configs import TINY as TINY_MODELS

from transformer.cli import classify as classify_cli
from transformer.cli import fill as fill_cli
from transformer.cli import inspect as inspect_cli
from transformer.cli import tag as tag_cli
from transformer.cli import train as train_cli
from transformer.data.core.tokenizer import SubwordTokenizer
from transformer.tasks.checkpoint import TASK_KEY, read_checkpoint

# The pretrained encoder at the tiny tagger's and classifier's sizes (model_configs.TINY).
TINY = ["model.d_model=32", "model.n_heads=2", "model.n_layers=1", "model.d_ff=64", "model.dropout=0.0",
        "model.positional._target_=transformer.modules.positional.SinusoidalPositionalEncoding"]
QUIET = ["logger.tensorboard=null", "callbacks.progress_bar=null"]
SUBJECTS, VERBS, OBJECTS = ["the cat", "the dog", "a bird", "my friend"], ["sat on", "looked at"], ["the mat", "a tree"]


def sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} ." for _ in range(n)]


def conllu(lines: list[str]) -> str:
    tags = {"the": "DET", "a": "DET", "my": "PRON", ".": "PUNCT", "sat": "VERB", "looked": "VERB", "on": "ADP",
            "at": "ADP"}
    out = []
    for i, line in enumerate(lines):
        words = line.split()
        out += [f"# sent_id = s{i}"] + [f"{j}\t{w}\t{w}\t{tags.get(w, 'NOUN')}\t_\t_\t0\tdep\t_\t_"
                                         for j, w in enumerate(words, 1)] + [""]
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pretrain")
    (root / "toy.txt").write_text("\n".join(sentences(200, 0)) + "\n", encoding="utf-8")
    (root / "toy.conllu").write_text(conllu(sentences(60, 1)), encoding="utf-8")
    rows = [f"{s}\t{'pos' if 'dog' in s else 'neg'}" for s in sentences(80, 2)]
    (root / "labels.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return root


def pretrain_overrides(root: Path, files: str, out: Path) -> list[str]:
    return ["experiment=pretrain", "debug=fast", f"data.files={files}", "data.valid_fraction=0.2",
            "data.vocab_size=300", "data.train_subset=null", f"data.data_dir={root / 'cache'}", *TINY, *QUIET,
            f"output_dir={out}"]


@pytest.fixture(scope="module")
def pretrained(corpus) -> Path:
    """A masked-LM checkpoint pretrained on the CoNLL-U file's words and the text file."""
    torch.manual_seed(0)
    files = f"[{corpus / 'toy.conllu'},{corpus / 'toy.txt'}]"
    summary = train_cli.run(compose_cfg("train", pretrain_overrides(corpus, files, corpus / "pre")))
    return Path(summary["best_checkpoint"])


def test_pretraining_on_a_text_file_and_a_treebank(pretrained, corpus):
    ckpt = read_checkpoint(pretrained)
    assert ckpt[TASK_KEY] == "mlm" and ckpt["hyper_parameters"]["model"]["d_model"] == 32
    tok = SubwordTokenizer.from_str(ckpt["tokenizers"]["src"])
    assert tok.prefix_space and tok.vocab_size <= 300
    files = ckpt["hyper_parameters"]["data"]["files"]
    assert [f["format"] for f in files] == ["conllu", "text"]
    header = (corpus / "pre" / "csv" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"train/loss", "val/loss", "val/acc", "val/ppl"} <= set(header)
    summary = json.loads((corpus / "pre" / "train_summary.json").read_text())
    assert summary["monitor"] == "val/loss" and summary["best_score"] > 0


def test_pretraining_on_the_sst2_glue_text_column(mirror_root, tmp_path):
    glue = mirror_root / "sst2-glue" / "train.tsv"
    summary = train_cli.run(compose_cfg("train", pretrain_overrides(
        tmp_path, f"[{{path:{glue},column:sentence,header:true}}]", tmp_path / "run") + ["data.train_subset=64"]))
    assert summary["global_step"] > 0
    first = read_checkpoint(summary["best_checkpoint"])["hyper_parameters"]["data"]["files"][0]
    assert (first["format"], first["column"], first["header"]) == ("tsv", "sentence", True)


def fine_tune_overrides(kind: str, corpus: Path, init_from: Path, out: Path) -> list[str]:
    common = ["debug=fast", "task.lr=0.0", f"init_from={init_from}", f"data.data_dir={corpus / 'cache'}",
              "test_splits=[]", *QUIET, f"output_dir={out}"]
    if kind == "classifier":
        data = corpus / "labels.tsv"
        return ["experiment=classify", *TINY_MODELS["classifier_tiny"], f"data.train={data}", f"data.dev={data}", *common]
    data = corpus / "toy.conllu"
    return ["experiment=ud_upos", *TINY_MODELS["tagger_tiny"], f"data.train={data}", f"data.dev={data}", *common]


@pytest.mark.parametrize("kind", ["classifier", "tagger"])
def test_fine_tuning_starts_from_the_encoder_and_needs_nothing_else(kind, pretrained, corpus, tmp_path, capsys,
                                                                     monkeypatch):
    pre = tmp_path / "pre.ckpt"
    shutil.copy(pretrained, pre)
    summary = train_cli.run(compose_cfg("train", fine_tune_overrides(kind, corpus, pre, tmp_path / "run")))
    source, tuned = read_checkpoint(pre), read_checkpoint(summary["best_checkpoint"])
    # learning rate 0: the fine-tuned encoder is the pretrained one, tensor by tensor
    encoder = [k for k in tuned["state_dict"] if k.startswith("model.encoder.")]
    assert encoder and all(torch.equal(tuned["state_dict"][k], source["state_dict"][k]) for k in encoder)
    assert tuned["tokenizers"]["src"] == source["tokenizers"]["src"]
    # the fine-tuned checkpoint is all that tagging and classifying need
    pre.unlink()
    (tmp_path / "run" / "pretrained_tokenizer.json").unlink()
    monkeypatch.chdir(tmp_path)
    cli = classify_cli if kind == "classifier" else tag_cli
    code, err = main_status(cli, [f"ckpt_path={summary['best_checkpoint']}", "output=out.txt"], capsys, monkeypatch,
                            stdin=b"the dog sat on the mat .\na bird looked at a tree .\n")
    assert code == 0, err
    lines = (tmp_path / "out.txt").read_text().splitlines()
    assert len(lines) == 2 and all(lines)


def test_fine_tuning_takes_the_encoder_shape_the_command_line_leaves_out(pretrained, corpus, tmp_path, capsys,
                                                                        monkeypatch):
    """The classifier's preset encoder (``model=encoder``: 192 wide, 3 layers) is not the pretrained
    one (32 wide, 1 layer): with no model key typed, fine-tuning takes the pretrained shape."""
    data = corpus / "labels.tsv"
    args = ["experiment=classify", f"data.train={data}", f"data.dev={data}", "debug=fast", "task.lr=0.0",
            f"init_from={pretrained}", f"data.data_dir={corpus / 'cache'}", "model.dropout=0.0", *QUIET,
            f"hydra.run.dir={tmp_path / 'run'}"]
    code, err = main_status(train_cli, args, capsys, monkeypatch)
    assert code == 0, err
    source = read_checkpoint(pretrained)
    tuned = read_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt")
    ours, theirs = tuned["hyper_parameters"]["model"], source["hyper_parameters"]["model"]
    assert [ours[k] for k in ("d_model", "n_heads", "n_layers", "d_ff", "positional")] == \
        [theirs[k] for k in ("d_model", "n_heads", "n_layers", "d_ff", "positional")]
    assert ours["dropout"] == 0.0 and ours["_target_"].endswith("SequenceClassifier")
    encoder = [k for k in tuned["state_dict"] if k.startswith("model.encoder.")]
    assert encoder and all(torch.equal(tuned["state_dict"][k], source["state_dict"][k]) for k in encoder)


def classifier_checkpoint(path: Path, tokenizer: str) -> Path:
    """A classification checkpoint as transformer-train writes one: not a masked-LM one."""
    from transformer.tasks.classification import ClassificationTask

    task = ClassificationTask(model={"_target_": "transformer.models.classifier.SequenceClassifier", "d_model": 32,
                                     "n_heads": 2, "n_layers": 1, "d_ff": 64},
                              piece_vocab_size=SubwordTokenizer.from_str(tokenizer).vocab_size, pad_id=0,
                              labels=["neg", "pos"], data={"name": "toy"}, tokenizer=tokenizer)
    ckpt = {"state_dict": task.state_dict(), "hyper_parameters": dict(task.hparams), TASK_KEY: "classification"}
    task.on_save_checkpoint(ckpt)
    torch.save(ckpt, path)
    return path


@pytest.mark.parametrize("override, named", [
    (["model.d_model=64"], "has d_model=32, but model.d_model=64"),
    (["model.n_heads=4"], "has n_heads=2, but model.n_heads=4"),
    (["model.n_layers=2"], "has n_layers=1, but model.n_layers=2"),
    (["model.positional._target_=transformer.modules.positional.RelativePositionBias"],
     "positional=.*SinusoidalPositionalEncoding.*but model.positional=.*RelativePositionBias"),
    (["+data.tokenizer_path=OTHER"], "has a \\d+-piece vocabulary, but data.tokenizer_path names a SIZE-piece tokenizer"),
    ([], "is a 'classification' checkpoint; fine-tuning starts from a masked-LM checkpoint"),
])
def test_a_mismatch_is_one_line_before_any_work(override, named, pretrained, corpus, tmp_path, capsys, monkeypatch):
    init_from = pretrained
    if not override:  # a checkpoint of another task
        init_from = classifier_checkpoint(tmp_path / "cls.ckpt", read_checkpoint(pretrained)["tokenizers"]["src"])
    other = SubwordTokenizer.train(["x y"], 270)
    path = other.save(tmp_path / "other.json")
    named = named.replace("SIZE", str(other.vocab_size))
    args = [a for a in fine_tune_overrides("classifier", corpus, init_from, tmp_path / "run")
            if not a.startswith("output_dir=")] + [o.replace("OTHER", str(path)) for o in override]
    code, err = main_status(train_cli, [*args, f"hydra.run.dir={tmp_path / 'run'}"], capsys, monkeypatch)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: init_from: "), err
    assert re.search(named, lines[0]), lines[0]
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_fill_prints_each_masks_fillers(pretrained, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lines = b"the cat [MASK] on the mat .\n[MASK] dog looked at <mask> tree .\n"
    code, err = main_status(fill_cli, [f"ckpt_path={pretrained}", "top_k=3", "output=out.tsv"], capsys, monkeypatch,
                            stdin=lines)
    assert code == 0, err
    rows = [line.split("\t") for line in (tmp_path / "out.tsv").read_text().splitlines()]
    assert [r[:2] for r in rows] == [["1", "1"], ["2", "1"], ["2", "2"]] and all(len(r) == 2 + 2 * 3 for r in rows)
    probs = [float(p) for p in rows[0][3::2]]
    assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1
    code, err = main_status(fill_cli, [f"ckpt_path={pretrained}", "top_k=2", "format=json", "output=out.json"], capsys,
                            monkeypatch, stdin=lines)
    assert code == 0, err
    parsed = [json.loads(line) for line in (tmp_path / "out.json").read_text().splitlines()]
    assert [len(masks) for masks in parsed] == [1, 2] and len(parsed[1][1]) == 2
    assert set(parsed[0][0][0]) == {"token_str", "token", "score", "sequence"}
    first = parsed[0][0][0]  # the line with the filler's piece (and its own space, if any) in the mask's place
    assert first["sequence"] == "the cat" + (" " if first["sequence"][7] == " " else "") + first["token_str"] + \
        " on the mat ."
    assert "[MASK]" in parsed[1][1][0]["sequence"]  # the other mask of the line is left as it was
    code, err = main_status(fill_cli, [f"ckpt_path={pretrained}"], capsys, monkeypatch,
                            stdin=b"the cat [MASK] .\nno mask here\n")
    assert code == 2 and err.strip() == "error: <stdin>, line 2: no [MASK] or <mask> to fill in 'no mask here'"


def test_inspect_draws_the_encoder_of_a_masked_lm(pretrained, tmp_path):
    pytest.importorskip("matplotlib")
    cfg = compose_cfg("inspect", [f"ckpt_path={pretrained}", "text='the cat [MASK] on the mat .'",
                                  f"output_dir={tmp_path}"])
    written = inspect_cli.run(cfg)
    assert (tmp_path / "sentence_0" / "encoder_layer0.png").is_file() and (tmp_path / "index.html") in written
    tokens = np.load(tmp_path / "sentence_0" / "attention.npz")["tokens"].tolist()
    assert tokens[2].startswith("[MASK→") and len(tokens) == 7
    assert np.load(tmp_path / "sentence_0" / "attention.npz")["encoder.layer0"].shape == (2, 7, 7)


def test_a_resumed_pretraining_draws_the_same_masks(corpus, tmp_path):
    # Resumed mid-epoch, every row the run logs afterwards (losses over freshly drawn masks,
    # validation over the fixed ones) equals the uninterrupted run's: the masks come from
    # (seed, epoch, batch), with nothing to carry over.
    import csv

    args = [*pretrain_overrides(corpus, f"[{corpus / 'toy.txt'}]", tmp_path / "whole")[:-1], "model.dropout=0.1",
            "data.max_tokens=200", "trainer.max_epochs=2", "trainer.limit_train_batches=1.0",
            "trainer.limit_val_batches=1.0", "task.warmup_steps=5",
            "+callbacks.every_steps._target_=lightning.pytorch.callbacks.ModelCheckpoint",
            "+callbacks.every_steps.dirpath=${output_dir}/steps", "+callbacks.every_steps.every_n_train_steps=3",
            "+callbacks.every_steps.save_top_k=-1"]

    def rows(run: Path) -> list[dict]:
        with (run / "csv" / "metrics.csv").open(newline="") as f:
            return list(csv.DictReader(f))

    torch.manual_seed(0)
    train_cli.run(compose_cfg("train", [*args, f"output_dir={tmp_path / 'whole'}"]))
    whole = rows(tmp_path / "whole")
    per_epoch = max(int(r["step"]) for r in whole if r["epoch"] == "0")
    assert per_epoch > 3  # step 3 is inside the first epoch
    resume = next((tmp_path / "whole" / "steps").glob("*step=3.ckpt"))
    torch.manual_seed(123)  # whatever the process's state, the checkpoint's decides
    train_cli.run(compose_cfg("train", [*args, f"ckpt_path='{resume}'", f"output_dir={tmp_path / 'resumed'}"]))
    resumed = rows(tmp_path / "resumed")
    after = [r for r in whole if int(r["step"]) > 3]
    assert len(after) > 4 and resumed[-len(after):] == after


def test_evaluate_scores_a_split_or_a_file_from_the_checkpoint(pretrained, corpus, tmp_path):
    from transformer.cli.evaluate import evaluate_checkpoint

    valid = evaluate_checkpoint(str(pretrained), "valid", {}, tmp_path, device="cpu")
    assert valid["rows"] > 0 and valid["predicted"] > 0 and valid["ppl"] == pytest.approx(np.exp(valid["loss"]))
    again = evaluate_checkpoint(str(pretrained), "valid", {}, tmp_path, device="cpu")
    assert again["loss"] == valid["loss"]  # validation's fixed masks
    other = evaluate_checkpoint(str(pretrained), str(corpus / "toy.txt"), {}, tmp_path, device="cpu")
    assert other["rows"] == 200 and 0 <= other["acc"] <= 1
    assert json.loads((tmp_path / "text.valid.metrics.json").read_text())["loss"] == valid["loss"]
    with pytest.raises(ValueError, match="split='test': not train, valid"):
        evaluate_checkpoint(str(pretrained), "test", {}, tmp_path, device="cpu")


def test_electra_pretrains_and_fine_tuning_takes_its_discriminator(corpus, tmp_path, capsys, monkeypatch):
    torch.manual_seed(0)
    electra = ["model._target_=transformer.models.mlm.ElectraModel", "+model.generator_fraction=0.5"]
    summary = train_cli.run(compose_cfg("train", pretrain_overrides(corpus, f"[{corpus / 'toy.txt'}]", tmp_path / "pre")
                                        + electra))
    pre = Path(summary["best_checkpoint"])
    source = read_checkpoint(pre)
    assert source[TASK_KEY] == "mlm" and source["hyper_parameters"]["model"]["_target_"].endswith("ElectraModel")
    header = (tmp_path / "pre" / "csv" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"val/loss", "val/acc", "val/rtd_loss", "val/rtd_acc"} <= set(header)
    tuned = read_checkpoint(train_cli.run(compose_cfg("train", fine_tune_overrides(
        "classifier", corpus, pre, tmp_path / "run")))["best_checkpoint"])
    encoder = [k for k in tuned["state_dict"] if k.startswith("model.encoder.")]
    assert encoder and all(torch.equal(tuned["state_dict"][k], source["state_dict"][k]) for k in encoder)
    assert not any(k.startswith("model.generator.") for k in tuned["state_dict"])  # the generator stays behind
    monkeypatch.chdir(tmp_path)
    code, err = main_status(fill_cli, [f"ckpt_path={pre}", "top_k=2", "output=out.tsv"], capsys, monkeypatch,
                            stdin=b"the cat [MASK] on the mat .\n")
    assert code == 0, err
    assert len((tmp_path / "out.tsv").read_text().splitlines()) == 1
