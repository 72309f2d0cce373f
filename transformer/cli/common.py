"""The door every command passes through, and the run folder a training claims on its way in.

Each CLI is a plain ``run(cfg) -> result`` function (callable from Python and tests) under a
thin ``@hydra.main`` wrapper; the wrapper turns the project's own input errors into a
one-line message and exit status 2 instead of a traceback.

A training run's folder is claimed by one run at a time. Two trainings started at once into
one folder would both find it empty and then mix their configs and checkpoints. So a run takes
an exclusive ``flock`` on ``<folder>/.run.lock`` before it writes anything else, and checks
under the lock that the folder holds no other run (:func:`claim_run_folder`). The kernel drops
the lock when the process ends, however it ends: a lock file left by a killed run (its pid no
longer alive) does not block the next one, and a run that ends normally removes its lock file.
A resume (``ckpt_path=``) may write into the folder its checkpoint comes from, or into an empty
one, never into another run's.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import fcntl
import functools
import os
import sys
from pathlib import Path
from typing import Callable

import hydra
from omegaconf import DictConfig, OmegaConf, open_dict

from transformer.cli import validate
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

    from transformer.data.core import readers, sources
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


@dataclasses.dataclass
class Job:
    """One run of a command: its config, composed once with Hydra's node (``cfg.hydra``), what
    the command's validation step returned for it, and where Hydra's job keys put its folder."""

    cfg: DictConfig
    checked: object = None
    sweep: bool = False


def hydra_entry(config_name: str,
                check: Check | None = None) -> Callable[[Callable[..., object]], Callable[[], None]]:
    """Wrap a command as a console-script ``main()`` reading ``conf/<config_name>.yaml``.

    The door every command goes through, in three steps: the command line is composed once
    (:func:`prepare`, Hydra's Compose API), the command's validation step runs on the result
    before anything is written, then Hydra's job runner (``run_job``: the run folder, its
    ``.hydra/`` record, logging) calls the command. With ``check`` the command is
    ``run(cfg, checked)`` and receives what ``check`` returned (training: the resumed
    checkpoint); without, the check is the command's entry in ``validate.CHECKS`` and the
    command is ``run(cfg)``. A user error anywhere is one ``error:`` line and exit 2.
    Hydra's own flags (``--help``, ``--cfg`` ...) and glob sweeps are left to Hydra."""

    def wrap(run: Callable[..., object]) -> Callable[[], None]:
        def call(cfg: DictConfig, checked: object) -> object:
            return run(cfg, checked) if check is not None else run(cfg)

        @hydra.main(version_base="1.3", config_path=CONF_DIR, config_name=config_name)
        def hydra_main(cfg: DictConfig) -> None:  # only for what Hydra parses itself
            guarded(lambda: call(cfg, (check or validate.CHECKS.get(config_name) or _no_check)(cfg)))

        @functools.wraps(run)
        def main() -> None:
            try:
                jobs = prepare(config_name, sys.argv[1:], check)
            except user_errors() as exc:
                fail(exc)
            if jobs is None:
                hydra_main()
                return
            launch(config_name, sys.argv[1:], jobs, call)

        return main

    return wrap


def _no_check(cfg: DictConfig) -> None:
    return None


def guarded(work: Callable[[], object]) -> object:
    """``work()``, with a user error (or a full disk met inside a library) as one ``error:`` line
    and exit 2, and a stop by SIGTERM as its own line and status."""
    try:
        return work()
    except user_errors() as exc:
        fail(exc)
    except StoppedBySignal as exc:
        fail(exc, StoppedBySignal.exit_status)
    except Exception as exc:  # a full disk met inside a library (Lightning, datasets)
        full = disk_full_message(exc)
        if full is None:
            raise
        fail(full)


def launch(config_name: str, args: list[str], jobs: list[Job], call: Callable[[DictConfig, object], object]) -> None:
    """Run each job through Hydra's job runner, as ``@hydra.main`` would (``hydra.run.dir``, or
    ``hydra.sweep.dir/hydra.sweep.subdir`` with ``multirun.yaml`` beside the jobs of a sweep),
    with the config composed and checked by :func:`prepare`."""
    from hydra._internal.callbacks import Callbacks
    from hydra.core.utils import configure_log, run_job
    from hydra.types import HydraContext, RunMode

    with hydra_session(config_name) as session:
        if jobs and jobs[0].sweep:
            sweep = session.compose_config(config_name, [a for a in args if not a.startswith("-")],
                                           run_mode=RunMode.MULTIRUN)
            folder = Path(str(sweep.hydra.sweep.dir))
            folder.mkdir(parents=True, exist_ok=True)
            OmegaConf.save(sweep, folder / "multirun.yaml")
        for job in jobs:
            cfg = job.cfg
            configure_log(cfg.hydra.hydra_logging, cfg.hydra.verbose)
            context = HydraContext(config_loader=session.config_loader, callbacks=Callbacks(cfg))
            keys = ("hydra.sweep.dir", "hydra.sweep.subdir") if job.sweep else ("hydra.run.dir", None)
            with open_dict(cfg):
                cfg.hydra.mode = RunMode.MULTIRUN if job.sweep else RunMode.RUN
            done = run_job(task_function=lambda task_cfg, job=job: guarded(lambda: call(task_cfg, job.checked)),
                           config=cfg, job_dir_key=keys[0], job_subdir_key=keys[1], hydra_context=context)
            done.return_value  # an error inside the job (not a user error) is raised here


