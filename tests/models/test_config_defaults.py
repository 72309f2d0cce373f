"""The model dataclasses' defaults are the presets' shared base (``conf/model/*.yaml``), so the
Python API and the command line build the same model; a checkpoint that leaves such a setting
out keeps the meaning it was written with."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from transformer.models import EncoderDecoder
from transformer.models.config import EncoderConfig, TransformerConfig
from transformer.modules.positional import SinusoidalPositionalEncoding
from transformer.tasks.build import build_model
from transformer.tasks.checkpoint import FORMER_DEFAULTS, current_hyper_parameters, record_model_settings

PRESETS = Path(__file__).resolve().parents[2] / "conf" / "model"
# What a preset chooses for itself: its size. The tiny preset (tests and smoke runs) also a short
# position table.
SIZE = {"d_model", "n_heads", "n_layers", "n_encoder_layers", "n_decoder_layers", "d_ff", "dropout"}
OWN = {"tiny": SIZE | {"max_len"}}


def _preset(name: str) -> dict:
    return OmegaConf.to_container(OmegaConf.load(PRESETS / f"{name}.yaml"))


def _config_class(name: str) -> type:
    return EncoderConfig if name == "encoder" else TransformerConfig


# The size presets of the text models; a file that names its own model or front end (conf/model/
# vit.yaml, cnn.yaml: the image recipe's models) sets what that model needs, not a size.
SIZE_PRESETS = sorted(p.stem for p in PRESETS.glob("*.yaml")
                      if not {"_target_", "frontend"} & set(OmegaConf.load(p).keys()))


def test_the_size_presets_are_found():
    assert {"tiny", "small", "medium", "encoder"} <= set(SIZE_PRESETS) and "vit" not in SIZE_PRESETS


@pytest.mark.parametrize("name", SIZE_PRESETS)
def test_every_preset_setting_but_its_size_is_the_dataclass_default(name):
    defaults = {f.name: f.default for f in dataclasses.fields(_config_class(name))}
    for key, value in _preset(name).items():
        if key in OWN.get(name, SIZE):
            continue
        if key == "positional":  # the dataclass's None is the sinusoidal table the presets name
            assert defaults[key] is None and value["_target_"].endswith(SinusoidalPositionalEncoding.__name__)
            continue
        assert value == defaults[key], f"conf/model/{name}.yaml sets {key}={value!r}, the dataclass {defaults[key]!r}"


def test_the_python_api_builds_the_command_line_s_model():
    preset = _preset("small")
    torch.manual_seed(0)
    ours = EncoderDecoder(TransformerConfig(vocab_size=40, pad_id=0, **{k: v for k, v in preset.items() if k in SIZE}))
    torch.manual_seed(0)
    theirs = build_model({"_target_": "EncoderDecoder", **preset}, vocab_size=40, pad_id=0)
    a, b = ours.state_dict(), theirs.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert ours.encoder.layers[0].norm_first and ours.encoder.positional.pe.size(-2) == preset["max_len"]


TINY = {"_target_": "transformer.models.EncoderDecoder", "d_model": 16, "n_heads": 2, "n_encoder_layers": 1,
        "n_decoder_layers": 1, "d_ff": 32, "dropout": 0.0}


def test_a_checkpoint_that_leaves_a_changed_default_out_keeps_its_former_meaning():
    from transformer.tasks.translation import TranslationTask

    hp = {"model": TINY, "vocab_size": 30, "pad_id": 0, "bos_id": 1, "eos_id": 2, "src_lang": "de", "tgt_lang": "en"}
    read = current_hyper_parameters(TranslationTask, hp)["model"]
    assert {k: read[k] for k in FORMER_DEFAULTS["EncoderDecoder"]} == {"norm_first": False, "max_len": 1024}
    task = TranslationTask(**current_hyper_parameters(TranslationTask, hp))
    assert not task.model.encoder.layers[0].norm_first  # post-norm, as it was trained
    # a checkpoint written now records today's defaults, and reads back with them
    checkpoint = {"hyper_parameters": dict(hp)}
    record_model_settings(checkpoint)
    saved = checkpoint["hyper_parameters"]["model"]
    assert saved["norm_first"] is True and saved["max_len"] == 512
    assert current_hyper_parameters(TranslationTask, checkpoint["hyper_parameters"])["model"] == saved
    # a setting the config names is never replaced
    named = {**hp, "model": {**TINY, "norm_first": True}}
    assert current_hyper_parameters(TranslationTask, named)["model"]["norm_first"]


def test_a_graph_checkpoint_from_before_the_score_biases_builds_without_them():
    from transformer.tasks.checkpoint import with_former_defaults

    gat = {"_target_": "transformer.models.nodes.NodeClassifier", "d_model": 16, "n_heads": 2, "n_layers": 1,
           "n_classes": 3, "attention_score": "additive", "attention_projections": False}
    assert with_former_defaults(gat)["score_bias"] is False  # its state has no b_dst, b_src
    checkpoint = {"hyper_parameters": {"model": dict(gat)}}
    record_model_settings(checkpoint)  # one written now says it has them
    assert checkpoint["hyper_parameters"]["model"]["score_bias"] is True
    assert with_former_defaults(checkpoint["hyper_parameters"]["model"])["score_bias"] is True
