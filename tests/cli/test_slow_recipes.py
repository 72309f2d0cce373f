"""Real learning on real data: slow, run with `pytest -m slow`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def test_small_model_learns_to_translate_multi30k(tmp_path, mirror_root):
    """Two epochs of the CPU recipe on 10k pairs reach a BLEU no untrained model can."""
    env = dict(os.environ, TRANSFORMER_DATA_MIRROR=str(mirror_root))
    proc = subprocess.run(
        [sys.executable, "-m", "transformer.cli.train", "experiment=multi30k_cpu",
         "data.train_subset=10000", "trainer.max_epochs=2", "test_splits=[]", "logger.tensorboard=null",
         "callbacks.progress_bar=null", f"output_dir={tmp_path}", f"data.data_dir={tmp_path}/cache"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=3600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "train_summary.json").read_text())
    assert summary["best_score"] > 5.0
