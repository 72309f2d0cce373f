"""BERT, RoBERTa and DistilBERT folders read onto our masked LM: the same hidden states, logits,
fillers and token ids as ``transformers`` itself, fed the same random weights; what has no place
in our model is refused by name. Offline: the folders are written here (``folders.py``)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from folders import FAMILIES, sentences, write_folder
from transformer.hub import HubError, mlm_checkpoint
from transformer.tasks.checkpoint import load_task

transformers = pytest.importorskip("transformers")

TOL = 1e-5


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return {family: write_folder(family, root / family) for family in FAMILIES}


def _hf(folder):
    return transformers.AutoModelForMaskedLM.from_pretrained(folder).eval()


def _padded_batch(tok, texts):
    ids = [tok.frame(tok.encode(t)) for t in texts]
    longest = max(map(len, ids))
    src = torch.tensor([i + [tok.pad_id] * (longest - len(i)) for i in ids])  # (B, T)
    return src, src.ne(tok.pad_id)


@pytest.mark.parametrize("family", FAMILIES)
def test_hidden_states_and_logits_match_transformers(folders, family):
    task = load_task(f"hf:{folders[family]}")
    hf = _hf(folders[family])
    texts = ["the movie was great .", "café naïve 日本語 😀 a good day and a good night .", "über"]
    src, real = _padded_batch(task.tokenizer, texts)
    assert not real.all()  # the batch has padding
    with torch.no_grad():
        out = hf(input_ids=src, attention_mask=real.long(), output_hidden_states=True)
        states, logits = task.model.encode(src), task.model(src)
    # Padded positions are no one's output (RoBERTa gives them the padding row's position).
    assert (states - out.hidden_states[-1])[real].abs().max().item() < TOL
    assert (logits - out.logits)[real].abs().max().item() < TOL
    assert logits.abs().max().item() > 1.0  # not a trivially small comparison


@pytest.mark.parametrize("family", FAMILIES)
def test_token_ids_match_the_hf_tokenizer(folders, family):
    tok = load_task(f"hf:{folders[family]}").tokenizer
    hf_tok = transformers.AutoTokenizer.from_pretrained(folders[family])
    texts = sentences(300)
    assert any(ord(c) > 0x3000 for t in texts for c in t) and any("é" in t for t in texts)
    expected = hf_tok(texts)["input_ids"]
    ours = [tok.frame(ids) for ids in tok.encode_batch(texts)]
    assert ours == expected


@pytest.mark.parametrize("family", FAMILIES)
def test_fill_matches_the_fill_mask_pipeline(folders, family, capsys):
    """Fillers, ids, probabilities and the filled sequences, the pipeline's: WordPiece's filler
    stands as a word of its own (``the red runs``, not ``thered runs``) and the space before
    punctuation goes as ``transformers`` tidies it; with two masks, the framing and the other
    mask are shown, as the pipeline shows them."""
    from transformer.cli.fill import run
    from omegaconf import OmegaConf

    mask = "[MASK]" if family != "roberta" else "<mask>"
    lines = [f"the {mask} runs in the park .", f"the movie was {mask} .", f"a good {mask} and a good night",
             f"café {mask} 日本語", f"{mask} starts it", f"two {mask} and {mask} here"]
    inp = folders[family] / "masked.txt"
    inp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = OmegaConf.create({"ckpt_path": f"hf:{folders[family]}", "input": str(inp), "output": "-",
                            "format": "json", "top_k": 5, "max_tokens": 4096, "device": "cpu", "accel": "none"})
    ours = [json.loads(line) for line in run(cfg)]
    hf_tok = transformers.AutoTokenizer.from_pretrained(folders[family])
    pipe = transformers.pipeline("fill-mask", model=_hf(folders[family]), tokenizer=hf_tok, device="cpu")
    specials = set(hf_tok.all_special_ids)
    for line, got in zip(lines, ours):
        answers = pipe(line, top_k=5 + len(specials))
        per_mask = answers if isinstance(answers[0], list) else [answers]
        assert len(got) == len(per_mask) == line.count(mask)
        for fillers, theirs in zip(got, per_mask):
            theirs = [r for r in theirs if r["token"] not in specials][:5]
            assert [f["token"] for f in fillers] == [r["token"] for r in theirs]
            assert [f["token_str"] for f in fillers] == [r["token_str"].strip() for r in theirs]
            assert [f["sequence"] for f in fillers] == [r["sequence"] for r in theirs]
            assert max(abs(f["score"] - r["score"]) for f, r in zip(fillers, theirs)) < TOL
    if family != "roberta":  # a whole-word filler stands apart from "the" (not "thered runs")
        words = [f for f in ours[0][0] if not hf_tok.convert_ids_to_tokens(f["token"]).startswith("##")]
        assert words and all(f["sequence"].startswith(f"the {f['token_str']} runs ") for f in words)


def test_pytorch_model_bin_reads_as_safetensors(folders, tmp_path):
    folder = shutil.copytree(folders["bert"], tmp_path / "bin")
    from safetensors.torch import load_file

    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    a, b = mlm_checkpoint(f"hf:{folders['bert']}"), mlm_checkpoint(f"hf:{folder}")
    assert a["state_dict"].keys() == b["state_dict"].keys()
    assert all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"])


def _edited_config(folder, tmp_path, **changes):
    copy = shutil.copytree(folder, tmp_path / "edited")
    config = json.loads((copy / "config.json").read_text())
    config.update(changes)
    (copy / "config.json").write_text(json.dumps(config))
    return copy


@pytest.mark.parametrize("changes, named", [
    ({"rotary_dim": 16}, "rotary_dim"),
    ({"position_embedding_type": "relative_key"}, "position_embedding_type"),
    ({"hidden_act": "gelu_new"}, "hidden_act"),
    ({"attention_probs_dropout_prob": 0.3}, "attention_probs_dropout_prob"),
])
def test_a_config_key_with_no_place_is_refused_by_name(folders, tmp_path, changes, named):
    folder = _edited_config(folders["bert"], tmp_path, **changes)
    with pytest.raises(HubError) as err:
        mlm_checkpoint(f"hf:{folder}")
    assert named in str(err.value) and "\n" not in str(err.value)


def test_a_tensor_with_no_place_is_refused_by_name(folders, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = shutil.copytree(folders["roberta"], tmp_path / "extra")
    weights = load_file(folder / "model.safetensors")
    weights["roberta.encoder.layer.0.attention.self.rel_bias"] = torch.zeros(4)
    save_file(weights, folder / "model.safetensors")
    with pytest.raises(HubError, match=r"roberta\.encoder\.layer\.0\.attention\.self\.rel_bias has no place"):
        mlm_checkpoint(f"hf:{folder}")


def test_a_missing_tensor_is_refused_by_name(folders, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = shutil.copytree(folders["distilbert"], tmp_path / "short")
    weights = load_file(folder / "model.safetensors")
    del weights["distilbert.transformer.layer.1.sa_layer_norm.bias"]
    save_file(weights, folder / "model.safetensors")
    with pytest.raises(HubError, match=r"nothing fills our encoder\.layers\.1\.norm_1\.bias"):
        mlm_checkpoint(f"hf:{folder}")


def test_pretraining_heads_are_named_not_silently_dropped(folders, tmp_path, caplog):
    from safetensors.torch import load_file, save_file

    folder = shutil.copytree(folders["bert"], tmp_path / "pretraining")
    weights = load_file(folder / "model.safetensors")
    weights["cls.seq_relationship.weight"] = torch.zeros(2, 32)
    save_file(weights, folder / "model.safetensors")
    with caplog.at_level("WARNING"):
        mlm_checkpoint(f"hf:{folder}")
    assert "cls.seq_relationship.weight" in caplog.text


def test_a_hub_id_offline_is_one_error_line_naming_the_folder_form(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(HubError) as err:
        mlm_checkpoint("hf:some/id")
    message = str(err.value)
    assert "\n" not in message and "offline" in message and "ckpt_path=hf:/path/to/folder" in message


def test_the_fill_command_reports_a_hub_id_offline_on_one_line(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "transformer.cli.fill", "ckpt_path=hf:some/id"], input="a [MASK]\n",
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "hf:/path/to/folder" in errors[0], proc.stderr
