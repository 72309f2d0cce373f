"""Checking a config and building from it: the one place configs become modules (the model),
optimizers with their learning-rate schedules, and task classes.

A model config is data, whether it comes from ``conf/model/`` or from a checkpoint's
``hyper_parameters``: a flat mapping whose ``_target_`` is looked up in :data:`MODELS`, a
registry of the project's own model classes, and nothing it names is ever imported or called.
Every other key is a field of the class's config dataclass (``config_class``:
``models.transformer.TransformerConfig`` and its kin), checked against the type and range the
field declares (``models.transformer.hp``) before the config is built and the class called.

The checks treat a checkpoint's ``hyper_parameters`` and a config file alike, as untrusted
input: every value must be of its declared type and inside its range, and no key may name
something to import or call (``_target_`` outside the model registry, ``_args_``,
``_recursive_`` ...). A violation is a :class:`HyperparameterError` naming the key on one line.
The task settings of a checkpoint (``tasks/checkpoint.py``) and the config groups of a training
run (``cli/train.py``) are checked with the same functions, against the callee's signature: each
parameter's type, and the range it declares beside it (``Annotated[int, Range(0, 2**40)]``,
``transformer.ranges``). Types are validated by pydantic, strictly, as the data a YAML file or a
checkpoint holds.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import math
import types
import typing
from typing import Any, Iterable, Mapping

import torch
from omegaconf import DictConfig, ListConfig, OmegaConf

from transformer.models import (CTCNonAutoregressiveModel, EncoderDecoder, JointCTCEncoderDecoder,
                                NonAutoregressiveModel, Tagger)
from transformer.models.classifier import SequenceClassifier
from transformer.models.cnn import ConvClassifier
from transformer.models.mlm import ElectraModel, MaskedLanguageModel
from transformer.models.nodes import NodeClassifier
from transformer.models.pooling import AttentionPooling, ClsPooling, FirstPooling, MeanPooling
from transformer.modules.attention import head_width
from transformer.modules.frontends import ConvSubsampling, LaplacianNodeFeatures, NodeFeatures, PatchEmbedding
from transformer.modules.positional import (
    LearnedPositionalEncoding,
    NoPositionalEncoding,
    RelativePositionBias,
    SinusoidalPositionalEncoding,
)
from transformer.ranges import (
    HyperparameterError,
    Probability,
    Range,
    check_arguments,
    check_bounds,
    check_fields,
    declared,
    fits,
    range_of,
    show,
    type_name,
    unannotated,
    within,
)


# ----------------------------------------------------------------------------- checking hyperparameters as data
# A setting declares its type and range once, where it is taken (``transformer.ranges``): a task's
# or a data module's constructor parameter as ``Annotated[int, Range(0, 2**40)]``, a model config
# field as ``hp(512, within=Range(1, 2**16))``. The checks below read that declaration.
# Keys that make Hydra import or call something; never data.
HYDRA_KEYS = {"_target_", "_partial_", "_args_", "_recursive_", "_convert_"}
# At most this many weight and table elements (about 16 GB in float32): past it, a size is a typo.
MAX_ELEMENTS = 4 * 10**9
def model_fields(cls: type) -> dict[str, dataclasses.Field]:
    """The hyperparameters of a registered model class by name: its config dataclass's fields
    (each with its ``default``, ``MISSING`` where the data must supply it)."""
    return {f.name: f for f in dataclasses.fields(cls.config_class)}


def check_config_types(node: Any, where: str) -> None:
    """A config node with a ``_target_`` (before instantiation) against the target's annotated
    signature: a number inside the range its parameter declares, and a key annotated with plain
    scalar types (``int``, ``float | None`` ...) of those types. Interpolations and richer
    annotations are left to the target (a task's settings to :func:`check_task_config`). This runs
    before any data is prepared, so a typo costs no time."""
    from omegaconf import DictConfig, OmegaConf

    if not isinstance(node, DictConfig) or "_target_" not in node:
        return
    try:
        import hydra.utils

        target = hydra.utils.get_object(node._target_)
        hints = typing.get_type_hints(target.__init__ if isinstance(target, type) else target, include_extras=True)
    except Exception:  # an unknown target is reported by instantiate itself
        return
    scalars = (int, float, bool, str, type(None))
    for key in node:
        if key.startswith("_") or OmegaConf.is_interpolation(node, key):
            continue
        check_bounds(where, key, node[key], range_of(hints.get(key)))
        hint = unannotated(hints.get(key))
        plain = hint in scalars or (typing.get_origin(hint) in (typing.Union, types.UnionType)
                                    and all(a in scalars for a in typing.get_args(hint)))
        if plain and not fits(node[key], hint):
            raise HyperparameterError(f"{where}.{key}={node[key]!r}: expected {type_name(hint)}")


def find_hydra_keys(node: Any, where: str) -> None:
    """Refuse a Hydra instruction key (``_target_`` ...) anywhere under ``node``."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key in HYDRA_KEYS:
                raise HyperparameterError(f"{where}.{key}={show(value)}: a config key that names code to run is "
                                          f"not allowed here")
            find_hydra_keys(value, f"{where}.{key}")
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            find_hydra_keys(value, f"{where}[{i}]")


# ----------------------------------------------------------------------------- the model registry, and building
# The model classes a config or checkpoint may name, by class name. A config's ``_target_``
# is the name itself, ``transformer.models.<name>`` or the class's full module path.
# Adding a model class is one line here.
MODELS: dict[str, type[torch.nn.Module]] = {
    "EncoderDecoder": EncoderDecoder,
    "JointCTCEncoderDecoder": JointCTCEncoderDecoder,
    "NonAutoregressiveModel": NonAutoregressiveModel,
    "CTCNonAutoregressiveModel": CTCNonAutoregressiveModel,
    "Tagger": Tagger,
    "SequenceClassifier": SequenceClassifier,
    "ConvClassifier": ConvClassifier,
    "MaskedLanguageModel": MaskedLanguageModel,
    "ElectraModel": ElectraModel,
    "NodeClassifier": NodeClassifier,
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
    "FirstPooling": FirstPooling,
    "MeanPooling": MeanPooling,
    "AttentionPooling": AttentionPooling,
}
_POOLING_SUPPLIED = {"d_model", "n_heads"}
# Input front ends a model config's ``frontend`` may name (``transformer.kinds``: one per input
# kind other than text; a ``_partial_`` factory that the encoder calls with d_model).
FRONTENDS: dict[str, type[torch.nn.Module]] = {"ConvSubsampling": ConvSubsampling, "PatchEmbedding": PatchEmbedding,
                                               "NodeFeatures": NodeFeatures, "LaplacianNodeFeatures": LaplacianNodeFeatures}
# The model config fields that hold a factory (declared with ``hp(factory=True)``), with what
# may fill them and what the model supplies (the tagger's ``pooling`` is a plain string field).
_FACTORIES = {"positional": (POSITIONALS, _POSITIONAL_SUPPLIED), "pooling": (POOLINGS, _POOLING_SUPPLIED),
              "frontend": (FRONTENDS, {"d_model"})}


def _factory_keys(cls: type) -> list[str]:
    return [k for k in model_fields(cls) if declared(cls.config_class, k).get("factory")]


def registered(target: Any, registry: Mapping[str, type], where: str) -> type:
    """The class that ``target`` (a ``_target_`` string) names in ``registry``, looked up by
    name only; any other value is refused."""
    if isinstance(target, str):
        module, _, name = target.rpartition(".")
        cls = registry.get(name)
        if cls is not None and module in ("", "transformer.models", "transformer.modules.positional",
                                          "transformer.modules.frontends", cls.__module__):
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
    """``(class, kwargs)`` for a model config, every key checked (see the module docstring);
    ``class(class.config_class(**kwargs))`` is the model.

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
    check_fields(where, kwargs, cls.config_class, skip=set(keys), complete=complete)
    _cross_checks(kwargs, where)
    kwargs.update({key: f for key, f in factories.items() if f is not None})
    return cls, kwargs


def build_model(model_cfg: Any, **injected: Any) -> torch.nn.Module:
    """Build a model from its resolved flat config (``_target_`` + hyperparameters), adding
    what only the data knows (vocabulary sizes, special ids): a registered class, called with
    its config dataclass made of checked values only."""
    cfg = _plain(model_cfg)
    if isinstance(cfg, Mapping):
        cfg = {k: v for k, v in cfg.items() if v is not None or k not in injected}
        cfg.update({k: v for k, v in injected.items() if v is not None})
    cls, kwargs = check_model_config(cfg)
    return cls(cls.config_class(**kwargs))

def position_limit(model_cfg: Any) -> int | None:
    """The most pieces one row may hold for the model ``model_cfg`` builds: the rows of its
    learned position table, less the padding rows before its first position (RoBERTa's) and the
    position a ``[CLS]`` pooling puts before the tokens; None where positions are computed and
    fit any length."""
    cls, kwargs = check_model_config(model_cfg, complete=False)
    positional, pooling = kwargs.get("positional"), kwargs.get("pooling")
    if not isinstance(positional, functools.partial) or positional.func is not LearnedPositionalEncoding:
        return None
    field = model_fields(cls).get("max_len")
    max_len = kwargs.get("max_len", field.default if field is not None else None)
    if not isinstance(max_len, int):
        return None
    added = 1 if isinstance(pooling, functools.partial) and pooling.func is ClsPooling else 0
    return max_len - int(positional.keywords.get("first_position") or 0) - added


# ----------------------------------------------------------------------------- the optimizers
# A task's ``optimizer`` setting is a ``_partial_`` node, as Hydra writes a factory::
#
#     optimizer: {_target_: torch.optim.Adam, _partial_: true, betas: [0.9, 0.98], eps: 1.0e-9, weight_decay: 0.0}
#
# The task calls it with its parameters and its learning rate (``task.lr``, which stays a task
# setting beside ``task.warmup_steps``: the schedule and layer-wise decay read it too). The node
# travels in the checkpoint's ``hyper_parameters``, so it is data like the model config: its
# ``_target_`` is looked up by class name in :data:`OPTIMIZERS`, never imported, and every other key
# is one of the optimizer's own settings, type- and range-checked (:data:`SETTINGS`).
# The optimizer classes a config or checkpoint may name, by class name. Adding one is a line here
# (and its settings below, if it takes others).
OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {"Adam": torch.optim.Adam, "AdamW": torch.optim.AdamW}

# The settings a node may give besides _target_ and _partial_, each with its range (torch's own
# classes, so declared here); the task supplies the parameters, ``lr`` and ``fused``.
SETTINGS: dict[str, Range] = {"eps": Range(0.0, 1.0), "weight_decay": Range(0.0, 100.0)}
BETA_RANGE = Probability()  # each of the two, 0 <= beta < 1


def optimizer_node(name: str, betas: Iterable[float], eps: float, weight_decay: float) -> dict[str, Any]:
    """The node for ``OPTIMIZERS[name]`` with these settings, as a config file writes it."""
    return {"_target_": f"torch.optim.{name}", "_partial_": True, "betas": [float(b) for b in betas],
            "eps": eps, "weight_decay": weight_decay}


def _finite_number(value: Any) -> bool:
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
                  and all(_finite_number(b) and within(BETA_RANGE, b) for b in value))
            if not ok:
                raise HyperparameterError(f"{where}.betas={show(value)}: expected two numbers, each 0 <= beta < 1")
        elif key == "amsgrad":
            if not isinstance(value, bool):
                raise HyperparameterError(f"{where}.amsgrad={show(value)}: expected true or false")
        elif key in SETTINGS:
            declared = SETTINGS[key]
            if not (_finite_number(value) and within(declared, value)):
                raise HyperparameterError(f"{where}.{key}={show(value)}: expected a number from {declared.lo} to "
                                          f"{declared.hi}")
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


# ----------------------------------------------------------------------------- learning-rate schedules
# Stepped once per optimizer update; the encoder tasks' optimizer (tagging, classification,
# masked LM) is built with its schedule by :func:`optimizer_with_warmup`.

# The encoder tasks' optimizer when their config names none: AdamW (Loshchilov & Hutter 2019),
# as BERT fine-tuning uses it.
ADAMW = optimizer_node("AdamW", betas=(0.9, 0.98), eps=1e-8, weight_decay=0.01)


def inverse_sqrt_factor(step: int, warmup_steps: int) -> float:
    """Linear warm-up to 1 over ``warmup_steps`` updates, then decay as ``sqrt(warmup/step)``.

    This is the schedule of Vaswani et al. 2017 (eq. 3) with the peak rate factored out, so
    the configured ``lr`` is the peak learning rate. ``step`` counts completed updates.
    """
    step = step + 1
    if warmup_steps <= 0:
        return 1.0 / math.sqrt(step)
    return min(step / warmup_steps, math.sqrt(warmup_steps / step))


def inverse_sqrt_schedule(
    optimizer: torch.optim.Optimizer, warmup_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """A LambdaLR applying :func:`inverse_sqrt_factor` to every parameter group."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: inverse_sqrt_factor(step, warmup_steps)
    )


def warmup_linear_factor(step: int, warmup_steps: int, total_steps: int) -> float:
    """Linear warm-up to 1 over ``warmup_steps`` updates, then linear decay to 0 at
    ``total_steps`` (the BERT fine-tuning schedule, Devlin et al. 2019): with a fixed small
    epoch budget this ends training at a low rate instead of inverse-sqrt's long tail."""
    step = step + 1
    if step <= warmup_steps:
        return step / max(1, warmup_steps)
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))


