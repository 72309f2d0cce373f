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
import logging
import os
import pickle
from pathlib import Path
from typing import Any

import torch

from transformer.data.core.tokenizer import SubwordTokenizer
from transformer.files import read_json_object, refusal_reason
from transformer.hub.families import Family, HubError, family_of, tied_parameters
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
    and framing its own; without one, the tokenizer its vocabulary files describe
    (``hub.tokenizers``: BERT's ``vocab.txt``, RoBERTa's ``vocab.json`` and ``merges.txt``, with
    ``tokenizer_config.json``), as older hub folders keep it. A file the library cannot read is a
    :class:`HubError` naming it, with the library's reason."""
    from transformer.hub.tokenizers import TOKENIZER_FILES, from_vocabulary_files

    path = folder / "tokenizer.json"
    if path.is_file():
        _check_tokenizer_ids(path, read_json(path))
        try:
            return SubwordTokenizer.load(path)
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
                tied: dict[str, str]) -> dict[str, torch.Tensor]:
    """Our state dict from the family's ``weights``: ``expected`` is our model's own state dict
    (names and shapes), ``tied`` maps a parameter to the one it shares (the output projection to
    the token embedding). A tensor with no place, a shape that differs, a duplicate that differs,
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
    if skipped:
        log.warning("weights not used (parts the masked LM does not build): %s", ", ".join(skipped))
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
    (:func:`mlm_checkpoint`) or a translation model (:func:`translation_checkpoint`)."""
    folder = resolve(spec)
    family = family_of(read_config(folder))
    return translation_checkpoint(spec) if family.task == "translation" else mlm_checkpoint(spec)


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


def mlm_checkpoint(spec: str) -> dict[str, Any]:
    """A masked-LM checkpoint dict (``tasks.checkpoint``'s form: task name, hyperparameters, state
    dict, tokenizer) from ``hf:<folder>`` or ``hf:<hub id>``."""
    from transformer.models.mlm import MaskedLanguageModel, MLMConfig

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
    # The shapes and names to fill: a model of this config on the meta device (no memory).
    kwargs = {k: v for k, v in model_cfg.items() if k not in ("_target_", "positional")}
    with torch.device("meta"):
        from transformer.modules.positional import LearnedPositionalEncoding

        cfg = MLMConfig(**kwargs, positional=lambda **kw: LearnedPositionalEncoding(
            **kw, first_position=model_cfg["positional"]["first_position"]))
        meta = MaskedLanguageModel(cfg)
    check_weights_size(folder, meta)
    state = map_weights(family, read_weights(folder), meta.state_dict(), tied_parameters(family.task, model_cfg))
    vocab_size = model_cfg.pop("vocab_size")
    pad_id = model_cfg.pop("pad_id")
    return {
        "transformer_task": "mlm",
        "hyper_parameters": {"model": model_cfg, "piece_vocab_size": vocab_size, "pad_id": pad_id,
                             "data": {"name": folder.name}},
        "state_dict": {f"model.{k}": v for k, v in state.items()},
        "tokenizers": {"src": tokenizer.to_str()},
    }


__all__ = ["PREFIX", "checkpoint", "is_hub_path", "map_weights", "mlm_checkpoint", "translation_checkpoint", "read_config", "read_tokenizer",
           "read_weights", "resolve"]
