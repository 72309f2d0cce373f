"""The pretrained families read from Hugging Face folders: for each, a translation of its
``config.json`` into our flat masked-LM config and a key map from its tensor names onto our
modules' (nanoGPT's ``from_pretrained`` pattern).

What each family does differently is a switch of our modules (``models.transformer.StackConfig``,
``models.mlm.MLMConfig``, ``modules.positional.LearnedPositionalEncoding``):

=================  ======================  =========================  ============================
switch             BERT                    RoBERTa                    DistilBERT
=================  ======================  =========================  ============================
norm_first         false (post-norm)       false                      false
embedding_norm     true                    true                       true
scale_embeddings   false                   false                      false
type_vocab_size    ``type_vocab_size``     ``type_vocab_size`` (1)    0
first_position     0                       ``pad_token_id + 1``       0
norm_eps           ``layer_norm_eps``      ``layer_norm_eps``         1e-12 (fixed in its code)
head_activation    ``hidden_act``          gelu (fixed in its code)   ``activation``
=================  ======================  =========================  ============================

Marian (the Helsinki-NLP opus-mt translation models) is read onto our ``EncoderDecoder``
(``models.transformer.TransformerConfig``), its two SentencePiece vocabularies onto
``data.core.sentencepiece_tokenizer``:

=====================  ==========================================================================
switch                 Marian
=====================  ==========================================================================
norm_first             false (post-norm; ``normalize_before`` must be false)
scale_embeddings       ``scale_embedding`` (true in the opus-mt models: ×√d_model)
positional             ``SinusoidalPositionalEncoding(layout="halves")``: [sin | cos], from 0
activation             ``activation_function``: swish -> silu, gelu, relu
norm_eps               1e-5 (fixed in its code)
output_bias            true: ``final_logits_bias`` added to the vocabulary scores
mask_target_padding    false: the decoder starts from the padding id
share_embeddings       ``share_encoder_decoder_embeddings``
tie_output             ``tie_word_embeddings``
bos_id (the task's)    ``decoder_start_token_id`` (``pad_token_id`` in the opus-mt models)
=====================  ==========================================================================

A config key that changes what the model computes and has no switch here is refused by name
(:class:`HubError`); the keys in :data:`BOOKKEEPING` describe the file, the initialisation or
heads we do not build, and change nothing the masked LM computes.

Shape legend: V vocabulary, D = d_model, F = d_ff, P position rows, Y token types.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable


class HubError(ValueError):
    """A Hugging Face folder, config key or tensor we cannot read, named on one line."""


#: Keys of a ``config.json`` that do not change what the masked LM computes: the file's own
#: bookkeeping, the initialisation, the run-time switches of ``transformers``, the dropout of heads
#: we do not build, and special ids the tokenizer gives.
BOOKKEEPING = frozenset({
    "architectures", "model_type", "transformers_version", "dtype", "torch_dtype", "_name_or_path",
    "initializer_range", "use_cache", "gradient_checkpointing", "output_past", "return_dict",
    "output_hidden_states", "output_attentions", "torchscript", "chunk_size_feed_forward", "id2label",
    "label2id", "problem_type", "finetuning_task", "tokenizer_class", "prefix", "task_specific_params",
    "classifier_dropout", "qa_dropout", "seq_classif_dropout", "bos_token_id", "eos_token_id",
    "sep_token_id", "cls_token_id", "mask_token_id", "unk_token_id", "decoder_start_token_id",
})
#: Keys accepted only at the value our model computes with; any other value is refused.
MUST_BE = {
    "is_decoder": False, "add_cross_attention": False, "is_encoder_decoder": False, "tie_encoder_decoder": False,
    "position_embedding_type": "absolute", "sinusoidal_pos_embds": False, "pruned_heads": {},
}
#: HF activation names -> ours (``models.transformer.ACTIVATIONS``); HF's "gelu" is the exact erf form.
ACTIVATION_NAMES = {"gelu": "gelu", "relu": "relu"}
#: Marian's activations -> ours: HF's "swish" and "silu" are both x·sigmoid(x).
MARIAN_ACTIVATIONS = {**ACTIVATION_NAMES, "swish": "silu", "silu": "silu"}


def _activation(key: str, value: Any, names: dict[str, str] = ACTIVATION_NAMES) -> str:
    if value not in names:
        raise HubError(f"config.json: {key}={value!r} has no place in our model (activations: "
                       f"{', '.join(names)})")
    return names[value]


class ConfigReader:
    """Takes keys out of a ``config.json`` mapping; :meth:`finish` refuses what is left."""

    def __init__(self, config: dict[str, Any]):
        self.left = dict(config)

    def take(self, key: str, default: Any = None, required: bool = True) -> Any:
        if key not in self.left:
            if required and default is None:
                raise HubError(f"config.json: lacks {key}")
            return default
        return self.left.pop(key)

    def number(self, key: str, default: float) -> float:
        """A number (not a bool, not a string) under ``key``, or ``default``."""
        value = self.take(key, default, required=False)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise HubError(f"config.json: {key}={value!r}: expected a number")
        return float(value)

    def flag(self, key: str, default: bool) -> bool:
        """A JSON true or false under ``key``, or ``default``."""
        value = self.take(key, default, required=False)
        if not isinstance(value, bool):
            raise HubError(f"config.json: {key}={value!r}: expected true or false")
        return value

    def token_id(self, key: str, default: int | None = None, required: bool = True) -> int | None:
        """A token id (an integer from 0) under ``key``, or ``default``."""
        value = self.take(key, default, required=required)
        if value is None and not required:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise HubError(f"config.json: {key}={value!r}: expected a token id (an integer from 0)")
        return value

    def sizes(self, table: tuple[tuple[str, str], ...]) -> dict[str, Any]:
        """Our size fields from a family's table of ``(our key, its key)``; their types and ranges
        are checked against our config's declaration before anything is built
        (``hub.folder``)."""
        return {ours: self.take(theirs) for ours, theirs in table}

    def finish(self) -> None:
        for key, value in self.left.items():
            if key in BOOKKEEPING:
                continue
            if key in MUST_BE:
                if value != MUST_BE[key] and value is not None:
                    raise HubError(f"config.json: {key}={value!r} has no place in our model (we read "
                                   f"{MUST_BE[key]!r})")
                continue
            raise HubError(f"config.json: key {key!r} has no place in our model")


#: Each family's size fields: ``(our config key, its config.json key)``. Reading takes them by
#: this table, the checks name a bad value by its key here, and writing (``export.hf``) inverts it.
BERT_SIZES = (("vocab_size", "vocab_size"), ("d_model", "hidden_size"), ("n_layers", "num_hidden_layers"),
              ("n_heads", "num_attention_heads"), ("d_ff", "intermediate_size"),
              ("max_len", "max_position_embeddings"))
DISTILBERT_SIZES = (("vocab_size", "vocab_size"), ("d_model", "dim"), ("n_layers", "n_layers"), ("n_heads", "n_heads"),
                    ("d_ff", "hidden_dim"), ("max_len", "max_position_embeddings"))
MARIAN_SIZES = (("vocab_size", "vocab_size"), ("d_model", "d_model"), ("n_encoder_layers", "encoder_layers"),
                ("n_decoder_layers", "decoder_layers"), ("n_heads", "encoder_attention_heads"),
                ("d_ff", "encoder_ffn_dim"), ("max_len", "max_position_embeddings"))


def _one_dropout(hidden: float, attention: float, attention_key: str) -> float:
    if attention != hidden:
        raise HubError(f"config.json: {attention_key}={attention} differs from the hidden dropout {hidden}: our "
                       f"model has one dropout rate")
    return float(hidden)


def _positional(first_position: int) -> dict[str, Any]:
    return {"_target_": "LearnedPositionalEncoding", "_partial_": True, "first_position": first_position}


def _common(pad_id: int | None) -> dict[str, Any]:
    """What every family here shares: post-norm layers, a LayerNorm over unscaled input
    embeddings, BERT's head (dense, activation, LayerNorm, projection plus bias)."""
    return {"_target_": "MaskedLanguageModel", "norm_first": False, "embedding_norm": True,
            "scale_embeddings": False, "head_transform": True, "output_bias": True, "pad_id": pad_id}


