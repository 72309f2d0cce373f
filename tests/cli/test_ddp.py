"""Distributed training for real: `transformer-train trainer.strategy=ddp` over two CPU processes
(gloo). The ranks share each epoch (different batches, every example once), agree on
`val/bleu`, and the checkpoint holds the weights every rank ends with."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
N_TRAIN = 48


@pytest.mark.slow
def test_ddp_over_two_cpu_processes_shares_the_data_and_agrees(mirror_root, tmp_path):
    out = tmp_path / "run"
    env = dict(os.environ, TRANSFORMER_DATA_MIRROR=str(mirror_root), HF_DATASETS_OFFLINE="1", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(REPO), str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    args = [
        "trainer.strategy=ddp", "trainer.devices=2", "trainer.precision=32-true",
        "model=tiny", "model.dropout=0.1", "data.vocab_size=300", f"data.train_subset={N_TRAIN}",
        "data.max_tokens=200", "data.eval_splits=[val]", "trainer.max_epochs=2", "trainer.limit_val_batches=2",
        "trainer.log_every_n_steps=1", "trainer.num_sanity_val_steps=0", "callbacks.progress_bar=null",
        "callbacks.early_stopping=null", "logger.tensorboard=null", "task.val_decode.max_len_a=0", "task.val_decode.max_len_b=5",
        "+callbacks.probe._target_=ddp_probe.RankProbe", "+callbacks.probe.folder=${output_dir}/probe",
        f"hydra.run.dir={out}", f"data.data_dir={tmp_path / 'cache'}",
    ]
    proc = subprocess.run([sys.executable, "-m", "transformer.cli.train", *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = [json.loads((out / "probe" / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2]

    for epoch in (0, 1):
        seen = [[tuple(b) for e, b in r["batches"] if e == epoch] for r in ranks]
        assert seen[0] and len(seen[0]) == len(seen[1])  # the same number of steps on both ranks
        assert not set(seen[0]) & set(seen[1])  # different batches
        examples = [i for rank in seen for batch in rank for i in batch]
        assert sorted(examples) == list(range(N_TRAIN))  # together, every example once

    # Both ranks computed the same val/bleu after each epoch; it is what was logged and what
    # the best checkpoint was chosen by.
    assert ranks[0]["val_bleu"] == ranks[1]["val_bleu"] and len(ranks[0]["val_bleu"]) == 2
    with (out / "csv" / "metrics.csv").open(newline="") as f:
        logged = [float(r["val/bleu"]) for r in csv.DictReader(f) if r["val/bleu"]]
    assert logged == ranks[0]["val_bleu"]
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["best_score"] == max(logged)

    # One model: both ranks end with the same weights, and last.ckpt holds exactly them.
    weights = [torch.load(out / "probe" / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    last = torch.load(out / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert summary["global_step"] == last["global_step"] == len([b for e, b in ranks[0]["batches"]])
    for key, value in last["state_dict"].items():
        assert torch.equal(weights[0][key], value) and torch.equal(weights[1][key], value), key
    # each rank's random generator states travel with it, for an exact resume
    assert len(last["callbacks"]["RandomState"]["ranks"]) == 2
