"""Capture attention weights for a model's own outputs, and read alignments from them.

Shape legend: B sentences, H heads, S source tokens (EOS included), T target steps: the decoder
input is BOS + hypothesis (T tokens) and it predicts hypothesis + EOS (T tokens).

The weights come from one teacher-forced pass over the final hypothesis with
``need_weights=True``: row t of every decoder matrix is what cached decoding computed at step
t, when the prefix was ``BOS y_1 .. y_{t-1}`` (causal masking makes each row independent of
later tokens), so search code needs no hooks.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import torch
from torch import Tensor, nn

from transformer.data.parallel.languages import rejoin_tag
from transformer.modules.attention import pad_mask


@contextlib.contextmanager
def capture_encoder_attention(encoder: nn.Module) -> Iterator[list[list[Tensor]]]:
    """While open, every ``encoder.forward_embeddings`` call also records its per-layer
    self-attention weights ``[(B, H, S, S)] * n_layers`` in the yielded list (one entry per
    call); its outputs are unchanged. Works under any caller (``EncoderDecoder.encode``,
    ``Tagger.word_vectors``), so their input handling is not repeated here."""
    calls: list[list[Tensor]] = []
    original = encoder.forward_embeddings

    def recording(x, src_pad_mask=None, need_weights=False):
        out, weights = original(x, src_pad_mask, need_weights=True)
        calls.append(weights)
        return (out, weights) if need_weights else out

    encoder.forward_embeddings = recording  # an instance attribute shadows the method
    try:
        yield calls
    finally:
        del encoder.forward_embeddings


@dataclass
class TranslationAttention:
    """Per-layer weights of a batch: ``encoder`` ``[(B, H, S, S)]``, ``decoder`` (masked
    self-attention) ``[(B, H, T, T)]``, ``cross`` ``[(B, H, T, S)]``; ``tgt_in (B, T)`` the
    teacher-forced decoder input."""

    encoder: list[Tensor]
    decoder: list[Tensor]
    cross: list[Tensor]
    tgt_in: Tensor = field(repr=False)


def decoder_input(hyps: Sequence[Sequence[int]], bos_id: int | Tensor, pad_id: int) -> Tensor:
    """``(B, T)``: BOS + each hypothesis, right-padded (T = 1 + longest hypothesis); ``bos_id``
    may be one start token per row ``(B,)`` (a decoder-side target tag, ``data.tag_side``)."""
    t = 1 + max((len(h) for h in hyps), default=0)
    tgt_in = torch.full((len(hyps), t), pad_id, dtype=torch.long)  # (B, T)
    tgt_in[:, 0] = bos_id.cpu() if isinstance(bos_id, Tensor) else bos_id
    for b, h in enumerate(hyps):
        tgt_in[b, 1: 1 + len(h)] = torch.tensor(list(h), dtype=torch.long)
    return tgt_in


@torch.no_grad()
def translation_attention(model: nn.Module, src: Tensor, hyps: Sequence[Sequence[int]],
                          bos_id: int | Tensor, pad_id: int) -> TranslationAttention:
    """Teacher-forced weights of an ``EncoderDecoder`` for ``src (B, S)`` (padded, EOS
    included) and its hypotheses (ids without BOS/EOS, as search returns them)."""
    if not hasattr(model, "decoder") or not hasattr(model, "encoder") or not hasattr(model.decoder, "init_cache"):
        raise ValueError(f"attention capture needs an autoregressive encoder-decoder, got {type(model).__name__} "
                         f"(ensembles and non-autoregressive models are not supported)")
    src_pad_mask = pad_mask(src, pad_id)  # (B, S)
    tgt_in = decoder_input(hyps, bos_id, pad_id).to(src.device)  # (B, T)
    memory, enc_w = model.encoder(src, src_pad_mask, need_weights=True)  # (B, S, D), [(B, H, S, S)]
    _, dec_w = model.decoder(tgt_in, memory, src_pad_mask, pad_mask(tgt_in, pad_id), need_weights=True)
    return TranslationAttention(
        encoder=[w.float().cpu() for w in enc_w],
        decoder=[sw.float().cpu() for sw, _ in dec_w],
        cross=[cw.float().cpu() for _, cw in dec_w],
        tgt_in=tgt_in.cpu(),
    )


def alignment_pairs(cross: Tensor, n_src: int, n_tgt: int) -> list[tuple[int, int]]:
    """``(i, j)`` pairs: target token j (0-based, of ``n_tgt``) with the source token i it
    attends to most, from head-averaged cross-attention ``cross (T, S)`` (row j is the step
    that produced target token j). Only the ``n_src`` real source tokens compete (EOS and
    padding excluded); the final EOS step gets no pair."""
    if n_tgt == 0 or n_src == 0:
        return []
    best = cross[:n_tgt, :n_src].argmax(dim=-1)  # (n_tgt,)
    return [(int(i), j) for j, i in enumerate(best.tolist())]


def format_alignment(pairs: Sequence[tuple[int, int]]) -> str:
    """Pharaoh format, as word-alignment tools read and write it: ``"0-0 1-2 3-1"``
    (source index - target index)."""
    return " ".join(f"{i}-{j}" for i, j in pairs)


def sentence_alignments(model: nn.Module, src: Tensor, hyps: Sequence[Sequence[int]], bos_id: int | Tensor,
                        eos_id: int, pad_id: int, layer: int | None = None) -> list[str]:
    """One Pharaoh line per (source row, hypothesis) from the head-averaged cross-attention of
    decoder layer ``layer`` (default: the last). Source positions count subword pieces."""
    att = translation_attention(model, src, hyps, bos_id, pad_id)
    n_layers = len(att.cross)
    index = n_layers - 1 if layer is None else int(layer)
    if not -n_layers <= index < n_layers:
        raise ValueError(f"alignment layer {layer} out of range: the decoder has {n_layers} layers")
    cross = att.cross[index].mean(dim=1)  # (B, H, T, S) -> (B, T, S)
    real = src.ne(pad_id) & src.ne(eos_id)  # (B, S)
    return [format_alignment(alignment_pairs(cross[b], int(real[b].sum()), len(h))) for b, h in enumerate(hyps)]


def refuse_two_id_start(hp, what: str) -> None:
    """A ``ValueError`` naming ``what`` for a pretrained family's model (``data.tag_side=codes``),
    whose decoder starts from two ids (EOS, then the target's code): the views here take one."""
    from transformer.data.parallel.languages import Languages

    if Languages.of_checkpoint(hp).coded:
        raise ValueError(f"{what}: not for an M2M100, NLLB or mBART-50 model, whose decoder starts from two ids "
                         f"(EOS, then the target language's code)")


def translate_with_alignments(task, translator, sentences: Sequence[str],
                              layer: int | None = None) -> tuple[list[list[tuple[str, float]]], list[list[str]]]:
    """``translator.translate(sentences)`` plus, per sentence and n-best hypothesis, its
    Pharaoh alignment line (``sentence_alignments``); a blank input gets ``[""]``.

    ``translator`` is ``task.translator(...)``; its search is wrapped for the call, so batching,
    truncation and ordering stay the translator's own. Rows are matched back to sentences by
    their source ids (equal sources give equal hypotheses and alignments).
    """
    hp = task.hparams
    refuse_two_id_start(hp, "decode.print_alignment=true")
    by_source: dict[tuple[int, ...], list[str]] = {}
    source_ids: dict[str, list[int]] = {}
    search, encode = translator.search, translator.encode

    def recording_encode(text: str) -> list[int]:
        source_ids[text] = ids = encode(text)
        return ids

    def aligning_search(src: Tensor, start: Tensor | None = None):
        results = search(src) if start is None else search(src, start=start)  # per row: [(ids, score)] * n_best
        counts = torch.tensor([len(nbest) for nbest in results], device=src.device)
        hyps = [ids for nbest in results for ids, _ in nbest]
        first = hp.bos_id if start is None else start.repeat_interleave(counts, dim=0)  # each row's start token
        lines = sentence_alignments(task.model, src.repeat_interleave(counts, dim=0), hyps,
                                    first, hp.eos_id, hp.pad_id, layer) if hyps else []
        at = 0
        starts = [None] * len(results) if start is None else start.tolist()
        for row, begin, nbest in zip(src.tolist(), starts, results):
            key = rejoin_tag([t for t in row if t not in (hp.pad_id, hp.eos_id)], begin)
            by_source[key] = lines[at: at + len(nbest)]
            at += len(nbest)
        return results

    translator.search, translator.encode = aligning_search, recording_encode
    try:
        nbest = translator.translate(sentences)
    finally:
        translator.search, translator.encode = search, encode
    aligned = [by_source.get(tuple(source_ids[s]), [""]) if s in source_ids else [""] for s in sentences]
    return nbest, aligned


def with_alignments(lines: list[str], alignments: list[list[str]], n_best: int) -> list[str]:
    """Append `` ||| <alignment>`` to each output line of ``cli.decode.format_output``
    (one line per input, or one per n-best hypothesis)."""
    flat = [a[0] if a else "" for a in alignments] if n_best <= 1 else [x for a in alignments for x in a]
    return [f"{line} ||| {a}" for line, a in zip(lines, flat)]
