"""`transformer-distill`: sequence-level knowledge distillation (Kim & Rush 2016) for NAT: a
teacher's translations of a split written as a corpus to train on (docs/cli.md).

    transformer-distill ckpt_path=at.ckpt split=train output_dir=distill/de_en decode.strategy=beam decode.beam_size=5
    transformer-train experiment=multi30k_nat_cpu data.distill_dir=distill/de_en
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from omegaconf import DictConfig, OmegaConf

from transformer import kinds
from transformer.cli.common import checkpoint_label, hydra_entry, load_for_inference
from transformer.data.core.tokenizer import write_tokenizers
from transformer.data.parallel.languages import Direction, direction_name
from transformer.decoding.settings import DecodeSettings
from transformer.evaluation import score_translations
from transformer.evaluation.translation import translate_split
from transformer.files import inside, write_text
from transformer.inference import one_line


def _write_lines(path: Path, lines: list[str]) -> None:
    """UTF-8, one line per item, written atomically (a partial corpus never looks complete)."""
    write_text(path, "".join(one_line(s) + "\n" for s in lines))


def distill(ckpt_path: str | list[str], split: str, decode: DecodeSettings | Mapping[str, Any], output_dir: str | Path,
            data_dir: str = "data/cache", mirror_root: str | None = None, device: str = "auto",
            limit: int | None = None, accel: str = "none") -> dict:
    """Translate ``split`` with the checkpoint (or the ensemble of several, a list) and write
    the distilled corpus; returns the summary that is also written to ``distill.json``."""
    settings = DecodeSettings.of(decode)
    task, dev = load_for_inference(ckpt_path, device, accel)
    kinds.require(task, "distill", f"ckpt_path={checkpoint_label(ckpt_path)}")
    langs = task.languages
    out = Path(output_dir)
    if langs.multilingual:
        return _distill_directions(task, ckpt_path, list(langs.directions), split, settings, out, data_dir,
                                   mirror_root, dev, limit)
    translated = translate_split(task, split, settings, data_dir, mirror_root, dev, limit)
    out.mkdir(parents=True, exist_ok=True)
    # The split is the user's, the languages the checkpoint's: each file name stays in ``out``.
    src_path, tgt_path = inside(out, f"{split}.{langs.src_lang}"), inside(out, f"{split}.{langs.tgt_lang}")
    _write_lines(src_path, translated.sources)
    _write_lines(tgt_path, translated.hyps)
    write_tokenizers(out, "tokenizer", {"src": task.src_tokenizer.to_str(), "tgt": task.tgt_tokenizer.to_str()})
    stats = _stats(translated, settings)
    bleu = stats.pop("bleu_vs_references")
    summary = {"checkpoint": checkpoint_label(ckpt_path), "split": split, "pair": f"{langs.src_lang}-{langs.tgt_lang}",
               **stats, "files": {"src": str(src_path), "tgt": str(tgt_path)}, "bleu_vs_references": bleu}
    write_text(out / "distill.json", json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    return summary


def _stats(translated, settings: DecodeSettings) -> dict:
    """Counts, decoding speed and how far the distilled targets are from the references they replace."""
    return {"sentences": len(translated.sources),
            "empty_outputs": sum(1 for s, h in zip(translated.sources, translated.hyps) if s.strip() and not h.strip()),
            **translated.decoding_stats(settings),
            "bleu_vs_references": score_translations(translated.hyps, translated.refs)["bleu"] if translated.hyps else 0.0}


def check_distillable(directions: list[Direction], where: str) -> None:
    """Each target language written from one source, and none both source and target."""
    sources = {s for s, _ in directions}
    for s, t in directions:
        if t in sources:
            raise ValueError(f"ckpt_path={where}: {t} is a source and a target language of its directions "
                             f"({', '.join(map(direction_name, directions))}); transformer-distill writes one file "
                             f"per language, so it takes a model whose target languages are not also sources "
                             f"(e.g. en-de, en-fr)")
        others = [direction_name(d) for d in directions if d[1] == t and d[0] != s]
        if others:
            raise ValueError(f"ckpt_path={where}: {t} is written from several languages ({direction_name((s, t))}, "
                             f"{', '.join(others)}); transformer-distill writes one file per target language")


def _distill_directions(task, ckpt_path, directions: list[Direction], split: str, settings: DecodeSettings, out: Path,
                        data_dir: str, mirror_root: str | None, device, limit: int | None) -> dict:
    """A multilingual teacher's distilled corpus: one file per language."""
    label = checkpoint_label(ckpt_path)
    check_distillable(directions, label)
    translated = {d: translate_split(task, split, settings, data_dir, mirror_root, device, limit, direction=d)
                  for d in directions}
    written: dict[str, list[str]] = {}
    for (s, t), result in translated.items():
        if written.setdefault(s, result.sources) != result.sources:
            raise ValueError(f"ckpt_path={label}: the {split} sources of {s} differ between its directions; "
                             f"transformer-distill needs a multi-way parallel corpus (line i of every language "
                             f"the same sentence)")
        written[t] = result.hyps
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for lang, lines in written.items():
        files[lang] = str(inside(out, f"{split}.{lang}"))
        _write_lines(Path(files[lang]), lines)
    write_tokenizers(out, "tokenizer", {"src": task.src_tokenizer.to_str(), "tgt": task.tgt_tokenizer.to_str()})
    summary = {
        "checkpoint": label,
        "split": split,
        "pairs": [direction_name(d) for d in directions],
        "files": files,
        "directions": {
            direction_name(d): _stats(r, settings) for d, r in translated.items()},
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
