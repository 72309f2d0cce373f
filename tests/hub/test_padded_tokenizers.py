"""A folder's ``tokenizer.json`` read as ``transformers`` reads it: the padding and truncation
sentence-transformers writes into it are off (ids equal ``AutoTokenizer``'s, ``[CLS] … [SEP]``
and no padding), the ``tokenizer_config.json`` options of the family's tokenizer class win
over the file's, and ``model_max_length`` cuts what the model reads."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from folders import sentences, write_folder
from transformer.data.core.tokenizer import SubwordTokenizer
from transformer.hub import HubError, checkpoint, mlm_checkpoint
from transformer.hub.folder import read_tokenizer
from transformer.tasks.checkpoint import load_task

transformers = pytest.importorskip("transformers")

PADDING = {"strategy": {"Fixed": 128}, "direction": "Right", "pad_to_multiple_of": None, "pad_id": 0,
           "pad_type_id": 0, "pad_token": "[PAD]"}
TRUNCATION = {"direction": "Right", "max_length": 128, "strategy": "LongestFirst", "stride": 0}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return {family: write_folder(family, root / family) for family in ("bert", "roberta")}


def edited(folder, out, tokenizer=None, config=None):
    """``folder`` copied to ``out`` with ``tokenizer.json`` and ``tokenizer_config.json`` updated."""
    shutil.copytree(folder, out)
    for name, update in (("tokenizer.json", tokenizer), ("tokenizer_config.json", config)):
        state = json.loads((out / name).read_text(encoding="utf-8"))
        state.update(update or {})
        (out / name).write_text(json.dumps(state), encoding="utf-8")
    return out


def framed(tok, texts):
    return [tok.frame(ids) for ids in tok.encode_batch(texts)]


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_padding_and_truncation_of_tokenizer_json_are_off(family, folders, tmp_path):
    pad = {**PADDING, "pad_id": 1, "pad_token": "<pad>"} if family == "roberta" else PADDING
    folder = edited(folders[family], tmp_path / family, {"padding": pad, "truncation": TRUNCATION})
    texts = sentences(200)
    # as the file stands, the tokenizers library pads every text to 128 pieces
    assert {len(ids) for ids in SubwordTokenizer.load(folder).encode_batch(texts)} == {128}
    ours = framed(read_tokenizer(folder), texts)
    reference = transformers.AutoTokenizer.from_pretrained(folder)(texts)["input_ids"]
    assert ours == reference and max(map(len, ours)) < 128
    assert ours == transformers.AutoTokenizer.from_pretrained(folders[family])(texts)["input_ids"]
    # the checkpoint carries the tokenizer as read, so training and serving never pad either
    state = json.loads(mlm_checkpoint(f"hf:{folder}")["tokenizers"]["src"])
    assert state["padding"] is None and state["truncation"] is None


@pytest.mark.parametrize("config", [{"do_lower_case": False}, {"strip_accents": False},
                                    {"tokenize_chinese_chars": False}])
def test_the_bert_tokenizer_options_of_tokenizer_config_win(config, folders, tmp_path):
    folder = edited(folders["bert"], tmp_path / "bert", config={"tokenizer_class": "BertTokenizer", **config})
    texts = sentences(300)
    ours = framed(read_tokenizer(folder), texts)
    assert ours == transformers.AutoTokenizer.from_pretrained(folder)(texts)["input_ids"]
    assert ours != framed(read_tokenizer(folders["bert"]), texts)  # the option changed something


def test_robertas_add_prefix_space_of_tokenizer_config_wins(folders, tmp_path):
    folder = edited(folders["roberta"], tmp_path / "roberta",
                    config={"tokenizer_class": "RobertaTokenizer", "add_prefix_space": True})
    texts = sentences(200)
    ours = framed(read_tokenizer(folder), texts)
    assert ours == transformers.AutoTokenizer.from_pretrained(folder)(texts)["input_ids"]
    assert ours != framed(read_tokenizer(folders["roberta"]), texts)


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_without_a_tokenizer_class_the_model_type_names_it(family, folders, tmp_path):
    """``bert-base-uncased``'s ``tokenizer_config.json`` names no class: ``transformers`` takes
    ``config.json``'s ``model_type``, and BERT's lowercases by default whatever the file's normalizer
    says; RoBERTa's reads ``add_prefix_space``."""
    folder = tmp_path / family
    shutil.copytree(folders[family], folder)
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    config.pop("tokenizer_class", None)
    config.pop("backend", None)
    state = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    if family == "bert":
        state["normalizer"]["lowercase"] = False
    else:
        config["add_prefix_space"] = True
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    (folder / "tokenizer.json").write_text(json.dumps(state), encoding="utf-8")
    texts = sentences(200)
    ours = framed(read_tokenizer(folder), texts)
    assert ours == transformers.AutoTokenizer.from_pretrained(folder)(texts)["input_ids"]
    as_file = SubwordTokenizer.from_str(json.dumps(state))  # the file alone, as the tokenizers library reads it
    assert ours != framed(as_file, texts)


def test_a_bad_option_is_one_error_naming_the_file(folders, tmp_path):
    folder = edited(folders["bert"], tmp_path / "bert", config={"tokenizer_class": "BertTokenizer",
                                                               "do_lower_case": "yes"})
    with pytest.raises(HubError, match=r"tokenizer_config\.json: do_lower_case='yes': expected true or false"):
        read_tokenizer(folder)


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_model_max_length_cuts_what_the_model_reads(family, folders, tmp_path):
    folder = edited(folders[family], tmp_path / family, config={"model_max_length": 16})
    whole = mlm_checkpoint(f"hf:{folders[family]}")
    cut = checkpoint(f"hf:{folder}")
    first = 2 if family == "roberta" else 0
    assert cut["hyper_parameters"]["model"]["max_len"] == 16 + first
    table = "model.encoder.positional.embedding.weight"
    assert torch.equal(cut["state_dict"][table], whole["state_dict"][table][:16 + first])
    task = load_task(f"hf:{folder}")
    tok = task.tokenizer
    long = " ".join(["the movie was great"] * 10)
    # a masked LM fills at most 16 pieces of a row; so reads a classifier fine-tuned from it
    assert task.model.encoder.positional.max_len == 16
    ids = torch.tensor([tok.frame(tok.encode(long))[:16]])
    with torch.no_grad():
        reference = transformers.AutoModelForMaskedLM.from_pretrained(folder).eval()(ids).logits
        assert (task.model(ids) - reference).abs().max() < 1e-5
