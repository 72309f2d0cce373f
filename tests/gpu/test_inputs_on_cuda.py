"""The non-text inputs on a CUDA device: speech frames, graph nodes and image patches each train
through ``transformer-train`` in bf16 on the GPU, and the checkpoint scores the same on the CPU
as on the GPU (the same predictions, row for row). Run with ``pytest -m gpu``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]


def command(module: str, *args: str, cwd: Path, mirror_root: Path | None = None) -> None:
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    if mirror_root is not None:
        env["TRANSFORMER_DATA_MIRROR"] = str(mirror_root)
    proc = subprocess.run([sys.executable, "-m", f"transformer.cli.{module}", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


def speech_data(root: Path, mirror_root: Path) -> list[str]:
    recordings = mirror_root / "fsdd" / "recordings"
    (root / "audio").mkdir(parents=True)
    rows = {"train": [], "test": []}
    for d in (0, 1):
        for s in ("george", "theo"):
            for i in range(12):
                name = f"{d}_{s}_{i}.wav"
                (root / "audio" / name).write_bytes((recordings / name).read_bytes())
                rows["test" if i < 2 else "train"].append(f"audio/{name}\t{d}")
    for split, lines in rows.items():
        (root / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    return ["experiment=speech_classify", f"data.train={root / 'train.tsv'}", f"data.test={root / 'test.tsv'}",
            "model.d_model=32", "model.n_heads=2", "model.n_layers=1", "model.d_ff=64", "model.frontend.channels=8",
            "data.n_mels=20", "data.sample_rate=8000", "data.max_tokens=600", "model.window=4"]


def graph_data(root: Path, mirror_root: Path) -> list[str]:
    from tests.data.graphs.graph_files import write_tiny_graph

    n, e = write_tiny_graph(root / "graph")
    return ["experiment=graph_nodes", f"data.nodes={n}", f"data.edges={e}", "model.d_model=16", "model.n_heads=2",
            "model.n_layers=1", "model.d_ff=16"]


def image_data(root: Path, mirror_root: Path) -> list[str]:
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    data = load_digits()
    for d in (0, 1, 2):
        (root / "digits" / str(d)).mkdir(parents=True)
        for n, i in enumerate(np.flatnonzero(data.target == d)[:10]):
            pixels = np.rint(data.images[i] * 255 / 16).astype(np.uint8)
            Image.fromarray(pixels, mode="L").save(root / "digits" / str(d) / f"{n}.png")
    return ["experiment=image_classify", f"data.train={root / 'digits'}", "data.height=8", "data.width=8",
            "data.channels=1", "model.frontend.patch_size=2", "model.max_len=17", "model.d_model=16",
            "model.n_heads=2", "model.n_layers=1", "model.d_ff=32", "data.max_tokens=8", "model.window=1"]


@pytest.mark.parametrize("kind", ["speech", "graph", "images"])
def test_an_input_kind_trains_in_bf16_on_cuda_and_its_checkpoint_scores_alike_on_both_devices(kind, tmp_path,
                                                                                              mirror_root):
    make = {"speech": speech_data, "graph": graph_data, "images": image_data}[kind]
    if kind == "speech":
        pytest.importorskip("soundfile")
    args = make(tmp_path, mirror_root)
    command("train", *args, "trainer.accelerator=gpu", "trainer.precision=bf16-mixed", "trainer.max_epochs=3",
            "task.warmup_steps=2", f"data.data_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}",
            "test_checkpoint=last", "callbacks.progress_bar=null", "logger.tensorboard=null",
            cwd=tmp_path, mirror_root=mirror_root)
    summary = json.loads((tmp_path / "run" / "train_summary.json").read_text())
    assert summary["global_step"] > 0 and "acc" in summary["test"]["test"]
    state = torch.load(summary["last_checkpoint"], map_location="cpu", weights_only=False)["state_dict"]
    assert all(torch.isfinite(v).all() for v in state.values() if v.is_floating_point())
    scores = {}
    for device in ("cpu", "cuda"):
        command("evaluate", f"ckpt_path={summary['last_checkpoint']}", "split=test", f"device={device}",
                f"output_dir={tmp_path / device}", cwd=tmp_path, mirror_root=mirror_root)
        (metrics,) = (tmp_path / device).glob("*.test.metrics.json")
        (predictions,) = (tmp_path / device).glob("*.test.predictions.tsv")
        scores[device] = json.loads(metrics.read_text())["acc"], rows(predictions.read_text())
    assert scores["cpu"][0] == scores["cuda"][0]
    (cpu, cuda) = scores["cpu"][1], scores["cuda"][1]
    assert len(cpu) == len(cuda) > 0
    for a, b in zip(cpu, cuda):  # labels equal; probabilities to TF32 convolutions' rounding (cuDNN)
        assert [x for x in a if isinstance(x, str)] == [x for x in b if isinstance(x, str)]
        assert [x for x in a if isinstance(x, float)] == pytest.approx([x for x in b if isinstance(x, float)], abs=1e-2)


def rows(text: str) -> list[list]:
    """A predictions file's rows, numbers as floats and labels as text."""
    def cell(x: str):
        try:
            return float(x)
        except ValueError:
            return x
    return [[cell(x) for x in line.split("\t")] for line in text.splitlines()]