def total_steps(trainer) -> int:
    """The optimizer steps a run will take (Lightning's estimate), or a very large number when
    there is no trainer yet or the run is bounded by time alone."""
    if trainer is None:
        return 10**9
    total = trainer.estimated_stepping_batches
    return int(total) if total is not None and math.isfinite(total) else 10**9


class RunLength:
    """The run's optimizer steps (:func:`total_steps`), asked of the trainer only once the
    warm-up is over. Asking sooner, from ``configure_optimizers``, makes Lightning build the
    training loader before a resumed run has restored its position in the epoch, and the
    resumed run would then start the epoch from its first batch again. ``warmup_steps``: a
    number of updates, or a :class:`WarmupLength`."""

    def __init__(self, trainer, warmup_steps: "int | WarmupLength"):
        self.trainer, self.warmup_steps, self.value = trainer, warmup_steps, None

    def __call__(self, step: int) -> int:
        warmup = self.warmup_steps(step) if callable(self.warmup_steps) else self.warmup_steps
        if step + 1 <= warmup:
            return 1  # the warm-up's factor does not depend on it
        if self.value is None:
            self.value = total_steps(self.trainer)
        return self.value


class WarmupLength:
    """The warm-up's updates: ``steps``, or with ``fraction`` set that share of the run's
    updates (:func:`total_steps`, at least one): ``task.warmup=0.06`` warms up over 6 % of the
    run whatever its epochs, batch size and data (BERT's fine-tuning recipes warm up over
    6–10 % of them), where a fixed count can outlast a short run.

    A fresh run asks the trainer when the schedule is built; a resumed one only at its first
    update after the restore (as :class:`RunLength` does, for the same reason), its restored
    optimizer holding the rate until then."""

    def __init__(self, trainer, steps: int, fraction: float | None = None):
        self.trainer, self.steps, self.fraction, self.value = trainer, int(steps), fraction, None

    def __call__(self, step: int) -> int:
        if self.fraction is None:
            return self.steps
        if self.value is None:
            if step == 0 and getattr(self.trainer, "ckpt_path", None):
                return 1  # the factor built before a resumed run's state replaces it
            self.value = max(1, round(self.fraction * total_steps(self.trainer))) if self.fraction > 0 else 0
        return self.value


