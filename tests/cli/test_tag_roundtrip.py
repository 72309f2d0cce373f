"""train -> evaluate -> tag through the real CLIs on a slice of GUM: training and tagging standard
input in processes of their own (as a user runs them), evaluation and the further tag calls
(CoNLL-U, ensembles) through the commands' ``main()`` in this process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra_helpers import main_output
from model_configs import TINY

from transformer.cli import evaluate, tag

REPO = Path(__file__).resolve().parents[2]

CONLLU_IN = """# sent_id = t1
# text = I can't.
1\tI\tI\tPRON\tPRP\t_\t3\tnsubj\t_\t_
2-3\tcan't\t_\t_\t_\t_\t_\t_\t_\t_
2\tca\tcan\tAUX\tMD\t_\t3\taux\t_\t_
3\tn't\tnot\tPART\tRB\t_\t0\troot\t_\t_
4\t.\t.\tPUNCT\t.\t_\t3\tpunct\t_\t_

# sent_id = t2
1\tHello\thello\tINTJ\tUH\t_\t0\troot\t_\t_
"""


def cli(module: str, *args: str, stdin: str | None = None, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-m", module, *args], input=stdin, capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=240)
    assert proc.returncode == 0, f"{module} failed:\n{proc.stderr[-3000:]}"
    return proc


def test_train_evaluate_tag_round_trip(tmp_path, mirror_root, capsys, monkeypatch):
    cache = tmp_path / "cache"
    run_dir = tmp_path / "run"
    cli("transformer.cli.train", "experiment=gum_upos", "debug=fast", *TINY["tagger_tiny"],
        f"hydra.run.dir={run_dir}", f"data.data_dir={cache}", f"data.mirror_root={mirror_root}",
        "logger.tensorboard=null", "trainer.limit_val_batches=1.0", "task.warmup_steps=1", "task.lr=3e-3",
        "test_splits=[]", cwd=tmp_path)
    summary = json.loads((run_dir / "train_summary.json").read_text())
    best = summary["best_checkpoint"]
    assert best and Path(best).is_file()

    # evaluate: everything (model, tokenizer, dataset, training words) from the checkpoint
    monkeypatch.chdir(tmp_path)
    code, out, err = main_output(evaluate, [f"ckpt_path={best}", "split=dev", f"data_dir={cache}",
                                            f"mirror_root={mirror_root}", f"output_dir={tmp_path / 'eval'}",
                                            "device=cpu"], capsys, monkeypatch)
    assert code == 0, err[-3000:]
    metrics = json.loads(out[out.index("{\n"):])
    assert metrics["dataset"] == "gum" and metrics["tagset"] == "upos" and metrics["split"] == "dev"
    assert metrics["sentences"] == 784 and metrics["tokens"] > 10000
    # the dev accuracy read back from the checkpoint is the val/acc that selected it
    assert metrics["acc"] == pytest.approx(summary["best_score"], abs=2e-3)
    assert metrics["unseen_tokens"] > 0 and 0.0 <= metrics["unseen_acc"] <= 1.0
    assert set(metrics["per_tag"]) >= {"NOUN", "VERB", "PUNCT"}
    assert json.loads(Path(metrics["outputs"]["metrics"]).read_text())["acc"] == metrics["acc"]
    assert "token accuracy" in Path(metrics["outputs"]["report"]).read_text()
    pred_lines = Path(metrics["outputs"]["predictions"]).read_text().split("\n\n")
    assert len([b for b in pred_lines if b.strip()]) == 784

    # tag: awkward text from stdin, word_tag lines out, one per input line
    text_in = "The cat sat on the mat .\n\n   \nUnseenwordzzz\tdogs bark\n"
    out = cli("transformer.cli.tag", f"ckpt_path={best}", "input=-", "output=-", "device=cpu",
              stdin=text_in, cwd=tmp_path)
    lines = out.stdout.split("\n")[:-1]
    assert len(lines) == 4 and lines[1] == "" and lines[2] == ""
    assert [len(line.split()) for line in lines] == [7, 0, 0, 3]
    assert lines[3].split()[0].startswith("Unseenwordzzz_")

    # tag: CoNLL-U file in, CoNLL-U file out, same line count, ranges/comments untouched
    src = tmp_path / "in.conllu"
    src.write_text(CONLLU_IN, encoding="utf-8")
    code, _, err = main_output(tag, [f"ckpt_path={best}", f"input={src}", f"output={tmp_path / 'out.conllu'}",
                                     "format=conllu", "device=cpu"], capsys, monkeypatch)
    assert code == 0, err[-3000:]
    got = (tmp_path / "out.conllu").read_text(encoding="utf-8").split("\n")
    want = CONLLU_IN.split("\n")
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if w.startswith("#") or not w or "-" in w.split("\t")[0]:
            assert g == w
        else:
            gc, wc = g.split("\t"), w.split("\t")
            # UPOS predicted, XPOS (not predicted) written "_", every other column kept
            assert gc[:3] + gc[5:] == wc[:3] + wc[5:] and gc[4] == "_" and gc[3] in metrics["per_tag"]

    # an ensemble of the last and the best checkpoint: same line count, tags from the same set;
    # an ensemble of a checkpoint with itself tags exactly as the checkpoint alone
    last = summary["last_checkpoint"]
    for ckpts in (f"[{best},{best}]", f"[{best},{last}]"):
        code, out, err = main_output(tag, [f"ckpt_path={ckpts}", "input=-", "output=-", "device=cpu"], capsys,
                                     monkeypatch, stdin=text_in)
        assert code == 0, err[-3000:]
        ens_lines = out.split("\n")[:-1]
        assert [len(line.split()) for line in ens_lines] == [7, 0, 0, 3]
        if ckpts == f"[{best},{best}]":
            assert ens_lines == lines
