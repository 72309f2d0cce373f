"""Shared plumbing for the command-line entry points.

Each CLI is a plain ``run(cfg) -> result`` function (callable from Python and tests) under a
thin ``@hydra.main`` wrapper; the wrapper turns the project's own input errors into a
one-line message and exit status 2 instead of a traceback.
"""

from __future__ import annotations

import functools
import math
import os
import sys
import types
import typing
from pathlib import Path
from typing import Callable

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

# conf/ sits at the repository root (the package is installed editable: `pip install -e .`).
CONF_DIR = str(
    Path(os.environ.get("TRANSFORMER_CONF_DIR", Path(__file__).resolve().parents[2] / "conf")).resolve()
)


def user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that describe bad input (file, key, value, device), not bugs."""
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    from transformer.data import readers, sources
    from transformer.tasks.checkpoint import CheckpointError

    errors: list[type[BaseException]] = [CheckpointError, FileNotFoundError, FileExistsError, ValueError, KeyError,
                                         IsADirectoryError, NotADirectoryError, PermissionError,
                                         MisconfigurationException]
    for mod, name in ((readers, "DataFormatError"), (sources, "ChecksumError"), (sources, "DownloadError")):
        if hasattr(mod, name):
            errors.append(getattr(mod, name))
    return tuple(errors)


def fail(exc: BaseException | str) -> None:
    """Print one ``error: ...`` line on stderr and exit with status 2."""
    text = " ".join(str(exc).split())
    print(f"error: {text[:2000]}", file=sys.stderr)
    sys.exit(2)


def hydra_entry(config_name: str) -> Callable[[Callable[[DictConfig], object]], Callable[[], None]]:
    """Wrap ``run(cfg)`` as a console-script ``main()`` reading ``conf/<config_name>.yaml``.

    Before Hydra runs (and writes anything), the command line is composed and the command's
    validation step (``cli/validate.py``) runs on the result; training also claims its run
    folder there. A user error then or inside ``run`` is one ``error:`` line and exit 2."""

    def wrap(run: Callable[[DictConfig], object]) -> Callable[[], None]:
        @hydra.main(version_base="1.3", config_path=CONF_DIR, config_name=config_name)
        def _main(cfg: DictConfig) -> None:
            try:
                run(cfg)
            except user_errors() as exc:
                fail(exc)

        @functools.wraps(run)
        def main() -> None:
            try:
                sys.argv[1:] = prepare(config_name, sys.argv[1:])
            except user_errors() as exc:
                fail(exc)
            _main()

        return main

    return wrap


def prepare(config_name: str, args: list[str]) -> list[str]:
    """Compose the command line, run the command's validation step and (training) claim the
    run folder, before Hydra runs; returns the arguments to hand to Hydra (training pins the
    run folder it claimed). Hydra's own flags (``--help``, ``--cfg`` ...) are left to Hydra;
    with ``-m`` only the first value of each sweep is composed, and each job checks itself."""
    from transformer.cli import validate

    flags = [a for a in args if a.startswith("-")]
    multirun = bool(flags) and all(a in ("-m", "--multirun") for a in flags)
    if flags and not multirun:
        return args
    overrides = [a for a in args if not a.startswith("-")]
    cfg = check_overrides(config_name, first_of_sweeps(overrides) if multirun else overrides)
    key = "sweep" if multirun else "run"
    folder = cfg.hydra[key].dir
    if not isinstance(folder, str) or not folder:
        raise ValueError(f"hydra.{key}.dir={folder!r}: expected a folder path")
    if Path(folder).exists() and not Path(folder).is_dir():
        raise NotADirectoryError(f"hydra.{key}.dir={folder}: a file, not a folder")
    if multirun:
        return args
    if config_name != "train":
        validate.validate(config_name, cfg)
        return args
    from omegaconf import open_dict

    from transformer.cli.run_folder import claim_run_folder

    with open_dict(cfg):
        if OmegaConf.is_interpolation(cfg, "output_dir") and "hydra:" in str(cfg._get_node("output_dir")._value()):
            cfg.output_dir = str(folder)  # what ${hydra:runtime.output_dir} will be
    validate.validate(config_name, cfg)
    claim_run_folder(Path(cfg.output_dir), cfg.get("ckpt_path"))
    quoted = str(folder).replace("'", "\\'")
    return [*args, f"hydra.run.dir='{quoted}'"]  # the folder just claimed, not a new timestamp


def first_of_sweeps(overrides: list[str]) -> list[str]:
    """``-m`` overrides with each sweep (``a=1,2``, ``range(3)``) replaced by its first value,
    so that one composition checks every key; glob sweeps of groups are left out."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import Glob

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception:  # malformed: composing them as they are reports it in one line
        return overrides
    out = []
    for text, override in zip(overrides, parsed):
        if not override.is_sweep_override():
            out.append(text)
        elif not isinstance(override.value(), Glob):
            first = next(iter(override.sweep_string_iterator()), None)
            if first is not None:
                out.append(f"{override.get_key_element()}={first}")
    return out


