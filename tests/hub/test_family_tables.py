"""Each family is one declaration read and written: its tensor-name templates read back every
name they write, and a ``config.json`` written from our settings by inverting its table reads
back as the same settings, activations included. No ``transformers`` needed: the folders'
own tests hold the families to it."""

from __future__ import annotations

import itertools

import pytest

from transformer.hub.families import FAMILIES, FIELDS, HubError, Like, rename

SAMPLES = {"i": ("0", "11"), "wb": ("weight", "bias"), "stack": ("encoder", "decoder")}


def _filled(template_pair: tuple[str, ...]) -> list[tuple[str, str]]:
    """Each template pair with its fields filled every way the samples allow."""
    fields = sorted({f for t in template_pair[:2] for f in FIELDS if f"{{{f}}}" in t})
    out = []
    for values in itertools.product(*(SAMPLES[f] for f in fields)):
        filled = dict(zip(fields, values))
        out.append((template_pair[0].format(**filled), template_pair[1].format(**filled)))
    return out


def _settings(family, **over):
    """Our settings of every key in the family's table, each a value of its kind."""
    values = {"size": 8, "number": 0.25, "flag": False, "token_id": 3, "activation": "relu"}
    ours = {key.ours: values[key.kind] for key in family.keys}
    for key in family.keys:
        if isinstance(key.default, Like):
            ours[key.ours] = ours[key.default.ours]
    return {**ours, **over}


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("shared", [True, False])
def test_every_tensor_template_reads_back_the_name_it_writes(name, shared):
    family = FAMILIES[name]
    flags = {"share_embeddings": shared, "tie_output": True}
    for part, prefix in ((family.body, family.prefix), (family.head, "")):
        for pair in part:
            for theirs, ours in _filled(pair):
                assert family.our_name(prefix + theirs) == ours
                written = family.hf_name(ours, flags)
                assert written is not None and family.our_name(written) == ours, (ours, written)
    assert family.hf_name("encoder.layers.0.no_such.weight", flags) is None


def test_marian_writes_the_joint_table_only_when_the_stacks_share_it():
    marian = FAMILIES["marian"]
    assert marian.hf_name("encoder.embedding.weight", {"share_embeddings": True}) == "model.shared.weight"
    assert marian.hf_name("encoder.embedding.weight", {"share_embeddings": False}) == \
        "model.encoder.embed_tokens.weight"


def test_a_template_matches_whole_names_only():
    pairs = [("encoder.layer.{i}.output.dense.{wb}", "encoder.layers.{i}.ffn.w_2.{wb}")]
    assert rename("encoder.layer.3.output.dense.bias", pairs) == "encoder.layers.3.ffn.w_2.bias"
    for name in ("encoder.layer.x.output.dense.bias", "encoder.layer.3.output.dense.gamma",
                 "encoder.layer.3.output.dense.bias.extra", "encoderXlayer.3.output.dense.bias"):
        assert rename(name, pairs) is None


@pytest.mark.parametrize("name", FAMILIES)
def test_a_written_config_reads_back_as_our_settings(name):
    family = FAMILIES[name]
    ours = _settings(family)
    config = family.write_config(ours)
    assert config["model_type"] == name
    read = family.translate(dict(config))
    assert {key.ours: read[key.ours] for key in family.keys if key.ours != "tgt_vocab_size"} == \
        {k: v for k, v in ours.items() if k != "tgt_vocab_size"}
    # every key written is one the table or the family's fixed values name: nothing restated elsewhere
    named = {n for key in family.keys for n in (key.theirs, *key.same, *key.copies)}
    assert set(config) == named | set(family.fixed) | {"model_type", "architectures"}


@pytest.mark.parametrize("name", FAMILIES)
def test_each_activation_reads_back_as_itself(name):
    family = FAMILIES[name]
    for ours in family.activations:
        read = family.translate(family.write_config(_settings(family, activation=ours)))
        assert read["activation"] == ours


def test_a_second_key_for_one_setting_must_agree():
    bert = FAMILIES["bert"]
    config = bert.write_config(_settings(bert))
    config["attention_probs_dropout_prob"] = 0.5
    with pytest.raises(HubError, match=r"attention_probs_dropout_prob=0\.5 differs from hidden_dropout_prob=0\.25"):
        bert.translate(config)