def bert_config(config: dict[str, Any], roberta: bool = False) -> dict[str, Any]:
    """BERT's (and RoBERTa's) ``config.json`` -> our flat ``MaskedLanguageModel`` config."""
    r = ConfigReader(config)
    pad_id = r.token_id("pad_token_id", 1 if roberta else 0, required=False)
    act = _activation("hidden_act", r.take("hidden_act", "gelu", required=False))
    out = {
        **_common(pad_id), **r.sizes(BERT_SIZES), "activation": act,
        "head_activation": "gelu" if roberta else act,  # RobertaLMHead calls gelu whatever hidden_act says
        "norm_eps": r.number("layer_norm_eps", 1e-12),
        "type_vocab_size": r.take("type_vocab_size", 2, required=False),
        "tie_output": r.flag("tie_word_embeddings", True),
        "positional": _positional(pad_id + 1 if roberta else 0),  # RoBERTa's rows 0..pad are padding's
    }
    hidden = r.number("hidden_dropout_prob", 0.1)
    out["dropout"] = _one_dropout(hidden, r.number("attention_probs_dropout_prob", hidden),
                                  "attention_probs_dropout_prob")
    r.finish()
    return out


def distilbert_config(config: dict[str, Any]) -> dict[str, Any]:
    """DistilBERT's ``config.json`` -> our flat ``MaskedLanguageModel`` config."""
    r = ConfigReader(config)
    act = _activation("activation", r.take("activation", "gelu", required=False))
    tie = r.flag("tie_word_embeddings", True) if "tie_word_embeddings" in config else None
    tie_ = r.flag("tie_weights_", True) if "tie_weights_" in config else None
    out = {
        **_common(r.token_id("pad_token_id", 0, required=False)), **r.sizes(DISTILBERT_SIZES),
        "activation": act, "head_activation": act, "norm_eps": 1e-12, "type_vocab_size": 0,
        "tie_output": True if tie is None and tie_ is None else (tie if tie is not None else tie_),
        "positional": _positional(0),
    }
    hidden = r.number("dropout", 0.1)
    out["dropout"] = _one_dropout(hidden, r.number("attention_dropout", hidden), "attention_dropout")
    r.finish()
    return out


