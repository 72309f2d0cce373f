"""The pretrained families of Hugging Face folders, each declared once (a :class:`Family`) and
used both ways: reading a folder (``hub.folder``) and writing one (``export.hf``). A family is

* a table of its ``config.json`` keys against ours (:class:`Key`): reading takes each key by
  it, writing inverts it, and a value's error names the key as the file spells it;
* its activation names against ours, both ways;
* the switches of our modules it always sets, and the settings that follow from others;
* a key map of tensor-name templates (``encoder.layer.{i}.output.dense.{wb}`` against
  ``encoder.layers.{i}.ffn.w_2.{wb}``) that reads one side and writes the other: nanoGPT's
  ``from_pretrained`` pattern, run in both directions.

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

The multilingual families, M2M100 and NLLB (both ``model_type: m2m_100``, their tokenizers
differ) and mBART-50 (``mbart``), are read onto the same ``EncoderDecoder``; each sentence's
language is a code of the vocabulary (``hub.languages``), the source's in front of the source,
the target's forced after the decoder's start:

=====================  ==============================================  ===========================
switch                 M2M100, NLLB                                    mBART-50
=====================  ==============================================  ===========================
norm_first             true (pre-norm; a final LayerNorm per stack)    true
embedding_norm         false                                           true (``layernorm_embedding``)
scale_embeddings       ``scale_embedding``                             ``scale_embedding``
positional             ``SinusoidalPositionalEncoding(layout=          ``LearnedPositionalEncoding(
                       "fairseq", first_position=pad_token_id + 1)``   first_position=2)``, 2 + P rows
activation             ``activation_function``                         ``activation_function``
output_bias            false                                           true (``final_logits_bias``)
share_embeddings       true (``model.shared``)                         true
tie_output             ``tie_word_embeddings``                         ``tie_word_embeddings``
bos_id (the task's)    ``decoder_start_token_id`` (EOS)                ``decoder_start_token_id``
=====================  ==============================================  ===========================

A config key that changes what the model computes and has no switch here is refused by name
(:class:`HubError`); the keys in :data:`BOOKKEEPING` describe the file, the initialisation or
heads we do not build, and change nothing the masked LM computes.

Shape legend: V vocabulary, D = d_model, F = d_ff, P position rows, Y token types.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping


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
    "num_labels", "_num_labels",  # a fine-tuned head's, checked against id2label where it is read
})
#: Keys accepted only at the value our model computes with; any other value is refused.
MUST_BE = {
    "is_decoder": False, "add_cross_attention": False, "is_encoder_decoder": False, "tie_encoder_decoder": False,
    "position_embedding_type": "absolute", "sinusoidal_pos_embds": False, "pruned_heads": {},
}
#: Our activation names (``models.transformer.ACTIVATIONS``) -> those BERT's, RoBERTa's and
#: DistilBERT's configs write; HF's "gelu" is the exact erf form, as ours.
ACTIVATIONS = {"gelu": "gelu", "relu": "relu"}
#: Ours -> Marian's: HF's "swish" is our "silu" (x·sigmoid(x)); its "silu" is read as well.
MARIAN_ACTIVATIONS = {**ACTIVATIONS, "silu": "swish"}


# ----------------------------------------------------------------------------- config tables
REQUIRED = object()  # a Key's default: the file must hold the key


@dataclass(frozen=True)
class Like:
    """A :class:`Key`'s default: the value of another of our keys, read before it."""

    ours: str


@dataclass(frozen=True)
class Key:
    """One setting of a family's ``config.json``: our key, the file's, how its value is read, and
    its default when the file lacks it (:data:`REQUIRED`: none; a token id with a default of its
    own may be null: the tokenizer's). The file's other keys for the same value: ``same`` are
    read and must agree (two settings of theirs, one of ours), ``copies`` are written and read as
    bookkeeping, ``older`` are spellings of older files, read when the key is absent.

    Kinds: ``size`` (checked later against our config's declared range), ``number``, ``flag``
    (true or false), ``token_id`` (an integer from 0), ``activation`` (the family's names).
    ``offset``: ours is the file's size plus it (mBART's position table has 2 rows more than
    ``max_position_embeddings``)."""

    ours: str
    theirs: str
    kind: str = "size"
    default: Any = REQUIRED
    same: tuple[str, ...] = ()
    copies: tuple[str, ...] = ()
    older: tuple[str, ...] = ()
    offset: int = 0


def _sizes(*pairs: tuple[str, str]) -> tuple[Key, ...]:
    """Size keys, each required: ``(our key, its key)``."""
    return tuple(Key(ours, theirs) for ours, theirs in pairs)


