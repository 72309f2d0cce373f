"""A checkpoint written back as a Hugging Face folder that ``transformers``' Auto classes load:
``config.json``, ``model.safetensors`` and the tokenizer's files.

Each family of ``hub.families`` is read through a config translation and a key map; this module
is their inverse. A model whose switches match a family is written as that family:

=====================================================  =========================================
our model and switches                                 written as
=====================================================  =========================================
masked LM, learned positions from row 0, token types   ``BertForMaskedLM``
masked LM, positions from row ``pad_id + 1``           ``RobertaForMaskedLM``
masked LM, no token types, epsilon 1e-12               ``DistilBertForMaskedLM``
encoder-decoder, post-norm, sinusoids, epsilon 1e-5    ``MarianMTModel``
=====================================================  =========================================

(every masked LM here also needs post-norm layers, an embedding LayerNorm, unscaled embeddings
and BERT's head). Our interleaved sinusoids (``sin, cos, sin, cos …``) are Marian's halves
(``sin … | cos …``) with the model dimensions permuted; LayerNorm, residual sums and linear
layers commute with one permutation of ``d_model`` applied everywhere, so the export permutes
every tensor's ``d_model`` axis and the network is the same one. Anything else (pre-norm layers,
relative positions, a local window, a model kind no family holds) is an :class:`ExportError`
naming the setting, and nothing is written. The written config is read back through the family's
own translation (``hub.families``) and must give our switches, so reader and writer agree.

Tokenizers: a byte-level BPE or a family's ``tokenizer.json`` is written as ``tokenizer.json``
with a ``tokenizer_config.json`` naming its special tokens (``PreTrainedTokenizerFast``); a
Marian model read from a folder writes its SentencePiece files (``source.spm``, ``target.spm``,
``vocab.json``) for ``MarianTokenizer``.

Shape legend: V vocabulary, D = d_model.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch

from transformer.data.parallel import languages
from transformer.export.folder import ExportError, write_export_dir
from transformer.hub.families import FAMILIES, Family, HubError
from transformer.models.mlm import MaskedLanguageModel
from transformer.models.transformer import EncoderDecoder
from transformer.modules.positional import LearnedPositionalEncoding, SinusoidalPositionalEncoding

#: Our activation names -> the ones each family's config writes.
_ACTIVATIONS = {"gelu": "gelu", "relu": "relu"}
_MARIAN_ACTIVATIONS = {**_ACTIVATIONS, "silu": "swish"}


def _hf_template(pattern: str) -> str:
    """A key map's HF pattern as a name template: optional groups dropped, each capturing group
    a numbered field, escapes undone (``encoder\\.layer\\.(\\d+)\\.x`` -> ``encoder.layer.{0}.x``)."""
    template = re.sub(r"\(\?:[^)]*\)\?", "", pattern)
    count = iter(range(100))
    template = re.sub(r"\([^)]*\)", lambda _: f"{{{next(count)}}}", template)
    return template.replace("\\", "")


def hf_name(family: Family, ours: str) -> str | None:
    """The family's tensor name for our parameter ``ours`` (the first key-map entry that fills
    it); None: the family has no place for it."""
    for pattern, template in family.key_map:
        ours_pattern = re.escape(template)
        ours_pattern = re.sub(r"\\\{\d+\\\}", r"(\\w+)", ours_pattern)
        m = re.fullmatch(ours_pattern, ours)
        if m:
            name = _hf_template(pattern).format(*m.groups())
            return family.prefix + name if ours.startswith("encoder.") and family.task == "mlm" else name
    return None


def _refuse(setting: str, family: str) -> ExportError:
    return ExportError(f"format=hf: {setting} has no counterpart in {family}; nothing written")


# ----------------------------------------------------------------------------- masked LMs
def _mlm_family(model: MaskedLanguageModel) -> tuple[str, dict[str, Any]]:
    """The family that computes what ``model`` does, and its ``config.json``."""
    cfg = model.cfg
    what = "BERT, RoBERTa or DistilBERT"
    for name, want in (("norm_first", False), ("embedding_norm", True), ("scale_embeddings", False),
                       ("head_transform", True), ("output_bias", True), ("window", None)):
        if getattr(cfg, name) != want:
            raise _refuse(f"{name}={getattr(cfg, name)!r}", what)
    pos = model.encoder.positional
    if type(pos) is not LearnedPositionalEncoding:
        raise _refuse(f"the positional encoding {type(pos).__name__}", what)
    for name in ("activation", "head_activation"):
        if getattr(cfg, name) not in _ACTIVATIONS:
            raise _refuse(f"{name}={getattr(cfg, name)!r}", what)
    rows, first = pos.embedding.num_embeddings, pos.first_position
    common = {"vocab_size": cfg.vocab_size, "pad_token_id": cfg.pad_id, "tie_word_embeddings": cfg.tie_output}
    if cfg.type_vocab_size == 0:
        if first != 0 or cfg.head_activation != cfg.activation or cfg.norm_eps != 1e-12:
            raise _refuse(f"a stack without token types and first_position={first}, head_activation="
                          f"{cfg.head_activation!r}, norm_eps={cfg.norm_eps}", "DistilBERT (positions from 0, "
                          "one activation, epsilon 1e-12)")
        return "distilbert", {**common, "model_type": "distilbert", "architectures": ["DistilBertForMaskedLM"],
                              "dim": cfg.d_model, "n_layers": cfg.n_layers, "n_heads": cfg.n_heads,
                              "hidden_dim": cfg.d_ff, "max_position_embeddings": rows, "activation": cfg.activation,
                              "dropout": cfg.dropout, "attention_dropout": cfg.dropout}
    bert = {**common, "hidden_size": cfg.d_model, "num_hidden_layers": cfg.n_layers,
            "num_attention_heads": cfg.n_heads, "intermediate_size": cfg.d_ff, "max_position_embeddings": rows,
            "hidden_act": cfg.activation, "layer_norm_eps": cfg.norm_eps, "type_vocab_size": cfg.type_vocab_size,
            "hidden_dropout_prob": cfg.dropout, "attention_probs_dropout_prob": cfg.dropout}
    if first == 0 and cfg.head_activation == cfg.activation:
        return "bert", {**bert, "model_type": "bert", "architectures": ["BertForMaskedLM"]}
    if first == cfg.pad_id + 1 and cfg.head_activation == "gelu":
        return "roberta", {**bert, "model_type": "roberta", "architectures": ["RobertaForMaskedLM"]}
    raise _refuse(f"first_position={first} with head_activation={cfg.head_activation!r}", "BERT (positions from 0, "
                  "one activation) or RoBERTa (positions from pad_id + 1, a gelu head)")


# ----------------------------------------------------------------------------- Marian
def _marian_config(model: EncoderDecoder, hp: Any) -> dict[str, Any]:
    """Marian's ``config.json`` for ``model``; a setting Marian does not compute is refused."""
    cfg = model.cfg
    for name, want in (("norm_first", False), ("embedding_norm", False), ("type_vocab_size", 0), ("window", None),
                       ("norm_eps", 1e-5)):
        if getattr(cfg, name) != want:
            raise _refuse(f"{name}={getattr(cfg, name)!r}", f"Marian (which computes {name}={want!r})")
    for stack in ("encoder", "decoder"):
        pos = getattr(model, stack).positional
        if type(pos) is not SinusoidalPositionalEncoding:
            raise _refuse(f"the {stack}'s positional encoding {type(pos).__name__}", "Marian (sinusoids)")
    if cfg.activation not in _MARIAN_ACTIVATIONS:
        raise _refuse(f"activation={cfg.activation!r}", "Marian")
    if model.encoder.positional.layout != "halves" and cfg.d_model % 2:
        raise _refuse(f"interleaved sinusoids with an odd d_model={cfg.d_model}", "Marian")
    vocab = cfg.vocab_size
    tgt_vocab = cfg.tgt_vocab_size or vocab
    heads, ffn = cfg.n_heads, cfg.d_ff
    return {
        "model_type": "marian", "architectures": ["MarianMTModel"], "is_encoder_decoder": True,
        "vocab_size": vocab, "decoder_vocab_size": tgt_vocab, "d_model": cfg.d_model,
        "encoder_layers": cfg.n_encoder_layers, "decoder_layers": cfg.n_decoder_layers,
        "encoder_attention_heads": heads, "decoder_attention_heads": heads,
        "encoder_ffn_dim": ffn, "decoder_ffn_dim": ffn, "max_position_embeddings": cfg.max_len,
        "activation_function": _MARIAN_ACTIVATIONS[cfg.activation], "scale_embedding": cfg.scale_embeddings,
        "share_encoder_decoder_embeddings": cfg.share_embeddings, "tie_word_embeddings": cfg.tie_output,
        "dropout": cfg.dropout, "attention_dropout": cfg.dropout, "activation_dropout": cfg.dropout,
        "pad_token_id": hp.pad_id, "eos_token_id": hp.eos_id, "forced_eos_token_id": hp.eos_id,
        # Our decoder starts from BOS (the padding id in a model read from a Marian folder).
        "decoder_start_token_id": hp.bos_id, "normalize_before": False, "static_position_embeddings": True,
    }