@contextlib.contextmanager
def hydra_session(config_name: str):
    """Hydra initialized on ``conf/`` for one command (its job name is the config's name)."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.utils import setup_globals

    setup_globals()  # Hydra's resolvers (now, hydra)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3", job_name=config_name):
            yield GlobalHydra.instance().hydra
    finally:
        GlobalHydra.instance().clear()


def prepare(config_name: str, args: list[str], check: Check | None = None) -> list[Job] | None:
    """The command line composed once per job and checked, before anything is written: the
    jobs to :func:`launch`, or None where Hydra takes the command line itself (its own flags
    ``--help``, ``--cfg`` ...; a sweep with a glob over config groups, whose jobs only Hydra can
    expand: its first values are checked here, each job checks itself). Training's folder is
    claimed here (``hydra.run.dir`` pinned to it). With ``-m`` every job is composed and checked
    and, for training, each job's folder must be free, so that a refused sweep writes nothing
    (not even ``multirun.yaml``). ``check`` is the command's validation step (default: its
    entry in ``validate.CHECKS``)."""
    check = check or validate.CHECKS.get(config_name) or _no_check
    flags = [a for a in args if a.startswith("-")]
    multirun = bool(flags) and all(a in ("-m", "--multirun") for a in flags)
    if flags and not multirun:
        return None
    overrides = [a for a in args if not a.startswith("-")]
    if multirun:
        return check_sweep(config_name, overrides, check)
    cfg = check_overrides(config_name, overrides)
    folder = check_folder_key(cfg, "run")
    if config_name != "train":
        return [Job(cfg, check(cfg))]
    pin_output_dir(cfg, folder)
    checked = check(cfg)
    claim_run_folder(Path(cfg.output_dir), cfg.get("ckpt_path"))
    with open_dict(cfg):
        cfg.hydra.run.dir = str(folder)  # the folder just claimed, not a new timestamp
    return [Job(cfg, checked)]


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


def check_sweep(config_name: str, overrides: list[str], check: Check) -> list[Job] | None:
    """Compose and ``check`` every job of a ``-m`` sweep before anything is written; for
    training, each job's folder (``hydra.sweep.dir/hydra.sweep.subdir``) must hold no run.
    Returns the jobs, or None for a glob sweep (after checking its first values)."""
    jobs = sweep_jobs(overrides)
    if jobs is None:  # a glob: check the first value of each other sweep, each job checks itself
        check(check_overrides(config_name, first_of_sweeps(overrides)))
        return None
    seen: dict[str, int] = {}
    out = []
    for num, job in enumerate(jobs):
        cfg = check_overrides(config_name, job)
        sweep_dir = check_folder_key(cfg, "sweep")
        with open_dict(cfg):
            cfg.hydra.job.num = cfg.hydra.job.id = num
        try:
            folder = str(Path(sweep_dir) / str(cfg.hydra.sweep.subdir))
        except Exception:  # a subdir made of what only Hydra knows at run time: each job checks itself
            folder = None
        if folder is not None and folder in seen:
            raise ValueError(f"-m: jobs {seen[folder]} and {num} would both write {folder}; "
                             f"make hydra.sweep.subdir differ between jobs (e.g. ${{hydra.job.num}})")
        if folder is not None:
            seen[folder] = num
        if config_name == "train" and folder is not None:
            pin_output_dir(cfg, folder)
        checked = check(cfg)
        if config_name == "train" and folder is not None:
            try:
                check_run_folder(Path(cfg.output_dir), cfg.get("ckpt_path"))
            except FileExistsError as exc:
                raise FileExistsError(f"-m job {num}: " + str(exc).replace("hydra.run.dir=", "hydra.sweep.dir=")) from None
        out.append(Job(cfg, checked, sweep=True))
    return out


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
    included), so that an unknown key or a malformed override ends with one ``error:`` line
    and exit status 2 (Hydra itself prints several lines and exits 1)."""
    from hydra.errors import HydraException
    from hydra.types import RunMode
    from omegaconf.errors import OmegaConfBaseException

    try:
        with hydra_session(config_name) as session:
            return session.compose_config(config_name, args, run_mode=RunMode.RUN)
    except (HydraException, OmegaConfBaseException) as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        cause = exc.__cause__
        if cause is not None and str(cause).strip():
            lines.append(str(cause).strip().splitlines()[0])
        lines = [line for line in dict.fromkeys(lines) if not line.startswith(("full_key:", "object_type="))]
        hints = [hint for key, hint in GROUP_HINTS.items()
                 if f"'{key}'" in " ".join(lines) and any(a.startswith(f"{key}=") for a in args)]
        fail(" ".join(lines + hints))


