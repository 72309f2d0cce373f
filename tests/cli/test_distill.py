"""transformer-distill: a tiny AT checkpoint trained here (through the train CLI) translates a
slice of the training split; the result is a parallel corpus the data module reads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hydra_helpers import compose_cfg
from model_configs import TINY

REPO = Path(__file__).resolve().parents[2]
N = 24


@pytest.fixture(scope="module")
def at_checkpoint(tmp_path_factory, mirror_root) -> tuple[Path, Path]:
    from transformer.cli import train

    root = tmp_path_factory.mktemp("distill")
    cfg = compose_cfg("train", [
        "model=tiny", "debug=fast", "data.train_subset=64", "data.vocab_size=300", "++data.eval_splits=[val]",
        "trainer.limit_val_batches=1", "logger.tensorboard=null", f"output_dir={root / 'at'}",
        f"data.data_dir={root / 'cache'}", f"data.mirror_root={mirror_root}",
        # an untrained model rarely stops: keep validation decoding short
        "task.val_decode.max_len_a=0", "task.val_decode.max_len_b=8",
    ])
    summary = train.run(cfg)
    return Path(summary["last_checkpoint"]), root


def test_distilled_corpus_is_parallel_and_read_by_the_data_module(at_checkpoint, mirror_root, tmp_path):
    from transformer.data.parallel.corpus import multi30k, read_pairs
    from transformer.data.parallel.datamodule import TranslationDataModule

    from transformer.cli import distill

    ckpt, root = at_checkpoint
    out = tmp_path / "distilled"
    summary = distill.run(compose_cfg("distill", [
        f"ckpt_path={ckpt}", "split=train", f"output_dir={out}", "decode.strategy=beam", "decode.beam_size=2",
        "decode.max_len_a=0", "decode.max_len_b=6", f"limit={N}", f"data_dir={root / 'cache'}",
        f"mirror_root={mirror_root}", "device=cpu",
    ]))
    sources = [s for s, _ in read_pairs(multi30k("de", "en"), "train", root / "cache", mirror_root)][:N]
    src_text = (out / "train.de").read_bytes().decode("utf-8")
    tgt_text = (out / "train.en").read_bytes().decode("utf-8")
    assert src_text.split("\n")[:-1] == sources and src_text.endswith("\n")
    targets = tgt_text.split("\n")[:-1]
    assert len(targets) == N and tgt_text.endswith("\n")
    assert json.loads((out / "distill.json").read_text()) == json.loads(json.dumps(summary))
    assert summary["sentences"] == N and summary["decode"]["beam_size"] == 2
    assert (out / "tokenizer.json").is_file()

    dm = TranslationDataModule(
        src_lang="de", tgt_lang="en", data_dir=root / "cache", mirror_root=mirror_root, max_tokens=512,
        train_files={"src": str(out / "train.de"), "tgt": str(out / "train.en")}, eval_splits=[],
        tokenizer_path=str(out / "tokenizer.json"),
    )
    dm.prepare_data()
    dm.setup("fit")
    train = dm._datasets["train"]
    assert len(train) + dm.filter_report["train"].n_dropped == N
    tok = dm.tgt_tokenizer
    decoded = sorted(tok.decode(row["tgt"]) for row in train)
    kept = sorted(targets[i] for i in dm.filter_report["train"].kept)
    assert decoded == kept  # the training targets are the distilled translations


def test_the_console_entry_point_reports_a_missing_checkpoint_in_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "transformer.cli.distill", f"ckpt_path={tmp_path / 'nope.ckpt'}",
         f"output_dir={tmp_path / 'out'}"], capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2 and "checkpoint not found" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_translation_with_line_breaks_stays_on_one_line(tmp_path):
    from transformer.cli.distill import _write_lines
    from transformer.data.core.readers import iter_lines

    path = tmp_path / "train.en"
    _write_lines(path, ["a dog", "two\nlines", "cr\r\nlf", "", "last"])
    assert [line for _, line in iter_lines(path)] == ["a dog", "two lines", "cr  lf", "", "last"]


def test_an_ensemble_teacher_distils_with_the_averaged_probabilities(at_checkpoint, mirror_root, tmp_path):
    from transformer.cli import distill
    from transformer.tasks.checkpoint import load_task

    ckpt, root = at_checkpoint
    common = ["split=train", "decode.strategy=greedy", "decode.max_len_a=0", "decode.max_len_b=6", "limit=8",
              f"data_dir={root / 'cache'}", f"mirror_root={mirror_root}", "device=cpu"]
    summary = distill.run(compose_cfg("distill", [f"ckpt_path=[{ckpt},{ckpt}]", f"output_dir={tmp_path / 'ens'}",
                                                  *common]))
    assert summary["checkpoint"] == [str(ckpt), str(ckpt)]
    # a model ensembled with itself has its own distribution: the targets equal the single model's
    single = distill.run(compose_cfg("distill", [f"ckpt_path={ckpt}", f"output_dir={tmp_path / 'one'}", *common]))
    assert single["checkpoint"] == str(ckpt)
    assert (tmp_path / "ens" / "train.en").read_text() == (tmp_path / "one" / "train.en").read_text()
    assert type(load_task([ckpt, ckpt]).model).__name__ == "EnsembleModel"


def test_a_ctc_student_trains_on_the_distilled_corpus(at_checkpoint, mirror_root, tmp_path):
    from transformer.cli import distill, train
    from transformer.tasks.checkpoint import load_task

    ckpt, root = at_checkpoint
    out = tmp_path / "distilled"
    distill.run(compose_cfg("distill", [
        f"ckpt_path={ckpt}", "split=train", f"output_dir={out}", "decode.strategy=greedy", "decode.max_len_a=0",
        "decode.max_len_b=6", f"limit={N}", f"data_dir={root / 'cache'}", f"mirror_root={mirror_root}", "device=cpu",
    ]))
    summary = train.run(compose_cfg("train", [
        *TINY["nat_ctc_tiny"], "task=nat_ctc", "task.val_decode.strategy=ctc_one_pass", "debug=fast", "logger.tensorboard=null",
        "++data.eval_splits=[val]", "trainer.limit_val_batches=1", f"output_dir={tmp_path / 'ctc'}",
        f"data.data_dir={root / 'cache'}", f"data.mirror_root={mirror_root}",
        f"++data.train_files.src={out / 'train.de'}", f"++data.train_files.tgt={out / 'train.en'}",
        f"data.tokenizer_path={out / 'tokenizer.json'}",
    ]))
    student = load_task(summary["last_checkpoint"])
    assert student.task_name == "nat_ctc"
    # the student shares the teacher's vocabulary (the tokenizer written beside the corpus)
    assert student.tgt_tokenizer.to_str() == load_task(ckpt).tgt_tokenizer.to_str()
