"""CTC NAT end to end through the CLIs: a tiny CTC model with glancing trains (debug=fast), then
transformer-evaluate and transformer-decode read the checkpoint alone; a distilled corpus from
transformer-distill is its training data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra_helpers import compose_cfg
from model_configs import TINY

TINY_CTC = [
    *TINY["nat_ctc_tiny"], "task=nat_ctc", "task.val_decode.strategy=ctc_one_pass", "trainer.accelerator=cpu", "trainer.precision=32-true", "debug=fast",
    "logger.tensorboard=null", "data.src_lang=de", "data.tgt_lang=en", "data.vocab_size=300", "++data.eval_splits=[val]",
    "trainer.limit_val_batches=1", "test_splits=[]", "name=ctc_tiny",
    "task.glancing.ratio_start=0.5", "task.glancing.ratio_end=0.3", "task.glancing.anneal_steps=2",
]


@pytest.fixture(scope="module")
def ctc_run(tmp_path_factory, mirror_root):
    from transformer.cli import train

    root = tmp_path_factory.mktemp("ctc_cli")
    cfg = compose_cfg("train", [*TINY_CTC, f"output_dir={root / 'run'}", f"data.data_dir={root / 'cache'}",
                                f"data.mirror_root={mirror_root}"])
    return root, train.run(cfg)


def test_ctc_model_trains_with_glancing_and_logs_its_metrics(ctc_run):
    root, summary = ctc_run
    assert summary["global_step"] == 3 and Path(summary["best_checkpoint"]).is_file()
    header = (root / "run" / "csv" / "metrics.csv").read_text().splitlines()[0].split(",")
    for key in ("train/loss", "train/glance_ratio", "train/revealed", "train/ctc_infeasible", "val/loss", "val/bleu"):
        assert key in header, key


def test_evaluate_and_decode_read_the_checkpoint_alone(ctc_run, mirror_root, tmp_path):
    from transformer.cli import decode, evaluate
    from transformer.tasks.checkpoint import load_task

    root, summary = ctc_run
    ckpt = summary["best_checkpoint"]
    task = load_task(ckpt)
    assert task.task_name == "nat_ctc" and task.glancing.ratio_start == 0.5
    metrics = evaluate.run(compose_cfg("eval", [
        f"ckpt_path={ckpt}", "split=val", "decode.strategy=ctc_one_pass", f"output_dir={tmp_path}",
        f"data_dir={root / 'cache'}", f"mirror_root={mirror_root}", "device=cpu"]))
    written = json.loads((tmp_path / "val.ctc_one_pass.json").read_text())
    assert written["bleu"] == metrics["bleu"] and written["sentences"] == 1014
    assert metrics["avg_iterations"] == 1.0 and "bleu_lowercase" in metrics

    src_file = tmp_path / "in.de"
    sources = ["Ein Hund läuft.", "", "Zwei Männer spielen Fußball im Park."]
    src_file.write_text("\n".join(sources) + "\n", encoding="utf-8")
    for strategy, shortlist in (("ctc_one_pass", "train"), ("nat_one_pass", None), ("greedy", None)):
        # the CTC presets score the training targets' ids; the NAT aliases every id
        expected = [n[0][0] for n in task.translator({"strategy": "ctc_one_pass", "shortlist": shortlist}).translate(sources)]
        lines = decode.run(compose_cfg("decode", [f"ckpt_path={ckpt}", f"input={src_file}",
                                                  f"output={tmp_path / 'out.en'}", f"decode.strategy={strategy}", "device=cpu"]))
        assert lines == expected and lines[1] == ""


def test_a_length_predicting_strategy_on_a_ctc_checkpoint_is_a_clear_error(ctc_run, tmp_path):
    from transformer.cli import decode

    src_file = tmp_path / "in.de"
    src_file.write_text("Ein Hund läuft.\n", encoding="utf-8")
    with pytest.raises(ValueError, match="CTC"):
        decode.run(compose_cfg("decode", [f"ckpt_path={ctc_run[1]['best_checkpoint']}", f"input={src_file}",
                                          "decode.strategy=mask_predict", "device=cpu"]))


def _benchmark_systems() -> list:
    """The systems ``scripts/nat_benchmark.py`` measures (a script, not a package module)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "nat_benchmark", Path(__file__).resolve().parents[2] / "scripts" / "nat_benchmark.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench.SYSTEMS


