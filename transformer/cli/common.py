"""The door every command passes through: compose once, check once, run (docs/cli.md, "Runs,
sweeps and run folders"). A user error anywhere is one ``error:`` line and exit status 2. A
command that decodes or trains on a CPU also sets how its process keeps memory
(:func:`keep_freed_memory`, :func:`bound_onednn_caches`)."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import dataclasses
import functools
import itertools
import os
import re
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Iterator

import hydra
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from transformer.cli import validate
from transformer.cli.validate import resolve_device
from transformer.escapes import CONTROL, escape_controls
from transformer.files import DiskFullError, check_run_folder, ddp_worker, disk_full, full_disk_error, run_folder

# A command's validation step: raises a user error (ValueError, OSError ...) for a bad config.
Check = Callable[[DictConfig], object]

# conf/ sits at the repository root (the package is installed editable: `pip install -e .`).
CONF_DIR = str(
    Path(os.environ.get("TRANSFORMER_CONF_DIR", Path(__file__).resolve().parents[2] / "conf")).resolve()
)
# The command whose runs claim their folder.
TRAIN = "train"
#: Logging of every command but training (evaluate, decode, tag, serve, ...), which run in the
#: user's folder: messages go to stderr only, so stdout stays the command's output and no log
#: file is left behind. Training logs as Hydra does, to its run folder's train.log and stderr.
TOOL_LOGGING = OmegaConf.create({
    "version": 1,
    "formatters": {"simple": {"format": "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "simple", "stream": "ext://sys.stderr"}},
    "root": {"level": "INFO", "handlers": ["console"]},
    "disable_existing_loggers": False,
})
MULTIRUN_FLAGS = ("-m", "--multirun")


def user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that describe bad input (file, key, value, device), not bugs. Lightning's
    configuration error counts only once Lightning is loaded: a command that fails before it never
    raised one, and importing Lightning to name it would cost seconds before the error line."""
    from transformer.data.core.readers import DataFormatError
    from transformer.data.core.sources import ChecksumError, DownloadError
    from transformer.tasks.checkpoint import CheckpointError

    lightning = sys.modules.get("lightning.fabric.utilities.exceptions")
    return (CheckpointError, DiskFullError, FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError,
            PermissionError, ValueError, KeyError, DataFormatError, ChecksumError, DownloadError,
            *((lightning.MisconfigurationException,) if lightning else ()))


class StoppedBySignal(RuntimeError):
    """A run stopped by SIGTERM after saving what it could; the message says how to resume."""

    exit_status = 128 + 15  # what a shell reports for a process ended by SIGTERM


def error_line(exc: BaseException | str) -> str:
    """The one ``error: ...`` line of a user error, control characters escaped, cut to 2000 characters."""
    text = re.sub(" {2,}", " ", escape_controls(str(exc))).strip()
    return f"error: {text[:2000]}"


def fail(exc: BaseException | str, status: int = 2) -> None:
    """Print one ``error: ...`` line on stderr and exit with ``status`` (2: bad input)."""
    print(error_line(exc), file=sys.stderr)
    sys.exit(status)


@dataclasses.dataclass
class Job:
    """One run of a command: its config, what its check returned, and a sweep's config."""

    cfg: DictConfig
    checked: object
    sweep: DictConfig | None = None


def hydra_entry(config_name: str,
                check: Check | None = None) -> Callable[[Callable[..., object]], Callable[[], None]]:
    """Wrap ``run`` as a console-script ``main()`` on ``conf/<config_name>.yaml``: compose, check, run.
    With ``check`` the command is ``run(cfg, checked)``; without, the check is ``validate.CHECKS``'s."""
    checker = check or validate.CHECKS.get(config_name) or (lambda cfg: None)

    def wrap(run: Callable[..., object]) -> Callable[[], None]:
        def call(cfg: DictConfig, checked: object) -> object:
            return run(cfg, checked) if check is not None else run(cfg)

        @hydra.main(version_base="1.3", config_path=CONF_DIR, config_name=config_name)
        def hydra_main(cfg: DictConfig) -> None:  # only for Hydra's own flags
            def work() -> object:
                checked = checker(cfg)
                with claimed(cfg) if config_name == TRAIN else contextlib.nullcontext():
                    return call(cfg, checked)
            guarded(work)

        @functools.wraps(run)
        def main() -> None:
            jobs = guarded(lambda: prepare(config_name, sys.argv[1:], check))
            if jobs is None:
                hydra_main()
                return
            if jobs[0].sweep is not None:  # as Hydra's sweeper records a sweep
                sweep_dir = Path(str(jobs[0].sweep.hydra.sweep.dir))
                sweep_dir.mkdir(parents=True, exist_ok=True)
                OmegaConf.save(jobs[0].sweep, sweep_dir / "multirun.yaml")
            for job in jobs:
                guarded(lambda job=job: run_job(job, lambda cfg: call(cfg, job.checked)))

        return main

    return wrap


