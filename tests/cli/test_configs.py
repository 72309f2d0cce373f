"""Every config in conf/ composes, and what it describes instantiates: every experiment (the
Multi30k ones under every language pair), every model, trainer, decode and debug preset; an
experiment file shows its whole recipe."""

from __future__ import annotations

import platform
from pathlib import Path

import lightning as L
import pytest
import torch
from hydra_helpers import compose_cfg, documented_commands
from hydra.utils import get_class, instantiate
from lightning.pytorch.accelerators import CPUAccelerator
from omegaconf import OmegaConf, open_dict

from transformer.cli.common import FOLDED, check_overrides
from transformer.cli.train import check_config, emulated_bf16, task_settings
from transformer.data.core.sources import multi30k_relpath
from transformer.tasks.build import build_model, model_fields
from transformer.tasks.build import task_parameters
from transformer.tasks.callbacks import MeasuredEarlyStopping

CONF = Path(__file__).resolve().parents[2] / "conf"
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
# Multi30k experiments take any language pair (data.src_lang, data.tgt_lang); multi30k is the GPU
# recipe, the others CPU ones.
MULTI30K = [e for e in EXPERIMENTS if e.startswith("multi30k")]
OTHERS = [e for e in EXPERIMENTS if e not in MULTI30K]
PAIRS = ["cs_en", "de_en", "en_cs", "en_de", "en_fr", "fr_en"]
RECIPES = [(e, p) for e in MULTI30K for p in PAIRS] + [(e, None) for e in OTHERS]
# The recipes on a GPU; every other one is pinned to the CPU (trainer.accelerator=cpu, accel=cpu).
GPU_RECIPES = {e for e in MULTI30K if not e.endswith("_cpu")}
# The commands a recipe file's comment gives beyond its own name: on the project's data (a GPU size,
# the multilingual model) each composes and instantiates as a recipe file does; on a user's files
# (which these tests do not have) each composes.
USER_FILES = ("data.train=", "data.nodes=", "data.files=", "data.hub=")
COMMANDS = {where: args for where, args in documented_commands() if len(args) > 1}
ON_USER_FILES = {where for where, args in COMMANDS.items() if any(a.startswith(USER_FILES) for a in args)}
# conf/model/ holds sizes, the task picking the model kind over them, and the image models of
# experiment=digits (a ViT, and the CNN it is compared with), which name their kind themselves.
TASKS_OF_SIZE = {"tiny": ["translation", "nat", "nat_ctc"], "small": ["translation", "nat", "nat_ctc"],
                 "medium": ["translation", "nat", "nat_ctc"], "encoder": ["tagging", "classification"]}
IMAGE_MODELS = {"vit": "SequenceClassifier", "cnn": "ConvClassifier"}
assert set(TASKS_OF_SIZE) | set(IMAGE_MODELS) == {p.stem for p in (CONF / "model").glob("*.yaml")}
MODELS = [(size, task) for size in sorted(TASKS_OF_SIZE) for task in TASKS_OF_SIZE[size]]
# Every decoding strategy of conf/decode/default.yaml.
DECODES = ["greedy", "beam", "nat_one_pass", "nat_length_beam", "mask_predict", "ctc_one_pass", "ctc_beam"]
# What only the data knows, offered to any model or task constructor that asks for it.
DATA_FACTS = {"vocab_size": 120, "piece_vocab_size": 120, "pad_id": 0, "n_tags": 7, "tags": list("ABCDEFG"),
              "mask_id": 4, "blank_id": 4, "bos_id": 1, "eos_id": 2, "src_lang": "de", "tgt_lang": "en",
              "n_classes": 2, "labels": ["neg", "pos"], "n_features": 12, "classes": ["x", "y", "z"]}


def facts_for(cls) -> dict:
    """The data facts ``cls``'s constructor takes (with what it passes on to its base)."""
    accepted = task_parameters(cls)
    return {k: v for k, v in DATA_FACTS.items() if k in accepted}


