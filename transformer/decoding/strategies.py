"""The decode strategies, declared once: the name ``decode.strategy`` gives, the kind of model it
serves, the settings it reads and its search.

A model's kind is how its output is searched for: ``autoregressive`` (an ``EncoderDecoder``, or
an ensemble of them: a token at a time), ``nat`` (a length-predicting non-autoregressive model:
every position at once, refined by Mask-Predict) or ``ctc`` (a CTC non-autoregressive model:
paths over upsampled positions). Each translation task says which kind its model is
(``model_kind``). A name may serve several kinds (``greedy`` is each kind's one-pass search), so
a row of :data:`STRATEGIES` is one (name, kind).

Who asks: ``DecodeSettings.check`` (:data:`NAMES`: a strategy by name at all, every command's
check), the tasks (:func:`choose`: this kind's strategy of that name, refusing what it cannot
do; then :meth:`Strategy.bind`), the server (:attr:`Strategy.keys`: which settings a request may
change) and the evaluation reports (:func:`label`).

Shape legend: B sentences, S source tokens.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Mapping

from torch import Tensor

from transformer.decoding.beam import beam_search
from transformer.decoding.ctc import ctc_beam, ctc_one_pass
from transformer.decoding.greedy import greedy_search
from transformer.decoding.nat import mask_predict, nat_length_beam, nat_one_pass

# The kinds of model, and how a message names a checkpoint of each.
AUTOREGRESSIVE, NAT, CTC = "autoregressive", "nat", "ctc"
CHECKPOINT = {AUTOREGRESSIVE: "an autoregressive", NAT: "a non-autoregressive", CTC: "a non-autoregressive CTC"}

# What ``decode.strategy`` is when a block leaves it out.
DEFAULT = "greedy"

# Settings that change how the model runs or scores rather than what is searched for: set on a kind
# whose strategies do not read them they are refused (a user would believe they took effect); any other
# key a strategy does not read is ignored, as one decoding block serves every strategy.
REFUSED_UNREAD = ("compile", "dtype", "ctc_weight")

# Per sentence (B lists, in input order) its hypotheses, best first: (target ids, score).
NBest = list[list[tuple[list[int], float]]]


@dataclass(frozen=True)
class SearchIds:
    """What a search takes from its task besides the settings: the special ids, and the longest
    output the model's positions allow (None: no cap beyond the length rule)."""

    bos_id: int
    eos_id: int
    pad_id: int
    max_len: int | None = None


@dataclass(frozen=True)
class Strategy:
    """One strategy for one kind of model.

    ``search(model, src (B, S), ids, **read)`` (autoregressive ones also take ``start``, a
    decoder-side language tag per row) returns ``(NBest, passes)``: ``passes`` the decoder passes
    per sentence (None where a search does not count them). ``reads``: the settings ``search``
    takes, as keyword arguments of their own names; ``prepares``: the settings the task applies
    to the model before searching (a bf16 copy, a compiled step, a shortlist). ``alias_of``:
    the strategy of this kind the name stands for. ``needs(model, read)``: why the model cannot
    be searched with these settings, raised when the search is bound. ``label``: how a report's
    table names a decoding block (``str.format`` over the block; empty: the name).
    """

    name: str
    kind: str
    search: Callable[..., tuple[NBest, list[int] | None]]
    reads: tuple[str, ...] = ()
    prepares: tuple[str, ...] = ()
    alias_of: str | None = None
    needs: Callable[[Any, dict], None] | None = None
    label: str = ""

    @property
    def keys(self) -> tuple[str, ...]:
        """Every setting this strategy reads (beyond those of every strategy: ``max_tokens``,
        the alignment, pivot and zero-shot keys, which the commands read)."""
        return self.prepares + self.reads

    def bind(self, model, settings, ids: SearchIds) -> Callable[..., tuple[NBest, list[int] | None]]:
        """``search`` on ``model`` with the settings (a ``DecodeSettings``) it reads and the task's
        ids: a function of ``src`` (and ``start``) alone; a model it cannot search is refused here."""
        read = {key: getattr(settings, key) for key in self.reads}
        if self.needs is not None:
            self.needs(model, read)
        return partial(self.search, model, ids=ids, **read)


# ----------------------------------------------------------------------------- the searches
def _greedy(model, src: Tensor, ids: SearchIds, start: Tensor | None = None, **read) -> tuple[NBest, None]:
    out = greedy_search(model, src, ids.bos_id, ids.eos_id, ids.pad_id, max_len=ids.max_len, return_scores=True,
                        start=start, **read)
    return [[(list(toks), float(score))] for toks, score in out], None


def _beam(model, src: Tensor, ids: SearchIds, start: Tensor | None = None, *, length_penalty: float,
          **read) -> tuple[NBest, None]:
    out = beam_search(model, src, ids.bos_id, ids.eos_id, ids.pad_id, max_len=ids.max_len,
                      length_penalty=float(length_penalty), start=start, **read)
    return [[(list(h.tokens), float(h.score)) for h in hyps] for hyps in out], None


def _non_autoregressive(search: Callable, **fixed) -> Callable[..., tuple[NBest, list[int]]]:
    """A non-autoregressive search (``decoding.nat``, ``decoding.ctc``) as a strategy's: BOS
    banned, each sentence's output with its score, and the decoder passes it took (``fixed``:
    ``return_stats=True`` for a search that returns its ``NATStats`` only when asked)."""
    def run(model, src: Tensor, ids: SearchIds, **read) -> tuple[NBest, list[int]]:
        if "blank_penalty" in read:
            read["blank_penalty"] = float(read["blank_penalty"])
        out, stats = search(model, src, pad_id=ids.pad_id, eos_id=ids.eos_id, ban_ids=(ids.bos_id,), **fixed, **read)
        return [[(list(toks), float(score))] for toks, score in zip(out, stats.scores)], stats.iterations
    return run


