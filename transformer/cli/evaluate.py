"""`transformer-evaluate`: score a checkpoint (or an ensemble) on a split; the model, tokenizers
and dataset come from the checkpoint alone (docs/cli.md).

    transformer-evaluate ckpt_path=best.ckpt split=test_2016_flickr decode.strategy=beam decode.beam_size=5
    transformer-evaluate ckpt_path=best.ckpt src=news.en ref=news.zh    # any file pair
    transformer-evaluate ckpt_path=hf:Helsinki-NLP/opus-mt-de-en data=multi30k split=test_2016_flickr
    transformer-evaluate ckpt_path=multi.ckpt tgt_lang=fr split=test_2016_flickr   # a multilingual model
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from omegaconf import DictConfig, OmegaConf

from transformer import kinds
from transformer.cli.common import checkpoint_label, checkpoint_paths, hydra_entry, load_for_inference
from transformer.decoding.settings import DecodeSettings
from transformer.files import write_text


#: A data config's keys that name a corpus (``data.parallel.corpus.make_corpus``); the rest
#: (vocabulary, batching, cache) belong to training.
CORPUS_KEYS = ("src_lang", "tgt_lang", "corpus_name", "train", "valid", "test", "tests", "valid_name", "format",
               "columns", "header", "holdout", "holdout_seed", "hub", "bleu_tokenize", "train_files")
#: The splits of a data config whose input is recordings: one manifest each.
MANIFESTS = ("train", "dev", "test")


def corpus_from_config(data: DictConfig | dict) -> dict:
    """The corpus a data config names with training's keys, as a checkpoint records its own: for an
    input kind with a front end (recordings), its manifests by split."""
    from transformer.data.parallel.corpus import check_complete, config_sources, make_corpus

    kind = kinds.input_kind(data)
    if kind.frontend is not None:
        return {"input": kind.name, "paths": {s: str(Path(data[s]).resolve()) for s in MANIFESTS if data.get(s)}}
    d = {k: data.get(k) for k in CORPUS_KEYS}
    d = {k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v for k, v in d.items()}
    sources, valid_name = config_sources(d["corpus_name"] or "parallel", d["train"], d["valid"], d["test"],
                                         d["tests"], d["valid_name"] or "valid", d["hub"], d["train_files"])
    corpus = make_corpus(d["src_lang"], d["tgt_lang"], sources, name=d["corpus_name"] or "parallel",
                         valid_name=valid_name, format=d["format"], columns=d["columns"], header=bool(d["header"]),
                         holdout=d["holdout"], holdout_seed=int(d["holdout_seed"] or 0), hub=d["hub"],
                         bleu_tokenize=d["bleu_tokenize"])
    if not corpus.get("src_lang") or not corpus.get("tgt_lang"):
        check_complete(corpus)
    return corpus


#: The language names a folder without ``source_lang``/``target_lang`` is read with (``hub.folder``).
_UNNAMED = ("source", "target")


def use_corpus(task, corpus: dict, label: str) -> None:
    """Score ``task`` on ``corpus`` instead of the one it was trained on: its splits, languages
    and BLEU tokenizer. A checkpoint that names its languages must translate the corpus's pair."""
    if task.kind.shape != "sequence":
        raise ValueError(f"data=...: a corpus of sentence pairs scores translations; {label} is "
                         f"{task.kind.what} checkpoint")
    given, reads = kinds.input_kind(corpus), kinds.input_kind(task.hparams)
    if given is not reads:
        raise ValueError(f"data=...: a corpus of {given.name} inputs; {label} reads {reads.name}")
    if reads.frontend is not None:  # recordings: the checkpoint's data settings with these manifests
        task.hparams["data"] = {**task.hparams["data"], "paths": corpus["paths"]}
        return
    from transformer.data.parallel.languages import CODES, Languages

    ours, hp = task.languages, task.hparams
    if ours.coded:  # a pretrained family's: scored in the corpus's direction, its codes kept
        codes = ours.codes or {}
        for key in ("src_lang", "tgt_lang"):
            if corpus[key] not in codes:
                raise ValueError(f"data.{key}={corpus[key]}: not a language of {label} (its languages: "
                                 f"{', '.join(ours.languages or codes)})")
        corpus = {**corpus, "tag_side": CODES,
                  "language_codes": {corpus[k]: codes[corpus[k]] for k in ("src_lang", "tgt_lang")}}
    else:
        for key, lang in (("src_lang", ours.src_lang), ("tgt_lang", ours.tgt_lang)):
            if lang not in _UNNAMED and lang != corpus[key]:
                raise ValueError(f"data.{key}={corpus[key]}, but {label} translates {ours.src_lang}-{ours.tgt_lang}")
    hp["data"], hp["src_lang"], hp["tgt_lang"] = corpus, corpus["src_lang"], corpus["tgt_lang"]
    task.languages = Languages.of_checkpoint(hp)


