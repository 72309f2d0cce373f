"""``transformer-export format=hf``: our checkpoints written back as Hugging Face folders that
``transformers`` loads with no missing or unexpected keys and that compute our logits (to 1e-5)
and our token ids: BERT, RoBERTa, DistilBERT and Marian folders round trip through a checkpoint
of ours, and a post-norm translation model trained here is written as Marian (its interleaved
sinusoids become Marian's halves by a permutation of the model dimensions). A model no family
computes is one ``error:`` line naming the setting, and nothing is written."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("sentencepiece")
transformers = pytest.importorskip("transformers")

from folders import FAMILIES, sentences, write_folder  # noqa: E402
from cli.hydra_helpers import compose_cfg, main_status  # noqa: E402
from marian_folder import write_marian_folder  # noqa: E402
from tiny_translation import multi30k_slice, src_batch, tiny_task, trained_tiny_task  # noqa: E402
from transformer.cli import export as export_cli  # noqa: E402
from transformer.tasks.checkpoint import TASK_KEY, load_task  # noqa: E402

TOL = 1e-5
TEXTS = ["the movie was great .", "café naïve 日本語 😀 a good day and a good night .", "über",
         "she said that it was fine , but he did not agree ."]


def _save(task, path: Path) -> str:
    ckpt = {"state_dict": task.state_dict(), "hyper_parameters": dict(task.hparams),
            TASK_KEY: "mlm" if hasattr(task, "tokenizer") and not hasattr(task, "src_tokenizer") else "translation"}
    task.on_save_checkpoint(ckpt)
    torch.save(ckpt, path)
    return str(path)


def _export(ckpt: str, out: Path) -> Path:
    return export_cli.run(compose_cfg("export", [f"ckpt_path={ckpt}", "format=hf", f"output_dir={out}"]))


def _load(cls, folder: Path):
    model, info = cls.from_pretrained(folder, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    return model.eval()


def _padded(ids: list[list[int]], pad: int) -> torch.Tensor:
    longest = max(map(len, ids))
    return torch.tensor([i + [pad] * (longest - len(i)) for i in ids])  # (B, T)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_masked_lm_round_trips_to_its_family(family, tmp_path):
    task = load_task(f"hf:{write_folder(family, tmp_path / 'in')}")
    out = _export(_save(task, tmp_path / "m.ckpt"), tmp_path / "out")
    hf = _load(transformers.AutoModelForMaskedLM, out)
    assert type(hf).__name__.lower().startswith(family)
    tok = load_task(f"{tmp_path / 'm.ckpt'}").tokenizer
    src = _padded([tok.frame(tok.encode(t)) for t in TEXTS], tok.pad_id)
    real = src.ne(tok.pad_id)
    with torch.no_grad():
        expected, ours = hf(input_ids=src, attention_mask=real.long()).logits, task.model(src)
    assert (ours - expected)[real].abs().max().item() < TOL
    assert expected.abs().max().item() > 1.0
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    texts = sentences(200)
    assert hf_tok(texts)["input_ids"] == [tok.frame(i) for i in tok.encode_batch(texts)]


def test_a_marian_model_round_trips_with_its_sentencepiece_files(tmp_path):
    task = load_task(f"hf:{write_marian_folder(tmp_path / 'in', share=False, activation='relu')}")
    out = _export(_save(task, tmp_path / "m.ckpt"), tmp_path / "out")
    hf = _load(transformers.MarianMTModel, out)
    tok = transformers.MarianTokenizer.from_pretrained(out)
    batch = tok(TEXTS, text_target=TEXTS[::-1], padding=True, return_tensors="pt")
    labels = batch["labels"]  # (B, T), right-padded
    tgt_in = torch.cat([torch.full_like(labels[:, :1], hf.config.decoder_start_token_id), labels[:, :-1]], 1)
    real = labels.ne(tok.pad_token_id)
    with torch.no_grad():
        expected = hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                      decoder_input_ids=tgt_in).logits
        ours = task.model(batch["input_ids"], tgt_in)
    assert (ours - expected)[real].abs().max().item() < TOL and expected.abs().max().item() > 1.0
    texts = sentences(200)
    assert tok(texts)["input_ids"] == [task.src_tokenizer.frame(i) for i in task.src_tokenizer.encode_batch(texts)]
    # and the folder reads back as the same model of ours
    again = load_task(f"hf:{out}")
    with torch.no_grad():
        assert torch.equal(again.model(batch["input_ids"], tgt_in), ours)


def test_our_post_norm_translation_model_is_written_as_marian(mirror_root, tmp_path):
    pairs = multi30k_slice(mirror_root, "train", 300, tmp_path / "cache")
    task = tiny_task(pairs, steps=40, norm_first=False)
    assert task.model.encoder.positional.layout == "interleaved"
    out = _export(_save(task, tmp_path / "t.ckpt"), tmp_path / "out")
    hf = _load(transformers.MarianMTModel, out)
    sources = [s for s, _ in pairs[:6]]
    src = src_batch(task, sources)  # (B, S), EOS appended
    tok = task.tgt_tokenizer
    tgt_in = _padded([[task.hparams.bos_id] + tok.encode(t) for _, t in pairs[:6]], tok.pad_id)  # (B, T)
    with torch.no_grad():
        expected = hf(input_ids=src, attention_mask=src.ne(tok.pad_id).long(), decoder_input_ids=tgt_in).logits
        ours = task.model(src, tgt_in)
    real = tgt_in.ne(tok.pad_id)
    assert (ours - expected)[real].abs().max().item() < TOL and expected.abs().max().item() > 1.0
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    assert hf_tok(sources, padding=True, return_tensors="pt")["input_ids"].tolist() == src.tolist()


def test_a_joint_ctc_model_is_written_without_its_ctc_head(mirror_root, tmp_path):
    """The CTC head of joint CTC-attention training (models.JointCTCEncoderDecoder) only trains the
    encoder: the folder holds the encoder-decoder, which computes our logits, and no other tensor."""
    from safetensors.torch import load_file

    pairs = multi30k_slice(mirror_root, "train", 300, tmp_path / "cache")
    task = tiny_task(pairs, steps=20, norm_first=False, _target_="transformer.models.JointCTCEncoderDecoder")
    assert "model.ctc_proj.weight" in task.state_dict()
    out = _export(_save(task, tmp_path / "t.ckpt"), tmp_path / "out")
    assert not any("ctc" in name for name in load_file(out / "model.safetensors"))
    hf = _load(transformers.MarianMTModel, out)  # no missing or unexpected keys
    src = src_batch(task, [s for s, _ in pairs[:4]])
    tok = task.tgt_tokenizer
    tgt_in = _padded([[task.hparams.bos_id] + tok.encode(t) for _, t in pairs[:4]], tok.pad_id)
    with torch.no_grad():
        expected = hf(input_ids=src, attention_mask=src.ne(tok.pad_id).long(), decoder_input_ids=tgt_in).logits
        ours = task.model(src, tgt_in)
    assert (ours - expected)[tgt_in.ne(tok.pad_id)].abs().max().item() < TOL


def test_a_pre_norm_model_is_refused_by_name_and_nothing_is_written(mirror_root, tmp_path, capsys, monkeypatch):
    """Through transformer-export's ``main()`` in process (tests/cli/test_inspect_export_cli.py runs
    it as a process of its own to an error line)."""
    ckpt = _save(trained_tiny_task(str(mirror_root)), tmp_path / "pre.ckpt")
    out = tmp_path / "parent" / "out"
    out.parent.mkdir()
    monkeypatch.chdir(tmp_path)
    code, err = main_status(export_cli, [f"ckpt_path={ckpt}", "format=hf", f"output_dir={out}"], capsys, monkeypatch)
    assert code == 2 and err.strip().startswith("error:") and "norm_first" in err
    assert len(err.strip().splitlines()) == 1, err
    assert not out.exists() and not any((tmp_path / "parent").iterdir())


@pytest.mark.parametrize("norm_first", [False, True])  # Marian's layers, M2M100's
def test_positions_added_to_the_encoder_output_are_refused_by_name(norm_first):
    from transformer.export.folder import ExportError
    from transformer.export.hf import hf_folder_contents

    task = tiny_task([("a b", "c d")] * 4, steps=0, vocab_size=270, norm_first=norm_first, memory_positions=True)
    with pytest.raises(ExportError, match="memory_positions=True"):
        hf_folder_contents(task)


def test_a_non_empty_output_dir_is_kept_without_force(tmp_path):
    folder = write_folder("bert", tmp_path / "in")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("x")
    with pytest.raises(ValueError, match="not empty"):
        _export(f"hf:{folder}", tmp_path / "out")
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["keep.txt"]
    _export(f"hf:{folder}", tmp_path / "hf_direct")  # an hf: folder exports as it is
    _load(transformers.AutoModelForMaskedLM, tmp_path / "hf_direct")


@pytest.mark.parametrize("output_dir", [".", ".."])
def test_the_current_folder_is_no_output_dir_even_with_force(output_dir, tmp_path, capsys, monkeypatch):
    from cli.hydra_helpers import main_status

    folder = write_folder("bert", tmp_path / "in")
    cwd = tmp_path / "a" / "b"
    cwd.mkdir(parents=True)
    (cwd / "mine.txt").write_text("keep")
    monkeypatch.chdir(cwd)
    code, err = main_status(export_cli, [f"ckpt_path=hf:{folder}", "format=hf", f"output_dir={output_dir}",
                                         "force=true"], capsys, monkeypatch)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"error: output_dir={output_dir}: ") and "folder of its own" in lines[0]
    assert sorted(str(p.relative_to(tmp_path / "a")) for p in (tmp_path / "a").rglob("*")) == ["b", "b/mine.txt"]
