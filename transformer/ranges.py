"""Declared ranges: how a setting says which numbers it takes, beside its type.

A setting is typed once, with its range next to it:

- a task's or a data module's constructor parameter (and a positional encoding's own argument):
  ``warmup_steps: Annotated[int, Range(0, 2**40)] = 4000``;
- a model config field (``models.transformer.hp``): ``d_model: int = hp(512, Range(1, 2**16))``;
- a decoding setting (``decoding.settings.setting``): ``beam_size: int = setting(5, "...", Range(1, 1024))``.

They are data: ``tasks.build`` (``range_of``, ``within``) and ``decoding.settings`` read them back
and refuse a value outside, naming the key. Upper bounds keep a typo (``max_tokens=10**12``) from allocating the
machine's memory before anything is said. This module imports nothing of the project, so every
layer may use it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Range:
    """``lo <= value <= hi`` (a list of values: each of them)."""

    lo: float
    hi: float


@dataclass(frozen=True)
class Probability:
    """``0 <= value < 1``: a rate that leaves something behind (a dropout of 1 zeroes every activation)."""


Declared = Range | Probability


__all__ = ["Declared", "Probability", "Range"]
