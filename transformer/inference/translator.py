"""Batched translation of raw sentences with any search function.

Shape legend: B sentences, S source tokens.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from transformer.data.core.batching import TranslationCollator, token_budget_batches
from transformer.data.parallel.languages import tag_ids

# A search function maps a padded source batch (B, S) to n-best (token ids, score) lists.
SearchFn = Callable[[torch.Tensor], list[list[tuple[list[int], float]]]]


def one_line(text: str) -> str:
    """A translation as exactly one line: a byte-level model can emit CR/LF bytes, and a line
    break inside an output would shift every later line of a hypothesis file or corpus."""
    return text.replace("\r", " ").replace("\n", " ")


class Translator:
    """Raw sentences in, detokenized n-best lists out, in input order.

    Empty (or whitespace-only) inputs are not sent to the model and translate to ""; every
    output is a single line (see :func:`one_line`).
    Sources longer than the model's positional range are cut to ``max_src_len`` tokens; the
    count of such sentences is kept in ``truncated`` and reported by the CLIs.

    A multilingual model (:mod:`transformer.data.parallel.languages`) is told the language to
    translate into with :meth:`set_target_language`: every source then starts with its tag, and
    whatever search ``search`` runs reads it as one more source token. With ``tag_to_decoder``
    (a model trained with ``data.tag_side=decoder``) each source's first id, its tag, is taken
    off and given to the search as that sentence's first decoder token (``search(src, start=)``),
    so sentences into different languages still share a batch. A pretrained family's model
    (``data.tag_side=codes``) is given ``coded``, ``(src_lang, tgt_lang) -> framing``
    (``Languages.coded_framing``: the target's code, then the source's): the target's code moves
    to the decoder as with ``tag_to_decoder``, after the decoder's start (``start_prefix``),
    and search forces it there; the source's code starts the source.
    """

    def __init__(self, search: SearchFn, src_tokenizer, tgt_tokenizer, max_tokens: int = 4096,
                 max_src_len: int | None = None, device: str | torch.device = "cpu",
                 tag_to_decoder: bool = False, coded: Callable[[str | None, str], list[int]] | None = None,
                 start_prefix: Sequence[int] = ()) -> None:
        self.search, self.src_tok, self.tgt_tok = search, src_tokenizer, tgt_tokenizer
        self.tag_to_decoder = tag_to_decoder or coded is not None
        self.coded, self.start_prefix = coded, list(start_prefix)
        self.max_tokens, self.max_src_len, self.device = max_tokens, max_src_len, torch.device(device)
        self.truncated = 0
        self.stats: dict[str, float] = {}
        self.source_prefix: list[int] = []  # the target-language tag of a multilingual model

    def set_target_language(self, tgt_lang: str | None, src_lang: str | None = None) -> "Translator":
        """Tag every source with ``<2tgt_lang>`` (None: untagged, a bilingual model), or with a
        pretrained family's (``coded``) the code of ``src_lang`` in front of the source and that
        of ``tgt_lang`` after the decoder's start; returns self."""
        if self.coded is not None:  # None: the one direction it is framed for already (``Seq2SeqTask.translator``)
            if tgt_lang is not None:
                self.source_prefix = self.coded(src_lang, tgt_lang)
            return self
        self.source_prefix = tag_ids(self.src_tok, [], tgt_lang)
        return self

    def extra_stats(self) -> dict:
        """Strategy-specific statistics (e.g. NAT refinement iterations)."""
        return dict(self.stats)

    def encode(self, text: str) -> list[int]:
        """Source pieces after the target tag, if any (the collator appends EOS, exactly as in
        training)."""
        ids = self.source_prefix + self.src_tok.encode(text)
        if self.max_src_len is not None and len(ids) + 1 > self.max_src_len:
            self.truncated += 1
            ids = ids[: self.max_src_len - 1]
        return ids

    @torch.no_grad()
    def translate(self, sentences: Sequence[str]) -> list[list[tuple[str, float]]]:
        out: list[list[tuple[str, float]]] = [[("", 0.0)] for _ in sentences]
        todo = [i for i, s in enumerate(sentences) if s.strip()]
        encoded = {i: self.encode(sentences[i]) for i in todo}
        lengths = [len(encoded[i]) + 1 for i in todo]
        collate = TranslationCollator(self.src_tok.pad_id, self.src_tok.bos_id, self.src_tok.eos_id,
                                      tag_to_decoder=self.tag_to_decoder, start_prefix=self.start_prefix)
        for batch in token_budget_batches(lengths, self.max_tokens):
            ready = collate([{"src": encoded[todo[b]], "index": b} for b in batch])
            # (B,) the tags, or (B, 1 + P) a start prefix and the tags
            start = {"start": ready["start"].to(self.device)} if "start" in ready else {}
            results = self.search(ready["src"].to(self.device), **start)  # src (B, S)
            for b, nbest in zip(batch, results):
                out[todo[b]] = [(one_line(self.tgt_tok.decode(ids)), score) for ids, score in nbest]
        return out