def model_from(model_cfg):
    """The model a (resolved) model config describes, with a 120-piece vocabulary."""
    cfg = OmegaConf.to_container(model_cfg, resolve=True)
    fields = model_fields(get_class(cfg["_target_"]))
    return build_model(cfg, **{k: v for k, v in DATA_FACTS.items() if k in fields})


def task_from(cfg):
    """The task an experiment describes, as ``transformer.cli.train.build_task`` makes it,
    with data facts in place of a data module."""
    cls, task_cfg = task_settings(cfg)
    data = {k: cfg.data[k] for k in ("src_lang", "tgt_lang", "tagset") if k in cfg.data}
    facts = {**facts_for(cls), **data, "data": {"name": cfg.data.get("dataset", "multi30k"), **data}}
    accepted = task_parameters(cls)
    return cls(model=OmegaConf.to_container(cfg.model, resolve=True), **task_cfg,
               **{k: v for k, v in facts.items() if k in accepted})


def assert_architecture(model, model_cfg) -> None:
    """The built model has the class, width and depth its config names."""
    assert type(model) is get_class(model_cfg._target_)
    if "n_blocks" in model_cfg:  # the image CNN: convolution blocks, no encoder
        assert sum(type(m).__name__ == "MaxPool2d" for m in model.features) == model_cfg.n_blocks
        return
    if model_cfg.get("frontend"):  # an input kind other than text: a front end, no token table
        assert model.encoder.embedding is None and type(model.encoder.frontend).__name__ == \
            model_cfg.frontend._target_.rpartition(".")[2]
    else:
        assert model.encoder.embedding.weight.shape == (120, model_cfg.d_model)
    assert len(model.encoder.layers) == model_cfg.get("n_encoder_layers", model_cfg.get("n_layers"))
    if "n_decoder_layers" in model_cfg:
        assert len(model.decoder.layers) == model_cfg.n_decoder_layers


def pair_overrides(pair: str | None) -> list[str]:
    """The command line for a Multi30k language pair: Czech has no 2017 test sets."""
    if not pair:
        return []
    src, tgt = pair.split("_")
    return [f"data.src_lang={src}", f"data.tgt_lang={tgt}"] + ["test_splits=[val,test_2016_flickr]"] * ("cs" in pair)


@pytest.mark.parametrize(("experiment", "pair"), RECIPES)
def test_experiment_composes_and_instantiates(experiment, pair, tmp_path):
    check_recipe([f"experiment={experiment}", *pair_overrides(pair)], experiment in GPU_RECIPES, tmp_path,
                 experiment if pair else None, pair)


@pytest.mark.parametrize("where", sorted(set(COMMANDS) - ON_USER_FILES))
def test_a_command_a_recipe_file_gives_composes_and_instantiates(where, tmp_path):
    args = COMMANDS[where]
    experiment = args[0].removeprefix("experiment=")
    on_gpu = "trainer.accelerator=gpu" in args or (experiment in GPU_RECIPES and "trainer.accelerator=cpu" not in args)
    check_recipe(args, on_gpu, tmp_path)


@pytest.mark.parametrize("where", sorted(ON_USER_FILES))
def test_a_command_on_a_users_files_composes(where, tmp_path):
    cfg = compose_cfg("train", [*COMMANDS[where], f"output_dir={tmp_path}"])
    OmegaConf.resolve(cfg)
    assert cfg.data.get("train") or cfg.data.get("nodes") or cfg.data.get("files") or cfg.data.get("hub")


