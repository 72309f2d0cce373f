"""A generated table over every command and every config key holding a number, a string or a
path: each garbage value (negative, zero, a wrong type, huge, a missing file, a folder, a
special file, a list, null, empty) ends with exit status 0 or 2, and for 2 the last line of
stderr starts with ``error:`` and no traceback was printed.

The commands run in-process through their real ``main()`` (Hydra included) on a tiny
checkpoint. Training, evaluation and distillation run their validation step only (the part
of ``main()`` before Hydra): what passes it would start a real run over a real corpus. The
default test takes a deterministic sample of the table; the ``slow`` one takes all of it.
"""

from __future__ import annotations

import io
import sys
import traceback
from pathlib import Path

import pytest
import torch
from hydra_helpers import compose_cfg
from omegaconf import OmegaConf

from transformer.cli import average, classify, decode, export, inspect, tag
from transformer.cli import train as train_cli
from transformer.cli.common import prepare, user_errors
from transformer.data.core.tokenizer import SubwordTokenizer
from transformer.tasks.checkpoint import TASK_KEY
from transformer.tasks.classification import ClassificationTask
from transformer.tasks.tagging import TaggingTask
from transformer.tasks.translation import TranslationTask

GARBAGE = ["-1", "0", "abc", "1e30", "99999999999999999999", "[1,2]", "null", "''", "{missing}", "{dir}",
           "/dev/null", "{file}"]
FULL = {"decode": decode, "tag": tag, "classify": classify, "inspect": inspect, "export": export, "average": average}
VALIDATED = ("train", "eval", "distill")
SKIP_KEYS = ("_target_", "_partial_")
SENTENCES = ["ein hund läuft über die wiese .", "a dog runs across the meadow ."] * 10


def save(task, path: Path, kind: str) -> Path:
    ckpt = {"state_dict": task.state_dict(), "hyper_parameters": dict(task.hparams), TASK_KEY: kind}
    task.on_save_checkpoint(ckpt)
    torch.save(ckpt, path)
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("garbage")
    tok = SubwordTokenizer.train(SENTENCES, vocab_size=300)
    model = {"_target_": "transformer.models.EncoderDecoder", "d_model": 16, "n_heads": 2, "n_encoder_layers": 1,
             "n_decoder_layers": 1, "d_ff": 32, "dropout": 0.0, "max_len": 32}
    translation = TranslationTask(model=model, vocab_size=tok.vocab_size, pad_id=tok.pad_id, bos_id=tok.bos_id,
                                  eos_id=tok.eos_id, src_lang="de", tgt_lang="en",
                                  tokenizers={"src": tok.to_str(), "tgt": tok.to_str()})
    tagger = TaggingTask(
        model={"_target_": "transformer.models.tagger.Tagger", "d_model": 16, "n_heads": 2, "n_layers": 1,
               "d_ff": 32, "dropout": 0.0, "max_len": 16},
        piece_vocab_size=tok.vocab_size, pad_id=tok.pad_id, tags=["DET", "NOUN"],
        data={"name": "gum", "tagset": "upos"}, tokenizer=tok.to_str(), train_words=["a", "dog"])
    classifier = ClassificationTask(
        model={"_target_": "transformer.models.classifier.SequenceClassifier", "d_model": 16, "n_heads": 2,
               "n_layers": 1, "d_ff": 32, "dropout": 0.0, "max_len": 16},
        piece_vocab_size=tok.vocab_size, pad_id=tok.pad_id, labels=["neg", "pos"],
        data={"name": "toy", "paths": {}}, tokenizer=tok.to_str())
    (root / "adir").mkdir()
    (root / "src.txt").write_text("ein hund .\n", encoding="utf-8")
    return {"root": root, "translation": save(translation, root / "t.ckpt", "translation"),
            "tagger": save(tagger, root / "tagger.ckpt", "tagging"),
            "classifier": save(classifier, root / "classifier.ckpt", "classification"), "src": root / "src.txt"}


