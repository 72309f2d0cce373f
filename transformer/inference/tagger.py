"""Batched tagging of pre-tokenized sentences: one tag per word, input order kept, with one
tagger model or the mean of several (each reading the words with its own tokenizer).

Shape legend: B units (sentences, or word-aligned chunks of long ones), T pieces,
W words, C tags.
"""

from __future__ import annotations

import re
from typing import Sequence

import torch
from torch import nn

from transformer.data.core.batching import token_budget_batches

# A member of a tagger: its model, the tokenizer it reads words with, and how many pieces
# its encoder takes at once (longer sentences are tagged in chunks).
Member = tuple[nn.Module, object, int]
_TOKEN_SEP = re.compile(r"[ \t]+")


def split_tokens(line: str) -> list[str]:
    """Tokens of a pre-tokenized text line: runs of spaces and tabs separate tokens;
    a blank or whitespace-only line has none."""
    return [t for t in _TOKEN_SEP.split(line.strip(" \t")) if t]


def chunk_sentence(word_ids: Sequence[int], max_len: int) -> list[tuple[int, int]]:
    """Split a sentence's pieces into consecutive ``[start, end)`` piece spans of at most
    ``max_len`` pieces that never cut a word (a word longer than ``max_len`` keeps only
    its first ``max_len`` pieces: its first piece is what ``first`` pooling reads anyway).

    Sentences longer than the model's positional range are tagged in such pieces instead of
    being dropped or crashing.
    """
    spans: list[tuple[int, int]] = []
    start, n = 0, len(word_ids)
    while start < n:
        end = min(start + max_len, n)
        if end < n and word_ids[end] == word_ids[end - 1]:
            # Back off to the start of the word that straddles the boundary.
            cut = end
            while cut > start and word_ids[cut - 1] == word_ids[end]:
                cut -= 1
            if cut > start:
                end = cut
            else:  # one word longer than max_len: keep its first pieces, skip the rest
                spans.append((start, end))
                while end < n and word_ids[end] == word_ids[start]:
                    end += 1
                start = end
                continue
        spans.append((start, end))
        start = end
    return spans


def model_max_len(model: nn.Module, configured: int) -> int:
    """The most pieces ``model``'s encoder takes: its learned position table's size (or the
    encoder's own limit), else the ``configured`` model ``max_len``."""
    enc = getattr(model, "encoder", None)
    for obj in (getattr(enc, "positional", None), enc, model):
        n = getattr(obj, "max_len", None)
        if isinstance(n, int) and n > 0:
            return n
    return configured


def _units(tokenizer, sentences: Sequence[Sequence[str]], max_len: int) -> list[tuple[int, int, list[int], list[int]]]:
    """``(sentence index, first word index, piece ids, word ids relative to the unit)`` of
    every chunk of every non-empty sentence."""
    units = []
    for i, words in enumerate(sentences):
        if not words:
            continue
        ids, wids = tokenizer.encode_words(list(words))
        prefix, suffix = tokenizer.framing  # a pretrained family's [CLS] … [SEP] around each chunk
        for a, b in chunk_sentence(wids, max_len - len(prefix) - len(suffix)):
            first = wids[a]
            units.append((i, first, *tokenizer.frame_words(ids[a:b], [w - first for w in wids[a:b]])))
    return units


