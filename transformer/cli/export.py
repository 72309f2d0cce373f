"""`transformer-export`: a checkpoint as a CTranslate2 model or a Hugging Face folder (docs/cli.md).

    transformer-export ckpt_path=best.ckpt format=ctranslate2 output_dir=ct2_model quantization=int8
    transformer-export ckpt_path=best.ckpt format=hf output_dir=hf_model
"""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import DictConfig

from transformer.cli.common import hydra_entry
from transformer.export.ctranslate2 import export_ctranslate2
from transformer.export.folder import ExportError
from transformer.export.hf import export_hf
from transformer.tasks.checkpoint import load_task

FORMATS = ("ctranslate2", "hf")


def run(cfg: DictConfig) -> Path:
    if cfg.format not in FORMATS:
        raise ExportError(f"format={cfg.format!r} unknown; choose from {', '.join(FORMATS)}")
    if cfg.format == "hf" and cfg.quantization is not None:
        raise ExportError(f"quantization={cfg.quantization!r} is CTranslate2's; format=hf writes float32 weights")
    task = load_task(cfg.ckpt_path)
    if cfg.format == "hf":
        out = export_hf(task, cfg.output_dir, force=bool(cfg.force))
        arch = json.loads((out / "config.json").read_text(encoding="utf-8"))["architectures"][0]
        print(f"exported {cfg.ckpt_path} -> {out} (Hugging Face {arch})")
        return out
    out = export_ctranslate2(task, cfg.output_dir, cfg.quantization, force=bool(cfg.force))
    print(f"exported {cfg.ckpt_path} -> {out} (CTranslate2, {cfg.quantization or 'float32'} weights)")
    return out


main = hydra_entry("export")(run)

if __name__ == "__main__":
    main()