def _refinement_needs_masks(model, read: dict) -> None:
    """Refinement re-masks tokens: a model that copies source embeddings (no ``mask_id``,
    ``decoding.api.NATModel``) can only take one pass."""
    if read["iterations"] > 1 and model.mask_id is None:
        raise ValueError("decode.strategy=mask_predict with iterations > 1 needs a model trained with "
                         "decoder_input=mask; this checkpoint copies source embeddings "
                         "(use decode.strategy=nat_one_pass or decode.strategy=nat_length_beam)")


_NAT_ONE_PASS = _non_autoregressive(nat_one_pass, return_stats=True)
_CTC_ONE_PASS = _non_autoregressive(ctc_one_pass, return_stats=True)
_LENGTH = ("max_len_a", "max_len_b")  # the length cap: max_len_a * source length + max_len_b
# a compiled step (decoding.compiled), a bf16 copy (decoding.precision), joint CTC scores (decoding.joint_ctc)
_AT_MODEL = ("compile", "dtype", "ctc_weight")
_NAT = ("collapse_repeats",)

STRATEGIES: tuple[Strategy, ...] = (
    Strategy("greedy", AUTOREGRESSIVE, _greedy, _LENGTH, _AT_MODEL),
    Strategy("beam", AUTOREGRESSIVE, _beam, (*_LENGTH, "beam_size", "length_penalty", "n_best"), _AT_MODEL,
             label="beam {beam_size}"),
    Strategy("nat_one_pass", NAT, _NAT_ONE_PASS, _NAT),
    Strategy("greedy", NAT, _NAT_ONE_PASS, _NAT, alias_of="nat_one_pass"),
    Strategy("nat_length_beam", NAT, _non_autoregressive(nat_length_beam, return_stats=True), ("length_beam", *_NAT)),
    Strategy("mask_predict", NAT, _non_autoregressive(mask_predict, return_stats=True),
             ("iterations", "length_beam", *_NAT), needs=_refinement_needs_masks),
    # The shortlist belongs to the CTC strategies' own names: their aliases score every id.
    Strategy("ctc_one_pass", CTC, _CTC_ONE_PASS, ("blank_penalty",), ("shortlist",)),
    Strategy("greedy", CTC, _CTC_ONE_PASS, ("blank_penalty",), alias_of="ctc_one_pass"),
    Strategy("nat_one_pass", CTC, _CTC_ONE_PASS, ("blank_penalty",), alias_of="ctc_one_pass"),
    Strategy("ctc_beam", CTC, _non_autoregressive(ctc_beam), ("beam_size", "top_k", "blank_penalty"), ("shortlist",)),
)


# Every strategy's name, in declaration order: what ``decode.strategy`` may be.
NAMES: tuple[str, ...] = tuple(dict.fromkeys(s.name for s in STRATEGIES))


# ----------------------------------------------------------------------------- asking the registry
def served(kind: str) -> tuple[Strategy, ...]:
    """The strategies of a kind of model, in declaration order."""
    return tuple(s for s in STRATEGIES if s.kind == kind)


def choose(settings, kind: str) -> Strategy:
    """The strategy ``settings.strategy`` names for a model of ``kind``; a ``ValueError`` naming
    what this kind offers if it has none of that name, or for a :data:`REFUSED_UNREAD` setting
    none of its strategies reads."""
    defaults = {f.name: f.default for f in dataclasses.fields(settings)}
    for key in REFUSED_UNREAD:
        value = getattr(settings, key)
        if value != defaults[key] and not any(key in s.keys for s in served(kind)):
            readers = [s for s in STRATEGIES if key in s.keys and s.alias_of is None]
            raise ValueError(f"decode.{key}={_shown(value)}: applies to {' and '.join(s.name for s in readers)} "
                             f"search of {' or '.join(dict.fromkeys(CHECKPOINT[s.kind] for s in readers))} "
                             f"checkpoint; this is {CHECKPOINT[kind]} checkpoint (set decode.{key}="
                             f"{_shown(defaults[key])})")
    for strategy in served(kind):
        if strategy.name == settings.strategy:
            return strategy
    offered = [s.name for s in served(kind)]
    use = " or ".join(offered) if len(offered) == 2 else f"one of {', '.join(offered)}"
    raise ValueError(f"decode.strategy={settings.strategy!r} is not available for {CHECKPOINT[kind]} "
                     f"checkpoint; use {use}")


def label(block: Mapping[str, Any]) -> str:
    """How a table names a decoding block (a report's ``decode``, every key given): ``greedy``,
    ``beam 5``; a strategy this registry does not know (an older report's) by its name."""
    name = block["strategy"]
    return next((s.label.format(**block) for s in STRATEGIES if s.name == name and s.label), name)


def _shown(value: Any) -> str:
    """A setting's value as it is written on the command line."""
    return str(value).lower() if isinstance(value, bool) else str(value)


__all__ = ["AUTOREGRESSIVE", "CHECKPOINT", "CTC", "DEFAULT", "NAMES", "NAT", "NBest", "REFUSED_UNREAD", "STRATEGIES",
           "SearchIds", "Strategy", "choose", "label", "served"]
