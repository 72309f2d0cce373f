"""Benchmark preparing and loading a large parallel corpus through the translation data module.

Builds a synthetic corpus of ``--pairs`` German-English pairs, each two Multi30k training
pairs joined by a space (chosen with a fixed seed), as two plain-text files; then, with a
fresh cache folder, measures:

  1. preparation: ``TranslationDataModule(train_files=...).setup()``, i.e. streaming the files
     into an Arrow table, training the joint BPE tokenizer from its text column, tokenizing it
     in worker processes, reading the length columns and length-filtering; wall time, peak
     resident memory of the process and of its worker processes (``getrusage``), and what is
     resident at the end, split into anonymous memory and pages of memory-mapped files;
  2. the prepared size on disk (Arrow tables and tokenizer, not the text files);
  3. a cached start (the same setup again: every cache file verified and reused);
  4. the training loader (token-budget batches of the CPU recipe, ``max_tokens=3000``, collated
     in the main process) in batches/s, against training steps/s of the CPU recipe's model
     (``experiment=multi30k_cpu``: forward, backward and Adam on the same batches).

Run each size in a fresh process, so that peak memory is that size's own:

    TRANSFORMER_DATA_MIRROR=../shared/datasets python scripts/bench_data.py --pairs 3000000
    python scripts/bench_data.py --pairs 300000 --mirror-root ../shared/datasets --keep-dir /tmp/b300k
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

MIB = 1024 * 1024


def build_corpus(out: Path, n_pairs: int, data_dir: Path, mirror_root: str | None, seed: int = 0) -> tuple[Path, Path]:
    """``train.de`` / ``train.en`` of ``n_pairs`` lines: pair i joins Multi30k training pair
    ``i mod 29000`` with one drawn at random, on both sides. Written in chunks."""
    from transformer.data.parallel.corpus import multi30k, read_pairs

    base = read_pairs(multi30k("de", "en"), "train", data_dir, mirror_root)
    src_path, tgt_path = out / "train.de", out / "train.en"
    rng = np.random.default_rng(seed)
    chunk = 100_000
    with open(src_path, "w", encoding="utf-8") as fs, open(tgt_path, "w", encoding="utf-8") as ft:
        for start in range(0, n_pairs, chunk):
            size = min(chunk, n_pairs - start)
            first = (np.arange(start, start + size) % len(base)).tolist()
            second = rng.integers(0, len(base), size=size).tolist()
            fs.write("".join(f"{base[i][0]} {base[j][0]}\n" for i, j in zip(first, second)))
            ft.write("".join(f"{base[i][1]} {base[j][1]}\n" for i, j in zip(first, second)))
    return src_path, tgt_path


def peak_rss_mib() -> tuple[float, float]:
    """Peak resident memory so far of this process and of its largest finished child (MiB)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return own, children


def cpu_seconds() -> float:
    """User + system CPU time so far of this process and its finished worker processes."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def resident_now() -> str:
    """The current resident set split as the kernel counts it (anonymous vs mapped files)."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            fields[key] = int(value.split()[0]) / 1024
    return ", ".join(f"{k} {v:.0f} MiB" for k, v in fields.items())