def test_nat_benchmark_counts_a_ctc_checkpoint(ctc_run, mirror_root, tmp_path):
    from transformer.evaluation.nat import benchmark
    from transformer.tasks.checkpoint import load_task

    SYSTEMS = _benchmark_systems()

    root, summary = ctc_run
    task = load_task(summary["best_checkpoint"])
    sources = ["Ein Hund läuft.", "Zwei Männer spielen Fußball im Park.", "Eine Frau liest."]
    results = benchmark({"ctc": task}, sources, sources, SYSTEMS, latency_sentences=2, throughput_sentences=3,
                        batch_size=2, warmup=1)
    assert list(results) == ["CTC one pass", "CTC one pass int8", "CTC prefix beam 5"]  # shortlists need a file
    r = results["CTC one pass"]
    assert r["latency_batch1"]["sentences"] == 2 and r["throughput_batch2"]["sentences"] == 3
    assert r["avg_iterations"] == 1.0 and "bleu_lowercase" in r
    shortlist = tmp_path / "targets.en"
    shortlist.write_text("A dog runs.\nTwo men play football.\n", encoding="utf-8")
    results = benchmark({"ctc": task}, sources, sources, SYSTEMS, latency_sentences=1, throughput_sentences=3,
                        batch_size=2, warmup=0, shortlist=str(shortlist))
    assert list(results) == ["CTC one pass", "CTC one pass int8", "CTC one pass shortlist",
                             "CTC one pass shortlist int8", "CTC prefix beam 5"]
    assert task.model.output_ids is None  # the shortlist and int8 systems decoded copies
    one_pass = [s for s in SYSTEMS if s[0] == "CTC one pass"]
    for penalty, speaks in ((-100.0, False), (100.0, True)):  # the blank always / never wins
        results = benchmark({"ctc": task}, sources, sources, one_pass, latency_sentences=1, throughput_sentences=3,
                            batch_size=2, warmup=0, blank_penalty=penalty)
        assert (results["CTC one pass"]["throughput_batch2"]["output_tokens_per_second"] > 0) == speaks


def test_decode_with_a_shortlist_and_int8_matches_the_translator(ctc_run, tmp_path):
    from transformer.accel.quantize import is_quantized
    from transformer.cli import decode
    from transformer.cli.common import load_for_inference
    from transformer.tasks.checkpoint import load_task

    ckpt = ctc_run[1]["best_checkpoint"]
    src_file, targets = tmp_path / "in.de", tmp_path / "targets.en"
    sources = ["Ein Hund läuft.", "", "Zwei Männer spielen Fußball im Park."]
    src_file.write_text("\n".join(sources) + "\n", encoding="utf-8")
    targets.write_text("A dog runs in the park.\nTwo men play football.\n", encoding="utf-8")
    task = load_task(ckpt)
    allowed = {i for ids in task.tgt_tokenizer.encode_batch(targets.read_text().splitlines()) for i in ids}
    cut = task.translator({"strategy": "ctc_one_pass", "shortlist": str(targets)})
    assert all(set(task.tgt_tokenizer.encode(n[0][0])) <= allowed for n in cut.translate(sources))
    lines = decode.run(compose_cfg("decode", [f"ckpt_path={ckpt}", f"input={src_file}", "decode.strategy=ctc_one_pass",
                                              f"decode.shortlist={targets}", "device=cpu", "accel=none"]))
    assert lines == [n[0][0] for n in cut.translate(sources)]
    quantized, _ = load_for_inference(ckpt, "cpu", "cpu", "int8")
    assert is_quantized(quantized.model.decoder.output_proj)
    expected = [n[0][0] for n in quantized.translator({"strategy": "ctc_one_pass", "shortlist": "train"}).translate(sources)]
    lines = decode.run(compose_cfg("decode", [f"ckpt_path={ckpt}", f"input={src_file}", "decode.strategy=ctc_one_pass",
                                              "quantize=int8", "device=cpu"]))
    assert lines == expected and len(lines) == 3 and lines[1] == ""


@pytest.mark.parametrize("override, message", [
    ("decode.shortlist=/nonexistent/targets.en", "decode.shortlist=/nonexistent/targets.en: input file not found"),
    ("quantize=int4", "quantize='int4': expected one of none, int8"),
    ("decode.blank_penalty=lots", "decode.blank_penalty='lots': expected a number"),
])
def test_a_bad_shortlist_or_quantize_is_one_error_line(ctc_run, tmp_path, override, message):
    import os
    import subprocess
    import sys

    src_file = tmp_path / "in.de"
    src_file.write_text("Ein Hund läuft.\n", encoding="utf-8")
    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "transformer.cli.decode", f"ckpt_path={ctc_run[1]['best_checkpoint']}",
                           f"input={src_file}", "decode.strategy=ctc_one_pass", override], cwd=tmp_path, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [f"error: {message}"]