def layer_decay_groups(module: torch.nn.Module, lr: float, decay: float) -> list[dict]:
    """Parameter groups for layer-wise learning-rate decay (Clark et al. 2020, ELECTRA; used to
    fine-tune BERT-style encoders): the encoder's layer ``i`` of ``L`` trains at
    ``lr * decay ** (L - i)``, its embedding and positions at ``lr * decay ** (L + 1)``, and
    everything above the layers (the final norm, the heads) at ``lr``; pretrained lower layers
    hold general features and move least. The first group is the top one (what ``lr`` logs);
    ``decay`` 1.0 is one group at ``lr``. The encoder is ``module.model.encoder``, with its
    ``layers``."""
    params = [p for p in module.parameters() if p.requires_grad]
    encoder = getattr(module.model, "encoder", None)  # a convolutional classifier has none
    if decay == 1.0 or encoder is None or not hasattr(encoder, "layers"):
        return [{"params": params, "lr": lr}]
    n = len(encoder.layers)
    depth = {id(p): n + 1 for p in params}  # above the layers unless found below
    for p in encoder.parameters():
        depth[id(p)] = 0
    for i, layer in enumerate(encoder.layers):
        for p in layer.parameters():
            depth[id(p)] = i + 1
    for p in encoder.final_norm.parameters():
        depth[id(p)] = n + 1
    groups = []
    for d in range(n + 1, -1, -1):
        members = [p for p in params if depth[id(p)] == d]
        if members:
            groups.append({"params": members, "lr": lr * decay ** (n + 1 - d)})
    return groups


