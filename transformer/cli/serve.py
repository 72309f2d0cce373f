"""`transformer-serve`: checkpoints of every kind behind an HTTP API and a page
(``transformer.serve``); everything is checked and loaded before the port is bound (docs/cli.md).

    transformer-serve 'models=[{id:de-en,ckpt_path:best.ckpt,decode:beam,beam_size:4}]'
    transformer-serve 'models=[{id:de-en,ckpt_path:a.ckpt},{id:upos,ckpt_path:tagger.ckpt}]' port=8080
    transformer-serve 'models=[{id:de-en-ct2,ckpt_path:exports/de-en,decode:beam}]'  # a CTranslate2 export
"""

from __future__ import annotations

import errno
import logging
import os
import re
import socket
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from transformer import kinds
from transformer.cli import validate
from transformer.cli.common import checkpoint_label, hydra_entry, load_for_inference
from transformer.decoding import strategies
from transformer.decoding.settings import DecodeSettings
from transformer.tasks.build import show

ENTRY_KEYS = ("id", "ckpt_path", "decode")
MODEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# Keys a tagging or classification entry may set besides id and ckpt_path (defaults here).
OTHER_KEYS = {kinds.TAGGING.name: {"max_tokens": 4096}, kinds.CLASSIFICATION.name: {"max_tokens": 4096, "top_k": 1}}
# Decoding keys a CTranslate2 export takes (its search is CTranslate2's: greedy or beam).
EXPORT_KEYS = ("beam_size", "n_best", "length_penalty", "max_len_a", "max_len_b")
INSTALL_HINT = 'transformer-serve needs FastAPI, uvicorn and prometheus-client: pip install -e ".[serve]"'
# What a CTranslate2 export folder holds (transformer-export format=ctranslate2).
EXPORT_FILES = ("config.json", "model.bin", "source_tokenizer.json", "target_tokenizer.json")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
LOG_LEVELS = ("debug", "info", "warning", "error")
SWITCH_INTERVAL_S = 0.001

log = logging.getLogger(__name__)


def check_server(cfg: DictConfig) -> None:
    """The server's own keys: address, limits and switches."""
    if not isinstance(cfg.get("host"), str) or not cfg.host:
        raise ValueError(f"host={show(cfg.get('host'))}: expected an address such as 127.0.0.1")
    port = cfg.get("port")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port={show(port)}: expected a port number 0 to 65535")
    validate.counts(cfg, "max_batch_tokens", "max_queue", "max_inputs", "max_request_tokens", "max_body_bytes",
                    "max_beam_size", "max_len", "threads", optional=("threads",))
    for key, low in (("batch_wait_ms", 0.0), ("request_timeout_s", 1e-9)):
        value = cfg.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= 86400:
            raise ValueError(f"{key}={show(value)}: expected a number of {'milliseconds' if 'ms' in key else 'seconds'}"
                             f"{' above 0' if low else ''}")
    for key in ("batching", "log_inputs", "access_log", "warm_up"):
        if not isinstance(cfg.get(key), bool):
            raise ValueError(f"{key}={show(cfg.get(key))}: expected true or false")
    if cfg.get("log_format") not in ("text", "json"):
        raise ValueError(f"log_format={show(cfg.get('log_format'))}: expected text or json")
    if not isinstance(cfg.get("log_level"), str) or cfg.log_level.lower() not in LOG_LEVELS:
        raise ValueError(f"log_level={show(cfg.get('log_level'))}: expected {', '.join(LOG_LEVELS)}")
    origins = cfg.get("cors_origins")
    if not OmegaConf.is_list(origins) or not all(isinstance(o, str) and o for o in origins):
        raise ValueError(f"cors_origins={show(origins)}: expected a list of origins, e.g. '[https://example.org]'")
    api_key(cfg)
    validate.device(cfg)