class ConfigReader:
    """Takes keys out of a ``config.json`` mapping; :meth:`finish` refuses what is left."""

    def __init__(self, config: dict[str, Any], activations: Mapping[str, str]):
        self.left = dict(config)
        self.activations = activations  # the file's names -> ours

    def take(self, key: str, default: Any = REQUIRED) -> Any:
        if key not in self.left:
            if default is REQUIRED:
                raise HubError(f"config.json: lacks {key}")
            return default
        return self.left.pop(key)

    def value(self, kind: str, key: str, default: Any, nullable: bool = False) -> Any:
        """The value under ``key`` read as ``kind`` (see :class:`Key`), or ``default``;
        ``nullable``: a token id may be null."""
        value = self.take(key, default)
        if kind == "number" and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise HubError(f"config.json: {key}={value!r}: expected a number")
        if kind == "flag" and not isinstance(value, bool):
            raise HubError(f"config.json: {key}={value!r}: expected true or false")
        if kind == "token_id" and not (value is None and nullable):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise HubError(f"config.json: {key}={value!r}: expected a token id (an integer from 0)")
        if kind == "activation":
            if value not in self.activations:
                raise HubError(f"config.json: {key}={value!r} has no place in our model (activations: "
                               f"{', '.join(self.activations)})")
            return self.activations[value]
        return float(value) if kind == "number" else value

    def read(self, key: Key, got: Mapping[str, Any]) -> Any:
        """Our value of ``key``; ``got``: our values read so far (a :class:`Like` default's)."""
        like = isinstance(key.default, Like)
        default = got[key.default.ours] if like else key.default
        nullable = key.default is not REQUIRED and not like
        spellings = [k for k in (key.theirs, *key.older) if k in self.left] or [key.theirs]
        value = [self.value(key.kind, k, default, nullable) for k in spellings][0]
        for other in key.same:
            second = self.value(key.kind, other, value, nullable)
            if second != value:
                raise HubError(f"config.json: {other}={second!r} differs from {key.theirs}={value!r}: our model has "
                               f"one {key.ours} for both")
        for other in key.copies:
            self.left.pop(other, None)
        if key.offset and isinstance(value, int) and not isinstance(value, bool):
            value += key.offset
        return value

    def finish(self, must_be: Mapping[str, Any], bookkeeping: frozenset[str]) -> None:
        for key, value in self.left.items():
            if key in bookkeeping:
                continue
            if key in must_be:
                want = must_be[key]
                if value is not None and value != want and not (want is None and value == 0):
                    raise HubError(f"config.json: {key}={value!r} has no place in our model (we read {want!r})")
                continue
            raise HubError(f"config.json: key {key!r} has no place in our model")


# ----------------------------------------------------------------------------- tensor names
#: The fields a name template holds, and what each matches.
FIELDS = {"i": r"\d+", "wb": r"weight|bias", "stack": r"encoder|decoder"}


@functools.lru_cache(maxsize=None)
def _pattern(template: str) -> re.Pattern:
    """A name template as a regex: its text as it stands, each ``{field}`` a named group."""
    parts = re.split(r"\{(\w+)\}", template)  # text, field, text, field, ..., text
    return re.compile("".join(f"(?P<{p}>{FIELDS[p]})" if k % 2 else re.escape(p) for k, p in enumerate(parts)))


def rename(name: str, pairs: Iterable[tuple[str, str]]) -> str | None:
    """``name`` matched by the first template of a pair, written as its second; None: no pair
    matches. Pairs ``(its, ours)`` read a family's names; swapped, they write them."""
    for source, target in pairs:
        m = _pattern(source).fullmatch(name)
        if m:
            return target.format(**m.groupdict())
    return None