# What a command line typed with a group the configs do not have means in this layout.
GROUP_HINTS = {
    "size": "(a CPU recipe is its own experiment file: experiment=multi30k_cpu, multi30k_nat_cpu, "
            "multi30k_nat_ctc_cpu, sst2; a GPU one: multi30k, sst2_gpu ...)",
    "pair": "(a language pair is data.src_lang=<src> data.tgt_lang=<tgt>)",
    "model": "(model= picks a size, tiny | small | medium for translation, encoder for tagging and "
             "classification; the task picks the model kind: model=small task=nat)",
    "decode": "(a decoding strategy is a key: decode.strategy=beam, test_decode.strategy=mask_predict ...)",
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
    """``(task, device)``: the checkpoint's task (or an ensemble of several) in eval mode on
    ``device``, its model the plain modules or, with ``backend="cpu"``, the CPU fast paths, and,
    with ``quantize="int8"`` (CPU only), its linear layers to int8 (``accel.quantize``).
    The process keeps the memory it frees from then on (``inference.memory``)."""
    from transformer import accel
    from transformer.accel.quantize import apply_quantize, check_quantize
    from transformer.inference.memory import keep_freed_memory
    from transformer.tasks.checkpoint import load_task

    dev = resolve_device(device)  # a bad device or backend fails before the checkpoint is read
    accel.check(backend)
    quantize = check_quantize(quantize, dev.type)
    keep_freed_memory()
    task = load_task(ckpt_path)
    task.to(dev)
    task.model = apply_quantize(accel.apply(task.model, backend), quantize, backend)
    return task, dev


# ----------------------------------------------------------------------------- the run folder
LOCK_NAME = ".run.lock"
# Run folders this process holds: resolved path -> the open lock file's descriptor.
_HELD: dict[str, int] = {}


def held_run(out: Path) -> Path | None:
    """A file showing that ``out`` already holds a run (a checkpoint, metrics, a summary)."""
    found = sorted((out / "checkpoints").glob("*.ckpt")) if (out / "checkpoints").is_dir() else []
    found += [p for p in (out / "csv" / "metrics.csv", out / "train_summary.json") if p.is_file()]
    return found[0] if found else None


def check_run_folder(out: Path, ckpt_path: str | None) -> None:
    """Refuse ``out`` when it holds a run that this one is not resuming: a fresh run would
    overwrite its checkpoints and metrics, and a resume of another run's checkpoint would
    replace its ``last.ckpt`` and summary."""
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"output_dir={out}: a file, not a folder")
    held = held_run(out) if out.is_dir() else None
    if held is None:
        return
    last = out / "checkpoints" / "last.ckpt"
    if not ckpt_path:
        raise FileExistsError(
            f"{out} already holds a run ({held}); resume it with ckpt_path={last}, or start a new "
            f"run in another folder (hydra.run.dir=<new folder>)")
    if out.resolve() not in Path(ckpt_path).resolve().parents:
        raise FileExistsError(
            f"{out} holds another run ({held}); a resume from {ckpt_path} writes into that checkpoint's "
            f"own run folder or a new one (hydra.run.dir=<new folder>)")


def claim_run_folder(out: Path, ckpt_path: str | None = None) -> bool:
    """Take ``out`` for this process's run (see the module docstring); a folder in use by a
    live run, or holding another run, is a ``FileExistsError`` and nothing is written. Returns
    whether this call claimed it: a folder this process already holds is left as it is, and
    DDP workers follow rank 0."""
    if os.environ.get("LOCAL_RANK", "0") != "0":
        return False
    out = Path(out)
    key = str(out.resolve())
    if key in _HELD:
        return False
    check_run_folder(out, ckpt_path)  # before anything is written
    out.mkdir(parents=True, exist_ok=True)
    fd = _lock(out / LOCK_NAME)
    try:
        check_run_folder(out, ckpt_path)  # again: a run may have finished there since the first look
    except BaseException:
        os.close(fd)  # closing drops the lock
        raise
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    _HELD[key] = fd
    atexit.register(release_run_folder, out)
    return True


def _lock(path: Path) -> int:
    """An open descriptor of ``path`` holding its exclusive lock. A lock file is removed by the
    run that held it (while still holding it), so a descriptor locked just after that removal
    belongs to a file no longer in the folder: then open the new one and lock again."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise FileExistsError(f"{path.parent} is in use by another training run (pid {holder}); start this "
                                  f"run in another folder (hydra.run.dir=<new folder>)") from None
        try:
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def release_run_folder(out: Path) -> None:
    """Let another run have ``out``: remove the lock file, then drop the lock."""
    out = Path(out)
    fd = _HELD.pop(str(out.resolve()), None)
    if fd is not None:
        try:
            (out / LOCK_NAME).unlink(missing_ok=True)
        finally:
            os.close(fd)
