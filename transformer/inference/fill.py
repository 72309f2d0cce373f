"""Fill-mask: the pieces a masked language model puts in place of each ``[MASK]`` of raw text,
with their probabilities, batched under a token budget, results in input order.

Shape legend: B sentences in a batch, T pieces, M masks in the batch, V vocabulary.

A sentence is read as the model was trained on it: the text between the markers is tokenized
as one sentence (the text after a marker continues it, with no space added), the whitespace
before a marker is left to the filler (a byte-level piece carries its own leading space, as
``Ġgreat`` does), and each marker becomes one ``<mask>`` piece: a filler is one piece, as in
Hugging Face's ``pipeline("fill-mask")``. A pretrained family's tokenizer frames the sentence as
its model was trained (``[CLS] … [SEP]``, ``SubwordTokenizer.frame``). Special tokens are never
proposed; the probabilities are a softmax over the pieces that may be proposed, or, for a
pretrained family's model, over its whole vocabulary, as the pipeline reports them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn

from transformer.data.core.batching import pad_ids, token_budget_batches

#: What marks a piece to fill in the input: BERT's spelling, or the tokenizer's own.
MASK_MARKERS = ("[MASK]", "<mask>")
_MARKER = re.compile("|".join(re.escape(m) for m in MASK_MARKERS))


@dataclass
class Filler:
    """One candidate for one mask: the piece's text (``token_str``, surrounding space
    stripped), its id (``token``), its probability (``score``) and the input with this mask
    filled by it, the other masks left as they were (``sequence``; a pretrained family's
    decoded as the pipeline decodes it): the fields of Hugging Face's fill-mask pipeline."""

    token_str: str
    token: int
    score: float
    sequence: str


class MaskFiller:
    """Top-k fillers of every mask of raw sentences.

    Args:
        model: a ``MaskedLanguageModel`` (``forward(src (B, T)) -> logits (B, T, V)``).
        tokenizer: its tokenizer (a ``SubwordTokenizer``).
        max_len: the most pieces the model reads; a longer sentence is cut there (``truncated``
            counts them), and a mask past the cut is an error naming the sentence.
        max_tokens: pieces per batch (padding included).
        device: where the inputs go; ``None``: the model's.
    """

    def __init__(self, model: nn.Module, tokenizer, max_len: int = 512, max_tokens: int = 4096,
                 device: str | torch.device | None = None):
        self.model, self.tokenizer = model, tokenizer
        self.max_len, self.max_tokens = max_len, max_tokens
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        self.mask_id = tokenizer.mask_id
        self.truncated = 0

    def encode(self, text: str) -> tuple[list[int], list[int]]:
        """``(piece ids, positions of the masks)`` of one sentence (see the module docstring)."""
        segments = _MARKER.split(text)
        ids: list[int] = []
        positions: list[int] = []
        for i, segment in enumerate(segments):
            if i < len(segments) - 1:
                segment = segment.rstrip()  # the filler brings the space before it
            if segment:
                ids += self.tokenizer.encode(segment) if i == 0 else self.tokenizer.encode_continuation(segment)
            if i < len(segments) - 1:
                positions.append(len(ids))
                ids.append(self.mask_id)
        prefix, _ = self.tokenizer.framing
        return self.tokenizer.frame(ids), [p + len(prefix) for p in positions]

    def _raw_piece(self, token: int) -> str:
        """A piece's text with its own leading space (``Ġgreat`` -> `` great``)."""
        return self.tokenizer.backend.decode([token], skip_special_tokens=False)

    def _sequence(self, text: str, k: int, token: int, ids: list[int], positions: list[int]) -> str:
        """The ``k``-th mask of ``text`` (read as ``ids``, masks at ``positions``) filled by
        ``token``: the text with its marker replaced by the piece, for a tokenizer trained here
        (which decodes to the text it read); for a pretrained family's, the pieces decoded as the
        fill-mask pipeline decodes them, so WordPiece joins the filler to no word and tidies the
        spaces before punctuation as ``transformers`` does (the framing and the other masks shown
        where there are several)."""
        if not self.tokenizer.trained_here:
            filled = list(ids)
            filled[positions[k]] = token
            pad = self.tokenizer.pad_id
            return self.tokenizer.backend.decode([i for i in filled if i != pad],
                                                 skip_special_tokens=len(positions) == 1)
        spans = list(_MARKER.finditer(text))
        before, after = text[: spans[k].start()].rstrip(), text[spans[k].end():]
        filled_text = before + self._raw_piece(token)
        return (filled_text if before else filled_text.lstrip()) + after

    @torch.no_grad()
    def fill(self, texts: Sequence[str], top_k: int = 5) -> list[list[list[Filler]]]:
        """For each sentence, for each of its masks in order, the ``top_k`` most probable
        fillers, best first. A sentence without a marker is a ``ValueError`` naming it (1-based)."""
        self.truncated = 0
        encoded = []
        for n, text in enumerate(texts, 1):
            ids, positions = self.encode(text)
            if not positions:
                raise ValueError(f"line {n}: no {' or '.join(MASK_MARKERS)} to fill in {text!r}")
            if len(ids) > self.max_len:
                self.truncated += 1
                if positions[-1] >= self.max_len - len(self.tokenizer.framing[1]):
                    raise ValueError(f"line {n}: a mask at piece {positions[-1] + 1}, past the {self.max_len} pieces "
                                     f"the model reads")
                suffix = self.tokenizer.framing[1]
                ids = ids[: self.max_len - len(suffix)] + suffix
            encoded.append((ids, positions))
        self.model.eval()
        special = torch.tensor(sorted(self.tokenizer.special_ids), device=self.device)
        k = min(top_k, self.tokenizer.vocab_size - len(special))
        out: list[list[list[Filler]]] = [[] for _ in texts]
        for batch in token_budget_batches([len(ids) for ids, _ in encoded], self.max_tokens):
            src = pad_ids([encoded[i][0] for i in batch], self.tokenizer.pad_id).to(self.device)  # (B, T)
            rows = torch.tensor([r for r, i in enumerate(batch) for _ in encoded[i][1]], device=self.device)  # (M,)
            cols = torch.tensor([p for i in batch for p in encoded[i][1]], device=self.device)  # (M,)
            logits = self.model(src)[rows, cols].float()  # (B, T, V) -> (M, V)
            if self.tokenizer.trained_here:
                logits[:, special] = float("-inf")  # never propose a special token
                probs = torch.softmax(logits, dim=-1)  # (M, V)
            else:
                probs = torch.softmax(logits, dim=-1)  # (M, V), the pipeline's probabilities
                probs[:, special] = -1.0  # never propose a special token
            probs, ids = probs.topk(k, dim=-1)  # (M, k)
            probs, ids = probs.tolist(), ids.tolist()
            m = 0
            for i in batch:
                for j in range(len(encoded[i][1])):
                    out[i].append([Filler(self.tokenizer.decode([t]).strip(), t, p,
                                          self._sequence(texts[i], j, t, *encoded[i]))
                                   for t, p in zip(ids[m], probs[m])])
                    m += 1
        return out


__all__ = ["MASK_MARKERS", "Filler", "MaskFiller"]
