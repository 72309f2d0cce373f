"""`transformer-inspect`: pictures of what a checkpoint attends to, and of its positions
(docs/cli.md).

    transformer-inspect ckpt_path=best.ckpt text="Ein Hund rennt über die Wiese." output_dir=inspect
    transformer-inspect ckpt_path=best.ckpt input=src.de lines=5 decode.strategy=beam output_dir=inspect
    transformer-inspect ckpt_path=tagger.ckpt text="I saw a saw ." output_dir=inspect_tagger
    transformer-inspect ckpt_path=strings.ckpt text=recording.wav output_dir=inspect_speech
    transformer-inspect ckpt_path=cora.ckpt text=1701 output_dir=inspect_cora      # a node's attention
    transformer-inspect ckpt_path=best.ckpt what=positions output_dir=inspect_positions
"""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from transformer import kinds
from transformer.cli.common import hydra_entry
from transformer.cli.lines import read_lines
from transformer.inference.tagger import split_tokens
from transformer.decoding.settings import DecodeSettings
from transformer.inspect import plots, report
from transformer.inspect.classification import inspect_classification
from transformer.inspect.mlm import inspect_mlm
from transformer.inspect.speech import inspect_transcription
from transformer.inspect.nodes import inspect_nodes
from transformer.tasks.checkpoint import load_task

WHAT = ("attention", "positions")


def _sentences(cfg: DictConfig) -> list[str]:
    if (cfg.text is None) == (cfg.input is None):
        raise ValueError("give the sentence as text=\"...\" or a file as input=<path> (one of the two)")
    lines = [str(cfg.text)] if cfg.text is not None else [
        line for line in read_lines(cfg.input)[0] if line.strip()][: int(cfg.lines)]
    if not any(line.strip() for line in lines):
        raise ValueError("nothing to inspect: the input is empty")
    return lines


def run(cfg: DictConfig) -> list[Path]:
    if cfg.what not in WHAT:
        raise ValueError(f"what={cfg.what!r} unknown; choose from {', '.join(WHAT)}")
    plots.pyplot()  # fail early, with the install hint, when matplotlib is missing
    task = load_task(cfg.ckpt_path, text=cfg.what != "positions")  # a position table needs no tokenizer
    kind = kinds.task_kind(task)
    if cfg.what == "positions":
        written = report.inspect_positions(task.model, cfg.output_dir, int(cfg.positions))
    elif kind.shape == "sequence" and kinds.input_kind(task.hparams) is kinds.FRAMES:  # audio in, transcripts out
        settings = DecodeSettings.of(OmegaConf.to_container(cfg.decode, resolve=True))
        written = inspect_transcription(task, _sentences(cfg), settings, cfg.output_dir, int(cfg.max_tokens))
    elif kind is kinds.TRANSLATION:
        settings = DecodeSettings.of(OmegaConf.to_container(cfg.decode, resolve=True))
        tgt_lang = task.languages.check_target(cfg.get("tgt_lang"))  # a multilingual model's tag
        written = report.inspect_translation(task, _sentences(cfg), settings, cfg.output_dir, int(cfg.max_tokens),
                                             tgt_lang)
    elif kind is kinds.TAGGING:
        written = report.inspect_tagging(task, [split_tokens(line) for line in _sentences(cfg)], cfg.output_dir,
                                         int(cfg.max_tokens))
    elif kind is kinds.CLASSIFICATION:
        written = inspect_classification(task, _sentences(cfg), cfg.output_dir, int(cfg.max_tokens))
    elif kind is kinds.MLM:
        written = inspect_mlm(task, _sentences(cfg), cfg.output_dir, int(cfg.max_tokens))
    elif kind is kinds.NODE_CLASSIFICATION:
        written = inspect_nodes(task.model, task.classes, task.hparams.data, [s.strip() for s in _sentences(cfg)],
                                cfg.output_dir, int(cfg.max_tokens))
    else:
        raise ValueError(f"what=attention supports autoregressive translation, transcription (speech in, CTC "
                         f"or autoregressive), tagging, classification, masked-LM and node classification checkpoints, not {kind.what} "
                         f"ones (what=positions works for every model)")
    print(f"wrote {len(written)} files to {cfg.output_dir} (open {Path(cfg.output_dir) / 'index.html'})")
    return written


def quote_text_override(argv: list[str]) -> list[str]:
    """``text=<sentence>`` as a quoted Hydra value, so a sentence with non-ASCII letters or
    punctuation (``text="Ein Hund rennt über die Wiese."`` in a shell) needs no Hydra quoting."""
    out = []
    for arg in argv:
        if arg.startswith("text=") and not arg[5:].startswith(("'", '"')):
            arg = "text='" + arg[5:].replace("'", "\\'") + "'"
        out.append(arg)
    return out


_main = hydra_entry("inspect")(run)


def main() -> None:
    sys.argv = quote_text_override(sys.argv)
    _main()

if __name__ == "__main__":
    main()