#: Our parameters that read the residual stream (their input axis is d_model) and those that
#: write it (their output axis, and their bias, is d_model); LayerNorms and embeddings as named.
_READS = re.compile(r".*\.(w_q|w_k|w_v|w_1)\.weight|.*embedding\.weight|.*output_proj\.weight")
_WRITES = re.compile(r".*\.(w_o|w_2)\.(weight|bias)|.*\.norm_\d\.(weight|bias)")


def interleaved_to_halves(state: dict[str, torch.Tensor], d_model: int) -> dict[str, torch.Tensor]:
    """The same network with the model dimensions permuted so that our interleaved sinusoid
    table becomes Marian's halves: dimension ``2i`` -> ``i``, ``2i + 1`` -> ``D/2 + i``.
    Applying one permutation to every tensor's d_model axis leaves every output unchanged
    (LayerNorm statistics, residual sums and dot products are sums over that axis)."""
    perm = torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])  # (D,)
    out = {}
    for name, t in state.items():
        if _READS.fullmatch(name):
            t = t[:, perm]  # (out, D) or (V, D)
        elif _WRITES.fullmatch(name):
            t = t[perm]  # (D, in) or (D,)
        out[name] = t
    return out


# ----------------------------------------------------------------------------- tokenizers
def _write_fast_tokenizer(tokenizer, folder: Path, model_max_length: int, source_eos: bool = False) -> None:
    """``tokenizer.json`` plus a ``tokenizer_config.json`` naming its special tokens, so
    ``AutoTokenizer`` builds a ``PreTrainedTokenizerFast`` that gives our ids; ``source_eos``:
    it appends EOS to every text, as our translation collator frames a source."""
    if source_eos:
        from tokenizers import Tokenizer, processors

        backend = Tokenizer.from_str(tokenizer.to_str())
        eos = tokenizer.id_to_token(tokenizer.eos_id)
        backend.post_processor = processors.TemplateProcessing(single=f"$A {eos}", special_tokens=[(eos, tokenizer.eos_id)])
        (folder / "tokenizer.json").write_text(backend.to_str(), encoding="utf-8")
    else:
        tokenizer.save(folder / "tokenizer.json")
    specials = {}
    for role, hf_roles in (("pad", ("pad",)), ("unk", ("unk",)), ("mask", ("mask",)), ("bos", ("bos", "cls")),
                           ("eos", ("eos", "sep"))):
        i = getattr(tokenizer, f"{role}_id", None)
        token = None if i is None else tokenizer.id_to_token(i)
        for hf_role in hf_roles:
            if token is not None:
                specials[f"{hf_role}_token"] = token
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": model_max_length, **specials}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False), encoding="utf-8")


