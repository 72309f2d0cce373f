"""Every config in conf/ composes, and what it describes instantiates: every experiment under
every language pair and size preset, every model, trainer, decode and debug preset."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from hydra_helpers import compose_cfg
from hydra.utils import get_class, instantiate
from lightning.pytorch.accelerators import CPUAccelerator
from omegaconf import OmegaConf, open_dict

from transformer.cli.train import check_config, task_settings
from transformer.data.sources import multi30k_relpath
from transformer.tasks.build import build_model

CONF = Path(__file__).resolve().parents[2] / "conf"
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
# Multi30k experiments take pair= and size=; the tagging ones are single CPU recipes.
MULTI30K = [e for e in EXPERIMENTS if e.startswith("multi30k")]
TAGGING = [e for e in EXPERIMENTS if e not in MULTI30K]
PAIRS = sorted(p.stem for p in (CONF / "pair").glob("*.yaml"))
SIZES = sorted(p.stem for p in (CONF / "size").glob("*.yaml"))
RECIPES = [(e, p, s) for e in MULTI30K for p in PAIRS for s in SIZES] + [(e, None, None) for e in TAGGING]
MODELS = sorted(p.stem for p in (CONF / "model").glob("*.yaml"))
DECODES = sorted(p.stem for p in (CONF / "decode").glob("*.yaml"))
# What only the data knows, offered to any model or task constructor that asks for it.
DATA_FACTS = {"vocab_size": 120, "piece_vocab_size": 120, "pad_id": 0, "n_tags": 7, "tags": list("ABCDEFG"),
              "mask_id": 4, "blank_id": 4, "bos_id": 1, "eos_id": 2, "src_lang": "de", "tgt_lang": "en",
              "n_classes": 2, "labels": ["neg", "pos"]}


def facts_for(cls) -> dict:
    """The data facts ``cls``'s constructor takes."""
    accepted = inspect.signature(cls).parameters
    return {k: v for k, v in DATA_FACTS.items() if k in accepted}


def model_from(model_cfg):
    """The model a (resolved) model config describes, with a 120-piece vocabulary."""
    cfg = OmegaConf.to_container(model_cfg, resolve=True)
    return build_model(cfg, **facts_for(get_class(cfg["_target_"])))


def task_from(cfg):
    """The task an experiment describes, as ``transformer.cli.train.build_task`` makes it,
    with data facts in place of a data module."""
    cls, task_cfg, _ = task_settings(cfg)
    data = {k: cfg.data[k] for k in ("src_lang", "tgt_lang", "tagset") if k in cfg.data}
    facts = {**facts_for(cls), **data, "data": {"name": cfg.data.get("dataset", "multi30k"), **data}}
    accepted = inspect.signature(cls).parameters
    return cls(model=OmegaConf.to_container(cfg.model, resolve=True), **task_cfg,
               **{k: v for k, v in facts.items() if k in accepted})


def assert_architecture(model, model_cfg) -> None:
    """The built model has the class, width and depth its config names."""
    assert type(model) is get_class(model_cfg._target_)
    assert model.encoder.embedding.weight.shape == (120, model_cfg.d_model)
    assert len(model.encoder.layers) == model_cfg.get("n_encoder_layers", model_cfg.get("n_layers"))
    if "n_decoder_layers" in model_cfg:
        assert len(model.decoder.layers) == model_cfg.n_decoder_layers


