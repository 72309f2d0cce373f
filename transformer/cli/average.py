"""`transformer-average`: average the weights of the last N checkpoints into one.

    transformer-average ckpt_dir=outputs/.../checkpoints last_n=5 output=avg.ckpt
    transformer-average 'inputs=[a.ckpt,b.ckpt]' output=avg.ckpt
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
from omegaconf import DictConfig

from transformer.cli.common import hydra_entry
from transformer.tasks.checkpoint import read_checkpoint


def _step(path: Path) -> int:
    match = re.search(r"step[=_-]?(\d+)", path.name)
    return int(match.group(1)) if match else -1


def select_checkpoints(ckpt_dir: str | Path, last_n: int) -> list[Path]:
    """The ``last_n`` checkpoints of a run by training step (``last.ckpt`` excluded)."""
    paths = [p for p in Path(ckpt_dir).glob("*.ckpt") if not p.name.startswith("last")]
    if not paths:
        raise FileNotFoundError(f"no step checkpoints in {ckpt_dir}")
    return sorted(paths, key=_step)[-last_n:]


def average_checkpoints(paths: list[str | Path], output: str | Path) -> Path:
    """Mean of every floating-point tensor; everything else (config, tokenizers, integer
    buffers) is taken from the last checkpoint. Optimizer state is dropped."""
    if not paths:
        raise ValueError("no checkpoints to average")
    ckpts = [read_checkpoint(p) for p in paths]
    keys = set(ckpts[-1]["state_dict"])
    for p, c in zip(paths, ckpts):
        if set(c["state_dict"]) != keys:
            raise ValueError(f"{p} has different parameters from {paths[-1]}: not the same model")
    averaged = {}
    for k, last in ckpts[-1]["state_dict"].items():
        if torch.is_floating_point(last):
            averaged[k] = sum(c["state_dict"][k].double() for c in ckpts).div(len(ckpts)).to(last.dtype)
        else:
            averaged[k] = last
    out = dict(ckpts[-1], state_dict=averaged, averaged_from=[str(p) for p in paths])
    for k in ("optimizer_states", "lr_schedulers", "loops", "callbacks"):
        out.pop(k, None)
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    torch.save(out, output)
    return output


def run(cfg: DictConfig) -> Path:
    paths = list(cfg.inputs) if cfg.inputs else select_checkpoints(cfg.ckpt_dir, cfg.last_n)
    out = average_checkpoints(paths, cfg.output)
    print(f"averaged {len(paths)} checkpoints -> {out}")
    return out


main = hydra_entry("average")(run)

if __name__ == "__main__":
    main()
