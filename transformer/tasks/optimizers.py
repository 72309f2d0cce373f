"""The optimizers a task may train with, chosen by a config node and checked as data.

A task's ``optimizer`` setting is a ``_partial_`` node, as Hydra writes a factory::

    optimizer: {_target_: torch.optim.Adam, _partial_: true, betas: [0.9, 0.98], eps: 1.0e-9, weight_decay: 0.0}

The task calls it with its parameters and its learning rate (``task.lr``, which stays a task
setting beside ``task.warmup_steps``: the schedule and layer-wise decay read it too). The node
travels in the checkpoint's ``hyper_parameters``, so it is data like the model config: its
``_target_`` is looked up by class name in :data:`OPTIMIZERS`, never imported, and every other key
is one of the optimizer's own settings, type- and range-checked (:data:`SETTINGS`).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

import torch

from transformer.tasks.build import HyperparameterError, show

# The optimizer classes a config or checkpoint may name, by class name. Adding one is a line here
# (and its settings below, if it takes others).
OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {"Adam": torch.optim.Adam, "AdamW": torch.optim.AdamW}

# The settings a node may give besides _target_ and _partial_, each with (smallest, largest)
# allowed value; the task supplies the parameters, ``lr`` and ``fused``.
SETTINGS: dict[str, tuple[float, float]] = {"eps": (0.0, 1.0), "weight_decay": (0.0, 100.0)}
BETA_RANGE = (0.0, 1.0)  # each of the two, 0 <= beta < 1


def optimizer_node(name: str, betas: Iterable[float], eps: float, weight_decay: float) -> dict[str, Any]:
    """The node for ``OPTIMIZERS[name]`` with these settings, as a config file writes it."""
    return {"_target_": f"torch.optim.{name}", "_partial_": True, "betas": [float(b) for b in betas],
            "eps": eps, "weight_decay": weight_decay}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_optimizer(node: Any, where: str = "optimizer") -> tuple[type[torch.optim.Optimizer], dict[str, Any]]:
    """``(class, settings)`` for an optimizer node; anything else is a :class:`HyperparameterError`
    naming the key: a class outside :data:`OPTIMIZERS`, a missing ``_partial_: true``, an unknown
    key, a value of the wrong type or out of range."""
    if not isinstance(node, Mapping) or node.get("_partial_") is not True:
        raise HyperparameterError(f"{where}={show(node)}: expected {{_target_: torch.optim.Adam or "
                                  f"torch.optim.AdamW, _partial_: true, ...}}")
    target = node.get("_target_")
    module, _, name = target.rpartition(".") if isinstance(target, str) else ("", "", "")
    cls = OPTIMIZERS.get(name)
    if cls is None or module not in ("", "torch.optim", cls.__module__):
        raise HyperparameterError(f"{where}._target_={show(target)}: not one of the optimizers a task trains with "
                                  f"({', '.join('torch.optim.' + n for n in OPTIMIZERS)})")
    settings = {k: v for k, v in node.items() if k not in ("_target_", "_partial_")}
    for key, value in settings.items():
        if key == "betas":
            ok = (isinstance(value, (list, tuple)) and len(value) == 2
                  and all(_number(b) and BETA_RANGE[0] <= b < BETA_RANGE[1] for b in value))
            if not ok:
                raise HyperparameterError(f"{where}.betas={show(value)}: expected two numbers, each 0 <= beta < 1")
        elif key == "amsgrad":
            if not isinstance(value, bool):
                raise HyperparameterError(f"{where}.amsgrad={show(value)}: expected true or false")
        elif key in SETTINGS:
            lo, hi = SETTINGS[key]
            if not (_number(value) and lo <= value <= hi):
                raise HyperparameterError(f"{where}.{key}={show(value)}: expected a number from {lo} to {hi}")
        else:
            raise HyperparameterError(f"{where}.{key}: unknown key (known: amsgrad, betas, "
                                      f"{', '.join(sorted(SETTINGS))})")
    if "betas" in settings:
        settings["betas"] = tuple(settings["betas"])
    return cls, settings


def build_optimizer(params: Any, node: Mapping, lr: float, **supplied: Any) -> torch.optim.Optimizer:
    """The optimizer ``node`` names over ``params`` (parameters or parameter groups) at ``lr``;
    ``supplied``: what the task decides itself (``fused``)."""
    cls, settings = check_optimizer(node)
    return cls(params, lr=lr, **settings, **supplied)


def optimizer_from_flat(hp: Mapping[str, Any], default: Mapping[str, Any]) -> dict[str, Any]:
    """Settings that give the optimizer's settings as flat ``betas``/``eps``/``weight_decay`` keys
    (checkpoints of this format carry them) with those keys folded into an ``optimizer`` node of
    the ``default`` class; settings that already have a node, or none of the keys, are returned as
    they are."""
    flat = {k: hp[k] for k in ("betas", "eps", "weight_decay") if k in hp}
    if not flat or "optimizer" in hp:
        return dict(hp)
    rest = {k: v for k, v in hp.items() if k not in flat}
    return {**rest, "optimizer": {**default, **flat}}


__all__ = ["BETA_RANGE", "OPTIMIZERS", "SETTINGS", "build_optimizer", "check_optimizer", "optimizer_from_flat",
           "optimizer_node"]
