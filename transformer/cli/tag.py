"""`transformer-tag`: tag text or CoNLL-U with a tagging checkpoint, or an ensemble of several
(formats: docs/cli.md).

    echo "The cat sat ." | transformer-tag ckpt_path=best.ckpt                 # -> The_DET cat_NOUN ...
    transformer-tag ckpt_path=best.ckpt input=in.conllu output=out.conllu      # CoNLL-U in and out
    transformer-tag ckpt_path=[a.ckpt,b.ckpt,c.ckpt] input=words.txt            # an ensemble
"""

from __future__ import annotations

from omegaconf import DictConfig

from transformer import kinds
from transformer.cli.common import hydra_entry, load_for_inference
from transformer.cli.lines import read_lines, write_lines
from transformer.inference.tag_lines import tag_lines


def run(cfg: DictConfig) -> list[str]:
    """Tag ``input`` into ``output``."""
    task, device = load_for_inference(cfg.ckpt_path, cfg.device, cfg.get("accel", "none"))
    kinds.require(task, "tag", str(cfg.ckpt_path))
    lines, name = read_lines(cfg.input)
    out = tag_lines(task.tagger(int(cfg.max_tokens), device), lines, cfg.input_format, cfg.format, name)
    write_lines(out, cfg.output)
    return out


main = hydra_entry("tag")(run)

if __name__ == "__main__":
    main()
