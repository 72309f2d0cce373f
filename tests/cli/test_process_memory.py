"""A command that decodes or trains on a CPU keeps freed memory for the next allocation (glibc's
thresholds) and bounds oneDNN's per-shape caches (``cli/common.py``)."""

import platform
import subprocess
import sys

import pytest
from hydra_helpers import compose_cfg

# Three 48 MB tensors written and freed four times; the page faults of the last three rounds.
# 48 MB is above the largest mmap threshold glibc picks by itself (32 MB), so by default every
# round maps, faults in and unmaps fresh pages.
ROUNDS = """
import resource, sys
import torch
from transformer.cli.common import keep_freed_memory

if sys.argv[1] == "keep":
    assert keep_freed_memory()
for i in range(4):
    if i == 1:
        start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    held = [torch.ones(12 << 20) for _ in range(3)]
    del held
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start)
"""

glibc = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                           reason="mallopt's thresholds are glibc's")


def faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", ROUNDS, mode], capture_output=True, text=True, timeout=120, check=True)
    return int(out.stdout.split()[-1])


@glibc
def test_freed_tensors_are_reused_without_fresh_pages():
    default, kept = faults("default"), faults("keep")
    pages = 3 * 3 * (48 << 20) // 4096  # what three rounds of fresh pages cost
    assert default > pages // 2
    assert kept < pages // 3  # at most a round's worth (where the heap first grows), not every round


@glibc
def test_the_inference_loader_keeps_freed_memory(monkeypatch):
    import transformer.cli.common as common
    from transformer.cli.common import load_for_inference
    from transformer.tasks.checkpoint import CheckpointError

    calls = []
    monkeypatch.setattr(common, "keep_freed_memory", lambda: calls.append(1) or True)
    with pytest.raises(CheckpointError):  # kept before the checkpoint is read
        load_for_inference("/nonexistent/model.ckpt", "cpu")
    assert calls == [1]


@glibc
def test_training_on_a_cpu_keeps_freed_memory_and_bounds_onednn_before_it_builds_anything(monkeypatch, tmp_path):
    import transformer.cli.train as train_cli

    calls = []

    class Built(Exception):
        pass

    def first_build(*args, **kwargs):
        calls.append("build")
        raise Built

    monkeypatch.setattr(train_cli, "keep_freed_memory", lambda: calls.append("keep") or True)
    monkeypatch.setattr(train_cli, "bound_onednn_caches", lambda entries: calls.append(("bound", entries)) or {})
    monkeypatch.setattr(train_cli, "build_datamodule", first_build)
    cfg = compose_cfg("train", ["experiment=multi30k_cpu", f"output_dir={tmp_path}"])
    with pytest.raises(Built):
        train_cli.train(cfg, None)
    assert calls == ["keep", ("bound", 64), "build"]


# One packed oneDNN product at 400 row counts, then the growth of the resident size (MB), after
# handing freed heap memory back. Unbounded, oneDNN and ideep keep per-shape state for each
# (about 220 MB here); bounded, at most the bound's worth.
SHAPES = """
import ctypes, sys
from transformer.cli.common import bound_onednn_caches
bound_onednn_caches(int(sys.argv[1]))
import torch

def resident():
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    return int([l for l in open("/proc/self/status") if l.startswith("VmRSS")][0].split()[1]) // 1024

packed = torch.ops.mkldnn._reorder_linear_weight(torch.randn(1024, 256), None)
torch.ops.mkldnn._linear_pointwise(torch.randn(1, 256), packed, None, "none", [], "")
start = resident()
for rows in range(2, 400):
    torch.ops.mkldnn._linear_pointwise(torch.randn(rows, 256), packed, None, "none", [], "")
print(resident() - start)
"""


@glibc
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="oneDNN's packed products on x86")
def test_onednn_keeps_a_bounded_number_of_product_shapes(monkeypatch):
    for name in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY"):
        monkeypatch.delenv(name, raising=False)
    out = subprocess.run([sys.executable, "-c", SHAPES, "8"], capture_output=True, text=True, timeout=120, check=True)
    assert int(out.stdout.split()[-1]) < 40


def test_the_user_s_cache_bound_wins(monkeypatch):
    from transformer.cli.common import ONEDNN_CACHE_ENTRIES, bound_onednn_caches

    monkeypatch.setenv("LRU_CACHE_CAPACITY", "7")
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
    assert bound_onednn_caches() == {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": str(ONEDNN_CACHE_ENTRIES), "LRU_CACHE_CAPACITY": "7"}


def test_the_inference_loader_bounds_onednn_caches_before_reading(monkeypatch):
    import transformer.cli.common as common
    from transformer.cli.common import load_for_inference
    from transformer.tasks.checkpoint import CheckpointError

    calls = []
    monkeypatch.setattr(common, "bound_onednn_caches", lambda: calls.append(1) or {})
    with pytest.raises(CheckpointError):
        load_for_inference("/nonexistent/model.ckpt", "cpu")
    assert calls == [1]