#: Marian keys that only ``generate`` reads (defaults of its search, which ours takes from the
#: decode settings) or that only training with ``transformers`` reads.
MARIAN_BOOKKEEPING = frozenset({
    "forced_eos_token_id", "bad_words_ids", "num_beams", "max_length", "num_hidden_layers", "init_std",
    "classif_dropout", "classifier_dropout", "num_labels", "output_past", "gradient_checkpointing", "use_cache",
})
#: Marian keys accepted only at the value its model computes with here.
MARIAN_MUST_BE = {
    "is_encoder_decoder": True, "normalize_before": False, "add_final_layer_norm": False,
    "normalize_embedding": False, "static_position_embeddings": True, "add_bias_logits": False,
    "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0, "extra_pos_embeddings": None, "is_decoder": False,
    "add_cross_attention": False, "tie_encoder_decoder": False, "pruned_heads": {},
}


def _same(r: ConfigReader, key: str, other: str, default: Any = None) -> Any:
    """The value of ``key``, which must equal ``other``'s (one setting of ours for both stacks)."""
    value = r.take(key, default)
    second = r.take(other, value, required=False)
    if second is not None and second != value:
        raise HubError(f"config.json: {other}={second!r} differs from {key}={value!r}: our encoder and decoder "
                       f"share one value")
    return value