def api_key(cfg: DictConfig) -> str | None:
    """The API key from the environment variable ``api_key_env`` names (None: no key)."""
    name = cfg.get("api_key_env")
    if name is None:
        return None
    if not isinstance(name, str) or not ENV_NAME.match(name):
        raise ValueError(f"api_key_env={show(name)}: expected the name of an environment variable holding the key "
                         f"(the key itself never goes on the command line)")
    key = os.environ.get(name, "").strip()
    if not key:
        raise ValueError(f"api_key_env={name}: the environment variable {name} is unset or empty; export the key "
                         f"there")
    return key


def check_address(host: str, port: int) -> None:
    """Bind ``host:port`` as uvicorn will, and let it go: a host that does not resolve or is
    not this machine's, or a port in use, is found here, before any model loads."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise ValueError(f"host={host}: does not resolve to an address "
                         f"({getattr(exc, 'strerror', None) or exc})") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            sock.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ValueError(f"port={port}: in use on {host} (another server?); stop it or choose another "
                                 f"port") from None
            raise ValueError(f"host={host}: cannot listen on it ({exc.strerror or exc}); give an address of "
                             f"this machine, such as 127.0.0.1 or 0.0.0.0") from None


def check_export_folder(key: str, path) -> None:
    """A folder given as ``ckpt_path`` is a CTranslate2 export: the file it lacks, named."""
    if not isinstance(path, str) or path.startswith("hf:") or not Path(path).is_dir():
        return
    missing = [name for name in EXPORT_FILES if not (Path(path) / name).is_file()]
    if missing:
        raise FileNotFoundError(f"{key}={path}: a folder without {missing[0]}; a CTranslate2 export "
                                f"(transformer-export format=ctranslate2) holds {', '.join(EXPORT_FILES)}")


def check_entries(cfg: DictConfig) -> list[dict]:
    """``models``: a non-empty list of entries with a unique id, checkpoint files that exist,
    a decoding strategy by name and only decoding keys; returns the entries as plain dicts."""
    if OmegaConf.is_missing(cfg, "models"):
        raise ValueError("models: give the models to serve, e.g. 'models=[{id:de-en,ckpt_path:best.ckpt}]'")
    entries = OmegaConf.to_container(cfg.models, resolve=True) if OmegaConf.is_list(cfg.models) else cfg.models
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"models={show(entries)}: expected a list of {{id: ..., ckpt_path: ...}} entries")
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        key = f"models[{i}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{key}={show(entry)}: expected {{id: <name>, ckpt_path: <checkpoint>}}")
        model_id = entry.get("id")
        if not isinstance(model_id, str) or not MODEL_ID.match(model_id):
            raise ValueError(f"{key}.id={show(model_id)}: expected a name of letters, digits, '.', '_' or '-'")
        if model_id in seen:
            raise ValueError(f"{key}.id={model_id}: models[{seen[model_id]}] has this id already; ids must differ")
        seen[model_id] = i
        check_export_folder(f"{key}.ckpt_path", entry.get("ckpt_path"))
        if not _export_dir(entry.get("ckpt_path")):
            validate.checkpoints(f"{key}.ckpt_path", entry.get("ckpt_path"))
        decode = entry.get("decode")
        if decode is not None and decode not in strategies.NAMES:
            raise ValueError(f"{key}.decode={decode}: not a decoding strategy; expected one of "
                             f"{', '.join(strategies.NAMES)}")
    return entries


def translation_settings(entry: dict, key: str) -> DecodeSettings:
    """The entry's decoding settings over the defaults, checked."""
    extra = {k: v for k, v in entry.items() if k not in ENTRY_KEYS}
    unknown = sorted(set(extra) - set(DecodeSettings.defaults()))
    if unknown:
        raise ValueError(f"{key}.{unknown[0]}: not a decoding key; conf/decode/default.yaml has "
                         f"{', '.join(k for k in DecodeSettings.defaults() if k != 'strategy')}")
    strategy = {"strategy": entry["decode"]} if entry.get("decode") else {}
    return DecodeSettings.of({**strategy, **extra}, where=key)