def check_overrides(config_name: str, args: list[str]) -> DictConfig:
    """Compose ``conf/<config_name>.yaml`` with the command line's overrides (Hydra's node
    included) before Hydra runs, so that an unknown key or a malformed override ends with one
    ``error:`` line and exit status 2 (Hydra itself prints several lines and exits 1)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3", job_name=config_name):
            return compose(config_name=config_name, overrides=args, return_hydra_config=True)
    except (HydraException, OmegaConfBaseException) as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        cause = exc.__cause__
        if cause is not None and str(cause).strip():
            lines.append(str(cause).strip().splitlines()[0])
        lines = [line for line in dict.fromkeys(lines) if not line.startswith(("full_key:", "object_type="))]
        fail(" ".join(lines))
    finally:
        GlobalHydra.instance().clear()


_SIMPLE_TYPES = (int, float, bool, str, type(None))


def _simple_hint(hint) -> tuple[type, ...] | None:
    """The types an annotation allows when all are simple scalars, else None (unchecked)."""
    if hint in _SIMPLE_TYPES:
        return (hint,)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if all(a in _SIMPLE_TYPES for a in args):
            return args
    return None


def _fits(value, allowed: tuple[type, ...]) -> bool:
    if isinstance(value, bool):
        return bool in allowed
    if isinstance(value, int):
        return int in allowed or float in allowed
    return any(isinstance(value, t) for t in allowed if t is not bool)


def check_config_types(node: DictConfig | None, where: str) -> None:
    """Check a config node with a ``_target_`` against the target's annotated signature,
    for the keys whose annotation is a plain scalar type (``int``, ``float | None`` ...);
    a value of another type is a ``ValueError`` naming the key. Interpolations are not
    checked. The project's shared names (``vocab_size``, ``max_tokens``, ``dropout`` ...) are
    also checked against their ranges. This runs before any data is prepared, so a typo costs
    no time."""
    if not isinstance(node, DictConfig) or "_target_" not in node:
        return
    try:
        target = hydra.utils.get_object(node._target_)
        hints = typing.get_type_hints(target.__init__ if isinstance(target, type) else target)
    except Exception:  # an unknown target is reported by instantiate itself
        return
    from transformer.tasks.hparams import check_range

    for key in node:
        if key.startswith("_") or OmegaConf.is_interpolation(node, key):
            continue
        check_range(where, key, node[key])  # the shared names' ranges (tasks/hparams.py)
        if key not in hints:
            continue
        allowed = _simple_hint(hints[key])
        value = node[key]
        if allowed is not None and not _fits(value, allowed):
            names = " or ".join("null" if t is type(None) else t.__name__ for t in allowed)
            raise ValueError(f"{where}.{key}={value!r}: expected {names}")


# Upper bounds on decode settings: past them a value is a typo that would exhaust memory or time.
DECODE_LIMITS = {"beam_size": 1024, "n_best": 1024, "length_beam": 1024, "iterations": 10_000, "top_k": 2**24,
                 "max_tokens": 2**31, "max_len_a": 10**4, "max_len_b": 10**6}


def check_decode_settings(cfg: dict, where: str = "decode") -> dict:
    """A decode preset's numbers, checked: counts are positive integers, lengths allow at
    least one output token, nothing past :data:`DECODE_LIMITS`. Returns ``cfg``; a bad value
    is a ``ValueError`` naming the key."""
    for key in ("beam_size", "n_best", "max_tokens", "iterations", "length_beam", "top_k"):
        value = cfg.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= DECODE_LIMITS[key]:
            raise ValueError(f"{where}.{key}={value!r}: expected a positive integer up to {DECODE_LIMITS[key]}")
    for key in ("max_len_a", "max_len_b", "length_penalty", "blank_penalty"):
        value = cfg.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{where}.{key}={value!r}: expected a number")
        if key in DECODE_LIMITS and value > DECODE_LIMITS[key]:
            raise ValueError(f"{where}.{key}={value!r}: expected at most {DECODE_LIMITS[key]}")
    a, b = cfg.get("max_len_a"), cfg.get("max_len_b")
    if a is not None and b is not None and (a < 0 or b < 0 or (a == 0 and b < 1)):
        raise ValueError(f"{where}.max_len_a={a!r} {where}.max_len_b={b!r}: the length cap "
                         f"floor(max_len_a * source length + max_len_b) must allow at least one token")
    if cfg.get("n_best", 1) > cfg.get("beam_size", cfg.get("n_best", 1)):
        raise ValueError(f"{where}.n_best={cfg['n_best']}: at most {where}.beam_size={cfg['beam_size']}")
    if not isinstance(cfg.get("strategy", ""), str):
        raise ValueError(f"{where}.strategy={cfg['strategy']!r}: expected a strategy name")
    layer = cfg.get("alignment_layer")
    if layer is not None and (isinstance(layer, bool) or not isinstance(layer, int)):
        raise ValueError(f"{where}.alignment_layer={layer!r}: expected a layer index or null")
    return cfg


def read_lines(path: str) -> tuple[list[str], str]:
    """The lines of ``path`` (``-`` = stdin) as UTF-8 text, and a name for messages.

    Lines are split on ``\n`` only, as ``wc -l`` counts them (one trailing ``\r`` is
    removed): unlike ``str.splitlines`` a form feed, vertical tab, U+0085 or U+2028 inside
    a line does not end it, so output line i always answers input line i.
    """
    if path == "-":
        raw, name = sys.stdin.buffer.read(), "<stdin>"
    else:
        p = Path(path)
        if not p.exists():
            raise FileNotFoundError(f"input file not found: {p}")
        if p.is_dir():
            raise IsADirectoryError(f"input={p}: a folder, not a file")
        raw, name = p.read_bytes(), str(p)  # a regular file, /dev/stdin or a named pipe
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ValueError(f"{name}, line {line}: not UTF-8 text (byte {exc.start})") from None
    return split_lines(text), name


def split_lines(text: str) -> list[str]:
    """Lines as ``wc -l`` counts them: split on ``\n`` only (a trailing ``\r`` is removed);
    a final line without ``\n`` still counts."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def write_lines(lines: list[str], output: str) -> None:
    """One item per line to a file, or to stdout for ``-`` (UTF-8, newline-terminated)."""
    text = "".join(line + "\n" for line in lines)
    if output == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        Path(output).write_text(text, encoding="utf-8")


