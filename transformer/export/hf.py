"""A checkpoint written back as a Hugging Face folder that ``transformers``' Auto classes load:
``config.json``, ``model.safetensors`` and the tokenizer's files.

Each family of ``hub.families`` is one declaration, read there and written here: its config
table inverted (``Family.write_config``) and its tensor-name templates swapped
(``Family.hf_name``). A model whose switches match a family is written as that family:

=====================================================  =========================================
our model and switches                                 written as
=====================================================  =========================================
masked LM, learned positions from row 0, token types   ``BertForMaskedLM``
masked LM, positions from row ``pad_id + 1``           ``RobertaForMaskedLM``
masked LM, no token types, epsilon 1e-12               ``DistilBertForMaskedLM``
encoder-decoder, post-norm, sinusoids, epsilon 1e-5    ``MarianMTModel``
encoder-decoder, pre-norm, fairseq sinusoids from      ``M2M100ForConditionalGeneration``
row ``pad_id + 1``, one shared table, no logits bias
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
``vocab.json``) for ``MarianTokenizer``. A multilingual family's model (``data.tag_side=codes``:
read from an M2M100 or NLLB folder, or fine-tuned from one) writes M2M100's files
(``sentencepiece.bpe.model``, ``vocab.json``, ``language_codes``) for ``M2M100Tokenizer``, or
NLLB's ``tokenizer.json`` for ``NllbTokenizer``; our ``<2xx>``-tagged multilingual models have
no M2M100 counterpart (its source starts with the source's language, not the target's).

Shape legend: V vocabulary, D = d_model.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Mapping

import torch

from transformer.data.parallel.languages import Languages
from transformer.export.folder import ExportError, write_export_dir
from transformer.hub.families import FAMILIES, MLM_SWITCHES, Family, HubError, tied_parameters
from transformer.models.mlm import MaskedLanguageModel
from transformer.models.ctc import JointCTCEncoderDecoder
from transformer.models.transformer import EncoderDecoder
from transformer.modules.positional import LearnedPositionalEncoding, SinusoidalPositionalEncoding


def _refuse(setting: str, family: str) -> ExportError:
    return ExportError(f"format=hf: {setting} has no counterpart in {family}; nothing written")


def _require(cfg: Any, wants: Mapping[str, Any], what: str, verb: str = "computes") -> None:
    """Refuse the first setting of ``cfg`` (a model config) that differs from what ``what`` computes."""
    ours = vars(cfg)
    for name, want in wants.items():
        if ours[name] != want:
            raise _refuse(f"{name}={ours[name]!r}", f"{what} (which {verb} {name}={want!r})")


# ----------------------------------------------------------------------------- masked LMs
def _differ(family: Family, ours: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first of our masked LM's settings ``family`` computes otherwise, as ``(ours, theirs)``:
    an activation it has no name for, one of its switches, or a setting that follows from its
    config (the head's activation, the first position row); None: it computes what we do."""
    for name in ("activation", "head_activation"):
        if ours[name] not in family.activations:
            return f"{name}={ours[name]!r}", f"whose activations are {', '.join(family.activations)}"
    settings = family.settings(ours)
    wants = {**family.switches, "head_activation": settings["head_activation"],
             "first_position": settings["positional"]["first_position"]}
    return next(((f"{k}={ours[k]!r}", f"which computes {k}={v!r}") for k, v in wants.items() if ours[k] != v), None)


def _mlm_family(model: MaskedLanguageModel) -> Family:
    """The family that computes what ``model`` does."""
    cfg, pos = model.cfg, model.encoder.positional
    what = "BERT, RoBERTa and DistilBERT"
    _require(cfg, {**MLM_SWITCHES, "window": None}, what, "compute")
    if type(pos) is not LearnedPositionalEncoding:
        raise _refuse(f"the positional encoding {type(pos).__name__}", what)
    ours = {**vars(cfg), "first_position": pos.first_position}
    missed = {}
    # DistilBERT has no token types; BERT and RoBERTa always have them.
    for name in ("distilbert",) if cfg.type_vocab_size == 0 else ("bert", "roberta"):
        family = FAMILIES[name]
        differ = _differ(family, ours)
        if differ is None:
            return family
        missed.setdefault(differ[0], []).append(f"{family.title} ({differ[1]})")
    raise _refuse(" and ".join(missed), " or ".join(t for titles in missed.values() for t in titles))


