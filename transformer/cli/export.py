"""`transformer-export`: write an autoregressive translation checkpoint as a CTranslate2 model.

    transformer-export ckpt_path=best.ckpt format=ctranslate2 output_dir=ct2_model
    transformer-export ckpt_path=best.ckpt output_dir=ct2_int8 quantization=int8

The directory holds ``model.bin``, ``config.json`` and the vocabulary (the tokenizer's pieces);
the checkpoint's tokenizers are written beside them, so the export alone translates
(README: "Serving with CTranslate2"). A model CTranslate2 would compute differently is refused
with the reason.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from transformer.cli.common import hydra_entry
from transformer.export.ctranslate2 import ExportError, export_ctranslate2
from transformer.tasks.checkpoint import load_task

FORMATS = ("ctranslate2",)


def run(cfg: DictConfig) -> Path:
    if cfg.format not in FORMATS:
        raise ExportError(f"format={cfg.format!r} unknown; choose from {', '.join(FORMATS)}")
    task = load_task(cfg.ckpt_path)
    out = export_ctranslate2(task, cfg.output_dir, cfg.quantization, force=bool(cfg.force))
    print(f"exported {cfg.ckpt_path} -> {out} (CTranslate2, {cfg.quantization or 'float32'} weights)")
    return out


main = hydra_entry("export")(run)

if __name__ == "__main__":
    main()
