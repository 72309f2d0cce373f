"""Sentence classification: a ``SequenceClassifier`` trained with cross-entropy over one
label per sentence, validated by accuracy and macro-F1, and a checkpoint that classifies and
evaluates on its own.

Shape legend: B sentences, T pieces, C labels.

The checkpoint carries the resolved model config, the label list and the data settings (the
split files, format and columns) as hyperparameters, and the tokenizer as
``checkpoint["tokenizers"]["src"]`` (the entry the other tasks use, so ``transformer-train
ckpt_path=...`` resumes with it). Classifying raw text is :meth:`ClassificationTask.classifier`
(``inference.classifier``), scoring a split ``evaluation.classification``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import lightning as L
import torch
import torch.nn.functional as F

from transformer.data.tokenizer import SubwordTokenizer
from transformer.evaluation.classification import classification_metrics, confusion_matrix, evaluate_classification
from transformer.inference.classifier import SentenceClassifier
from transformer.inference.tagger import model_max_len
from transformer.models.classifier import ClassifierEnsemble
from transformer.tasks.build import build_model
from transformer.tasks.checkpoint import OneTokenizerCheckpoint
from transformer.tasks.schedules import adamw_with_warmup


class ClassificationTask(OneTokenizerCheckpoint, L.LightningModule):
    """Cross-entropy over a ``SequenceClassifier``; AdamW with warm-up.

    Logged: ``train/loss``, ``lr``, ``val/loss``, ``val/acc`` and ``val/f1`` (macro-F1 over
    the whole validation split, from one confusion matrix per epoch).

    Args:
        model: resolved model config (``_target_`` a ``SequenceClassifier``); ``vocab_size``
            (= ``piece_vocab_size``), ``pad_id`` and ``n_classes`` are injected here.
        piece_vocab_size: the tokenizer's real size (not ``vocab_size``: the data module's
            hyperparameter of that name is the requested size).
        labels: label strings; id ``i`` is ``labels[i]``.
        data: the data module's ``settings()``: name, split files, format, columns.
        label_smoothing: as in ``F.cross_entropy`` (Szegedy et al. 2016).
        lr, betas, eps, weight_decay: AdamW settings; warmup_steps: linear warm-up updates.
        schedule: ``"linear"`` (decay to 0 at the trainer's last step) or ``"inverse_sqrt"``.
        token_dropout: in training, the probability that a piece is replaced by ``<unk>``: the
            label must then come from more than one telling word (word dropout, Iyyer et al. 2015).
        layer_decay: below 1, each encoder layer below the top trains at this factor of the
            rate above it (layer-wise decay, for fine-tuning a pretrained encoder: ``init_from``;
            ``tasks.schedules.layer_decay_groups``); 1.0 = one rate.
        tokenizer: the tokenizer JSON (``SubwordTokenizer.to_str``); kept out of hparams.
    """

    task_name = "classification"

    def __init__(
        self,
        model: dict,
        piece_vocab_size: int,
        pad_id: int,
        labels: Sequence[str],
        data: dict,
        label_smoothing: float = 0.0,
        lr: float = 5e-4,
        betas: Sequence[float] = (0.9, 0.98),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        warmup_steps: int = 200,
        schedule: str = "linear",
        token_dropout: float = 0.0,
        layer_decay: float = 1.0,
        tokenizer: str | None = None,
    ) -> None:
        super().__init__()
        if schedule not in ("linear", "inverse_sqrt"):
            raise ValueError(f"schedule must be 'linear' or 'inverse_sqrt', got {schedule!r}")
        if not 0 < layer_decay <= 1:
            raise ValueError(f"task.layer_decay={layer_decay!r}: expected a factor in (0, 1] (1.0 = off)")
        self.save_hyperparameters(ignore=["tokenizer"])
        self.labels = list(labels)
        self.model = build_model(model, vocab_size=piece_vocab_size, pad_id=pad_id, n_classes=len(self.labels))
        self.tokenizer: SubwordTokenizer | None = SubwordTokenizer.from_str(tokenizer) if tokenizer else None
        self._val_confusion: torch.Tensor | None = None

    # ----------------------------------------------------------------- construction
    @staticmethod
    def kwargs_from_datamodule(dm) -> dict:
        """What the task needs from a set-up ``ClassificationDataModule``."""
        tok = dm.tokenizer
        return dict(piece_vocab_size=tok.vocab_size, pad_id=tok.pad_id, labels=list(dm.labels),
                    data=dm.settings(), tokenizer=tok.to_str())

    @classmethod
    def ensemble(cls, tasks: Sequence["ClassificationTask"]) -> "ClassificationTask":
        """One task whose classifier averages ``tasks``' label probabilities (each member reads
        the text with its own tokenizer); it keeps the first task's settings. The members must
        be classification checkpoints with the same labels, else a ``ValueError`` says which."""
        first = tasks[0]
        if len(tasks) == 1:
            return first
        for i, task in enumerate(tasks, start=1):
            if not isinstance(task, ClassificationTask):
                raise ValueError(f"ensemble member {i} is a {getattr(task, 'task_name', '?')!r} checkpoint; "
                                 f"a classification ensemble takes classification checkpoints only")
            if task.labels != first.labels:
                raise ValueError(f"ensemble member {i} has the labels {task.labels}, member 1 {first.labels}")
        first.model = ClassifierEnsemble([m for t in tasks for m in t.members()])
        return first

    def members(self) -> list[tuple[torch.nn.Module, SubwordTokenizer, int]]:
        """``(model, tokenizer, max_len)`` of each model this task classifies with."""
        if isinstance(self.model, ClassifierEnsemble):
            return self.model.members()
        return [(self.model, self.tokenizer, model_max_len(self.model, int(self.hparams.model.get("max_len", 512))))]

    # ----------------------------------------------------------------- training
    def forward(self, src: torch.Tensor) -> torch.Tensor:
        return self.model(src)  # (B, C)

    def _loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.float(), labels, label_smoothing=self.hparams.label_smoothing)

    def _hide_tokens(self, src: torch.Tensor) -> torch.Tensor:
        """``src (B, T)`` with a ``token_dropout`` fraction of its real pieces set to ``<unk>``."""
        p = self.hparams.token_dropout
        if p <= 0 or self.tokenizer is None:
            return src
        pad = self.hparams.pad_id
        hit = (torch.rand(src.shape, device=src.device) < p) & src.ne(pad)  # (B, T)
        return src.masked_fill(hit, self.tokenizer.unk_id)

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        loss = self._loss(self.model(self._hide_tokens(batch["src"])), batch["labels"])  # (B, C) vs (B,)
        self.log("train/loss", loss, prog_bar=True, batch_size=batch["labels"].numel())
        self.log("lr", self.optimizers().param_groups[0]["lr"], prog_bar=True)
        return loss

    def on_validation_epoch_start(self) -> None:
        self._val_confusion = torch.zeros(len(self.labels), len(self.labels), dtype=torch.long, device=self.device)

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        logits = self.model(batch["src"])  # (B, C)
        labels = batch["labels"]  # (B,)
        n = labels.numel()
        self._val_confusion += confusion_matrix(labels, logits.argmax(-1), len(self.labels))
        # Weighted by sentences, Lightning's epoch mean is the split's accuracy and mean loss.
        self.log("val/loss", self._loss(logits, labels), prog_bar=True, batch_size=n, sync_dist=True)
        self.log("val/acc", logits.argmax(-1).eq(labels).float().mean(), prog_bar=True, batch_size=n, sync_dist=True)

    def on_validation_epoch_end(self) -> None:
        confusion = self._val_confusion
        if self.trainer.world_size > 1:
            confusion = self.trainer.strategy.reduce(confusion, reduce_op="sum")
        self.log("val/f1", classification_metrics(confusion.cpu(), self.labels)["macro_f1"], prog_bar=True)

    def configure_optimizers(self):
        return adamw_with_warmup(self, self.hparams, getattr(self, "_trainer", None))

    # ----------------------------------------------------------------- inference
    def classifier(self, max_tokens: int = 4096, device: str | torch.device | None = None) -> SentenceClassifier:
        """A :class:`~transformer.inference.classifier.SentenceClassifier` with this model (or
        ensemble) and its tokenizer; ``device``: ``None`` keeps the model's."""
        return SentenceClassifier(self.members(), self.labels, max_tokens, device)

    def evaluate(self, split: str, decode_cfg: dict | None = None, output_dir: Path | str = "eval",
                 data_dir: str = "data/cache", mirror_root: str | None = None,
                 device: str | torch.device = "cpu") -> dict:
        """Classify a split (``train``/``dev``/``test`` of the checkpoint's data, or a file in
        the same format) and score it (``evaluation.classification``; ``decode_cfg``,
        ``data_dir`` and ``mirror_root`` are unused: the checkpoint names its files)."""
        return evaluate_classification(self.classifier(device=device), self.hparams.data, split, output_dir)


__all__ = ["ClassificationTask"]
