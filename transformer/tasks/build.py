"""Building a model from its resolved config: the one place configs become modules.

A model config is data, whether it comes from ``conf/model/`` or from a checkpoint's
``hyper_parameters``: its ``_target_`` is looked up in :data:`MODELS`, a registry of the
project's own model classes, and nothing it names is ever imported or called. Every
hyperparameter is checked against the class's signature and the shared ranges
(``tasks/hparams.py``) before the class is called; anything else is a
:class:`~transformer.tasks.hparams.HyperparameterError` naming the key.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Mapping

import torch
from omegaconf import DictConfig, ListConfig, OmegaConf

from transformer.models import CTCNonAutoregressiveModel, EncoderDecoder, NonAutoregressiveModel, Tagger
from transformer.models.classifier import SequenceClassifier
from transformer.models.pooling import AttentionPooling, ClsPooling, MeanPooling
from transformer.modules.attention import head_width
from transformer.modules.positional import (
    LearnedPositionalEncoding,
    NoPositionalEncoding,
    RelativePositionBias,
    SinusoidalPositionalEncoding,
)
from transformer.tasks.hparams import MAX_ELEMENTS, HyperparameterError, check_arguments, find_hydra_keys, show

# The model classes a config or checkpoint may name, by class name. A config's ``_target_``
# is the name itself, ``transformer.models.<name>`` or the class's full module path.
# Adding a model class is one line here.
MODELS: dict[str, type[torch.nn.Module]] = {
    "EncoderDecoder": EncoderDecoder,
    "NonAutoregressiveModel": NonAutoregressiveModel,
    "CTCNonAutoregressiveModel": CTCNonAutoregressiveModel,
    "Tagger": Tagger,
    "SequenceClassifier": SequenceClassifier,
}
# Positional encodings a model config's ``positional`` may name (a ``_partial_`` factory
# that the model calls with d_model, n_heads, max_len and causal).
POSITIONALS: dict[str, type[torch.nn.Module]] = {
    "SinusoidalPositionalEncoding": SinusoidalPositionalEncoding,
    "LearnedPositionalEncoding": LearnedPositionalEncoding,
    "RelativePositionBias": RelativePositionBias,
    "NoPositionalEncoding": NoPositionalEncoding,
}
_POSITIONAL_SUPPLIED = {"d_model", "n_heads", "max_len", "causal"}
# Pooling steps a classifier config's ``pooling`` may name (a ``_partial_`` factory that the
# model calls with d_model and n_heads).
POOLINGS: dict[str, type[torch.nn.Module]] = {
    "ClsPooling": ClsPooling,
    "MeanPooling": MeanPooling,
    "AttentionPooling": AttentionPooling,
}
_POOLING_SUPPLIED = {"d_model", "n_heads"}
# The keys of a model config that hold a factory, with what may fill them and what the model
# supplies; a key is a factory only for classes that name it without a type (the tagger's
# ``pooling`` is a string).
_FACTORIES = {"positional": (POSITIONALS, _POSITIONAL_SUPPLIED), "pooling": (POOLINGS, _POOLING_SUPPLIED)}


def _factory_keys(cls: type) -> list[str]:
    params = inspect.signature(cls.__init__).parameters
    return [k for k in _FACTORIES if k in params and params[k].annotation is inspect.Parameter.empty]


def registered(target: Any, registry: Mapping[str, type], where: str) -> type:
    """The class that ``target`` (a ``_target_`` string) names in ``registry``, looked up by
    name only; any other value is refused."""
    if isinstance(target, str):
        module, _, name = target.rpartition(".")
        cls = registry.get(name)
        if cls is not None and module in ("", "transformer.models", "transformer.modules.positional", cls.__module__):
            return cls
    raise HyperparameterError(f"{where}._target_={show(target)}: not one of the project's classes "
                              f"({', '.join(registry)})")


def _plain(cfg: Any) -> Any:
    if isinstance(cfg, (DictConfig, ListConfig)):
        return OmegaConf.to_container(cfg, resolve=True)
    return cfg


def _factory(value: Any, key: str, where: str):
    """``None`` or a ``_partial_`` factory of a class registered for ``key`` (positional
    encoding, pooling); the arguments the model supplies may not be set here."""
    if value is None:
        return None
    registry, supplied = _FACTORIES[key]
    if not isinstance(value, Mapping) or value.get("_partial_") is not True:
        raise HyperparameterError(f"{where}={show(value)}: expected null or "
                                  f"{{_target_: <{key} class>, _partial_: true}}")
    cls = registered(value.get("_target_"), registry, where)
    kwargs = {k: v for k, v in value.items() if k not in ("_target_", "_partial_")}
    find_hydra_keys(kwargs, where)
    check_arguments(where, kwargs, cls.__init__, skip={"self"} | supplied)
    bad = supplied & set(kwargs)
    if bad:
        raise HyperparameterError(f"{where}.{sorted(bad)[0]}: set by the model, not by its {key} class")
    return functools.partial(cls, **kwargs)


def _cross_checks(cfg: Mapping[str, Any], where: str) -> None:
    """What no single value shows: heads divide the width, special ids fit the vocabulary,
    the weights fit in memory."""
    d_model, n_heads = cfg.get("d_model"), cfg.get("n_heads")
    if isinstance(d_model, int) and isinstance(n_heads, int):
        try:
            head_width(d_model, n_heads)  # the model's own rule, asked before the model is built
        except (ValueError, ZeroDivisionError):
            raise HyperparameterError(f"{where}.n_heads={n_heads}: must divide {where}.d_model={d_model}") from None
    vocab = max(v for v in (cfg.get("vocab_size"), cfg.get("tgt_vocab_size"), 0) if isinstance(v, int))
    for key in ("pad_id", "mask_id", "blank_id"):
        value = cfg.get(key)
        if vocab and isinstance(value, int) and value >= vocab:
            raise HyperparameterError(f"{where}.{key}={value}: not an id of a {vocab}-piece vocabulary")
    if isinstance(d_model, int):
        layers = sum(cfg.get(k) or 0 for k in ("n_layers", "n_encoder_layers", "n_decoder_layers"))
        d_ff = cfg.get("d_ff") or 4 * d_model
        elements = d_model * (vocab + (cfg.get("max_len") or 0)) + layers * (4 * d_model + 2 * d_ff) * d_model
        if elements > MAX_ELEMENTS:
            raise HyperparameterError(f"{where}: d_model={d_model}, d_ff={d_ff}, {layers} layers and "
                                      f"max_len={cfg.get('max_len')} need about {elements:.1e} weights: too large")


def check_model_config(model_cfg: Any, where: str = "model", complete: bool = True) -> tuple[type, dict]:
    """``(class, kwargs)`` for a model config, every key checked (see the module docstring).

    ``complete=False`` checks what is there and leaves out the values that only the data
    knows (vocabulary sizes, special ids), as training does before the data is read.
    """
    cfg = _plain(model_cfg)
    if not isinstance(cfg, Mapping):
        raise HyperparameterError(f"{where}={show(cfg)}: expected a model config (a mapping with _target_)")
    cls = registered(cfg.get("_target_"), MODELS, where)
    kwargs = {k: v for k, v in cfg.items() if k != "_target_"}
    keys = _factory_keys(cls)
    factories = {key: _factory(kwargs.pop(key, None), key, f"{where}.{key}") for key in keys}
    find_hydra_keys(kwargs, where)
    check_arguments(where, kwargs, cls.__init__, skip={"self", *keys}, complete=complete)
    _cross_checks(kwargs, where)
    kwargs.update({key: f for key, f in factories.items() if f is not None})
    return cls, kwargs


def build_model(model_cfg: Any, **injected: Any) -> torch.nn.Module:
    """Build a model from its resolved config (``_target_`` + hyperparameters), adding what
    only the data knows (vocabulary sizes, special ids): a registered class, called with
    checked values only."""
    cfg = _plain(model_cfg)
    if isinstance(cfg, Mapping):
        cfg = {k: v for k, v in cfg.items() if v is not None or k not in injected}
        cfg.update({k: v for k, v in injected.items() if v is not None})
    cls, kwargs = check_model_config(cfg)
    return cls(**kwargs)
