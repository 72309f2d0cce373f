"""Tiny checkpoints of every kind the server takes (untrained, built in seconds), the
``models=[...]`` line serving them, and configs composed as the commands compose theirs."""

from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import open_dict

from model_configs import model_config

from transformer.data.core.tokenizer import SubwordTokenizer
from transformer.tasks.checkpoint import TASK_KEY

SENTENCES = ["ein hund läuft über die wiese .", "a dog runs across the meadow .",
             "zwei männer spielen fußball .", "two men play football ."] * 5
TINY_AT = {"_target_": "transformer.models.EncoderDecoder", "d_model": 16, "n_heads": 2, "n_encoder_layers": 1,
           "n_decoder_layers": 2, "d_ff": 32, "dropout": 0.0, "max_len": 48}
# One line per kind: id -> what the entry of ``models=[...]`` adds besides id and ckpt_path.
ENTRIES = {"at": "decode:greedy", "beam": "decode:beam,beam_size:3", "nat": "decode:mask_predict,iterations:3",
           "ctc": "decode:ctc_one_pass,shortlist:null", "pos": "", "sent": "top_k:2"}


def save(task, path: Path, kind: str) -> str:
    ckpt = {"state_dict": task.state_dict(), "hyper_parameters": dict(task.hparams), TASK_KEY: kind}
    task.on_save_checkpoint(ckpt)
    torch.save(ckpt, path)
    return str(path)


def build_checkpoints(folder: Path) -> dict[str, str]:
    """One checkpoint per kind: autoregressive, Mask-Predict, CTC, tagger, classifier."""
    from transformer.tasks.classification import ClassificationTask
    from transformer.tasks.ctc import CTCTranslationTask
    from transformer.tasks.nat import NATTranslationTask
    from transformer.tasks.tagging import TaggingTask
    from transformer.tasks.translation import TranslationTask

    torch.manual_seed(0)
    tok = SubwordTokenizer.train(SENTENCES, vocab_size=300)
    ids = dict(vocab_size=tok.vocab_size, pad_id=tok.pad_id, bos_id=tok.bos_id, eos_id=tok.eos_id, src_lang="de",
               tgt_lang="en", tokenizers={"src": tok.to_str(), "tgt": tok.to_str()})
    nat = dict(model_config("nat_tiny"), d_model=16, d_ff=32, max_len=64, max_length=64, max_offset=8)
    ctc = dict(model_config("nat_ctc_tiny"), d_model=16, d_ff=32, max_len=96)
    small = {"d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32, "dropout": 0.0, "max_len": 32}
    pooling = {"_target_": "transformer.models.pooling.AttentionPooling", "_partial_": True}
    return {
        "translation": save(TranslationTask(model=TINY_AT, **ids), folder / "at.ckpt", "translation"),
        "nat": save(NATTranslationTask(model=nat, mask_id=tok.mask_id, **ids), folder / "nat.ckpt", "nat"),
        "ctc": save(CTCTranslationTask(model=ctc, mask_id=tok.mask_id, **ids), folder / "ctc.ckpt", "nat_ctc"),
        "tagger": save(TaggingTask(model={"_target_": "transformer.models.tagger.Tagger", **small},
                                   piece_vocab_size=tok.vocab_size, pad_id=tok.pad_id, tags=["DET", "NOUN", "VERB"],
                                   data={"name": "gum", "tagset": "upos"}, tokenizer=tok.to_str(),
                                   train_words=["a", "dog"]), folder / "pos.ckpt", "tagging"),
        "classifier": save(ClassificationTask(
            model={"_target_": "transformer.models.classifier.SequenceClassifier", **small, "pooling": pooling},
            piece_vocab_size=tok.vocab_size, pad_id=tok.pad_id, labels=["neg", "neu", "pos"],
            data={"name": "toy", "paths": {}}, tokenizer=tok.to_str()), folder / "sent.ckpt", "classification"),
    }


def models_override(checkpoints: dict[str, str]) -> str:
    """``models=[...]`` serving every checkpoint (the autoregressive one twice: greedy, beam)."""
    paths = {"at": "translation", "beam": "translation", "nat": "nat", "ctc": "ctc", "pos": "tagger",
             "sent": "classifier"}
    entries = [",".join(filter(None, [f"id:{i}", f"ckpt_path:{checkpoints[paths[i]]}", extra]))
               for i, extra in ENTRIES.items()]
    return "models=[" + ",".join("{" + e + "}" for e in entries) + "]"


def serve_cfg(*overrides: str):
    """``conf/serve.yaml`` composed with ``overrides``, as transformer-serve composes it."""
    from transformer.cli.common import check_overrides

    return check_overrides("serve", ["device=cpu", *overrides])


def cli_cfg(name: str, *overrides: str):
    """A command's config (``decode``, ``tag``, ``classify``) for an in-process ``run(cfg)``."""
    from transformer.cli.common import check_overrides

    cfg = check_overrides(name, ["device=cpu", *overrides])
    with open_dict(cfg):
        cfg.pop("hydra", None)
    return cfg