@dataclass(frozen=True)
class Family:
    """One pretrained family, read (``hub.folder``) and written (``export.hf``) by this one
    declaration.

    ``keys``: its ``config.json`` against ours (:class:`Key`); ``activations``: our names ->
    its (``also_read``: more of its names, read only); ``switches``: our settings every model of
    the family has; ``settings``: ours that follow from the keys read; ``fixed``: keys written
    at the one value we read (``must_be`` holds every key read only at one value); ``body``: the
    tensor-name templates ``(its, ours)`` under ``prefix`` (its base model), ``head``: those
    at the top of the file; a third element names our flag without which a template is read
    but not written. ``not_built``: templates of the tensors of parts we do not build (the pooler and
    next-sentence head of a pretraining checkpoint; the ``position_ids`` buffer, checked to be
    ``0..P-1``), named in a warning, never silently dropped; ``saved_as_row``: its tensors
    saved as ``(1, N)`` where ours is ``(N,)``."""

    model_type: str
    title: str
    architecture: str
    task: str
    keys: tuple[Key, ...]
    switches: Mapping[str, Any]
    settings: Callable[[Mapping[str, Any]], dict[str, Any]]
    body: tuple[tuple[str, ...], ...]
    head: tuple[tuple[str, ...], ...] = ()
    prefix: str = ""
    not_built: tuple[str, ...] = ()
    activations: Mapping[str, str] = field(default_factory=lambda: ACTIVATIONS)
    also_read: Mapping[str, str] = field(default_factory=dict)
    fixed: Mapping[str, Any] = field(default_factory=dict)
    must_be: Mapping[str, Any] = field(default_factory=lambda: MUST_BE)
    bookkeeping: frozenset[str] = BOOKKEEPING
    saved_as_row: tuple[str, ...] = ()
    #: The spellings of language codes its tokenizers may have (``hub.languages.CODE_PATTERNS``):
    #: none for a family without them; a source is then framed ``[code] pieces </s>`` and the
    #: decoder starts from ``decoder_start_token_id`` then the target's code.
    language_styles: tuple[str, ...] = ()

    # -- config.json
    def translate(self, config: dict[str, Any]) -> dict[str, Any]:
        """The family's ``config.json`` -> our flat model config (and, for translation, the
        task's special ids ``pad_id``, ``bos_id``, ``eos_id`` and ``tgt_vocab_size``)."""
        r = ConfigReader(config, {**{theirs: ours for ours, theirs in self.activations.items()}, **self.also_read})
        got: dict[str, Any] = {}
        for key in self.keys:
            got[key.ours] = r.read(key, got)
        out = {"_target_": TARGETS[self.task], **self.switches, **got, **self.settings(got)}
        r.finish(self.must_be, self.bookkeeping)
        return out

    def write_config(self, ours: Mapping[str, Any]) -> dict[str, Any]:
        """The family's ``config.json`` for our settings ``ours``: the table inverted."""
        out = {"model_type": self.model_type, "architectures": [self.architecture], **self.fixed}
        for key in self.keys:
            value = ours[key.ours]
            if value is None and isinstance(key.default, Like):
                value = ours[key.default.ours]
            if key.kind == "activation":
                value = self.activations[value]
            value = value - key.offset if key.offset else value
            out.update(dict.fromkeys((key.theirs, *key.same, *key.copies), value))
        return out

    def spelled(self) -> dict[str, str]:
        """Our keys -> this family's ``config.json`` keys, to name a bad value as the file does."""
        return {key.ours: key.theirs for key in self.keys}

    # -- tensors
    def our_name(self, name: str) -> str | None:
        """Our model's parameter name for the HF tensor ``name``; None: no place for it."""
        bare = name[len(self.prefix):] if name.startswith(self.prefix) else name
        bare = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", bare))
        return rename(bare, (pair[:2] for pair in self.body + self.head))

    def hf_name(self, ours: str, flags: Mapping[str, Any]) -> str | None:
        """The family's tensor name for our parameter ``ours`` in a model of settings ``flags``
        (the first template that fills it); None: the family has no place for it."""
        def swapped(pairs):
            return ((pair[1], pair[0]) for pair in pairs if len(pair) == 2 or flags[pair[2]])

        name = rename(ours, swapped(self.body))
        return self.prefix + name if name is not None else rename(ours, swapped(self.head))

    def is_not_built(self, name: str) -> bool:
        bare = name[len(self.prefix):] if name.startswith(self.prefix) else name
        return any(_pattern(t).fullmatch(bare) for t in self.not_built)


#: Our model class of each task.
TARGETS = {"mlm": "MaskedLanguageModel", "translation": "EncoderDecoder"}


def tied_parameters(task: str, flags: Mapping[str, Any]) -> dict[str, str]:
    """Our parameters that are another (``parameter -> the one it is``) in a model of ``task``
    with settings ``flags``: read once, written once."""
    if task == "mlm":
        return {"output_proj.weight": "encoder.embedding.weight"} if flags["tie_output"] else {}
    out = {"decoder.embedding.weight": "encoder.embedding.weight"} if flags["share_embeddings"] else {}
    if flags["tie_output"]:
        out["decoder.output_proj.weight"] = out.get("decoder.embedding.weight", "decoder.embedding.weight")
    return out