def disk_mib(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / MIB


def loader_rate(dm, n_batches: int) -> tuple[float, float]:
    """Batches/s and pairs/s of the training loader over its first ``n_batches`` batches."""
    loader = dm.train_dataloader()
    it = iter(loader)
    next(it)  # the epoch's batch list is built here; steady state is what training sees
    start, pairs, done = time.perf_counter(), 0, 0
    for batch in it:
        pairs += len(batch["index"])
        done += 1
        if done == n_batches:
            break
    seconds = time.perf_counter() - start
    return done / seconds, pairs / seconds


def training_step_rate(dm, n_steps: int) -> tuple[float, int]:
    """Steps/s of the CPU recipe's model (forward, backward, Adam step) on training batches."""
    import torch
    from hydra import compose, initialize_config_dir

    from transformer.cli.train import build_task

    conf = Path(__file__).resolve().parents[1] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = compose(config_name="train", overrides=["experiment=multi30k_cpu"])
    task = build_task(cfg, dm)
    task.train()
    opt = torch.optim.Adam(task.parameters(), lr=1e-4)
    batches = iter(dm.train_dataloader())
    times = []
    for _ in range(n_steps + 1):  # the first step (allocations, warm-up) is not counted
        batch = next(batches)
        start = time.perf_counter()
        loss = task._loss(batch)[0]  # what training_step computes, without a Trainer to log to
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - start)
    params = sum(p.numel() for p in task.parameters())
    return 1.0 / float(np.mean(times[1:])), params


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", type=int, default=3_000_000, help="synthetic corpus size in pairs")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--max-tokens", type=int, default=3000, help="the CPU recipe's token budget")
    p.add_argument("--loader-batches", type=int, default=300)
    p.add_argument("--train-steps", type=int, default=5)
    p.add_argument("--mirror-root", default=None, help="dataset mirror (default: $TRANSFORMER_DATA_MIRROR)")
    p.add_argument("--keep-dir", default=None, help="work in this folder and keep it (default: a temporary one)")
    args = p.parse_args()

    import datasets
    import torch

    datasets.disable_progress_bars()
    from transformer.data.parallel.datamodule import TranslationDataModule
    from transformer.evaluation.hardware import cpu_name

    work = Path(args.keep_dir or tempfile.mkdtemp(prefix="bench-data-"))
    work.mkdir(parents=True, exist_ok=True)
    corpus, cache = work / "corpus", work / "cache"
    corpus.mkdir(exist_ok=True)
    if cache.exists():
        shutil.rmtree(cache)
    print(f"date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    print(f"command: {' '.join([os.path.basename(sys.executable), *sys.argv])}")
    print(f"machine: {cpu_name()}, {os.cpu_count()} CPUs, python {platform.python_version()}, "
          f"torch threads {torch.get_num_threads()}")

    t = time.perf_counter()
    src, tgt = build_corpus(corpus, args.pairs, cache, args.mirror_root)
    print(f"corpus: {args.pairs} pairs, {(src.stat().st_size + tgt.stat().st_size) / MIB:.0f} MiB of text, "
          f"built in {time.perf_counter() - t:.1f} s (not part of preparation)")
    shutil.rmtree(cache)  # the Multi30k copy read to build the corpus: preparation starts empty

    kwargs = dict(data_dir=cache, mirror_root=args.mirror_root, vocab_size=args.vocab_size, max_tokens=args.max_tokens,
                  train_files={"src": str(src), "tgt": str(tgt)}, eval_splits=["val"])
    rss_before = peak_rss_mib()[0]
    t, cpu = time.perf_counter(), cpu_seconds()
    dm = TranslationDataModule("de", "en", **kwargs)
    dm.setup()
    prep, cpu = time.perf_counter() - t, cpu_seconds() - cpu
    own, children = peak_rss_mib()
    print(f"preparation: {prep:.1f} s wall, {cpu:.1f} s CPU (this process and its workers; load average now "
          f"{os.getloadavg()[0]:.1f}) for {len(dm.raw('train'))} training pairs "
          f"(length filter dropped {dm.filter_report['train'].n_dropped})")
    print(f"peak RSS: process {own:.0f} MiB (before preparation {rss_before:.0f} MiB), "
          f"largest worker process {children:.0f} MiB; resident now: {resident_now()}")
    arrow = cache / "arrow"
    raw = sum(f.stat().st_size for f in arrow.glob("*-raw-*.arrow")) / MIB
    print(f"prepared on disk: {disk_mib(cache):.0f} MiB ({raw:.0f} MiB raw text table, "
          f"{disk_mib(arrow) - raw:.0f} MiB other Arrow tables incl. tokenized, "
          f"{disk_mib(cache / 'tokenizers'):.1f} MiB tokenizer)")

    t = time.perf_counter()
    again = TranslationDataModule("de", "en", **kwargs)
    again.setup()
    print(f"cached start (every cache file verified by sha256 and reused): {time.perf_counter() - t:.1f} s")
    del again

    batches_per_s, pairs_per_s = loader_rate(dm, args.loader_batches)
    print(f"loader: {batches_per_s:.0f} batches/s ({pairs_per_s:.0f} pairs/s) over {args.loader_batches} batches, "
          f"max_tokens={args.max_tokens}, {len(dm.train_dataloader())} batches an epoch")
    print(f"peak RSS after loading: process {peak_rss_mib()[0]:.0f} MiB; resident now: {resident_now()}")
    steps_per_s, params = training_step_rate(dm, args.train_steps)
    print(f"training: {steps_per_s:.2f} steps/s (CPU recipe model, {params / 1e6:.1f}M parameters, "
          f"mean of {args.train_steps} steps)")
    print(f"loader / training step rate: {batches_per_s / steps_per_s:.0f}x")
    print(f"peak RSS after the training steps (model, activations, gradients): process {peak_rss_mib()[0]:.0f} MiB")
    if args.keep_dir is None:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
