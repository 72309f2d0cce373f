"""Task kinds answer what commands used to tell apart by name: here, which checkpoints ensemble."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from transformer import kinds


def test_an_ensemble_takes_checkpoints_of_its_own_kind_only():
    tagger, translator = SimpleNamespace(kind=kinds.TAGGING), SimpleNamespace(kind=kinds.TRANSLATION)
    kinds.require_ensemble([tagger, tagger], kinds.TAGGING)
    with pytest.raises(ValueError) as err:
        kinds.require_ensemble([translator, SimpleNamespace(kind=kinds.NAT)], kinds.TRANSLATION)
    assert str(err.value) == ("ensemble member 2 is a Mask-Predict translation checkpoint; an autoregressive "
                              "translation ensemble takes autoregressive translation checkpoints only")
    with pytest.raises(ValueError, match="^ensemble member 1 is an autoregressive translation checkpoint; a tagging"):
        kinds.require_ensemble([translator, tagger], kinds.TAGGING)