def check_recipe(args: list[str], on_gpu: bool, tmp_path, experiment: str | None = None, pair: str | None = None):
    """``train`` composed with ``args``: it resolves, type-checks, and its data module, task, trainer and
    callbacks instantiate; GPU and CPU recipes ask for their hardware. With a Multi30k ``experiment``'s
    ``pair`` the run folder and the test splits follow the pair."""
    cfg = compose_cfg("train", [*args, f"output_dir={tmp_path}"])
    OmegaConf.resolve(cfg)  # every interpolation resolves
    assert cfg.monitor and cfg.monitor_mode in ("min", "max")
    check_config(cfg)  # every value has the type its target's signature asks for
    dm = instantiate(cfg.data)  # constructor only: no files are read
    assert type(dm).__name__.endswith("DataModule")
    task = task_from(cfg)
    assert_architecture(task.model, cfg.model)
    if pair:
        src, tgt = pair.split("_")
        assert (dm.src_lang, dm.tgt_lang) == (src, tgt)
        # The run folder: multi30k_<src>_<tgt>, the experiment's kind (_nat...), then _cpu.
        kind = experiment.removeprefix("multi30k").removesuffix("_cpu")
        assert cfg.name == f"multi30k_{src}_{tgt}{kind}" + ("_cpu" if experiment.endswith("_cpu") else "")
        for split in cfg.test_splits:  # every split the recipe tests on exists for the pair
            multi30k_relpath(split, src), multi30k_relpath(split, tgt)
    expected_hardware = ("gpu", "bf16-mixed") if on_gpu else ("cpu", "32-true")
    assert (cfg.trainer.accelerator, cfg.trainer.precision) == expected_hardware
    # the CPU fast paths are opt-in: every CPU recipe asks for them, no GPU recipe does
    assert cfg.accel == ("none" if on_gpu else "cpu")
    if "loss" in cfg.task:  # autoregressive translation: real positions only where the CPU paths run
        assert cfg.task.loss == ("all_positions" if on_gpu else "real_positions")
    callbacks = [instantiate(c) for c in cfg.callbacks.values() if c]
    loggers = [instantiate(c) for c in cfg.logger.values() if c]
    with open_dict(cfg.trainer):
        # the GPU presets must still compose and be complete on a CPU-only machine
        cfg.trainer.accelerator = "cpu"
        cfg.trainer.precision = "32-true"
    trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=loggers)
    assert isinstance(trainer.accelerator, CPUAccelerator)
    assert trainer.max_epochs == cfg.trainer.max_epochs and trainer.gradient_clip_val == cfg.trainer.gradient_clip_val
    stopping = [c for c in trainer.callbacks if isinstance(c, MeasuredEarlyStopping)]  # JointEarlyStopping is one
    if cfg.callbacks.early_stopping:
        assert [(c.monitor, c.patience) for c in stopping] == [(cfg.monitor, cfg.callbacks.early_stopping.patience)]
    else:
        assert stopping == []


@pytest.mark.parametrize("experiment", sorted(GPU_RECIPES & set(MULTI30K)))
def test_multi30k_defaults_are_de_en_and_the_cpu_twin_is_smaller(experiment, tmp_path):
    plain = compose_cfg("train", [f"experiment={experiment}", f"output_dir={tmp_path}"])
    explicit = compose_cfg("train", [f"experiment={experiment}", "data.src_lang=de", "data.tgt_lang=en",
                                     f"output_dir={tmp_path}"])
    assert plain == explicit
    cpu = compose_cfg("train", [f"experiment={experiment}_cpu", f"output_dir={tmp_path}"])
    # the CPU recipe trains a smaller model of the same kind on smaller batches for fewer epochs
    assert cpu.model._target_ == plain.model._target_ and cpu.task._target_ == plain.task._target_
    assert cpu.model.d_model < plain.model.d_model and cpu.data.max_tokens < plain.data.max_tokens
    assert cpu.trainer.max_epochs < plain.trainer.max_epochs


def test_command_line_keys_win_over_the_experiment(tmp_path):
    cfg = compose_cfg("train", ["experiment=multi30k_cpu", "data.src_lang=en", "data.tgt_lang=de",
                                "trainer.strategy=ddp", "model.dropout=0.2", f"output_dir={tmp_path}"])
    assert (cfg.data.src_lang, cfg.data.tgt_lang, cfg.name) == ("en", "de", "multi30k_en_de_cpu")
    assert cfg.trainer.strategy == "ddp" and cfg.model.dropout == 0.2 and cfg.data.max_tokens == 3000


