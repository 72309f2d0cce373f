"""`transformer-serve`: checkpoints of every kind behind an HTTP API and a page (``transformer.serve``).

    transformer-serve 'models=[{id:de-en,ckpt_path:best.ckpt,decode:beam,beam_size:4}]'
    transformer-serve 'models=[{id:de-en,ckpt_path:a.ckpt},{id:upos,ckpt_path:tagger.ckpt}]' port=8080
    transformer-serve 'models=[{id:de-en-ct2,ckpt_path:exports/de-en,decode:beam}]'  # a CTranslate2 export
    curl -s localhost:8000/v1/translate -H 'content-type: application/json' \\
         -d '{"model": "de-en", "inputs": ["Ein Hund rennt."]}'

The config is checked whole and every checkpoint loaded before the server binds its port: a
missing checkpoint, a key conf/decode/default.yaml lacks, a strategy the checkpoint
cannot decode with or an id given twice is one ``error:`` line naming the key, exit status 2.
Needs FastAPI and uvicorn (``pip install -e ".[serve]"``).
"""

from __future__ import annotations

import re
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from transformer.cli import validate
from transformer.cli.common import CONF_DIR, checkpoint_label, hydra_entry, load_for_inference
from transformer.decoding.settings import DecodeSettings
from transformer.tasks.build import show

ENTRY_KEYS = ("id", "ckpt_path", "decode")
MODEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
TRANSLATION_KINDS = ("translation", "nat", "nat_ctc")
# Keys a tagging or classification entry may set besides id and ckpt_path (defaults here).
OTHER_KEYS = {"tagging": {"max_tokens": 4096}, "classification": {"max_tokens": 4096, "top_k": 1}}
# Decoding keys a CTranslate2 export takes (its search is CTranslate2's: greedy or beam).
EXPORT_KEYS = ("beam_size", "n_best", "length_penalty", "max_len_a", "max_len_b")
INSTALL_HINT = 'transformer-serve needs FastAPI and uvicorn: pip install -e ".[serve]"'


def decode_settings(strategy: str = "greedy") -> dict:
    """``conf/decode/default.yaml`` with ``strategy``: what ``transformer-decode
    decode.strategy=<strategy>`` decodes with."""
    settings = OmegaConf.to_container(OmegaConf.load(Path(CONF_DIR) / "decode" / "default.yaml"), resolve=True)
    return {**settings, "strategy": strategy}


def check_server(cfg: DictConfig) -> None:
    """The server's own keys: address, limits and switches."""
    if not isinstance(cfg.get("host"), str) or not cfg.host:
        raise ValueError(f"host={show(cfg.get('host'))}: expected an address such as 127.0.0.1")
    port = cfg.get("port")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port={show(port)}: expected a port number 0 to 65535")
    validate.counts(cfg, "max_batch_tokens", "max_queue", "max_inputs", "max_request_tokens", "max_body_bytes",
                    "max_beam_size", "max_len", optional=("threads",))
    for key, low in (("batch_wait_ms", 0.0), ("request_timeout_s", 1e-9)):
        value = cfg.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= 86400:
            raise ValueError(f"{key}={show(value)}: expected a number of {'milliseconds' if 'ms' in key else 'seconds'}"
                             f"{' above 0' if low else ''}")
    for key in ("batching", "log_inputs", "access_log"):
        if not isinstance(cfg.get(key), bool):
            raise ValueError(f"{key}={show(cfg.get(key))}: expected true or false")
    validate.device(cfg)


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
        if not _export_dir(entry.get("ckpt_path")):
            validate.checkpoints(f"{key}.ckpt_path", entry.get("ckpt_path"))
        decode = entry.get("decode")
        if decode is not None and not isinstance(decode, str):
            raise ValueError(f"{key}.decode={show(decode)}: expected a decoding strategy (greedy, beam, "
                             f"mask_predict, ctc_one_pass ...)")
    return entries


def translation_settings(entry: dict, key: str) -> dict:
    """The decoding settings (conf/decode/default.yaml) with the entry's strategy (``decode``,
    default greedy) and its own keys over them, checked; the checkpoint's kind judges the
    strategy when it is loaded."""
    settings = decode_settings(entry.get("decode") or "greedy")
    extra = {k: v for k, v in entry.items() if k not in ENTRY_KEYS}
    unknown = sorted(set(extra) - set(settings))
    if unknown:
        raise ValueError(f"{key}.{unknown[0]}: not a decoding key; conf/decode/default.yaml has "
                         f"{', '.join(k for k in settings if k != 'strategy')}")
    return DecodeSettings.check({**settings, **extra}, where=key)


def other_settings(entry: dict, key: str, kind: str) -> dict:
    """A tagger's or classifier's keys (``OTHER_KEYS``), checked."""
    if entry.get("decode") is not None:
        raise ValueError(f"{key}.decode={entry['decode']}: a {kind} model does not decode; leave decode out")
    extra = {k: v for k, v in entry.items() if k not in ENTRY_KEYS}
    unknown = sorted(set(extra) - set(OTHER_KEYS[kind]))
    if unknown:
        raise ValueError(f"{key}.{unknown[0]}: not a key of a {kind} model; it takes {', '.join(OTHER_KEYS[kind])}")
    settings = {**OTHER_KEYS[kind], **extra}
    for name, value in settings.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{key}.{name}={show(value)}: expected a positive integer")
    return settings


