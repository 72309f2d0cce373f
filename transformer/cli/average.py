"""`transformer-average`: average the weights of the last N checkpoints into one.

    transformer-average ckpt_dir=outputs/.../checkpoints last_n=5 output=avg.ckpt
    transformer-average 'inputs=[a.ckpt,b.ckpt]' output=avg.ckpt
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from transformer.cli import validate
from transformer.cli.common import hydra_entry
from transformer.files import save_torch
from transformer.ranges import check_count
from transformer.tasks.checkpoint import read_checkpoint


def _step(path: Path) -> int:
    match = re.search(r"step[=_-]?(\d+)", path.name)
    return int(match.group(1)) if match else -1


def select_checkpoints(ckpt_dir: str | Path, last_n: int) -> list[Path]:
    """The ``last_n`` checkpoints of a run by training step (``last.ckpt`` excluded)."""
    check_count("last_n", last_n)
    if not Path(ckpt_dir).is_dir():
        raise NotADirectoryError(f"ckpt_dir={ckpt_dir}: no such folder")
    paths = [p for p in Path(ckpt_dir).glob("*.ckpt") if not p.name.startswith("last")]
    if not paths:
        raise FileNotFoundError(f"no step checkpoints in {ckpt_dir}")
    return sorted(paths, key=_step)[-last_n:]


def average_checkpoints(paths: list[str | Path], output: str | Path) -> Path:
    """Mean of every floating-point tensor; everything else (config, tokenizers, integer
    buffers) is taken from the last checkpoint. Optimizer state is dropped."""
    if not paths:
        raise ValueError("no checkpoints to average")
    check_output(paths, output)
    ckpts = [read_checkpoint(p) for p in paths]
    last = ckpts[-1]["state_dict"]
    for p, c in zip(paths, ckpts):
        if set(c["state_dict"]) != set(last):
            raise ValueError(f"{p} has different parameters from {paths[-1]}: not the same model")
        wrong = next((k for k, v in c["state_dict"].items() if tuple(v.shape) != tuple(last[k].shape)), None)
        if wrong is not None:
            raise ValueError(f"{p}: {wrong} has shape {tuple(c['state_dict'][wrong].shape)}, {paths[-1]} has "
                             f"{tuple(last[wrong].shape)}: not the same model")
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
    save_torch(out, output)
    return output


def check_output(paths: list[str | Path], output: str | Path) -> None:
    """The output is a writable file path and none of the inputs (writing it would replace
    a checkpoint being averaged)."""
    validate.output_file("output", str(output))
    out = Path(output).resolve()
    for p in paths:
        if Path(p).resolve() == out or (out.exists() and Path(p).exists() and out.samefile(p)):
            raise ValueError(f"output={output} is one of the inputs ({p}): averaging would overwrite it")


def check_average(cfg: DictConfig) -> list[str]:
    """The validation step: inputs or a checkpoint folder, ``last_n >= 1``, an output that is
    none of the inputs. Returns the checkpoints to average."""
    inputs = cfg.get("inputs")
    if inputs and cfg.get("ckpt_dir"):
        raise ValueError("give inputs=[a.ckpt,...] or ckpt_dir=<folder> with last_n=N, not both")
    if inputs:
        validate.checkpoints("inputs", OmegaConf.to_container(inputs) if OmegaConf.is_list(inputs) else inputs)
        paths = list(inputs) if OmegaConf.is_list(inputs) or isinstance(inputs, (list, tuple)) else [inputs]
    elif cfg.get("ckpt_dir") is not None:
        paths = select_checkpoints(str(cfg.ckpt_dir), cfg.get("last_n"))
    else:
        raise ValueError("nothing to average: give inputs=[a.ckpt,b.ckpt] or ckpt_dir=<folder> (with last_n=N)")
    if not isinstance(cfg.get("output"), str):
        raise ValueError(f"output={cfg.get('output')!r}: expected a file path")
    check_output(paths, cfg.output)
    return [str(p) for p in paths]


def run(cfg: DictConfig) -> Path:
    """Check the config, then average."""
    return average(cfg, check_average(cfg))


def average(cfg: DictConfig, paths: list[str]) -> Path:
    """Average the checkpoints :func:`check_average` chose into ``cfg.output``."""
    out = average_checkpoints(paths, cfg.output)
    print(f"averaged {len(paths)} checkpoints -> {out}")
    return out


main = hydra_entry("average", check=check_average)(average)

if __name__ == "__main__":
    main()
