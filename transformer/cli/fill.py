"""`transformer-fill`: the pieces a masked language model puts in place of each ``[MASK]``, with
their probabilities, as Hugging Face's fill-mask pipeline gives them (docs/cli.md).

    echo "the movie was [MASK] ." | transformer-fill ckpt_path=pretrain.ckpt top_k=5
    transformer-fill ckpt_path=hf:bert-base-uncased input=masked.txt output=fillers.json format=json
"""

from __future__ import annotations

import json
import logging

from omegaconf import DictConfig

from transformer import kinds
from transformer.cli.common import hydra_entry, load_for_inference
from transformer.cli.lines import read_lines, write_lines

log = logging.getLogger(__name__)


def format_fillers(results: list, fmt: str = "tsv") -> list[str]:
    """Output lines of :meth:`MaskFiller.fill`'s results (see the module docstring)."""
    if fmt == "tsv":
        return [f"{line}\t{mask}\t" + "\t".join(f"{f.token_str}\t{f.score:.4f}" for f in fillers)
                for line, masks in enumerate(results, 1) for mask, fillers in enumerate(masks, 1)]
    return [json.dumps([[{"token_str": f.token_str, "token": f.token, "score": round(f.score, 6), "sequence": f.sequence}
                         for f in fillers] for fillers in masks], ensure_ascii=False) for masks in results]


def run(cfg: DictConfig) -> list[str]:
    lines, name = read_lines(cfg.input)  # a missing or non-UTF-8 input fails before the model loads
    task, device = load_for_inference(cfg.ckpt_path, cfg.device, cfg.get("accel", "none"))
    kinds.require(task, "fill")
    filler = task.filler(max_tokens=int(cfg.max_tokens), device=device)
    try:
        results = filler.fill(lines, int(cfg.top_k))
    except ValueError as exc:
        raise ValueError(f"{name}, {exc}") from None
    if filler.truncated:
        log.warning("%s: %d lines were longer than the model reads and were cut", name, filler.truncated)
    out = format_fillers(results, cfg.format)
    write_lines(out, cfg.output)
    return out


main = hydra_entry("fill")(run)

if __name__ == "__main__":
    main()
