"""Sentences per second of autoregressive decoding, ``decode.dtype=fp32`` against ``bf16``, greedy
and beam, eager and compiled (``decode.compile``), on one thread, in one run.

    TRANSFORMER_DATA_MIRROR=../shared/datasets python3 scripts/bench_bf16_decode.py \
        [--sentences 200] [--compile] [--json bench_bf16.json]

The model is random (no checkpoint needed): the CPU recipe's size (d_model 256, 3+3 layers,
4 heads, d_ff 1024, a joint 8000-piece BPE vocabulary trained on Multi30k de-en), decoding the
first ``--sentences`` sources of ``test_2016_flickr`` through ``TranslationTask.translator``,
as ``transformer-decode`` does (tokenization, batches under ``--max-tokens``, search,
detokenization). A random model seldom says EOS, so nearly every sentence runs to its length cap
``1.2 * source + 10``: both dtypes do about the same decoder steps. With ``--compile`` each
compiled configuration is run once untimed first (its compilation, reported as
``warm_up_seconds``). ``same_outputs`` counts bf16 outputs equal to fp32's (a random model's
near-ties flip under bf16 rounding; a trained one agrees far more often).
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import date

import torch

from transformer.data.core.tokenizer import SubwordTokenizer
from transformer.data.parallel.corpus import multi30k, read_pairs
from transformer.decoding.precision import cpu_has_bf16
from transformer.evaluation.hardware import cpu_name
from transformer.cli.common import bound_onednn_caches, keep_freed_memory
from transformer.tasks.translation import TranslationTask


def build_task(tok: SubwordTokenizer, args) -> TranslationTask:
    torch.manual_seed(0)
    model = {"_target_": "transformer.models.EncoderDecoder", "d_model": 256, "n_heads": 4, "n_encoder_layers": 3,
             "n_decoder_layers": 3, "d_ff": 1024, "dropout": 0.0, "max_len": 256}
    return TranslationTask(model=model, vocab_size=tok.vocab_size, pad_id=tok.pad_id, bos_id=tok.bos_id,
                           eos_id=tok.eos_id, src_lang="de", tgt_lang="en",
                           tokenizers={"src": tok.to_str(), "tgt": tok.to_str()}).eval()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sentences", type=int, default=200)
    ap.add_argument("--vocab-size", type=int, default=8000)
    ap.add_argument("--beam-size", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--compile", action="store_true", help="also decode.compile=true (about a minute each)")
    ap.add_argument("--mirror-root", default=None, help="dataset mirror (default: TRANSFORMER_DATA_MIRROR)")
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    keep_freed_memory()
    bound_onednn_caches()
    corpus = multi30k("de", "en")
    train = read_pairs(corpus, "train", mirror_root=args.mirror_root)
    sources = [s for s, _ in read_pairs(corpus, "test_2016_flickr", mirror_root=args.mirror_root)][: args.sentences]
    tok = SubwordTokenizer.train([s for p in train for s in p], vocab_size=args.vocab_size)
    task = build_task(tok, args)
    res = {"date": date.today().isoformat(), "cpu": cpu_name(), "bf16_native": cpu_has_bf16(),
           "threads": torch.get_num_threads(), "torch": torch.__version__, "sentences": len(sources),
           "vocab_size": tok.vocab_size, "runs": {}}
    strategies = {"greedy": {"strategy": "greedy"}, f"beam{args.beam_size}": {"strategy": "beam",
                                                                              "beam_size": args.beam_size}}
    for name, strategy in strategies.items():
        outputs = {}
        for compiled in (False, True) if args.compile else (False,):
            for dtype in ("fp32", "bf16"):
                cfg = {**strategy, "dtype": dtype, "compile": compiled, "max_tokens": args.max_tokens}
                if compiled:
                    # every configuration compiles the same decode_step afresh: dynamo's cache of
                    # one function would otherwise fill up (8 graphs) and fall back to eager
                    torch._dynamo.reset()
                translator = task.translator(cfg)
                key = f"{name} {'compiled' if compiled else 'eager'} {dtype}"
                warm_up = None
                if compiled:
                    t0 = time.perf_counter()
                    translator.translate(sources)
                    warm_up = time.perf_counter() - t0
                t0 = time.perf_counter()
                out = [n[0][0] for n in translator.translate(sources)]
                seconds = time.perf_counter() - t0
                outputs[(compiled, dtype)] = out
                run = {"seconds": seconds, "sentences_per_s": len(sources) / seconds, "warm_up_seconds": warm_up}
                if dtype == "bf16":
                    fp32 = outputs[(compiled, "fp32")]
                    run["same_outputs"] = sum(a == b for a, b in zip(out, fp32))
                    run["speedup_vs_fp32"] = res["runs"][key.replace("bf16", "fp32")]["seconds"] / seconds
                res["runs"][key] = run
                print(f"{key:24s} {run['sentences_per_s']:7.2f} sentences/s"
                      + (f"  x{run['speedup_vs_fp32']:.2f} fp32's, {run['same_outputs']}/{len(sources)} outputs "
                         f"as fp32's" if dtype == "bf16" else ""), flush=True)
    text = json.dumps(res, indent=2)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
