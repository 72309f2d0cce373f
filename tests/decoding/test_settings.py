"""The decoding settings are declared once (``decoding.settings.DecodeSettings``): the YAML the
user reads holds the declared defaults, the command-line check refuses what the declaration
refuses, and a block left partial takes the declared defaults."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from transformer.decoding.settings import DecodeSettings

CONF = Path(__file__).resolve().parents[2] / "conf"


def test_the_yaml_preset_is_the_declaration_written_out():
    preset = OmegaConf.to_container(OmegaConf.load(CONF / "decode" / "default.yaml"), resolve=True)
    assert preset == DecodeSettings.defaults()
    assert list(preset) == list(DecodeSettings.defaults())  # in the declaration's order
    assert DecodeSettings.check(preset) is preset


@pytest.mark.parametrize("settings, message", [
    ({"beam_size": 2.5}, r"decode\.beam_size=2\.5: expected a positive integer up to 1024"),
    ({"beam_size": True}, r"decode\.beam_size=True: expected a positive integer"),
    ({"iterations": 10**5}, r"decode\.iterations=100000: expected a positive integer up to 10000"),
    ({"max_len_a": 0, "max_len_b": 0}, "must allow at least one token"),
    ({"max_len_a": -1}, r"decode\.max_len_a=-1: expected a number from 0 to 10000"),
    ({"max_len_b": 3.5}, r"decode\.max_len_b=3\.5: expected an integer from 0 to 1000000"),
    ({"length_penalty": float("nan")}, r"decode\.length_penalty=nan: expected a number"),
    ({"compile": "yes"}, r"decode\.compile='yes': expected true or false"),
    ({"shortlist": 3}, r"decode\.shortlist=3: expected a string or null"),
    ({"alignment_layer": 1.5}, r"decode\.alignment_layer=1\.5: expected an integer or null"),
    ({"n_best": 6}, r"decode\.n_best=6: at most decode\.beam_size=5"),
    ({"beam": 5}, r"decode\.beam: not a decoding key"),
])
def test_the_command_line_check_is_the_declaration(settings, message):
    with pytest.raises(ValueError, match=message):
        DecodeSettings.check(settings)
    with pytest.raises(ValueError, match=message):
        DecodeSettings.of(settings)


def test_a_partial_block_takes_the_declared_defaults():
    settings = DecodeSettings.of({"strategy": "beam", "beam_size": 8, "max_len_a": 0, "max_len_b": 4})
    assert (settings.strategy, settings.beam_size, settings.max_len_a, settings.max_len_b) == ("beam", 8, 0, 4)
    defaults = DecodeSettings()
    assert settings.n_best == defaults.n_best and settings.length_penalty == defaults.length_penalty
    assert DecodeSettings.of(None) == defaults
    assert DecodeSettings.check({"alignment_layer": None, "shortlist": None}) == {"alignment_layer": None,
                                                                                "shortlist": None}
