"""Bad inputs the other refusal tests leave out, each one ``error:`` line, exit status 2 and no
folder made: a checkpoint without its tokenizer (every command that reads text with one, and
``init_from``), ``init_from`` beside ``ckpt_path``, a run without its training data (every data
kind), and control characters in a file name or a checkpoint's key (escaped, never echoed raw).
Also: a masked LM starting a translation model says in one warning that the decoder starts fresh.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra_helpers import main_status

from transformer.cli import classify as classify_cli
from transformer.cli import decode as decode_cli
from transformer.cli import evaluate as evaluate_cli
from transformer.cli import export as export_cli
from transformer.cli import fill as fill_cli
from transformer.cli import serve as serve_cli
from transformer.cli import tag as tag_cli
from transformer.cli import train as train_cli
from transformer.cli.common import error_line
from transformer.data.core.tokenizer import SubwordTokenizer
from transformer.tasks.checkpoint import TASK_KEY

REPO = Path(__file__).resolve().parents[2]
GERMAN = ["ein hund läuft über die wiese .", "zwei männer stehen auf der straße .", "eine katze schläft ."] * 8
ENGLISH = ["a dog runs across the meadow .", "two men stand on the street .", "a cat sleeps ."] * 8
ENCODER = {"d_model": 32, "n_heads": 2, "n_layers": 1, "d_ff": 64, "dropout": 0.0}
QUIET = ["logger.tensorboard=null", "callbacks.progress_bar=null"]


def save(task, path: Path, kind: str, tokenizers: bool = True, extra_key: str | None = None) -> Path:
    """A checkpoint as transformer-train writes one; without its ``tokenizers`` entry, or with a
    state-dict key ``extra_key`` the model does not have, where asked."""
    ckpt = {"state_dict": dict(task.state_dict()), "hyper_parameters": dict(task.hparams), TASK_KEY: kind}
    task.on_save_checkpoint(ckpt)
    if not tokenizers:
        del ckpt["tokenizers"]
    if extra_key is not None:
        ckpt["state_dict"][extra_key] = torch.zeros(1)
    torch.save(ckpt, path)
    return path


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory) -> dict[str, Path]:
    """Tiny checkpoints of every kind, each also as ``<kind>-bare`` without its tokenizer."""
    from transformer.tasks.classification import ClassificationTask
    from transformer.tasks.mlm import MaskedLMTask
    from transformer.tasks.tagging import TaggingTask
    from transformer.tasks.translation import TranslationTask

    folder = tmp_path_factory.mktemp("ckpts")
    torch.manual_seed(0)
    tok = SubwordTokenizer.train(GERMAN + ENGLISH, vocab_size=300)
    tasks = {
        "translation": TranslationTask(
            model={"_target_": "transformer.models.EncoderDecoder", "d_model": 16, "n_heads": 2, "n_encoder_layers": 1,
                   "n_decoder_layers": 1, "d_ff": 32, "dropout": 0.0, "max_len": 32},
            vocab_size=tok.vocab_size, pad_id=tok.pad_id, bos_id=tok.bos_id, eos_id=tok.eos_id, src_lang="de",
            tgt_lang="en", tokenizers={"src": tok.to_str(), "tgt": tok.to_str()}),
        "tagging": TaggingTask(model={"_target_": "transformer.models.tagger.Tagger", **ENCODER, "max_len": 8},
                               piece_vocab_size=tok.vocab_size, pad_id=tok.pad_id, tags=["DET", "NOUN"],
                               data={"name": "gum", "tagset": "upos"}, tokenizer=tok.to_str(),
                               train_words=["a", "dog"]),
        "classification": ClassificationTask(
            model={"_target_": "transformer.models.classifier.SequenceClassifier", **ENCODER},
            piece_vocab_size=tok.vocab_size, pad_id=tok.pad_id, labels=["neg", "pos"], data={"name": "toy"},
            tokenizer=tok.to_str()),
        "mlm": MaskedLMTask(model={"_target_": "transformer.models.mlm.MaskedLanguageModel", **ENCODER},
                            piece_vocab_size=tok.vocab_size, pad_id=tok.pad_id, data={"files": []},
                            tokenizer=tok.to_str()),
    }
    out = {}
    for kind, task in tasks.items():
        out[kind] = save(task, folder / f"{kind}.ckpt", kind)
        out[f"{kind}-bare"] = save(task, folder / f"{kind}-bare.ckpt", kind, tokenizers=False)
    out["nul-key"] = save(tasks["translation"], folder / "nul-key.ckpt", "translation",
                          extra_key="model.encoder.extra\x00key")
    return out


@pytest.fixture
def data(tmp_path) -> Path:
    """A parallel corpus (``train.de``/``train.en``) and a labelled file, in one folder."""
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "train.de").write_text("\n".join(GERMAN) + "\n", encoding="utf-8")
    (folder / "train.en").write_text("\n".join(ENGLISH) + "\n", encoding="utf-8")
    rows = [f"{s}\t{'pos' if 'dog' in s else 'neg'}" for s in ENGLISH]
    (folder / "labels.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return folder


def one_error(code: int, err: str) -> str:
    """The one ``error:`` line of a refused command (exit status 2, nothing else on stderr)."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, err[-3000:])
    return lines[0]


