"""Reading a Hugging Face folder (``config.json``, ``model.safetensors`` or ``pytorch_model.bin``,
``tokenizer.json`` or the vocabulary files it is built from: Marian's and M2M100's SentencePiece
files included) into what our own checkpoints hold: a flat model config, a state dict of our
modules' names, the tokenizer's JSON. ``hf:<folder>`` names a folder; ``hf:<hub id>``
(``bert-base-uncased``, ``FacebookAI/roberta-base``) is downloaded with
``huggingface_hub.snapshot_download`` first (``HF_ENDPOINT`` and ``HF_HOME`` as the hub's own
tools read them); with the hub offline (``HF_HUB_OFFLINE=1``) a snapshot already in the hub
cache serves, as it does for ``transformers``, and nothing is fetched.

Every tensor of the file is accounted for: each is placed on one of our parameters, checked
equal to the one it duplicates (a tied decoder saved twice), or named in a warning as a part we
do not build (``families.Family.not_built``); any other is a :class:`HubError` naming it, and so
is a parameter of ours that no tensor fills.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pickle
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from transformer.data.core.tokenizer import SubwordTokenizer
from transformer.files import read_json_object, refusal_reason
from transformer.hub.families import Family, HubError, family_of, head_kind, tied_parameters
from transformer.hub.tokenizers import ID_LIMIT
from transformer.ranges import HyperparameterError, check_fields

log = logging.getLogger(__name__)

PREFIX = "hf:"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
#: What a download fetches: the config, the tokenizer and one weights file.
_FILES = ["config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
          "source.spm", "target.spm", "vocab.json", "target_vocab.json", "vocab.txt", "merges.txt",
          "added_tokens.json", "sentencepiece.bpe.model"]


def is_hub_path(path: Any) -> bool:
    """Whether a ``ckpt_path`` names a Hugging Face folder or hub id (``hf:...``)."""
    return isinstance(path, (str, os.PathLike)) and str(path).startswith(PREFIX)


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


@contextlib.contextmanager
def _quiet_http():
    """The HTTP client's line per request (INFO under the commands' logging) held back while the
    hub is asked: a failed download is one error line, a good one the hub's progress bars."""
    loggers = [logging.getLogger(n) for n in ("httpx", "httpx2", "httpcore")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def resolve(spec: str) -> Path:
    """The local folder of ``hf:<folder>`` or ``hf:<hub id>`` (downloaded when not cached here)."""
    name = str(spec)[len(PREFIX):] if is_hub_path(spec) else str(spec)
    if not name:
        raise HubError("hf: names nothing: give hf:<folder> or hf:<hub id>")
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if path.exists() or name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise HubError(f"hf:{name}: no such folder")
    hint = f"download {name} where there is a network and give its folder: ckpt_path=hf:/path/to/folder"
    from huggingface_hub import snapshot_download

    offline = _offline()
    try:
        # One weights file: safetensors where the repository has it, else pytorch_model.bin. Offline
        # (as transformers' from_pretrained does) a snapshot already in the hub cache serves.
        with _quiet_http():
            for weights in WEIGHT_FILES:
                folder = Path(snapshot_download(name, allow_patterns=_FILES + [weights], local_files_only=offline))
                if (folder / weights).is_file():
                    break
    except Exception as exc:  # no network, unknown id, refused, not cached: all one line to the user
        if offline:
            raise HubError(f"hf:{name}: not a folder nor in the hub cache, and the hub is offline "
                           f"(HF_HUB_OFFLINE=1); {hint}") from None
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise HubError(f"hf:{name}: not a folder, and the download failed ({first}); {hint}") from None
    return folder


def read_config(folder: Path) -> dict[str, Any]:
    """``config.json`` of ``folder`` as a mapping."""
    path = folder / "config.json"
    if not path.is_file():
        raise HubError(f"{folder}: no config.json")
    return read_json(path)


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object of the folder (``config.json``, ``tokenizer_config.json`` ...): broken,
    nested too deep or not an object, a :class:`HubError` naming the file."""
    try:
        return read_json_object(path)
    except ValueError as exc:
        raise HubError(str(exc)) from None


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """The tensors of ``model.safetensors`` (preferred) or ``pytorch_model.bin`` (read with
    ``weights_only=True``: tensors and plain containers only)."""
    path = _weights_file(folder)
    if path.name == WEIGHT_FILES[0]:
        from safetensors.torch import load_file

        try:
            return load_file(str(path), device="cpu")
        except Exception as exc:  # the library's errors: a bad header, lying offsets, a short file
            raise HubError(f"{path}: not a readable safetensors file ({type(exc).__name__}: "
                           f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if "GLOBAL" in str(exc):  # a pickle that names code: refused, never run
            raise HubError(f"{path} was refused: loading it would need more than tensors and plain containers "
                           f"({refusal_reason(exc)})") from None
        raise HubError(f"{path}: not a readable weights file ({refusal_reason(exc)})") from None
    except Exception as exc:  # zip and EOF errors all mean "not a weights file"
        raise HubError(f"{path}: not a readable weights file ({type(exc).__name__})") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise HubError(f"{path}: not a state dict")
    return state


def read_tokenizer(folder: Path) -> SubwordTokenizer:
    """The folder's ``tokenizer.json`` (the ``tokenizers`` library's file), its special tokens
    and framing its own, read as ``transformers`` reads it (``hub.tokenizers.as_transformers_reads``:
    its padding and truncation off, ``tokenizer_config.json``'s options applied); without one, the
    tokenizer its vocabulary files describe (``hub.tokenizers``: BERT's ``vocab.txt``, RoBERTa's ``vocab.json`` and ``merges.txt``, with
    ``tokenizer_config.json``), as older hub folders keep it. A file the library cannot read is a
    :class:`HubError` naming it, with the library's reason."""
    from transformer.hub.tokenizers import (TOKENIZER_FILES, TokenizerFilesError, as_transformers_reads,
                                               from_vocabulary_files, settings)

    path = folder / "tokenizer.json"
    if path.is_file():
        state = read_json(path)
        _check_tokenizer_ids(path, state)
        try:
            model_type = read_config(folder).get("model_type") if (folder / "config.json").is_file() else None
            state = as_transformers_reads(state, {"model_type": model_type, **settings(folder)})
        except TokenizerFilesError as exc:  # a broken file names itself; a bad option is the config's
            where = folder / "tokenizer_config.json"
            raise HubError(str(exc) if str(folder) in str(exc) else f"{where}: {exc}") from None
        try:
            return SubwordTokenizer.from_str(json.dumps(state))
        except ValueError as exc:
            raise HubError(f"{path}: {exc}") from None
        except Exception as exc:  # the library's own parse errors are plain Exceptions
            raise HubError(f"{path}: not a tokenizer.json the tokenizers library reads ({_first_line(exc)})") from None
    try:
        built = from_vocabulary_files(folder)
        if built is not None:
            return SubwordTokenizer(built)
    except (ValueError, OSError) as exc:
        raise HubError(str(exc) if str(folder) in str(exc) else f"{folder}: {exc}") from None
    except Exception as exc:  # the library refusing what the files describe (a merge of unknown pieces)
        raise HubError(f"{folder}: the tokenizers library cannot build a tokenizer of its vocabulary files "
                       f"({_first_line(exc)})") from None
    raise HubError(f"{folder}: no tokenizer: looked for {', '.join(TOKENIZER_FILES)}")


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _check_tokenizer_ids(path: Path, state: dict[str, Any]) -> None:
    """Each id of ``tokenizer.json``'s vocabulary and added tokens a whole number from 0 (a row
    of the embedding), named by its field where it is not: the library's own refusal names only
    a column."""
    model = state.get("model")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    entries = list(vocab.items()) if isinstance(vocab, dict) else []
    fields = [(f"model.vocab[{piece!r}]", i) for piece, i in entries]
    for n, added in enumerate(state.get("added_tokens") or []):
        if isinstance(added, dict):
            fields.append((f"added_tokens[{n}].id", added.get("id")))
    for field, i in fields:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < ID_LIMIT:
            raise HubError(f"{path}: {field}={i!r}: expected an id from 0 to {ID_LIMIT - 1}")


def map_weights(family: Family, weights: dict[str, torch.Tensor], expected: dict[str, torch.Tensor],
                tied: dict[str, str], built: str = "the masked LM", unused: list[str] | None = None
                ) -> dict[str, torch.Tensor]:
    """Our state dict from the family's ``weights``: ``expected`` is our model's own state dict
    (names and shapes), ``tied`` maps a parameter to the one it shares (the output projection to
    the token embedding); ``built`` names our model in the warning of the parts it does not build,
    and ``unused``, where given, takes their names instead of the warning.
    A tensor with no place, a shape that differs, a duplicate that differs,
    or a parameter left unfilled is a :class:`HubError` naming it."""
    ours: dict[str, torch.Tensor] = {}
    source: dict[str, str] = {}
    skipped = []
    for name, tensor in weights.items():
        target = family.our_name(name)
        if target is None:
            if family.is_not_built(name):
                if name.endswith("position_ids") and not torch.equal(tensor.flatten(), torch.arange(tensor.numel())):
                    raise HubError(f"weights: {name} is not 0..{tensor.numel() - 1}: positions our model does not use")
                if name.endswith("embed_positions.weight"):
                    _check_sinusoids(name, tensor)
                skipped.append(name)
                continue
            raise HubError(f"weights: {name} has no place in our model")
        target = tied.get(target, target)
        if target not in expected:
            raise HubError(f"weights: {name} has no place in our model (it would be {target}, which this config "
                           f"does not build)")
        if tensor.dim() == 2 and tensor.size(0) == 1 and expected[target].dim() == 1:
            tensor = tensor[0]  # a bias saved as one row (Marian's final_logits_bias (1, V))
        if tuple(tensor.shape) != tuple(expected[target].shape):
            raise HubError(f"weights: {name} has shape {tuple(tensor.shape)}, our {target} "
                           f"{tuple(expected[target].shape)}")
        if target in ours:  # the same tensor saved twice (a tied decoder, a decoder's bias)
            if not torch.equal(ours[target], tensor.to(ours[target].dtype)):
                raise HubError(f"weights: {name} differs from {source[target]}, which fill the same parameter "
                               f"{target}")
            continue
        ours[target] = tensor.float()
        source[target] = name
    for name, shared in tied.items():
        if shared in ours:
            ours[name] = ours[shared]
    missing = [k for k in expected if k not in ours]
    if missing:
        raise HubError(f"weights: nothing fills our {missing[0]}" + (f" (and {len(missing) - 1} more)"
                                                                    if len(missing) > 1 else ""))
    if unused is not None:
        unused.extend(skipped)
    elif skipped:
        log.warning("weights not used (parts %s does not build): %s", built, ", ".join(skipped))
    return ours


def _check_sinusoids(name: str, tensor: torch.Tensor) -> None:
    """A saved fixed position table (Marian's) must be the one our ``layout="halves"`` sinusoids
    compute, or the model would see other positions."""
    from transformer.modules.positional import sinusoid_table

    if tensor.dim() != 2 or (tensor.float() - sinusoid_table(*tensor.shape, "halves")).abs().max().item() > 1e-5:
        raise HubError(f"weights: {name} is not the [sin | cos] sinusoid table our positions compute")


#: What each task's reader calls the models it reads, for the refusal of another family's folder.
_TASK_NAMES = {"mlm": "a masked LM", "translation": "a translation model"}


def _read_family(spec: str, task: str) -> tuple[Path, Family, dict[str, Any]]:
    """The folder of ``spec``, its family (which must be one of ``task``'s) and its config
    translated to ours."""
    folder = resolve(spec)
    config = read_config(folder)
    family = family_of(config)
    if family.task != task:
        raise HubError(f"config.json: model_type={family.model_type!r} is {_TASK_NAMES[family.task]}, not "
                       f"{_TASK_NAMES[task]}")
    model_cfg = family.translate(config)
    check_config(family, model_cfg)
    return folder, family, model_cfg


def check_config(family: Family, model_cfg: dict[str, Any]) -> None:
    """Every value of a translated config against the type and range our model's config class
    declares, named as the folder's ``config.json`` spells it, before anything is built: one
    absurd number (``num_hidden_layers: 1000000``) would otherwise build layer after layer."""
    from transformer.models.mlm import MLMConfig
    from transformer.models.transformer import TransformerConfig

    config_class = TransformerConfig if family.task == "translation" else MLMConfig
    values = {k: v for k, v in model_cfg.items() if k not in ("_target_", "positional", "bos_id", "eos_id")
              and not (k == "pad_id" and v is None)}  # a masked LM's pad may come from its tokenizer
    try:
        check_fields("config.json", values, config_class, complete=False, spelled=family.spelled())
    except HyperparameterError as exc:
        raise HubError(str(exc)) from None


def _weights_file(folder: Path) -> Path:
    """The weights file :func:`read_weights` reads."""
    found = next((folder / f for f in WEIGHT_FILES if (folder / f).is_file()), None)
    if found is None:
        raise HubError(f"{folder}: no {' or '.join(WEIGHT_FILES)}")
    return found


def check_weights_size(folder: Path, model: torch.nn.Module) -> None:
    """The parameters ``config.json`` implies (``model``, built on the meta device: no memory)
    must fit in the weights file at 2 bytes each at the least (fp16/bf16), before the file is
    read: a config that claims more than its file holds is refused, not allocated."""
    count = sum(p.numel() for p in model.parameters())  # each shared (tied) tensor once
    path = _weights_file(folder)
    size = path.stat().st_size
    if 2 * count > size:
        raise HubError(f"config.json: implies {count:,} parameters, which {path.name} ({size:,} bytes) cannot hold")


def checkpoint(spec: str) -> dict[str, Any]:
    """The checkpoint dict of ``hf:<folder>`` or ``hf:<hub id>``, by its family: a masked LM
    (:func:`mlm_checkpoint`), a fine-tuned sequence or token classifier (:func:`head_checkpoint`)
    or a translation model (:func:`translation_checkpoint`)."""
    folder = resolve(spec)
    config = read_config(folder)
    family = family_of(config)
    if family.task == "translation":
        return translation_checkpoint(spec)
    kind = head_kind(config)  # a fine-tuned classifier's head: our classifier or tagger
    return head_checkpoint(spec, kind) if kind is not None else mlm_checkpoint(spec)


def translation_checkpoint(spec: str) -> dict[str, Any]:
    """A translation checkpoint dict (task ``translation``: an ``EncoderDecoder``, its special ids,
    both tokenizers) from a Marian, M2M100, NLLB or mBART-50 ``hf:<folder>`` or ``hf:<hub id>``.

    Marian's tokenizers are its SentencePiece files (``source.spm``, ``target.spm``,
    ``vocab.json``: the opus-mt models) or, in a model of ours written as Marian
    (``export.hf``), one ``tokenizer.json`` for both sides. Its decoder starts from
    ``decoder_start_token_id``, which must be the target tokenizer's start (``bos_id``: the
    padding id of a SentencePiece vocabulary, the BOS of a ``tokenizer.json``), because training
    frames its targets with the tokenizer's start and search starts from the task's ``bos_id``.

    The multilingual families (``Family.language_styles``) have one tokenizer for both sides:
    M2M100's ``sentencepiece.bpe.model`` and ``vocab.json`` with its language codes after the
    vocabulary, or NLLB's and mBART-50's ``tokenizer.json``; their decoder starts from
    ``decoder_start_token_id`` (EOS), then the target's code. The checkpoint records every
    direction between the languages (``data.languages``), each language's code
    (``data.language_codes``) and ``data.tag_side=codes`` (``data.parallel.languages``)."""
    from transformer.models.transformer import EncoderDecoder, TransformerConfig

    folder, family, model_cfg = _read_family(spec, "translation")
    tok_config_path = folder / "tokenizer_config.json"
    tok_config = read_json(tok_config_path) if tok_config_path.is_file() else {}
    if family.language_styles:
        src_tok, style, codes = _coded_tokenizer(folder, family, tok_config)
        tgt_tok = src_tok
    else:
        src_tok, tgt_tok = _translation_tokenizers(folder, tok_config)
    ids = {k: model_cfg.pop(k) for k in ("pad_id", "bos_id", "eos_id")}
    vocab_size, tgt_vocab_size = model_cfg.pop("vocab_size"), model_cfg.pop("tgt_vocab_size")
    _check_translation_ids(family, ids, src_tok, tgt_tok, vocab_size, tgt_vocab_size)
    # The shapes and names to fill: a model of this config on the meta device (no memory).
    kwargs = {k: v for k, v in model_cfg.items() if k not in ("_target_", "positional")}
    kwargs.update(vocab_size=vocab_size, tgt_vocab_size=tgt_vocab_size, pad_id=ids["pad_id"])
    with torch.device("meta"):
        cfg = TransformerConfig(**kwargs, positional=_positional_factory(model_cfg["positional"]))
        meta = EncoderDecoder(cfg)
    check_weights_size(folder, meta)
    state = map_weights(family, read_weights(folder), meta.state_dict(), tied_parameters(family.task, model_cfg))
    data: dict[str, Any] = {"name": folder.name}
    if family.language_styles:
        from transformer.data.parallel.languages import MULTI
        from transformer.hub.languages import names_of

        codes_by_name = names_of(style, codes)
        data.update(languages=sorted(codes_by_name), language_codes=codes_by_name, tag_side="codes")
        langs = {"source": MULTI, "target": MULTI}
    else:
        langs = {k: str(tok_config.get(f"{k}_lang") or k) for k in ("source", "target")}
    return {
        "transformer_task": "translation",
        "hyper_parameters": {"model": model_cfg, "vocab_size": vocab_size, "tgt_vocab_size": tgt_vocab_size,
                             **ids, "src_lang": langs["source"], "tgt_lang": langs["target"], "data": data},
        "state_dict": {f"model.{k}": v for k, v in state.items()},
        "tokenizers": {"src": src_tok.to_str(), "tgt": tgt_tok.to_str()},
    }


def _check_translation_ids(family: Family, ids: dict[str, int], src_tok, tgt_tok, vocab_size: int,
                           tgt_vocab_size: int | None) -> None:
    """The config's special ids must be the target tokenizer's (the multilingual families'
    decoder starts from EOS, Marian's from its tokenizer's start), and every piece a row of the
    model's vocabulary; a :class:`HubError` naming the key otherwise."""
    start = tgt_tok.eos_id if family.language_styles else tgt_tok.bos_id
    for role, key, tok in (("pad", "pad_token_id", tgt_tok.pad_id), ("eos", "eos_token_id", tgt_tok.eos_id),
                           ("start", "decoder_start_token_id", start)):
        got = ids["bos_id" if role == "start" else f"{role}_id"]
        if got != tok:
            raise HubError(f"config.json: {key}={got} but the target tokenizer's {role} is {tok}")
    for name, tok, size in (("source", src_tok, vocab_size), ("target", tgt_tok, tgt_vocab_size or vocab_size)):
        if tok.vocab_size > size:
            raise HubError(f"vocab.json: {tok.vocab_size} {name} pieces, more than the model's {size}")
        if tok.max_id >= size:
            raise HubError(f"vocab.json: a {name} piece has id {tok.max_id}, past the model's {size} rows "
                           f"(config.json: vocab_size={size})")


def _positional_factory(node: dict[str, Any]):
    """The ``_partial_`` positional factory a translated config names (``modules.positional``)."""
    import functools

    from transformer.modules import positional

    kwargs = {k: v for k, v in node.items() if k not in ("_target_", "_partial_")}
    return functools.partial(getattr(positional, node["_target_"]), **kwargs)


def _coded_tokenizer(folder: Path, family: Family, tok_config: dict[str, Any]):
    """The one tokenizer of a multilingual family's folder, the spelling of its language codes
    (``hub.languages``) and the codes, in id order: NLLB's or mBART-50's ``tokenizer.json`` (its
    special tokens of the family's shape), or M2M100's ``sentencepiece.bpe.model`` and
    ``vocab.json`` (its codes named by ``language_codes`` in ``tokenizer_config.json``)."""
    import transformer.hub.languages as languages

    if (folder / "tokenizer.json").is_file():
        tok = read_tokenizer(folder)
        specials = sorted(tok.special_ids)
        tokens = [tok.id_to_token(i) or "" for i in specials]
        for style in family.language_styles:
            codes = languages.codes_in(style, tokens)
            if codes:
                return tok, style, codes
        raise HubError(f"{folder / 'tokenizer.json'}: no language codes among its special tokens (a "
                       f"{family.title} tokenizer has codes such as "
                       f"{', '.join(_EXAMPLE_CODES[s] for s in family.language_styles)})")
    if "m2m100" not in family.language_styles or not (folder / "sentencepiece.bpe.model").is_file():
        raise HubError(f"{folder}: no tokenizer.json (nor {family.title}'s sentencepiece.bpe.model and vocab.json)")
    if not (folder / "vocab.json").is_file():
        raise HubError(f"{folder}: no vocab.json (M2M100's tokenizer files: sentencepiece.bpe.model, vocab.json)")
    code_set = tok_config.get("language_codes", "m2m100")
    if code_set not in languages.M2M100_CODE_SETS:
        raise HubError(f"tokenizer_config.json: language_codes={code_set!r}: expected one of "
                       f"{', '.join(languages.M2M100_CODE_SETS)}")
    codes = [languages.m2m100_code(c) for c in languages.M2M100_CODE_SETS[code_set]]
    from transformer.data.core.sentencepiece_tokenizer import m2m100_tokenizer

    try:
        return m2m100_tokenizer(folder, codes, tok_config), "m2m100", codes
    except (ValueError, OSError) as exc:
        raise HubError(str(exc) if str(folder) in str(exc) else f"{folder}: {exc}") from None


#: A language code of each spelling, for a refusal's example.
_EXAMPLE_CODES = {"m2m100": "__fr__", "nllb": "fra_Latn", "mbart50": "fr_XX"}


def _translation_tokenizers(folder: Path, tok_config: dict[str, Any]):
    """The source and target tokenizers of a translation folder: Marian's SentencePiece files, or
    one ``tokenizer.json`` for both sides (a model of ours written by ``export.hf``)."""
    from transformer.data.core.sentencepiece_tokenizer import marian_tokenizers

    spm = [f for f in ("source.spm", "target.spm", "vocab.json") if (folder / f).is_file()]
    if not spm and (folder / "tokenizer.json").is_file():
        tok = read_tokenizer(folder)
        return tok, tok
    if len(spm) < 3:
        missing = next(f for f in ("source.spm", "target.spm", "vocab.json") if f not in spm)
        raise HubError(f"{folder}: no {missing} (Marian's tokenizer files: source.spm, target.spm, vocab.json; "
                       f"or one tokenizer.json)")
    try:
        return marian_tokenizers(folder, tok_config)
    except (ValueError, OSError) as exc:
        raise HubError(str(exc) if str(folder) in str(exc) else f"{folder}: {exc}") from None


def _encoder_folder(spec: str) -> tuple[Path, Family, dict[str, Any], SubwordTokenizer]:
    """The folder of a BERT-family ``spec``, its family, its config translated to ours (the pad
    id the tokenizer's where the file names none) and its tokenizer, checked against each other."""
    folder, family, model_cfg = _read_family(spec, "mlm")
    tokenizer = read_tokenizer(folder)
    if model_cfg["pad_id"] is None:
        model_cfg["pad_id"] = tokenizer.pad_id
    if model_cfg["pad_id"] != tokenizer.pad_id:
        raise HubError(f"config.json: pad_token_id={model_cfg['pad_id']} but the tokenizer's pad is "
                       f"{tokenizer.pad_id}")
    if tokenizer.vocab_size > model_cfg["vocab_size"]:
        raise HubError(f"tokenizer.json: {tokenizer.vocab_size} pieces, more than the model's vocab_size="
                       f"{model_cfg['vocab_size']}")
    if tokenizer.max_id >= model_cfg["vocab_size"]:
        raise HubError(f"tokenizer.json: the piece {tokenizer.id_to_token(tokenizer.max_id)!r} has id "
                       f"{tokenizer.max_id}, past the model's vocab_size={model_cfg['vocab_size']} rows")
    return folder, family, model_cfg, tokenizer


def _meta_model(model_class: type, model_cfg: dict[str, Any], **extra: Any) -> torch.nn.Module:
    """A model of ``model_class`` with the settings of ``model_cfg`` its config takes (and
    ``extra``), on the meta device: the shapes and names to fill, in no memory."""
    import dataclasses
    import functools

    from transformer.modules.positional import LearnedPositionalEncoding

    names = {f.name for f in dataclasses.fields(model_class.config_class)}
    kwargs = {k: v for k, v in model_cfg.items() if k in names and k not in ("_target_", "positional")}
    positional = functools.partial(LearnedPositionalEncoding, first_position=model_cfg["positional"]["first_position"])
    with torch.device("meta"):
        return model_class(model_class.config_class(**kwargs, **extra, positional=positional))


def _cut_to_tokenizer(folder: Path, model_cfg: dict[str, Any], state: dict[str, torch.Tensor]) -> None:
    """``model_max_length`` of ``tokenizer_config.json``, where it is fewer pieces than the position
    table holds: the table is cut to it (``max_len``), so that training, classifying and tagging cut
    a longer row there, as they cut one to the table (``tasks.build.position_limit``)."""
    from transformer.hub.tokenizers import TokenizerFilesError, settings

    try:
        limit = settings(folder).get("model_max_length")
    except TokenizerFilesError as exc:
        raise HubError(str(exc)) from None
    if limit is None:
        return
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit < 1:
        raise HubError(f"{folder / 'tokenizer_config.json'}: model_max_length={limit!r}: expected a number of pieces")
    rows = int(min(limit, 2**31)) + model_cfg["positional"]["first_position"]
    if rows >= model_cfg["max_len"]:
        return
    key = "encoder.positional.embedding.weight"
    state[key] = state[key][:rows].clone()
    log.info("tokenizer_config.json: model_max_length=%d: the model reads at most %d pieces (the position table's "
             "first %d of %d rows)", int(limit), int(limit), rows, model_cfg["max_len"])
    model_cfg["max_len"] = rows


def _architecture(folder: Path, family: Family) -> str:
    """The class ``config.json``'s ``architectures`` names first, for messages."""
    names = read_config(folder).get("architectures")
    first = names[0] if isinstance(names, list) and names and isinstance(names[0], str) else None
    return f"a {first} folder" if first else f"a {family.title} folder"


def mlm_checkpoint(spec: str) -> dict[str, Any]:
    """A masked-LM checkpoint dict (``tasks.checkpoint``'s form: task name, hyperparameters, state
    dict, tokenizer) from ``hf:<folder>`` or ``hf:<hub id>``.

    A folder without the masked-LM head (``BertModel``, ``RobertaModel``, ``DistilBertModel``, as
    sentence-transformers and many fine-tuned encoders ship; or a fine-tuned classifier, whose
    head is another's) gives the encoder alone: its checkpoint says so under ``encoder_only``,
    which fine-tuning reads (the head starts fresh, said in a warning) and every command that needs
    the whole masked LM refuses (``tasks.checkpoint.read_checkpoint``)."""
    from transformer.hub.families import HEADS, head_kind, head_names
    from transformer.models.mlm import MaskedLanguageModel

    folder, family, model_cfg, tokenizer = _encoder_folder(spec)
    kind = head_kind(read_config(folder))
    if kind is not None:  # a fine-tuned head: read as a part the masked LM does not build
        head = HEADS[kind].get(family.model_type, ())
        family = replace(family, not_built=family.not_built + tuple(its for its, _ in head))
    meta = _meta_model(MaskedLanguageModel, model_cfg)
    check_weights_size(folder, meta)
    weights = read_weights(folder)
    expected, tied = meta.state_dict(), tied_parameters(family.task, model_cfg)
    encoder_only, unused = None, None
    if not any((ours := family.our_name(n)) is not None and not ours.startswith("encoder.") for n in weights):
        unused = []  # named in the one warning of what starts fresh (tasks.transfer), or refused
        expected, tied = {k: v for k, v in expected.items() if k.startswith("encoder.")}, {}
        encoder_only = (f"{_architecture(folder, family)} holds the encoder alone, without the masked-LM head "
                        f"({head_names(family)})" if kind is None else
                        f"{_architecture(folder, family)} holds a {kind} classifier, whose head is not the masked "
                        f"LM's ({head_names(family)})")
    state = map_weights(family, weights, expected, tied, unused=unused)
    _cut_to_tokenizer(folder, model_cfg, state)
    vocab_size = model_cfg.pop("vocab_size")
    pad_id = model_cfg.pop("pad_id")
    out = {
        "transformer_task": "mlm",
        "hyper_parameters": {"model": model_cfg, "piece_vocab_size": vocab_size, "pad_id": pad_id,
                             "data": {"name": folder.name}},
        "state_dict": {f"model.{k}": v for k, v in state.items()},
        "tokenizers": {"src": tokenizer.to_str()},
    }
    if encoder_only is not None:
        out["encoder_only"] = encoder_only
        out["not_used"] = unused
    return out


def _labels(config: dict[str, Any], kind: str) -> list[str]:
    """The label names of a fine-tuned head's ``config.json``, by id: ``id2label`` (``{"0": ...}``),
    every id from 0 once, each name a distinct text."""
    id2label = config.get("id2label")
    if not isinstance(id2label, dict) or not id2label:
        raise HubError(f"config.json: id2label={id2label!r}: expected the labels by id ({{\"0\": \"NEGATIVE\", ...}})")
    by_id = {}
    for key, label in id2label.items():
        if not (isinstance(key, str) and key.isdigit()):
            raise HubError(f"config.json: id2label has the key {key!r}: expected ids \"0\", \"1\", ...")
        by_id[int(key)] = label
    if sorted(by_id) != list(range(len(by_id))):
        raise HubError(f"config.json: id2label has the ids {sorted(by_id)}: expected 0 to {len(by_id) - 1}, each once")
    labels = [by_id[i] for i in range(len(by_id))]
    bad = [x for x in labels if not isinstance(x, str) or not x.strip() or "\t" in x or "\n" in x]
    if bad:
        raise HubError(f"config.json: id2label: label {bad[0]!r}: expected a name without tabs or line breaks")
    for key in ("num_labels", "_num_labels"):
        if key in config and config[key] != len(labels):
            raise HubError(f"config.json: {key}={config[key]!r}, but id2label names {len(labels)} labels")
    if len(set(labels)) < len(labels):
        raise HubError(f"config.json: id2label names {next(x for x in labels if labels.count(x) > 1)!r} twice")
    if kind == "sequence" and len(labels) < 2:
        raise HubError(f"config.json: id2label names {len(labels)} label: a classifier picks one of at least 2")
    problem = config.get("problem_type")
    if kind == "sequence" and problem not in (None, "single_label_classification"):
        raise HubError(f"config.json: problem_type={problem!r} has no place in our model (it picks one label of "
                       f"a softmax: single_label_classification)")
    return labels


def head_checkpoint(spec: str, kind: str) -> dict[str, Any]:
    """A classification (``kind="sequence"``: ``*ForSequenceClassification``) or tagging
    (``"token"``: ``*ForTokenClassification``) checkpoint dict from a fine-tuned BERT-family
    folder: its encoder, its head on our modules (``hub.families.HEADS``: the sequence head's
    dense layer as ``FirstPooling(dense=...)``, the labels' layer as ``classifier``) and
    ``id2label``'s names as the labels. A head whose shape disagrees with ``id2label`` is a
    :class:`HubError` naming both."""
    import dataclasses
    import functools

    from transformer.hub.families import POOLER_ACTIVATIONS, with_head
    from transformer.models.classifier import SequenceClassifier
    from transformer.models.pooling import FirstPooling
    from transformer.models.tagger import Tagger

    folder, family, model_cfg, tokenizer = _encoder_folder(spec)
    labels = _labels(read_config(folder), kind)
    family = with_head(family, kind)
    weights = read_weights(folder)
    scorer = next((n for n in weights if family.our_name(n) == "classifier.weight"), None)
    if scorer is not None and weights[scorer].dim() == 2 and weights[scorer].shape[0] != len(labels):
        raise HubError(f"weights: {scorer} scores {weights[scorer].shape[0]} labels, but config.json's id2label "
                       f"names {len(labels)}")
    if kind == "sequence":
        dense = POOLER_ACTIVATIONS[family.model_type]
        model_class, target = SequenceClassifier, "SequenceClassifier"
        settings = {"pooling": {"_target_": "FirstPooling", "_partial_": True, "dense": dense}}
        meta = _meta_model(model_class, model_cfg, n_classes=len(labels),
                           pooling=functools.partial(FirstPooling, dense=dense))
    else:
        model_class, target = Tagger, "Tagger"
        settings = {"pooling": "first", "context": "piece", "char_channels": 0}
        meta = _meta_model(model_class, model_cfg, n_tags=len(labels), **settings)
    check_weights_size(folder, meta)
    state = map_weights(family, weights, meta.state_dict(), {}, built=f"the {kind} classifier")
    _cut_to_tokenizer(folder, model_cfg, state)
    names = {f.name for f in dataclasses.fields(model_class.config_class)}
    ours = {"_target_": target, **settings,
            **{k: v for k, v in model_cfg.items() if k in names and k not in ("vocab_size", "pad_id", *settings)}}
    hp = {"model": ours, "piece_vocab_size": model_cfg["vocab_size"], "pad_id": model_cfg["pad_id"]}
    if kind == "sequence":
        hp.update(labels=labels, data={"name": folder.name})
        task = "classification"
    else:
        hp.update(tags=labels, data={"name": folder.name, "format": "conllu", "tagset": "upos",
                                     "files": {"train": None, "dev": None, "test": None}})
        task = "tagging"
    return {"transformer_task": task, "hyper_parameters": hp, "state_dict": {f"model.{k}": v for k, v in state.items()},
            "tokenizers": {"src": tokenizer.to_str()}}


def init_checkpoint(spec: str) -> dict[str, Any]:
    """What ``init_from=hf:<folder>`` starts a model from: a translation folder's checkpoint
    (:func:`checkpoint`); any BERT-family folder's masked LM (:func:`mlm_checkpoint`), its encoder alone
    where the folder has no masked-LM head (an encoder, a fine-tuned classifier). A fine-tuned
    classifier's head comes along under ``head`` (its kind, labels, model config and tensors):
    a classifier or tagger of the same labels continues from it (``tasks.transfer.copy_head``)."""
    folder = resolve(spec)
    config = read_config(folder)
    family = family_of(config)
    if family.task != "mlm":  # a translation model starts whole, as it reads
        return checkpoint(spec)
    ckpt = mlm_checkpoint(spec)
    kind = head_kind(config)
    if kind is not None:  # the head too, which a model of the same labels continues from
        head = head_checkpoint(spec, kind)
        hp = head["hyper_parameters"]
        state = {k: v for k, v in head["state_dict"].items() if not k.startswith("model.encoder.")}
        ckpt["head"] = {"kind": kind, "labels": hp.get("labels") or hp.get("tags"), "model": hp["model"],
                        "state_dict": state}
    return ckpt


__all__ = ["PREFIX", "checkpoint", "head_checkpoint", "init_checkpoint", "is_hub_path", "map_weights", "mlm_checkpoint",
           "translation_checkpoint", "read_config", "read_tokenizer", "read_weights", "resolve"]