def marian_config(config: dict[str, Any]) -> dict[str, Any]:
    """Marian's ``config.json`` -> our flat ``EncoderDecoder`` config plus the task's special ids
    (``pad_id``, ``bos_id`` = the decoder's start, ``eos_id``) and ``tgt_vocab_size``."""
    r = ConfigReader(config)
    for key, value in MARIAN_MUST_BE.items():
        got = r.take(key, None, required=False)
        if got is not None and got != value and not (value is None and got == 0):
            raise HubError(f"config.json: {key}={got!r} has no place in our model (we read {value!r})")
    for key in MARIAN_BOOKKEEPING:
        r.take(key, None, required=False)
    pad_id = r.token_id("pad_token_id")
    # The opus-mt models start from the padding id; a model of ours written as Marian starts from
    # its own BOS. Either is the task's bos_id (the tokenizer's start must agree: hub.folder).
    start = r.token_id("decoder_start_token_id", pad_id)
    sizes = {ours: (_same(r, theirs, theirs.replace("encoder", "decoder")) if theirs.startswith("encoder_")
                    and not theirs.endswith("layers") else r.take(theirs)) for ours, theirs in MARIAN_SIZES}
    vocab = sizes["vocab_size"]
    tgt_vocab = r.take("decoder_vocab_size", vocab, required=False)
    share = r.flag("share_encoder_decoder_embeddings", True)
    if share and tgt_vocab != vocab:
        raise HubError(f"config.json: decoder_vocab_size={tgt_vocab!r} differs from vocab_size={vocab!r} with shared "
                       f"embeddings")
    dropout = r.number("dropout", 0.1)
    out = {
        "_target_": "EncoderDecoder", "norm_first": False, "embedding_norm": False, "norm_eps": 1e-5,
        "output_bias": True, "mask_target_padding": False, "share_embeddings": share,
        "tie_output": r.flag("tie_word_embeddings", True), "scale_embeddings": r.flag("scale_embedding", False),
        **sizes,
        "activation": _activation("activation_function", r.take("activation_function", "gelu", required=False),
                                  MARIAN_ACTIVATIONS),
        # Training here has one dropout rate: Marian's attention and activation dropouts become it.
        "dropout": dropout,
        "positional": {"_target_": "SinusoidalPositionalEncoding", "_partial_": True, "layout": "halves"},
        "tgt_vocab_size": None if share or tgt_vocab == vocab else tgt_vocab,
        "pad_id": pad_id, "bos_id": start, "eos_id": r.token_id("eos_token_id"),
    }
    for key in ("attention_dropout", "activation_dropout"):
        r.take(key, None, required=False)
    r.finish()
    return out


# ----------------------------------------------------------------------------- key maps
# (pattern on the HF name without the family's prefix, our name under the masked LM). A pattern's
# groups fill the numbered fields of the name.
_BERT_ENCODER = [
    (r"embeddings\.word_embeddings\.weight", "encoder.embedding.weight"),
    (r"embeddings\.position_embeddings\.weight", "encoder.positional.embedding.weight"),
    (r"embeddings\.token_type_embeddings\.weight", "encoder.type_embedding.weight"),
    (r"embeddings\.LayerNorm\.(weight|bias)", "encoder.embedding_norm.{0}"),
    (r"encoder\.layer\.(\d+)\.attention\.self\.query\.(weight|bias)", "encoder.layers.{0}.self_attn.w_q.{1}"),
    (r"encoder\.layer\.(\d+)\.attention\.self\.key\.(weight|bias)", "encoder.layers.{0}.self_attn.w_k.{1}"),
    (r"encoder\.layer\.(\d+)\.attention\.self\.value\.(weight|bias)", "encoder.layers.{0}.self_attn.w_v.{1}"),
    (r"encoder\.layer\.(\d+)\.attention\.output\.dense\.(weight|bias)", "encoder.layers.{0}.self_attn.w_o.{1}"),
    (r"encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\.(weight|bias)", "encoder.layers.{0}.norm_1.{1}"),
    (r"encoder\.layer\.(\d+)\.intermediate\.dense\.(weight|bias)", "encoder.layers.{0}.ffn.w_1.{1}"),
    (r"encoder\.layer\.(\d+)\.output\.dense\.(weight|bias)", "encoder.layers.{0}.ffn.w_2.{1}"),
    (r"encoder\.layer\.(\d+)\.output\.LayerNorm\.(weight|bias)", "encoder.layers.{0}.norm_2.{1}"),
]
_BERT_HEAD = [
    (r"cls\.predictions\.transform\.dense\.(weight|bias)", "head_dense.{0}"),
    (r"cls\.predictions\.transform\.LayerNorm\.(weight|bias)", "head_norm.{0}"),
    (r"cls\.predictions\.decoder\.weight", "output_proj.weight"),
    (r"cls\.predictions\.(?:decoder\.)?bias", "output_bias"),
]
_ROBERTA_HEAD = [
    (r"lm_head\.dense\.(weight|bias)", "head_dense.{0}"),
    (r"lm_head\.layer_norm\.(weight|bias)", "head_norm.{0}"),
    (r"lm_head\.decoder\.weight", "output_proj.weight"),
    (r"lm_head\.(?:decoder\.)?bias", "output_bias"),
]
_DISTILBERT = [
    (r"embeddings\.word_embeddings\.weight", "encoder.embedding.weight"),
    (r"embeddings\.position_embeddings\.weight", "encoder.positional.embedding.weight"),
    (r"embeddings\.LayerNorm\.(weight|bias)", "encoder.embedding_norm.{0}"),
    (r"transformer\.layer\.(\d+)\.attention\.q_lin\.(weight|bias)", "encoder.layers.{0}.self_attn.w_q.{1}"),
    (r"transformer\.layer\.(\d+)\.attention\.k_lin\.(weight|bias)", "encoder.layers.{0}.self_attn.w_k.{1}"),
    (r"transformer\.layer\.(\d+)\.attention\.v_lin\.(weight|bias)", "encoder.layers.{0}.self_attn.w_v.{1}"),
    (r"transformer\.layer\.(\d+)\.attention\.out_lin\.(weight|bias)", "encoder.layers.{0}.self_attn.w_o.{1}"),
    (r"transformer\.layer\.(\d+)\.sa_layer_norm\.(weight|bias)", "encoder.layers.{0}.norm_1.{1}"),
    (r"transformer\.layer\.(\d+)\.ffn\.lin1\.(weight|bias)", "encoder.layers.{0}.ffn.w_1.{1}"),
    (r"transformer\.layer\.(\d+)\.ffn\.lin2\.(weight|bias)", "encoder.layers.{0}.ffn.w_2.{1}"),
    (r"transformer\.layer\.(\d+)\.output_layer_norm\.(weight|bias)", "encoder.layers.{0}.norm_2.{1}"),
    (r"vocab_transform\.(weight|bias)", "head_dense.{0}"),
    (r"vocab_layer_norm\.(weight|bias)", "head_norm.{0}"),
    (r"vocab_projector\.weight", "output_proj.weight"),
    (r"vocab_projector\.bias", "output_bias"),
]


