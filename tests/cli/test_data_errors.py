"""Bad data settings and files through the real ``transformer-train`` / ``transformer-tag``
entries (their ``main()``, run in this process): each ends in one ``error: ...`` line naming the
key, file or line, with exit status 2, and a setting that can be judged before any file is read
is refused before the run folder exists. A CoNLL-U file that starts with a byte-order mark trains and tags like any other."""

from __future__ import annotations

import gzip
import re
import time
from pathlib import Path

import pytest
from hydra_helpers import compose_cfg, main_output, main_status

from transformer.cli import tag as tag_cli
from transformer.cli import train as train_cli
from model_configs import TINY

BOM = "\ufeff"
WORDS = [("the", "DET"), ("a", "DET"), ("dog", "NOUN"), ("cat", "NOUN"), ("runs", "VERB"), ("sleeps", "VERB")]


@pytest.fixture
def files(tmp_path) -> dict[str, Path]:
    """A three-column TSV file and a folder that holds no dataset, outside the working folder."""
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "pairs.tsv").write_text("Hi.\t嗨。\tcc\nRun!\t跑！\tcc\n", encoding="utf-8")
    (folder / "notes").mkdir()
    (folder / "notes" / "README.md").write_text("no data here\n", encoding="utf-8")
    return {"tsv": folder / "pairs.tsv", "notes": folder / "notes"}


PARALLEL = ["experiment=parallel", "model=tiny"]
CLASSIFY = ["experiment=classify", *TINY["classifier_tiny"], "data.train=<tsv>"]


@pytest.mark.parametrize("args, message", [
    # a column map naming a language the pair lacks (it used to read English on both sides)
    ([*PARALLEL, "data.src_lang=zh", "data.tgt_lang=en", "data.columns={en: 0, cn: 1}"],
     r"data\.columns=\{en: 0, cn: 1\} names en, cn, but the pair is zh-en: name each of zh and en"),
    ([*PARALLEL, "data.src_lang=zh", "data.tgt_lang=en", "data.columns={zh: 0, en: 0}", "data.train=<tsv>",
      "data.valid=<tsv>"], r"data\.columns=\{zh: 0, en: 0\}: zh and en both read column 0"),
    ([*CLASSIFY, "data.dev=<tsv>", "data.label_column=-5"], r"data\.label_column=-5: expected a 0-based column index"),
    ([*CLASSIFY, "data.dev=<tsv>", "data.label_column=7"], r"pairs\.tsv:1: expected at least 8 columns, found 3"),
    ([*PARALLEL, "data.hub={name: nonexistent/xyz}", "data.src_lang=ro", "data.tgt_lang=en"],
     r"data\.hub\.name=nonexistent/xyz: not a local folder, and HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 keeps the "
     r"hub offline"),
    ([*PARALLEL, "data.hub={name: <notes>}", "data.src_lang=ro", "data.tgt_lang=en"],
     r"data\.hub\.name=.*notes: a folder, but not a dataset"),
    ([*CLASSIFY, "data.dev=<tsv>", "data.holdout={dev: 0.1}"],
     r"data\.holdout\.dev and data\.dev=.*pairs\.tsv: two sources for the dev split"),
    ([*PARALLEL, "data.src_lang=en", "data.tgt_lang=zh", "data.train=<tsv>", "data.valid=<tsv>",
      "data.holdout={valid: 1}"], r"data\.holdout\.valid and data\.valid=.*: two sources for the valid split"),
    ([*PARALLEL, "data.src_lang=en", "data.tgt_lang=en"],
     r"data\.src_lang=en and data\.tgt_lang=en: the same language"),
    ([*PARALLEL, "data.src_lang=en", "data.tgt_lang=zh", "data.train=<tsv>", "data.format=tsv"],
     r"data\.valid: training needs a validation split; set data\.valid=.* data\.holdout=\{valid: 1000\}"),
    ([*CLASSIFY], r"data\.dev: training needs a validation split; set data\.dev=<file>"),
])
def test_bad_data_settings_end_in_one_error_line_before_the_run_folder(files, tmp_path, capsys, monkeypatch, args,
                                                                       message):
    monkeypatch.chdir(tmp_path)
    args = [re.sub(r"<(\w+)>", lambda m: str(files[m.group(1)]), a) for a in args]
    args += [f"hydra.run.dir={tmp_path / 'run'}", f"data.data_dir={tmp_path / 'cache'}"]
    before = sorted(p.name for p in tmp_path.iterdir())
    start = time.monotonic()
    code, err = main_status(train_cli, args, capsys, monkeypatch)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err[-2000:]
    assert re.search(message, lines[0]), lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no run folder, no cache
    assert time.monotonic() - start < 30  # no network retries