# ----------------------------------------------------------------------------- Marian
def _marian_config(model: EncoderDecoder, hp: Any) -> dict[str, Any]:
    """Marian's ``config.json`` for ``model``; a setting Marian does not compute is refused."""
    cfg, family = model.cfg, FAMILIES["marian"]
    # Ours may differ in these: a missing output bias is written as zeros, the target padding's mask
    # changes only teacher forcing, and the positions are checked by their module.
    free = ("output_bias", "mask_target_padding", "positional")
    computes = {k: v for k, v in family.switches.items() if k not in free}
    _require(cfg, {**computes, "type_vocab_size": 0, "window": None, "memory_positions": False}, family.title)
    for stack, part in (("encoder", model.encoder), ("decoder", model.decoder)):
        pos = part.positional
        if type(pos) is not SinusoidalPositionalEncoding:
            raise _refuse(f"the {stack}'s positional encoding {type(pos).__name__}", "Marian (sinusoids)")
    if cfg.activation not in family.activations:
        raise _refuse(f"activation={cfg.activation!r}", f"{family.title} (whose activations are "
                      f"{', '.join(family.activations)})")
    if model.encoder.positional.layout != "halves" and cfg.d_model % 2:
        raise _refuse(f"interleaved sinusoids with an odd d_model={cfg.d_model}", "Marian")
    # Our decoder starts from BOS (the padding id in a model read from a Marian folder).
    return family.write_config({**vars(cfg), "pad_id": hp.pad_id, "bos_id": hp.bos_id, "eos_id": hp.eos_id})


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


# ----------------------------------------------------------------------------- M2M100
def _m2m100_config(model: EncoderDecoder, hp: Any, langs: Languages) -> dict[str, Any]:
    """M2M100's ``config.json`` for ``model``; a setting M2M100 does not compute is refused."""
    cfg, family = model.cfg, FAMILIES["m2m_100"]
    if not langs.coded and langs.multilingual:
        raise _refuse(f"data.tag_side={langs.tag_side} (a <2xx> target tag)", "M2M100, whose source starts with the "
                      "source's language code and whose decoder is forced to the target's after EOS")
    free = ("positional", "tgt_vocab_size", "output_bias", "mask_target_padding")  # checked below
    _require(cfg, {**{k: v for k, v in family.switches.items() if k not in free}, "type_vocab_size": 0,
                   "window": None, "memory_positions": False}, family.title)
    if model.decoder.output_bias is not None and bool(model.decoder.output_bias.detach().any()):
        raise _refuse("output_bias=True (a learned vocabulary-score bias)", "M2M100, which adds none")
    for stack, part in (("encoder", model.encoder), ("decoder", model.decoder)):
        pos = part.positional
        want = f"fairseq sinusoids from row pad_token_id + 1 = {hp.pad_id + 1}"
        if type(pos) is not SinusoidalPositionalEncoding:
            raise _refuse(f"the {stack}'s positional encoding {type(pos).__name__}", f"M2M100 ({want})")
        if pos.layout != "fairseq" or pos.first_position != hp.pad_id + 1:
            raise _refuse(f"the {stack}'s sinusoids (layout={pos.layout!r}, first_position={pos.first_position})",
                          f"M2M100 ({want})")
    if cfg.activation not in family.activations:
        raise _refuse(f"activation={cfg.activation!r}", f"{family.title} (whose activations are "
                      f"{', '.join(family.activations)})")
    return family.write_config({**vars(cfg), "pad_id": hp.pad_id, "bos_id": hp.bos_id, "eos_id": hp.eos_id})


