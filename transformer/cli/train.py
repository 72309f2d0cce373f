"""`transformer-train`: train any task from Hydra config.

    transformer-train experiment=multi30k_de_en trainer.max_epochs=30 model.d_model=512
    transformer-train experiment=multi30k_de_en ckpt_path=outputs/.../checkpoints/last.ckpt  # resume
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import lightning as L
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from transformer.cli.callbacks import AccelCallback
from transformer.cli.common import hydra_entry
from transformer.cli.loggers import ResumableCSVLogger
from transformer.models.init import count_parameters
from transformer.tasks.checkpoint import read_checkpoint

log = logging.getLogger(__name__)


def _instantiate_group(group: DictConfig | None) -> list:
    """Instantiate every non-null entry of a callbacks/logger group."""
    if not group:
        return []
    return [instantiate(node) for node in group.values() if node and "_target_" in node]


def build_loggers(cfg: DictConfig, resumed_step: int | None = None) -> list:
    """The ``logger`` group; when resuming from a checkpoint at ``resumed_step``, CSV loggers
    keep the rows their ``metrics.csv`` already has from before that step."""
    loggers = _instantiate_group(cfg.get("logger"))
    if resumed_step is not None:
        for logger in loggers:
            if isinstance(logger, ResumableCSVLogger):
                logger.keep_rows_before(resumed_step)
    return loggers


def build_datamodule(cfg: DictConfig):
    """The data module, reusing the resumed checkpoint's tokenizer when there is one."""
    overrides = {}
    if cfg.get("ckpt_path"):
        ckpt = read_checkpoint(cfg.ckpt_path)
        if "tokenizers" in ckpt:
            out = Path(cfg.output_dir)
            out.mkdir(parents=True, exist_ok=True)
            path = out / "resumed_tokenizer.json"
            path.write_text(ckpt["tokenizers"].get("src") or ckpt["tokenizers"]["tgt"], encoding="utf-8")
            overrides["tokenizer_path"] = str(path)
    # Plain containers (not DictConfig) in the data module: its hyperparameters are saved in
    # checkpoints, and a DictConfig there stops torch.load(weights_only=True) on resume.
    return instantiate(cfg.data, _convert_="all", **overrides)


def build_task(cfg: DictConfig, dm):
    """The LightningModule: task settings + resolved model config + what the data knows."""
    task_cfg = OmegaConf.to_container(cfg.task, resolve=True)
    cls = get_class(task_cfg.pop("_target_"))
    model_cfg = OmegaConf.to_container(cfg.model, resolve=True)
    return cls(model=model_cfg, **task_cfg, **cls.kwargs_from_datamodule(dm))


def checkpoint_summary(trainer: L.Trainer) -> dict:
    """Best checkpoint and score (the first ModelCheckpoint, the one with a monitor) and the
    latest state: ``last.ckpt``, written by the monitor-less ``last_checkpoint`` callback
    after every validation (or a ModelCheckpoint's own ``save_last`` file)."""
    cbs = trainer.checkpoint_callbacks
    ranked = next((cb for cb in cbs if cb.monitor is not None), None)
    last = next((cb.best_model_path for cb in cbs if cb.monitor is None and cb.best_model_path), None)
    last = last or next((cb.last_model_path for cb in cbs if cb.last_model_path), None)
    score = getattr(ranked, "best_model_score", None)
    return {
        "best_checkpoint": getattr(ranked, "best_model_path", None) or None,
        "best_score": float(score) if score is not None else None,
        "last_checkpoint": last,
    }


def run(cfg: DictConfig) -> dict:
    """Fit, then report the best checkpoint (and evaluate it on ``test_splits``)."""
    L.seed_everything(cfg.seed, workers=True)
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    dm = build_datamodule(cfg)
    dm.prepare_data()
    dm.setup("fit")
    if hasattr(dm, "save_tokenizers"):
        dm.save_tokenizers(out)
    task = build_task(cfg, dm)
    log.info("model parameters: %d", count_parameters(task.model))
    resumed_step = read_checkpoint(cfg.ckpt_path)["global_step"] if cfg.get("ckpt_path") else None
    callbacks = _instantiate_group(cfg.get("callbacks")) + [AccelCallback(cfg.get("accel", "auto"))]
    trainer = instantiate(
        cfg.trainer, callbacks=callbacks,
        logger=build_loggers(cfg, resumed_step) or False,
    )
    trainer.fit(task, datamodule=dm, ckpt_path=cfg.get("ckpt_path"))
    summary = {
        "output_dir": str(out),
        "parameters": count_parameters(task.model),
        "global_step": trainer.global_step,
        "epochs": trainer.current_epoch,
        **checkpoint_summary(trainer),
        "monitor": cfg.get("monitor"),
    }
    if cfg.get("test_splits") and trainer.is_global_zero and summary["best_checkpoint"]:
        from transformer.cli.evaluate import evaluate_checkpoint

        summary["test"] = {
            split: evaluate_checkpoint(summary["best_checkpoint"], split, cfg.get("test_decode") or {"strategy": "greedy"},
                                       out / "eval", data_dir=cfg.data.get("data_dir", "data/cache"),
                                       mirror_root=cfg.data.get("mirror_root"))
            for split in cfg.test_splits
        }
    (out / "train_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    log.info("summary: %s", json.dumps(summary))
    return summary


main = hydra_entry("train")(run)

if __name__ == "__main__":
    main()
