"""A Marian folder read onto our encoder-decoder: the same teacher-forced logits as
``transformers``' ``MarianMTModel`` fed the same random weights, the same token ids and text as
``MarianTokenizer``, and ``transformer-decode ckpt_path=hf:<folder>`` giving the lines
``generate`` gives with the same search settings; what has no place in our model is refused by
name. Offline: the folder is written here (``marian_folder.py``)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

pytest.importorskip("sentencepiece")
transformers = pytest.importorskip("transformers")

from folders import sentences  # noqa: E402
from marian_folder import write_marian_folder  # noqa: E402
from transformer.hub import HubError, translation_checkpoint  # noqa: E402
from transformer.tasks.checkpoint import load_task  # noqa: E402

TOL = 1e-5
SOURCES = ["the movie was great .", "café naïve 日本語 😀 a good day and a good night .", "über",
           "she said that it was fine , but he did not agree .", "東京 北京 🎉 ça va très bien"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_marian_folder(tmp_path_factory.mktemp("hf") / "marian")


def _hf(folder):
    return transformers.MarianMTModel.from_pretrained(folder).eval()


def _hf_tokenizer(folder):
    return transformers.MarianTokenizer.from_pretrained(folder)


@pytest.mark.parametrize("variant", [{}, {"activation": "gelu", "scale_embedding": False},
                                     {"activation": "relu", "share": False}])
def test_teacher_forced_logits_match_transformers(folder, tmp_path, variant):
    path = write_marian_folder(tmp_path / "m", **variant) if variant else folder
    task = load_task(f"hf:{path}")
    hf, tok = _hf(path), _hf_tokenizer(path)
    batch = tok(SOURCES, text_target=SOURCES[::-1], padding=True, return_tensors="pt")
    labels = batch["labels"]  # (B, T), right-padded
    tgt_in = torch.cat([torch.full_like(labels[:, :1], hf.config.decoder_start_token_id), labels[:, :-1]], 1)
    real = labels.ne(tok.pad_token_id)
    assert not real.all() and not batch["attention_mask"].bool().all()  # both sides padded
    with torch.no_grad():
        expected = hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                      decoder_input_ids=tgt_in).logits
        ours = task.model(batch["input_ids"], tgt_in)
    assert (ours - expected)[real].abs().max().item() < TOL
    assert expected.abs().max().item() > 1.0


def test_token_ids_and_text_match_marian_tokenizer(folder):
    task = load_task(f"hf:{folder}")
    tok = _hf_tokenizer(folder)
    texts = sentences(300) + [">>fr<< a good day"]
    assert any(ord(c) > 0x3000 for t in texts for c in t) and any("é" in t for t in texts)
    assert [task.src_tokenizer.frame(i) for i in task.src_tokenizer.encode_batch(texts)] == tok(texts)["input_ids"]
    assert [task.tgt_tokenizer.frame(i) for i in task.tgt_tokenizer.encode_batch(texts)] == \
        tok(text_target=texts)["input_ids"]
    g = torch.Generator().manual_seed(0)
    ids = [torch.randint(0, len(tok), (int(n),), generator=g).tolist()
           for n in torch.randint(1, 16, (300,), generator=g)]
    assert task.tgt_tokenizer.decode_batch(ids) == tok.batch_decode(ids, skip_special_tokens=True)


@pytest.mark.parametrize("beams,length_penalty", [(1, 1.0), (5, 1.0), (5, 0.6)])
def test_decode_lines_match_generate(folder, tmp_path, beams, length_penalty):
    from omegaconf import OmegaConf

    from transformer.cli.decode import run

    max_new = 20
    inp = tmp_path / "src.txt"
    inp.write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    decode = {"strategy": "greedy" if beams == 1 else "beam", "beam_size": beams, "length_penalty": length_penalty,
              "max_len_a": 0.0, "max_len_b": max_new}
    cfg = OmegaConf.create({"ckpt_path": f"hf:{folder}", "input": str(inp), "output": "-", "device": "cpu",
                            "accel": "none", "decode": decode})
    ours = run(cfg)
    hf, tok = _hf(folder), _hf_tokenizer(folder)
    batch = tok(SOURCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = hf.generate(**batch, num_beams=beams, do_sample=False, max_length=max_new + 1,
                          length_penalty=length_penalty, early_stopping=True, forced_eos_token_id=None,
                          bad_words_ids=[[tok.pad_token_id]])
    expected = tok.batch_decode(out, skip_special_tokens=True)
    assert ours == expected
    assert len(set(expected)) > 1 and any(expected)  # not one line for all, not all empty


def _edited(folder, tmp_path, edit):
    path = tmp_path / "edited"
    shutil.copytree(folder, path)
    config = json.loads((path / "config.json").read_text())
    edit(config)
    (path / "config.json").write_text(json.dumps(config))
    return path


@pytest.mark.parametrize("edit,named", [
    (lambda c: c.update(normalize_before=True), "normalize_before=True"),
    (lambda c: c.update(activation_function="tanh"), "activation_function='tanh'"),
    (lambda c: c.update(decoder_ffn_dim=128), "decoder_ffn_dim=128"),
    (lambda c: c.update(decoder_start_token_id=0), "decoder_start_token_id=0 but the target tokenizer's start is"),
    (lambda c: c.update(rope_theta=10000), "'rope_theta'"),
])
def test_a_config_key_without_a_place_is_one_line_naming_it(folder, tmp_path, edit, named):
    with pytest.raises(HubError) as err:
        translation_checkpoint(f"hf:{_edited(folder, tmp_path, edit)}")
    assert named in str(err.value) and "\n" not in str(err.value)


def test_an_unplaced_or_missing_tensor_is_one_line_naming_it(folder, tmp_path):
    from safetensors.torch import load_file, save_file

    path = tmp_path / "extra"
    shutil.copytree(folder, path)
    weights = load_file(str(path / "model.safetensors"))
    save_file({**weights, "model.encoder.layernorm_embedding.weight": torch.ones(32)},
              str(path / "model.safetensors"))
    with pytest.raises(HubError) as err:
        load_task(f"hf:{path}")
    assert "model.encoder.layernorm_embedding.weight has no place" in str(err.value)
    assert "\n" not in str(err.value)
    del weights["final_logits_bias"]
    save_file(weights, str(path / "model.safetensors"))
    with pytest.raises(HubError, match="nothing fills our decoder.output_bias"):
        translation_checkpoint(f"hf:{path}")


def test_fill_refuses_a_translation_folder(folder):
    from transformer.hub import mlm_checkpoint

    with pytest.raises(HubError, match="model_type=.marian. is a translation model, not a masked LM"):
        mlm_checkpoint(f"hf:{folder}")


def test_the_decode_command_reads_a_marian_folder(folder, tmp_path, capsys, monkeypatch):
    from cli.hydra_helpers import main_output

    from transformer.cli import decode

    inp = tmp_path / "src.txt"
    inp.write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    code, stdout, err = main_output(decode, [f"ckpt_path=hf:{folder}", f"input={inp}", "decode.strategy=beam",
                                             "decode.beam_size=5", "device=cpu"], capsys, monkeypatch)
    assert code == 0, err
    assert len(stdout.splitlines()) == len(SOURCES)
