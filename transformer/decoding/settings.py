"""The decoding settings, declared once: each key's type, default, range and meaning.

``conf/decode/default.yaml`` is this declaration written out for the reader (a test holds the two
equal); the commands check a decode block with :meth:`DecodeSettings.check`, the tasks read one
with :meth:`DecodeSettings.of` (a key left out takes its default here), and the server's request
schema takes the types and meanings of the keys a request may change from here.

One block serves every strategy: ``strategy`` picks the search and each search reads the keys it
needs. The strategies, the kinds of model each serves and the keys each reads are declared in
``decoding.strategies``; this declaration knows only their names. What travels from a command to
the search is a ``DecodeSettings``, never the block it was read from.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from transformer.decoding import strategies
from transformer.ranges import Range

# The values of ``dtype`` (``decoding.precision.DTYPES`` maps them onto torch's).
DTYPES = ("fp32", "bf16")


def setting(default: Any, help: str, within: Range | None = None):
    """A declared setting: its default, one line on what it does, and its range
    (``transformer.ranges``, both ends inclusive; None: any value of its type)."""
    return field(default=default, metadata={"help": help, "range": within})


@dataclass(frozen=True)
class DecodeSettings:
    """The settings of every search (see the module docstring); unknown keys are refused."""

    strategy: str = setting(strategies.DEFAULT, f"the search: {' | '.join(strategies.NAMES)}, as the "
                                                f"checkpoint's kind allows")
    max_tokens: int = setting(2048, "source sentences are batched under this token budget (padding counted)",
                              Range(1, 2**31))
    compile: bool = setting(False, "autoregressive search with torch.compile and a static KV cache")
    dtype: str = setting("fp32", "autoregressive search's weights and KV cache: fp32 | bf16 (bf16 needs a GPU or a "
                                 "CPU with AVX512-BF16 or AMX); scores stay fp32")
    max_len_a: float = setting(1.2, "length cap: max_len_a * source pieces + max_len_b", Range(0, 10**4))
    max_len_b: int = setting(10, "see max_len_a", Range(0, 10**6))
    beam_size: int = setting(5, "beam search / CTC prefix beam width", Range(1, 1024))
    length_penalty: float = setting(1.0, "beam: score = sum log p / length ** length_penalty")
    n_best: int = setting(1, "hypotheses returned per sentence (beam search), at most beam_size", Range(1, 1024))
    print_alignment: bool = setting(False, "append each target piece's most attended source piece to the output")
    alignment_layer: Optional[int] = setting(None, "the decoder layer whose cross-attention aligns; null = last")
    length_beam: int = setting(3, "NAT: target lengths tried per sentence", Range(1, 1024))
    iterations: int = setting(10, "Mask-Predict: refinement iterations", Range(1, 10_000))
    collapse_repeats: bool = setting(False, "NAT: one copy of a token repeated at neighbouring positions")
    top_k: int = setting(8, "tokens tried at each position (CTC prefix beam)", Range(1, 2**24))
    shortlist: Optional[str] = setting("train", "CTC: score only these tokens: train, a target-side text file "
                                                "or null (every token)")
    blank_penalty: float = setting(0.0, "CTC: subtracted from the blank's logit; > 0 lengthens outputs")
    ctc_weight: float = setting(0.0, "autoregressive search of a model with a CTC head (task.ctc_weight > 0): the "
                                     "CTC prefix score's weight in every step's score; 0 = the decoder alone",
                                Range(0, 1))
    pivot: Optional[str] = setting(None, "multilingual model: translate src_lang into this language, then that "
                                         "into tgt_lang (same model, same settings); null = directly")
    zero_shot: bool = setting(False, "multilingual model: also a direction it was not trained on, from a language it "
                                     "reads into one it writes")

    # ----------------------------------------------------------------- reading a block
    @classmethod
    def of(cls, values: DecodeSettings | Mapping[str, Any] | None = None, where: str = "decode") -> DecodeSettings:
        """The settings ``values`` gives (checked), the declared default for any it leaves out;
        settings already read are returned as they are."""
        if isinstance(values, DecodeSettings):
            return values
        return cls(**cls.check(dict(values or {}), where))

    def replace(self, **changes: Any) -> DecodeSettings:
        """These settings with ``changes`` over them, checked as a whole."""
        return self.of({**self.to_dict(), **changes})

    @classmethod
    def check(cls, values: Mapping[str, Any], where: str = "decode") -> Mapping[str, Any]:
        """``values`` (a block, complete or not) against the declaration: known keys, each of its
        type and within its range, a length cap that allows a token, ``n_best`` within the beam.
        ``strategy`` must name one of ``decoding.strategies`` (which kinds of model it serves, the
        task judges). Returns ``values``; a bad value is a ``ValueError`` naming the key."""
        declared = {f.name: f for f in dataclasses.fields(cls)}
        hints = typing.get_type_hints(cls)
        for key, value in values.items():
            if key not in declared:
                raise ValueError(f"{where}.{key}: not a decoding key (known: {', '.join(declared)})")
            _check_value(f"{where}.{key}", value, hints[key], declared[key].metadata["range"])
        full = {**{k: f.default for k, f in declared.items()}, **values}
        if full["strategy"] not in strategies.NAMES:
            raise ValueError(f"{where}.strategy={full['strategy']!r}: expected one of {', '.join(strategies.NAMES)}")
        if full["dtype"] not in DTYPES:
            raise ValueError(f"{where}.dtype={full['dtype']!r}: expected one of {', '.join(DTYPES)}")
        a, b = full["max_len_a"], full["max_len_b"]
        if a == 0 and b < 1:
            raise ValueError(f"{where}.max_len_a={a!r} {where}.max_len_b={b!r}: the length cap "
                             f"floor(max_len_a * source length + max_len_b) must allow at least one token")
        if full["n_best"] > full["beam_size"]:
            raise ValueError(f"{where}.n_best={full['n_best']}: at most {where}.beam_size={full['beam_size']}")
        return values

    def to_dict(self) -> dict[str, Any]:
        """The settings as a plain block, in declaration order."""
        return dataclasses.asdict(self)

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Every key with its declared default (what ``conf/decode/default.yaml`` holds)."""
        return cls().to_dict()

    @classmethod
    def describe(cls, key: str) -> str:
        """The declared meaning of ``key``."""
        return next(f.metadata["help"] for f in dataclasses.fields(cls) if f.name == key)