def base_args(command: str, world: dict, out: Path) -> list[str]:
    """A valid command line for ``command``, writing under ``out``."""
    t = world["translation"]
    short = ["decode.max_len_a=0", "decode.max_len_b=3"]
    return {
        "decode": [f"ckpt_path={t}", "device=cpu", f"input={world['src']}", f"output={out / 'hyp.txt'}", *short],
        "tag": [f"ckpt_path={world['tagger']}", "device=cpu", f"input={world['src']}", f"output={out / 'tags.txt'}"],
        "classify": [f"ckpt_path={world['classifier']}", "device=cpu", f"input={world['src']}",
                     f"output={out / 'labels.txt'}"],
        "inspect": [f"ckpt_path={t}", "text=ein hund", f"output_dir={out / 'inspect'}", "max_tokens=8", "positions=8",
                    *short],
        "export": [f"ckpt_path={t}", f"output_dir={out / 'ct2'}"],
        "average": [f"inputs=[{t},{t}]", f"output={out / 'avg.ckpt'}"],
        "train": ["model=tiny", f"hydra.run.dir={out / 'run'}"],
        "eval": [f"ckpt_path={t}", "device=cpu", f"output_dir={out / 'eval'}"],
        "distill": [f"ckpt_path={t}", "device=cpu", f"output_dir={out / 'distill'}"],
    }[command]


def config_keys(command: str) -> list[str]:
    """Every leaf key of the composed config that holds a scalar (a number, string, path)."""
    name = {"train": "train"}.get(command, command)
    cfg = OmegaConf.to_container(compose_cfg(name, ["model=tiny"] if command == "train" else []), resolve=False)
    keys: list[str] = []

    def walk(node, prefix):
        for k, v in node.items():
            if isinstance(v, dict):
                walk(v, f"{prefix}{k}.")
            elif not isinstance(v, list) and k not in SKIP_KEYS:
                keys.append(f"{prefix}{k}")

    walk(cfg, "")
    return keys


def invoke(command: str, args: list[str], capsys, monkeypatch) -> tuple[int, str]:
    """``(exit status, stderr)`` of the command's ``main()`` (or, for training, evaluation and
    distillation, its validation step) with ``args``."""
    monkeypatch.setattr(sys, "argv", [command, *args])
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"ein hund .\n"), encoding="utf-8"))
    capsys.readouterr()
    try:
        if command in VALIDATED:
            try:
                prepare(command, args, train_cli.preflight if command == "train" else None)
            except user_errors() as exc:
                print(f"error: {exc}", file=sys.stderr)
                raise SystemExit(2) from None
            code = 0
        else:
            FULL[command].main()
            code = 0
    except SystemExit as exc:
        code = 0 if exc.code is None else exc.code
    except Exception:  # an escaped internal error: what the command line would show as a traceback
        traceback.print_exc()
        code = 1
    return code, capsys.readouterr().err


def cases(command: str, sample: bool) -> list[tuple[str, str]]:
    keys = config_keys(command)
    table = [(k, v) for i, k in enumerate(keys) for j, v in enumerate(GARBAGE)
             if not sample or j == (i * 7 + len(k)) % len(GARBAGE)]
    if sample and command == "train":
        table = table[::3]  # 116 keys: a third of them per run, every value class still drawn
    return table


