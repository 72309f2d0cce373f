"""Declared ranges: how a setting says which numbers it takes, beside its type.

A setting is typed once, with its range next to it:

- a task's or a data module's constructor parameter (and a positional encoding's own argument):
  ``warmup_steps: Annotated[int, Range(0, 2**40)] = 4000``;
- a model config field (``models.transformer.hp``): ``d_model: int = hp(512, Range(1, 2**16))``;
- a decoding setting (``decoding.settings.setting``): ``beam_size: int = setting(5, "...", Range(1, 1024))``.

``tasks.build`` and ``decoding.settings`` read them back (:func:`range_of`) and refuse a value
outside, naming the key. Upper bounds keep a typo (``max_tokens=10**12``) from allocating the
machine's memory before anything is said. This module imports nothing of the project, so every
layer may use it.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Range:
    """``lo <= value <= hi`` (a list of values: each of them)."""

    lo: float
    hi: float

    def holds(self, value: float) -> bool:
        """Whether ``value`` lies inside."""
        return self.lo <= value <= self.hi

    def expected(self, key: str) -> str:
        """What a message says a value of ``key`` should be."""
        return f"a value from {self.lo} to {self.hi}"


@dataclass(frozen=True)
class Probability:
    """``0 <= value < 1``: a rate that leaves something behind (a dropout of 1 zeroes every activation)."""

    def holds(self, value: float) -> bool:
        """Whether ``value`` lies inside."""
        return 0 <= value < 1

    def expected(self, key: str) -> str:
        """What a message says a value of ``key`` should be."""
        return f"0 <= {key} < 1"


Declared = Range | Probability


def range_of(hint: Any) -> Declared | None:
    """The range an ``Annotated[type, Range(...)]`` hint declares, or None."""
    return next((m for m in getattr(hint, "__metadata__", ()) if isinstance(m, (Range, Probability))), None)


def unannotated(hint: Any) -> Any:
    """``hint`` without its ``Annotated`` wrapper (the type alone)."""
    return typing.get_args(hint)[0] if typing.get_origin(hint) is typing.Annotated else hint


__all__ = ["Declared", "Probability", "Range", "range_of", "unannotated"]
