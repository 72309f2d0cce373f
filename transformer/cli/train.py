"""`transformer-train`: train any task from Hydra config.

    transformer-train experiment=multi30k trainer.max_epochs=30 model.d_model=512
    transformer-train experiment=multi30k ckpt_path=outputs/.../checkpoints/last.ckpt  # resume
    transformer-train experiment=gum_upos init_from=outputs/pretrain/.../best.ckpt  # fine-tune
    transformer-train experiment=sst2 init_from=hf:bert-base-uncased  # fine-tune a BERT-family model
    transformer-train experiment=multi30k_cpu init_from=hf:Helsinki-NLP/opus-mt-de-en  # a whole Marian model
"""

from __future__ import annotations

import inspect
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from transformer import kinds
from transformer.cli.common import (GROUP_HINTS, TRAINING_CACHE_ENTRIES, StoppedBySignal, bound_onednn_caches, claimed,
                                    hydra_entry, keep_freed_memory)
from transformer.decoding.precision import cpu_has_bf16
from transformer.decoding.settings import DecodeSettings
from transformer.data.core.tokenizer import SubwordTokenizer, write_tokenizers
from transformer.files import write_text
from transformer.models.transformer import count_parameters
from transformer.ranges import check_count
from transformer.tasks.build import check_config_types, check_model_config, check_task_config, position_limit, show
from transformer.tasks.checkpoint import CheckpointError, load_weights, read_checkpoint
from transformer.tasks.transfer import (
    check_init_from,
    check_translation_init,
    copy_head,
    encoder_settings_to_take,
    model_settings_to_take,
    pretrained_task_settings,
    pretrained_tokenizer,
    start_from,
)

if TYPE_CHECKING:
    import lightning as L

log = logging.getLogger(__name__)


def _instantiate_group(group: DictConfig | None) -> list:
    """Instantiate every non-null entry of a callbacks/logger group."""
    if not group:
        return []
    return [instantiate(node) for node in group.values() if node and "_target_" in node]


def build_loggers(cfg: DictConfig, resumed_step: int | None = None) -> list:
    """The ``logger`` group; when resuming from a checkpoint at ``resumed_step``, CSV loggers
    keep the rows their ``metrics.csv`` already has from before that step."""
    from transformer.tasks.callbacks import ResumableCSVLogger

    loggers = _instantiate_group(cfg.get("logger"))
    if resumed_step is not None:
        for logger in loggers:
            if isinstance(logger, ResumableCSVLogger):
                logger.keep_rows_before(resumed_step)
    return loggers