def check_table(command: str, world: dict, tmp_path: Path, capsys, monkeypatch, sample: bool) -> None:
    problems = []
    for i, (key, value) in enumerate(cases(command, sample)):
        out = tmp_path / f"case{i}"
        out.mkdir()
        value = value.format(missing=out / "missing.txt", dir=world["root"] / "adir", file=world["src"])
        args = [*base_args(command, world, out), f"{key}={value}"]
        if key.startswith("hydra."):
            args = [a for a in args if not a.startswith(f"{key}=")] + [f"{key}={value}"]
        code, err = invoke(command, args, capsys, monkeypatch)
        lines = err.strip().splitlines()
        if code not in (0, 2) or "Traceback" in err or (code == 2 and not (lines and lines[-1].startswith("error: "))):
            problems.append(f"{command} {key}={value}: exit {code}: {err.strip()[-600:]}")
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize("command", [*FULL, *VALIDATED])
def test_garbage_values_end_in_status_0_or_2(command, world, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    check_table(command, world, tmp_path, capsys, monkeypatch, sample=True)


@pytest.mark.slow
@pytest.mark.parametrize("command", [*FULL, *VALIDATED])
def test_every_garbage_value_ends_in_status_0_or_2(command, world, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    check_table(command, world, tmp_path, capsys, monkeypatch, sample=False)


def test_distill_on_a_checkpoint_that_does_not_translate_is_one_line(world, tmp_path, capsys, monkeypatch):
    from transformer.cli import distill

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["transformer-distill", f"ckpt_path={world['classifier']}", "device=cpu",
                                      f"output_dir={tmp_path / 'out'}"])
    with pytest.raises(SystemExit) as exit_:
        distill.main()
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1
    assert err[0].startswith("error: ") and "classification checkpoint" in err[0] and "translation" in err[0]


@pytest.mark.parametrize("bad", ["ckpt_path=null", None, "ckpt_path=123", "output={dir}", "max_tokens=-1",
                                 "top_k=0", "format=xml"])
def test_classify_checks_its_settings_before_the_model_runs(bad, world, tmp_path, capsys, monkeypatch):
    args = [f"ckpt_path={world['classifier']}", "device=cpu", f"input={world['src']}",
            f"output={tmp_path / 'labels.txt'}"]
    if bad is None:
        args = args[1:]  # no ckpt_path at all
    else:
        key = bad.split("=")[0]
        args = [a for a in args if not a.startswith(f"{key}=")] + [bad.format(dir=world["root"] / "adir")]
    code, err = invoke("classify", args, capsys, monkeypatch)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert not (tmp_path / "labels.txt").exists()


# The data keys of every experiment (files, columns, languages, holdout, hub ...), each met by
# garbage on top of a valid command line for that experiment: the training command's
# validation step ends in status 0 or 2 with one ``error:`` line, never a traceback.
EXPERIMENTS = {
    "multi30k": [],
    "parallel": ["data.src_lang=en", "data.tgt_lang=zh", "data.train={tsv}", "data.valid={tsv}", "data.format=tsv"],
    "tatoeba": [],
    "classify": ["data.train={labels}", "data.dev={labels}"],
    "sst2": [],
    "ud_upos": ["data.train={conllu}", "data.dev={conllu}"],
    "gum_upos": [],
    "conll2000_pos": [],
}


def experiment_world(root: Path) -> dict[str, Path]:
    (root / "pairs.tsv").write_text("Hi.\t嗨。\nRun!\t跑！\n", encoding="utf-8")
    (root / "labels.tsv").write_text("a fine film\tpos\na dull film\tneg\n", encoding="utf-8")
    (root / "t.conllu").write_text("1\tDogs\tdog\tNOUN\tNNS\t_\t0\troot\t_\t_\n\n", encoding="utf-8")
    return {"tsv": root / "pairs.tsv", "labels": root / "labels.tsv", "conllu": root / "t.conllu"}


def data_cases(experiment: str, sample: bool) -> list[tuple[str, str]]:
    cfg = OmegaConf.to_container(compose_cfg("train", [f"experiment={experiment}"]).data, resolve=False)
    keys: list[str] = []

    def walk(node, prefix):
        for k, v in node.items():
            if isinstance(v, dict):
                walk(v, f"{prefix}{k}.")
            elif k not in SKIP_KEYS:
                keys.append(f"{prefix}{k}")

    walk(cfg, "data.")
    extra = [("data.columns", "{en: 0, cn: 1}"), ("data.holdout", "{dev: 0.1}"), ("data.holdout", "{valid: -3}"),
             ("data.label_column", "-5"), ("data.text_column", "99"), ("data.hub.name", "nonexistent/xyz")]
    table = [(k, v) for i, k in enumerate(keys) for j, v in enumerate(GARBAGE)
             if not sample or j == (i * 5 + len(k) + len(experiment)) % len(GARBAGE)]
    return (table[::4] if sample else table) + extra


def check_experiment(experiment: str, world: dict, tmp_path: Path, capsys, monkeypatch, sample: bool) -> None:
    files = experiment_world(tmp_path)
    base = [f"experiment={experiment}", *(a.format(**files) for a in EXPERIMENTS[experiment])]
    problems = []
    for i, (key, value) in enumerate(data_cases(experiment, sample)):
        out = tmp_path / f"case{i}"
        out.mkdir()
        for name, path in (("{missing}", out / "missing.txt"), ("{dir}", world["root"] / "adir"),
                           ("{file}", world["src"])):
            value = value.replace(name, str(path))
        args = [a for a in base if not a.startswith(f"{key}=")] + [f"{key}={value}", f"hydra.run.dir={out / 'run'}"]
        code, err = invoke("train", args, capsys, monkeypatch)
        lines = err.strip().splitlines()
        if code not in (0, 2) or "Traceback" in err or (code == 2 and not (lines and lines[-1].startswith("error: "))):
            problems.append(f"{experiment} {key}={value}: exit {code}: {err.strip()[-600:]}")
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_garbage_data_values_of_every_experiment_end_in_status_0_or_2(experiment, world, tmp_path, capsys,
                                                                       monkeypatch):
    monkeypatch.chdir(tmp_path)
    check_experiment(experiment, world, tmp_path, capsys, monkeypatch, sample=True)


@pytest.mark.slow
@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_garbage_data_value_of_every_experiment_ends_in_status_0_or_2(experiment, world, tmp_path, capsys,
                                                                            monkeypatch):
    monkeypatch.chdir(tmp_path)
    check_experiment(experiment, world, tmp_path, capsys, monkeypatch, sample=False)