# ----------------------------------------------------------------------------- masked LMs
#: What BERT, RoBERTa and DistilBERT share: post-norm layers, a LayerNorm over unscaled input
#: embeddings, BERT's head (dense, activation, LayerNorm, projection plus bias).
MLM_SWITCHES = {"norm_first": False, "embedding_norm": True, "scale_embeddings": False, "head_transform": True,
                "output_bias": True}


def _positional(first_position: int) -> dict[str, Any]:
    return {"_target_": "LearnedPositionalEncoding", "_partial_": True, "first_position": first_position}


def _bert_settings(got: Mapping[str, Any]) -> dict[str, Any]:
    """BERT's (and DistilBERT's) head calls the layers' activation; positions from row 0."""
    return {"head_activation": got["activation"], "positional": _positional(0)}


def _roberta_settings(got: Mapping[str, Any]) -> dict[str, Any]:
    """RobertaLMHead calls gelu whatever hidden_act says; its rows 0..pad are padding's, so a
    sentence's positions start at ``pad_id + 1``."""
    return {"head_activation": "gelu", "positional": _positional(got["pad_id"] + 1)}


def _bert_keys(pad_id: int) -> tuple[Key, ...]:
    return (
        Key("pad_id", "pad_token_id", "token_id", pad_id),
        *_sizes(("vocab_size", "vocab_size"), ("d_model", "hidden_size"), ("n_layers", "num_hidden_layers"),
                ("n_heads", "num_attention_heads"), ("d_ff", "intermediate_size"),
                ("max_len", "max_position_embeddings")),
        Key("activation", "hidden_act", "activation", "gelu"),
        Key("norm_eps", "layer_norm_eps", "number", 1e-12),
        Key("type_vocab_size", "type_vocab_size", default=2),
        Key("tie_output", "tie_word_embeddings", "flag", True),
        # Our model has one dropout rate: the attention's must be the hidden layers'.
        Key("dropout", "hidden_dropout_prob", "number", 0.1, same=("attention_probs_dropout_prob",)),
    )


DISTILBERT_KEYS = (
    Key("pad_id", "pad_token_id", "token_id", 0),
    *_sizes(("vocab_size", "vocab_size"), ("d_model", "dim"), ("n_layers", "n_layers"), ("n_heads", "n_heads"),
            ("d_ff", "hidden_dim"), ("max_len", "max_position_embeddings")),
    Key("activation", "activation", "activation", "gelu"),
    Key("tie_output", "tie_word_embeddings", "flag", True, older=("tie_weights_",)),
    Key("dropout", "dropout", "number", 0.1, same=("attention_dropout",)),
)


