"""Greedy decoding for autoregressive encoder-decoders, batched over sentences with the KV cache.

Shape legend: B sentences, S source length, V vocabulary size.
"""

from __future__ import annotations

import torch
from torch import Tensor

from transformer.decoding.api import Seq2SeqModel
from transformer.decoding.common import ban_tokens, max_last, max_target_lengths, reserve_steps


@torch.inference_mode()
def greedy_search(
    model: Seq2SeqModel,
    src: Tensor,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    max_len_a: float = 1.2,
    max_len_b: int = 10,
    src_lengths: Tensor | None = None,
    max_len: int | None = None,
    return_scores: bool = False,
) -> list[list[int]] | list[tuple[list[int], float]]:
    """Pick the most likely next token at every step until EOS or the length cap.

    Args:
        model: anything with ``encode / init_cache / decode_step`` (``decoding.api.Seq2SeqModel``);
            put it in ``eval()`` mode first, search does not change the mode.
        src: ``(B, S)`` source ids, right-padded with ``pad_id``.
        bos_id, eos_id, pad_id: special ids.
        max_len_a, max_len_b: at most ``floor(a * src_len + b)`` tokens are generated per
            sentence (EOS included), ``src_len`` being its real (non-pad) length.
        src_lengths: ``(B,)`` real source lengths, if already known.
        max_len: hard ceiling on generated tokens whatever the source length (the model's
            positional range).
        return_scores: also return each output's summed log-probability (EOS included).

    Returns:
        Per sentence, in input order, the generated ids without BOS/EOS; with ``return_scores``,
        ``(ids, sum_logprob)`` pairs. A sentence stops growing at its first EOS: later steps
        (still computed for the rest of the batch) are ignored for it. PAD and BOS are never
        chosen (as in fairseq).
    """
    batch = src.size(0)
    max_lens = max_target_lengths(src, pad_id, max_len_a, max_len_b, src_lengths, max_len)  # (B,)
    enc = model.encode(src)
    cache = reserve_steps(model.init_cache(enc), int(max_lens.max()))
    device = src.device

    last = torch.full((batch, 1), bos_id, dtype=torch.long, device=device)  # (A, 1)
    out = torch.full((batch, int(max_lens.max())), pad_id, dtype=torch.long, device=device)  # (B, L)
    scores = torch.zeros(batch, dtype=torch.float64, device=device)  # (B,)
    out_lens = torch.zeros(batch, dtype=torch.long, device=device)  # (B,) tokens kept
    # Sentences still decoding (A of them); finished ones leave the batch, so a batch costs
    # what its sentences need rather than len(batch) x its longest output.
    active = torch.arange(batch, device=device)  # (A,) row in the input batch

    # Without scores only the argmax matters, and it is the same on unnormalised logits: a
    # model that offers them (``decode_step_logits``) saves a log-softmax over V per step.
    step_logits = None if return_scores else getattr(model, "decode_step_logits", None)
    for step in range(out.size(1)):
        if step_logits is not None:
            logits, cache = step_logits(last, enc, cache)  # (A, V)
            _, best = max_last(ban_tokens(logits, (pad_id, bos_id), inplace=True))  # (A,)
        else:
            log_probs, cache = model.decode_step(last, enc, cache)  # (A, V)
            best_lp, best = max_last(ban_tokens(log_probs, (pad_id, bos_id), inplace=True))  # (A,), (A,)
            scores[active] += best_lp.to(torch.float64)
        out[active, step] = best
        is_eos = best == eos_id  # (A,)
        finished = is_eos | (step + 1 >= max_lens[active])  # (A,)
        # an EOS is not part of the output; a sentence cut at its cap keeps this token
        out_lens[active] = torch.where(is_eos, step, step + 1)
        if bool(finished.all()):
            break
        last = best.unsqueeze(1)  # (A,) -> (A, 1)
        if bool(finished.any()):
            keep = (~finished).nonzero().squeeze(1)  # (A',) rows that go on
            active, last = active[keep], last[keep]
            enc, cache = enc.index_select(keep), cache.reorder(keep)

    tokens = [row[:n] for row, n in zip(out.tolist(), out_lens.tolist())]
    if return_scores:
        return list(zip(tokens, scores.tolist()))
    return tokens
