"""A model config from conf/model/ as the CLIs compose it (Hydra defaults and bases resolved),
for tests that build a model or task directly, and the tiny models of every kind the tests train.

conf/model/ holds sizes and the task picks the model kind; :data:`TINY` spells a tiny model of each
kind as command-line overrides."""

from __future__ import annotations

import copy
import functools
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

CONF = Path(__file__).resolve().parents[1] / "conf"

# A tiny encoder (tagger, classifier): a few thousand parameters, trains in seconds.
TINY_ENCODER = ["model=encoder", "model.d_model=32", "model.n_heads=2", "model.n_layers=1", "model.d_ff=64",
                "model.dropout=0.0", "model.max_len=256"]
TINY = {
    "tiny": ["model=tiny"],
    "nat_tiny": ["model=tiny", "task=nat", "model.max_offset=32"],
    "nat_ctc_tiny": ["model=tiny", "task=nat_ctc"],
    # The tagger over pieces with first-piece pooling, no character CNN, sinusoidal positions,
    # whatever the experiment's own tagger is.
    "tagger_tiny": [*TINY_ENCODER, "task=tagging", "model.window=null", "model.pooling=first", "model.context=piece",
                    "model.char_channels=0", "model.char_kernel=3", "model.char_boundaries=false",
                    "model.positional._target_=transformer.modules.positional.SinusoidalPositionalEncoding"],
    "classifier_tiny": [*TINY_ENCODER, "task=classification"],
}


def model_config(name: str) -> dict:
    """The model config of a :data:`TINY` name (or ``conf/model/<name>.yaml`` under the default
    task) composed through ``train.yaml``, resolved to a plain dict (a fresh copy: callers may
    change it)."""
    return copy.deepcopy(_composed(name))


@functools.lru_cache(maxsize=None)
def _composed(name: str) -> dict:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=TINY.get(name, [f"model={name}"]))
    return OmegaConf.to_container(cfg.model, resolve=True)