# ----------------------------------------------------------------------------- key maps
# (its name without the family's prefix, our name under the model); the fields are FIELDS'.
_BERT_ENCODER = (
    ("embeddings.word_embeddings.weight", "encoder.embedding.weight"),
    ("embeddings.position_embeddings.weight", "encoder.positional.embedding.weight"),
    ("embeddings.token_type_embeddings.weight", "encoder.type_embedding.weight"),
    ("embeddings.LayerNorm.{wb}", "encoder.embedding_norm.{wb}"),
    ("encoder.layer.{i}.attention.self.query.{wb}", "encoder.layers.{i}.self_attn.w_q.{wb}"),
    ("encoder.layer.{i}.attention.self.key.{wb}", "encoder.layers.{i}.self_attn.w_k.{wb}"),
    ("encoder.layer.{i}.attention.self.value.{wb}", "encoder.layers.{i}.self_attn.w_v.{wb}"),
    ("encoder.layer.{i}.attention.output.dense.{wb}", "encoder.layers.{i}.self_attn.w_o.{wb}"),
    ("encoder.layer.{i}.attention.output.LayerNorm.{wb}", "encoder.layers.{i}.norm_1.{wb}"),
    ("encoder.layer.{i}.intermediate.dense.{wb}", "encoder.layers.{i}.ffn.w_1.{wb}"),
    ("encoder.layer.{i}.output.dense.{wb}", "encoder.layers.{i}.ffn.w_2.{wb}"),
    ("encoder.layer.{i}.output.LayerNorm.{wb}", "encoder.layers.{i}.norm_2.{wb}"),
)
_BERT_HEAD = (
    ("cls.predictions.transform.dense.{wb}", "head_dense.{wb}"),
    ("cls.predictions.transform.LayerNorm.{wb}", "head_norm.{wb}"),
    ("cls.predictions.decoder.weight", "output_proj.weight"),
    ("cls.predictions.bias", "output_bias"),
    ("cls.predictions.decoder.bias", "output_bias"),  # the same bias, saved twice by some versions
)
_ROBERTA_HEAD = (
    ("lm_head.dense.{wb}", "head_dense.{wb}"),
    ("lm_head.layer_norm.{wb}", "head_norm.{wb}"),
    ("lm_head.decoder.weight", "output_proj.weight"),
    ("lm_head.bias", "output_bias"),
    ("lm_head.decoder.bias", "output_bias"),
)
_DISTILBERT_ENCODER = (
    ("embeddings.word_embeddings.weight", "encoder.embedding.weight"),
    ("embeddings.position_embeddings.weight", "encoder.positional.embedding.weight"),
    ("embeddings.LayerNorm.{wb}", "encoder.embedding_norm.{wb}"),
    ("transformer.layer.{i}.attention.q_lin.{wb}", "encoder.layers.{i}.self_attn.w_q.{wb}"),
    ("transformer.layer.{i}.attention.k_lin.{wb}", "encoder.layers.{i}.self_attn.w_k.{wb}"),
    ("transformer.layer.{i}.attention.v_lin.{wb}", "encoder.layers.{i}.self_attn.w_v.{wb}"),
    ("transformer.layer.{i}.attention.out_lin.{wb}", "encoder.layers.{i}.self_attn.w_o.{wb}"),
    ("transformer.layer.{i}.sa_layer_norm.{wb}", "encoder.layers.{i}.norm_1.{wb}"),
    ("transformer.layer.{i}.ffn.lin1.{wb}", "encoder.layers.{i}.ffn.w_1.{wb}"),
    ("transformer.layer.{i}.ffn.lin2.{wb}", "encoder.layers.{i}.ffn.w_2.{wb}"),
    ("transformer.layer.{i}.output_layer_norm.{wb}", "encoder.layers.{i}.norm_2.{wb}"),
)
_DISTILBERT_HEAD = (
    ("vocab_transform.{wb}", "head_dense.{wb}"),
    ("vocab_layer_norm.{wb}", "head_norm.{wb}"),
    ("vocab_projector.weight", "output_proj.weight"),
    ("vocab_projector.bias", "output_bias"),
)
_MARIAN_ATTENTION = {"q_proj": "w_q", "k_proj": "w_k", "v_proj": "w_v", "out_proj": "w_o"}
_MARIAN = (
    ("model.shared.weight", "encoder.embedding.weight", "share_embeddings"),  # the stacks' one table
    ("model.{stack}.embed_tokens.weight", "{stack}.embedding.weight"),
    *[(f"model.{{stack}}.layers.{{i}}.self_attn.{hf}.{{wb}}", f"{{stack}}.layers.{{i}}.self_attn.{ours}.{{wb}}")
      for hf, ours in _MARIAN_ATTENTION.items()],
    *[(f"model.decoder.layers.{{i}}.encoder_attn.{hf}.{{wb}}", f"decoder.layers.{{i}}.cross_attn.{ours}.{{wb}}")
      for hf, ours in _MARIAN_ATTENTION.items()],
    ("model.{stack}.layers.{i}.self_attn_layer_norm.{wb}", "{stack}.layers.{i}.norm_1.{wb}"),
    ("model.decoder.layers.{i}.encoder_attn_layer_norm.{wb}", "decoder.layers.{i}.norm_2.{wb}"),
    ("model.{stack}.layers.{i}.fc1.{wb}", "{stack}.layers.{i}.ffn.w_1.{wb}"),
    ("model.{stack}.layers.{i}.fc2.{wb}", "{stack}.layers.{i}.ffn.w_2.{wb}"),
    ("model.encoder.layers.{i}.final_layer_norm.{wb}", "encoder.layers.{i}.norm_2.{wb}"),
    ("model.decoder.layers.{i}.final_layer_norm.{wb}", "decoder.layers.{i}.norm_3.{wb}"),
    ("final_logits_bias", "decoder.output_bias"),  # saved (1, V), ours (V,)
    ("lm_head.weight", "decoder.output_proj.weight"),
)