def guarded(work: Callable[[], object]) -> object:
    """``work()``, a user error (or a full disk inside a library) one ``error:`` line and exit 2."""
    try:
        return work()
    except user_errors() as exc:
        fail(exc)
    except StoppedBySignal as exc:
        fail(exc, StoppedBySignal.exit_status)
    except Exception as exc:  # a full disk met inside a library (Lightning, datasets)
        full = full_disk_error(exc)
        if full is None:
            raise
        fail(full if isinstance(full, DiskFullError) else disk_full(full, full.filename or Path.cwd() / "?"))


def run_job(job: Job, work: Callable[[DictConfig], object]) -> None:
    """``work(cfg)`` run by Hydra's job runner in the job's folder (claimed first for a training)."""
    from hydra.core.utils import run_job as hydra_run_job
    from hydra.types import HydraContext, RunMode

    cfg = job.cfg
    training = cfg.hydra.job.name == TRAIN
    with read_write(cfg.hydra), open_dict(cfg.hydra):
        cfg.hydra.mode = RunMode.RUN if job.sweep is None else RunMode.MULTIRUN
        if not training:
            cfg.hydra.job_logging = TOOL_LOGGING
    keys = ("hydra.run.dir", None) if job.sweep is None else ("hydra.sweep.dir", "hydra.sweep.subdir")
    no_callbacks = SimpleNamespace(on_job_start=lambda **_: None, on_job_end=lambda **_: None)
    with claimed(cfg) if training else contextlib.nullcontext():
        # A user error ends the process inside the runner, in one line; any other failure, which
        # the runner holds, is raised again by reading the job's return value.
        hydra_run_job(lambda task_cfg: guarded(lambda: work(task_cfg)), cfg, *keys,
                      HydraContext(config_loader=None, callbacks=no_callbacks)).return_value


def prepare(config_name: str, args: list[str], check: Check | None = None) -> list[Job] | None:
    """The jobs of the command line, composed and checked before anything is written; None for Hydra's own flags."""
    check = check or validate.CHECKS.get(config_name) or (lambda cfg: None)
    flags = [a for a in args if a.startswith("-")]
    if any(flag not in MULTIRUN_FLAGS for flag in flags):
        return None
    overrides = [a for a in args if not a.startswith("-")]
    if not flags:
        cfg = check_overrides(config_name, overrides)
        folder = check_folder_key(cfg, "run")
        with open_dict(cfg.hydra):
            cfg.hydra.run.dir = folder  # resolved once: ${now:...} is this run's start
        return [check_job(config_name, cfg, folder, check)]
    sweep, jobs = sweep_configs(config_name, overrides)
    seen: dict[str, int] = {}
    out = []
    for num, cfg in enumerate(jobs):
        folder = str(Path(check_folder_key(cfg, "sweep")) / str(cfg.hydra.sweep.subdir))
        if folder in seen:
            raise ValueError(f"-m: jobs {seen[folder]} and {num} would both write {folder}; "
                             f"make hydra.sweep.subdir differ between jobs (e.g. ${{hydra.job.num}})")
        seen[folder] = num
        try:
            out.append(check_job(config_name, cfg, folder, check, sweep))
        except FileExistsError as exc:
            raise FileExistsError(f"-m job {num}: " + str(exc).replace("hydra.run.dir=", "hydra.sweep.dir=")) from None
    return out


def check_job(config_name: str, cfg: DictConfig, folder: str, check: Check, sweep: DictConfig | None = None) -> Job:
    """The job of ``cfg`` in ``folder``, checked; a training's folder must hold no other run."""
    training = config_name == TRAIN
    if training:
        pin_output_dir(cfg, folder)
    checked = check(cfg)
    if training and not ddp_worker():
        check_run_folder(Path(cfg.output_dir), cfg.get("ckpt_path"))
    return Job(cfg, checked, sweep)


