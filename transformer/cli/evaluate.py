"""`transformer-evaluate`: score a checkpoint on a split; the model, tokenizers and dataset
come from the checkpoint alone.

    transformer-evaluate ckpt_path=best.ckpt split=test_2016_flickr decode.strategy=beam decode.beam_size=5
    transformer-evaluate ckpt_path=best.ckpt src=news.en ref=news.zh    # any file pair
    transformer-evaluate ckpt_path=hf:Helsinki-NLP/opus-mt-de-en data=multi30k split=test_2016_flickr
    transformer-evaluate ckpt_path=hf:<folder> data=parallel data.src_lang=de data.tgt_lang=en \
        data.test=corpus/test split=test                                 # a corpus named as training names it

A split is read by name from the corpus the checkpoint was trained on (its files, columns and
held-out splits travel in the checkpoint), or from the corpus the command line names with
training's keys (``data=multi30k``, or ``data=parallel`` and ``data.train/valid/test/tests``,
``data.src_lang/tgt_lang``, ``data.format`` ...): what a Marian ``hf:<folder>``, which carries no
corpus, is scored on. BLEU uses the sacreBLEU tokenizer of the target
language (``zh``, ``ja-mecab``/``char``, else ``13a``) unless ``bleu_tokenize=`` says otherwise.

Several checkpoints, ``ckpt_path=[a.ckpt,b.ckpt]``, are evaluated as an ensemble: translation
models with their probabilities averaged at every step, taggers with each word's tag
probabilities averaged (``TaggingTask.ensemble``). Outputs go to ``output_dir``, by default to
``eval/`` (``eval_ensemble/``) in the run folder of the (first) checkpoint, beside the scores
training wrote there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from omegaconf import DictConfig, OmegaConf

from transformer.cli.common import checkpoint_label, checkpoint_paths, hydra_entry, load_for_inference
from transformer.decoding.settings import DecodeSettings
from transformer.files import write_text


#: A data config's keys that name a corpus (``data.parallel.corpus.make_corpus``); the rest
#: (vocabulary, batching, cache) belong to training.
CORPUS_KEYS = ("src_lang", "tgt_lang", "corpus_name", "train", "valid", "test", "tests", "valid_name", "format",
               "columns", "header", "holdout", "holdout_seed", "hub", "bleu_tokenize", "train_files")


def corpus_from_config(data: DictConfig | dict) -> dict:
    """The corpus a data config names with training's keys (``data=multi30k``, or ``data=parallel``
    with its files), as a checkpoint records its own (``TranslationDataModule.corpus``); nothing
    is read yet."""
    from transformer.data.parallel.corpus import check_complete, config_sources, make_corpus

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
    if not hasattr(task, "translator"):
        raise ValueError(f"data=...: a corpus of sentence pairs scores translations; {label} is a "
                         f"{getattr(task, 'task_name', '?')} checkpoint")
    hp = task.hparams
    for key in ("src_lang", "tgt_lang"):
        if hp[key] not in _UNNAMED and hp[key] != corpus[key]:
            raise ValueError(f"data.{key}={corpus[key]}, but {label} translates {hp['src_lang']}-{hp['tgt_lang']}")
    hp["data"], hp["src_lang"], hp["tgt_lang"] = corpus, corpus["src_lang"], corpus["tgt_lang"]


def evaluate_checkpoint(ckpt_path: str | Sequence[str], split: str, decode_cfg: dict, output_dir: str | Path,
                        data_dir: str = "data/cache", mirror_root: str | None = None,
                        device: str = "auto", accel: str = "none", src: str | None = None, ref: str | None = None,
                        bleu_tokenize: str | None = None, quantize: str | None = None,
                        corpus: dict | None = None) -> dict:
    """Load the checkpoint (or the ensemble of several), evaluate ``split`` (of its own corpus, or
    of ``corpus``: :func:`corpus_from_config`) or the ``src`` + ``ref`` file pair (translation
    only), and write outputs under ``output_dir``."""
    DecodeSettings.check(dict(decode_cfg))
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
    task, dev = load_for_inference(ckpt_path, device, accel, quantize)
    if corpus is not None:
        use_corpus(task, corpus, checkpoint_label(ckpt_path))
    extra = {"bleu_tokenize": bleu_tokenize} if bleu_tokenize else {}
    if src is not None:
        if not hasattr(task, "translator"):
            raise ValueError(f"src= and ref= score translations; {checkpoint_label(ckpt_path)} is a "
                             f"{getattr(task, 'task_name', '?')} checkpoint")
        from transformer.evaluation.translation import evaluate_files

        metrics = evaluate_files(task, src, ref, dict(decode_cfg), Path(output_dir), dev, **extra)
    else:
        metrics = task.evaluate(split=split, decode_cfg=dict(decode_cfg), output_dir=Path(output_dir),
                                data_dir=data_dir, mirror_root=mirror_root, device=dev, **extra)
    metrics["checkpoint"] = checkpoint_label(ckpt_path)
    return metrics


def evaluate_grid(ckpt_path: str | Sequence[str], splits: Sequence[str], decodes: Sequence[dict],
                  output_dir: str | Path | None = None, **kwargs) -> list[dict]:
    """``evaluate_checkpoint`` on every split with every decoding configuration, in that order;
    the list of metrics is also written to ``summary.json`` in ``output_dir`` (default: beside
    the checkpoint, see ``default_output_dir``). ``kwargs`` go to ``evaluate_checkpoint``."""
    out = Path(output_dir) if output_dir else default_output_dir(ckpt_path)
    results = [evaluate_checkpoint(ckpt_path, split, cfg, out, **kwargs) for split in splits for cfg in decodes]
    write_text(out / "summary.json", json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    return results


def default_output_dir(ckpt_path: str | Sequence[str]) -> Path:
    """``eval/`` (``eval_ensemble/`` for several checkpoints) in the run folder of the (first)
    checkpoint, where training writes its own test scores: a checkpoint in
    ``<run>/checkpoints/`` (or a subfolder of it) belongs to ``<run>``; any other checkpoint is
    its folder's."""
    paths = checkpoint_paths(ckpt_path)
    folder = Path(paths[0]).resolve().parent
    run = next((p.parent for p in (folder, *folder.parents) if p.name == "checkpoints"), folder)
    return run / ("eval" if len(paths) == 1 else "eval_ensemble")


def run(cfg: DictConfig) -> dict:
    corpus = corpus_from_config(cfg.data) if cfg.get("data") else None
    metrics = evaluate_checkpoint(
        cfg.ckpt_path, cfg.split, OmegaConf.to_container(cfg.decode, resolve=True),
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
