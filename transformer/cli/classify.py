"""`transformer-classify`: one label per input line from a classification checkpoint, or an
ensemble (docs/cli.md).

    echo "a gorgeous , witty , seductive movie ." | transformer-classify ckpt_path=best.ckpt
    transformer-classify ckpt_path=[a.ckpt,b.ckpt] input=reviews.txt output=labels.tsv top_k=2 format=jsonl
"""

from __future__ import annotations

import json
import logging

from omegaconf import DictConfig

from transformer import kinds
from transformer.cli.common import hydra_entry, load_for_inference
from transformer.cli.lines import read_lines, write_lines
from transformer.ranges import check_count

log = logging.getLogger(__name__)


def format_predictions(top: list[list[tuple[str, float]]], fmt: str = "tsv") -> list[str]:
    """One output line per sentence from its best ``(label, probability)`` pairs."""
    if fmt == "tsv":
        return ["\t".join(f"{label}\t{p:.4f}" for label, p in pairs) for pairs in top]
    lines = []
    for pairs in top:
        row = {"label": pairs[0][0], "probability": round(pairs[0][1], 6)}
        if len(pairs) > 1:
            row["top"] = [{"label": label, "probability": round(p, 6)} for label, p in pairs]
        lines.append(json.dumps(row, ensure_ascii=False))
    return lines


def run(cfg: DictConfig) -> list[str]:
    top_k = cfg.top_k
    check_count("top_k", top_k)
    lines, name = read_lines(cfg.input)  # a missing or non-UTF-8 input fails before the model loads
    task, device = load_for_inference(cfg.ckpt_path, cfg.device, cfg.get("accel", "none"))
    kinds.require(task, "classify")
    classifier = task.classifier(max_tokens=int(cfg.max_tokens), device=device)
    out = format_predictions(classifier.top_k(lines, top_k), cfg.format)
    if classifier.truncated:
        log.warning("%s: %d lines were longer than the model reads and were cut", name, classifier.truncated)
    write_lines(out, cfg.output)
    return out


main = hydra_entry("classify")(run)

if __name__ == "__main__":
    main()
