"""Benchmark the translation data pipeline on Multi30k.

Measures, with a fresh cache folder:
  1. first preparation (copy from mirror/download, tokenizer training, tokenization and
     Arrow caching of every split) of ``TranslationDataModule.setup()``;
  2. a cached start in the same process, and in a fresh process (imports included);
  3. one training epoch of batches from the token-budget sampler;
  4. the fraction of training sentences (each side) whose encode -> decode round
     trip is exact.

    TRANSFORMER_DATA_MIRROR=../shared/datasets python3 scripts/bench_data.py
    python3 scripts/bench_data.py --src de --tgt en --vocab-size 8000 --mirror-root ../shared/datasets
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import tempfile
import time

from transformer.evaluation.hardware import cpu_name

_CACHED_START = """
import time, sys
t0 = time.perf_counter()
import datasets; datasets.disable_progress_bars()
from transformer.data.datamodules import TranslationDataModule
t1 = time.perf_counter()
dm = TranslationDataModule({src!r}, {tgt!r}, data_dir={cache!r}, mirror_root={mirror!r},
                           vocab_size={vocab}, tokenizer_model={model!r})
dm.setup()
t2 = time.perf_counter()
print(f"{{t1 - t0:.2f}} {{t2 - t1:.2f}}")
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--src", default="de")
    p.add_argument("--tgt", default="en")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--tokenizer-model", default="bpe", choices=["bpe", "unigram"])
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--mirror-root", default=None, help="dataset mirror (default: $TRANSFORMER_DATA_MIRROR)")
    p.add_argument("--cache-dir", default=None, help="cache folder (default: a fresh temporary one)")
    args = p.parse_args()

    import datasets

    datasets.disable_progress_bars()
    t0 = time.perf_counter()
    from transformer.data.datamodules import TranslationDataModule
    from transformer.data.tokenizer import roundtrip_exactness

    t_import = time.perf_counter() - t0

    tmp = None
    cache = args.cache_dir
    if cache is None:
        tmp = tempfile.TemporaryDirectory(prefix="bench-data-")
        cache = tmp.name
    kwargs = dict(data_dir=cache, mirror_root=args.mirror_root, vocab_size=args.vocab_size,
                  tokenizer_model=args.tokenizer_model, max_tokens=args.max_tokens)

    print(f"date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    print(f"command: {' '.join([os.path.basename(sys.executable), *sys.argv])}")
    print(f"machine: {cpu_name()}, {os.cpu_count()} CPUs, python {platform.python_version()}")
    print(f"cache dir: {cache} (fresh: {not os.listdir(cache)})")
    print(f"imports (lightning, datasets, tokenizers): {t_import:.2f} s")

    t = time.perf_counter()
    dm = TranslationDataModule(args.src, args.tgt, **kwargs)
    dm.setup()
    t_first = time.perf_counter() - t
    print(f"first preparation ({args.src}-{args.tgt}, joint {args.tokenizer_model} {args.vocab_size}, "
          f"splits {dm.splits}): {t_first:.2f} s")

    t = time.perf_counter()
    again = TranslationDataModule(args.src, args.tgt, **kwargs)
    again.setup()
    print(f"cached start, same process: {time.perf_counter() - t:.2f} s")
    assert again.src_tokenizer == dm.src_tokenizer

    code = _CACHED_START.format(src=args.src, tgt=args.tgt, cache=cache, mirror=args.mirror_root,
                                vocab=args.vocab_size, model=args.tokenizer_model)
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()
    wall = time.perf_counter() - t
    print(f"cached start, fresh process: setup {float(out[1]):.2f} s (imports {float(out[0]):.2f} s, "
          f"process wall {wall:.2f} s)")

    t = time.perf_counter()
    n_batches = n_ex = 0
    for batch in dm.train_dataloader():
        n_batches += 1
        n_ex += len(batch["index"])
    print(f"one training epoch of batches: {n_batches} batches, {n_ex} pairs, {time.perf_counter() - t:.2f} s "
          f"(length filter dropped {dm.filter_report['train'].n_dropped})")

    train = dm.raw("train")
    for side, lang, tok in ((0, args.src, dm.src_tokenizer), (1, args.tgt, dm.tgt_tokenizer)):
        texts = [pair[side] for pair in train]
        frac, bad = roundtrip_exactness(tok, texts)
        print(f"round trip exact, train.{lang}: {frac:.6f} ({len(texts) - len(bad)}/{len(texts)})")
        for b in bad[:5]:
            print(f"  differs: {b!r} -> {tok.decode(tok.encode(b))!r}")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