def test_a_subset_reads_whole_files_and_names_the_broken_one(tmp_path, capsys, monkeypatch):
    """``debug=fast`` trains on 64 pairs, but files that differ in length, or a ``.gz`` cut
    short, past those pairs are still one error line naming the file(s)."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "short.en").write_text("".join(f"dog {i}\n" for i in range(200)), encoding="utf-8")
    (corpus / "short.de").write_text("".join(f"hund {i}\n" for i in range(199)), encoding="utf-8")
    (corpus / "cut.en.gz").write_bytes(gzip.compress("".join(f"dog {i}\n" for i in range(5000)).encode()))
    whole = gzip.compress("".join(f"hund {i}\n" for i in range(5000)).encode())
    (corpus / "cut.de.gz").write_bytes(whole[:-40])
    cases = {"short": r"short\.en:200: parallel files differ in length: .*short\.de ends at line 199",
             "cut": r"cut\.de\.gz:\d+: cannot be read"}
    monkeypatch.chdir(tmp_path)
    for name in cases:
        code, stderr = main_status(train_cli, [*PARALLEL, "debug=fast", "data.src_lang=en", "data.tgt_lang=de",
                                               f"data.train={corpus / name}", f"data.valid={corpus / name}",
                                               f"data.data_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / name}"],
                                   capsys, monkeypatch)
        errors = [line for line in stderr.splitlines() if line.startswith("error:")]
        assert code == 2 and "Traceback" not in stderr, stderr[-2000:]
        assert len(errors) == 1 and errors[0] == stderr.strip().splitlines()[-1], stderr[-2000:]
        assert re.search(cases[name], errors[0]), errors[0]


def conllu(sentences: list[list[tuple[str, str]]], start: int = 0) -> str:
    return "".join(f"# sent_id = s{start + n}\n" + "".join(f"{i}\t{w}\t{w}\t{t}\t_\t_\t0\tdep\t_\t_\n"
                                                            for i, (w, t) in enumerate(s, 1)) + "\n"
                   for n, s in enumerate(sentences))


def test_a_conllu_file_with_a_byte_order_mark_trains_and_tags(tmp_path, capsys, monkeypatch):
    sents = [[WORDS[i % 2], WORDS[2 + i % 2], WORDS[4 + (i // 2) % 2]] for i in range(40)]
    train, dev = tmp_path / "train.conllu", tmp_path / "dev.conllu"
    train.write_text(BOM + conllu(sents[:32]), encoding="utf-8")
    dev.write_text(BOM + conllu(sents[32:], 32), encoding="utf-8")
    cfg = compose_cfg("train", ["experiment=ud_upos", "debug=fast", *TINY["tagger_tiny"], f"data.train={train}",
                                f"data.dev={dev}", "data.tokenizer_model=word", "data.vocab_size=60",
                                f"data.data_dir={tmp_path / 'cache'}", f"output_dir={tmp_path / 'run'}",
                                "callbacks.lr_monitor=null", "logger.tensorboard=null", "test_splits=[]"])
    summary = train_cli.run(cfg)
    assert summary["global_step"] >= 1
    out = tmp_path / "tagged.conllu"
    monkeypatch.chdir(tmp_path)
    code, _, stderr = main_output(tag_cli, [f"ckpt_path={summary['last_checkpoint']}", f"input={dev}", f"output={out}",
                                            "device=cpu"], capsys, monkeypatch)
    assert code == 0, stderr[-2000:]
    tagged = out.read_text(encoding="utf-8").splitlines()
    source = dev.read_text(encoding="utf-8").removeprefix(BOM).splitlines()
    assert len(tagged) == len(source) and tagged[0] == "# sent_id = s32"
    words = [line.split("\t") for line in tagged if line and not line.startswith("#")]
    assert len(words) == 3 * 8 and all(cols[3] in {"DET", "NOUN", "VERB"} for cols in words)
