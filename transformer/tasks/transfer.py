"""Fine-tuning from a pretrained encoder: ``transformer-train ... init_from=<mlm checkpoint>``,
or ``init_from=hf:<folder>``, a BERT-family folder read as a masked-LM checkpoint of ours
(``hub.mlm_checkpoint``: its switches in the model config, its tokenizer beside the weights).

The tagger, the classifier and the translation model name their encoder ``encoder``, as the
masked language model does (``models.mlm``), so the pretrained weights move by name: the
embedding, the positional encoding, the layers and the final norm (:func:`copy_encoder`);
everything else (heads, pooling, the character encoder, a translation decoder) starts fresh.
Further pretraining (``experiment=pretrain init_from=...``: a masked LM started from a masked
LM) copies the whole model instead, the head included (:func:`copy_model`), so its first step
predicts as the pretrained model does; the head's switches (:data:`HEAD_KEYS`) are then matched
and taken like the encoder's.
The pretrained tokenizer comes along (training's data module reads the text with it), so the
fine-tuned checkpoint carries it like any other and needs nothing of the pretrained one.

:func:`check_init_from` runs with training's other checks, before any data is read: the
checkpoint must be a masked-LM one, and the encoder settings that shape or drive its weights
(:data:`ENCODER_KEYS`, and the vocabulary) must be the configured model's. Those the command
line leaves to the preset are first taken from the checkpoint (:func:`encoder_settings_to_take`),
as a model loaded "from pretrained" takes its configuration; one the command line sets to
another value is a mismatch: one ``ValueError`` starting ``init_from:`` and naming both values.

A translation checkpoint (ours, or ``init_from=hf:<folder>``: a Marian folder read by
``hub.translation_checkpoint``) starts the whole encoder-decoder instead (:func:`copy_pretrained`):
every setting of its model but the dropout (:func:`model_settings_to_take`), its vocabularies,
special ids (the decoder's start among them) and both tokenizers, which training's data module
reads the text with. Marian's SentencePiece vocabularies take no ``<2xx>`` target tags, so such a
model starts one direction: ``data.pairs`` is refused naming it.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Collection, Mapping

import torch

from transformer import kinds
from transformer.data.core.tokenizer import is_sentencepiece
from transformer.data.parallel.languages import Languages
from transformer.tasks.build import POSITIONALS, check_model_config, model_fields, show
from transformer.tasks.checkpoint import missing_tokenizers, tokenizers_entry

#: Encoder settings a fine-tuned model must share with the pretrained one (the translation
#: model's ``n_encoder_layers`` is its ``n_layers``): its shape, and the switches a pretrained
#: family reads with (``hub.families``: BERT's LayerNorm epsilon, its embedding LayerNorm, its
#: unscaled embeddings, its token types, its learned position table's rows).
ENCODER_KEYS = ("d_model", "n_heads", "n_layers", "d_ff", "norm_first", "activation", "positional",
                "norm_eps", "scale_embeddings", "embedding_norm", "type_vocab_size", "max_len")
#: The masked-LM head's switches (``models.mlm.MLMConfig``), matched too where a masked LM starts
#: from a masked LM: BERT's transform, RoBERTa's GELU whatever ``hidden_act`` says, the tied
#: projection and its bias.
HEAD_KEYS = ("head_transform", "head_activation", "tie_output", "output_bias")
_ALIASES = {"n_layers": ("n_layers", "n_encoder_layers")}
PREFIX = "model.encoder."


def whole_model(model_cfg: Mapping[str, Any], ckpt: dict) -> bool:
    """Whether ``init_from`` starts the whole model, not only its encoder: a masked LM from a
    masked LM (:func:`copy_model`) that has its head (``hub.mlm_checkpoint``'s ``encoder_only``:
    a Hugging Face encoder without one starts the encoder, the head fresh)."""
    from transformer.models.mlm import MaskedLanguageModel

    def cls(cfg: Mapping[str, Any], where: str) -> type:
        return check_model_config(dict(cfg), where, complete=False)[0]

    return (kinds.task_kind(ckpt) is kinds.MLM and not ckpt.get("encoder_only")
            and cls(model_cfg, "model") is MaskedLanguageModel
            and cls(ckpt["hyper_parameters"]["model"], "init_from.model") is MaskedLanguageModel)


def _settings(model_cfg: Mapping[str, Any], where: str, keys: tuple[str, ...] = ENCODER_KEYS
              ) -> dict[str, tuple[str, Any]]:
    """``{key: (the config's own name for it, value)}`` of ``keys``, the model class's defaults
    filled in; a positional encoding as ``{class name, its arguments}``."""
    cls, kwargs = check_model_config(dict(model_cfg), where, complete=False)
    params = model_fields(cls)
    out = {}
    for key in keys:
        name = next((n for n in _ALIASES.get(key, (key,)) if n in params), key)
        value = model_cfg.get(name, params[name].default if name in params else None)
        if key == "positional":
            value = _positional(value)
        out[key] = (name, value)
    return out


def _positional(value: Mapping[str, Any] | None) -> dict[str, Any]:
    """A positional-encoding config as its class name and every argument it sets, defaults
    filled in (``None`` is the sinusoidal encoding)."""
    value = dict(value or {"_target_": "SinusoidalPositionalEncoding"})
    value.pop("_partial_", None)
    name = str(value.pop("_target_")).rsplit(".", 1)[-1]
    params = inspect.signature(POSITIONALS[name].__init__).parameters
    defaults = {k: p.default for k, p in params.items()
                if k not in ("self", "d_model", "n_heads", "max_len", "causal") and p.default is not p.empty}
    return {"_target_": name, **defaults, **value}


def _matched(model_cfg: Mapping[str, Any], ckpt: dict) -> tuple[str, ...]:
    """The settings ``init_from`` matches: the encoder's, and the head's for a whole masked LM."""
    return ENCODER_KEYS + HEAD_KEYS if whole_model(model_cfg, ckpt) else ENCODER_KEYS


def _keys(theirs: Mapping[str, tuple[str, Any]]) -> tuple[str, ...]:
    """The settings of ``theirs`` to match: ``max_len`` only where the pretrained positions are a
    learned table (its rows); a computed one fits any length."""
    learned = theirs["positional"][1]["_target_"] == "LearnedPositionalEncoding"
    return tuple(k for k in theirs if learned or k != "max_len")


def encoder_settings_to_take(ckpt: dict, model_cfg: Mapping[str, Any], named: Collection[str]) -> dict[str, Any]:
    """The pretrained encoder's settings (:data:`ENCODER_KEYS`, and :data:`HEAD_KEYS` for a whole
    masked LM) that differ from ``model_cfg``'s and that the command line does not set (``named``:
    the ``model.<key>`` names it sets), as ``{the model config's name for it: the pretrained value}``."""
    raw = ckpt["hyper_parameters"]["model"]
    keys = _matched(model_cfg, ckpt)
    theirs = _settings(raw, "init_from.model", keys)
    ours = _settings(model_cfg, "model", keys)
    # A whole masked LM's head switches are written out even where they equal the defaults: the
    # checkpoint of further pretraining then names the family's head as it names its encoder.
    return {ours[key][0]: raw.get(theirs[key][0]) if key == "positional" else theirs[key][1]
            for key in _keys(theirs) if ours[key][0] not in named
            and (theirs[key][1] != ours[key][1] or (key in HEAD_KEYS and key not in model_cfg))}


def check_init_from(ckpt: dict, path: str | Path, model_cfg: Mapping[str, Any],
                    tokenizer_vocab: int | None = None) -> None:
    """Refuse a checkpoint that cannot start this model (see the module docstring);
    ``tokenizer_vocab``: the size of a tokenizer the data config names, which must be the
    pretrained one's."""
    if kinds.task_kind(ckpt) is not kinds.MLM:
        task = ckpt.get("transformer_task")
        raise ValueError(f"init_from: {path} is a {task!r} checkpoint; fine-tuning starts from a masked-LM "
                         f"checkpoint (transformer-train experiment=pretrain) or a translation one (its whole model)")
    check_pretrained_tokenizer(ckpt, path)
    keys = _matched(model_cfg, ckpt)
    theirs = _settings(ckpt["hyper_parameters"]["model"], "init_from.model", keys)
    ours = _settings(model_cfg, "model", keys)
    differ = [key for key in _keys(theirs) if theirs[key][1] != ours[key][1]]
    if differ:
        pretrained = ", ".join(f"{theirs[k][0]}={show(theirs[k][1])}" for k in differ)
        configured = ", ".join(f"model.{ours[k][0]}={show(ours[k][1])}" for k in differ)
        what = "it" if len(differ) == 1 else "them"
        part = "masked LM" if HEAD_KEYS[0] in keys else "encoder"
        raise ValueError(f"init_from: {path} has {pretrained}, but {configured}: the {part} is copied as it is, "
                         f"so set {what} to match or leave {what} off the command line")
    rows = ckpt["state_dict"][PREFIX + "embedding.weight"].shape[0]
    if tokenizer_vocab is not None and tokenizer_vocab != rows:
        raise ValueError(f"init_from: {path} has a {rows}-piece vocabulary, but data.tokenizer_path names a "
                         f"{tokenizer_vocab}-piece tokenizer; leave data.tokenizer_path unset to read with "
                         f"the pretrained tokenizer")


def check_pretrained_tokenizer(ckpt: dict, path: str | Path) -> None:
    """The pretrained checkpoint must carry its tokenizer: fine-tuning reads its data with it, so
    that the copied embedding rows mean the pieces they were trained on."""
    if missing_tokenizers(ckpt, ("src",)):
        raise ValueError(f"init_from: {path} carries no tokenizer ({tokenizers_entry(ckpt, ['src'])}); fine-tuning "
                         f"reads the data with the pretrained tokenizer, so start from a checkpoint as "
                         f"transformer-train experiment=pretrain wrote it")


def pretrained_tokenizer(ckpt: dict) -> str:
    """The tokenizer JSON a masked-LM checkpoint carries."""
    return ckpt["tokenizers"]["src"]


# ----------------------------------------------------------------------------- a whole model
#: Settings a model started from a translation checkpoint may set apart from it: regularisation,
#: which shapes no weight and changes nothing a trained model computes.
TRAINING_ONLY = ("dropout",)
#: What the task's settings must share with the translation checkpoint it starts from.
TASK_IDS = ("vocab_size", "tgt_vocab_size", "pad_id", "bos_id", "eos_id")


def _full(model_cfg: Mapping[str, Any], where: str) -> tuple[type, dict[str, Any]]:
    """The model class and every setting of ``model_cfg``, the class's defaults filled in; a
    positional encoding as ``{class name, its arguments}`` (:func:`_positional`)."""
    import dataclasses

    cls, _ = check_model_config(dict(model_cfg), where, complete=False)
    out = {}
    for name, field in model_fields(cls).items():
        default = None if field.default is dataclasses.MISSING else field.default
        value = model_cfg.get(name, default)
        out[name] = _positional(value) if name == "positional" else value
    return cls, out


def model_settings_to_take(ckpt: dict, model_cfg: Mapping[str, Any], named: Collection[str]) -> dict[str, Any]:
    """A translation checkpoint's model settings (all but :data:`TRAINING_ONLY` and what the data
    gives) that differ from ``model_cfg``'s and that the command line does not set (``named``),
    as ``{key: the pretrained value}``; ``_target_`` included when the classes differ. The
    dropout is taken too unless typed: the pretrained model's rate is where fine-tuning starts."""
    raw = ckpt["hyper_parameters"]["model"]
    theirs_cls, theirs = _full(raw, "init_from.model")
    ours_cls, ours = _full(model_cfg, "model")
    out: dict[str, Any] = {} if theirs_cls is ours_cls else {"_target_": raw.get("_target_")}
    for key, value in theirs.items():
        if value != ours.get(key) and key not in named:
            out[key] = raw.get(key, value)
    return out


def check_translation_init(ckpt: dict, path: str | Path, model_cfg: Mapping[str, Any], task_kind: kinds.TaskKind | None,
                           tokenizer_set: bool, data_cfg: Mapping[str, Any] | None = None) -> None:
    """Refuse a translation checkpoint that cannot start this run: another task than the
    autoregressive one, a model setting (:func:`model_settings_to_take`'s keys) that differs, a
    tokenizer the data config names (the checkpoint's are the ones its weights read), or several
    directions (``data.pairs``) for a model that reads with SentencePiece vocabularies (Marian's),
    which take no ``<2xx>`` target tags."""
    if task_kind is not kinds.TRANSLATION:
        raise ValueError(f"init_from: {path} is a 'translation' checkpoint, which starts a translation model "
                         f"(task: translation), not {task_kind.name if task_kind else None!r}")
    pairs = (data_cfg or {}).get("pairs")
    if pairs is not None and (ckpt["hyper_parameters"].get("data") or {}).get("tag_side") == "codes":
        raise ValueError(f"init_from: {path} frames each sentence with its languages' codes; data.pairs="
                         f"{_listed(pairs)} cannot start from it: train one direction (data.src_lang, "
                         f"data.tgt_lang) without data.pairs")
    if pairs is not None and is_sentencepiece(ckpt["tokenizers"]["src"]):
        tag_side = Languages.of_config(data_cfg).tag_side
        raise ValueError(f"init_from: {path} reads with SentencePiece vocabularies (Marian's), which take no "
                         f"<2xx> target tags: data.pairs={_listed(pairs)}" + (f" with data.tag_side={tag_side}" if
                                                                          tag_side != "source" else "") +
                         " cannot start from it; train one direction (data.src_lang, data.tgt_lang) without "
                         "data.pairs")
    theirs_cls, theirs = _full(ckpt["hyper_parameters"]["model"], "init_from.model")
    ours_cls, ours = _full(model_cfg, "model")
    if theirs_cls is not ours_cls:
        raise ValueError(f"init_from: {path} holds a {theirs_cls.__name__}, but model._target_ builds a "
                         f"{ours_cls.__name__}")
    differ = [k for k, v in theirs.items() if k not in TRAINING_ONLY and v != ours.get(k)]
    if differ:
        pretrained = ", ".join(f"{k}={show(theirs[k])}" for k in differ)
        configured = ", ".join(f"model.{k}={show(ours.get(k))}" for k in differ)
        what = "it" if len(differ) == 1 else "them"
        raise ValueError(f"init_from: {path} has {pretrained}, but {configured}: the whole model is copied as it "
                         f"is, so set {what} to match or leave {what} off the command line")
    if tokenizer_set:
        raise ValueError(f"init_from: {path} carries its own tokenizers, which its weights read; leave "
                         f"data.tokenizer_path unset")


def _listed(value: Any) -> str:
    """A list as the command line writes it (``[en-de,en-fr]``), anything else as it is."""
    return f"[{','.join(map(str, value))}]" if isinstance(value, (list, tuple)) else str(value)


def pretrained_task_settings(ckpt: dict, data_settings: Mapping[str, Any], path: str | Path) -> dict[str, Any]:
    """The task settings a translation checkpoint fixes (:data:`TASK_IDS`: its vocabulary sizes,
    which may exceed its tokenizers' pieces, and its special ids, the decoder's start among them),
    checked against what training's data module found (``data_settings``): the special ids the
    data frames its pairs with must be the ones the model was trained with."""
    hp = ckpt["hyper_parameters"]
    for key in ("pad_id", "bos_id", "eos_id"):
        if data_settings.get(key) != hp[key]:
            raise ValueError(f"init_from: {path} has {key}={hp[key]}, but its tokenizers frame the data with "
                             f"{data_settings.get(key)}")
    return {key: hp.get(key) for key in TASK_IDS}


def _load(module: torch.nn.Module, state: dict[str, torch.Tensor], path: str | Path, what: str,
          rows: int | None = None) -> list[str]:
    """Load ``state`` into ``module`` strictly (every tensor, none left over); returns the names.
    ``rows``: the pretrained vocabulary, checked first against the module's token embedding.
    Every failure is one ``ValueError`` starting ``init_from:`` (``what``: the part that does not fit)."""
    embedding = module.embedding if hasattr(module, "embedding") else module.encoder.embedding
    if rows is not None and rows != embedding.num_embeddings:
        raise ValueError(f"init_from: {path} has a {rows}-piece vocabulary, but the model reads "
                         f"{embedding.num_embeddings} pieces")
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise ValueError(f"init_from: {path}{what}: {' '.join(str(exc).split())[:400]}") from None
    return sorted(state)


def _state(ckpt: dict, prefix: str) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors under ``prefix``, named without it."""
    return {k[len(prefix):]: v for k, v in ckpt["state_dict"].items() if k.startswith(prefix)}


def copy_pretrained(model: torch.nn.Module, ckpt: dict, path: str | Path) -> list[str]:
    """Start a translation ``model`` from a translation checkpoint's whole model (every tensor,
    none left over); returns the names copied."""
    return _load(model, _state(ckpt, "model."), path, " does not fit the model")


def copy_encoder(model: torch.nn.Module, ckpt: dict, path: str | Path) -> list[str]:
    """Copy the pretrained encoder's tensors into ``model.encoder`` (all of them, nothing else
    of ``model``); returns their names. A vocabulary or shape that differs is a ``ValueError``
    starting ``init_from:``."""
    state = _state(ckpt, PREFIX)
    return _load(model.encoder, state, path, "'s encoder does not fit model.encoder", state["embedding.weight"].shape[0])


def copy_model(model: torch.nn.Module, ckpt: dict, path: str | Path) -> list[str]:
    """Copy every tensor of a pretrained masked LM into ``model`` (a masked LM of the same
    settings, :func:`check_init_from`): encoder and head alike; returns their names. A tensor
    that does not fit is a ``ValueError`` starting ``init_from:``."""
    state = _state(ckpt, "model.")
    return _load(model, state, path, "'s masked LM does not fit the model", state["encoder.embedding.weight"].shape[0])


def copy_head(model: torch.nn.Module, ckpt: dict, labels: list[str] | None) -> list[str]:
    """Copy a fine-tuned Hugging Face classifier's head (``hub.init_checkpoint``'s ``head``: a
    sequence classifier's dense layer and label layer, a token classifier's label layer) into
    ``model`` where it has those parts at the same shapes and ``labels`` (the data's, in the
    model's order) are the folder's, in any order: its rows are put in the data's. Returns the
    names copied; none where anything differs (the head then starts fresh)."""
    head = ckpt.get("head")
    if not head or labels is None or sorted(labels) != sorted(head["labels"]):
        return []
    order = torch.tensor([head["labels"].index(label) for label in labels])
    own = dict(model.named_parameters())
    state = {}
    for key, tensor in head["state_dict"].items():
        name = key.removeprefix("model.")
        state[name] = tensor[order] if name.startswith("classifier.") else tensor  # (C, D) / (C,) rows by label
        if name not in own or own[name].shape != state[name].shape:
            return []
    with torch.no_grad():
        for name, tensor in state.items():
            own[name].copy_(tensor)
    return sorted(state)


def start_from(model: torch.nn.Module, model_cfg: Mapping[str, Any], ckpt: dict, path: str | Path) -> list[str]:
    """Copy what ``init_from`` gives ``model``: the whole masked LM into a masked LM, else the
    encoder; returns the names copied."""
    if kinds.task_kind(ckpt) is kinds.TRANSLATION:
        return copy_pretrained(model, ckpt, path)
    if whole_model(model_cfg, ckpt):
        return copy_model(model, ckpt, path)
    return [f"encoder.{k}" for k in copy_encoder(model, ckpt, path)]


__all__ = ["ENCODER_KEYS", "HEAD_KEYS", "TASK_IDS", "TRAINING_ONLY", "check_init_from", "check_translation_init",
           "copy_encoder", "copy_head", "copy_model", "copy_pretrained", "encoder_settings_to_take",
           "model_settings_to_take", "pretrained_task_settings", "pretrained_tokenizer", "start_from", "whole_model"]
