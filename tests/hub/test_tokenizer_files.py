"""Folders without ``tokenizer.json``: BERT's and DistilBERT's ``vocab.txt``, RoBERTa's
``vocab.json`` and ``merges.txt`` (with ``tokenizer_config.json``) give the ids of
``transformers``' tokenizers read from the same files (the pure-Python ``BertTokenizerLegacy``
too), framing included, on sentences with accents, CJK and emoji; the model then reads as it
does from ``tokenizer.json``; a folder with neither is one error naming the files looked for."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
import torch

from folders import CLASSES, FAMILIES, sentences, vocabulary_files, write_folder
from transformer.hub import HubError, mlm_checkpoint
from transformer.hub.folder import read_tokenizer
from transformer.tasks.checkpoint import load_task

transformers = pytest.importorskip("transformers")
from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy  # noqa: E402


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return {family: write_folder(family, root / family) for family in FAMILIES}


@pytest.mark.parametrize("family", FAMILIES)
def test_ids_equal_the_tokenizers_of_transformers_from_the_same_files(family, folders, tmp_path):
    folder = vocabulary_files(folders[family], tmp_path / family, family)
    assert not (folder / "tokenizer.json").exists()
    texts = sentences(300)
    assert any(ord(c) > 0x3000 for t in texts for c in t) and any("é" in t for t in texts)
    assert any(ord(c) > 0x1F000 for t in texts for c in t)
    tok = read_tokenizer(folder)
    ours = [tok.frame(ids) for ids in tok.encode_batch(texts)]
    hf_tok = transformers.AutoTokenizer.from_pretrained(folder)
    assert type(hf_tok).__name__ == CLASSES[family]
    assert ours == hf_tok(texts)["input_ids"]
    if family != "roberta":  # and the pure-Python tokenizer, which shares no code with ``tokenizers``
        assert ours == BertTokenizerLegacy(vocab_file=str(folder / "vocab.txt"), do_lower_case=True)(texts)["input_ids"]
    # the same ids as the folder's own tokenizer.json gave
    assert ours == transformers.AutoTokenizer.from_pretrained(folders[family])(texts)["input_ids"]
    assert {tok.pad_id, tok.mask_id} <= set(tok.special_ids) and tok.unk_id in tok.special_ids


@pytest.mark.parametrize("config", [{"do_lower_case": False}, {"do_lower_case": True, "strip_accents": False}])
def test_the_slow_tokenizers_settings_are_read(config, folders, tmp_path):
    """``do_lower_case=false`` keeps case (unseen cased words become ``[UNK]``), ``strip_accents=false``
    keeps accents while lowercasing: as ``BertTokenizerLegacy`` reads them."""
    folder = vocabulary_files(folders["bert"], tmp_path / "bert", "bert", **config)
    texts = sentences(300)
    tok = read_tokenizer(folder)
    ours = [tok.frame(ids) for ids in tok.encode_batch(texts)]
    legacy = BertTokenizerLegacy(vocab_file=str(folder / "vocab.txt"), **config)(texts)["input_ids"]
    assert ours == legacy
    default = read_tokenizer(vocabulary_files(folders["bert"], tmp_path / "default", "bert"))
    assert ours != [default.frame(ids) for ids in default.encode_batch(texts)]  # the setting changed something


@pytest.mark.parametrize("family", FAMILIES)
def test_a_folder_of_vocabulary_files_reads_as_with_tokenizer_json(family, folders, tmp_path):
    folder = vocabulary_files(folders[family], tmp_path / family, family)
    task = load_task(f"hf:{folder}")
    reference = load_task(f"hf:{folders[family]}")
    src = torch.tensor([reference.tokenizer.frame(reference.tokenizer.encode("café naïve 日本語 😀 the movie"))])
    assert torch.equal(torch.tensor([task.tokenizer.frame(task.tokenizer.encode("café naïve 日本語 😀 the movie"))]), src)
    with torch.no_grad():
        assert torch.equal(task.model(src), reference.model(src))
    assert mlm_checkpoint(f"hf:{folder}")["tokenizers"]["src"]


def test_a_folder_with_no_tokenizer_is_one_error_naming_the_files(folders, tmp_path):
    folder = tmp_path / "bare"
    shutil.copytree(folders["bert"], folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (folder / name).unlink(missing_ok=True)
    with pytest.raises(HubError, match=r"no tokenizer: looked for tokenizer\.json, vocab\.txt, vocab\.json \+ merges\.txt"):
        mlm_checkpoint(f"hf:{folder}")
    proc = subprocess.run([sys.executable, "-m", "transformer.cli.fill", f"ckpt_path=hf:{folder}"],
                          input="a [MASK]\n", capture_output=True, text=True)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0] == f"error: {folder}: no tokenizer: looked for tokenizer.json, vocab.txt, vocab.json + merges.txt"


def test_a_vocabulary_without_a_special_token_is_refused(folders, tmp_path):
    folder = vocabulary_files(folders["bert"], tmp_path / "bert", "bert")
    lines = (folder / "vocab.txt").read_text(encoding="utf-8").splitlines()
    (folder / "vocab.txt").write_text("".join(t + "\n" for t in lines if t != "[MASK]"), encoding="utf-8")
    with pytest.raises(HubError, match=r"vocab\.txt: no \[MASK\] \(the mask token\) in the vocabulary"):
        read_tokenizer(folder)