def _write_marian_tokenizers(src, tgt, folder: Path) -> None:
    """Marian's SentencePiece files for ``MarianTokenizer``: both models and the vocabulary (two
    when source and target number their pieces differently)."""
    (folder / "source.spm").write_bytes(src._model)
    (folder / "target.spm").write_bytes(tgt._model)
    (folder / "vocab.json").write_text(json.dumps(src._vocab, ensure_ascii=False), encoding="utf-8")
    config = {"tokenizer_class": "MarianTokenizer", **{f"{k}_token": v for k, v in src._names.items()}}
    if tgt._vocab != src._vocab:
        (folder / "target_vocab.json").write_text(json.dumps(tgt._vocab, ensure_ascii=False), encoding="utf-8")
        config.update(separate_vocabs=True, target_vocab_file="target_vocab.json")
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False), encoding="utf-8")


# ----------------------------------------------------------------------------- the folder
def _tensors(family: Family, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our state dict under the family's names (each a contiguous copy: safetensors stores no
    shared memory); a parameter the family has no place for is refused by name."""
    out = {}
    for ours, tensor in state.items():
        name = hf_name(family, ours)
        if name is None:
            raise _refuse(f"our parameter {ours}", family.model_type)
        if name == "final_logits_bias":
            tensor = tensor.unsqueeze(0)  # Marian saves it as (1, V)
        out[name] = tensor.detach().to(torch.float32).contiguous().clone()
    return out


def _check_read_back(family: Family, config: dict[str, Any], ours: Any, keys: tuple[str, ...]) -> None:
    """The written config, read by the family's translation, gives our switches back."""
    try:
        read = family.translate(dict(config))
    except HubError as exc:
        raise ExportError(f"format=hf: the written config.json does not read back ({exc})") from None
    for key in keys:
        if key in read and read[key] != getattr(ours, key):
            raise ExportError(f"format=hf: {key}={getattr(ours, key)!r} reads back as {read[key]!r} in "
                              f"{family.model_type}")


