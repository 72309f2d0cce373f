"""The decode strategies are declared once (``decoding.strategies``): what each reads is a
declared setting, every kind decodes with the default, the commands' check, the tasks, the server
and the reports all answer from the table, and a bound search is the search function it names."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from transformer.decoding import strategies
from transformer.decoding.beam import beam_search
from transformer.decoding.greedy import greedy_search
from transformer.decoding.settings import DecodeSettings
from transformer.decoding.strategies import AUTOREGRESSIVE, CTC, NAT, STRATEGIES, SearchIds, choose

CONF = Path(__file__).resolve().parents[2] / "conf"
KINDS = (AUTOREGRESSIVE, NAT, CTC)


def test_every_key_a_strategy_reads_is_a_declared_setting():
    declared = {f.name for f in dataclasses.fields(DecodeSettings)}
    for s in STRATEGIES:
        assert set(s.keys) <= declared, s.name
        assert s.kind in KINDS and s.kind in strategies.CHECKPOINT


def test_one_row_per_name_and_kind_and_an_alias_reads_no_more_than_its_strategy():
    rows = [(s.name, s.kind) for s in STRATEGIES]
    assert len(rows) == len(set(rows))
    for s in STRATEGIES:
        if s.alias_of is not None:
            target = next(t for t in strategies.served(s.kind) if t.name == s.alias_of and t.alias_of is None)
            assert set(s.keys) <= set(target.keys) and s.search is target.search


def test_the_default_decodes_every_kind_and_the_names_are_the_settings_choice():
    assert DecodeSettings().strategy == strategies.DEFAULT
    for kind in KINDS:
        assert choose(DecodeSettings(), kind).kind == kind
    assert strategies.NAMES == tuple(dict.fromkeys(s.name for s in STRATEGIES))
    assert all(name in DecodeSettings.describe("strategy") for name in strategies.NAMES)
    # the YAML the user reads lists every name by kind
    written = (CONF / "decode" / "default.yaml").read_text(encoding="utf-8")
    assert all(name in written for name in strategies.NAMES)


def test_the_check_refuses_a_name_no_strategy_has():
    with pytest.raises(ValueError, match=r"decode\.strategy='bean': expected one of greedy, beam, "):
        DecodeSettings.check({"strategy": "bean"})
    with pytest.raises(ValueError, match=r"test_decode\.strategy='bean'"):
        DecodeSettings.of({"strategy": "bean"}, "test_decode")


@pytest.mark.parametrize("kind, name, message", [
    (AUTOREGRESSIVE, "mask_predict", "an autoregressive checkpoint; use greedy or beam"),
    (NAT, "beam", "a non-autoregressive checkpoint; use one of nat_one_pass, greedy, nat_length_beam, mask_predict"),
    (CTC, "mask_predict", "a non-autoregressive CTC checkpoint; use one of ctc_one_pass, greedy, nat_one_pass, "
                          "ctc_beam"),
])
def test_a_strategy_another_kind_serves_is_refused_naming_this_kinds(kind, name, message):
    with pytest.raises(ValueError, match=f"decode.strategy='{name}' is not available for {message}"):
        choose(DecodeSettings(strategy=name), kind)


@pytest.mark.parametrize("kind", [NAT, CTC])
def test_settings_only_autoregressive_search_reads_are_refused_elsewhere(kind):
    with pytest.raises(ValueError, match=r"decode\.compile=true: applies to greedy and beam search of an "
                                         r"autoregressive checkpoint"):
        choose(DecodeSettings(compile=True), kind)
    with pytest.raises(ValueError, match=r"\(set decode\.dtype=fp32\)"):
        choose(DecodeSettings(dtype="bf16"), kind)
    with pytest.raises(ValueError, match=r"decode\.ctc_weight=0\.9: applies to .*\(set decode\.ctc_weight=0\.0\)"):
        choose(DecodeSettings(ctc_weight=0.9), kind)  # joint scores mix into an autoregressive decoder's
    choose(DecodeSettings(beam_size=3), kind)  # any other key a strategy does not read is ignored


def test_the_ctc_shortlist_belongs_to_the_ctc_names_only():
    readers = {s.name for s in strategies.served(CTC) if "shortlist" in s.keys}
    assert readers == {"ctc_one_pass", "ctc_beam"}


def test_report_labels():
    defaults = DecodeSettings.defaults()
    assert strategies.label(defaults) == "greedy"
    assert strategies.label({**defaults, "strategy": "beam", "beam_size": 4}) == "beam 4"
    assert strategies.label({**defaults, "strategy": "mask_predict"}) == "mask_predict"
    assert strategies.label({"strategy": "an_older_name"}) == "an_older_name"


def test_a_bound_autoregressive_strategy_is_its_search_function():
    from transformer.models import EncoderDecoder, TransformerConfig

    torch.manual_seed(0)
    model = EncoderDecoder(TransformerConfig(vocab_size=20, pad_id=0, d_model=16, n_heads=2, d_ff=32, dropout=0.0,
                                             n_encoder_layers=1, n_decoder_layers=1, max_len=64)).eval()
    src = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]])
    ids = SearchIds(bos_id=1, eos_id=2, pad_id=0)
    settings = DecodeSettings(strategy="beam", beam_size=3, n_best=2, max_len_a=0, max_len_b=6)
    nbest, passes = choose(settings, AUTOREGRESSIVE).bind(model, settings, ids)(src)
    direct = beam_search(model, src, 1, 2, 0, beam_size=3, n_best=2, max_len_a=0, max_len_b=6)
    assert passes is None
    assert nbest == [[(list(h.tokens), float(h.score)) for h in hyps] for hyps in direct]
    greedy = DecodeSettings(max_len_a=0, max_len_b=6)
    nbest, _ = choose(greedy, AUTOREGRESSIVE).bind(model, greedy, ids)(src)
    direct = greedy_search(model, src, 1, 2, 0, max_len_a=0, max_len_b=6, return_scores=True)
    assert nbest == [[(list(toks), float(score))] for toks, score in direct]
