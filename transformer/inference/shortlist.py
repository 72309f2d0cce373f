"""A vocabulary shortlist for one-pass CTC decoding: score only the ids the target side uses.

A joint source-target vocabulary spends many of its ids on the source language: of the 8000 ids
of the Multi30k de-en tokenizer, the (distilled) English training targets use 3208. The one pass
projects each of its ``λ S`` decoder positions onto the whole vocabulary, its largest product;
cut to the ids of a target-side text (``decode.shortlist=<file>``, e.g. the training targets),
the projection is that much smaller. A model trained on those targets gives a token outside
them almost no probability, so the argmax path rarely changes (BLEU measured in BENCHMARKS.md).

Shape legend: D = d_model, V vocabulary, K shortlist size.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from torch import Tensor, nn

from transformer import accel
from transformer.accel.quantize import float_weight, int8_dynamic, is_quantized
from transformer.models.transformer import VocabProjection

CHUNK_LINES = 10_000  # lines tokenized at a time: the file is streamed, never held whole


def shortlist_ids(path: str | Path, tokenizer) -> Tensor:
    """Sorted ``(K,)`` ids of every token in the UTF-8 text file ``path`` (one sentence a line),
    as ``tokenizer`` (``data.tokenizer``: ``encode_batch``) splits it. An unreadable or empty
    file is a ``ValueError`` naming it."""
    seen: set[int] = set()
    chunk: list[str] = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                chunk.append(line.rstrip("\r\n"))
                if len(chunk) == CHUNK_LINES:
                    seen.update(i for ids in tokenizer.encode_batch(chunk) for i in ids)
                    chunk = []
    except UnicodeDecodeError as exc:
        raise ValueError(f"decode.shortlist={path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    seen.update(i for ids in tokenizer.encode_batch(chunk) for i in ids)
    if not seen:
        raise ValueError(f"decode.shortlist={path}: no tokens in it")
    return torch.tensor(sorted(seen), dtype=torch.long)


def restrict_output(model: nn.Module, ids: Tensor) -> nn.Module:
    """A copy of the CTC ``model`` (``models.ctc``) that scores only the ids ``ids (K,)`` and
    the blank; ``model`` is unchanged.

    The copy's output projection holds the ``K`` rows of the original one (int8 again if the
    original was), so its ``decode`` returns ``(B, U, K)`` scores, and ``output_ids`` (sorted,
    the blank included) maps a column back to its vocabulary id (``decoding.ctc.ctc_one_pass``).
    The new projection runs as the old one did: CPU fast path, int8 or plain.
    """
    old = model.decoder.output_proj
    weight = float_weight(old)  # (V, D)
    ids = torch.unique(torch.cat([torch.as_tensor(ids, dtype=torch.long).flatten(),
                                  torch.tensor([model.blank_id])]))  # sorted (K,)
    if int(ids.min()) < 0 or int(ids.max()) >= weight.size(0):
        raise ValueError(f"shortlist ids must lie in 0..{weight.size(0) - 1}")
    out = copy.deepcopy(model).eval()
    proj = VocabProjection(weight.size(1), ids.numel(), device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        proj.weight.copy_(weight[ids.to(weight.device)])  # (K, D)
    proj.requires_grad_(False)
    if is_quantized(old):
        proj = int8_dynamic(nn.Sequential(proj))[0]
    elif accel.is_fast(old):  # the CPU fast path was on: keep it on
        proj = accel.apply(proj, "cpu")
    out.decoder.output_proj = proj
    out.output_ids = ids.to(weight.device)
    return out