def checkpoint_paths(value) -> list[str]:
    """``ckpt_path`` as a list of strings: one path, or several (a list, Hydra's ``[a,b]``)."""
    if isinstance(value, (str, Path)):
        return [str(value)]
    return [str(v) for v in value]


def checkpoint_label(value) -> str | list[str]:
    """How outputs name ``ckpt_path``: the path, or the list of an ensemble's paths."""
    paths = checkpoint_paths(value)
    return paths[0] if len(paths) == 1 else paths


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


def load_for_inference(ckpt_path, device: str = "auto", backend: str | None = "auto", quantize: str | None = None):
    """``(task, device)``: the checkpoint's task (or an ensemble of several) in eval mode on
    ``device``, its model switched to the ``accel`` backend (``auto``: the CPU fast paths on a CPU)
    and, with ``quantize="int8"`` (CPU only), its linear layers to int8 (``accel.quantize``)."""
    from transformer import accel
    from transformer.accel.quantize import apply_quantize, check_quantize
    from transformer.tasks.checkpoint import load_task

    dev = resolve_device(device)  # a bad device fails before the checkpoint is read
    quantize = check_quantize(quantize, dev.type)
    task = load_task(ckpt_path)
    task.to(dev)
    backend = accel.resolve(backend, dev.type)
    task.model = apply_quantize(accel.apply(task.model, backend), quantize, backend)
    return task, dev