@pytest.mark.parametrize(("experiment", "pair", "size"), RECIPES)
def test_experiment_composes_and_instantiates(experiment, pair, size, tmp_path):
    overrides = [f"pair={pair}", f"size={size}"] if pair else []
    cfg = compose_cfg("train", [f"experiment={experiment}", *overrides, f"output_dir={tmp_path}"])
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
        kind = experiment.removeprefix("multi30k")
        assert cfg.name == f"multi30k_{src}_{tgt}{kind}" + ("_cpu" if size == "cpu" else "")
        for split in cfg.test_splits:  # every split the recipe tests on exists for the pair
            multi30k_relpath(split, src), multi30k_relpath(split, tgt)
    expected_hardware = ("gpu", "bf16-mixed") if size == "gpu" else ("cpu", "32-true")
    assert (cfg.trainer.accelerator, cfg.trainer.precision) == expected_hardware
    callbacks = [instantiate(c) for c in cfg.callbacks.values() if c]
    loggers = [instantiate(c) for c in cfg.logger.values() if c]
    with open_dict(cfg.trainer):
        # the GPU presets must still compose and be complete on a CPU-only machine
        cfg.trainer.accelerator = "cpu"
        cfg.trainer.precision = "32-true"
    trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=loggers)
    assert isinstance(trainer.accelerator, CPUAccelerator)
    assert trainer.max_epochs == cfg.trainer.max_epochs and trainer.gradient_clip_val == cfg.trainer.gradient_clip_val
    stopping = [c for c in trainer.callbacks if type(c).__name__ == "MeasuredEarlyStopping"]
    if cfg.callbacks.early_stopping:
        assert [(c.monitor, c.patience) for c in stopping] == [(cfg.monitor, cfg.callbacks.early_stopping.patience)]
    else:
        assert stopping == []


@pytest.mark.parametrize("experiment", MULTI30K)
def test_multi30k_defaults_are_de_en_on_a_gpu(experiment, tmp_path):
    plain = compose_cfg("train", [f"experiment={experiment}", f"output_dir={tmp_path}"])
    explicit = compose_cfg("train", [f"experiment={experiment}", "pair=de_en", "size=gpu", f"output_dir={tmp_path}"])
    assert plain == explicit
    cpu = compose_cfg("train", [f"experiment={experiment}", "size=cpu", f"output_dir={tmp_path}"])
    # the CPU preset trains a smaller model on smaller batches for fewer epochs
    assert cpu.model.d_model < plain.model.d_model and cpu.data.max_tokens < plain.data.max_tokens
    assert cpu.trainer.max_epochs < plain.trainer.max_epochs


def test_command_line_keys_win_over_presets(tmp_path):
    cfg = compose_cfg("train", ["experiment=multi30k", "pair=en_fr", "size=cpu", "data.tgt_lang=de",
                                "trainer=ddp", "model.dropout=0.2", f"output_dir={tmp_path}"])
    assert (cfg.data.src_lang, cfg.data.tgt_lang, cfg.name) == ("en", "de", "multi30k_en_de_cpu")
    assert cfg.trainer.strategy == "ddp" and cfg.model.dropout == 0.2 and cfg.data.max_tokens == 3000


def test_unknown_pair_or_size_is_refused(tmp_path):
    for bad in ("pair=de_xx", "size=tpu"):
        with pytest.raises(Exception, match=bad.split("=")[1]):
            compose_cfg("train", ["experiment=multi30k", bad, f"output_dir={tmp_path}"])


@pytest.mark.parametrize("model", MODELS)
def test_model_config_instantiates(model, tmp_path):
    cfg = compose_cfg("train", [f"model={model}", f"output_dir={tmp_path}"])
    built = model_from(cfg.model)
    assert_architecture(built, cfg.model)
    n_params = sum(p.numel() for p in built.parameters())
    if model.endswith("tiny"):  # for tests and smoke runs: small enough to train in seconds
        assert n_params < 100_000
    else:
        assert n_params > 1_000_000


@pytest.mark.parametrize("trainer", ["cpu", "gpu", "ddp"])
def test_trainer_presets_compose(trainer, tmp_path):
    cfg = compose_cfg("train", [f"trainer={trainer}", f"output_dir={tmp_path}"])
    assert cfg.trainer.use_distributed_sampler is False
    if trainer != "cpu":
        assert cfg.trainer.precision == "bf16-mixed"
    if trainer == "ddp":
        assert cfg.trainer.strategy == "ddp" and "num_nodes" in cfg.trainer