def test_unknown_experiment_or_group_is_refused(tmp_path):
    for bad, named in (["experiment=multi30k_tpu"], "multi30k_tpu"), (["experiment=multi30k", "size=cpu"], "size"):
        with pytest.raises(Exception, match=named):
            compose_cfg("train", [*bad, f"output_dir={tmp_path}"])


@pytest.mark.parametrize("name", sorted(FOLDED))
def test_an_experiment_folded_into_another_recipe_names_its_replacement(name, tmp_path):
    import shlex

    with pytest.raises(ValueError, match=rf"Could not find 'experiment/{name}'.* \({name} is experiment=") as caught:
        check_overrides("train", [f"experiment={name}", f"output_dir={tmp_path}"])
    replacement = str(caught.value).rsplit(f"({name} is ", 1)[1].rstrip(")")
    if " with " not in replacement:  # a command: it composes, as a recipe file's comment gives it
        args = shlex.split(replacement)
        assert any(args == given[:len(args)] for given in COMMANDS.values()), args
        compose_cfg("train", [*args, f"output_dir={tmp_path}"])
    else:  # the file it names gives the command
        assert any(where.startswith(replacement.split()[0].removeprefix("experiment=") + ":") for where in COMMANDS)


@pytest.mark.parametrize("model, task", MODELS)
def test_model_config_instantiates(model, task, tmp_path):
    cfg = compose_cfg("train", [f"model={model}", f"task={task}", f"output_dir={tmp_path}"])
    built = model_from(cfg.model)
    assert_architecture(built, cfg.model)
    n_params = sum(p.numel() for p in built.parameters())
    if model.endswith("tiny"):  # for tests and smoke runs: small enough to train in seconds
        assert n_params < 100_000
    else:
        assert n_params > 1_000_000


@pytest.mark.parametrize("model", sorted(IMAGE_MODELS))
def test_an_image_model_choice_changes_the_model_and_nothing_else(model, tmp_path):
    cfg = compose_cfg("train", ["experiment=digits", f"model={model}", f"output_dir={tmp_path}"])
    recipe = compose_cfg("train", ["experiment=digits", f"output_dir={tmp_path}"])
    OmegaConf.resolve(cfg)
    check_config(cfg)
    built = task_from(cfg).model
    assert type(built).__name__ == IMAGE_MODELS[model]
    assert_architecture(built, cfg.model)
    assert {k: v for k, v in cfg.items() if k != "model"} == {k: v for k, v in recipe.items() if k != "model"}


GPU = ["trainer.accelerator=gpu", "trainer.precision=bf16-mixed"]


@pytest.mark.parametrize("trainer", [[], GPU, [*GPU, "trainer.strategy=ddp", "trainer.num_nodes=2"]])
def test_trainer_settings_compose(trainer, tmp_path):
    cfg = compose_cfg("train", [*trainer, f"output_dir={tmp_path}"])
    assert cfg.trainer.use_distributed_sampler is False
    assert (cfg.trainer.accelerator, cfg.trainer.precision) == (("gpu", "bf16-mixed") if trainer else ("cpu", "32-true"))
    if len(trainer) > 2:
        assert cfg.trainer.strategy == "ddp" and cfg.trainer.num_nodes == 2


@pytest.mark.parametrize("decode", DECODES)
@pytest.mark.parametrize("entry", ["eval", "decode"])
def test_decode_configs_compose(entry, decode):
    cfg = compose_cfg(entry, [f"decode.strategy={decode}", "ckpt_path=x.ckpt"])
    assert cfg.decode.strategy


def test_debug_and_average_configs_compose(tmp_path):
    cfg = compose_cfg("train", ["debug=fast", f"output_dir={tmp_path}"])
    assert cfg.trainer.limit_train_batches == 3
    cfg = compose_cfg("average", ["output=avg.ckpt"])
    assert cfg.last_n == 5