def other_settings(entry: dict, key: str, kind: str) -> dict:
    """A tagger's or classifier's keys (``OTHER_KEYS``), checked."""
    if entry.get("decode") is not None:
        raise ValueError(f"{key}.decode={entry['decode']}: a {kind} model does not decode; leave decode out")
    extra = {k: v for k, v in entry.items() if k not in ENTRY_KEYS}
    unknown = sorted(set(extra) - set(OTHER_KEYS[kind]))
    if unknown:
        raise ValueError(f"{key}.{unknown[0]}: not a key of a {kind} model; it takes {', '.join(OTHER_KEYS[kind])}")
    settings = {**OTHER_KEYS[kind], **extra}
    validate.counts(settings, *settings, where=f"{key}.")
    return settings


def _export_dir(path) -> bool:
    """Whether ``ckpt_path`` names a CTranslate2 export folder rather than a checkpoint."""
    from transformer.export.ctranslate2 import is_export_dir

    return isinstance(path, str) and bool(path) and is_export_dir(path)


def load_export(entry: dict, key: str, cfg: DictConfig, limits):
    """A CTranslate2 export folder as a served translation model (greedy or beam)."""
    import torch

    from transformer.export.folder import ExportError
    from transformer.serve.served import CTranslate2Model

    settings = translation_settings(entry, key)
    other = sorted(set(entry) - set(ENTRY_KEYS) - set(EXPORT_KEYS))
    if other:
        raise ValueError(f"{key}.{other[0]}: not a key of a CTranslate2 export; it takes {', '.join(EXPORT_KEYS)}")
    offered = [s.name for s in strategies.served(strategies.AUTOREGRESSIVE)]  # what CTranslate2 searches
    if settings.strategy not in offered:
        raise ValueError(f"{key}.decode={settings.strategy}: a CTranslate2 export decodes with {' or '.join(offered)}")
    device = validate.resolve_device(cfg.device).type
    threads = int(cfg.threads) if cfg.threads is not None else torch.get_num_threads()
    try:
        return CTranslate2Model(entry["id"], entry["ckpt_path"], Path(entry["ckpt_path"]).name, settings, device,
                                threads, limits)
    except (ExportError, RuntimeError, ValueError) as exc:
        raise ValueError(f"{key}.ckpt_path: {exc}") from None


def load_model(entry: dict, key: str, cfg: DictConfig, limits):
    """The entry's checkpoint (or CTranslate2 export) loaded as a served model of its kind."""
    from transformer.serve.served import (AudioClassificationModel, ClassificationModel, ImageClassificationModel,
                                          TaggingModel, TranslationModel)
    from transformer.serve.transcription import TranscriptionModel

    if _export_dir(entry["ckpt_path"]):
        return load_export(entry, key, cfg, limits)
    task, device = load_for_inference(entry["ckpt_path"], cfg.device)
    kind = kinds.require(task, "serve", f"{key}.ckpt_path")
    normalize = dict(task.hparams.get("data") or {}).get("normalize", "utterance")
    if normalize != "utterance":
        # its inputs need a speaker's other recordings, and a request batch mixes clients' uploads
        raise ValueError(f"{key}.ckpt_path: a model trained with data.normalize={normalize} normalises each "
                         f"recording with its speaker's statistics, which one upload does not give; serve a model "
                         f"normalised per utterance, or use transformer-classify / transformer-transcribe")
    label = checkpoint_label(entry["ckpt_path"])
    name = Path(label).name if isinstance(label, str) else ", ".join(Path(p).name for p in label)
    if kind.shape == "sequence":
        settings = translation_settings(entry, key)
        served = TranscriptionModel if kinds.input_kind(task.hparams) is kinds.FRAMES else TranslationModel
        try:
            return served(entry["id"], task, name, settings, device, limits)
        except ValueError as exc:
            raise ValueError(f"{key}.decode={settings.strategy}: {exc}") from None
    if kind.name in OTHER_KEYS:
        settings = other_settings(entry, key, kind.name)
        try:
            if kind is kinds.TAGGING:
                return TaggingModel(entry["id"], task, name, settings["max_tokens"], device, limits)
            served = {kinds.FRAMES: AudioClassificationModel, kinds.PATCHES: ImageClassificationModel}.get(
                kinds.input_kind(task.hparams), ClassificationModel)
            return served(entry["id"], task, name, settings["max_tokens"], settings["top_k"], device,
                                       limits)
        except ValueError as exc:
            raise ValueError(f"{key}.ckpt_path: {exc}") from None
    raise ValueError(f"{key}.ckpt_path: {kind.what} checkpoint has no served form")


