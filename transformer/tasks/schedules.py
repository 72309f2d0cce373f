"""Learning-rate schedules, stepped once per optimizer update, and the optimizer they drive
for the encoder tasks (tagging, classification, masked LM)."""

from __future__ import annotations

import math

import torch

from transformer.tasks.build import build_optimizer, optimizer_node

# The encoder tasks' optimizer when their config names none: AdamW (Loshchilov & Hutter 2019),
# as BERT fine-tuning uses it.
ADAMW = optimizer_node("AdamW", betas=(0.9, 0.98), eps=1e-8, weight_decay=0.01)


def inverse_sqrt_factor(step: int, warmup_steps: int) -> float:
    """Linear warm-up to 1 over ``warmup_steps`` updates, then decay as ``sqrt(warmup/step)``.

    This is the schedule of Vaswani et al. 2017 (eq. 3) with the peak rate factored out, so
    the configured ``lr`` is the peak learning rate. ``step`` counts completed updates.
    """
    step = step + 1
    if warmup_steps <= 0:
        return 1.0 / math.sqrt(step)
    return min(step / warmup_steps, math.sqrt(warmup_steps / step))


def inverse_sqrt_schedule(
    optimizer: torch.optim.Optimizer, warmup_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """A LambdaLR applying :func:`inverse_sqrt_factor` to every parameter group."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: inverse_sqrt_factor(step, warmup_steps)
    )


def warmup_linear_factor(step: int, warmup_steps: int, total_steps: int) -> float:
    """Linear warm-up to 1 over ``warmup_steps`` updates, then linear decay to 0 at
    ``total_steps`` (the BERT fine-tuning schedule, Devlin et al. 2019): with a fixed small
    epoch budget this ends training at a low rate instead of inverse-sqrt's long tail."""
    step = step + 1
    if step <= warmup_steps:
        return step / max(1, warmup_steps)
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))


def total_steps(trainer) -> int:
    """The optimizer steps a run will take (Lightning's estimate), or a very large number when
    there is no trainer yet or the run is bounded by time alone."""
    if trainer is None:
        return 10**9
    total = trainer.estimated_stepping_batches
    return int(total) if total is not None and math.isfinite(total) else 10**9


class RunLength:
    """The run's optimizer steps (:func:`total_steps`), asked of the trainer only once the
    warm-up is over. Asking sooner, from ``configure_optimizers``, makes Lightning build the
    training loader before a resumed run has restored its position in the epoch, and the
    resumed run would then start the epoch from its first batch again. ``warmup_steps``: a
    number of updates, or a :class:`WarmupLength`."""

    def __init__(self, trainer, warmup_steps: "int | WarmupLength"):
        self.trainer, self.warmup_steps, self.value = trainer, warmup_steps, None

    def __call__(self, step: int) -> int:
        warmup = self.warmup_steps(step) if callable(self.warmup_steps) else self.warmup_steps
        if step + 1 <= warmup:
            return 1  # the warm-up's factor does not depend on it
        if self.value is None:
            self.value = total_steps(self.trainer)
        return self.value


class WarmupLength:
    """The warm-up's updates: ``steps``, or with ``fraction`` set that share of the run's
    updates (:func:`total_steps`, at least one): ``task.warmup=0.06`` warms up over 6 % of the
    run whatever its epochs, batch size and data (BERT's fine-tuning recipes warm up over
    6–10 % of them), where a fixed count can outlast a short run.

    A fresh run asks the trainer when the schedule is built; a resumed one only at its first
    update after the restore (as :class:`RunLength` does, for the same reason), its restored
    optimizer holding the rate until then."""

    def __init__(self, trainer, steps: int, fraction: float | None = None):
        self.trainer, self.steps, self.fraction, self.value = trainer, int(steps), fraction, None

    def __call__(self, step: int) -> int:
        if self.fraction is None:
            return self.steps
        if self.value is None:
            if step == 0 and getattr(self.trainer, "ckpt_path", None):
                return 1  # the factor built before a resumed run's state replaces it
            self.value = max(1, round(self.fraction * total_steps(self.trainer))) if self.fraction > 0 else 0
        return self.value


def layer_decay_groups(module: torch.nn.Module, lr: float, decay: float) -> list[dict]:
    """Parameter groups for layer-wise learning-rate decay (Clark et al. 2020, ELECTRA; used to
    fine-tune BERT-style encoders): the encoder's layer ``i`` of ``L`` trains at
    ``lr * decay ** (L - i)``, its embedding and positions at ``lr * decay ** (L + 1)``, and
    everything above the layers (the final norm, the heads) at ``lr``; pretrained lower layers
    hold general features and move least. The first group is the top one (what ``lr`` logs);
    ``decay`` 1.0 is one group at ``lr``. The encoder is ``module.model.encoder`` (or
    ``module.encoder``), with its ``layers``."""
    params = [p for p in module.parameters() if p.requires_grad]
    model = getattr(module, "model", module)
    encoder = getattr(model, "encoder", None)
    if decay == 1.0 or encoder is None or not hasattr(encoder, "layers"):
        return [{"params": params, "lr": lr}]
    n = len(encoder.layers)
    depth = {id(p): n + 1 for p in params}  # above the layers unless found below
    for p in encoder.parameters():
        depth[id(p)] = 0
    for i, layer in enumerate(encoder.layers):
        for p in layer.parameters():
            depth[id(p)] = i + 1
    for p in encoder.final_norm.parameters():
        depth[id(p)] = n + 1
    groups = []
    for d in range(n + 1, -1, -1):
        members = [p for p in params if depth[id(p)] == d]
        if members:
            groups.append({"params": members, "lr": lr * decay ** (n + 1 - d)})
    return groups


def optimizer_with_warmup(module: torch.nn.Module, hp, trainer) -> dict:
    """The optimizer ``hp.optimizer`` names (``module.default_optimizer`` when None) over
    ``module``'s parameters with a per-step schedule, as ``configure_optimizers`` returns it:
    ``hp.schedule`` ``"linear"`` (warm-up, then linear decay to zero at the run's last step) or
    else the inverse square root after the warm-up, whose length is ``hp.warmup_steps`` updates
    or, where the task has ``hp.warmup`` set, that fraction of the run (:class:`WarmupLength`);
    ``hp.layer_decay`` (where the task has it) below 1 gives lower encoder layers smaller rates
    (:func:`layer_decay_groups`)."""
    groups = layer_decay_groups(module, hp.lr, float(hp.get("layer_decay", 1.0)))
    optimizer = build_optimizer(groups, hp.optimizer or module.default_optimizer, hp.lr)
    warmup = WarmupLength(trainer, hp.warmup_steps, hp.get("warmup"))
    if hp.schedule == "linear":
        total = RunLength(trainer, warmup)
        fn = lambda step: warmup_linear_factor(step, warmup(step), total(step))  # noqa: E731
    else:
        fn = lambda step: inverse_sqrt_factor(step, warmup(step))  # noqa: E731
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, fn)
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
