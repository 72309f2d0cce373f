"""`transformer-fill`: the pieces a masked language model (``experiment=pretrain``) puts in place
of each ``[MASK]``, with their probabilities: Hugging Face's ``pipeline("fill-mask")`` on the
command line.

    echo "the movie was [MASK] ." | transformer-fill ckpt_path=pretrain.ckpt top_k=5
    transformer-fill ckpt_path=pretrain.ckpt input=masked.txt output=fillers.tsv
    transformer-fill ckpt_path=pretrain.ckpt input=masked.txt format=json
    echo "the movie was [MASK] ." | transformer-fill ckpt_path=hf:bert-base-uncased

``ckpt_path=hf:<folder>`` or ``hf:<hub id>``: a BERT, RoBERTa or DistilBERT masked LM from Hugging
Face (``transformer.hub``), read onto our own model.

Input: one sentence a line, with one or more ``[MASK]`` (``<mask>`` too); each mask stands for one
piece of the model's vocabulary. A line without a mask is an error naming it.

Output, ``format=tsv`` (the default): one line per mask, in input order::

    <line>\\t<mask>\\t<filler 1>\\t<probability 1>\\t...\\t<filler k>\\t<probability k>

``line`` is the input line (from 1), ``mask`` the mask's place in it (from 1), then the ``top_k``
fillers, best first, each the piece's text and its probability (4 decimals).

``format=json`` (or ``jsonl``): one JSON array per input line, one entry per mask in order, each
a list of the ``top_k`` fillers as the Hugging Face pipeline gives them: ``{"token_str": ...,
"token": <id>, "score": <probability>, "sequence": <the line with this mask filled>}`` (the
pipeline's list of lists for several masks, here for one mask as well). A Hugging Face model's
``sequence`` is decoded as the pipeline decodes it (WordPiece's spaces before punctuation tidied;
with several masks, its framing and the other masks shown).
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
