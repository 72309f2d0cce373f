"""Further pretraining from a BERT-family folder: ``transformer-train experiment=pretrain
init_from=hf:<folder>`` starts the whole masked LM from the folder (encoder and the family's
MLM head, its switches in the model config), reads the text with the family's tokenizer and
framing, trains, and writes a checkpoint that ``transformer-fill`` answers from with the folder
gone; a masked-LM checkpoint of ours starts further pretraining the same way. Offline: the folders
are written here (``folders.py``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import datasets
import pytest
import torch
from cli.hydra_helpers import main_status

from folders import FAMILIES, sentences, write_folder
from transformer.cli import fill as fill_cli
from transformer.cli import train as train_cli
from transformer.hub import mlm_checkpoint
from transformer.tasks.checkpoint import load_task, read_checkpoint
from transformer.tasks.transfer import HEAD_KEYS

transformers = pytest.importorskip("transformers")

TOL = 1e-5
QUIET = ["logger.tensorboard=null", "callbacks.progress_bar=null"]
MASK = {"bert": "[MASK]", "distilbert": "[MASK]", "roberta": "<mask>"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return {family: write_folder(family, root / family) for family in FAMILIES}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("text") / "corpus.txt"
    path.write_text("\n".join(sentences(120)) + "\n", encoding="utf-8")
    return path


def pretrain_args(corpus: Path, init_from: str, run: Path, lr: float) -> list[str]:
    return ["experiment=pretrain", "debug=fast", f"data.files=[{corpus}]", f"init_from={init_from}",
            f"task.lr={lr}", "task.warmup_steps=0", f"data.data_dir={run.parent / 'cache'}", "data.max_tokens=512",
            "data.valid_fraction=0.2", *QUIET, f"hydra.run.dir={run}"]


def hf_logits(folder: Path, src: torch.Tensor, pad_id: int) -> torch.Tensor:
    hf = transformers.AutoModelForMaskedLM.from_pretrained(folder).eval()
    with torch.no_grad():
        return hf(input_ids=src, attention_mask=src.ne(pad_id).long()).logits  # (B, T, V)


def padded(tok, texts: list[str]) -> torch.Tensor:
    rows = [tok.frame(ids) for ids in tok.encode_batch(texts)]
    longest = max(map(len, rows))
    return torch.tensor([r + [tok.pad_id] * (longest - len(r)) for r in rows])  # (B, T)


def fill(ckpt: str, family: str, tmp_path: Path, capsys, monkeypatch) -> list:
    masked = tmp_path / f"masked-{family}.txt"
    m = MASK[family]
    masked.write_text(f"the movie was {m} .\ncafé {m} 日本語\n", encoding="utf-8")
    out = tmp_path / "fillers.jsonl"
    code, err = main_status(fill_cli, [f"ckpt_path={ckpt}", f"input={masked}", f"output={out}", "format=json",
                                       "top_k=5"], capsys, monkeypatch)
    assert code == 0, err
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("family", FAMILIES)
def test_pretraining_starts_from_the_whole_family_model(family, folders, corpus, tmp_path, capsys, monkeypatch):
    folder = tmp_path / family
    shutil.copytree(folders[family], folder)
    before = fill(f"hf:{folder}", family, tmp_path, capsys, monkeypatch)
    run = tmp_path / "run"
    # Learning rate 0: the steps run and the weights stay as the folder gives them.
    code, err = main_status(train_cli, pretrain_args(corpus, f"hf:{folder}", run, 0.0), capsys, monkeypatch)
    assert code == 0, err
    last = run / "checkpoints" / "last.ckpt"
    ckpt = read_checkpoint(last)
    assert ckpt["global_step"] >= 2
    task = load_task(str(last))
    tok = task.tokenizer
    src = padded(tok, ["the movie was great .", "café naïve 日本語 😀 a good day and a good night .", "über"])
    assert src.eq(tok.pad_id).any()  # the batch has padding
    with torch.no_grad():
        ours = task.model(src)  # (B, T, V)
    theirs = hf_logits(folder, src, tok.pad_id)
    real = src.ne(tok.pad_id)
    # The head (transform, activation, LayerNorm, tied projection, bias) is the family's: the logits
    # are, not only the encoder's states.
    assert (ours - theirs)[real].abs().max().item() < TOL
    assert ours.abs().max().item() > 1.0
    hf = transformers.AutoModelForMaskedLM.from_pretrained(folder)
    head_bias = hf.get_output_embeddings().bias
    assert torch.equal(ckpt["state_dict"]["model.output_bias"], head_bias)
    model = ckpt["hyper_parameters"]["model"]
    assert model["positional"]["_target_"].endswith("LearnedPositionalEncoding") and model["norm_first"] is False
    folder_model = mlm_checkpoint(f"hf:{folder}")["hyper_parameters"]["model"]
    assert {k: model[k] for k in HEAD_KEYS} == {k: folder_model[k] for k in HEAD_KEYS}
    # the text was read as the family reads it: transformers' own ids, framing included
    hf_tok = transformers.AutoTokenizer.from_pretrained(folder)
    lines = (corpus.read_text(encoding="utf-8")).splitlines()
    expected = hf_tok(lines)["input_ids"]
    cached = sorted((tmp_path / "cache" / "arrow").glob("text-train-*.arrow"))
    cached = [p for p in cached if "-raw-" not in p.name]
    assert cached
    for path in cached:
        rows = datasets.Dataset.from_file(str(path))
        raw_index = [i >> 20 for i in rows["index"]]
        train_lines = datasets.Dataset.from_file(str(next(
            (tmp_path / "cache" / "arrow").glob("text-train-raw-*.arrow"))))["text"]
        assert rows["src"] == [expected[lines.index(train_lines[i])] for i in raw_index]
    # the checkpoint fills as the folder did, with the folder gone
    shutil.rmtree(folder)
    assert fill(str(last), family, tmp_path, capsys, monkeypatch) == before


def test_pretraining_continues_from_our_own_masked_lm(folders, corpus, tmp_path, capsys, monkeypatch):
    """A masked-LM checkpoint of ours (here one pretrained from a BERT folder) starts further
    pretraining whole: the head too, its switches taken from the checkpoint; training moves it."""
    first = tmp_path / "first"
    code, err = main_status(train_cli, pretrain_args(corpus, f"hf:{folders['bert']}", first, 1e-3), capsys,
                            monkeypatch)
    assert code == 0, err
    start = read_checkpoint(first / "checkpoints" / "last.ckpt")
    second = tmp_path / "second"
    code, err = main_status(train_cli, pretrain_args(corpus, str(first / "checkpoints" / "last.ckpt"), second, 0.0),
                            capsys, monkeypatch)
    assert code == 0, err
    resumed = read_checkpoint(second / "checkpoints" / "last.ckpt")
    assert resumed["global_step"] >= 2
    assert set(resumed["state_dict"]) == set(start["state_dict"])
    for name, tensor in start["state_dict"].items():
        assert torch.equal(resumed["state_dict"][name], tensor), name
    # and it was trained: the first run moved the folder's weights
    folder_bias = transformers.AutoModelForMaskedLM.from_pretrained(folders["bert"]).get_output_embeddings().bias
    assert not torch.equal(start["state_dict"]["model.output_bias"], folder_bias)


def test_a_head_switch_typed_against_the_folder_is_one_line(folders, corpus, tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    args = pretrain_args(corpus, f"hf:{folders['bert']}", run, 0.0) + ["+model.head_transform=false"]
    code, err = main_status(train_cli, args, capsys, monkeypatch)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith("error: init_from: hf:") and "head_transform=true" in lines[0].lower(), lines[0]
    assert not run.exists()


def test_rows_longer_than_the_position_table_are_cut_whatever_data_max_len_says(folders, tmp_path, capsys,
                                                                                   monkeypatch):
    """RoBERTa's table here holds 64 pieces (66 rows, two for padding): with data.max_len=256 typed,
    passages are cut into rows of 64, said in a warning, and the checkpoint records 64, so that
    transformer-evaluate cuts its rows as training did."""
    text = tmp_path / "long.txt"
    text.write_text("\n".join(sentences(60) + [" ".join(sentences(40))]) + "\n", encoding="utf-8")
    run = tmp_path / "run"
    code, err = main_status(train_cli, pretrain_args(text, f"hf:{folders['roberta']}", run, 0.0) +
                            ["data.max_len=256"], capsys, monkeypatch)
    assert code == 0, err
    log = (run / "train.log").read_text(encoding="utf-8")
    assert "rows of at most 64 pieces, the model's learned position table, not data.max_len=256" in log, log
    ckpt = read_checkpoint(run / "checkpoints" / "last.ckpt")
    assert ckpt["hyper_parameters"]["data"]["max_len"] == 64
    cached = [p for p in (tmp_path / "cache" / "arrow").glob("*.arrow") if "-raw-" not in p.name]
    assert cached and max(n for p in cached for n in datasets.Dataset.from_file(str(p))["n_pieces"]) == 64
    metrics = load_task(str(run / "checkpoints" / "last.ckpt")).evaluate(str(text), output_dir=tmp_path / "eval")
    assert metrics["rows"] > 61