def optimizer_with_warmup(module: torch.nn.Module, hp, trainer) -> dict:
    """The optimizer ``hp.optimizer`` names (``module.default_optimizer`` when None) over
    ``module``'s parameters with a per-step schedule, as ``configure_optimizers`` returns it:
    ``hp.schedule`` ``"linear"`` (warm-up, then linear decay to zero at the run's last step) or
    else the inverse square root after the warm-up, whose length is ``hp.warmup_steps`` updates
    or, where the task has ``hp.warmup`` set, that fraction of the run (:class:`WarmupLength`);
    ``hp.layer_decay`` (where the task has it) below 1 gives lower encoder layers smaller rates
    (:func:`layer_decay_groups`)."""
    groups = layer_decay_groups(module, hp.lr, float(hp.get("layer_decay", 1.0)))
    optimizer = build_optimizer(groups, hp.optimizer or module.default_optimizer, hp.lr)
    warmup = WarmupLength(trainer, hp.warmup_steps, hp.get("warmup"))
    if hp.schedule == "linear":
        total = RunLength(trainer, warmup)
        fn = lambda step: warmup_linear_factor(step, warmup(step), total(step))  # noqa: E731
    else:
        fn = lambda step: inverse_sqrt_factor(step, warmup(step))  # noqa: E731
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, fn)
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


