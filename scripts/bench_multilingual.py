"""What the target-language tag costs at decoding: one direction decoded by a bilingual checkpoint
and by a multilingual one, on the same split, one thread, the two taking turns.

    python scripts/bench_multilingual.py --bilingual runs/ende/checkpoints/last.ckpt \\
        --multilingual runs/multi/checkpoints/last.ckpt --src-lang en --tgt-lang de \\
        [--split test_2016_flickr] [--passes 3] [--json out.json]

Each pass decodes the whole split with each checkpoint (greedy, then beam 5; eager, the
command line's default), alternating, and the best pass of each is kept. Reported per
checkpoint: sentences/s, source pieces per sentence (the multilingual source carries its tag),
target pieces generated per second (each output's pieces plus EOS: outputs differ in length, so
this is the speed per decoder step), and the vocabulary, with what one batch-1 decoder step's
products alone cost at that vocabulary on this machine (``bench_limit.step_floor``): the joint
vocabulary, not the tag, is what a multilingual model adds to each step.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import date
from pathlib import Path

import torch

from transformer.evaluation.hardware import cpu_name
from transformer.evaluation.translation import translate_split
from transformer.tasks.checkpoint import load_task


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bilingual", required=True)
    parser.add_argument("--multilingual", required=True)
    parser.add_argument("--src-lang", required=True)
    parser.add_argument("--tgt-lang", required=True)
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--limit", type=int, default=None, help="the split's first N sentences only")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    mirror = os.environ.get("TRANSFORMER_DATA_MIRROR")
    direction = (args.src_lang, args.tgt_lang)
    systems = {"bilingual": (load_task(args.bilingual), None), "multilingual": (load_task(args.multilingual), direction)}

    from bench_limit import step_floor

    rows = []
    for search, decode_cfg in (("greedy", {"strategy": "greedy"}),
                               (f"beam{args.beam_size}", {"strategy": "beam", "beam_size": args.beam_size})):
        best: dict[str, tuple[float, object]] = {}
        for _ in range(args.passes):
            for name, (task, d) in systems.items():
                start = time.perf_counter()
                done = translate_split(task, args.split, decode_cfg, mirror_root=mirror, limit=args.limit, direction=d)
                seconds = time.perf_counter() - start
                if name not in best or seconds < best[name][0]:
                    best[name] = (seconds, done)
        for name, (seconds, done) in best.items():
            task, d = systems[name]
            translator = done.translator
            source_pieces = sum(len(translator.encode(s)) for s in done.sources)
            generated = sum(len(task.tgt_tokenizer.encode(h)) + 1 for h in done.hyps)
            cfg = task.hparams["model"]
            rows.append({
                "search": search, "model": name, "sentences": len(done.hyps), "seconds": round(seconds, 2),
                "sentences_per_second": round(len(done.hyps) / seconds, 1),
                "source_pieces_per_sentence": round(source_pieces / len(done.sources), 2),
                "generated_pieces_per_second": round(generated / seconds, 1),
                "vocab_size": task.model.vocab_size,
                "products_floor_ms_per_batch1_step": round(step_floor(cfg["d_model"], cfg["d_ff"], task.model.vocab_size,
                                                                      cfg["n_decoder_layers"]), 3),
            })
            print(json.dumps(rows[-1]), flush=True)
    report = {"bilingual": args.bilingual, "multilingual": args.multilingual, "direction": "-".join(direction),
              "split": args.split, "limit": args.limit, "threads": args.threads, "date": str(date.today()), "cpu": cpu_name(),
              "torch": torch.__version__, "rows": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


if __name__ == "__main__":
    main()
