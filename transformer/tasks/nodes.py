"""Node classification: a ``NodeClassifier`` trained with cross-entropy on the training split's
nodes of one graph, validated by accuracy on the dev split's, and a checkpoint that evaluates on
its own (the graph's files or preset travel in its ``data`` settings).

Shape legend: N nodes, F features, C classes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Sequence

import lightning as L
import torch
import torch.nn.functional as F

from transformer import kinds
from transformer.data.graphs.datamodule import IGNORE
from transformer.evaluation.nodes import evaluate_nodes
from transformer.ranges import Probability, Range
from transformer.tasks.build import build_model, build_optimizer, optimizer_node
from transformer.tasks.checkpoint import OneTokenizerCheckpoint

# GAT's optimizer on Cora (Velickovic et al. 2018, sec. 3.3): Adam, L2 weight decay 5e-4.
ADAM_L2 = optimizer_node("Adam", betas=(0.9, 0.999), eps=1e-8, weight_decay=5e-4)


class NodeClassificationTask(OneTokenizerCheckpoint, L.LightningModule):
    """Cross-entropy over the labelled nodes of a split; Adam at a constant rate after an
    optional linear warm-up.

    Logged: ``train/loss``, ``train/acc``, ``val/loss``, ``val/acc``.

    Args:
        model: resolved model config (``_target_`` a ``NodeClassifier``); ``n_classes`` and the
            front end's ``n_features`` are filled in here from the data.
        n_features: F, the feature columns of the graph.
        classes: the class names; class ``c`` is ``classes[c]``.
        data: the data module's ``settings()``: the graph's files or preset and input settings.
        label_smoothing: as in ``F.cross_entropy``.
        lr: the learning rate; warmup_steps: linear warm-up updates (0: none).
        optimizer: a ``_partial_`` node of ``tasks.build.OPTIMIZERS``; None: :data:`ADAM_L2`.
        tokenizer: unused (nodes have no text); kept for the shared checkpoint code.
    """

    kind = kinds.NODE_CLASSIFICATION
    task_name = kind.name
    default_optimizer = ADAM_L2

    def __init__(
        self,
        model: dict,
        n_features: Annotated[int, Range(1, 2**24)],
        classes: Sequence[str],
        data: dict,
        label_smoothing: Annotated[float, Probability()] = 0.0,
        lr: Annotated[float, Range(0, 10)] = 5e-3,
        optimizer: dict | None = None,
        warmup_steps: Annotated[int, Range(0, 2**40)] = 0,
        tokenizer: str | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["tokenizer"])
        self.classes = list(classes)
        model = dict(model)
        if isinstance(model.get("frontend"), dict):
            model["frontend"] = {**model["frontend"], "n_features": n_features}
        self.model = build_model(model, n_classes=len(self.classes))
        self.tokenizer = None

    @staticmethod
    def kwargs_from_datamodule(dm) -> dict:
        """What the task needs from a set-up ``GraphDataModule``."""
        return dict(n_features=dm.n_features, classes=dm.classes, data=dm.settings())

    def forward(self, batch: dict, need_weights: bool = False):
        return self.model(batch["src"], batch["edge_index"], batch.get("src_lengths"), need_weights=need_weights)

    def _scored(self, batch: dict, stage: str) -> torch.Tensor:
        logits = self(batch)  # (1, N, C)
        labels = batch["labels"]  # (1, N), IGNORE outside the split
        loss = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=IGNORE,
                               label_smoothing=self.hparams.label_smoothing)
        scored = labels.ne(IGNORE)
        n = int(scored.sum())
        acc = logits.argmax(-1).eq(labels)[scored].float().mean()
        self.log(f"{stage}/loss", loss, prog_bar=True, batch_size=n)
        self.log(f"{stage}/acc", acc, prog_bar=True, batch_size=n)
        return loss

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        return self._scored(batch, "train")

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self._scored(batch, "val")

    def configure_optimizers(self):
        optimizer = build_optimizer(self.parameters(), self.hparams.optimizer or self.default_optimizer,
                                    self.hparams.lr)
        warmup = self.hparams.warmup_steps
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / max(1, warmup)))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def evaluate(self, split: str, decode_cfg=None, output_dir: Path | str = "eval", data_dir: str = "data/cache",
                 mirror_root: str | None = None, device: str | torch.device = "cpu") -> dict:
        """Score ``split`` (``train``, ``dev`` or ``test``) of the checkpoint's graph
        (``evaluation.nodes``); ``decode_cfg``, ``data_dir`` and ``mirror_root`` are unused:
        the checkpoint names its graph."""
        return evaluate_nodes(self.model, self.classes, self.hparams.data, split, output_dir, device)


__all__ = ["ADAM_L2", "NodeClassificationTask"]
