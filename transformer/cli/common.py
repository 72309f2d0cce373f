"""Shared plumbing for the command-line entry points.

Each CLI is a plain ``run(cfg) -> result`` function (callable from Python and tests) under a
thin ``@hydra.main`` wrapper; the wrapper turns the project's own input errors into a
one-line message and exit status 2 instead of a traceback.
"""

from __future__ import annotations

import functools
import os
import sys
import types
import typing
from pathlib import Path
from typing import Callable

import hydra
from omegaconf import DictConfig, OmegaConf

from transformer.cli import validate
from transformer.cli.run_folder import check_run_folder, claim_run_folder
from transformer.cli.validate import resolve_device
from transformer.files import DiskFullError, disk_full, full_disk_error

# A command's validation step: raises a user error (ValueError, OSError ...) for a bad config.
Check = Callable[[DictConfig], None]

# conf/ sits at the repository root (the package is installed editable: `pip install -e .`).
CONF_DIR = str(
    Path(os.environ.get("TRANSFORMER_CONF_DIR", Path(__file__).resolve().parents[2] / "conf")).resolve()
)


def user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that describe bad input (file, key, value, device), not bugs."""
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    from transformer.data import readers, sources
    from transformer.tasks.checkpoint import CheckpointError

    errors: list[type[BaseException]] = [CheckpointError, DiskFullError, FileNotFoundError, FileExistsError,
                                         ValueError, KeyError,
                                         IsADirectoryError, NotADirectoryError, PermissionError,
                                         MisconfigurationException]
    for mod, name in ((readers, "DataFormatError"), (sources, "ChecksumError"), (sources, "DownloadError")):
        if hasattr(mod, name):
            errors.append(getattr(mod, name))
    return tuple(errors)


def disk_full_message(exc: BaseException) -> DiskFullError | None:
    """A full disk (or quota) met anywhere, also inside a library's own writer, as the one-line
    :class:`DiskFullError` naming the folder; None for any other error."""
    full = full_disk_error(exc)
    if full is None or isinstance(full, DiskFullError):
        return full
    return disk_full(full, full.filename or Path.cwd() / "?")


class StoppedBySignal(RuntimeError):
    """A run stopped by SIGTERM after saving what it could; the message says how to resume."""

    exit_status = 128 + 15  # what a shell reports for a process ended by SIGTERM


def fail(exc: BaseException | str, status: int = 2) -> None:
    """Print one ``error: ...`` line on stderr and exit with ``status`` (2: bad input)."""
    text = " ".join(str(exc).split())
    print(f"error: {text[:2000]}", file=sys.stderr)
    sys.exit(status)


def hydra_entry(config_name: str,
                check: Check | None = None) -> Callable[[Callable[[DictConfig], object]], Callable[[], None]]:
    """Wrap ``run(cfg)`` as a console-script ``main()`` reading ``conf/<config_name>.yaml``.

    Before Hydra runs (and writes anything), the command line is composed and the command's
    validation step runs on the result: ``check``, or the command's entry in
    ``validate.CHECKS``; training also claims its run folder there. A user error then or
    inside ``run`` is one ``error:`` line and exit 2."""

    def wrap(run: Callable[[DictConfig], object]) -> Callable[[], None]:
        @hydra.main(version_base="1.3", config_path=CONF_DIR, config_name=config_name)
        def _main(cfg: DictConfig) -> None:
            try:
                run(cfg)
            except user_errors() as exc:
                fail(exc)
            except StoppedBySignal as exc:
                fail(exc, StoppedBySignal.exit_status)
            except Exception as exc:  # a full disk met inside a library (Lightning, datasets)
                full = disk_full_message(exc)
                if full is None:
                    raise
                fail(full)

        @functools.wraps(run)
        def main() -> None:
            try:
                sys.argv[1:] = prepare(config_name, sys.argv[1:], check)
            except user_errors() as exc:
                fail(exc)
            _main()

        return main

    return wrap


def prepare(config_name: str, args: list[str], check: Check | None = None) -> list[str]:
    """Compose the command line, run the command's validation step and (training) claim the
    run folder, before Hydra runs; returns the arguments to hand to Hydra (training pins the
    run folder it claimed). Hydra's own flags (``--help``, ``--cfg`` ...) are left to Hydra.
    With ``-m`` every job of the sweep is composed and checked, and for training each job's
    folder must be free, so that a refused sweep writes nothing (not even ``multirun.yaml``).
    ``check`` is the command's validation step (default: its entry in ``validate.CHECKS``)."""
    check = check or validate.CHECKS.get(config_name) or (lambda cfg: None)
    flags = [a for a in args if a.startswith("-")]
    multirun = bool(flags) and all(a in ("-m", "--multirun") for a in flags)
    if flags and not multirun:
        return args
    overrides = [a for a in args if not a.startswith("-")]
    if multirun:
        check_sweep(config_name, overrides, check)
        return ["-m", *overrides]  # Hydra reads its flags before the overrides, wherever they were typed
    cfg = check_overrides(config_name, overrides)
    folder = check_folder_key(cfg, "run")
    if config_name != "train":
        check(cfg)
        return args
    pin_output_dir(cfg, folder)
    check(cfg)
    claim_run_folder(Path(cfg.output_dir), cfg.get("ckpt_path"))
    quoted = str(folder).replace("'", "\\'")
    return [*args, f"hydra.run.dir='{quoted}'"]  # the folder just claimed, not a new timestamp