def check(cfg: DictConfig) -> list:
    """The whole config checked and every model loaded, before the server starts: the served
    models, in config order."""
    check_server(cfg)
    entries = check_entries(cfg)
    try:
        import fastapi  # noqa: F401
        import prometheus_client  # noqa: F401
        import uvicorn  # noqa: F401

        from transformer.serve.served import Limits
    except ImportError:
        raise ValueError(INSTALL_HINT) from None
    check_address(cfg.host, int(cfg.port))
    if cfg.threads is not None:
        import torch

        torch.set_num_threads(int(cfg.threads))
    limits = Limits(max_beam_size=int(cfg.max_beam_size), max_len=int(cfg.max_len))
    return [load_model(entry, f"models[{i}]", cfg, limits) for i, entry in enumerate(entries)]


def server_config(cfg: DictConfig):
    """The app's :class:`~transformer.serve.app.ServeConfig` from the config's keys of its fields."""
    import dataclasses

    from transformer.serve.app import ServeConfig

    keys = {f.name for f in dataclasses.fields(ServeConfig)} & set(cfg) - {"cors_origins"}
    return ServeConfig(**{key: cfg[key] for key in keys}, cors_origins=tuple(cfg.cors_origins), api_key=api_key(cfg))


def model_line(model) -> str:
    """The start-up log line of a served model: id, kind, checkpoint, non-default settings, threads, device."""
    import torch

    parts = []
    if model.decoding is not None:
        defaults = DecodeSettings.defaults()
        parts += [f"{k}={v}" for k, v in model.decoding.to_dict().items() if k != "strategy" and defaults[k] != v]
    if model.top_k is not None and model.kind == "classification":
        parts.append(f"top_k={model.top_k}")
    parts += [f"threads={torch.get_num_threads()}"] + ([f"device={model.device}"] if model.device is not None else [])
    return f"model {model.id}: {model.describe()} from {model.checkpoint}; " + ", ".join(parts)


def configure_logging(cfg: DictConfig) -> None:
    """``log_level`` on every logger; ``log_format=json``: every line one JSON object."""
    from transformer.serve.operations import JsonFormatter

    root = logging.getLogger()
    root.setLevel(cfg.log_level.upper())
    if cfg.log_format == "json":
        for handler in root.handlers:
            handler.setFormatter(JsonFormatter())


def run(cfg: DictConfig, models: list) -> None:
    import uvicorn

    from transformer.serve.app import create_app

    configure_logging(cfg)
    # The models compute on their own threads and hand the GIL back only every switch interval
    # (5 ms by default); a request needs it several times on the event loop, so a refusal or
    # a health check would wait tens of milliseconds behind a busy model. 1 ms keeps them quick.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    app = create_app(models, server_config(cfg))
    for model in models:
        log.info("%s", model_line(model))
    host = f"[{cfg.host}]" if ":" in cfg.host else cfg.host
    log.info("serving %d model(s) at http://%s:%d/ (API /v1/, metrics /metrics, readiness /ready)", len(models),
             host, int(cfg.port))
    # log_config=None: uvicorn's lines go through the command's logging (stderr), like every
    # command's; its own access line is off: the app writes one per request, with the model and id
    uvicorn.run(app, host=cfg.host, port=int(cfg.port), log_config=None, access_log=False,
                log_level=cfg.log_level.lower())


main = hydra_entry("serve", check=check)(run)

if __name__ == "__main__":
    main()
