"""An ensemble of taggers: each word's tag distribution is the mean of the members'.

Unlike the translation ensemble (``decoding.ensemble``), the members need not share a
tokenizer: each reads the words with its own and pools its pieces into words, so the
probabilities meet at the word level (``inference.tagger.WordTagger`` averages them).
Averaging independently trained models is the usual last step of a tagger (their errors are
partly independent). The members must predict the same tags of the same data:
:func:`check_tagger_ensemble` names the first that does not.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

from torch import nn


class TaggerSpec(NamedTuple):
    """What an ensemble member predicts: its dataset (``{"name", "tagset", "aux_tagset"}``),
    its tag strings and its auxiliary tag strings (empty without an auxiliary head)."""

    data: dict
    tags: Sequence[str]
    aux_tags: Sequence[str]


def check_tagger_ensemble(specs: Sequence[TaggerSpec]) -> bool:
    """Raise ``ValueError`` naming the first member (1-based) whose dataset, tag set or tag
    inventory differs from member 1's; return whether every member has member 1's auxiliary
    head (same tag set and inventory), so that it can be averaged too."""
    first = specs[0]
    for i, spec in enumerate(specs[1:], start=2):
        for key in ("name", "tagset"):
            if spec.data[key] != first.data[key]:
                raise ValueError(f"ensemble member {i} has data {key} {spec.data[key]!r}, "
                                 f"member 1 has {first.data[key]!r}")
        if list(spec.tags) != list(first.tags):
            raise ValueError(f"ensemble member {i} has another tag inventory than member 1 "
                             f"({len(spec.tags)} vs {len(first.tags)} tags)")
    return all(list(s.aux_tags) == list(first.aux_tags) and s.data.get("aux_tagset") == first.data.get("aux_tagset")
               for s in specs[1:])


class TaggerEnsemble(nn.Module):
    """Tagger models, each with the tokenizer it reads words with and the most pieces its
    encoder takes; a submodule of the task, so moving the task moves every member.

    Args:
        members: ``(model, tokenizer, max_len)`` of each member.
    """

    def __init__(self, members: Sequence[tuple[nn.Module, object, int]]) -> None:
        super().__init__()
        self.taggers = nn.ModuleList([m for m, _, _ in members])
        self.tokenizers = [tok for _, tok, _ in members]
        self.max_lens = [n for _, _, n in members]

    def members(self) -> list[tuple[nn.Module, object, int]]:
        """``(model, tokenizer, max_len)`` of each member, in order."""
        return list(zip(self.taggers, self.tokenizers, self.max_lens))


__all__ = ["TaggerEnsemble", "TaggerSpec", "check_tagger_ensemble"]
