"""M2M100, NLLB and mBART-50 folders read onto our encoder-decoder: the same encoder states and
teacher-forced logits as ``transformers``' models fed the same random weights, the same source
and target ids as the family's tokenizer, and ``transformer-decode ckpt_path=hf:<folder>
src_lang=en tgt_lang=fr`` giving the lines ``generate`` gives (the target's code forced first),
greedy and beam 5. Offline: the folders are written here (``multi_folders.py``)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

pytest.importorskip("sentencepiece")
transformers = pytest.importorskip("transformers")

from folders import sentences  # noqa: E402
from multi_folders import CODES, FAMILIES, write_multi_folder  # noqa: E402
from transformer.hub import HubError, translation_checkpoint  # noqa: E402
from transformer.tasks.checkpoint import load_task  # noqa: E402

TOL = 1e-5
SOURCES = ["the movie was great .", "café naïve 日本語 😀 a good day and a good night .", "über",
           "she said that it was fine , but he did not agree .", "東京 北京 🎉 ça va très bien"]


@pytest.fixture(scope="module", params=FAMILIES)
def folder(request, tmp_path_factory):
    return request.param, write_multi_folder(tmp_path_factory.mktemp("hf") / request.param, request.param)


def _hf(path):
    return transformers.AutoModelForSeq2SeqLM.from_pretrained(path).eval()


def _hf_tokenizer(path):
    return transformers.AutoTokenizer.from_pretrained(path)


def test_encoder_states_and_teacher_forced_logits_match_transformers(folder):
    family, path = folder
    task = load_task(f"hf:{path}")
    hf, tok = _hf(path), _hf_tokenizer(path)
    batch = tok(SOURCES, text_target=SOURCES[::-1], padding=True, return_tensors="pt")
    labels = batch["labels"]  # (B, T), right-padded: [code] pieces </s>
    tgt_in = torch.cat([torch.full_like(labels[:, :1], hf.config.decoder_start_token_id), labels[:, :-1]], 1)
    real, src_real = labels.ne(tok.pad_token_id), batch["attention_mask"].bool()
    assert not real.all() and not src_real.all()  # both sides padded
    with torch.no_grad():
        out = hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], decoder_input_ids=tgt_in)
        memory = task.model.encode(batch["input_ids"]).memory  # (B, S, D)
        ours = task.model(batch["input_ids"], tgt_in)
    assert (memory - out.encoder_last_hidden_state)[src_real].abs().max().item() < TOL
    assert (ours - out.logits)[real].abs().max().item() < TOL
    assert out.logits.abs().max().item() > 1.0


def test_token_ids_match_the_family_tokenizer(folder):
    family, path = folder
    task = load_task(f"hf:{path}")
    tok = _hf_tokenizer(path)
    src_code, tgt_code = (task.src_tokenizer.token_to_id(c) for c in CODES[family])
    texts = sentences(300)
    ours = task.src_tokenizer.encode_batch(texts)
    eos = task.src_tokenizer.eos_id
    assert [[src_code, *ids, eos] for ids in ours] == tok(texts)["input_ids"]
    assert [[tgt_code, *ids, eos] for ids in ours] == tok(text_target=texts)["input_ids"]
    assert sum(ids.count(task.src_tokenizer.unk_id) for ids in ours) < sum(map(len, ours)) / 4  # not all <unk>


def test_language_names_map_to_the_family_codes(folder):
    family, path = folder
    data = translation_checkpoint(f"hf:{path}")["hyper_parameters"]["data"]
    assert data["tag_side"] == "codes"
    assert data["language_codes"]["en"] == CODES[family][0] and data["language_codes"]["fr"] == CODES[family][1]
    assert set(data["languages"]) == set(data["language_codes"])
    if family == "nllb":  # two scripts of Chinese: each by its code
        assert data["language_codes"]["zho_Hans"] == "zho_Hans" and "zh" not in data["language_codes"]


@pytest.mark.parametrize("beams,length_penalty", [(1, 1.0), (5, 1.0), (5, 0.6)])
def test_decode_lines_match_generate(folder, tmp_path, beams, length_penalty):
    from omegaconf import OmegaConf

    from transformer.cli.decode import run

    family, path = folder
    max_new = 20
    inp = tmp_path / "src.txt"
    inp.write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    decode = {"strategy": "greedy" if beams == 1 else "beam", "beam_size": beams, "length_penalty": length_penalty,
              "max_len_a": 0.0, "max_len_b": max_new}
    cfg = OmegaConf.create({"ckpt_path": f"hf:{path}", "input": str(inp), "output": "-", "device": "cpu",
                            "accel": "none", "decode": decode, "src_lang": "en", "tgt_lang": "fr"})
    ours = run(cfg)
    hf, tok = _hf(path), _hf_tokenizer(path)
    code = tok.convert_tokens_to_ids(CODES[family][1])
    batch = tok(SOURCES, padding=True, return_tensors="pt")
    with torch.no_grad():  # max_length: the start, the forced code and max_new tokens
        out = hf.generate(**batch, num_beams=beams, do_sample=False, max_length=max_new + 2,
                          length_penalty=length_penalty, early_stopping=True, forced_eos_token_id=None,
                          forced_bos_token_id=code, bad_words_ids=[[tok.pad_token_id]])
    assert (out[:, 1] == code).all()
    # The outputs after the start and the code (M2M100Tokenizer does not skip codes as special).
    expected = tok.batch_decode(out[:, 2:], skip_special_tokens=True)
    assert ours == expected
    assert len(set(expected)) > 1 and any(expected)  # not one line for all, not all empty


@pytest.mark.parametrize("overrides,named", [
    ({"src_lang": "en", "tgt_lang": "xx"}, "tgt_lang=xx"),
    ({"tgt_lang": "fr"}, "src_lang: required"),
    ({"src_lang": "fr", "tgt_lang": "fr"}, "same language"),
])
def test_a_language_it_lacks_is_one_line_naming_the_key(folder, tmp_path, overrides, named):
    from omegaconf import OmegaConf

    from transformer.cli.decode import run

    _, path = folder
    out = tmp_path / "out.txt"
    cfg = OmegaConf.create({"ckpt_path": f"hf:{path}", "input": "-", "output": str(out), "device": "cpu",
                            "accel": "none", "decode": {"strategy": "greedy"}, **overrides})
    with pytest.raises(ValueError) as err:
        run(cfg)
    assert named in str(err.value) and "\n" not in str(err.value)
    assert not out.exists()


def _edited(path, tmp_path, edit):
    edited = tmp_path / "edited"
    shutil.copytree(path, edited)
    config = json.loads((edited / "config.json").read_text())
    edit(config)
    (edited / "config.json").write_text(json.dumps(config))
    return edited


@pytest.mark.parametrize("edit,named", [
    (lambda c: c.update(activation_function="tanh"), "activation_function='tanh'"),
    (lambda c: c.update(decoder_ffn_dim=128), "decoder_ffn_dim=128"),
    (lambda c: c.update(decoder_start_token_id=0), "decoder_start_token_id=0 but the target tokenizer's start is"),
    (lambda c: c.update(rope_theta=10000), "'rope_theta'"),
])
def test_a_config_key_without_a_place_is_one_line_naming_it(folder, tmp_path, edit, named):
    _, path = folder
    with pytest.raises(HubError) as err:
        translation_checkpoint(f"hf:{_edited(path, tmp_path, edit)}")
    assert named in str(err.value) and "\n" not in str(err.value)


def test_a_tokenizer_file_it_cannot_read_is_one_line_naming_it(tmp_path):
    path = write_multi_folder(tmp_path / "m2m100", "m2m100")
    config = json.loads((path / "tokenizer_config.json").read_text())
    (path / "tokenizer_config.json").write_text(json.dumps({**config, "language_codes": "xx"}))
    with pytest.raises(HubError, match=r"^tokenizer_config.json: language_codes='xx': expected one of m2m100, wmt21$"):
        translation_checkpoint(f"hf:{path}")
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    (path / "vocab.json").unlink()
    with pytest.raises(HubError, match=r"no vocab.json \(M2M100's tokenizer files") as err:
        translation_checkpoint(f"hf:{path}")
    assert "\n" not in str(err.value)