def _check_value(name: str, value: Any, hint: Any, within: Range | None) -> None:
    """One value against its declared type and range."""
    lo, hi = (within.lo, within.hi) if within else (None, None)
    optional = typing.get_origin(hint) is typing.Union and type(None) in typing.get_args(hint)
    if optional:
        if value is None:
            return
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if hint is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{name}={value!r}: expected true or false")
    elif hint is str:
        if not isinstance(value, str):
            raise ValueError(f"{name}={value!r}: expected a string" + (" or null" if optional else ""))
    elif hint is int:
        if isinstance(value, bool) or not isinstance(value, int) or not _within(value, lo, hi):
            if lo == 1:
                raise ValueError(f"{name}={value!r}: expected a positive integer up to {hi}")
            if lo is None:
                raise ValueError(f"{name}={value!r}: expected an integer" + (" or null" if optional else ""))
            raise ValueError(f"{name}={value!r}: expected an integer from {lo} to {hi}")
    elif hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{name}={value!r}: expected a number")
        if not _within(value, lo, hi):
            raise ValueError(f"{name}={value!r}: expected a number from {lo} to {hi}")


def _within(value: float, lo: float | None, hi: float | None) -> bool:
    return (lo is None or value >= lo) and (hi is None or value <= hi)


__all__ = ["DecodeSettings", "setting"]
