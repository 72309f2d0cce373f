"""Every config in conf/ composes, and what it describes instantiates."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from hydra_helpers import compose_cfg
from hydra.utils import get_class, instantiate
from omegaconf import OmegaConf, open_dict

from transformer.cli.train import check_config

CONF = Path(__file__).resolve().parents[2] / "conf"
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
MODELS = sorted(p.stem for p in (CONF / "model").glob("*.yaml"))
DECODES = sorted(p.stem for p in (CONF / "decode").glob("*.yaml"))
# What only the data knows, offered to any model constructor that asks for it.
DATA_FACTS = {"vocab_size": 120, "pad_id": 0, "n_tags": 7, "mask_id": 4, "bos_id": 1, "eos_id": 2}


def build_model(model_cfg):
    cls = get_class(model_cfg._target_)
    accepted = inspect.signature(cls).parameters
    injected = {k: v for k, v in DATA_FACTS.items() if k in accepted and model_cfg.get(k) is None}
    return instantiate(model_cfg, **injected)


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_composes_and_instantiates(experiment, tmp_path):
    cfg = compose_cfg("train", [f"experiment={experiment}", f"output_dir={tmp_path}"])
    # Keys a user must supply (`???`, e.g. a distilled corpus path) get a stand-in value.
    for key in [k for k in cfg if OmegaConf.is_missing(cfg, k)]:
        cfg[key] = str(tmp_path / "user-supplied")
    OmegaConf.resolve(cfg)  # every interpolation resolves
    assert cfg.monitor and cfg.monitor_mode in ("min", "max")
    model = build_model(cfg.model)
    assert sum(p.numel() for p in model.parameters()) > 0
    dm_cls = get_class(cfg.data._target_)
    assert dm_cls.__name__.endswith("DataModule")
    instantiate(cfg.data)  # constructor only: no files are read
    check_config(cfg)  # every value has the type its target's signature asks for
    get_class(cfg.task._target_)
    callbacks = [instantiate(c) for c in cfg.callbacks.values() if c]
    loggers = [instantiate(c) for c in cfg.logger.values() if c]
    with open_dict(cfg.trainer):
        # the GPU presets must still compose and be complete on a CPU-only machine
        cfg.trainer.accelerator = "cpu"
        cfg.trainer.devices = 1
        cfg.trainer.precision = "32-true"
        cfg.trainer.pop("strategy", None)
        cfg.trainer.pop("sync_batchnorm", None)
    trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=loggers)
    assert trainer.max_epochs >= 1


@pytest.mark.parametrize("model", MODELS)
def test_model_config_instantiates(model, tmp_path):
    cfg = compose_cfg("train", [f"model={model}", f"output_dir={tmp_path}"])
    build_model(cfg.model)


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
    cfg = compose_cfg("train", ["experiment=multi30k_de_en", f"output_dir={tmp_path}"])
    assert list(cfg.test_splits) == ["val", "test_2016_flickr", "test_2017_flickr", "test_2017_mscoco"]
    assert cfg.test_decode.strategy == "beam"
