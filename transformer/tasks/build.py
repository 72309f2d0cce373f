"""Building a model from its resolved config: the one place configs become modules."""

from __future__ import annotations

from typing import Any

import hydra
import torch


def build_model(model_cfg: dict, **injected: Any) -> torch.nn.Module:
    """Instantiate a model from its resolved config (``_target_`` + hyperparameters), adding
    what only the data knows (vocabulary sizes, special ids)."""
    cfg = {k: v for k, v in model_cfg.items() if v is not None or k not in injected}
    cfg.update({k: v for k, v in injected.items() if v is not None})
    return hydra.utils.instantiate(cfg, _convert_="all")