_MARIAN_ATTENTION = {"q_proj": "w_q", "k_proj": "w_k", "v_proj": "w_v", "out_proj": "w_o"}
_MARIAN = [
    (r"model\.shared\.weight", "encoder.embedding.weight"),
    (r"model\.encoder\.embed_tokens\.weight", "encoder.embedding.weight"),
    (r"model\.decoder\.embed_tokens\.weight", "decoder.embedding.weight"),
    *[(rf"model\.encoder\.layers\.(\d+)\.self_attn\.{hf}\.(weight|bias)", f"encoder.layers.{{0}}.self_attn.{ours}.{{1}}")
      for hf, ours in _MARIAN_ATTENTION.items()],
    (r"model\.encoder\.layers\.(\d+)\.self_attn_layer_norm\.(weight|bias)", "encoder.layers.{0}.norm_1.{1}"),
    (r"model\.encoder\.layers\.(\d+)\.fc1\.(weight|bias)", "encoder.layers.{0}.ffn.w_1.{1}"),
    (r"model\.encoder\.layers\.(\d+)\.fc2\.(weight|bias)", "encoder.layers.{0}.ffn.w_2.{1}"),
    (r"model\.encoder\.layers\.(\d+)\.final_layer_norm\.(weight|bias)", "encoder.layers.{0}.norm_2.{1}"),
    *[(rf"model\.decoder\.layers\.(\d+)\.self_attn\.{hf}\.(weight|bias)", f"decoder.layers.{{0}}.self_attn.{ours}.{{1}}")
      for hf, ours in _MARIAN_ATTENTION.items()],
    *[(rf"model\.decoder\.layers\.(\d+)\.encoder_attn\.{hf}\.(weight|bias)",
       f"decoder.layers.{{0}}.cross_attn.{ours}.{{1}}") for hf, ours in _MARIAN_ATTENTION.items()],
    (r"model\.decoder\.layers\.(\d+)\.self_attn_layer_norm\.(weight|bias)", "decoder.layers.{0}.norm_1.{1}"),
    (r"model\.decoder\.layers\.(\d+)\.encoder_attn_layer_norm\.(weight|bias)", "decoder.layers.{0}.norm_2.{1}"),
    (r"model\.decoder\.layers\.(\d+)\.fc1\.(weight|bias)", "decoder.layers.{0}.ffn.w_1.{1}"),
    (r"model\.decoder\.layers\.(\d+)\.fc2\.(weight|bias)", "decoder.layers.{0}.ffn.w_2.{1}"),
    (r"model\.decoder\.layers\.(\d+)\.final_layer_norm\.(weight|bias)", "decoder.layers.{0}.norm_3.{1}"),
    (r"final_logits_bias", "decoder.output_bias"),  # saved (1, V), ours (V,)
    (r"lm_head\.weight", "decoder.output_proj.weight"),
]


