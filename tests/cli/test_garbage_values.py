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

from transformer.cli import average, decode, export, inspect, tag
from transformer.cli.common import prepare, user_errors
from transformer.cli.run_folder import _HELD, release_run_folder
from transformer.data.tokenizer import SubwordTokenizer
from transformer.tasks.checkpoint import TASK_KEY
from transformer.tasks.tagging import TaggingTask
from transformer.tasks.translation import TranslationTask

GARBAGE = ["-1", "0", "abc", "1e30", "99999999999999999999", "[1,2]", "null", "''", "{missing}", "{dir}",
           "/dev/null", "{file}"]
FULL = {"decode": decode, "tag": tag, "inspect": inspect, "export": export, "average": average}
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
    (root / "adir").mkdir()
    (root / "src.txt").write_text("ein hund .\n", encoding="utf-8")
    return {"root": root, "translation": save(translation, root / "t.ckpt", "translation"),
            "tagger": save(tagger, root / "tagger.ckpt", "tagging"), "src": root / "src.txt"}


def base_args(command: str, world: dict, out: Path) -> list[str]:
    """A valid command line for ``command``, writing under ``out``."""
    t = world["translation"]
    short = ["decode.max_len_a=0", "decode.max_len_b=3"]
    return {
        "decode": [f"ckpt_path={t}", "device=cpu", f"input={world['src']}", f"output={out / 'hyp.txt'}", *short],
        "tag": [f"ckpt_path={world['tagger']}", "device=cpu", f"input={world['src']}", f"output={out / 'tags.txt'}"],
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
                prepare(command, args)
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
    finally:
        for held in list(_HELD):
            release_run_folder(Path(held))
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