@pytest.mark.parametrize("decode", DECODES)
@pytest.mark.parametrize("entry", ["eval", "decode"])
def test_decode_configs_compose(entry, decode):
    cfg = compose_cfg(entry, [f"decode={decode}", "ckpt_path=x.ckpt"])
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
    (["trainer=cpu"], "real_positions", True),
    (["trainer=cpu", "accel=none"], "all_positions", False),
    (["trainer=cpu", "task.compile=true"], "all_positions", False),
    (["trainer=gpu"], "all_positions", False),
    (["trainer=cpu", "task.loss=all_positions"], "all_positions", True),
])
def test_train_chooses_the_loss_and_the_modules_once_where_the_task_is_built(overrides, loss, fast, monkeypatch):
    from transformer import accel
    from transformer.cli.train import build_task
    from transformer.tasks.losses import TRANSLATION_LOSSES
    from transformer.tasks.translation import TranslationTask

    monkeypatch.setattr(TranslationTask, "kwargs_from_datamodule",
                        staticmethod(lambda dm: facts_for(TranslationTask)))
    cfg = compose_cfg("train", ["model.d_model=16", "model.n_heads=2", "model.d_ff=32", *overrides])
    task = build_task(cfg, None)
    assert task.hparams.loss == loss
    if not task.hparams.compile:
        assert task.loss_fn is TRANSLATION_LOSSES[loss]  # what training_step calls, nothing swaps it later
    assert (type(task.model.decoder.output_proj) is accel.VocabProjection) == fast


def _option(group: str, choice: str, resolve: bool = True) -> dict:
    """``conf/<group>/<choice>.yaml`` composed alone, as a plain dict."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name=f"{group}/{choice}")
    for part in f"{group}/{choice}".split("/")[:-1]:  # composed alone, it sits under its path
        cfg = cfg[part]
    return OmegaConf.to_container(cfg, resolve=resolve)


@pytest.mark.parametrize("experiment, pair, size", [r for r in RECIPES if r[0] in MULTI30K and r[1] in (None, "de_en")])
def test_recorded_choices_say_what_runs(experiment, pair, size):
    # What Hydra records in .hydra/ as the run's choices is the model and decoding that run:
    # no preset changes their values behind the choice's back.
    overrides = [f"experiment={experiment}", "output_dir=x"] + [f"size={size}"] * bool(size)
    cfg = compose_cfg("train", overrides, hydra_node=True)
    choices = cfg.hydra.runtime.choices
    for key, group in (("model", "model"), ("test_decode", "decode@test_decode"), ("task.val_decode", "decode@task.val_decode")):
        node = OmegaConf.to_container(OmegaConf.select(cfg, key), resolve=True)
        assert node == _option(group.split("@")[0], choices[group]), (key, choices[group])
    trainer = _option("trainer", choices.trainer, resolve=False)
    assert (cfg.trainer.accelerator, cfg.trainer.precision) == (trainer["accelerator"], trainer["precision"])
    assert choices.size == size


def test_the_gpu_recipe_records_its_model_and_beam():
    cfg = compose_cfg("train", ["experiment=multi30k", "output_dir=x"], hydra_node=True)
    choices = cfg.hydra.runtime.choices
    assert (choices.model, choices["decode@test_decode"]) == ("multi30k/gpu", "multi30k/gpu")
    assert (cfg.model.d_model, cfg.model.n_encoder_layers, cfg.test_decode.strategy, cfg.test_decode.beam_size) == \
        (512, 4, "beam", 5)


@pytest.mark.parametrize("overrides", [["experiment=gum_upos"], ["experiment=gum_upos_adv"], ["experiment=gum_upos_wsj"],
                                       ["experiment=gum_xpos"], ["experiment=conll2000_pos"],
                                       ["experiment=ud_upos", "data.train=a", "data.dev=b", "data.test=c"],
                                       ["experiment=sst2", "size=cpu"], ["experiment=sst2", "size=gpu"],
                                       ["experiment=classify"]])
def test_tagging_and_classification_record_the_model_that_runs(overrides):
    cfg = compose_cfg("train", [*overrides, "output_dir=x"], hydra_node=True)
    choice = cfg.hydra.runtime.choices.model
    assert OmegaConf.to_container(cfg.model, resolve=False) == _option("model", choice, resolve=False), choice