@dataclass(frozen=True)
class Family:
    """One pretrained family: its ``model_type``, the prefix of its encoder's tensor names, its
    config translation, its key map, and the tensors of parts we do not build (the pooler and
    next-sentence head of a pretraining checkpoint; the ``position_ids`` buffer, checked to be
    ``0..P-1``), which are named in a warning, never silently dropped."""

    model_type: str
    prefix: str
    translate: Callable[[dict[str, Any]], dict[str, Any]]
    key_map: list[tuple[str, str]]
    not_built: tuple[str, ...] = ()
    task: str = "mlm"
    sizes: tuple[tuple[str, str], ...] = BERT_SIZES

    def spelled(self) -> dict[str, str]:
        """Our size keys -> this family's ``config.json`` keys, to name a bad value as the file does."""
        extra = ({"tgt_vocab_size": "decoder_vocab_size"} if self.task == "translation"
                 else {"norm_eps": "layer_norm_eps", "dropout": "hidden_dropout_prob"})
        return {**extra, **dict(self.sizes), "type_vocab_size": "type_vocab_size"}

    def our_name(self, name: str) -> str | None:
        """Our masked LM's parameter name for the HF tensor ``name``; None: no place for it."""
        bare = name[len(self.prefix):] if name.startswith(self.prefix) else name
        bare = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", bare))
        for pattern, ours in self.key_map:
            m = re.fullmatch(pattern, bare)
            if m:
                return ours.format(*m.groups())
        return None

    def is_not_built(self, name: str) -> bool:
        bare = name[len(self.prefix):] if name.startswith(self.prefix) else name
        return any(re.fullmatch(p, bare) for p in self.not_built)


FAMILIES: dict[str, Family] = {
    "bert": Family("bert", "bert.", bert_config, _BERT_ENCODER + _BERT_HEAD,
                   (r"pooler\.dense\.(weight|bias)", r"cls\.seq_relationship\.(weight|bias)",
                    r"embeddings\.position_ids")),
    "roberta": Family("roberta", "roberta.", lambda c: bert_config(c, roberta=True), _BERT_ENCODER + _ROBERTA_HEAD,
                      (r"pooler\.dense\.(weight|bias)", r"embeddings\.position_ids")),
    "distilbert": Family("distilbert", "distilbert.", distilbert_config, _DISTILBERT, (r"embeddings\.position_ids",),
                         sizes=DISTILBERT_SIZES),
    # Older files keep the fixed sinusoid tables; they are checked equal to ours, then not used.
    "marian": Family("marian", "", marian_config, _MARIAN,
                     (r"model\.(encoder|decoder)\.embed_positions\.weight",), task="translation",
                     sizes=MARIAN_SIZES),
}


def family_of(config: dict[str, Any]) -> Family:
    """The family a ``config.json`` names by ``model_type``; another is a :class:`HubError`."""
    model_type = config.get("model_type")
    if model_type not in FAMILIES:
        raise HubError(f"config.json: model_type={model_type!r} has no place in our model (we read "
                       f"{', '.join(FAMILIES)})")
    return FAMILIES[model_type]


__all__ = ["BERT_SIZES", "BOOKKEEPING", "DISTILBERT_SIZES", "MARIAN_SIZES", "FAMILIES", "Family", "HubError", "bert_config", "distilbert_config", "family_of",
           "marian_config"]