# ----------------------------------------------------------------------------- the tasks
# Which LightningModule a checkpoint belongs to, by the "transformer_task" key it carries.
TASKS = {
    "translation": "transformer.tasks.translation:TranslationTask",
    "nat": "transformer.tasks.nat:NATTranslationTask",
    "nat_ctc": "transformer.tasks.ctc:CTCTranslationTask",
    "tagging": "transformer.tasks.tagging:TaggingTask",
    "classification": "transformer.tasks.classification:ClassificationTask",
    "mlm": "transformer.tasks.mlm:MaskedLMTask",
    "node_classification": "transformer.tasks.nodes:NodeClassificationTask",
}


def task_class(name: str):
    """The LightningModule class registered under ``name``."""
    module, _, attr = TASKS[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def constructor_chain(cls: type) -> list:
    """The ``__init__`` functions that take ``cls``'s settings: its own, and while one passes
    ``**kwargs`` on to its base class, the base's (a translation task names its own settings and
    passes the shared ones to ``Seq2SeqTask``)."""
    chain = []
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        chain.append(init)
        if not any(p.kind is p.VAR_KEYWORD for p in inspect.signature(init).parameters.values()):
            break
    return chain


def task_parameters(cls: type) -> list[str]:
    """Every setting ``cls(...)`` takes by name (:func:`constructor_chain`)."""
    names: list[str] = []
    for init in constructor_chain(cls):
        names += [k for k, p in inspect.signature(init).parameters.items()
                  if k != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and k not in names]
    return names


def check_task_settings(cls: type, settings: dict[str, Any], where: str) -> None:
    """A task's settings (a checkpoint's ``hyper_parameters`` or a config's ``task`` block, each
    without its model and ``_target_``): the optimizer node against :data:`OPTIMIZERS`, every
    other key a parameter of the task's constructors (:func:`constructor_chain`) whose value fits
    its annotation and range, and nothing anywhere that names code to run."""
    known = task_parameters(cls)
    unknown = [k for k in settings if k not in known]
    if unknown:
        raise HyperparameterError(f"{where}.{unknown[0]}: unknown key (known: {', '.join(sorted(known))})")
    rest = {k: v for k, v in settings.items() if k != "optimizer"}
    find_hydra_keys(rest, where)
    if settings.get("optimizer") is not None:
        check_optimizer(settings["optimizer"], f"{where}.optimizer")
    for init in constructor_chain(cls):
        params = inspect.signature(init).parameters
        own = {k: v for k, v in rest.items() if k in params and params[k].kind is not params[k].VAR_KEYWORD}
        check_arguments(where, own, init, skip={"self"}, complete=False)
        rest = {k: v for k, v in rest.items() if k not in own}


def check_task_config(node: Any, where: str = "task") -> None:
    """A config's ``task`` block, before any data is read: for a task of :data:`TASKS` (named by
    its ``_target_``), :func:`check_task_settings` over every key but ``_target_``; vocabulary
    sizes, special ids and tokenizers come from the data later."""
    from omegaconf import DictConfig, OmegaConf

    if not isinstance(node, DictConfig):
        return
    names = {path.replace(":", "."): name for name, path in TASKS.items()}
    name = names.get(node.get("_target_"))
    if name is None:
        return
    settings = OmegaConf.to_container(node, resolve=True)
    settings.pop("_target_")
    check_task_settings(task_class(name), settings, where)