def test_prefix_beam_search_decodes_from_the_command_line(ctc_run, tmp_path):
    from transformer.cli import decode
    from transformer.tasks.checkpoint import load_task

    ckpt = ctc_run[1]["best_checkpoint"]
    src_file = tmp_path / "in.de"
    sources = ["Ein Hund läuft.", "", "Zwei Männer spielen Fußball im Park."]
    src_file.write_text("\n".join(sources) + "\n", encoding="utf-8")
    lines = decode.run(compose_cfg("decode", [f"ckpt_path={ckpt}", f"input={src_file}", "decode.strategy=ctc_beam",
                                              "decode.beam_size=3", "device=cpu"]))
    expected = load_task(ckpt).translator({"strategy": "ctc_beam", "beam_size": 3, "top_k": 8,
                                           "shortlist": "train"}).translate(sources)
    assert lines == [n[0][0] for n in expected] and lines[1] == ""


def test_a_blank_penalty_reaches_the_search_from_the_command_line(ctc_run, tmp_path):
    from transformer.cli import decode
    from transformer.tasks.checkpoint import load_task

    ckpt = ctc_run[1]["best_checkpoint"]
    src_file = tmp_path / "in.de"
    sources = ["Ein Hund läuft.", "Zwei Männer spielen Fußball im Park."]
    src_file.write_text("\n".join(sources) + "\n", encoding="utf-8")
    task = load_task(ckpt)
    for strategy in ("ctc_one_pass", "ctc_beam"):
        lines = decode.run(compose_cfg("decode", [f"ckpt_path={ckpt}", f"input={src_file}", f"decode.strategy={strategy}",
                                                  "decode.blank_penalty=-100", "device=cpu"]))
        assert lines == ["", ""]  # the blank wins everywhere
        lines = decode.run(compose_cfg("decode", [f"ckpt_path={ckpt}", f"input={src_file}", f"decode.strategy={strategy}",
                                                  "decode.blank_penalty=100", "device=cpu"]))
        assert all(lines)  # the blank never wins
        lines = decode.run(compose_cfg("decode", [f"ckpt_path={ckpt}", f"input={src_file}", f"decode.strategy={strategy}",
                                                  "decode.blank_penalty=1.5", "device=cpu"]))
        expected = task.translator({"strategy": strategy, "shortlist": "train", "blank_penalty": 1.5}).translate(sources)
        assert lines == [n[0][0] for n in expected]


def test_the_checkpoint_records_its_training_targets_ids_for_shortlist_train(ctc_run, mirror_root, tmp_path, caplog):
    import torch

    from transformer.cli import decode
    from transformer.data.parallel.corpus import multi30k, read_pairs
    from transformer.tasks.checkpoint import load_task

    root, summary = ctc_run
    task = load_task(summary["best_checkpoint"])
    targets = [t for _, t in read_pairs(multi30k("de", "en"), "train", root / "cache", mirror_root)[:64]]  # train_subset
    expected = sorted({i for ids in task.tgt_tokenizer.encode_batch(targets) for i in ids})
    assert task.output_vocab == expected and len(expected) < task.model.vocab_size
    cut = task.translator({"strategy": "ctc_one_pass", "shortlist": "train"})
    src_file = tmp_path / "in.de"
    sources = ["Ein Hund läuft.", "Zwei Männer spielen Fußball im Park."]
    src_file.write_text("\n".join(sources) + "\n", encoding="utf-8")
    lines = decode.run(compose_cfg("decode", [f"ckpt_path={summary['best_checkpoint']}", f"input={src_file}",
                                              "decode.strategy=ctc_one_pass", "decode.shortlist=train", "device=cpu"]))
    assert lines == [n[0][0] for n in cut.translate(sources)]
    # a checkpoint without the record (or a hand-edited one) is named
    ckpt = torch.load(summary["best_checkpoint"], weights_only=True)
    torch.save({k: v for k, v in ckpt.items() if k != "output_vocab"}, tmp_path / "old.ckpt")
    old = load_task(tmp_path / "old.ckpt")
    with caplog.at_level("WARNING"):
        unrestricted = old.translator({"strategy": "ctc_one_pass", "shortlist": "train"}).translate(sources)
    assert "records no training-target vocabulary; scoring every id" in caplog.text
    assert unrestricted == old.translator({"strategy": "ctc_one_pass", "shortlist": None}).translate(sources)
    torch.save({**ckpt, "output_vocab": [10**9]}, tmp_path / "bad.ckpt")
    with pytest.raises(Exception, match="output_vocab: expected a non-empty list of token ids"):
        load_task(tmp_path / "bad.ckpt")