def evaluate_checkpoint(ckpt_path: str | Sequence[str], split: str, decode: DecodeSettings | Mapping[str, Any],
                        output_dir: str | Path, data_dir: str = "data/cache", mirror_root: str | None = None,
                        device: str = "auto", accel: str = "none", src: str | None = None, ref: str | None = None,
                        bleu_tokenize: str | None = None, quantize: str | None = None,
                        corpus: dict | None = None) -> dict:
    """Score ``split`` (or ``src``/``ref``, or a split of ``corpus``) with the checkpoint(s); a multilingual one per
    direction."""
    settings = DecodeSettings.of(decode)
    label = checkpoint_label(ckpt_path)
    check_what_to_score(ckpt_path, split, src, ref, corpus)
    task, dev = load_for_inference(ckpt_path, device, accel, quantize)
    if corpus is not None:
        use_corpus(task, corpus, label)
    out, extra = Path(output_dir), {"bleu_tokenize": bleu_tokenize} if bleu_tokenize else {}
    if task.kind.shape == "sequence" and task.languages.multilingual:
        if src is not None:
            raise ValueError("src= and ref= with a multilingual checkpoint: score its directions by split "
                             "(split=..., tgt_lang=...)")
        from transformer.evaluation.translation import evaluation_plan

        # every direction that has the split, keyed by direction (what training's test_splits records)
        return {metrics["pair"]: {**metrics, "checkpoint": label}
                for metrics in (task.evaluate(s, settings, out, data_dir, mirror_root, dev, direction=d, **extra)
                                for s, d in evaluation_plan(task, [split]))}
    if src is not None:
        if task.kind.shape != "sequence":
            raise ValueError(f"src= and ref= score translations; {label} is {task.kind.what} checkpoint")
        metrics = task.evaluate_files(src, ref, settings, out, dev, **extra)
    else:
        metrics = task.evaluate(split=split, decode_cfg=settings, output_dir=out, data_dir=data_dir,
                                mirror_root=mirror_root, device=dev, **extra)
    metrics["checkpoint"] = label
    return metrics


def check_what_to_score(ckpt_path: str | Sequence[str], split: str, src: str | None, ref: str | None,
                        corpus: dict | None) -> None:
    """One of a split, a file pair (``src`` and ``ref`` together) or a named corpus; a Hugging
    Face folder, which carries no corpus, needs the corpus or the files named."""
    if (src is None) != (ref is None):
        raise ValueError("src= and ref= go together: a source file and its reference translations")
    if corpus is not None and src is not None:
        raise ValueError("data=... and src=/ref= both name what to score: give one")
    from transformer.hub import is_hub_path

    hub = [p for p in checkpoint_paths(ckpt_path) if is_hub_path(p)]
    if hub and corpus is None and src is None:
        raise ValueError(f"{hub[0]} carries no corpus to read split={split} from: name one as training does "
                         f"(data=multi30k, or data=parallel data.src_lang=.. data.tgt_lang=.. data.test=...), "
                         f"or give src= and ref=")


