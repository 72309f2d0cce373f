"""What transformer 0.1.0 wrote still works: its checkpoints of every kind load and give the
same answers through the commands a user runs, and every command's composed config is the same,
key by key, except where a key is listed below as deliberately changed.

``tests/fixtures/v0_1/make.py`` runs that version's own code, taken from the project's history
(``git archive``), once per test session: it trains one tiny checkpoint per task kind and records
the outputs of decode, tag, classify and fill on each. Every command's composed config at 0.1.0
is kept as text (``tests/fixtures/v0_1/composed.json``)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from filelock import FileLock
from hydra_helpers import main_status
from omegaconf import OmegaConf

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "v0_1"
CONF = Path(__file__).resolve().parents[2] / "conf"
COMPOSED = json.loads((FIXTURES / "composed.json").read_text(encoding="utf-8"))

# Composed keys whose value changed on purpose: dotted path -> the value it has now. A key that
# is gone maps to MISSING; a new key must be listed too.
MISSING = "<missing>"
CHANGED: dict[str, object] = {}
# Each data module is in its kind's package (transformer/data/<kind>/datamodule.py).
DATA_MODULES = {
    "transformer.data.translation_datamodule.TranslationDataModule":
        "transformer.data.parallel.datamodule.TranslationDataModule",
    "transformer.data.tagging_datamodule.TaggingDataModule": "transformer.data.tagged.datamodule.TaggingDataModule",
    "transformer.data.classification_datamodule.ClassificationDataModule":
        "transformer.data.labelled.datamodule.ClassificationDataModule",
    "transformer.data.text_datamodule.TextDataModule": "transformer.data.text.datamodule.TextDataModule",
}
CHANGED.update({f"{name}: data._target_": DATA_MODULES[config["data"]["_target_"]] for name, config in COMPOSED.items()
                if config.get("data", {}).get("_target_") in DATA_MODULES})
# Labels a file writes as ids may be named (data.label_names): none by default; SST-2's 0/1 named.
CHANGED.update({"train experiment=classify: data.label_names": None,
                **{f"train experiment={exp}: data.label_names": ["negative", "positive"] for exp in ("sst2",)}})
# The optimizer is a node of its own (task.optimizer), holding the settings that were task keys,
# with the class each task built: Adam for translation, AdamW for the encoder tasks.
# The server's operating options, each off or at its plain default.
CHANGED.update({"serve: api_key_env": None, "serve: cors_origins": [], "serve: log_format": "text",
                "serve: log_level": "info", "serve: warm_up": True})
# Several directions in one model (data.pairs, conf/data/*.yaml); the language of a multilingual
# checkpoint at decode and evaluate time; evaluate's split null = test_2016_flickr, or every test
# split of a multilingual checkpoint.
CHANGED.update({"data.pairs": None, "data.temperature": 1.0, "decode: tgt_lang": None, "decode: src_lang": None,
                "eval: tgt_lang": None, "eval: src_lang": None, "eval: split": None})
# A multilingual checkpoint's pivot language (decoding settings: decode.pivot), null by default.
CHANGED.update({key: None for key in ("decode.pivot", "task.val_decode.pivot", "test_decode.pivot")})
# A direction a multilingual checkpoint was not trained on (decode.zero_shot), refused by default.
CHANGED.update({key: False for key in ("decode.zero_shot", "task.val_decode.zero_shot", "test_decode.zero_shot")})
# Where a multilingual model reads its target tag (data.tag_side): in the source by default; the
# language inspect translates a multilingual model's sentence into.
CHANGED.update({"data.tag_side": "source", "inspect: tgt_lang": None})
# The search's precision (decoding settings: decode.dtype), fp32 as before.
CHANGED.update({key: "fp32" for key in ("decode.dtype", "task.val_decode.dtype", "test_decode.dtype")})
# The warm-up as a fraction of the run (task.warmup), off by default: warmup_steps as before.
CHANGED.update({"task.warmup": None})
# Lightning callbacks and the CSV logger are a training concept: transformer/tasks/callbacks.py.
CHANGED.update({f"{group}.{name}._target_": f"transformer.tasks.callbacks.{target}" for group, name, target in (
    ("callbacks", "early_stopping", "MeasuredEarlyStopping"), ("callbacks", "progress_bar", "progress_bar"),
    ("logger", "csv", "ResumableCSVLogger"))})
# An exponential moving average of the weights (callbacks.ema), off unless a recipe sets it.
CHANGED.update({"callbacks.ema": None})
# The encoder attention's score for node classification (model.attention_score): dot, as before;
# GCN's degree normalisation as a bias along the edges (model.degree_bias), off.
CHANGED.update({"model.attention_score": "dot", "model.degree_bias": False})
# What scores a node's classes (model.output): a linear layer, as before, or GAT's attention output
# layer with model.output_heads heads; experiment=graph_nodes is GAT's network and takes it.
CHANGED.update({"model.output": "linear", "model.output_heads": 1})
# Dropout inside a node classifier's encoder (model.encoder_dropout): null, model.dropout as before.
CHANGED.update({"model.encoder_dropout": None})
# A node classifier's attention without projections of its own (model.attention_projections=false,
# GAT's layer exactly): on by default, as before; experiment=graph_nodes is GAT's network and turns it off.
CHANGED.update({"model.attention_projections": True})
# Mixing training images in pairs (task.mixup, task.cutmix), off.
CHANGED.update({"task.mixup": 0.0, "task.cutmix": 0.0})
# A teacher classifying each training batch of images (task.distill_online): off, each row once as before.
CHANGED.update({"task.distill_online": False})
# Speaker-adversarial training of a classifier of recordings (task.speaker_adversarial): off.
CHANGED.update({"task.speaker_adversarial": 0.0})
# Joint CTC-attention training of a translation model (task.ctc_weight): 0, off, as before.
# Joint CTC/attention decoding (decode.ctc_weight): 0, the decoder alone, as before.
CHANGED.update({"task.ctc_weight": 0.0,
                **{key: 0.0 for key in ("decode.ctc_weight", "task.val_decode.ctc_weight", "test_decode.ctc_weight")}})
# Which checkpoint a run's test scores (test_checkpoint): the best, as before. A loss guiding the
# decoder's cross-attention by the CTC head's alignment (task.attention_guide): 0, off.
CHANGED.update({"test_checkpoint": "best", "task.attention_guide": 0.0})
# Experiments added since 0.1.0: they have no composed config there to compare with.
ADDED = {# Speech input: labelled recordings, FSDD digits, connected digit strings (AT and CTC).
         "train experiment=speech_classify", "train experiment=fsdd_digits", "train experiment=fsdd_strings",
         "train experiment=fsdd_strings_ctc",
         # Image input: labelled image folders, the UCI digits with a ViT (model=cnn: with a CNN).
         "train experiment=image_classify", "train experiment=digits",
         # Graph input: node classification on a user's graph or a Planetoid preset (data.preset), attention
         # along the edges or full attention with Laplacian positions.
         "train experiment=graph_nodes", "train experiment=graph_nodes_full"}
# Experiments folded into another: gum_upos_wsj's multi-task settings are gum_upos_adv's own now.
# The GPU halves of CPU recipes are the commands the CPU files' comments give (sst2_gpu: experiment=sst2's;
# multi30k_nat and multi30k_nat_ctc: experiment=multi30k_nat_cpu's and multi30k_nat_ctc_cpu's).
REMOVED = {"train experiment=gum_upos_wsj", "train experiment=sst2_gpu", "train experiment=multi30k_nat",
           "train experiment=multi30k_nat_ctc"}
# The CPU NAT recipes train every epoch with a patience longer than their epochs (which the GPU
# commands share), where they had no early stopping.
CHANGED.update({f"train experiment={e}: callbacks.early_stopping{key}": value
                for e in ("multi30k_nat_cpu", "multi30k_nat_ctc_cpu") for key, value in (
                    ("", MISSING), ("._target_", "transformer.tasks.callbacks.MeasuredEarlyStopping"),
                    (".monitor", "${monitor}"), (".mode", "${monitor_mode}"), (".patience", 20))})
MOVED = {f"task.{key}": f"task.optimizer.{key}" for key in ("betas", "eps", "weight_decay")}
SEQ2SEQ_TASKS = ("TranslationTask", "NATTranslationTask", "CTCTranslationTask")
for name, config in COMPOSED.items():
    task = config.get("task") or {}
    if "betas" in task:
        CHANGED[f"{name}: task.optimizer._partial_"] = True
        seq2seq = str(task.get("_target_", "")).endswith(SEQ2SEQ_TASKS)
        CHANGED[f"{name}: task.optimizer._target_"] = "torch.optim.Adam" if seq2seq else "torch.optim.AdamW"


def _load_make():
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_v0_1", FIXTURES / "make.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MAKE = _load_make()


REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def v0_1(tmp_path_factory, mirror_root) -> Path:
    """A folder with 0.1.0's checkpoints and answers, made once per test session (the worker
    processes of one session share it) by 0.1.0's own code from the project's history."""
    shared = tmp_path_factory.getbasetemp().parent / "v0_1"
    with FileLock(str(shared) + ".lock"):
        if (shared / "expected.json").is_file():
            return shared
        code = shared.parent / "v0_1_code"
        archive = subprocess.run(["git", "-C", str(REPO), "archive", MAKE.COMMIT, "transformer", "conf"],
                                 capture_output=True)
        if archive.returncode != 0:
            pytest.skip(f"transformer 0.1.0 ({MAKE.COMMIT}) is not in this clone's history: "
                        f"{archive.stderr.decode(errors='replace').strip()[:200]}")
        code.mkdir(parents=True, exist_ok=True)
        archive_path = code / "v0_1.tar"
        archive_path.write_bytes(archive.stdout)
        with tarfile.open(archive_path) as tar:
            tar.extractall(code, filter="data")
        env = {**os.environ, "PYTHONPATH": str(code), "TRANSFORMER_DATA_MIRROR": str(mirror_root)}
        subprocess.run([sys.executable, str(FIXTURES / "make.py"), str(code), str(shared)], check=True, env=env,
                       cwd=code, timeout=900)
    return shared


def same_output(got: str, want: str, tol: float = 1.5e-4) -> bool:
    """Equal text, except that printed probabilities may differ in their last digit."""
    got_lines, want_lines = got.splitlines(), want.splitlines()
    if len(got_lines) != len(want_lines):
        return False
    for g, w in zip(got_lines, want_lines):
        gf, wf = g.split("\t"), w.split("\t")
        if len(gf) != len(wf):
            return False
        for a, b in zip(gf, wf):
            if a == b:
                continue
            try:
                if "." not in b or not math.isclose(float(a), float(b), abs_tol=tol):
                    return False
            except ValueError:
                return False
    return True


@pytest.mark.parametrize("query", sorted(MAKE.QUERIES))
def test_a_0_1_checkpoint_gives_the_same_answers(query, v0_1, tmp_path, capsys, monkeypatch):
    import importlib

    command, kind, args = MAKE.QUERIES[query]
    lines = MAKE.INPUTS.get(kind, MAKE.INPUTS["translation"])
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    module = importlib.import_module(f"transformer.cli.{command}")
    status, err = main_status(module, [f"ckpt_path={v0_1 / (kind + '.ckpt')}", f"input={tmp_path / 'in.txt'}",
                                       f"output={tmp_path / 'out.txt'}", "device=cpu", *args], capsys, monkeypatch)
    assert status == 0, err
    got = (tmp_path / "out.txt").read_text(encoding="utf-8")
    expected = json.loads((v0_1 / "expected.json").read_text(encoding="utf-8"))
    assert same_output(got, expected[query]), f"{query}:\n{got!r}\nwanted\n{expected[query]!r}"


@pytest.mark.parametrize("kind", ["translation", "nat"])
def test_a_0_1_checkpoint_with_flat_optimizer_settings_reads_as_today(kind, v0_1):
    from transformer.tasks.checkpoint import load_task

    task = load_task(v0_1 / f"{kind}.ckpt")
    assert type(task).task_name == kind and task.hparams.optimizer["_target_"] == "torch.optim.Adam"
    assert "betas" not in task.hparams and ("compile" in task.hparams) == (kind == "translation")


def flatten(node, prefix: str = "") -> dict[str, object]:
    if isinstance(node, dict) and node:
        out = {}
        for key, value in node.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: node}


def composed_now() -> dict[str, dict]:
    primaries = sorted(p.stem for p in CONF.glob("*.yaml"))
    experiments = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
    out = {}
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        for name in primaries:
            out[name] = OmegaConf.to_container(compose(config_name=name), resolve=False)
        for exp in experiments:
            out[f"train experiment={exp}"] = OmegaConf.to_container(
                compose(config_name="train", overrides=[f"experiment={exp}"]), resolve=False)
    GlobalHydra.instance().clear()
    return out


def test_every_composed_config_is_the_same_key_by_key():
    now = composed_now()
    assert set(now) == (set(COMPOSED) - REMOVED) | ADDED, "commands or experiments were added or removed: record them here"
    differences = []
    for name in sorted(set(COMPOSED) - REMOVED):
        before, after = flatten(COMPOSED[name]), flatten(now[name])
        for key, target in MOVED.items():
            if key in before:
                before[target] = before.pop(key)
        for key in sorted(set(before) | set(after)):
            old, new = before.get(key, MISSING), after.get(key, MISSING)
            if old == new:
                continue
            allowed = CHANGED.get(key, CHANGED.get(f"{name}: {key}", object()))
            if new != allowed:
                differences.append(f"{name}: {key}: {old!r} -> {new!r}")
    assert not differences, "\n".join(differences)
