"""`transformer-decode`: translate (or transcribe) lines from stdin or a file, one output line per
input line (docs/cli.md).

    echo "Ein Hund rennt." | transformer-decode ckpt_path=best.ckpt decode.strategy=beam decode.beam_size=5
    transformer-decode ckpt_path=best.ckpt input=src.de output=hyp.en decode.strategy=beam decode.n_best=5
    transformer-decode ckpt_path=strings.ckpt input=wavs.txt decode.strategy=beam      # audio paths in
    echo "A dog runs." | transformer-decode ckpt_path=multi.ckpt tgt_lang=fr
    echo "A dog runs." | transformer-decode ckpt_path=hf:nllb-200-distilled-600M src_lang=en tgt_lang=fr
"""

from __future__ import annotations

import sys

from omegaconf import DictConfig, OmegaConf

from transformer import kinds
from transformer.cli.common import hydra_entry, load_for_inference
from transformer.cli.lines import read_lines, write_lines
from transformer.decoding.settings import DecodeSettings


def format_output(nbest: list[list[tuple[str, float]]], n_best: int) -> list[str]:
    """One line per input, or ``i ||| hyp ||| score`` lines for n-best output."""
    if n_best <= 1:
        return [hyps[0][0] if hyps else "" for hyps in nbest]
    return [f"{i} ||| {text} ||| {score:.4f}" for i, hyps in enumerate(nbest) for text, score in hyps]


def run(cfg: DictConfig) -> list[str]:
    settings = DecodeSettings.of(OmegaConf.to_container(cfg.decode, resolve=True))
    task, device = load_for_inference(cfg.ckpt_path, cfg.device, cfg.get("accel", "none"), cfg.get("quantize"))
    kinds.require(task, "decode", str(cfg.ckpt_path))
    if settings.pivot is not None:  # src_lang -> pivot -> tgt_lang, one model
        lines, truncated = decode_through_pivot(cfg, task, settings, device)
    else:
        # the language asked for, checked against the checkpoint's directions before any input is read
        src_lang, tgt_lang = task.languages.check_direction(cfg.get("src_lang"), cfg.get("tgt_lang"),
                                                            settings.zero_shot)
        translator = task.translator(settings, device=device)
        translator.set_target_language(task.languages.check_target(tgt_lang), src_lang)
        sources, _ = read_lines(cfg.input)
        if settings.print_alignment:
            # each line gets " ||| i-j ..." (source-target piece indices, from cross-attention)
            from transformer.inspect.attention import translate_with_alignments, with_alignments

            nbest, alignments = translate_with_alignments(task, translator, sources, settings.alignment_layer)
            lines = with_alignments(format_output(nbest, settings.n_best), alignments, settings.n_best)
        else:
            lines = format_output(translator.translate(sources), settings.n_best)
        truncated = translator.truncated
    write_lines(lines, cfg.output)
    if truncated:
        print(f"warning: {truncated} input(s) longer than the model's maximum source length were truncated",
              file=sys.stderr)
    return lines


def decode_through_pivot(cfg: DictConfig, task, settings: DecodeSettings, device) -> tuple[list[str], int]:
    """The input lines through ``decode.pivot`` into ``tgt_lang`` (``inference.pivot``), and how many
    were truncated; both legs are checked before anything is read."""
    from transformer.inference.pivot import pivot_translate

    task.languages.check_pivot(cfg.get("src_lang"), settings.pivot, cfg.get("tgt_lang"))
    if settings.print_alignment:
        raise ValueError("decode.print_alignment=true: not with decode.pivot (an output would align to the "
                         "pivot's text, not to the input)")
    sources, _ = read_lines(cfg.input)
    nbest, truncated = pivot_translate(task, settings, sources, cfg.get("src_lang"), cfg.get("tgt_lang"), device)
    return format_output(nbest, settings.n_best), truncated


main = hydra_entry("decode")(run)

if __name__ == "__main__":
    main()