def _export_dir(path) -> bool:
    """Whether ``ckpt_path`` names a CTranslate2 export folder rather than a checkpoint."""
    from transformer.export.ctranslate2 import is_export_dir

    return isinstance(path, str) and bool(path) and is_export_dir(path)


def load_export(entry: dict, key: str, cfg: DictConfig, limits):
    """A CTranslate2 export folder as a served translation model (greedy or beam)."""
    import torch

    from transformer.export.ctranslate2 import ExportError
    from transformer.serve.served import CTranslate2Model

    decode_cfg = translation_settings(entry, key)
    other = sorted(set(entry) - set(ENTRY_KEYS) - set(EXPORT_KEYS))
    if other:
        raise ValueError(f"{key}.{other[0]}: not a key of a CTranslate2 export; it takes {', '.join(EXPORT_KEYS)}")
    if decode_cfg["strategy"] not in ("greedy", "beam"):
        raise ValueError(f"{key}.decode={decode_cfg['strategy']}: a CTranslate2 export decodes with greedy or beam")
    device = validate.resolve_device(cfg.device).type
    threads = int(cfg.threads) if cfg.threads is not None else torch.get_num_threads()
    try:
        return CTranslate2Model(entry["id"], entry["ckpt_path"], Path(entry["ckpt_path"]).name, decode_cfg, device,
                                threads, limits)
    except (ExportError, RuntimeError, ValueError) as exc:
        raise ValueError(f"{key}.ckpt_path: {exc}") from None


def load_model(entry: dict, key: str, cfg: DictConfig, limits):
    """The entry's checkpoint (or CTranslate2 export) loaded as a served model of its kind."""
    from transformer.serve.served import ClassificationModel, TaggingModel, TranslationModel

    if _export_dir(entry["ckpt_path"]):
        return load_export(entry, key, cfg, limits)
    task, device = load_for_inference(entry["ckpt_path"], cfg.device)
    kind = getattr(task, "task_name", None)
    label = checkpoint_label(entry["ckpt_path"])
    name = Path(label).name if isinstance(label, str) else ", ".join(Path(p).name for p in label)
    if kind in TRANSLATION_KINDS:
        decode_cfg = translation_settings(entry, key)
        try:
            return TranslationModel(entry["id"], task, name, decode_cfg, device, limits)
        except ValueError as exc:
            raise ValueError(f"{key}.decode={decode_cfg.get('strategy')}: {exc}") from None
    if kind in OTHER_KEYS:
        settings = other_settings(entry, key, kind)
        try:
            if kind == "tagging":
                return TaggingModel(entry["id"], task, name, settings["max_tokens"], device, limits)
            return ClassificationModel(entry["id"], task, name, settings["max_tokens"], settings["top_k"], device,
                                       limits)
        except ValueError as exc:
            raise ValueError(f"{key}.ckpt_path: {exc}") from None
    raise ValueError(f"{key}.ckpt_path: a {kind!r} checkpoint; the server takes translation, tagging and "
                     f"classification ones")


def check(cfg: DictConfig) -> list:
    """The whole config checked and every model loaded, before the server starts: the served
    models, in config order."""
    check_server(cfg)
    entries = check_entries(cfg)
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401

        from transformer.serve.served import Limits
    except ImportError:
        raise ValueError(INSTALL_HINT) from None
    if cfg.threads is not None:
        import torch

        torch.set_num_threads(int(cfg.threads))
    limits = Limits(max_beam_size=int(cfg.max_beam_size), max_len=int(cfg.max_len))
    return [load_model(entry, f"models[{i}]", cfg, limits) for i, entry in enumerate(entries)]


def server_config(cfg: DictConfig):
    """The app's :class:`~transformer.serve.app.ServeConfig` from the config's keys."""
    from transformer.serve.app import ServeConfig

    return ServeConfig(batching=cfg.batching, batch_wait_ms=float(cfg.batch_wait_ms),
                       max_batch_tokens=cfg.max_batch_tokens, max_queue=cfg.max_queue,
                       request_timeout_s=float(cfg.request_timeout_s), max_inputs=cfg.max_inputs,
                       max_request_tokens=cfg.max_request_tokens, max_body_bytes=cfg.max_body_bytes,
                       log_inputs=cfg.log_inputs)


def run(cfg: DictConfig, models: list) -> None:
    import uvicorn

    from transformer.serve.app import create_app

    app = create_app(models, server_config(cfg))
    # log_config=None: uvicorn's lines go through the command's logging (stderr), like every command's
    uvicorn.run(app, host=cfg.host, port=int(cfg.port), log_config=None, access_log=cfg.access_log)


main = hydra_entry("serve", check=check)(run)

if __name__ == "__main__":
    main()
