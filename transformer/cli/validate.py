"""One validation step before any work: a command's composed config checked as a whole (paths,
counts, device, checkpoints), every problem a ``ValueError`` or ``OSError`` naming the key."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Mapping

import torch
from omegaconf import DictConfig, OmegaConf

from transformer.decoding.settings import DecodeSettings
from transformer.ranges import check_count
from transformer.tasks.build import show


def resolve_device(name: str) -> torch.device:
    """``auto`` picks CUDA when present, else CPU; a device this machine lacks, or a name
    torch does not know, is a ``ValueError``."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        raise ValueError(f"device={name!r} is not a device name (auto, cpu, cuda, cuda:N)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={name!r}, but torch sees no CUDA GPU on this machine (use device=cpu or auto)")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(f"device={name!r}, but this machine has {torch.cuda.device_count()} CUDA GPU(s)")
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device={name!r}: only cpu and cuda are supported")
    return device


def input_file(key: str, value: Any) -> None:
    """A file to read: ``-`` (stdin), a regular file, or a special file such as
    ``/dev/stdin`` or a named pipe; not a folder, and readable."""
    if value == "-":
        return
    if not isinstance(value, str) or not value:
        raise ValueError(f"{key}={show(value)}: expected a file path (or - for stdin)")
    path = Path(value)
    if not path.exists():
        raise FileNotFoundError(f"{key}={value}: input file not found")
    if path.is_dir():
        raise IsADirectoryError(f"{key}={value}: a folder, not a file")
    if not os.access(path, os.R_OK):
        raise PermissionError(f"{key}={value}: not readable")


def _writable_parent(key: str, path: Path) -> None:
    """The nearest existing folder above ``path`` is a folder we may write in."""
    parent = path.parent if str(path.parent) else Path(".")
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise NotADirectoryError(f"{key}={path}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PermissionError(f"{key}={path}: cannot write in {parent}")


def output_file(key: str, value: Any) -> None:
    """A file to write: ``-`` (stdout), or a path that is not a folder, in a writable place."""
    if value == "-":
        return
    if not isinstance(value, str) or not value:
        raise ValueError(f"{key}={show(value)}: expected a file path (or - for stdout)")
    path = Path(value)
    if path.is_dir():
        raise IsADirectoryError(f"{key}={value}: a folder; give a file path")
    if path.exists() and not os.access(path, os.W_OK):
        raise PermissionError(f"{key}={value}: not writable")
    _writable_parent(key, path)


def output_dir(key: str, value: Any, required: bool = True) -> None:
    """A folder to write into: existing or creatable, never a file."""
    if value is None and not required:
        return
    if not isinstance(value, str) or not value:
        raise ValueError(f"{key}={show(value)}: expected a folder path")
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(f"{key}={value}: a file, not a folder")
    if path.is_dir():
        if not os.access(path, os.W_OK | os.X_OK):
            raise PermissionError(f"{key}={value}: cannot write in it")
        return
    _writable_parent(key, path)


def checkpoints(key: str, value: Any) -> None:
    """``ckpt_path``: one checkpoint file or a non-empty list of them."""
    paths = list(value) if isinstance(value, (list, tuple)) or OmegaConf.is_list(value) else [value]
    if not paths or any(not isinstance(p, str) or not p for p in paths):
        raise ValueError(f"{key}={show(value)}: give a checkpoint file ({key}=path/to/last.ckpt) or a list of them")
    for p in paths:
        if p.startswith("hf:"):  # a Hugging Face folder or hub id, read by transformer.hub
            continue
        if not Path(p).is_file():
            raise FileNotFoundError(f"{key}={p}: checkpoint not found" + (" (a folder)" if Path(p).is_dir() else ""))


def counts(cfg: Mapping[str, Any], *keys: str, optional: tuple[str, ...] = (), where: str = "") -> None:
    """The command's one positive-integer check: ``keys`` of ``cfg`` are counts (``optional``
    ones may be null); a message names the key as ``<where><key>``."""
    for key in keys:
        if not (cfg.get(key) is None and key in optional):
            check_count(f"{where}{key}", cfg.get(key))


def device(cfg: DictConfig) -> None:
    """``device``: a name torch knows and this machine has."""
    value = cfg.get("device", "auto")
    if not isinstance(value, str):
        raise ValueError(f"device={show(value)}: expected auto, cpu, cuda or cuda:N")
    resolve_device(value)


# The counts an inference command may take (positive integers; ``limit`` may be null: no limit).
COUNTS = ("lines", "max_tokens", "top_k", "positions", "limit")
# The output formats of the commands that choose one here (transformer-tag's are read in cli/tag.py).
FORMATS = {"classify": ("tsv", "jsonl"), "fill": ("tsv", "json", "jsonl")}  # fill: json and jsonl are one


def inference(name: str) -> Callable[[DictConfig], None]:
    """The validation step of an inference command, read off the keys its config has."""

    def check(cfg: DictConfig) -> None:
        checkpoints("ckpt_path", cfg.get("ckpt_path"))
        if "device" in cfg:
            device(cfg)
        if "accel" in cfg:
            from transformer import accel

            accel.check(cfg.accel)
        if cfg.get("decode") is not None:
            DecodeSettings.check(OmegaConf.to_container(cfg.decode, resolve=True))
            if cfg.decode.get("shortlist") not in (None, "train"):
                input_file("decode.shortlist", cfg.decode.shortlist)
        if cfg.get("quantize") not in (None, "none"):  # int8 only on a CPU
            from transformer.accel.quantize import check_quantize

            check_quantize(cfg.quantize, resolve_device(cfg.get("device", "auto")).type)
        counts(cfg, *(key for key in COUNTS if key in cfg), optional=("limit",))
        if name in FORMATS and cfg.get("format") not in FORMATS[name]:
            raise ValueError(f"format={show(cfg.get('format'))} unknown; choose from {', '.join(FORMATS[name])}")
        if "input" in cfg and not (cfg.input is None and "text" in cfg):
            input_file("input", cfg.input)
        if "output" in cfg:
            output_file("output", cfg.output)
        if "output_dir" in cfg:
            output_dir("output_dir", cfg.output_dir, required=name != "eval")
        if name == "export":
            from transformer.export.folder import check_export_dir

            check_export_dir(cfg.output_dir, bool(cfg.get("force")))  # a folder of its own, before the model is read

    return check


# The validation step of each command, by its config name.
CHECKS: dict[str, Callable[[DictConfig], None]] = {
    name: inference(name) for name in ("eval", "decode", "tag", "classify", "fill", "distill", "inspect", "export")}
