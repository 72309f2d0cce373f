"""The tagging configs compose, instantiate, and build a TaggingTask around a Tagger."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra_helpers import compose_cfg
from hydra.utils import get_class, instantiate
from lightning.pytorch.accelerators import CPUAccelerator
from omegaconf import OmegaConf

from transformer.models.tagger import Tagger
from transformer.tasks.tagging import TaggingTask
from model_configs import TINY

CONF = Path(__file__).resolve().parents[2] / "conf"
TAG_EXPERIMENTS = {"gum_upos": ("gum", "upos"), "gum_upos_adv": ("gum", "upos"), "conll2000_pos": ("conll2000", "pos"), "ud_upos": ("conllu", "upos")}
# The tagger at the encoder's size (conf/model/encoder.yaml) and tiny.
TAGGER_MODELS = {"encoder": ["model=encoder"], "tiny": TINY["tagger_tiny"]}


def build_task(cfg) -> TaggingTask:
    """What transformer.cli.train.build_task does, with data facts instead of a data module."""
    task_cfg = OmegaConf.to_container(cfg.task, resolve=True)
    cls = get_class(task_cfg.pop("_target_"))
    return cls(model=OmegaConf.to_container(cfg.model, resolve=True), **task_cfg,
               piece_vocab_size=300, pad_id=0, tags=["A", "B", "C"],
               data={"name": cfg.data.dataset, "tagset": cfg.data.tagset})


@pytest.mark.parametrize("experiment", sorted(TAG_EXPERIMENTS))
def test_tagging_experiment_composes_and_instantiates(experiment, tmp_path):
    cfg = compose_cfg("train", [f"experiment={experiment}", f"output_dir={tmp_path}"])
    OmegaConf.resolve(cfg)
    dataset, tagset = TAG_EXPERIMENTS[experiment]
    assert (cfg.data.dataset, cfg.data.tagset) == (dataset, tagset)
    # Checkpoint selection and early stopping follow token accuracy, upwards.
    for cb in ("model_checkpoint", "early_stopping"):
        assert (cfg.callbacks[cb].monitor, cfg.callbacks[cb].mode) == ("val/acc", "max")
    assert "val_decode" not in cfg.task  # translation-only setting removed
    dm = instantiate(cfg.data)  # constructor only: no files are read
    assert (dm.dataset_name, dm.tagset) == (dataset, tagset)
    task = build_task(cfg)
    assert isinstance(task.model, Tagger) and task.model.n_tags == 3
    assert task.configure_optimizers()["optimizer"].__class__.__name__ == "AdamW"
    callbacks = [instantiate(c) for c in cfg.callbacks.values() if c]
    trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=False)
    # the recipe's budget, on a CPU, with clipped gradients
    assert trainer.max_epochs == cfg.trainer.max_epochs and trainer.max_epochs >= 12
    assert isinstance(trainer.accelerator, CPUAccelerator) and trainer.gradient_clip_val == 1.0
    stopping = [c for c in trainer.callbacks if type(c).__name__ == "MeasuredEarlyStopping"]
    assert [(c.monitor, c.patience) for c in stopping] == [("val/acc", cfg.callbacks.early_stopping.patience)]


@pytest.mark.parametrize("experiment", sorted(TAG_EXPERIMENTS))
def test_tagging_recipes_share_the_tagging_settings(experiment, tmp_path):
    cfg = compose_cfg("train", [f"experiment={experiment}", f"output_dir={tmp_path}"])
    # what every tagging recipe has: a small tagger with a character CNN and relative positions,
    # the same optimiser settings, chosen by accuracy, on a CPU with its fast paths
    assert cfg.model._target_ == "transformer.models.tagger.Tagger" and cfg.model.d_model == 192
    assert cfg.model.positional._target_ == "transformer.modules.positional.RelativePositionBias"
    assert cfg.model.char_channels >= 128 and (cfg.task.lr, cfg.task.warmup_steps) == (1.5e-3, 200)
    assert (cfg.monitor, cfg.monitor_mode, cfg.trainer.accelerator, cfg.accel) == ("val/acc", "max", "cpu", "cpu")


def test_gum_upos_recipe_takes_the_other_tag_set(tmp_path):
    upos = compose_cfg("train", ["experiment=gum_upos", f"output_dir={tmp_path}"])
    xpos = compose_cfg("train", ["experiment=gum_upos", "data.tagset=xpos", "model.window=null", f"output_dir={tmp_path}"])
    assert (upos.data.tagset, xpos.data.tagset) == ("upos", "xpos")
    assert (upos.model.window, xpos.model.window) == (4, None)
    for cfg in (upos, xpos):
        cfg.name, cfg.data.tagset, cfg.model.window = None, None, None
    assert upos == xpos


def test_the_adversarial_recipe_is_gum_upos_with_xpos_multi_task_adversarial_steps_and_wider_chars(tmp_path):
    base = compose_cfg("train", ["experiment=gum_upos", f"output_dir={tmp_path}"])
    adv = compose_cfg("train", ["experiment=gum_upos_adv", f"output_dir={tmp_path}"])
    assert base.task.adversarial_eps == 0.0 and adv.task.adversarial_eps > 0
    assert build_task(adv).hparams.adversarial_eps == adv.task.adversarial_eps
    # A second head on Penn Treebank tags, from GUM's XPOS column and CoNLL-2000's WSJ file.
    assert (adv.data.aux_tagset, adv.data.aux_corpus) == ("xpos", "conll2000") and adv.task.aux_weight > 0
    assert base.data.aux_tagset is None
    # The model is gum_upos's, but for a wider character CNN.
    wider = ("char_channels", "char_kernel")
    assert {k: v for k, v in adv.model.items() if k not in wider} == {
        k: v for k, v in base.model.items() if k not in wider}
    assert adv.model.char_channels > base.model.char_channels
    assert set(adv.model.char_kernel) > set(base.model.char_kernel)
    convs = build_task(adv).model.chars.convs
    assert [c.kernel_size[0] for c in convs] == list(adv.model.char_kernel)
    assert {c.out_channels for c in convs} == {adv.model.char_channels}
    assert adv.trainer.max_time > base.trainer.max_time  # the second head's text and steps cost time


def test_experiments_with_debug_fast_compose(tmp_path):
    cfg = compose_cfg("train", ["experiment=gum_upos", "debug=fast", *TINY["tagger_tiny"], f"output_dir={tmp_path}"])
    OmegaConf.resolve(cfg)
    assert cfg.data.train_subset == 64 and cfg.callbacks.early_stopping is None
    assert cfg.callbacks.model_checkpoint.monitor == "val/acc"


@pytest.mark.parametrize("model", sorted(TAGGER_MODELS))
def test_tagger_model_configs_instantiate(model, tmp_path):
    cfg = compose_cfg("train", ["experiment=gum_upos", *TAGGER_MODELS[model], f"output_dir={tmp_path}"])
    task = build_task(cfg)
    assert isinstance(task.model, Tagger)
    assert task.model.pooling in ("first", "mean")


@pytest.mark.parametrize("experiment, data", [("gum_upos", "gum"), ("conll2000_pos", "conll2000")])
def test_the_presets_data_instantiates(experiment, data, tmp_path):
    cfg = compose_cfg("train", [f"experiment={experiment}", f"output_dir={tmp_path}"])
    OmegaConf.resolve(cfg)
    dm = instantiate(cfg.data)
    assert dm.dataset_name == data and dm.val_split == "dev"


def test_tag_config_composes(tmp_path):
    # tag.yaml writes nothing but its output file, so it has no output_dir key.
    cfg = compose_cfg("tag", ["ckpt_path=x.ckpt", f"output={tmp_path / 'out.conllu'}"])
    assert (cfg.input, cfg.input_format, cfg.format) == ("-", "auto", "auto")
    assert cfg.max_tokens > 0 and cfg.device == "auto"


def test_task_config_alone(tmp_path):
    cfg = compose_cfg("train", ["task=tagging", *TINY["tagger_tiny"], "data=conllu", "~decode@task.val_decode",
                                f"output_dir={tmp_path}"])
    task = build_task(cfg)
    assert task.hparams.schedule == "linear" and task.hparams.warmup_steps > 0


def test_auxiliary_tag_set_is_a_command_line_switch(tmp_path):
    cfg = compose_cfg("train", ["experiment=gum_upos", "data.aux_tagset=xpos", "data.aux_corpus=conll2000",
                                "data.aux_corpus_upos=true", "task.aux_weight=0.25", f"output_dir={tmp_path}"])
    OmegaConf.resolve(cfg)
    dm = instantiate(cfg.data)
    assert (dm.aux_tagset, dm.aux_corpus, dm.aux_corpus_upos) == ("xpos", "conll2000", True)
    task_cfg = OmegaConf.to_container(cfg.task, resolve=True)
    task = get_class(task_cfg.pop("_target_"))(
        model=OmegaConf.to_container(cfg.model, resolve=True), **task_cfg, piece_vocab_size=300, pad_id=0,
        tags=["A", "B"], aux_tags=["x", "y", "z"], data={"name": "gum", "tagset": "upos", "aux_tagset": "xpos"})
    assert task.model.aux_classifier.out_features == 3 and task.hparams.aux_weight == 0.25
    # off by default: no second head
    plain = build_task(compose_cfg("train", ["experiment=gum_upos", f"output_dir={tmp_path}"]))
    assert plain.model.aux_classifier is None


def test_ud_upos_is_gum_upos_on_the_files_a_user_gives(tmp_path):
    gum = compose_cfg("train", ["experiment=gum_upos", f"output_dir={tmp_path}"])
    ud = compose_cfg("train", ["experiment=ud_upos", "data.train=a.conllu", "data.dev=b.conllu",
                               "data.test=c.conllu", f"output_dir={tmp_path}"])
    assert (ud.data.train, ud.data.dev, ud.data.test, ud.data.format) == ("a.conllu", "b.conllu", "c.conllu", "conllu")
    assert gum.data.train.startswith("registry:") and gum.data.format == "conllu"  # GUM: a preset of the same path
    for key in ("model", "task", "trainer", "callbacks", "test_splits", "monitor"):
        assert ud[key] == gum[key], key
    for cfg in (gum, ud):
        for key in ("dataset", "train", "dev", "test"):
            cfg.data[key] = None
    assert ud.data == gum.data


def test_the_preset_data_configs_extend_the_general_one(tmp_path):
    conll = compose_cfg("train", ["experiment=conll2000_pos", f"output_dir={tmp_path}"])
    assert (conll.data.format, conll.data.dev) == ("conll2000", None)  # dev: the tail of train
    assert conll.data.train.endswith("conll2000.zip!conll2000/train.txt")