def build_datamodule(cfg: DictConfig, ckpt: dict | None = None, pretrained: dict | None = None):
    """The data module, with the resumed (else the pretrained) checkpoint's tokenizer."""
    overrides = {}
    if ckpt is None and cfg.get("ckpt_path"):
        ckpt = read_checkpoint(cfg.ckpt_path)
    text, name, source = None, None, None
    if ckpt is not None and "tokenizers" in ckpt:
        text, name, source = ckpt["tokenizers"], "resumed_tokenizer", ckpt
    elif pretrained is not None:
        text = pretrained["tokenizers"] if kinds.task_kind(pretrained) is kinds.TRANSLATION else pretrained_tokenizer(pretrained)
        name, source = "pretrained_tokenizer", pretrained
    hp = (source or {}).get("hyper_parameters") or {}
    if (hp.get("data") or {}).get("tag_side") == "codes":  # M2M100, NLLB, mBART-50: pairs framed with their codes
        overrides.update(language_codes=dict(hp["data"]["language_codes"]), start_id=int(hp["bos_id"]))
    if text is not None:
        out = Path(cfg.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        overrides["tokenizer_path"] = write_tokenizers(out, name, text)
    limit = position_limit(OmegaConf.to_container(cfg.model, resolve=True))
    if limit is not None and "max_positions" in inspect.signature(get_class(cfg.data._target_)).parameters:
        overrides["max_positions"] = limit  # rows the learned position table cannot hold are cut
    # Plain containers (not DictConfig) in the data module: its hyperparameters are saved in
    # checkpoints, and a DictConfig there stops torch.load(weights_only=True) on resume.
    dm = instantiate(cfg.data, _convert_="all", **overrides)
    dm.vocab_size_chosen = "data.vocab_size" in command_line_keys()
    return dm


def command_line_keys(overrides=None) -> set[str]:
    """The keys the command line sets (``overrides``, by default this run's Hydra task overrides)."""
    from hydra.core.hydra_config import HydraConfig

    if overrides is None:
        if not HydraConfig.initialized():
            return set()
        overrides = HydraConfig.get().overrides.task
    return {o.split("=", 1)[0].lstrip("+~") for o in overrides}


def training_device(cfg: DictConfig) -> str:
    """The device type the configured trainer trains on: ``cpu`` or ``cuda``."""
    accelerator = str(cfg.trainer.get("accelerator", "auto"))
    if accelerator == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return "cpu" if accelerator == "cpu" else "cuda"


def task_settings(cfg: DictConfig) -> tuple[type, dict]:
    """The task class and its settings, as the config gives them."""
    task_cfg = OmegaConf.to_container(cfg.task, resolve=True)
    return get_class(task_cfg.pop("_target_")), task_cfg


def build_task(cfg: DictConfig, dm, pretrained: dict | None = None):
    """The LightningModule from the task, model and data settings (and a pretrained translation model's sizes)."""
    from transformer import accel

    cls, task_cfg = task_settings(cfg)
    model_cfg = OmegaConf.to_container(cfg.model, resolve=True)
    data_settings = cls.kwargs_from_datamodule(dm)
    if pretrained is not None and kinds.task_kind(pretrained) is kinds.TRANSLATION is kinds.task_kind(cls):
        where = cfg.get("ckpt_path") or cfg.init_from
        data_settings.update(pretrained_task_settings(pretrained, data_settings, where))
        if dm.hparams.get("vocab_size") not in (None, data_settings["vocab_size"]):
            # the model's rows, which may exceed its tokenizer's pieces (M2M100's made-up words):
            # what the data module records too (Lightning refuses two values of one hyperparameter)
            dm.save_hyperparameters({**dm.hparams, "vocab_size": data_settings["vocab_size"]})
    task = cls(model=model_cfg, **task_cfg, **data_settings)
    if cfg.get("accel", "none") == "cpu":
        task.model = accel.apply(task.model, "cpu")
    log.info("accel=%s%s", cfg.get("accel", "none"), f", task.loss={task_cfg['loss']}" if "loss" in task_cfg else "")
    return task


def check_config(cfg: DictConfig, complete: bool = False) -> None:
    """Type-check every group against its target and the decode blocks before any data is prepared."""
    missing = [key for key in cfg if OmegaConf.is_missing(cfg, key)]  # e.g. distill_dir
    if missing:
        raise ValueError(f"{', '.join(missing)}: required; set it on the command line ({missing[0]}=...)")
    if not isinstance(cfg.get("output_dir"), str) or not cfg.output_dir:
        raise ValueError(f"output_dir={cfg.get('output_dir')!r}: expected a folder path")
    for key in ("seed", "monitor", "monitor_mode"):
        expected = int if key == "seed" else str
        if key in cfg and (not isinstance(cfg[key], expected) or isinstance(cfg[key], bool)):
            raise ValueError(f"{key}={cfg[key]!r}: expected {expected.__name__}")
    if cfg.get("test_checkpoint", "best") not in ("best", "last"):
        raise ValueError(f"test_checkpoint={show(cfg.test_checkpoint)}: expected best or last")
    for key in ("trainer", "callbacks", "logger"):  # train.yaml's blocks; null turns callbacks or loggers off
        if not isinstance(cfg.get(key), DictConfig) and not (key != "trainer" and cfg.get(key) is None):
            raise ValueError(f"{key}={cfg.get(key)!r}: expected its settings as keys, {key}.<name>=... "
                             f"{GROUP_HINTS[key]}")
    # The model is checked against the model registry (tasks/build.py), never imported by name;
    # vocabulary sizes and special ids come from the data later.
    check_model_config(cfg.get("model"), "model", complete=False)
    for group in ("trainer", "data", "task"):
        check_config_types(cfg.get(group), group)
    check_task_config(cfg.get("task"))  # a translation task's shared settings and its optimizer node too
    from transformer.data.core.datamodule import check_data_config

    check_data_config(cfg.get("data"), "data", complete)  # languages, column maps, splits, hub: before any file is read
    from transformer.data.parallel.languages import Languages

    if Languages.of_config(cfg.data).tag_to_decoder:
        task_cls, _ = task_settings(cfg)
        if not kinds.task_kind(task_cls).generates_from_start:  # no start token to carry it
            raise ValueError(f"data.tag_side=decoder: {kinds.task_kind(task_cls).what} model has no decoder start token to "
                             f"read the target tag from; use data.tag_side=source")
    for group in ("callbacks", "logger"):
        for name, node in (cfg.get(group) or {}).items():
            check_config_types(node, f"{group}.{name}")
    for key, node in (("task.val_decode", cfg.task.get("val_decode")), ("test_decode", cfg.get("test_decode"))):
        if node:
            DecodeSettings.check(OmegaConf.to_container(node, resolve=True), key)
    backend = cfg.get("accel", "none")
    if backend != "none":  # the plain modules (the default) need nothing from the fast-path package
        from transformer import accel

        if accel.check(backend) == "cpu" and cfg.task.get("compile"):
            raise ValueError("accel=cpu with task.compile=true: torch.compile wants the plain modules (accel=none)")


def trainer_settings(cfg: DictConfig) -> None:
    """Build the trainer once, without callbacks or loggers, so that Lightning judges the
    accelerator, device count, precision and loop settings before any data is read."""
    from hydra.errors import InstantiationException
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    trainer = cfg.get("trainer")
    if not trainer or "_target_" not in trainer:
        return
    for key in ("accumulate_grad_batches", "check_val_every_n_epoch"):
        value = trainer.get(key)
        if value is not None:
            check_count(f"trainer.{key}", value)
    for key in ("log_every_n_steps", "gradient_clip_val"):
        value = trainer.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
            raise ValueError(f"trainer.{key}={show(value)}: expected a value >= 0")
    node = OmegaConf.to_container(trainer, resolve=False)
    node = {k: v for k, v in node.items() if not (isinstance(v, str) and "${" in v)}  # paths: checked elsewhere
    try:
        instantiate(node, logger=False, enable_checkpointing=False, enable_progress_bar=False, callbacks=[])
    except (InstantiationException, MisconfigurationException, ValueError, TypeError) as exc:
        cause = exc.__cause__ if isinstance(exc, InstantiationException) and exc.__cause__ else exc
        raise ValueError(f"trainer: {' '.join(str(cause).split())}") from None


def preflight(cfg: DictConfig) -> dict | None:
    """Everything checked before a run writes anything; returns the checkpoint it resumes, if any."""
    check_config(cfg, complete=True)
    logging.disable(logging.WARNING)  # Lightning's start-up lines (GPU available ..., tips) while probing
    try:
        trainer_settings(cfg)  # accelerator, precision, loop settings: before any data is read
    finally:
        logging.disable(logging.NOTSET)
    ckpt = None
    if cfg.get("ckpt_path"):
        if not isinstance(cfg.ckpt_path, str):
            raise ValueError(f"ckpt_path={cfg.ckpt_path!r}: expected one checkpoint file to resume from")
        ckpt = read_checkpoint(cfg.ckpt_path)
    if cfg.get("init_from") is not None and ckpt is not None:
        check_same_start(cfg, ckpt)
    elif cfg.get("init_from") is not None:
        read_init_from(cfg)
    cls, task_cfg = task_settings(cfg)
    if hasattr(cls, "preflight"):  # the task's own settings against the data config, before any is read
        cls.preflight(task_cfg, OmegaConf.to_container(cfg.data, resolve=True))
    if ckpt is None:
        return None
    check_resumed_model(cfg, ckpt)
    return ckpt


def check_same_start(cfg: DictConfig, ckpt: dict) -> None:
    """``init_from`` beside ``ckpt_path`` (a fine-tuning resumed): the resumed run must have started from it."""
    try:
        if kinds.task_kind(ckpt) is kinds.TRANSLATION:
            if cfg.get("hydra") is not None:
                take_model_settings(cfg, ckpt, model_settings_to_take)
        else:
            read_init_from(cfg)
        check_resumed_model(cfg, ckpt)
    except ValueError:
        raise ValueError(f"init_from and ckpt_path both given: init_from={cfg.init_from} starts a fresh run, "
                         f"ckpt_path={cfg.ckpt_path} resumes one that was not started from it; drop init_from to resume, or ckpt_path to fine-tune") from None


def read_init_from(cfg: DictConfig) -> dict:
    """The checkpoint ``init_from`` names (ours or ``hf:<folder>``), checked against the configured run."""
    from transformer.hub import HubError, init_checkpoint, is_hub_path

    path = cfg.init_from
    if not isinstance(path, str) or not path:
        raise ValueError(f"init_from={path!r}: expected a masked-LM or translation checkpoint file, or hf:<folder>")
    try:
        ckpt = init_checkpoint(path) if is_hub_path(path) else read_checkpoint(path)
    except (CheckpointError, HubError) as exc:
        raise ValueError(f"init_from: {exc}") from None
    tokenizer_path = cfg.get("data", {}).get("tokenizer_path")
    if kinds.task_kind(ckpt) is kinds.TRANSLATION:
        if cfg.get("hydra") is not None:
            take_model_settings(cfg, ckpt, model_settings_to_take)
        task_kind = kinds.task_kind(get_class(cfg.task._target_)) if "_target_" in cfg.task else None
        check_translation_init(ckpt, path, OmegaConf.to_container(cfg.model, resolve=True), task_kind,
                               tokenizer_path is not None, OmegaConf.to_container(cfg.data, resolve=True))
        return ckpt
    vocab = SubwordTokenizer.load(tokenizer_path).vocab_size if isinstance(tokenizer_path, str) else None
    if kinds.task_kind(ckpt) is kinds.MLM and cfg.get("hydra") is not None:
        take_model_settings(cfg, ckpt, encoder_settings_to_take)
    check_init_from(ckpt, path, OmegaConf.to_container(cfg.model, resolve=True), vocab)
    return ckpt


def take_model_settings(cfg: DictConfig, ckpt: dict, settings_to_take=encoder_settings_to_take) -> None:
    """Set the pretrained model's settings in ``cfg.model`` where the command line leaves them to the preset."""
    named = {key.split(".")[1] for key in command_line_keys(cfg.hydra.overrides.task) if key.startswith("model.")}
    taken = settings_to_take(ckpt, OmegaConf.to_container(cfg.model, resolve=True), named)
    for key, value in taken.items():
        OmegaConf.update(cfg, f"model.{key}", value, merge=False, force_add=True)


def check_resumed_model(cfg: DictConfig, ckpt: dict) -> None:
    """A resumed checkpoint's model must be the configured one: a different width or depth
    is refused here, naming the key, rather than after the data is prepared."""
    saved = ckpt["hyper_parameters"].get("model") or {}
    model = OmegaConf.to_container(cfg.model, resolve=True)
    for key, value in model.items():
        if value is not None and key in saved and saved[key] is not None and saved[key] != value:
            raise ValueError(f"model.{key}={value!r}, but the checkpoint {cfg.ckpt_path} was trained with "
                             f"{saved[key]!r}: resume with the model it was trained with (model=... or model.{key}=...)")


def stopped_message(trainer: L.Trainer) -> str:
    """What a run stopped by SIGTERM says: where it stopped and what resumes it (``last.ckpt``
    holds the step reached between training steps, the previous validation's inside one)."""
    last = checkpoint_summary(trainer)["last_checkpoint"]
    if not last:
        return f"training stopped by SIGTERM at step {trainer.global_step}; no checkpoint was written yet"
    saved = next((cb._last_global_step_saved for cb in trainer.checkpoint_callbacks
                  if cb.monitor is None and cb.best_model_path == last), trainer.global_step)
    return (f"training stopped by SIGTERM at step {trainer.global_step}; resume from step {saved} with "
            f"ckpt_path={last}")


def checkpoint_summary(trainer: L.Trainer) -> dict:
    """The best checkpoint and score (the monitored ModelCheckpoint) and ``last.ckpt``."""
    cbs = trainer.checkpoint_callbacks
    ranked = next((cb for cb in cbs if cb.monitor is not None), None)
    last = next((cb.best_model_path for cb in cbs if cb.monitor is None and cb.best_model_path), None)
    last = last or next((cb.last_model_path for cb in cbs if cb.last_model_path), None)
    score = ranked.best_model_score if ranked is not None else None
    return {
        "best_checkpoint": (ranked.best_model_path if ranked is not None else None) or None,
        "best_score": float(score) if score is not None else None,
        "last_checkpoint": last,
    }


def emulated_bf16(trainer: L.Trainer) -> bool:
    """True where the trainer computes in bf16 on an x86 CPU without bf16 instructions
    (AVX512-BF16 or AMX): oneDNN then emulates them, and training runs slower than in fp32."""
    if "bf16" not in str(trainer.precision) or type(trainer.accelerator).__name__ != "CPUAccelerator":
        return False
    return not cpu_has_bf16()


def run(cfg: DictConfig) -> dict:
    """Check the config (:func:`preflight`), then train (:func:`train`) in ``output_dir``,
    claimed for this run alone (``cli/common.py: claimed``)."""
    ckpt = preflight(cfg)
    with claimed(cfg):
        return train(cfg, ckpt)


def train(cfg: DictConfig, ckpt: dict | None) -> dict:
    """Fit in the claimed ``output_dir``, then report (and test) the best or the last checkpoint."""
    # Lightning is imported here, not at the top: a command line refused by the checks before
    # training prints its error line without Lightning's seconds of start-up.
    import lightning as L
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from transformer.tasks.callbacks import quiet_library_noise

    out = Path(cfg.output_dir)
    quiet_library_noise()
    if cfg.data.get("data_dir"):
        log.info("data cache: %s (TRANSFORMER_CACHE=<folder> or data.data_dir=<folder> moves it)",
                 Path(cfg.data.data_dir).resolve())
    L.seed_everything(cfg.seed, workers=True)
    if training_device(cfg) == "cpu":
        keep_freed_memory()  # every step frees and allocates the same large tensors again
        bound_onednn_caches(TRAINING_CACHE_ENTRIES)  # batches of every length: a new oneDNN shape each
    out.mkdir(parents=True, exist_ok=True)
    # A resumed run has its weights and tokenizer in its checkpoint: init_from starts fresh runs only.
    pretrained = read_init_from(cfg) if cfg.get("init_from") is not None and ckpt is None else None
    dm = build_datamodule(cfg, ckpt, pretrained)
    dm.prepare_data()
    dm.setup("fit")
    task, resumed_step = start_task(cfg, dm, ckpt, pretrained)
    del ckpt, pretrained
    trainer = build_trainer(cfg, resumed_step, reload_each_epoch=dm.draws_each_epoch)
    if emulated_bf16(trainer):
        log.warning("trainer.precision=%s: this CPU has no bf16 instructions (AVX512-BF16 or AMX), so its "
                    "products are emulated and train slower than with trainer.precision=32-true", trainer.precision)
    try:
        trainer.fit(task, datamodule=dm, ckpt_path=cfg.get("ckpt_path"), weights_only=True)
    except SIGTERMException:
        raise StoppedBySignal(stopped_message(trainer)) from None
    summary = {"output_dir": str(out), "parameters": count_parameters(task.model), "global_step": trainer.global_step,
               "epochs": trainer.current_epoch, **checkpoint_summary(trainer), "monitor": cfg.get("monitor")}
    tested = summary[f"{cfg.get('test_checkpoint', 'best')}_checkpoint"]
    if cfg.get("test_splits") and trainer.is_global_zero and tested:
        from transformer.cli.evaluate import evaluate_checkpoint

        test_decode = DecodeSettings.of(cfg.get("test_decode"), "test_decode")  # null: every default
        summary["test"] = {
            split: evaluate_checkpoint(tested, split, test_decode,
                                       out / "eval", data_dir=cfg.data.get("data_dir", "data/cache"),
                                       mirror_root=cfg.data.get("mirror_root"))
            for split in cfg.test_splits
        }
    write_text(out / "train_summary.json", json.dumps(summary, indent=2) + "\n")
    log.info("summary: %s", json.dumps(summary))
    return summary


def start_task(cfg: DictConfig, dm, ckpt: dict | None, pretrained: dict | None):
    """The task built for ``dm``, its encoder (a masked LM's whole model) copied from ``init_from`` or its weights from the
    checkpoint it resumes: ``(task, the step it resumes at or None)``."""
    # A translation model keeps the vocabulary sizes and ids it started with (a Marian model's may
    # exceed its tokenizers' pieces), resumed or started from init_from.
    task = build_task(cfg, dm, pretrained if pretrained is not None else ckpt)
    log.info("model parameters: %d", count_parameters(task.model))
    if pretrained is not None:
        copied = start_from(task.model, OmegaConf.to_container(cfg.model, resolve=True), pretrained, cfg.init_from)
        shape = ", ".join(f"{k}={show(cfg.model.get(k))}" for k in ("d_model", "n_heads", "n_layers", "n_encoder_layers",
                                                                    "n_decoder_layers", "d_ff") if k in cfg.model)
        part = "encoder" if all(k.startswith("encoder.") for k in copied) else "whole model"
        log.info("init_from: %d %s tensors from %s (%s)", len(copied), part, cfg.init_from, shape)
        if part == "encoder":
            warn_fresh_decoder(task.model, len(copied), cfg.init_from)
        if pretrained.get("encoder_only"):
            labels = getattr(task, "data_labels", None) or getattr(task, "tags", None)
            head = copy_head(task.model, pretrained, labels)
            if head:  # a fine-tuned classifier continued on its own labels: nothing starts fresh
                log.info("init_from: %s: its encoder and head (%s) are copied, the data's labels being its "
                         "id2label's", cfg.init_from, ", ".join(head))
            else:
                warn_fresh_head(task.model, copied, cfg.init_from, pretrained["encoder_only"],
                                pretrained.get("not_used"))
    if ckpt is None:
        return task, None
    load_weights(task, ckpt, cfg.ckpt_path)  # a hand-edited file fails here, in one line
    return task, ckpt["global_step"]


def warn_fresh_head(model, copied: list[str], path: str, what: str, not_used: list[str] | None = None) -> None:
    """One warning naming what starts fresh when ``init_from`` is a folder without a masked LM's head."""
    fresh = sorted({name.split(".")[0] for name, _ in model.named_parameters() if name not in set(copied)})
    unused = f" (not used: {', '.join(not_used)})" if not_used else ""
    log.warning("init_from: %s: %s; its encoder is copied%s, fresh: %s", path, what, unused,
                ", ".join(fresh) or "nothing")


def warn_fresh_decoder(model, copied: int, path: str) -> None:
    """One warning when a pretrained encoder starts a translation model: only half of the model
    is pretrained, which a tagger's or classifier's small head does not make worth saying."""
    if not hasattr(model, "decoder"):
        return
    ours = {id(p) for p in model.encoder.parameters()}
    shared = [name for name, p in model.decoder.named_parameters(remove_duplicate=False) if id(p) in ours]
    names = ", ".join(f"decoder.{name}" for name in shared)
    but = f" but for the tensors they share with the encoder ({names})" if shared else ""
    log.warning("init_from: %d encoder tensors copied from %s; the decoder and the output layer start fresh%s",
                copied, path, but)


def build_trainer(cfg: DictConfig, resumed_step: int | None, reload_each_epoch: bool = False):
    """Lightning's Trainer from ``cfg.trainer``, with the configured callbacks and loggers (loaders remade each epoch
    for data that draws anew)."""
    from transformer.tasks.callbacks import AtomicCheckpointIO, FinalLastCheckpoint, RandomState

    extra = {}
    if reload_each_epoch and "reload_dataloaders_every_n_epochs" not in cfg.trainer:
        extra["reload_dataloaders_every_n_epochs"] = 1
    return instantiate(
        cfg.trainer, callbacks=[*_instantiate_group(cfg.get("callbacks")), RandomState(),
                                 FinalLastCheckpoint()],
        logger=build_loggers(cfg, resumed_step) or False, plugins=[AtomicCheckpointIO()], **extra,
    )


main = hydra_entry("train", check=preflight)(train)

if __name__ == "__main__":
    main()