def check_folder_key(cfg: DictConfig, key: str) -> str:
    """``hydra.<key>.dir``: a folder path that is not a file."""
    folder = cfg.hydra[key].dir
    if not isinstance(folder, str) or not folder:
        raise ValueError(f"hydra.{key}.dir={folder!r}: expected a folder path")
    if Path(folder).exists() and not Path(folder).is_dir():
        raise NotADirectoryError(f"hydra.{key}.dir={folder}: a file, not a folder")
    return folder


def pin_output_dir(cfg: DictConfig, folder: str | Path) -> None:
    """``output_dir`` set to ``folder`` where it is ``${hydra:runtime.output_dir}``, for the checks."""
    with open_dict(cfg):
        if OmegaConf.is_interpolation(cfg, "output_dir") and "hydra:" in str(cfg._get_node("output_dir")._value()):
            cfg.output_dir = str(folder)


def sweep_configs(config_name: str, overrides: list[str]) -> tuple[DictConfig, list[DictConfig]]:
    """A ``-m`` command line's sweep config (``multirun.yaml``) and every job's config, in Hydra's order."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from hydra.types import RunMode

    with hydra_session(config_name):
        try:
            parsed = OverridesParser.create(GlobalHydra.instance().config_loader()).parse_overrides(overrides)
            values: dict[str, list[str]] = {}
            for o in parsed:
                if o.is_sweep_override() and not o.is_discrete_sweep():
                    raise ValueError(f"-m {o.input_line}: a range of values needs a sweeper plugin; "
                                     f"list them (a=1,2,3) or use range(start,stop,step)")
                swept = o.sweep_string_iterator() if o.is_sweep_override() else [o.get_value_element_as_str()]
                values[o.get_key_element()] = [f"{o.get_key_element()}={v}" for v in swept]
        except HydraException as exc:
            raise ValueError(f"-m: {hydra_message(exc, overrides)}") from None
    sweep = check_overrides(config_name, [o.input_line for o in parsed if not o.is_sweep_override()])
    with open_dict(sweep.hydra):
        sweep.hydra.mode = RunMode.MULTIRUN
        sweep.hydra.overrides.task = [o.input_line for o in parsed if not o.is_hydra_override()]
    str(sweep.hydra.sweep.dir)  # resolves ${now:...} once, for every job
    jobs = []
    for num, job in enumerate(itertools.product(*values.values())):
        cfg = check_overrides(config_name, list(job))
        OmegaConf.copy_cache(from_config=sweep, to_config=cfg)
        with open_dict(cfg.hydra):
            cfg.hydra.job.num = cfg.hydra.job.id = num
        jobs.append(cfg)
    return sweep, jobs


@contextlib.contextmanager
def hydra_session(config_name: str) -> Iterator[None]:
    """Hydra initialized on ``conf/`` for one command (its job name is the config's name)."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3", job_name=config_name):
        yield


def check_overrides(config_name: str, args: list[str]) -> DictConfig:
    """``conf/<config_name>.yaml`` composed with ``args`` (Hydra's node included); bad ones a ``ValueError``."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    with hydra_session(config_name):
        try:
            return hydra.compose(config_name, args, return_hydra_config=True)
        except (HydraException, OmegaConfBaseException) as exc:
            raise ValueError(hydra_message(exc, args)) from None


def hydra_message(exc: BaseException, args: list[str]) -> str:
    """Hydra's several-line error as one line, with a hint for a group the configs do not have."""
    text = str(exc)
    for arg in args:  # a typed control character (a newline in a path) shown escaped, not as a line break
        if CONTROL.search(arg):
            text = text.replace(arg, escape_controls(arg))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    cause = exc.__cause__
    if cause is not None and str(cause).strip():
        lines.append(str(cause).strip().splitlines()[0])
    lines = [line for line in dict.fromkeys(lines) if not line.startswith(("full_key:", "object_type="))]
    hints = [hint for key, hint in GROUP_HINTS.items()
             if f"'{key}'" in " ".join(lines) and any(a.lstrip("+~").startswith(f"{key}=") for a in args)]
    hints += [f"({name} is {hint})" for name, hint in FOLDED.items() if f"'experiment/{name}'" in text]
    return " ".join(lines + hints)


# Experiments that are a command another recipe's file gives, in its comment.
_PAIRS = '"data.pairs=[en-de,en-fr,en-cs]" data.vocab_size=12000'
FOLDED = {"sst2_gpu": "experiment=sst2 with the GPU command conf/experiment/sst2.yaml gives",
          "multi30k_nat": "experiment=multi30k_nat_cpu with the GPU command its file gives",
          "multi30k_nat_ctc": "experiment=multi30k_nat_ctc_cpu with the GPU command its file gives",
          "multi30k_multi": f"experiment=multi30k {_PAIRS} task.warmup_steps=3000",
          "multi30k_multi_cpu": f"experiment=multi30k_cpu {_PAIRS} task.warmup_steps=900 trainer.max_time=00:03:00:00"}
# What a command line typed with a group option the configs do not have means in this layout.
GROUP_HINTS = {
    "size": "(a CPU recipe is its own experiment file: experiment=multi30k_cpu, multi30k_nat_cpu, "
            "multi30k_nat_ctc_cpu, sst2; a GPU one: multi30k; the others give their GPU command in a comment)",
    "pair": "(a language pair is data.src_lang=<src> data.tgt_lang=<tgt>)",
    "model": "(model= picks a size, tiny | small | medium for translation, encoder for tagging and "
             "classification; the task picks the model kind: model=small task=nat)",
    "decode": "(a decoding strategy is a key: decode.strategy=beam, test_decode.strategy=mask_predict ...)",
    "trainer": "(a GPU is trainer.accelerator=gpu trainer.precision=bf16-mixed, several devices trainer.strategy=ddp "
               "trainer.devices=N)",
    "callbacks": "(turn one off with callbacks.<name>=null: callbacks.early_stopping=null)",
    "logger": "(turn one off with logger.<name>=null: logger.tensorboard=null)",
}


def checkpoint_paths(value) -> list[str]:
    """``ckpt_path`` as a list of strings: one path, or several (a list, Hydra's ``[a,b]``)."""
    if isinstance(value, (str, Path)):
        return [str(value)]
    return [str(v) for v in value]


def checkpoint_label(value) -> str | list[str]:
    """How outputs name ``ckpt_path``: the path, or the list of an ensemble's paths."""
    paths = checkpoint_paths(value)
    return paths[0] if len(paths) == 1 else paths


def load_for_inference(ckpt_path, device: str = "auto", backend: str = "none", quantize: str | None = None):
    """``(task, device)``: the checkpoint(s) in eval mode on ``device``, fast path and quantization applied."""
    from transformer import accel
    from transformer.accel.quantize import apply_quantize, check_quantize
    from transformer.tasks.checkpoint import load_task

    dev = resolve_device(device)  # a bad device or backend fails before the checkpoint is read
    accel.check(backend)
    quantize = check_quantize(quantize, dev.type)
    keep_freed_memory()
    bound_onednn_caches()
    task = load_task(ckpt_path)
    task.to(dev)
    task.model = apply_quantize(accel.apply(task.model, backend), quantize, backend)
    return task, dev


def claimed(cfg: DictConfig):
    """The run folder of a training config (``output_dir``), claimed for the block (``files.run_folder``)."""
    return run_folder(Path(cfg.output_dir), cfg.get("ckpt_path"))


# ----------------------------------------------------------------------------- the process's memory
# A decoding or CPU training step frees tensors of megabytes and allocates them again at the next;
# glibc hands blocks that large back to the kernel, which zeroes fresh pages at first touch (0.9
# million page faults, 1.8 s of system time in 16 s of beam 5; 50 thousand and 0.1 s with its
# thresholds raised, at the price of a resident size near the peak). oneDNN keeps state for every
# product shape it meets, and search and training meet a new one at almost every batch: bounded,
# the resident size stays flat. The measurements: docs/experiments.md ("Speed").
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (glibc's malloc.h)
THRESHOLD = 1 << 30  # both raised to 1 GiB: the heap keeps what a step frees
# oneDNN's primitive cache and ideep's computation cache; each reads its variable at first use.
ONEDNN_CACHES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")
ONEDNN_CACHE_ENTRIES, TRAINING_CACHE_ENTRIES = 256, 64  # decoding's, training's


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds for this process; True if both were set, False
    where the C library is not glibc (nothing changes then)."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, THRESHOLD))


def bound_onednn_caches(entries: int = ONEDNN_CACHE_ENTRIES) -> dict[str, str]:
    """Bound oneDNN's caches of per-shape products to ``entries`` each, unless the environment
    already sets them (the user's value wins); the variables as they now stand. Only takes
    effect before the process's first oneDNN product: each cache reads its variable once."""
    return {name: os.environ.setdefault(name, str(entries)) for name in ONEDNN_CACHES}