def files_in(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


# ----------------------------------------------------------------- a checkpoint without its tokenizer
INFERENCE = {
    "fill": (fill_cli, "mlm", ["output=out.txt"]),
    "decode": (decode_cli, "translation", ["output=out.txt"]),
    "tag": (tag_cli, "tagging", ["output=out.txt"]),
    "classify": (classify_cli, "classification", ["output=out.txt"]),
    "evaluate": (evaluate_cli, "mlm", []),
    "export": (export_cli, "translation", ["output_dir=exported"]),
}


@pytest.mark.parametrize("command", sorted(INFERENCE))
def test_a_checkpoint_without_its_tokenizer_is_named_by_every_command(command, ckpts, tmp_path, capsys, monkeypatch):
    cli, kind, args = INFERENCE[command]
    monkeypatch.chdir(tmp_path)
    bare = ckpts[f"{kind}-bare"]
    code, err = main_status(cli, [f"ckpt_path={bare}", *args], capsys, monkeypatch, stdin=b"the cat [MASK] .\n")
    line = one_error(code, err)
    assert f"{bare} carries no tokenizer (its 'tokenizers' entry is missing)" in line
    assert files_in(tmp_path) == []  # no output, no run folder


def test_an_ensemble_member_without_its_tokenizer_is_named(ckpts, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, err = main_status(decode_cli, [f"ckpt_path=[{ckpts['translation']},{ckpts['translation-bare']}]"],
                            capsys, monkeypatch, stdin=b"ein hund .\n")
    assert f"{ckpts['translation-bare']} carries no tokenizer" in one_error(code, err)


def test_serve_refuses_a_checkpoint_without_its_tokenizer_before_it_starts(ckpts, tmp_path, capsys, monkeypatch):
    pytest.importorskip("fastapi")
    monkeypatch.chdir(tmp_path)
    bare = ckpts["translation-bare"]
    code, err = main_status(serve_cli, [f"models=[{{id:de-en,ckpt_path:{bare}}}]", "port=1"], capsys, monkeypatch)
    assert f"{bare} carries no tokenizer" in one_error(code, err)


def test_inspect_needs_the_tokenizer_for_text_only(ckpts, tmp_path, capsys, monkeypatch):
    pytest.importorskip("matplotlib")
    from transformer.cli import inspect as inspect_cli

    monkeypatch.chdir(tmp_path)
    bare = ckpts["translation-bare"]
    args = [f"ckpt_path={bare}", "output_dir=out"]
    code, err = main_status(inspect_cli, [*args, "text=ein hund ."], capsys, monkeypatch)
    assert f"{bare} carries no tokenizer" in one_error(code, err) and files_in(tmp_path) == []
    code, err = main_status(inspect_cli, [*args, "what=positions"], capsys, monkeypatch)
    assert code == 0 and (tmp_path / "out" / "index.html").is_file(), err  # a position table reads no text


def test_fill_in_a_subprocess_names_the_checkpoint_without_a_traceback(ckpts, tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1",
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "transformer.cli.fill", f"ckpt_path={ckpts['mlm-bare']}"],
                          input="the cat [MASK] .\n", cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    line = one_error(proc.returncode, proc.stderr)
    assert "carries no tokenizer" in line and "Traceback" not in proc.stderr and proc.stdout == ""


# ----------------------------------------------------------------- init_from
def classify_args(data: Path, run: Path, *extra: str) -> list[str]:
    return ["experiment=classify", f"data.train={data / 'labels.tsv'}", f"data.dev={data / 'labels.tsv'}",
            "debug=fast", f"data.data_dir={data / 'cache'}", *QUIET, f"hydra.run.dir={run}", *extra]


def test_init_from_a_checkpoint_without_its_tokenizer_is_refused_before_the_run_folder(ckpts, data, tmp_path, capsys,
                                                                                      monkeypatch):
    run = tmp_path / "run"
    code, err = main_status(train_cli, classify_args(data, run, f"init_from={ckpts['mlm-bare']}"), capsys, monkeypatch)
    line = one_error(code, err)
    assert line.startswith(f"error: init_from: {ckpts['mlm-bare']} carries no tokenizer "
                           f"(its 'tokenizers' entry is missing)")
    assert not run.exists()


def test_init_from_beside_ckpt_path_is_refused_as_the_clash_it_is(ckpts, data, tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    args = classify_args(data, run, f"init_from={ckpts['mlm']}", f"ckpt_path={ckpts['classification']}")
    line = one_error(*main_status(train_cli, args, capsys, monkeypatch))
    assert line.startswith("error: init_from and ckpt_path both given: ")
    assert f"init_from={ckpts['mlm']}" in line and f"ckpt_path={ckpts['classification']}" in line
    assert "model." not in line  # no key the user never typed
    assert not run.exists()


def test_a_translation_model_started_from_a_masked_lm_warns_that_its_decoder_is_fresh(ckpts, data, tmp_path, capsys,
                                                                                     monkeypatch):
    run = tmp_path / "run"
    args = ["experiment=parallel", "model=tiny", "data.src_lang=de", "data.tgt_lang=en", f"data.train={data / 'train'}",
            f"data.valid={data / 'train'}", "data.test=null", "debug=fast", f"data.data_dir={data / 'cache'}",
            "test_splits=[]", f"init_from={ckpts['mlm']}", *QUIET, f"hydra.run.dir={run}"]
    code, err = main_status(train_cli, args, capsys, monkeypatch)
    assert code == 0, err[-3000:]
    log = (run / "train.log").read_text(encoding="utf-8")
    warnings = [line for line in log.splitlines() if "[WARNING]" in line and "init_from:" in line]
    assert len(warnings) == 1, log
    n = sum(k.startswith("model.encoder.") for k in torch.load(ckpts["mlm"], weights_only=True)["state_dict"])
    assert re.search(rf"init_from: {n} encoder tensors copied from {re.escape(str(ckpts['mlm']))}; the decoder and "
                     rf"the output layer start fresh", warnings[0]), warnings[0]


# ----------------------------------------------------------------- a run without its training data
@pytest.mark.parametrize("args, named", [
    (["experiment=pretrain"], "error: data.files: required"),
    (["experiment=classify"], "error: data.train: required"),
    (["experiment=ud_upos"], "error: data.train: required"),
    (["experiment=parallel", "data.src_lang=en", "data.tgt_lang=zh"], "error: data.train: required"),
    (["data=parallel"], "error: data.train: required"),
])
def test_a_run_without_its_training_data_is_refused_before_the_run_folder(args, named, tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    monkeypatch.chdir(tmp_path)
    code, err = main_status(train_cli, [*args, "debug=fast", f"hydra.run.dir={run}"], capsys, monkeypatch)
    assert one_error(code, err).startswith(named)
    assert files_in(tmp_path) == []  # no .hydra/, no train.log


# ----------------------------------------------------------------- control characters
def test_control_characters_are_escaped_in_every_error_line():
    line = error_line(ValueError("a\x00b \x1b[31mred\nnext\ttab\r\x7f\x85\u2028 é"))
    assert line == "error: a\\x00b \\x1b[31mred\\nnext\\ttab\\r\\x7f\\x85\\u2028 é"
    assert line.isprintable()


@pytest.mark.parametrize("quoted", [True, False], ids=["read", "refused-by-the-override-grammar"])
def test_a_file_name_with_control_characters_is_shown_escaped(quoted, ckpts, tmp_path):
    odd = tmp_path / "bad\x01name\x1b[31m\nred.ckpt"
    odd.write_bytes(ckpts["translation-bare"].read_bytes())
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1",
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    arg = f"ckpt_path='{odd}'" if quoted else f"ckpt_path={odd}"
    proc = subprocess.run([sys.executable, "-m", "transformer.cli.decode", arg], input=b"ein hund .\n",
                          cwd=tmp_path, env=env, capture_output=True, timeout=300)
    err = proc.stderr.decode("utf-8")
    line = one_error(proc.returncode, err)
    shown = f"{tmp_path}/bad\\x01name\\x1b[31m\\nred.ckpt"
    assert (f"error: {shown} carries no tokenizer" if quoted else f"ckpt_path={shown}") in line
    assert not any(c in err.rstrip("\n") for c in "\x01\x1b\n")
    assert files_in(tmp_path) == [odd.name]


def test_a_checkpoint_key_with_a_nul_is_shown_escaped(ckpts, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, err = main_status(decode_cli, [f"ckpt_path={ckpts['nul-key']}"], capsys, monkeypatch, stdin=b"ein hund .\n")
    line = one_error(code, err)
    assert str(ckpts["nul-key"]) in line and "model.encoder.extra\\x00key" in line and "\x00" not in err