def evaluate_directions(ckpt_path: str | Sequence[str], splits: Sequence[str] | None,
                        decode: DecodeSettings | Mapping[str, Any], output_dir: str | Path,
                        src_lang: str | None = None, tgt_lang: str | None = None,
                        device: str = "auto", accel: str = "none", quantize: str | None = None,
                        data_dir: str = "data/cache", mirror_root: str | None = None,
                        bleu_tokenize: str | None = None) -> list[dict]:
    """A multilingual checkpoint scored on each split in each direction, written to ``summary.json``."""
    from transformer.evaluation.translation import evaluation_plan

    settings = DecodeSettings.of(decode)
    task, dev = load_for_inference(ckpt_path, device, accel, quantize)
    plan = evaluation_plan(task, splits, src_lang, tgt_lang, settings.zero_shot, settings.pivot)
    extra = {"bleu_tokenize": bleu_tokenize} if bleu_tokenize else {}
    results = [{**task.evaluate(split, settings, Path(output_dir), data_dir, mirror_root, dev, direction=direction,
                                **extra), "checkpoint": checkpoint_label(ckpt_path)}
               for split, direction in plan]
    write_text(Path(output_dir) / "summary.json", json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    return results


def _multilingual(ckpt_path) -> bool:
    """Whether the (first) checkpoint records several directions (read without building it)."""
    from transformer.hub import is_hub_path

    first = checkpoint_paths(ckpt_path)[0]
    if is_hub_path(first):
        return False
    from transformer.data.parallel.languages import Languages
    from transformer.tasks.checkpoint import read_checkpoint

    return Languages.of_checkpoint(read_checkpoint(first).get("hyper_parameters") or {}).multilingual


def evaluate_grid(ckpt_path: str | Sequence[str], splits: Sequence[str],
                  decodes: Sequence[DecodeSettings | Mapping[str, Any]], output_dir: str | Path | None = None,
                  **kwargs) -> list[dict]:
    """``evaluate_checkpoint`` on every split with every decoding, written to ``summary.json``."""
    out = Path(output_dir) if output_dir else default_output_dir(ckpt_path)
    results = [evaluate_checkpoint(ckpt_path, split, cfg, out, **kwargs) for split in splits for cfg in decodes]
    write_text(out / "summary.json", json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    return results


def default_output_dir(ckpt_path: str | Sequence[str]) -> Path:
    """``eval/`` (``eval_ensemble/``) in the run folder of the (first) checkpoint."""
    paths = checkpoint_paths(ckpt_path)
    folder = Path(paths[0]).resolve().parent
    run = next((p.parent for p in (folder, *folder.parents) if p.name == "checkpoints"), folder)
    return run / ("eval" if len(paths) == 1 else "eval_ensemble")


def run(cfg: DictConfig) -> dict | list[dict]:
    split = cfg.get("split")
    splits = None if split is None else ([split] if isinstance(split, str) else list(split))
    if cfg.get("src") is None and not cfg.get("data") and _multilingual(cfg.ckpt_path):
        from transformer.evaluation.translation import direction_table

        results = evaluate_directions(
            cfg.ckpt_path, splits, OmegaConf.to_container(cfg.decode, resolve=True),
            cfg.output_dir or default_output_dir(cfg.ckpt_path), cfg.get("src_lang"), cfg.get("tgt_lang"),
            device=cfg.device, accel=cfg.get("accel", "none"), quantize=cfg.get("quantize"), data_dir=cfg.data_dir,
            mirror_root=cfg.mirror_root, bleu_tokenize=cfg.get("bleu_tokenize"))
        print(direction_table(results), file=sys.stderr)
        print(json.dumps(results, indent=2, ensure_ascii=False))
        return results
    if splits is not None and len(splits) != 1:
        raise ValueError(f"split={split}: one split for a bilingual checkpoint")
    if cfg.get("src_lang") is not None or cfg.get("tgt_lang") is not None:
        task, _ = load_for_inference(cfg.ckpt_path, "cpu", "none", None)
        task.languages.check_direction(cfg.get("src_lang"), cfg.get("tgt_lang"))
    corpus = corpus_from_config(cfg.data) if cfg.get("data") else None
    named = (corpus or {}).get("paths") or (corpus or {}).get("sources") or {}  # data.test=...: split null is it
    metrics = evaluate_checkpoint(
        cfg.ckpt_path, splits[0] if splits else "test" if "test" in named else "test_2016_flickr",
        OmegaConf.to_container(cfg.decode, resolve=True),
        cfg.output_dir or default_output_dir(cfg.ckpt_path),
        data_dir=cfg.data_dir, mirror_root=cfg.mirror_root, device=cfg.device, accel=cfg.get("accel", "none"),
        src=cfg.get("src"), ref=cfg.get("ref"), bleu_tokenize=cfg.get("bleu_tokenize"), quantize=cfg.get("quantize"),
        corpus=corpus,
    )
    print(json.dumps(metrics, indent=2, ensure_ascii=False))
    return metrics


main = hydra_entry("eval")(run)

if __name__ == "__main__":
    main()
