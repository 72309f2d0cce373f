"""A tiny translation task trained for a few seconds on a slice of Multi30k de→en, in process:
big enough to emit EOS and real words, small enough for the default suite (export parity,
alignments, inspection)."""

from __future__ import annotations

import functools
import tempfile

import torch

from transformer.data.core.batching import TranslationCollator
from transformer.data.core.tokenizer import SubwordTokenizer
from transformer.data.parallel.corpus import multi30k, read_pairs
from transformer.tasks.translation import TranslationTask

TINY_MODEL = dict(
    _target_="transformer.models.EncoderDecoder", d_model=32, n_heads=2, n_encoder_layers=1,
    n_decoder_layers=1, d_ff=64, dropout=0.0, norm_first=True, max_len=256,
)


def multi30k_slice(mirror_root, split: str, n: int, cache_dir) -> list[tuple[str, str]]:
    return read_pairs(multi30k("de", "en"), split, str(cache_dir), str(mirror_root))[:n]


def tiny_task(pairs: list[tuple[str, str]], steps: int = 150, vocab_size: int = 400,
              **model_overrides) -> TranslationTask:
    """A ``TranslationTask`` (joint BPE vocabulary) trained ``steps`` Adam steps of 32 pairs,
    returned in eval mode."""
    torch.manual_seed(0)
    tok = SubwordTokenizer.train([s for pair in pairs for s in pair], vocab_size)
    task = TranslationTask(
        model=dict(TINY_MODEL, **model_overrides), vocab_size=tok.vocab_size, pad_id=tok.pad_id,
        bos_id=tok.bos_id, eos_id=tok.eos_id, src_lang="de", tgt_lang="en",
        tokenizers={"src": tok.to_str(), "tgt": tok.to_str()},
    )
    collate = TranslationCollator(tok.pad_id, tok.bos_id, tok.eos_id)
    data = [{"src": tok.encode(s), "tgt": tok.encode(t), "index": i} for i, (s, t) in enumerate(pairs)]
    opt = torch.optim.Adam(task.model.parameters(), lr=3e-3)
    task.train()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: a second thread only adds contention
    try:
        _train(task, data, collate, opt, steps, tok.pad_id)
    finally:
        torch.set_num_threads(threads)
    return task.eval()


def _train(task, data, collate, opt, steps: int, pad_id: int) -> None:
    for step in range(steps):
        batch = collate([data[(step * 32 + j) % len(data)] for j in range(32)])
        logits = task.model(batch["src"], batch["tgt_in"])  # (B, T, V)
        loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch["tgt_out"], ignore_index=pad_id)
        opt.zero_grad()
        loss.backward()
        opt.step()


def src_batch(task: TranslationTask, sentences: list[str]) -> torch.Tensor:
    """``(B, S)`` padded source ids with EOS, as ``Translator`` builds them."""
    tok = task.src_tokenizer
    collate = TranslationCollator(tok.pad_id, tok.bos_id, tok.eos_id)
    return collate([{"src": tok.encode(s), "index": i} for i, s in enumerate(sentences)])["src"]


@functools.lru_cache(maxsize=None)
def trained_tiny_task(mirror_root: str, steps: int = 150) -> TranslationTask:
    """``tiny_task`` on the first 1000 Multi30k training pairs, trained once per test session
    (callers must not modify it)."""
    with tempfile.TemporaryDirectory(prefix="multi30k_cache_") as cache_dir:
        pairs = multi30k_slice(mirror_root, "train", 1000, cache_dir)
    return tiny_task(pairs, steps)
