"""Fine-tuning and scoring the multilingual families in one direction: ``transformer-train
experiment=parallel data.src_lang=en data.tgt_lang=fr init_from=hf:<folder>`` frames each pair
as ``transformers`` does (the source's code in front of the source, the target's code as the
first target piece, the decoder starting from EOS), so before any update the model computes the
folder's teacher-forced logits on the batches training builds; the checkpoint decodes with the
folder deleted, as the folder decodes. ``transformer-evaluate ckpt_path=hf:<folder> data=parallel
...`` scores a corpus in its direction. Offline: the folders are written here (``multi_folders.py``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from cli.hydra_helpers import compose_cfg, main_status

pytest.importorskip("sentencepiece")
transformers = pytest.importorskip("transformers")

from folders import sentences  # noqa: E402
from multi_folders import write_multi_folder  # noqa: E402
from transformer.cli import decode as decode_cli  # noqa: E402
from transformer.cli import train as train_cli  # noqa: E402
from transformer.tasks.checkpoint import load_task, read_checkpoint  # noqa: E402

TOL = 1e-5
QUIET = ["logger.tensorboard=null", "callbacks.progress_bar=null"]
SHORT = ["decode.max_len_a=0", "decode.max_len_b=8"]


def pairs(n: int, seed: int) -> list[tuple[str, str]]:
    lines = sentences(n + seed)[seed:]
    return [(line, " ".join(line.split()[::-1])) for line in lines]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    for name, rows in (("train", pairs(24, 0)), ("dev", pairs(6, 60)), ("test", pairs(6, 80))):
        for side, lang in ((0, "en"), (1, "fr")):
            (root / f"{name}.{lang}").write_text("".join(p[side] + "\n" for p in rows), encoding="utf-8")
    return root


def data_args(corpus: Path) -> list[str]:
    return ["experiment=parallel", "data.src_lang=en", "data.tgt_lang=fr", f"data.train={corpus}/train",
            f"data.valid={corpus}/dev", f"data.test={corpus}/test"]


def train_args(corpus: Path, folder: Path, run: Path, *extra: str) -> list[str]:
    return [*data_args(corpus), f"init_from=hf:{folder}", "data.max_tokens=400", "trainer.max_epochs=1",
            "trainer.limit_train_batches=2", "trainer.limit_val_batches=1", "task.warmup_steps=2",
            "task.val_decode.max_len_a=0", "task.val_decode.max_len_b=8", "test_splits=[]",
            f"data.data_dir={run.parent / 'cache'}", *QUIET, f"hydra.run.dir={run}", *extra]


@pytest.mark.parametrize("family", ["m2m100", "nllb"])
def test_fine_tuning_frames_pairs_as_transformers_and_decodes_without_the_folder(family, corpus, tmp_path, capsys,
                                                                                  monkeypatch):
    folder = write_multi_folder(tmp_path / family, family)
    run = tmp_path / "run"
    code, err = main_status(train_cli, train_args(corpus, folder, run, "task.lr=0.0", "model.dropout=0.0"), capsys,
                            monkeypatch)
    assert code == 0, err
    ckpt = read_checkpoint(run / "checkpoints" / "last.ckpt")
    data = ckpt["hyper_parameters"]["data"]
    assert data["tag_side"] == "codes" and set(data["language_codes"]) == {"en", "fr"}
    # teacher forcing on the batches training builds: the folder's logits, framed as its tokenizer frames
    from transformer.cli.train import build_datamodule

    cfg = compose_cfg("train", train_args(corpus, folder, tmp_path / "dm")[:-1] + [f"output_dir={tmp_path / 'dm'}"])
    dm = build_datamodule(cfg, ckpt)  # as a resumed run builds it
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    train = pairs(24, 0)
    rows = batch["index"].tolist()
    theirs = tok([train[i][0] for i in rows], text_target=[train[i][1] for i in rows], padding=True,
                 return_tensors="pt")
    assert torch.equal(batch["src"], theirs["input_ids"])
    labels = theirs["labels"]
    assert torch.equal(batch["tgt_out"], labels)
    assert batch["tgt_in"][:, 0].eq(hf.config.decoder_start_token_id).all()
    task = load_task(str(run / "checkpoints" / "last.ckpt"))
    real = labels.ne(tok.pad_token_id)
    with torch.no_grad():
        expected = hf(input_ids=batch["src"], attention_mask=batch["src_pad_mask"].long(),
                      decoder_input_ids=batch["tgt_in"]).logits
        ours = task.model(batch["src"], batch["tgt_in"])
    assert (ours - expected)[real].abs().max().item() < TOL
    # the checkpoint decodes with the folder deleted, as the folder decodes en -> fr
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.txt").write_text("the movie was great .\nüber\n", encoding="utf-8")
    code, err = main_status(decode_cli, [f"ckpt_path=hf:{folder}", "input=in.txt", "output=folder.txt", "device=cpu",
                                         "src_lang=en", "tgt_lang=fr", *SHORT], capsys, monkeypatch)
    assert code == 0, err
    shutil.rmtree(folder)
    code, err = main_status(decode_cli, [f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}", "input=in.txt",
                                         "output=tuned.txt", "device=cpu", *SHORT], capsys, monkeypatch)
    assert code == 0, err
    assert (tmp_path / "tuned.txt").read_text() == (tmp_path / "folder.txt").read_text()


def test_evaluate_scores_a_folder_in_the_corpus_direction(corpus, tmp_path, capsys, monkeypatch):
    from transformer.cli import evaluate as evaluate_cli

    folder = write_multi_folder(tmp_path / "m2m100", "m2m100")
    monkeypatch.chdir(tmp_path)
    args = [f"ckpt_path=hf:{folder}", "data=parallel", "data.src_lang=en", "data.tgt_lang=fr",
            f"data.test={corpus}/test", "split=test", f"output_dir={tmp_path / 'eval'}", "device=cpu",
            "decode.strategy=greedy", *SHORT]
    code, err = main_status(evaluate_cli, args, capsys, monkeypatch)
    assert code == 0, err
    metrics = json.loads((tmp_path / "eval" / "test.greedy.json").read_text(encoding="utf-8"))
    assert (metrics["pair"], metrics["sentences"]) == ("en-fr", 6)
    code, err = main_status(decode_cli, [f"ckpt_path=hf:{folder}", f"input={corpus}/test.en", "output=dec.txt",
                                         "device=cpu", "src_lang=en", "tgt_lang=fr", "decode.strategy=greedy",
                                         *SHORT], capsys, monkeypatch)
    assert code == 0, err
    hyps = (tmp_path / "eval" / "test.greedy.hyp.fr").read_text(encoding="utf-8").splitlines()
    assert hyps == (tmp_path / "dec.txt").read_text(encoding="utf-8").splitlines() and any(hyps)
    # a language the folder lacks is one error line naming it
    code, err = main_status(evaluate_cli, [a.replace("data.tgt_lang=fr", "data.tgt_lang=xx") for a in args], capsys,
                            monkeypatch)
    assert code == 2 and err.strip().startswith("error: data.tgt_lang=xx: not a language of"), err