def test_unknown_key_is_rejected(tmp_path):
    with pytest.raises(Exception, match="no_such_key"):
        compose_cfg("train", ["model.no_such_key=3", f"output_dir={tmp_path}"])


def test_experiment_top_level_keys_override_train_yaml_defaults(tmp_path):
    base = compose_cfg("train", [f"output_dir={tmp_path}"])
    for experiment in EXPERIMENTS:
        cfg = compose_cfg("train", [f"experiment={experiment}", f"output_dir={tmp_path}"])
        # every experiment names its runs; none may silently inherit the default name
        assert cfg.name != base.name, experiment
    cfg = compose_cfg("train", ["experiment=multi30k", f"output_dir={tmp_path}"])
    assert list(cfg.test_splits) == ["val", "test_2016_flickr", "test_2017_flickr", "test_2017_mscoco"]
    assert cfg.test_decode.strategy == "beam"


@pytest.mark.parametrize("overrides, loss, fast", [
    ([], "all_positions", False),  # the CPU fast paths and the real-positions loss are opt-in
    (["task.compile=true"], "all_positions", False),
    (GPU, "all_positions", False),
    (["accel=cpu"], "all_positions", True),
    (["accel=cpu", "task.loss=real_positions"], "real_positions", True),
    (["experiment=multi30k_cpu"], "real_positions", True),  # what a CPU recipe sets
    (["experiment=multi30k"], "all_positions", False),
])
def test_train_chooses_the_loss_and_the_modules_once_where_the_task_is_built(overrides, loss, fast, monkeypatch):
    from transformer import accel
    from transformer.cli.train import build_task
    from transformer.tasks.translation import TRANSLATION_LOSSES, TranslationTask

    monkeypatch.setattr(TranslationTask, "kwargs_from_datamodule",
                        staticmethod(lambda dm: facts_for(TranslationTask)))
    cfg = compose_cfg("train", ["model.d_model=16", "model.n_heads=2", "model.d_ff=32", *overrides])
    task = build_task(cfg, None)
    assert task.hparams.loss == loss
    if not task.hparams.compile:
        assert task.loss_fn is TRANSLATION_LOSSES[loss]  # what training_step calls, nothing swaps it later
    assert (type(task.model.decoder.output_proj) is accel.VocabProjection) == fast


