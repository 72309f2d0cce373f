"""A model config from conf/model/ as the CLIs compose it (Hydra defaults and bases resolved),
for tests that build a model or task directly."""

from __future__ import annotations

import copy
import functools
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

CONF = Path(__file__).resolve().parents[1] / "conf"


def model_config(name: str) -> dict:
    """``conf/model/<name>.yaml`` composed through ``train.yaml``, resolved to a plain dict
    (a fresh copy: callers may change it)."""
    return copy.deepcopy(_composed(name))


@functools.lru_cache(maxsize=None)
def _composed(name: str) -> dict:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[f"model={name}"])
    return OmegaConf.to_container(cfg.model, resolve=True)
