"""The server's request schema takes the decoding keys a request may change from their
declaration (``decoding.settings.DecodeSettings``): same types, same meanings."""

from __future__ import annotations

import typing

import pytest

pytest.importorskip("fastapi")

from pydantic import ValidationError  # noqa: E402

from transformer.decoding.settings import DecodeSettings  # noqa: E402
from transformer.serve.schemas import REQUEST_DECODE_KEYS, TranslateRequest  # noqa: E402


def test_each_decoding_field_is_typed_and_described_by_the_declaration():
    hints = typing.get_type_hints(DecodeSettings)
    fields = TranslateRequest.model_fields
    for key in REQUEST_DECODE_KEYS:
        assert fields[key].description == DecodeSettings.describe(key)
        assert fields[key].default is None  # left out: the served preset's value
        value = 3 if hints[key] is int else 0.5
        assert getattr(TranslateRequest(model="m", inputs=["a"], **{key: value}), key) == value
    # Strict like the declaration: a float where an integer is declared, a string for a number.
    with pytest.raises(ValidationError):
        TranslateRequest(model="m", inputs=["a"], beam_size=2.0)
    with pytest.raises(ValidationError):
        TranslateRequest(model="m", inputs=["a"], max_len_a="1")
    assert TranslateRequest(model="m", inputs=["a"], max_len_a=1).max_len_a == 1  # an integer is a number


def test_a_request_overrides_only_what_it_sets():
    request = TranslateRequest(model="m", inputs=["a"], beam_size=4, attention=True)
    assert request.overrides() == {"beam_size": 4, "attention": True}
    with pytest.raises(ValidationError):
        TranslateRequest(model="m", inputs=["a"], iterations=3)  # not a key a request may change