def _option(group: str, choice: str, resolve: bool = True, part: str | None = "") -> dict:
    """``conf/<group>/<choice>.yaml`` composed alone, as a plain dict: the node it sits under
    (``part=None``: the whole file, for a file that writes several nodes such as a task's)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name=f"{group}/{choice}")
    if part is not None:
        for key in f"{group}/{choice}".split("/")[:-1]:  # composed alone, it sits under its path
            cfg = cfg[key]
    return OmegaConf.to_container(cfg, resolve=resolve)


def experiment_file(name: str) -> dict:
    """What ``conf/experiment/<name>.yaml`` writes itself, over what the experiments it extends
    (the plain names in its defaults list) write: its recipe without the chosen group files."""
    own = OmegaConf.load(CONF / "experiment" / f"{name}.yaml")
    written = OmegaConf.create()
    for entry in own.pop("defaults", []):
        if isinstance(entry, str) and entry != "_self_":
            written = OmegaConf.merge(written, experiment_file(entry))
    return OmegaConf.to_container(OmegaConf.merge(written, own))


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_recorded_choices_and_the_experiment_file_say_what_runs(experiment):
    # What Hydra records in .hydra/ as the run's choices (data, model, task, decodings, and the experiment) is what runs: each node is its chosen file plus what the experiment
    # file writes under it; nothing else changes it behind the choices' back.
    cfg = compose_cfg("train", [f"experiment={experiment}", "output_dir=x"], hydra_node=True)
    choices = cfg.hydra.runtime.choices
    assert choices.experiment == experiment
    written = experiment_file(experiment)
    train = OmegaConf.load(CONF / "train.yaml")
    for key in ("trainer", "callbacks", "logger"):  # train.yaml's own blocks, then the experiment's
        block = OmegaConf.select(OmegaConf.create(written), key) or {}
        assert OmegaConf.to_container(cfg[key], resolve=False) == OmegaConf.to_container(
            OmegaConf.merge(train[key], block), resolve=False), key
    for key, group in (("data", "data"), ("model", "model"), ("task", "task"),
                       ("test_decode", "decode@test_decode"), ("task.val_decode", "decode@task.val_decode")):
        node = OmegaConf.select(cfg, key)
        node = OmegaConf.to_container(node, resolve=False) if node is not None else None
        block = OmegaConf.select(OmegaConf.create(written), key)
        if choices[group] is None:  # no file chosen: only what the experiment writes (pretrain's model), or nothing
            assert node == block, key  # (tagging and classification decode nothing)
            continue
        chosen = _option(group.split("@")[0], choices[group], resolve=False)
        if key == "model":  # the model kind the task file names, then the model file over it (sizes, or its own kind)
            chosen = OmegaConf.merge(_option("task", choices.task, resolve=False, part=None)["model"], chosen)
        expected = OmegaConf.to_container(OmegaConf.merge(chosen, block or {}), resolve=False)
        if key == "task":  # the decoding under task is its own choice, checked on its own
            node.pop("val_decode", None)
            expected.pop("val_decode", None)
        assert node == expected, (key, choices[group])


def test_the_gpu_recipe_records_its_model_and_beam():
    cfg = compose_cfg("train", ["experiment=multi30k", "output_dir=x"], hydra_node=True)
    choices = cfg.hydra.runtime.choices
    assert (choices.model, choices.task, cfg.trainer.accelerator) == ("medium", "translation", "gpu")
    assert cfg.model._target_ == "transformer.models.EncoderDecoder"
    assert (cfg.model.d_model, cfg.model.n_encoder_layers, cfg.test_decode.strategy, cfg.test_decode.beam_size) == \
        (512, 4, "beam", 5)


def test_conf_groups_mirror_the_package_and_group_files_are_complete():
    # conf/ holds the groups named after the package's parts, each option one complete file:
    # no base files to chain, no per-experiment subtrees (an experiment file shows its recipe).
    groups = {p.name for p in CONF.iterdir() if p.is_dir()}
    assert groups == {"data", "debug", "decode", "experiment", "model", "task"}
    for group in ("task", "decode", "model"):
        assert not [p for p in (CONF / group).iterdir() if p.is_dir()], group
        for path in (CONF / group).glob("*.yaml"):
            assert "defaults" not in OmegaConf.load(path), path
    # The trainer, its callbacks and loggers are train.yaml's own blocks; an experiment extends at
    # most one other experiment's file.
    assert {"trainer", "callbacks", "logger"} <= set(OmegaConf.load(CONF / "train.yaml"))
    def chained(name: str) -> list[str]:  # the experiments a file extends (not its group overrides)
        entries = OmegaConf.load(CONF / "experiment" / f"{name}.yaml").get("defaults", [])
        return [e for e in entries if isinstance(e, str) and e != "_self_"]

    for path in (CONF / "experiment").glob("*.yaml"):
        assert len(chained(path.stem)) <= 1 and not any(chained(e) for e in chained(path.stem)), path


def test_bf16_training_on_a_cpu_without_bf16_instructions_is_flagged(monkeypatch):
    def trainer(precision):
        return L.Trainer(accelerator="cpu", precision=precision, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)

    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False, raising=False)
    assert emulated_bf16(trainer("bf16-mixed")) and emulated_bf16(trainer("bf16-true"))
    assert not emulated_bf16(trainer("32-true"))
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True, raising=False)
    assert not emulated_bf16(trainer("bf16-mixed"))
