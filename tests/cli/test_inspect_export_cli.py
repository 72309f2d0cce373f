"""transformer-inspect, transformer-export and transformer-decode's alignments, end to end on
a tiny translation checkpoint (trained in process for a few seconds) and a tiny tagger."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra_helpers import compose_cfg, main_status
from tiny_translation import src_batch, trained_tiny_task

from transformer.cli import decode as decode_cli
from transformer.cli import export as export_cli
from transformer.cli import inspect as inspect_cli
from transformer.data.core.tokenizer import SubwordTokenizer
from transformer.inspect.attention import sentence_alignments
from transformer.tasks.checkpoint import TASK_KEY, load_task
from transformer.tasks.tagging import TaggingTask

pytest.importorskip("matplotlib")
Image = pytest.importorskip("PIL.Image")
REPO = Path(__file__).resolve().parents[2]
SENTENCE = "Ein Hund rennt über die Wiese."


def save_checkpoint(task, path: Path, kind: str) -> str:
    ckpt = {"state_dict": task.state_dict(), "hyper_parameters": dict(task.hparams), TASK_KEY: kind}
    task.on_save_checkpoint(ckpt)
    torch.save(ckpt, path)
    return str(path)


@pytest.fixture(scope="module")
def translation_ckpt(mirror_root, tmp_path_factory):
    return save_checkpoint(trained_tiny_task(str(mirror_root)), tmp_path_factory.mktemp("ckpt") / "t.ckpt",
                           "translation")


@pytest.fixture(scope="module")
def tagger_ckpt(tmp_path_factory):
    words = "the cat sat on the mat . a dog barked loudly at the cats !".split() * 10
    tok = SubwordTokenizer.train(words, vocab_size=280)
    task = TaggingTask(
        model={"_target_": "transformer.models.tagger.Tagger", "d_model": 16, "n_heads": 2, "n_layers": 2,
               "d_ff": 32, "dropout": 0.0, "max_len": 64, "window": 2, "norm_first": True},
        piece_vocab_size=tok.vocab_size, pad_id=tok.pad_id, tags=["DET", "NOUN", "VERB", "PUNCT"],
        data={"name": "gum", "tagset": "upos"}, tokenizer=tok.to_str(),
    )
    return save_checkpoint(task.eval(), tmp_path_factory.mktemp("ckpt") / "tagger.ckpt", "tagging")


def panels(png: Path) -> int:
    with Image.open(png) as img:
        img.load()
        return int(img.text["Description"].split()[0])


def cli(module: str, args: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", f"transformer.cli.{module}", *args], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=300)


def test_inspect_translation_saves_the_models_own_weights_and_a_panel_per_head(translation_ckpt, tmp_path):
    out = tmp_path / "inspect"
    cfg = compose_cfg("inspect", [f"ckpt_path={translation_ckpt}", f"text='{SENTENCE}'", f"output_dir={out}"])
    inspect_cli.run(cfg)
    folder = out / "sentence_0"
    for name in ("encoder_layer0.png", "decoder_layer0.png", "cross_layer0.png"):
        assert panels(folder / name) == 2  # tiny model: 2 heads
    assert panels(folder / "alignment.png") == 1
    assert "sentence_0/cross_layer0.png" in (out / "index.html").read_text()
    saved = np.load(folder / "attention.npz")
    # the same input through the model with need_weights=True
    task = load_task(translation_ckpt)
    src = src_batch(task, [SENTENCE])
    hyp = task.search_fn({"strategy": "greedy"})(src)[0][0][0]
    with torch.no_grad():
        memory, enc_w = task.model.encoder(src, need_weights=True)
        tgt_in = torch.tensor([[task.hparams.bos_id, *hyp]])
        _, dec_w = task.model.decoder(tgt_in, memory, src.ne(task.hparams.pad_id), need_weights=True)
    assert np.allclose(saved["encoder.layer0"], enc_w[0][0].numpy(), atol=1e-6)
    assert np.allclose(saved["decoder.layer0"], dec_w[0][0][0].numpy(), atol=1e-6)
    assert np.allclose(saved["cross.layer0"], dec_w[0][1][0].numpy(), atol=1e-6)
    assert len(saved["source"]) == src.size(1) and len(saved["target_out"]) == len(hyp) + 1
    assert saved["target_in"][0] == "<s>" and saved["source"][-1] == "</s>"


def test_inspect_tagger_labels_tags_and_shows_the_window(tagger_ckpt, tmp_path):
    out = tmp_path / "tagger"
    inspect_cli.run(compose_cfg("inspect", [f"ckpt_path={tagger_ckpt}", "text='the cat sat on the mat .'",
                                            f"output_dir={out}"]))
    saved = np.load(out / "sentence_0" / "attention.npz")
    task = load_task(tagger_ckpt)
    assert list(saved["tags"]) == task.tagger().tag([["the", "cat", "sat", "on", "the", "mat", "."]])[0]
    assert saved["tokens"][0].endswith("/" + saved["tags"][0])
    w = saved["encoder.layer1"]  # (H, T, T)
    t = w.shape[-1]
    outside = np.abs(np.arange(t)[:, None] - np.arange(t)[None]) > 2
    assert np.abs(w[:, outside]).max() == 0 and np.allclose(w.sum(-1), 1.0, atol=1e-5)
    assert panels(out / "sentence_0" / "encoder_layer1.png") == 2


def test_inspect_positions(translation_ckpt, tmp_path):
    out = tmp_path / "pos"
    inspect_cli.run(compose_cfg("inspect", [f"ckpt_path={translation_ckpt}", "what=positions",
                                            f"output_dir={out}", "positions=32"]))
    arrays = np.load(out / "positions.npz")
    assert arrays["encoder.table"].shape == (32, 32) and arrays["decoder.similarity"].shape == (32, 32)
    for name in ("encoder_table.png", "encoder_similarity.png", "decoder_table.png", "index.html"):
        assert (out / name).is_file()


def test_decode_prints_argmax_alignments(translation_ckpt, tmp_path):
    src_file = tmp_path / "src.de"
    sentences = [SENTENCE, "", "Zwei Männer spielen Fußball auf einer Wiese."]
    src_file.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    lines = decode_cli.run(compose_cfg("decode", [f"ckpt_path={translation_ckpt}", f"input={src_file}",
                                                  f"output={tmp_path / 'out'}", "decode.print_alignment=true"]))
    plain = decode_cli.run(compose_cfg("decode", [f"ckpt_path={translation_ckpt}", f"input={src_file}",
                                                  f"output={tmp_path / 'out2'}"]))
    assert [line.split(" ||| ")[0] for line in lines] == plain  # translations unchanged
    assert lines[1] == " ||| "
    task = load_task(translation_ckpt)
    hp = task.hparams
    for sentence, line in zip(sentences[::2], lines[::2]):
        src = src_batch(task, [sentence])
        hyp = task.search_fn({"strategy": "greedy"})(src)[0][0][0]
        pairs = [tuple(map(int, p.split("-"))) for p in line.split(" ||| ")[1].split()]
        assert [j for _, j in pairs] == list(range(len(hyp)))  # every target piece, in order
        assert all(0 <= i < src.size(1) - 1 for i, _ in pairs)  # a real source piece, never EOS
        assert line.split(" ||| ")[1] == sentence_alignments(task.model, src, [hyp], hp.bos_id, hp.eos_id, hp.pad_id)[0]
    # n-best with beam search: one alignment per hypothesis line
    nbest = decode_cli.run(compose_cfg("decode", [f"ckpt_path={translation_ckpt}", f"input={src_file}",
                                                  f"output={tmp_path / 'out3'}", "decode.strategy=beam", "decode.n_best=2",
                                                  "decode.print_alignment=true", "decode.alignment_layer=0"]))
    assert len(nbest) == 5 and all(line.count(" ||| ") == 3 for line in nbest)


def test_export_cli_writes_a_ctranslate2_model(translation_ckpt, tmp_path):
    pytest.importorskip("ctranslate2")
    out = export_cli.run(compose_cfg("export", [f"ckpt_path={translation_ckpt}", f"output_dir={tmp_path / 'ct2'}",
                                                "quantization=int8"]))
    assert json.loads((out / "config.json").read_text())["decoder_start_token"] == "<s>"
    assert (out / "target_tokenizer.json").is_file()


def test_bad_input_is_one_error_line_and_status_2(translation_ckpt, tagger_ckpt, tmp_path, capsys, monkeypatch):
    # transformer-export as a process of its own (transformer-inspect runs as one below)
    proc = cli("export", [f"ckpt_path={tagger_ckpt}", f"output_dir={tmp_path / 'x'}"])
    assert proc.returncode == 2 and proc.stderr.strip().startswith("error:") and "Tagger" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    monkeypatch.chdir(tmp_path)
    code, err = main_status(inspect_cli, [f"ckpt_path={tmp_path / 'missing.ckpt'}", "text=x"], capsys, monkeypatch)
    assert code == 2 and "checkpoint not found" in err
    # the same wrapper turns these ValueErrors into "error: ..." and status 2
    with pytest.raises(ValueError, match="text="):
        inspect_cli.run(compose_cfg("inspect", [f"ckpt_path={translation_ckpt}", f"output_dir={tmp_path / 'y'}"]))
    with pytest.raises(ValueError, match="what="):
        inspect_cli.run(compose_cfg("inspect", [f"ckpt_path={translation_ckpt}", "what=heads", "text=x"]))


def test_inspect_console_script_runs(translation_ckpt, tmp_path):
    proc = cli("inspect", [f"ckpt_path={translation_ckpt}", f"text={SENTENCE}", f"output_dir={tmp_path / 'o'}",
                           "decode.strategy=beam", "decode.beam_size=3"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "o" / "sentence_0" / "alignment.png").is_file()


def test_inspect_and_export_configs_compose():
    cfg = compose_cfg("inspect", ["ckpt_path=x.ckpt", "decode.strategy=beam", "what=positions"])
    assert cfg.decode.beam_size == 5 and cfg.max_tokens > 0 and cfg.decode.print_alignment is False
    cfg = compose_cfg("export", ["ckpt_path=x.ckpt", "output_dir=o", "quantization=int8"])
    assert (cfg.format, cfg.quantization, cfg.force) == ("ctranslate2", "int8", False)