# ----------------------------------------------------------------------------- Marian
MARIAN_KEYS = (
    *_sizes(("vocab_size", "vocab_size"), ("d_model", "d_model"), ("n_encoder_layers", "encoder_layers"),
            ("n_decoder_layers", "decoder_layers")),
    # One setting of ours for both stacks: the decoder's must be the encoder's.
    Key("n_heads", "encoder_attention_heads", same=("decoder_attention_heads",)),
    Key("d_ff", "encoder_ffn_dim", same=("decoder_ffn_dim",)),
    Key("max_len", "max_position_embeddings"),
    Key("tgt_vocab_size", "decoder_vocab_size", default=Like("vocab_size")),
    Key("share_embeddings", "share_encoder_decoder_embeddings", "flag", True),
    Key("tie_output", "tie_word_embeddings", "flag", True),
    Key("scale_embeddings", "scale_embedding", "flag", False),
    Key("activation", "activation_function", "activation", "gelu"),
    # Training here has one dropout rate: Marian's attention and activation dropouts become it.
    Key("dropout", "dropout", "number", 0.1, copies=("attention_dropout", "activation_dropout")),
    Key("pad_id", "pad_token_id", "token_id"),
    # The opus-mt models start from the padding id; a model of ours written as Marian starts from
    # its own BOS. Either is the task's bos_id (the tokenizer's start must agree: hub.folder).
    Key("bos_id", "decoder_start_token_id", "token_id", Like("pad_id")),
    Key("eos_id", "eos_token_id", "token_id", copies=("forced_eos_token_id",)),
)
#: Marian keys written at the one value its model computes with here.
MARIAN_FIXED = {"is_encoder_decoder": True, "normalize_before": False, "static_position_embeddings": True}
#: Marian keys accepted only at the value its model computes with here.
MARIAN_MUST_BE = {
    **MUST_BE, **MARIAN_FIXED, "add_final_layer_norm": False, "normalize_embedding": False,
    "add_bias_logits": False, "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0, "extra_pos_embeddings": None,
}
#: Marian keys that only ``generate`` reads (defaults of its search, which ours takes from the
#: decode settings) or that only training with ``transformers`` reads.
MARIAN_BOOKKEEPING = BOOKKEEPING | {
    "bad_words_ids", "num_beams", "max_length", "num_hidden_layers", "init_std", "classif_dropout", "num_labels",
}


def _marian_settings(got: Mapping[str, Any]) -> dict[str, Any]:
    """The target vocabulary's size, None where it is the source's."""
    vocab, tgt_vocab = got["vocab_size"], got["tgt_vocab_size"]
    if got["share_embeddings"] and tgt_vocab != vocab:
        raise HubError(f"config.json: decoder_vocab_size={tgt_vocab!r} differs from vocab_size={vocab!r} with shared "
                       f"embeddings")
    return {"tgt_vocab_size": None if got["share_embeddings"] or tgt_vocab == vocab else tgt_vocab}


_MLM = dict(task="mlm", switches=MLM_SWITCHES)
FAMILIES: dict[str, Family] = {
    "bert": Family("bert", "BERT", "BertForMaskedLM", keys=_bert_keys(0), settings=_bert_settings,
                   body=_BERT_ENCODER, head=_BERT_HEAD, prefix="bert.", **_MLM,
                   not_built=("pooler.dense.{wb}", "cls.seq_relationship.{wb}", "embeddings.position_ids")),
    "roberta": Family("roberta", "RoBERTa", "RobertaForMaskedLM", keys=_bert_keys(1), settings=_roberta_settings,
                      body=_BERT_ENCODER, head=_ROBERTA_HEAD, prefix="roberta.", **_MLM,
                      not_built=("pooler.dense.{wb}", "embeddings.position_ids")),
    "distilbert": Family("distilbert", "DistilBERT", "DistilBertForMaskedLM", keys=DISTILBERT_KEYS, task="mlm",
                         switches={**MLM_SWITCHES, "norm_eps": 1e-12, "type_vocab_size": 0},  # fixed in its code
                         settings=_bert_settings, body=_DISTILBERT_ENCODER, head=_DISTILBERT_HEAD,
                         prefix="distilbert.", not_built=("embeddings.position_ids",)),
    "marian": Family(
        "marian", "Marian", "MarianMTModel", task="translation", keys=MARIAN_KEYS, settings=_marian_settings,
        switches={"norm_first": False, "embedding_norm": False, "norm_eps": 1e-5, "output_bias": True,
                  "mask_target_padding": False,
                  "positional": {"_target_": "SinusoidalPositionalEncoding", "_partial_": True, "layout": "halves"}},
        body=_MARIAN, activations=MARIAN_ACTIVATIONS, also_read={"silu": "silu"}, fixed=MARIAN_FIXED,
        must_be=MARIAN_MUST_BE, bookkeeping=MARIAN_BOOKKEEPING, saved_as_row=("final_logits_bias",),
        # Older files keep the fixed sinusoid tables; they are checked equal to ours, then not used.
        not_built=("model.{stack}.embed_positions.weight",)),
}