def hf_folder_contents(task) -> tuple[dict[str, Any], dict[str, torch.Tensor], Any]:
    """``(config.json, tensors, tokenizer writer)`` for ``task``'s model, or an :class:`ExportError`."""
    model = task.model
    checked = ("norm_first", "embedding_norm", "scale_embeddings", "activation", "norm_eps", "d_model", "n_heads",
               "d_ff", "tie_output", "type_vocab_size", "head_activation", "share_embeddings")
    if type(model) is MaskedLanguageModel:
        name, config = _mlm_family(model)
        family = FAMILIES[name]
        _check_read_back(family, config, model.cfg, checked)
        state = model.state_dict()
        if model.cfg.tie_output:
            state.pop("output_proj.weight", None)
        tokenizer = task.tokenizer
        if tokenizer is None:
            raise ExportError("format=hf: the checkpoint carries no tokenizer")
        return config, _tensors(family, state), lambda folder: _write_fast_tokenizer(
            tokenizer, folder, model.encoder.positional.max_len)
    if type(model) is EncoderDecoder:
        if languages.tag_side(task.hparams) == "decoder":
            raise _refuse("data.tag_side=decoder (a target tag as the decoder's first token, one per "
                          "sentence)", "Marian, whose decoder starts from one fixed token; format=ctranslate2 "
                          "takes it")
        config = _marian_config(model, task.hparams)
        family = FAMILIES["marian"]
        _check_read_back(family, {**config, "decoder_start_token_id": config["pad_token_id"]}, model.cfg, checked)
        state = model.state_dict()
        if model.encoder.positional.layout != "halves":
            state = interleaved_to_halves(state, model.cfg.d_model)
        if model.decoder.output_bias is None:  # Marian always adds one: zeros are ours
            state["decoder.output_bias"] = torch.zeros(model.decoder.output_proj.weight.size(0))
        if model.cfg.share_embeddings:
            state.pop("decoder.embedding.weight")
        if model.cfg.tie_output:
            state.pop("decoder.output_proj.weight")
        tensors = _tensors(family, state)
        if not model.cfg.share_embeddings:  # each stack's own table; model.shared is the joint one
            tensors["model.encoder.embed_tokens.weight"] = tensors.pop("model.shared.weight")
        return config, tensors, lambda folder: _translation_tokenizers(task, folder)
    raise ExportError(f"format=hf: a {type(model).__name__} has no Hugging Face family here (masked LMs are "
                      f"written as BERT, RoBERTa or DistilBERT, translation models as Marian)")


def _translation_tokenizers(task, folder: Path) -> None:
    from transformer.data.core.sentencepiece_tokenizer import SentencePieceTokenizer

    src, tgt = task.src_tokenizer, task.tgt_tokenizer
    if isinstance(src, SentencePieceTokenizer) and isinstance(tgt, SentencePieceTokenizer):
        _write_marian_tokenizers(src, tgt, folder)
    elif src.to_str() == tgt.to_str():
        _write_fast_tokenizer(src, folder, task.model.cfg.max_len, source_eos=True)
    else:
        raise ExportError("format=hf: separate source and target BPE tokenizers have no counterpart in a "
                          "Hugging Face folder (one tokenizer.json); nothing written")


def export_hf(task, output_dir: str | Path, force: bool = False) -> Path:
    """Write ``task``'s model as a Hugging Face folder (``config.json``, ``model.safetensors``,
    the tokenizer's files). Everything is checked before anything is written."""
    from safetensors.torch import save_file

    config, tensors, write_tokenizer = hf_folder_contents(task)

    def fill(folder: Path) -> None:
        (folder / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
        write_tokenizer(folder)

    return write_export_dir(output_dir, fill, force)


__all__ = ["export_hf", "hf_folder_contents", "hf_name", "interleaved_to_halves"]