@torch.no_grad()
def word_probabilities(member: Member, sentences: Sequence[Sequence[str]], max_tokens: int = 4096,
                       device: str | torch.device | None = None) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
    """Per sentence, one model's ``(n_words, C)`` CPU tensor of main-tag probabilities, and
    ``(n_words, C_aux)`` auxiliary ones (``None`` without an auxiliary head)."""
    model, tokenizer, max_len = member
    if tokenizer is None:
        raise ValueError("this checkpoint has no tokenizer; it cannot tag raw words")
    device = torch.device(device) if device is not None else next(model.parameters()).device
    was_training = model.training
    model.eval()
    n_aux = model.n_aux_tags if model.aux_classifier is not None else 0
    heads = [model.n_tags] + ([n_aux] if n_aux else [])
    out = [[torch.zeros(len(words), n) for words in sentences] for n in heads]
    units = _units(tokenizer, sentences, max_len)
    for batch in token_budget_batches([len(u[2]) for u in units], max_tokens):
        rows = [units[k] for k in batch]
        t = max(len(r[2]) for r in rows)
        src = torch.full((len(rows), t), tokenizer.pad_id, dtype=torch.long)  # (B, T)
        word_ids = torch.full((len(rows), t), -1, dtype=torch.long)  # (B, T)
        for r, (_, _, ids, wids) in enumerate(rows):
            src[r, : len(ids)] = torch.tensor(ids)
            word_ids[r, : len(wids)] = torch.tensor(wids)
        logits = model.forward_all(src.to(device), word_ids.to(device))  # (B, W, C), (B, W, C') or None
        for head, head_logits in zip(out, logits):
            probs = torch.softmax(head_logits.float(), dim=-1).cpu()  # (B, W, C)
            for (i, first, _, wids), p in zip(rows, probs):
                n = max(wids) + 1  # framing pieces (word -1) come after the last word's
                head[i][first: first + n] = p[:n]
    model.train(was_training)
    return out[0], (out[1] if len(out) > 1 else None)


def _argmax_tags(probs: list[torch.Tensor], tags: Sequence[str]) -> list[list[str]]:
    return [[tags[i] for i in p.argmax(-1).tolist()] for p in probs]


class WordTagger:
    """Pre-tokenized sentences in, one tag per word out, in input order.

    Empty sentences give ``[]``; sentences with more pieces than a model's positional range
    are tagged in word-aligned chunks. With several members each word's probabilities are
    the mean of theirs (``TaggingTask.ensemble``).

    Args:
        members: ``(model, tokenizer, max_len)`` of each model.
        tags: the main tag strings (column ``i`` of the probabilities is ``tags[i]``).
        field: which annotation the main tags are (``upos``, ``xpos`` or ``chunk``).
        aux_tags, aux_field: the same for the auxiliary head; empty / ``None``: main tags only.
        max_tokens: padded-piece budget of one batch. device: where the models run (``None``:
            where their parameters are).
    """

    def __init__(self, members: Sequence[Member], tags: Sequence[str], field: str,
                 aux_tags: Sequence[str] = (), aux_field: str | None = None,
                 max_tokens: int = 4096, device: str | torch.device | None = None) -> None:
        self.members, self.tags, self.tagset = list(members), list(tags), field
        self.aux_tags, self.aux_field = list(aux_tags), (aux_field if aux_tags else None)
        self.max_tokens, self.device = max_tokens, device

    def head_probabilities(self, sentences: Sequence[Sequence[str]]) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
        """Per sentence ``(n_words, C)`` main-tag probabilities, and ``(n_words, C_aux)``
        auxiliary ones (``None`` without auxiliary tags); the means over the members."""
        parts = [word_probabilities(m, sentences, self.max_tokens, self.device) for m in self.members]
        main = [sum(ps) / len(parts) for ps in zip(*(p[0] for p in parts))]
        if not self.aux_tags:
            return main, None
        return main, [sum(ps) / len(parts) for ps in zip(*(p[1] for p in parts))]

    def tag_probabilities(self, sentences: Sequence[Sequence[str]]) -> list[torch.Tensor]:
        """Per sentence, a ``(n_words, C)`` CPU tensor of main-tag probabilities (columns in
        ``tags`` order); ``tag`` takes their argmax."""
        return self.head_probabilities(sentences)[0]

    def tag(self, sentences: Sequence[Sequence[str]]) -> list[list[str]]:
        """The main tags of every word."""
        return _argmax_tags(self.tag_probabilities(sentences), self.tags)

    def tag_fields(self, sentences: Sequence[Sequence[str]]) -> dict[str, list[list[str]]]:
        """Like ``tag``, keyed by the annotation each head predicts: the main tags, and with
        auxiliary tags those too, from the same encoder pass."""
        main, aux = self.head_probabilities(sentences)
        out = {self.tagset: _argmax_tags(main, self.tags)}
        if aux is not None:
            out[self.aux_field] = _argmax_tags(aux, self.aux_tags)
        return out


__all__ = ["Member", "WordTagger", "chunk_sentence", "model_max_len", "split_tokens", "word_probabilities"]