# ----------------------------------------------------------------------------- M2M100, NLLB, mBART-50
#: The encoder-decoders of fairseq's BART line, as Marian's key map plus a final LayerNorm per stack.
_FAIRSEQ = (
    *(pair for pair in _MARIAN if pair[0] != "final_logits_bias"),
    ("model.{stack}.layer_norm.{wb}", "{stack}.final_norm.{wb}"),
)
_MBART = (
    *_FAIRSEQ,
    ("model.{stack}.layernorm_embedding.{wb}", "{stack}.embedding_norm.{wb}"),
    ("model.{stack}.embed_positions.weight", "{stack}.positional.embedding.weight"),
    ("final_logits_bias", "decoder.output_bias"),  # saved (1, V), ours (V,)
)


def _fairseq_keys(scale: bool, activation: str, positions: int = 0) -> tuple[Key, ...]:
    """M2M100's (NLLB's) and mBART's config keys: Marian's, without a target vocabulary of its own;
    ``positions``: the rows of the position table before the first piece's."""
    return (
        *_sizes(("vocab_size", "vocab_size"), ("d_model", "d_model"), ("n_encoder_layers", "encoder_layers"),
                ("n_decoder_layers", "decoder_layers")),
        Key("n_heads", "encoder_attention_heads", same=("decoder_attention_heads",)),
        Key("d_ff", "encoder_ffn_dim", same=("decoder_ffn_dim",)),
        Key("max_len", "max_position_embeddings", offset=positions),
        Key("tie_output", "tie_word_embeddings", "flag", True),
        Key("scale_embeddings", "scale_embedding", "flag", scale),
        Key("activation", "activation_function", "activation", activation),
        Key("dropout", "dropout", "number", 0.1, copies=("attention_dropout", "activation_dropout")),
        Key("pad_id", "pad_token_id", "token_id", 1),
        Key("eos_id", "eos_token_id", "token_id", 2, copies=("forced_eos_token_id",)),
        # The decoder starts from EOS, then the target language's code (forced, as generate does).
        Key("bos_id", "decoder_start_token_id", "token_id", Like("eos_id")),
    )


#: Keys of these families that only ``generate``, or training with ``transformers``, reads; and
#: BART's switches that the M2M100 and mBART code does not read (its layers are always pre-norm).
FAIRSEQ_BOOKKEEPING = MARIAN_BOOKKEEPING | {
    "encoder_layerdrop", "decoder_layerdrop", "early_stopping", "forced_bos_token_id", "forced_eos_token_id",
    "normalize_before", "add_final_layer_norm", "normalize_embedding", "static_position_embeddings",
    "add_bias_logits", "classifier_dropout", "length_penalty", "no_repeat_ngram_size", "min_length",
    # older BART-line files: options their model code no longer reads (mBART's offset is fixed at 2)
    "extra_pos_embeddings", "do_blenderbot_90_layernorm", "force_bos_token_to_be_generated",
}
FAIRSEQ_FIXED = {"is_encoder_decoder": True}
FAIRSEQ_MUST_BE = {**MUST_BE, **FAIRSEQ_FIXED}
_FAIRSEQ_SWITCHES = {"norm_first": True, "norm_eps": 1e-5, "share_embeddings": True, "tgt_vocab_size": None,
                     "mask_target_padding": False}


def _m2m100_settings(got: Mapping[str, Any]) -> dict[str, Any]:
    """fairseq's sinusoids, the first piece at row ``pad_token_id + 1``."""
    return {"positional": {"_target_": "SinusoidalPositionalEncoding", "_partial_": True, "layout": "fairseq",
                           "first_position": got["pad_id"] + 1}}


#: mBART's learned position table keeps two rows before the first piece (fairseq's offset).
MBART_OFFSET = 2


def _mbart_settings(got: Mapping[str, Any]) -> dict[str, Any]:
    """A learned table of ``max_position_embeddings + 2`` rows (``max_len``), the first piece at row 2."""
    return {"positional": _positional(MBART_OFFSET)}


FAMILIES["m2m_100"] = Family(
    "m2m_100", "M2M100", "M2M100ForConditionalGeneration", task="translation", keys=_fairseq_keys(True, "relu"),
    settings=_m2m100_settings, switches={**_FAIRSEQ_SWITCHES, "embedding_norm": False, "output_bias": False},
    body=_FAIRSEQ, activations=MARIAN_ACTIVATIONS, also_read={"silu": "silu"}, fixed=FAIRSEQ_FIXED,
    must_be=FAIRSEQ_MUST_BE, bookkeeping=FAIRSEQ_BOOKKEEPING, language_styles=("m2m100", "nllb"),
    # The sinusoid tables are not saved by transformers; an older file's are checked, then not used.
    not_built=("model.{stack}.embed_positions.weights",))
