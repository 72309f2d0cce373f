"""A user's parallel corpus, in each file layout, through train → evaluate → decode → distill,
with a language pair Multi30k does not have (generated Esperanto-like → Chinese pairs), and
bad corpora ending in one ``error:`` line with file and line."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hydra_helpers import compose_cfg, main_status

from transformer.cli import decode as decode_cli
from transformer.cli import train as train_cli
from transformer.cli.common import user_errors
from transformer.cli.distill import distill
from transformer.cli.evaluate import evaluate_checkpoint

WORDS = {"hundo": "狗", "kato": "猫", "viro": "男人", "virino": "女人", "kuras": "跑", "dormas": "睡觉",
         "manĝas": "吃", "pomon": "苹果", "granda": "大", "malgranda": "小", "la": "", "en": "在", "domo": "房子"}
TINY = ["model=tiny", "data.vocab_size=300", "data.max_tokens=600", "trainer.max_epochs=1",
        "trainer.limit_train_batches=4", "trainer.limit_val_batches=1", "trainer.log_every_n_steps=1",
        "callbacks.progress_bar=null", "logger.tensorboard=null", "task.warmup_steps=5",
        "task.val_decode.max_len_a=0", "task.val_decode.max_len_b=8"]


def generated_pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """Sentences of 2-6 words and their word-by-word Chinese (no spaces), with repeats."""
    rng = random.Random(seed)
    words = sorted(WORDS)
    pairs = []
    for _ in range(n):
        sent = [rng.choice(words) for _ in range(rng.randint(2, 6))]
        pairs.append((" ".join(sent) + ".", "".join(WORDS[w] for w in sent) + "。"))
    return pairs


def write_corpus(folder: Path, layout: str) -> list[str]:
    """Train / valid / test files in ``layout``; the data.* overrides that name them."""
    folder.mkdir(parents=True, exist_ok=True)
    splits = {"train": generated_pairs(300, 0), "dev": generated_pairs(20, 1), "test": generated_pairs(30, 2)}
    for name, pairs in splits.items():
        if layout == "files":
            for side, lang in ((0, "eo"), (1, "zh")):
                (folder / f"{name}.{lang}").write_text("".join(p[side] + "\n" for p in pairs), encoding="utf-8")
        elif layout == "tsv":
            (folder / f"{name}.tsv").write_text("".join(f"{zh}\t{eo}\tgen\n" for eo, zh in pairs), encoding="utf-8")
        else:
            (folder / f"{name}.jsonl").write_text("".join(
                json.dumps({"translation": {"eo": eo, "zh": zh}}, ensure_ascii=False) + "\n" for eo, zh in pairs),
                encoding="utf-8")
    ext = {"files": "", "tsv": ".tsv", "jsonl": ".jsonl"}[layout]  # files: a prefix, as fairseq takes it
    args = [f"data.{key}={folder}/{name}{ext}" for key, name in (("train", "train"), ("valid", "dev"), ("test", "test"))]
    if layout == "tsv":
        args += ["data.format=tsv", "data.columns={eo: 1, zh: 0}"]
    return ["experiment=parallel", "data.src_lang=eo", "data.tgt_lang=zh", *args]


@pytest.mark.parametrize("layout", ["files", "tsv", "jsonl"])
def test_each_layout_trains_evaluates_decodes_and_distils(layout, tmp_path, monkeypatch):
    data_args = write_corpus(tmp_path / "corpus", layout)
    out = tmp_path / "run"
    cfg = compose_cfg("train", [*data_args, *TINY, f"data.data_dir={tmp_path / 'cache'}", f"output_dir={out}",
                                "test_splits=[test]", "test_decode.max_len_a=0", "test_decode.max_len_b=8"])
    summary = train_cli.run(cfg)
    assert cfg.name == "corpus_eo_zh"  # named after its training files' folder (corpus/train...)
    test = summary["test"]["test"]
    assert test["pair"] == "eo-zh" and test["sentences"] == 30 and "tok:zh" in test["bleu_signature"]
    ckpt = summary["best_checkpoint"]
    # evaluate by split name from the checkpoint alone, from another folder
    monkeypatch.chdir(tmp_path)
    greedy = {"strategy": "greedy", "max_len_a": 0, "max_len_b": 8}
    valid = evaluate_checkpoint(ckpt, "valid", greedy, tmp_path / "eval", device="cpu")
    assert valid["sentences"] == 20 and (tmp_path / "eval" / "valid.greedy.hyp.zh").is_file()
    # any src + ref pair; the same sentences score the same
    src, ref = tmp_path / "t.eo", tmp_path / "t.zh"
    pairs = generated_pairs(30, 2)
    src.write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    ref.write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    files = evaluate_checkpoint(ckpt, "unused", greedy, tmp_path / "eval", device="cpu", src=str(src), ref=str(ref))
    assert (files["bleu"], files["chrf"]) == (test["bleu"], test["chrf"])
    lines = decode_cli.run(compose_cfg("decode", [f"ckpt_path={ckpt}", f"input={src}", f"output={tmp_path / 'hyp'}",
                                                  "decode.max_len_a=0", "decode.max_len_b=8", "device=cpu"]))
    assert len(lines) == 30
    distilled = distill(ckpt, "test", {"strategy": "greedy", "max_len_b": 8}, tmp_path / "distill", device="cpu")
    assert distilled["sentences"] == 30 and (tmp_path / "distill" / "test.eo").read_text(encoding="utf-8") == src.read_text(encoding="utf-8")


def test_a_file_carved_into_seeded_splits_trains_and_evaluates(tmp_path):
    path = tmp_path / "all.tsv"
    path.write_text("".join(f"{eo}\t{zh}\n" for eo, zh in generated_pairs(400, 5)), encoding="utf-8")
    out = tmp_path / "run"
    cfg = compose_cfg("train", ["experiment=parallel", "data.src_lang=eo", "data.tgt_lang=zh", f"data.train={path}",
                                "data.format=tsv", "data.holdout={valid: 20, test: 40}", "data.holdout_seed=3",
                                *TINY, f"data.data_dir={tmp_path / 'cache'}", f"output_dir={out}"])
    summary = train_cli.run(cfg)
    metrics = evaluate_checkpoint(summary["best_checkpoint"], "test", {"strategy": "greedy", "max_len_b": 8},
                                  tmp_path / "eval", device="cpu")
    # the generator repeats sentences: the test split holds whole groups of copies
    assert 30 <= metrics["sentences"] <= 40 and "tok:zh" in metrics["bleu_signature"]
    with pytest.raises(ValueError, match="split 'newstest' unknown"):
        evaluate_checkpoint(summary["best_checkpoint"], "newstest", {"strategy": "greedy"}, tmp_path, device="cpu")


def test_bad_corpora_end_in_one_error_line_with_file_and_line(tmp_path, capsys, monkeypatch):
    """Each mistake a user's corpus can hold ends as one ``error:`` line naming the file and
    line, with exit status 2."""
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / "train.eo").write_text("a\nb\n", encoding="utf-8")
    (folder / "train.zh").write_text("甲\n乙\n丙\n", encoding="utf-8")
    (folder / "few.tsv").write_text("a\t甲\nb\n", encoding="utf-8")
    (folder / "bytes.tsv").write_bytes(b"a\t\xe7\x94\xb2\n\xff\tb\n")
    (folder / "empty.tsv").write_bytes(b"")
    (folder / "lang.jsonl").write_text('{"translation": {"eo": "a", "zh": "甲"}}\n{"translation": {"eo": "b"}}\n',
                                       encoding="utf-8")
    cases = [
        (f"data.train={folder}/train", "train.zh:3: parallel files differ in length"),
        (f"data.train={folder}/few.tsv", "few.tsv:2: expected at least 2 columns, found 1"),
        (f"data.train={folder}/bytes.tsv", "bytes.tsv:2: not valid UTF-8"),
        (f"data.train={folder}/empty.tsv", "empty.tsv:0: empty file"),
        (f"data.train={folder}/lang.jsonl", "lang.jsonl:2: key 'translation.zh' missing"),
    ]
    base = ["experiment=parallel", "data.src_lang=eo", "data.tgt_lang=zh", "model=tiny",
            f"data.data_dir={tmp_path / 'cache'}"]

    def valid(train: str) -> str:  # training needs a validation split: the same file will do here
        return train.replace("data.train=", "data.valid=", 1)

    # the command's main() once (tests/cli/test_bad_input.py runs it as a process of its own to an
    # error line): exit status 2 and one error line
    monkeypatch.chdir(tmp_path)
    code, err = main_status(train_cli, [*base, cases[0][0], valid(cases[0][0]), f"hydra.run.dir={tmp_path / 'run'}"],
                            capsys, monkeypatch)
    lines = err.strip().splitlines()
    assert code == 2 and "Traceback" not in err, err[-2000:]
    assert lines[-1].startswith("error: ") and cases[0][1] in lines[-1], err[-2000:]
    # the others in process: each is one of the errors the entry point turns into that line
    for i, (train, message) in enumerate(cases[1:]):
        cfg = compose_cfg("train", [*base, train, valid(train), f"output_dir={tmp_path / f'run{i}'}"])
        with pytest.raises(user_errors()) as err:
            train_cli.run(cfg)
        assert message in str(err.value) and "\n" not in str(err.value)
