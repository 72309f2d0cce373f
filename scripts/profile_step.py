"""One training step of a translation recipe under ``torch.profiler``: the table of the ops that
took the most device time (CPU time on a CPU).

    TRANSFORMER_DATA_MIRROR=../shared/datasets python3 scripts/profile_step.py \
        experiment=multi30k data.data_dir=/tmp/cache            # a GPU: the recipe's size, bf16
    python3 scripts/profile_step.py --eager experiment=multi30k_cpu debug=fast model=tiny

The arguments after the options are ``transformer-train`` overrides: the config is composed from
``conf/train.yaml`` and the data module and task are built as ``transformer-train`` builds them
(``build_datamodule``, ``build_task``), with ``task.compile=true`` unless ``--eager``. A step is
what Lightning runs for one batch: the task's loss under the trainer's precision (bf16 autocast
for ``bf16-mixed``), backward, gradient clipping at ``trainer.gradient_clip_val``, the Adam
step and the LR schedule's. ``--warmup`` steps on the first training batch compile the step for
its shape and warm the allocator and the fused optimizer; one more step on that batch is profiled,
so the profiled step compiles nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from torch.profiler import ProfilerActivity, profile

from transformer.cli.common import CONF_DIR
from transformer.cli.train import build_datamodule, build_task, training_device
from transformer.cli.common import keep_freed_memory


def compose_train_config(overrides: list[str], output_dir: str):
    """``conf/train.yaml`` with ``overrides``, as ``transformer-train`` would run it."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3", job_name="profile_step"):
        return compose(config_name="train", overrides=[*overrides, f"output_dir={output_dir}"])


def precision_context(precision: str, device: torch.device):
    """The autocast Lightning's ``precision`` applies around a step (none for ``*-true``)."""
    if precision in ("bf16-mixed", "bf16"):
        return torch.autocast(device.type, dtype=torch.bfloat16)
    if precision in ("16-mixed", "16"):
        return torch.autocast(device.type, dtype=torch.float16)
    return contextlib.nullcontext()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warmup", type=int, default=3, help="steps before the profiled one (the first compiles)")
    ap.add_argument("--rows", type=int, default=15, help="ops in the table")
    ap.add_argument("--eager", action="store_true", help="profile the eager step (no task.compile)")
    ap.add_argument("--output-dir", default="/tmp/profile_step", help="run folder (tokenizer copy)")
    ap.add_argument("overrides", nargs="*", help="transformer-train overrides, e.g. experiment=multi30k")
    args = ap.parse_args()
    overrides = [*args.overrides, f"task.compile={str(not args.eager).lower()}"]
    cfg = compose_train_config(overrides, args.output_dir)
    device = torch.device(training_device(cfg))
    precision = str(cfg.trainer.get("precision", "32-true"))
    torch.manual_seed(cfg.seed)
    if device.type == "cpu":
        keep_freed_memory()  # as transformer-train does on a CPU

    t0 = time.perf_counter()
    dm = build_datamodule(cfg)
    dm.prepare_data()
    dm.setup("fit")
    task = build_task(cfg, dm).to(device)
    if precision == "bf16-true":
        task.to(torch.bfloat16)
    task.train()
    optim = task.configure_optimizers()
    opt, sched = optim["optimizer"], optim["lr_scheduler"]["scheduler"]
    hp = task.hparams
    clip = cfg.trainer.get("gradient_clip_val")
    batch = next(iter(dm.train_dataloader()))
    batch = {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}
    print(f"data and model ready in {time.perf_counter() - t0:.1f} s: device {device}, precision {precision}, "
          f"compile {not args.eager}, {sum(p.numel() for p in task.parameters())} parameters", flush=True)

    def step(batch: dict) -> torch.Tensor:
        # The task's own loss function (compiled when task.compile), as TranslationTask.training_step calls it.
        with precision_context(precision, device):
            loss, _ = task.loss_fn(task.model, batch["src"], batch["tgt_in"], batch["tgt_out"],
                                   hp.label_smoothing, hp.pad_id)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(task.parameters(), clip)
        opt.step()
        sched.step()
        return loss

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    t0 = time.perf_counter()
    for _ in range(max(args.warmup, 1)):
        step(batch)
    sync()
    print(f"{max(args.warmup, 1)} warm-up steps (the first compiles) in {time.perf_counter() - t0:.1f} s", flush=True)
    t0 = time.perf_counter()
    step(batch)
    sync()
    print(f"one step, unprofiled: {1000 * (time.perf_counter() - t0):.1f} ms; batch src {tuple(batch['src'].shape)}, "
          f"tgt_in {tuple(batch['tgt_in'].shape)}", flush=True)

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        loss = step(batch)
        sync()
    sort_by = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(f"loss {float(loss.detach()):.4f}; top {args.rows} ops by {sort_by}:", flush=True)
    print(prof.key_averages().table(sort_by=sort_by, row_limit=args.rows, max_name_column_width=60))
    return 0


if __name__ == "__main__":
    sys.exit(main())