FAMILIES["mbart"] = Family(
    "mbart", "mBART-50", "MBartForConditionalGeneration", task="translation",
    keys=_fairseq_keys(False, "gelu", MBART_OFFSET),
    settings=_mbart_settings, switches={**_FAIRSEQ_SWITCHES, "embedding_norm": True, "output_bias": True},
    body=_MBART, activations=MARIAN_ACTIVATIONS, also_read={"silu": "silu"}, fixed=FAIRSEQ_FIXED,
    must_be=FAIRSEQ_MUST_BE, bookkeeping=FAIRSEQ_BOOKKEEPING, saved_as_row=("final_logits_bias",),
    language_styles=("mbart50",))


def family_of(config: dict[str, Any]) -> Family:
    """The family a ``config.json`` names by ``model_type``; another is a :class:`HubError`."""
    model_type = config.get("model_type")
    if model_type not in FAMILIES:
        raise HubError(f"config.json: model_type={model_type!r} has no place in our model (we read "
                       f"{', '.join(FAMILIES)})")
    return FAMILIES[model_type]


# ----------------------------------------------------------------------------- fine-tuned heads
#: What a ``config.json``'s ``architectures`` names, by its ending: a sequence classifier read
#: onto our ``SequenceClassifier``, a token classifier onto our ``Tagger``.
HEAD_ARCHITECTURES = {"ForSequenceClassification": "sequence", "ForTokenClassification": "token"}
#: Each family's fine-tuned heads (its tensor names without the family's prefix, ours): a
#: sequence classifier reads the first piece's state through a dense layer (BERT's pooler and
#: RoBERTa's ``classifier.dense`` with tanh, DistilBERT's ``pre_classifier`` with ReLU: our
#: ``FirstPooling(dense=...)``) into the label layer (RoBERTa's ``classifier.out_proj``); a token
#: classifier scores every piece with one linear layer, our tagger its words' first pieces.
HEADS: dict[str, dict[str, tuple[tuple[str, str], ...]]] = {
    "sequence": {
        "bert": (("pooler.dense.{wb}", "pooling.dense.{wb}"), ("classifier.{wb}", "classifier.{wb}")),
        "roberta": (("classifier.dense.{wb}", "pooling.dense.{wb}"), ("classifier.out_proj.{wb}", "classifier.{wb}")),
        "distilbert": (("pre_classifier.{wb}", "pooling.dense.{wb}"), ("classifier.{wb}", "classifier.{wb}")),
    },
    "token": {name: (("classifier.{wb}", "classifier.{wb}"),) for name in ("bert", "roberta", "distilbert")},
}
#: The activation after the dense layer of each family's sequence classifier (fixed in its code).
POOLER_ACTIVATIONS = {"bert": "tanh", "roberta": "tanh", "distilbert": "relu"}


def head_kind(config: Mapping[str, Any]) -> str | None:
    """``"sequence"`` or ``"token"``: the fine-tuned head a ``config.json``'s ``architectures``
    names (:data:`HEAD_ARCHITECTURES`); None: another (a masked LM, an encoder alone)."""
    names = config.get("architectures")
    for name in names if isinstance(names, list) else []:
        for ending, kind in HEAD_ARCHITECTURES.items():
            if isinstance(name, str) and name.endswith(ending):
                return kind
    return None


def with_head(family: Family, kind: str) -> Family:
    """``family`` reading a fine-tuned ``kind`` head (:data:`HEADS`) in place of its masked-LM
    head; the pooler, built now where the head reads it, is no longer a part not built."""
    if family.model_type not in HEADS[kind]:
        raise HubError(f"config.json: a {family.title} {kind} classifier has no place in our model")
    head = HEADS[kind][family.model_type]
    return replace(family, head=head, not_built=tuple(t for t in family.not_built if t not in {h for h, _ in head}))


def head_names(family: Family) -> str:
    """The family's masked-LM head as its tensor names start (``cls.*``, ``lm_head.*``), to name
    what a folder lacks."""
    return ", ".join(sorted({t[0].split(".")[0] + (".*" if "." in t[0] else "") for t in family.head}))


__all__ = ["ACTIVATIONS", "BOOKKEEPING", "FAIRSEQ_BOOKKEEPING", "FAMILIES", "HEADS", "HEAD_ARCHITECTURES",
           "MARIAN_ACTIVATIONS", "MARIAN_KEYS", "MBART_OFFSET", "MLM_SWITCHES", "POOLER_ACTIVATIONS", "Family", "HubError",
           "Key", "Like", "family_of", "head_kind", "head_names", "rename", "tied_parameters", "with_head"]
