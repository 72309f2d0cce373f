"""NAT end to end through the CLIs: a tiny NAT experiment trains (debug=fast), then
transformer-evaluate and transformer-decode read the checkpoint alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra_helpers import compose_cfg
from model_configs import TINY

CONF = Path(__file__).resolve().parents[2] / "conf"
TINY_NAT = [
    *TINY["nat_tiny"], "model.d_model=32", "model.n_heads=2", "model.d_ff=64", "model.n_encoder_layers=1",
    "model.n_decoder_layers=1", "model.dropout=0.0", "model.max_offset=8", "trainer.accelerator=cpu", "trainer.precision=32-true", "debug=fast", "logger.tensorboard=null",
    "data.vocab_size=300", "++data.eval_splits=[val]", "test_splits=[]",
]


@pytest.fixture(scope="module")
def nat_run(tmp_path_factory, mirror_root):
    from transformer.cli import train

    root = tmp_path_factory.mktemp("nat_cli")
    cfg = compose_cfg("train", [
        "experiment=multi30k_nat_cpu", "accel=none", *TINY_NAT, f"output_dir={root / 'run'}",
        f"data.data_dir={root / 'cache'}", f"data.mirror_root={mirror_root}",
    ])
    summary = train.run(cfg)
    return root, summary, cfg


def test_nat_experiment_trains_and_logs_nat_metrics(nat_run):
    root, summary, cfg = nat_run
    assert cfg.task._target_ == "transformer.tasks.nat.NATTranslationTask"
    assert summary["global_step"] == 3 and Path(summary["best_checkpoint"]).is_file()
    header = (root / "run" / "csv" / "metrics.csv").read_text().splitlines()[0].split(",")
    for key in ("train/loss", "val/loss", "val/bleu", "val/length_acc", "val/length_loss"):
        assert key in header, key


def test_train_evaluate_decode_round_trip(nat_run, mirror_root, tmp_path):
    from transformer.cli import decode, evaluate
    from transformer.data.parallel.corpus import multi30k, read_pairs
    from transformer.evaluation import score_translations
    from transformer.tasks.checkpoint import load_task

    root, summary, _ = nat_run
    ckpt = summary["best_checkpoint"]
    decode_args = ["decode.strategy=mask_predict", "decode.iterations=3"]
    cfg = compose_cfg("eval", [f"ckpt_path={ckpt}", "split=val", *decode_args, f"output_dir={tmp_path}",
                               f"data_dir={root / 'cache'}", f"mirror_root={mirror_root}", "device=cpu"])
    metrics = evaluate.run(cfg)
    written = json.loads((tmp_path / "val.mask_predict.json").read_text())
    assert written["bleu"] == metrics["bleu"] and written["sentences"] == 1014
    assert metrics["avg_iterations"] >= 1.0 and metrics["avg_iterations"] <= 3.0
    assert metrics["decode"]["strategy"] == "mask_predict" and metrics["decode"]["iterations"] == 3
    assert metrics["pair"] == "de-en"

    # The reported metric is the checkpoint's: decode the split again from the checkpoint alone.
    pairs = read_pairs(multi30k("de", "en"), "val", root / "cache", mirror_root)
    sources, refs = [s for s, _ in pairs], [t for _, t in pairs]
    translator = load_task(ckpt).translator(dict(written["decode"]))
    hyps = [n[0][0] for n in translator.translate(sources)]
    assert score_translations(hyps, refs)["bleu"] == metrics["bleu"]
    assert score_translations(hyps, refs)["chrf"] == metrics["chrf"]
    assert translator.extra_stats()["avg_iterations"] == metrics["avg_iterations"]

    # transformer-decode reads the same checkpoint and gives the same translations
    src_file, out_file = tmp_path / "in.de", tmp_path / "out.en"
    src_file.write_text("\n".join(sources[:4] + [""] + sources[4:8]) + "\n", encoding="utf-8")
    lines = decode.run(compose_cfg("decode", [f"ckpt_path={ckpt}", f"input={src_file}", f"output={out_file}",
                                              *decode_args, "device=cpu"]))
    assert lines == hyps[:4] + [""] + hyps[4:8]
    assert out_file.read_text(encoding="utf-8") == "".join(line + "\n" for line in lines)


@pytest.mark.parametrize("decode_cfg", [["decode.strategy=nat_one_pass"], ["decode.strategy=nat_length_beam", "decode.length_beam=3"]])
def test_decode_cli_strategies_keep_line_count(nat_run, tmp_path, decode_cfg):
    from transformer.cli import decode

    ckpt = nat_run[1]["best_checkpoint"]
    src_file = tmp_path / "in.de"
    src_file.write_text("Ein Hund läuft.\n\nZwei Männer spielen Fußball im Park.\n", encoding="utf-8")
    lines = decode.run(compose_cfg("decode", [f"ckpt_path={ckpt}", f"input={src_file}",
                                              f"output={tmp_path / 'out.en'}", "device=cpu", *decode_cfg]))
    assert len(lines) == 3 and lines[1] == ""


def test_autoregressive_strategy_on_a_nat_checkpoint_is_a_clear_error(nat_run, tmp_path):
    from transformer.cli import decode

    ckpt = nat_run[1]["best_checkpoint"]
    src_file = tmp_path / "in.de"
    src_file.write_text("Ein Hund läuft.\n", encoding="utf-8")
    with pytest.raises(ValueError, match="non-autoregressive"):
        decode.run(compose_cfg("decode", [f"ckpt_path={ckpt}", f"input={src_file}", "decode.strategy=beam", "device=cpu"]))


def _load_benchmark_script():
    """The command line around ``transformer.evaluation.nat`` (a script, not a package module)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("nat_benchmark", CONF.parent / "scripts" / "nat_benchmark.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_nat_benchmark_script_runs_on_the_checkpoint(nat_run, mirror_root, tmp_path):
    bench = _load_benchmark_script()
    root, summary, _ = nat_run
    out = tmp_path / "bench.json"
    report = bench.main(["--nat-ckpt", summary["best_checkpoint"], "--split", "val", "--latency-sentences", "2",
                         "--throughput-sentences", "8", "--batch-size", "4", "--warmup", "1",
                         "--data-dir", str(root / "cache"), "--mirror-root", str(mirror_root), "--output", str(out)])
    assert json.loads(out.read_text()) == report
    systems = report["systems"]
    assert set(systems) == {"NAT one pass", "NAT length beam 3", "Mask-Predict T=4", "Mask-Predict T=10"}
    for r in systems.values():
        assert r["latency_batch1"]["sentences"] == 2 and r["throughput_batch4"]["sentences"] == 8
        assert r["checkpoint"] == summary["best_checkpoint"] and "bleu_lowercase" in r
    assert systems["NAT one pass"]["avg_iterations"] == 1.0


@pytest.mark.parametrize("turn", [1, 2, 3])
def test_nat_benchmark_latency_turns(turn):
    """Each system translates every sentence once, one at a time, ``turn`` in a row, the
    systems' order rotating from one turn to the next."""
    from transformer.evaluation.nat import latency

    calls = []

    class Recorder:
        def __init__(self, name):
            self.name = name

        def translate(self, batch):
            calls.append((self.name, tuple(batch)))

    sentences = [f"s{i}" for i in range(7)]
    out = latency({"a": Recorder("a"), "b": Recorder("b")}, sentences, warmup=0, turn=turn)
    assert {name: r["sentences"] for name, r in out.items()} == {"a": 7, "b": 7}
    for name in "ab":
        assert [b for n, b in calls if n == name] == [(s,) for s in sentences]
    # blocks of ``turn`` sentences (the last one shorter), the leading system swapping every turn
    expected_calls = []
    for i, lo in enumerate(range(0, 7, turn)):
        order = ["a", "b"] if i % 2 == 0 else ["b", "a"]
        for name in order:
            expected_calls += [(name, (s,)) for s in sentences[lo: lo + turn]]
    assert calls == expected_calls
