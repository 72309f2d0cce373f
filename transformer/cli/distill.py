"""`transformer-distill`: sequence-level knowledge distillation (Kim & Rush 2016) for NAT.

A trained (autoregressive) checkpoint translates a Multi30k split; the original sources and
the model's translations are written as a line-aligned parallel corpus that
``TranslationDataModule(train_files={"src": ..., "tgt": ...})`` reads in place of the
references (Gu et al. 2018 train NAT on such targets: they are less multi-modal).

    transformer-distill ckpt_path=at.ckpt split=train output_dir=distill/de_en decode.strategy=beam decode.beam_size=5
    transformer-train experiment=multi30k_nat data.distill_dir=distill/de_en

Writes under ``output_dir``: ``<split>.<src_lang>`` (the sources, unchanged),
``<split>.<tgt_lang>`` (one translation per source, same line count, UTF-8),
``tokenizer.json`` (the teacher's tokenizer, so the student can share its vocabulary;
``tokenizer.src.json``/``tokenizer.tgt.json`` for separate vocabularies) and ``distill.json``
(checkpoint, decoding settings, counts, timing, and BLEU of the distilled targets against
the original references). ``ckpt_path=[a.ckpt,b.ckpt]`` distils with the ensemble of the
checkpoints (their probabilities averaged at every step).
"""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from transformer.cli.common import checkpoint_label, hydra_entry, load_for_inference
from transformer.decoding.settings import DecodeSettings
from transformer.evaluation import score_translations
from transformer.evaluation.translation import translate_split
from transformer.files import inside, write_text
from transformer.inference import one_line


def _write_lines(path: Path, lines: list[str]) -> None:
    """UTF-8, one line per item, written atomically (a partial corpus never looks complete)."""
    write_text(path, "".join(one_line(s) + "\n" for s in lines))


def distill(ckpt_path: str | list[str], split: str, decode_cfg: dict, output_dir: str | Path,
            data_dir: str = "data/cache", mirror_root: str | None = None, device: str = "auto",
            limit: int | None = None, accel: str = "none") -> dict:
    """Translate ``split`` with the checkpoint (or the ensemble of several, a list) and write
    the distilled corpus; returns the summary that is also written to ``distill.json``."""
    DecodeSettings.check(dict(decode_cfg))
    task, dev = load_for_inference(ckpt_path, device, accel)
    if not hasattr(task, "translator"):
        raise ValueError(f"ckpt_path={checkpoint_label(ckpt_path)}: a {getattr(task, 'task_name', '?')} checkpoint; "
                         f"transformer-distill needs a translation checkpoint (it writes translations)")
    hp = task.hparams
    translated = translate_split(task, split, decode_cfg, data_dir, mirror_root, dev, limit)
    sources, hyps = translated.sources, translated.hyps

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    # The split is the user's, the languages the checkpoint's: each file name stays in ``out``.
    src_path, tgt_path = inside(out, f"{split}.{hp.src_lang}"), inside(out, f"{split}.{hp.tgt_lang}")
    _write_lines(src_path, sources)
    _write_lines(tgt_path, hyps)
    src_tok, tgt_tok = task.src_tokenizer.to_str(), task.tgt_tokenizer.to_str()
    if src_tok == tgt_tok:
        write_text(out / "tokenizer.json", src_tok)
    else:
        write_text(out / "tokenizer.src.json", src_tok)
        write_text(out / "tokenizer.tgt.json", tgt_tok)
    summary = {
        "checkpoint": checkpoint_label(ckpt_path),
        "split": split,
        "pair": f"{hp.src_lang}-{hp.tgt_lang}",
        "sentences": len(sources),
        "empty_outputs": sum(1 for s, h in zip(sources, hyps) if s.strip() and not h.strip()),
        **translated.decoding_stats(decode_cfg),
        "files": {"src": str(src_path), "tgt": str(tgt_path)},
        # How far the distilled targets are from the references they replace.
        "bleu_vs_references": score_translations(hyps, translated.refs)["bleu"] if hyps else 0.0,
    }
    write_text(out / "distill.json", json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    return summary


def run(cfg: DictConfig) -> dict:
    summary = distill(
        cfg.ckpt_path, cfg.split, OmegaConf.to_container(cfg.decode, resolve=True), cfg.output_dir,
        data_dir=cfg.data_dir, mirror_root=cfg.mirror_root, device=cfg.device, limit=cfg.get("limit"),
        accel=cfg.get("accel", "none"),
    )
    print(json.dumps(summary, indent=2, ensure_ascii=False))
    return summary


main = hydra_entry("distill")(run)

if __name__ == "__main__":
    main()
