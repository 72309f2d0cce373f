"""Each setting is typed once with its range beside it, and the checks read that declaration."""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import Annotated, Sequence

import pytest

from transformer.decoding.settings import DecodeSettings
from transformer.ranges import Probability, Range
from transformer.tasks.build import (MODELS, POSITIONALS, TASKS, HyperparameterError, check_arguments,
                                     check_model_config, fits, range_of, task_class)


@pytest.mark.parametrize("value, hint, ok", [
    (1, int, True), (True, int, False), (1.0, int, False), ("1", int, False),
    (1, float, True), (0.5, float, True), (True, float, False), ("0.5", float, False),
    (math.inf, float, False), (math.nan, float, False),
    (True, bool, True), (1, bool, False), ("x", str, True), (1, str, False),
    (None, int | None, True), (None, int, False),
    ([0.9, 0.98], tuple[float, float], True), ([0.9, 0.98], Sequence[float], True), ((1, 2), Sequence[int], True),
    (["a"], Sequence[str], True), ("ab", Sequence[str], False), ([True], Sequence[float], False),
    ({"a": 1}, dict, True), ([1], dict, False), (object(), dict, False),
])
def test_values_are_data_of_their_declared_type(value, hint, ok):
    assert fits(value, hint) is ok
    assert fits(value, Annotated[hint, Range(0, 10)]) is ok  # the range is not part of the type


def test_a_declared_range_is_what_the_check_reads():
    def settings(steps: Annotated[int, Range(0, 100)] = 1, rate: Annotated[float, Probability()] = 0.0,
                 free: int = 0) -> None:
        """A callee with declared ranges."""

    check_arguments("x", {"steps": 100, "rate": 0.5, "free": -5}, settings)
    with pytest.raises(HyperparameterError, match=r"^x\.steps=101: expected a value from 0 to 100$"):
        check_arguments("x", {"steps": 101}, settings)
    with pytest.raises(HyperparameterError, match=r"^x\.rate=1: expected 0 <= rate < 1$"):
        check_arguments("x", {"rate": 1}, settings)
    with pytest.raises(HyperparameterError, match=r"^x\.steps=True: expected int$"):
        check_arguments("x", {"steps": True}, settings)


def test_task_ranges_are_declared_on_the_parameters():
    hints = typing.get_type_hints(task_class("translation").__mro__[1].__init__, include_extras=True)
    assert range_of(hints["warmup_steps"]) == Range(0, 2**40)
    assert range_of(hints["label_smoothing"]) == Probability()
    for name in TASKS:
        for klass in task_class(name).__mro__:
            init = klass.__dict__.get("__init__")
            if init is None or not klass.__module__.startswith("transformer."):
                continue
            hints = typing.get_type_hints(init, include_extras=True)
            for key in ("lr", "warmup_steps", "pad_id", "label_smoothing", "piece_vocab_size", "vocab_size"):
                if key in hints:
                    assert range_of(hints[key]) is not None, f"{klass.__name__}.{key}"


def test_positional_arguments_declare_their_ranges():
    hints = typing.get_type_hints(POSITIONALS["RelativePositionBias"].__init__, include_extras=True)
    assert range_of(hints["num_buckets"]) == Range(1, 2**16)
    node = {"_target_": "EncoderDecoder", "vocab_size": 100, "pad_id": 0,
            "positional": {"_target_": "RelativePositionBias", "_partial_": True, "num_buckets": 0}}
    expected = r"^model\.positional\.num_buckets=0: expected a value from 1 to 65536$"
    with pytest.raises(HyperparameterError, match=expected):
        check_model_config(node)


def test_model_and_decode_fields_declare_the_same_kind_of_range():
    fields = {f.name: f for f in dataclasses.fields(MODELS["EncoderDecoder"].config_class)}
    assert fields["d_model"].metadata["range"] == Range(1, 2**16)
    assert fields["dropout"].metadata["range"] == Probability()
    decode = {f.name: f for f in dataclasses.fields(DecodeSettings)}
    assert decode["beam_size"].metadata["range"] == Range(1, 1024)
    assert decode["length_penalty"].metadata["range"] is None