def check_folder_key(cfg: DictConfig, key: str) -> str:
    """``hydra.<key>.dir``: a folder path that is not a file."""
    folder = cfg.hydra[key].dir
    if not isinstance(folder, str) or not folder:
        raise ValueError(f"hydra.{key}.dir={folder!r}: expected a folder path")
    if Path(folder).exists() and not Path(folder).is_dir():
        raise NotADirectoryError(f"hydra.{key}.dir={folder}: a file, not a folder")
    return folder


def pin_output_dir(cfg: DictConfig, folder: str | Path) -> None:
    """Set ``output_dir`` to ``folder`` where it is ``${hydra:runtime.output_dir}`` (what
    Hydra will make it), so that the checks see the folder the run will write."""
    from omegaconf import open_dict

    with open_dict(cfg):
        if OmegaConf.is_interpolation(cfg, "output_dir") and "hydra:" in str(cfg._get_node("output_dir")._value()):
            cfg.output_dir = str(folder)


def sweep_jobs(overrides: list[str]) -> list[list[str]] | None:
    """The override list of every job of a ``-m`` sweep, in Hydra's order (its basic
    sweeper's product of the sweeps); None for a glob over config groups, which only Hydra
    can expand."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import Glob

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception:  # malformed: composing them as they are reports it in one line
        return [overrides]
    if any(isinstance(o.value(), Glob) for o in parsed if o.is_sweep_override()):
        return None
    try:
        return BasicSweeper.split_arguments(parsed, None)[0]
    except Exception as exc:  # an interval sweep, which the basic sweeper refuses
        raise ValueError(f"-m: {' '.join(str(exc).split())}") from None


def check_sweep(config_name: str, overrides: list[str], check: Check) -> None:
    """Compose and ``check`` every job of a ``-m`` sweep before Hydra writes anything; for
    training, each job's folder (``hydra.sweep.dir/hydra.sweep.subdir``) must hold no run."""
    from omegaconf import open_dict

    jobs = sweep_jobs(overrides)
    if jobs is None:  # a glob: check the first value of each other sweep, each job checks itself
        jobs = [first_of_sweeps(overrides)]
    seen: dict[str, int] = {}
    for num, job in enumerate(jobs):
        cfg = check_overrides(config_name, job)
        sweep_dir = check_folder_key(cfg, "sweep")
        with open_dict(cfg):
            cfg.hydra.job.num = num
        try:
            folder = str(Path(sweep_dir) / str(cfg.hydra.sweep.subdir))
        except Exception:  # a subdir made of what only Hydra knows at run time: each job checks itself
            if config_name != "train":
                check(cfg)
            continue
        if folder in seen:
            raise ValueError(f"-m: jobs {seen[folder]} and {num} would both write {folder}; "
                             f"make hydra.sweep.subdir differ between jobs (e.g. ${{hydra.job.num}})")
        seen[folder] = num
        if config_name == "train":
            pin_output_dir(cfg, folder)
            check(cfg)
            try:
                check_run_folder(Path(cfg.output_dir), cfg.get("ckpt_path"))
            except FileExistsError as exc:
                raise FileExistsError(f"-m job {num}: " + str(exc).replace("hydra.run.dir=", "hydra.sweep.dir=")) from None
        else:
            check(cfg)


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


def checkpoint_paths(value) -> list[str]:
    """``ckpt_path`` as a list of strings: one path, or several (a list, Hydra's ``[a,b]``)."""
    if isinstance(value, (str, Path)):
        return [str(value)]
    return [str(v) for v in value]


def checkpoint_label(value) -> str | list[str]:
    """How outputs name ``ckpt_path``: the path, or the list of an ensemble's paths."""
    paths = checkpoint_paths(value)
    return paths[0] if len(paths) == 1 else paths


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