def _write_m2m100_tokenizer(tok, folder: Path, codes: list[str]) -> None:
    """M2M100's files for ``M2M100Tokenizer``: the SentencePiece model, the vocabulary without
    its language codes (the tokenizer numbers them after it) and which code list it has."""
    import transformer.hub.languages as hub_languages

    sets = {name: [hub_languages.m2m100_code(c) for c in langs] for name, langs in
            hub_languages.M2M100_CODE_SETS.items()}
    name = next((n for n, listed in sets.items() if listed == codes), None)
    if name is None:
        raise ExportError("format=hf: the tokenizer's language codes are not M2M100's (m2m100 or wmt21 lists); "
                          "nothing written")
    (folder / "sentencepiece.bpe.model").write_bytes(tok._model)
    vocab = {piece: i for piece, i in tok._vocab.items() if piece not in set(codes)}
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    config = {"tokenizer_class": "M2M100Tokenizer", "language_codes": name, "bos_token": "<s>",
              **{f"{k}_token": v for k, v in tok._names.items() if k != "start"}}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False), encoding="utf-8")


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
def _tensors(family: Family, state: dict[str, torch.Tensor], flags: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """Our state dict under the family's names (each a contiguous copy: safetensors stores no
    shared memory); a parameter the family has no place for is refused by name. A parameter
    that is another (a tied or shared table) is written once, under the other's name."""
    out, tied = {}, tied_parameters(family.task, flags)
    for ours, tensor in state.items():
        if ours in tied:
            continue
        name = family.hf_name(ours, flags)
        if name is None:
            raise _refuse(f"our parameter {ours}", family.model_type)
        if name in family.saved_as_row:
            tensor = tensor.unsqueeze(0)  # (V,) -> (1, V)
        out[name] = tensor.detach().to(torch.float32).contiguous().clone()
    return out


def _check_read_back(family: Family, config: dict[str, Any], ours: Mapping[str, Any], keys: tuple[str, ...]) -> None:
    """The written config, read by the family's translation, gives our switches back."""
    try:
        read = family.translate(dict(config))
    except HubError as exc:
        raise ExportError(f"format=hf: the written config.json does not read back ({exc})") from None
    for key in keys:
        if key in read and read[key] != ours[key]:
            raise ExportError(f"format=hf: {key}={ours[key]!r} reads back as {read[key]!r} in "
                              f"{family.model_type}")


def hf_folder_contents(task) -> tuple[dict[str, Any], dict[str, torch.Tensor], Any]:
    """``(config.json, tensors, tokenizer writer)`` for ``task``'s model, or an :class:`ExportError`.
    A ``JointCTCEncoderDecoder`` is written without its CTC head, which only trains the encoder:
    the encoder-decoder that decodes is what the family holds (CTranslate2's export skips it alike)."""
    model = task.model
    if isinstance(model, JointCTCEncoderDecoder):
        model = model.attention_model()
    checked = ("norm_first", "embedding_norm", "scale_embeddings", "activation", "norm_eps", "d_model", "n_heads",
               "d_ff", "tie_output", "type_vocab_size", "head_activation", "share_embeddings")
    if type(model) is MaskedLanguageModel:
        family = _mlm_family(model)
        config = family.write_config(vars(model.cfg))
        _check_read_back(family, config, vars(model.cfg), checked)
        tokenizer = task.tokenizer
        if tokenizer is None:
            raise ExportError("format=hf: the checkpoint carries no tokenizer")
        return config, _tensors(family, model.state_dict(), vars(model.cfg)), lambda folder: _write_fast_tokenizer(
            tokenizer, folder, model.encoder.positional.max_len)
    if type(model) is EncoderDecoder and model.cfg.norm_first:  # pre-norm: M2M100's layers
        try:
            config = _m2m100_config(model, task.hparams, task.languages)
        except ExportError as exc:  # say why M2M100 was the family tried
            raise ExportError(f"norm_first=True (pre-norm layers, M2M100's; Marian's are post-norm): "
                              f"{str(exc).removeprefix('format=hf: ')}") from None
        family = FAMILIES["m2m_100"]
        _check_read_back(family, config, vars(model.cfg), checked)
        state = {k: v for k, v in model.state_dict().items() if k != "decoder.output_bias"}  # zeros: none
        return config, _tensors(family, state, vars(model.cfg)), lambda folder: _translation_tokenizers(task, folder)
    if type(model) is EncoderDecoder:
        if task.languages.tag_to_decoder:
            raise _refuse("data.tag_side=decoder (a target tag as the decoder's first token, one per "
                          "sentence)", "Marian, whose decoder starts from one fixed token; format=ctranslate2 "
                          "takes it")
        config = _marian_config(model, task.hparams)
        family = FAMILIES["marian"]
        _check_read_back(family, config, vars(model.cfg), checked)
        state = model.state_dict()
        if model.encoder.positional.layout != "halves":
            state = interleaved_to_halves(state, model.cfg.d_model)
        if model.decoder.output_bias is None:  # Marian always adds one: zeros are ours
            state["decoder.output_bias"] = torch.zeros(model.decoder.output_proj.weight.size(0))
        return config, _tensors(family, state, vars(model.cfg)), lambda folder: _translation_tokenizers(task, folder)
    raise ExportError(f"format=hf: a {type(model).__name__} has no Hugging Face family here (masked LMs are "
                      f"written as BERT, RoBERTa or DistilBERT, translation models as Marian or M2M100)")


def _translation_tokenizers(task, folder: Path) -> None:
    from transformer.data.core.sentencepiece_tokenizer import SentencePieceTokenizer

    src, tgt = task.src_tokenizer, task.tgt_tokenizer
    coded = task.languages.coded
    if coded and isinstance(src, SentencePieceTokenizer):  # M2M100's
        codes = [t for t in src._others if t.startswith("__") and t.endswith("__")]
        _write_m2m100_tokenizer(src, folder, sorted(codes, key=src.token_to_id))
    elif isinstance(src, SentencePieceTokenizer) and isinstance(tgt, SentencePieceTokenizer):
        _write_marian_tokenizers(src, tgt, folder)
    elif coded:  # NLLB's tokenizer.json, its codes special tokens of it
        src.save(folder / "tokenizer.json")
        config = {"tokenizer_class": "NllbTokenizer", "model_max_length": task.model.cfg.max_len,
                  **{f"{role}_token": src.id_to_token(i) for role, i in (("bos", src.bos_id), ("eos", src.eos_id),
                                                                         ("pad", src.pad_id), ("unk", src.unk_id))}}
        (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False),
                                                      encoding="utf-8")
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


__all__ = ["export_hf", "hf_folder_contents", "interleaved_to_halves"]
