"""Shared plumbing for the command-line entry points.

Each CLI is a plain ``run(cfg) -> result`` function (callable from Python and tests) under a
thin ``@hydra.main`` wrapper; the wrapper turns the project's own input errors into a
one-line message and exit status 2 instead of a traceback.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Callable

import hydra
import torch
from omegaconf import DictConfig

# conf/ sits at the repository root (the package is installed editable: `pip install -e .`).
CONF_DIR = str(
    Path(os.environ.get("TRANSFORMER_CONF_DIR", Path(__file__).resolve().parents[2] / "conf")).resolve()
)


def user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that describe bad input (file, key, value), not bugs."""
    from transformer.data import readers, sources
    from transformer.tasks.checkpoint import CheckpointError

    errors: list[type[BaseException]] = [CheckpointError, FileNotFoundError, ValueError, KeyError]
    for mod, name in ((readers, "DataFormatError"), (sources, "ChecksumError")):
        if hasattr(mod, name):
            errors.append(getattr(mod, name))
    return tuple(errors)


def hydra_entry(config_name: str) -> Callable[[Callable[[DictConfig], object]], Callable[[], None]]:
    """Wrap ``run(cfg)`` as a console-script ``main()`` reading ``conf/<config_name>.yaml``."""

    def wrap(run: Callable[[DictConfig], object]) -> Callable[[], None]:
        @hydra.main(version_base="1.3", config_path=CONF_DIR, config_name=config_name)
        def _main(cfg: DictConfig) -> None:
            try:
                run(cfg)
            except user_errors() as exc:
                print(f"error: {exc}", file=sys.stderr)
                sys.exit(2)

        @functools.wraps(run)
        def main() -> None:
            _main()

        return main

    return wrap


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
    """``auto`` picks CUDA when present, else CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def load_for_inference(ckpt_path, device: str = "auto", backend: str | None = "auto"):
    """``(task, device)``: the checkpoint's task (or an ensemble of several) in eval mode on
    ``device``, its model switched to the ``accel`` backend (``auto``: the CPU fast paths on a CPU)."""
    from transformer import accel
    from transformer.tasks.checkpoint import load_task

    task = load_task(ckpt_path)
    dev = resolve_device(device)
    task.to(dev)
    accel.apply(task.model, accel.resolve(backend, dev.type))
    return task, dev
