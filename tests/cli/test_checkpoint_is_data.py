"""A checkpoint is data: a crafted ``hyper_parameters`` that names a function to call (a file
write, ``open``, ``os.symlink``, ``torch.save``, a ``_target_`` nested anywhere) is refused by
every command with one line naming the key, and nothing is written."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra_helpers import compose_cfg

from transformer.cli import average, decode, distill, evaluate, export, inspect, tag, train
from transformer.data.core.tokenizer import SubwordTokenizer
from transformer.tasks.build import MODELS, build_model, check_model_config
from transformer.tasks.build import HyperparameterError
from transformer.tasks.checkpoint import TASK_KEY, CheckpointError, load_task, read_checkpoint
from transformer.tasks.translation import TranslationTask

REPO = Path(__file__).resolve().parents[2]
TINY = {"_target_": "transformer.models.EncoderDecoder", "d_model": 16, "n_heads": 2, "n_encoder_layers": 1,
        "n_decoder_layers": 1, "d_ff": 32, "dropout": 0.0, "max_len": 32}


def _write(marker: Path) -> dict:
    return {"_target_": "pathlib.Path.write_text", "self": str(marker), "data": "ran"}


# name -> (edit of the checkpoint dict, the key the error names)
CRAFTED = {
    "pathlib write in d_ff": (lambda c, m: c["hyper_parameters"]["model"].update(d_ff=_write(m)), "model.d_ff"),
    "open as the model": (lambda c, m: c["hyper_parameters"]["model"].update(
        _target_="builtins.open", file=str(m), mode="w"), "model._target_"),
    "os.symlink as the positional": (lambda c, m: c["hyper_parameters"]["model"].update(
        positional={"_target_": "os.symlink", "_partial_": True, "src": "/etc/hostname", "dst": str(m)}),
        "model.positional._target_"),
    "torch.save in val_decode": (lambda c, m: c["hyper_parameters"].update(
        val_decode={"strategy": "greedy", "hook": {"_target_": "torch.save", "obj": 1, "f": str(m)}}),
        "val_decode.hook._target_"),
    "nested deep in data": (lambda c, m: c["hyper_parameters"].update(
        data={"name": "multi30k", "files": [{"x": _write(m)}]}), "data.files[0].x._target_"),
    "recursive flag": (lambda c, m: c["hyper_parameters"]["model"].update(_recursive_=True), "model._recursive_"),
    "a list where a string belongs": (lambda c, m: c["hyper_parameters"]["model"].update(
        activation=["relu"]), "model.activation"),
    "vocab_size=-1": (lambda c, m: c["hyper_parameters"].update(vocab_size=-1), "vocab_size"),
}


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("good")
    tok = SubwordTokenizer.train(["ein hund läuft .", "a dog runs ."] * 5, vocab_size=300)
    task = TranslationTask(model=TINY, vocab_size=tok.vocab_size, pad_id=tok.pad_id, bos_id=tok.bos_id,
                           eos_id=tok.eos_id, src_lang="de", tgt_lang="en",
                           tokenizers={"src": tok.to_str(), "tgt": tok.to_str()})
    ckpt = {"state_dict": task.state_dict(), "hyper_parameters": dict(task.hparams), TASK_KEY: "translation"}
    task.on_save_checkpoint(ckpt)
    torch.save(ckpt, folder / "good.ckpt")
    return folder / "good.ckpt"


def craft(good: Path, folder: Path, name: str) -> tuple[Path, Path]:
    """``(checkpoint, marker)``: the good checkpoint with the ``name`` edit, and the file its
    payload would create."""
    ckpt = torch.load(good, weights_only=True)
    ckpt = {**ckpt, "hyper_parameters": copy.deepcopy(ckpt["hyper_parameters"])}
    marker = folder / "payload-ran"
    CRAFTED[name][0](ckpt, marker)
    path = folder / "crafted.ckpt"
    torch.save(ckpt, path)
    return path, marker


def runs(ckpt: Path, out: Path) -> dict:
    """Every command pointed at ``ckpt``, writing (if it wrote) under ``out``."""
    return {
        "decode": (decode, "decode", [f"ckpt_path={ckpt}", f"output={out / 'hyp.txt'}", "device=cpu"]),
        "evaluate": (evaluate, "eval", [f"ckpt_path={ckpt}", f"output_dir={out}", "device=cpu"]),
        "inspect": (inspect, "inspect", [f"ckpt_path={ckpt}", "text=Ein Hund", f"output_dir={out}"]),
        "export": (export, "export", [f"ckpt_path={ckpt}", f"output_dir={out}"]),
        "distill": (distill, "distill", [f"ckpt_path={ckpt}", f"output_dir={out}", "device=cpu"]),
        "tag": (tag, "tag", [f"ckpt_path={ckpt}", f"output={out / 'tags.txt'}", "device=cpu"]),
        "average": (average, "average", [f"inputs=[{ckpt}]", f"output={out / 'avg.ckpt'}"]),
        "train": (train, "train", ["model=tiny", f"ckpt_path={ckpt}", f"output_dir={out}"]),
    }


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_crafted_checkpoints_are_refused_by_every_command(good, tmp_path, name):
    ckpt, marker = craft(good, tmp_path, name)
    key = CRAFTED[name][1]
    for command, (module, config, overrides) in runs(ckpt, tmp_path / "out").items():
        with pytest.raises(CheckpointError) as err:
            module.run(compose_cfg(config, overrides))
        message = str(err.value)
        assert f"hyper_parameters.{key}" in message and "crafted.ckpt" in message, (command, message)
        assert "\n" not in message
        assert not marker.exists() and not os.path.lexists(marker), command
        assert not (tmp_path / "out").exists(), f"{command} wrote before refusing"


def test_the_project_s_checkpoints_still_load(good):
    assert load_task(good).hparams.src_lang == "de"
    assert read_checkpoint(good)[TASK_KEY] == "translation"


def test_a_crafted_checkpoint_is_one_error_line_from_the_command_line(good, tmp_path):
    ckpt, marker = craft(good, tmp_path, "pathlib write in d_ff")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "transformer.cli.evaluate", f"ckpt_path={ckpt}", "device=cpu"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "hyper_parameters.model.d_ff" in lines[0]
    assert not marker.exists()


# ------------------------------------------------------------------ the registry itself
def test_model_targets_come_from_the_registry_only():
    assert build_model(TINY, vocab_size=20, pad_id=0).__class__ is MODELS["EncoderDecoder"]
    for target in ("EncoderDecoder", "transformer.models.transformer.EncoderDecoder"):
        assert check_model_config({**TINY, "_target_": target}, complete=False)[0] is MODELS["EncoderDecoder"]
    for target in ("os.system", "evil.EncoderDecoder", "transformer.models.EnsembleModel", 3, None):
        with pytest.raises(HyperparameterError, match=r"model\._target_=.*not one of the project's classes"):
            build_model({**TINY, "_target_": target}, vocab_size=20, pad_id=0)


@pytest.mark.parametrize("edit, message", [
    ({"d_model": -5}, r"model\.d_model=-5: expected a value from 1"),
    ({"n_heads": 3}, r"model\.n_heads=3: must divide model\.d_model=16"),
    ({"n_heads": 0}, r"model\.n_heads=0: expected a value from 1"),
    ({"dropout": 1.5}, r"model\.dropout=1\.5: expected 0 <= dropout < 1"),
    ({"dropout": float("nan")}, r"model\.dropout=nan: expected float"),
    ({"nonexistent": 1}, r"model\.nonexistent: unknown key"),
    ({"d_ff": "64"}, r"model\.d_ff='64': expected int"),
    ({"norm_first": 1}, r"model\.norm_first=1: expected bool"),
    ({"d_model": 2**15, "d_ff": 2**17, "n_encoder_layers": 64}, r"too large"),
    ({"pad_id": 20}, r"model\.pad_id=20: not an id of a 20-piece vocabulary"),
    ({"positional": {"_target_": "transformer.modules.positional.RelativePositionBias"}}, r"_partial_: true"),
    ({"positional": {"_target_": "RelativePositionBias", "_partial_": True, "num_buckets": 0}},
     r"model\.positional\.num_buckets=0"),
])
def test_hyperparameters_are_checked_before_the_class_is_called(edit, message):
    with pytest.raises(HyperparameterError, match=message):
        build_model({**TINY, "vocab_size": 20, "pad_id": 0, **edit})


CLASSIFIER = {"_target_": "SequenceClassifier", "d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32,
              "vocab_size": 20, "pad_id": 0, "n_classes": 2}


def test_a_classifier_s_pooling_comes_from_the_registry_only():
    for name in ("ClsPooling", "MeanPooling", "AttentionPooling"):
        model = build_model({**CLASSIFIER, "pooling": {"_target_": f"transformer.models.pooling.{name}",
                                                        "_partial_": True}})
        assert type(model.pooling).__name__ == name
    for pooling, message in [({"_target_": "pathlib.Path.write_text", "_partial_": True}, "not one of the project's"),
                             ({"_target_": "MeanPooling"}, r"_partial_: true"),
                             ({"_target_": "MeanPooling", "_partial_": True, "d_model": 8}, "set by the model")]:
        with pytest.raises(HyperparameterError, match=rf"model\.pooling.*{message}"):
            build_model({**CLASSIFIER, "pooling": pooling})
