"""A tiny multilingual translation checkpoint (untrained, built in a second): the ``<2xx>``
target tags as special tokens of a joint vocabulary, the model's embedding rows for them, and
the directions recorded in ``hyper_parameters`` as ``data.parallel.languages`` reads them."""

from __future__ import annotations

from pathlib import Path

import torch

from transformer.data.core.tokenizer import SubwordTokenizer
from transformer.data.parallel.languages import MULTI, add_tags
from transformer.tasks.checkpoint import TASK_KEY

SENTENCES = ["ein hund läuft über die wiese .", "a dog runs across the meadow .",
             "un chien court dans le pré .", "zwei männer spielen fußball .", "two men play football .",
             "deux hommes jouent au football ."] * 5
# de→fr is missing on purpose: it is the direction a pivot through en reaches.
DIRECTIONS = ["de-en", "en-de", "en-fr", "fr-en"]
# Post-norm layers, as Marian's: a Hugging Face folder takes the model.
TINY = {"_target_": "transformer.models.EncoderDecoder", "d_model": 16, "n_heads": 2, "n_encoder_layers": 1,
        "n_decoder_layers": 2, "d_ff": 32, "dropout": 0.0, "max_len": 48, "norm_first": False}


def tagged_tokenizer(languages=("de", "en", "fr")) -> SubwordTokenizer:
    """A BPE vocabulary with ``<2xx>`` of each language added as a special token."""
    return add_tags(SubwordTokenizer.train(SENTENCES, vocab_size=300), languages)


def multilingual_task(seed: int = 0, directions=DIRECTIONS, tag_side: str = "source"):
    """An untrained ``TranslationTask`` over ``directions`` (eval mode) reading its target tag
    on ``tag_side`` (``data.tag_side``)."""
    from transformer.tasks.translation import TranslationTask

    torch.manual_seed(seed)
    tok = tagged_tokenizer()
    return TranslationTask(model=TINY, vocab_size=tok.vocab_size, pad_id=tok.pad_id, bos_id=tok.bos_id,
                           eos_id=tok.eos_id, src_lang=MULTI, tgt_lang=MULTI, data={"directions": list(directions), "tag_side": tag_side},
                           tokenizers={"src": tok.to_str(), "tgt": tok.to_str()}).eval()


def save_checkpoint(task, path: Path) -> str:
    """``task`` as a checkpoint file ``load_task`` reads."""
    ckpt = {"state_dict": task.state_dict(), "hyper_parameters": dict(task.hparams), TASK_KEY: "translation"}
    task.on_save_checkpoint(ckpt)
    torch.save(ckpt, path)
    return str(path)
