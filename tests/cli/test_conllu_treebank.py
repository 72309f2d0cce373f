"""Any CoNLL-U treebank given by its files trains, evaluates and tags through the real CLIs:
a small generated treebank with a word that contains a space (Vietnamese ``sinh viên``),
multiword-token and empty-node lines, and a dev tag the training file lacks. Bad treebanks end
in one error line from transformer-train's ``main()``, run in this process."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hydra_helpers import main_status
from model_configs import TINY

from transformer.cli import train as train_cli

# (form, UPOS): "sinh viên" (student) is one word written with a space.
LEXICON = [("tôi", "PRON"), ("bạn", "PRON"), ("là", "AUX"), ("sinh viên", "NOUN"), ("giáo viên", "NOUN"),
           ("học", "VERB"), ("đọc", "VERB"), ("sách", "NOUN"), ("đẹp", "ADJ"), ("rất", "ADV")]
PATTERNS = [[0, 2, 3], [1, 5, 7], [0, 6, 7, 9, 8], [1, 2, 4], [3, 5, 7]]


def conllu_block(n: int, words: list[tuple[str, str]], extra: str = "") -> str:
    """One sentence: word lines, a final full stop, and ``extra`` lines before the first word."""
    words = [*words, (".", "PUNCT")]
    rows = [f"# sent_id = s{n}", f"# text = {' '.join(w for w, _ in words)}"] + ([extra] if extra else [])
    rows += [f"{i}\t{w}\t{w}\t{t}\t{t.lower()}\t_\t0\tdep\t_\t_" for i, (w, t) in enumerate(words, 1)]
    return "\n".join(rows) + "\n\n"


def write_treebank(folder: Path, n_train: int = 120) -> dict[str, Path]:
    """train/dev/test files; dev has a multiword token, an empty node and a SYM word (a tag
    the training file lacks)."""
    rng = random.Random(0)
    sents = [[LEXICON[i] for i in rng.choice(PATTERNS)] for _ in range(n_train + 20)]
    files = {"train": folder / "train.conllu", "dev": folder / "dev.conllu", "test": folder / "test.conllu"}
    files["train"].write_text("".join(conllu_block(i, s) for i, s in enumerate(sents[:n_train])), encoding="utf-8")
    dev = [conllu_block(1000 + i, s) for i, s in enumerate(sents[n_train:n_train + 10])]
    dev.append(conllu_block(2000, [("tôi", "PRON"), ("%", "SYM")]))
    dev.append(conllu_block(2001, [("bạn", "PRON"), ("đọc", "VERB")],
                            extra="0.1\tđã\tđã\tAUX\t_\t_\t_\t_\t0:dep\t_\n1-2\tbạn đọc\t_\t_\t_\t_\t_\t_\t_\t_"))
    files["dev"].write_text("".join(dev), encoding="utf-8")
    files["test"].write_text("".join(conllu_block(3000 + i, s) for i, s in enumerate(sents[n_train + 10:])),
                             encoding="utf-8")
    return files


def cli(module: str, *args: str, cwd: Path, ok: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1",
               PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=300)
    if ok:
        assert proc.returncode == 0, f"{module} failed:\n{proc.stderr[-3000:]}"
    return proc


@pytest.mark.slow
def test_a_treebank_given_by_paths_trains_evaluates_and_tags(tmp_path):
    files = write_treebank(tmp_path)
    run_dir = tmp_path / "run"
    cli("transformer.cli.train", "experiment=ud_upos", "debug=fast", *TINY["tagger_tiny"], "data.dataset=vi_toy",
                f"data.train={files['train']}", f"data.dev={files['dev']}", f"data.test={files['test']}",
                "data.train_subset=null", f"data.data_dir={tmp_path / 'cache'}", f"hydra.run.dir={run_dir}",
                "logger.tensorboard=null", "trainer.limit_train_batches=1.0", "task.warmup_steps=1", cwd=tmp_path)
    # the dev tag the training file lacks is counted in a warning
    assert "dev: 1 upos word(s) carry a tag not in the training file (SYM: 1)" in (run_dir / "train.log").read_text()
    summary = json.loads((run_dir / "train_summary.json").read_text())
    best = summary["best_checkpoint"]
    # the tag set is the training file's: SYM is no class of the model
    assert set(summary["test"]["test"]["per_tag"]) <= {"PRON", "AUX", "NOUN", "VERB", "ADJ", "ADV", "PUNCT"}
    dev = summary["test"]["dev"]
    assert dev["dataset"] == "vi_toy" and dev["unknown_tags"] == {"SYM": 1}
    words_in_dev = [line for line in files["dev"].read_text(encoding="utf-8").splitlines()
                    if line and line[0].isdigit() and line.split("\t")[0].isdigit()]
    assert dev["tokens"] == len(words_in_dev)  # every word scored, ranges and empty nodes skipped
    assert dev["correct"] <= dev["tokens"] - 1  # the SYM word is an error, never right
    # validation scored it the same way: the val/acc that chose the checkpoint is this accuracy
    assert dev["acc"] == pytest.approx(summary["best_score"], abs=1e-6)
    assert "SYM: 1" in Path(dev["outputs"]["report"]).read_text(encoding="utf-8")

    # evaluate by split name, and on a CoNLL-U file, from the checkpoint alone (another folder)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = cli("transformer.cli.evaluate", f"ckpt_path={best}", "split=test", f"output_dir={tmp_path / 'ev'}",
              "device=cpu", cwd=elsewhere)
    by_split = json.loads(out.stdout[out.stdout.index("{\n"):])
    out = cli("transformer.cli.evaluate", f"ckpt_path={best}", f"split={files['test']}",
              f"output_dir={tmp_path / 'ev2'}", "device=cpu", cwd=elsewhere)
    by_file = json.loads(out.stdout[out.stdout.index("{\n"):])
    assert by_file["acc"] == by_split["acc"] and by_file["tokens"] == by_split["tokens"] == summary["test"]["test"]["tokens"]
    assert Path(by_file["outputs"]["metrics"]).name == "test.conllu.upos.json"

    # tag a CoNLL-U file: one tag per word, "sinh viên" kept whole, other lines untouched
    tagged = tmp_path / "tagged.conllu"
    cli("transformer.cli.tag", f"ckpt_path={best}", f"input={files['dev']}", f"output={tagged}", "device=cpu",
        cwd=elsewhere)
    got = tagged.read_text(encoding="utf-8").splitlines()
    want = files["dev"].read_text(encoding="utf-8").splitlines()
    assert len(got) == len(want)
    for g, w in zip(got, want):
        gc, wc = g.split("\t"), w.split("\t")
        if len(wc) == 10 and wc[0].isdigit():
            # UPOS predicted; XPOS, which the model does not predict, written "_"; the rest kept
            assert gc[:3] == wc[:3] and gc[4] == "_" and gc[5:] == wc[5:] and gc[3] in dev["per_tag"]
        else:
            assert g == w
    assert any(g.split("\t")[1:2] == ["sinh viên"] for g in got)


def train_error(tmp_path: Path, capsys, monkeypatch, *args: str) -> str:
    """The last line transformer-train writes to stderr, which must end it with status 2."""
    monkeypatch.chdir(tmp_path)
    code, err = main_status(train_cli, ["experiment=ud_upos", "debug=fast", *TINY["tagger_tiny"], *args,
                                        f"hydra.run.dir={tmp_path / 'run'}", f"data.data_dir={tmp_path / 'cache'}"],
                            capsys, monkeypatch)
    assert code == 2 and "Traceback" not in err, err[-2000:]
    return err.strip().splitlines()[-1]


def test_a_short_conllu_row_is_one_error_line_naming_file_and_line(tmp_path, capsys, monkeypatch):
    files = write_treebank(tmp_path, n_train=5)
    lines = files["train"].read_text(encoding="utf-8").splitlines()
    bad = next(i for i, line in enumerate(lines) if line.startswith("2\t"))
    lines[bad] = "\t".join(lines[bad].split("\t")[:9])
    files["train"].write_text("\n".join(lines) + "\n", encoding="utf-8")
    last = train_error(tmp_path, capsys, monkeypatch, f"data.train={files['train']}", f"data.dev={files['dev']}")
    assert last == f"error: {files['train']}:{bad + 1}: expected 10 tab-separated columns, found 9"


def test_no_training_file_is_one_error_line(tmp_path, capsys, monkeypatch):
    last = train_error(tmp_path, capsys, monkeypatch)
    assert last.startswith("error: data.train: required (a CoNLL-U or CoNLL-2000 ")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("missing", ["dev", "test"])
def test_a_missing_file_is_named(tmp_path, missing, capsys, monkeypatch):
    files = write_treebank(tmp_path, n_train=5)
    files[missing].unlink()
    last = train_error(tmp_path, capsys, monkeypatch, *(f"data.{s}={p}" for s, p in files.items()))
    assert last == f"error: tagging data file not found: {files[missing]}"
