"""Training and decoding throughput of our EncoderDecoder against Hugging Face's MarianMTModel
of the same size, on the same Multi30k de→en batches, in the same process.

    pip install -e ".[bench]"   # transformers, for the peer
    TRANSFORMER_DATA_MIRROR=../shared/datasets python3 scripts/bench_translation.py

Both models: d_model=256, 3+3 layers, 4 heads, d_ff=1024, ReLU, post-norm, sinusoidal
positions, one joint 8k BPE vocabulary with tied embeddings, dropout 0.1 on residuals,
attention probabilities and FFN activations, fp32. Training
runs forward + label-smoothed loss + backward + Adam step on identical batches (ours through
the loss ``TranslationTask`` picks, Marian through its own forward, every position projected to
the vocabulary); the two models alternate batch by batch so that background load hits both
alike. Ours runs as ``--accel`` says (``cpu``: the fast paths of ``transformer/accel``, whose
loss projects only the real target positions; ``none``: the plain modules, every position);
``--compile`` adds a third model to the same run, ``ours_compiled``: a copy of ours with the
plain modules, its loss under ``torch.compile`` for training and ``decode.compile``'s compiled
step (``decoding.compiled``) for decoding; its compile time (the warm-up steps, and a first
decoding pass) is reported apart (``warm_up_seconds``). ``--compile-peer`` compiles Marian's
training step too. ``--pad-to-multiple 8`` rounds
batch widths up as ``data.pad_to_multiple`` does. Decoding runs
greedy and beam 5 over the same validation sentences, both batched under a token budget and
one sentence at a time (latency), every output exactly ``--max-output-len`` tokens (EOS
suppressed in both, so both do the same decoder steps), the models alternating batch by batch.
On a GPU (``--device cuda``) training can run in bf16 autocast (``--bf16``) or with bf16 weights
(``--bf16-true``, both models cast, no autocast; Adam fused on CUDA for both) and reports model
FLOPs utilisation against ``--peak-tflops``: the FLOPs are counted, not estimated, by running each
timed batch once more under ``torch.utils.flop_counter.FlopCounterMode`` (matrix products and
attention, forward and backward; the optimizer step and elementwise work are not counted).
``--d-model/--layers/--heads/--d-ff`` change both models' size alike, e.g. to the GPU recipe's
512 / 4 / 8 / 2048. ``--no-peer`` measures ours alone (no ``transformers`` needed): the same
numbers for ours, no Marian entries and no ratios. On a CPU, ``--count-flops`` also measures the
matrix-product limit of the model's shapes (``scripts/bench_limit.py``, fp32 and bf16) and prints
each model's training GFLOP/s as a share of it.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from datetime import date
from pathlib import Path

import torch

from transformer.evaluation.hardware import cpu_name


def build_batches(args):
    """Tokenized (src, tgt_in, tgt_out) batches of Multi30k de→en under a token budget."""
    from transformer.data.core.batching import token_budget_batches
    from transformer.data.core.tokenizer import SubwordTokenizer
    from transformer.data.parallel.corpus import multi30k, read_pairs

    train = read_pairs(multi30k("de", "en"), "train", mirror_root=args.mirror_root)
    val = read_pairs(multi30k("de", "en"), "val", mirror_root=args.mirror_root)
    if args.tokenizer and Path(args.tokenizer).is_file():
        tok = SubwordTokenizer.load(args.tokenizer)
    else:
        tok = SubwordTokenizer.train([s for p in train for s in p], vocab_size=args.vocab_size)
        if args.tokenizer:
            tok.save(args.tokenizer)
    pad, bos, eos = tok.pad_id, tok.bos_id, tok.eos_id
    pairs = train[: args.train_sentences]
    src = [tok.encode(s) + [tok.eos_id] for s, _ in pairs]
    tgt = [tok.encode(t) for _, t in pairs]
    lengths = [max(len(s), len(t) + 1) for s, t in zip(src, tgt)]
    batches = []
    m = args.pad_to_multiple
    lengths = [-(-n // m) * m for n in lengths]
    for idx in token_budget_batches(lengths, args.max_tokens):
        s = pad_to([src[i] for i in idx], pad, m)
        t_in = pad_to([[bos] + tgt[i] for i in idx], pad, m)
        t_out = pad_to([tgt[i] + [eos] for i in idx], pad, m)
        batches.append((s, t_in, t_out))
    g = torch.Generator().manual_seed(0)
    batches = [batches[i] for i in torch.randperm(len(batches), generator=g).tolist()]
    val_src = [tok.encode(s) + [tok.eos_id] for s, _ in val[: args.decode_sentences]]
    return tok, batches, val_src


def pad_to(rows, pad, multiple=1):
    width = -(-max(map(len, rows)) // multiple) * multiple
    out = torch.full((len(rows), width), pad, dtype=torch.long)  # (B, T)
    for r, ids in enumerate(rows):
        out[r, : len(ids)] = torch.tensor(ids)
    return out


def build_models(tok, args):
    """Ours and the MarianMT peer of the same size (None with ``--no-peer``)."""
    from transformer.models import EncoderDecoder, TransformerConfig

    ours = EncoderDecoder(TransformerConfig(
        vocab_size=tok.vocab_size, pad_id=tok.pad_id, d_model=args.d_model, n_heads=args.heads,
        n_encoder_layers=args.layers, n_decoder_layers=args.layers, d_ff=args.d_ff, dropout=0.1, norm_first=False, activation="relu",
        max_len=512, share_embeddings=True, tie_output=True,
    ))
    if args.no_peer:
        return ours, None
    from transformers import MarianConfig, MarianMTModel

    cfg = MarianConfig(
        vocab_size=tok.vocab_size, d_model=args.d_model, encoder_layers=args.layers,
        decoder_layers=args.layers, encoder_attention_heads=args.heads,
        decoder_attention_heads=args.heads, encoder_ffn_dim=args.d_ff, decoder_ffn_dim=args.d_ff, activation_function="relu", dropout=0.1,
        # our `dropout` also applies to attention probabilities and inside the FFN
        attention_dropout=0.1, activation_dropout=0.1, max_position_embeddings=512, pad_token_id=tok.pad_id,
        eos_token_id=tok.eos_id, bos_token_id=tok.bos_id, decoder_start_token_id=tok.bos_id,
        forced_eos_token_id=None, scale_embedding=True, share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
    )
    peer = MarianMTModel(cfg)
    return ours, peer


def params(m):
    return sum(p.numel() for p in m.parameters())


def marian_loss(model, src, t_in, t_out, label_smoothing, pad):
    """Marian's training loss on our batch (its own forward, our label-smoothed loss)."""
    from transformer.tasks.translation import label_smoothed_nll

    logits = model(input_ids=src, attention_mask=src.ne(pad), decoder_input_ids=t_in,
                   decoder_attention_mask=t_in.ne(pad), use_cache=False).logits
    return label_smoothed_nll(logits, t_out, label_smoothing, pad)


def train_throughput(models, batches, args, device, dtype):
    from transformer.tasks.translation import all_positions_loss, real_positions_loss

    pad = 0
    fused = device.type == "cuda" or None
    opts = {name: torch.optim.Adam(m.parameters(), lr=1e-4, betas=(0.9, 0.98), fused=fused)
            for name, m in models.items()}
    eager = {"ours": all_positions_loss, "ours_compiled": all_positions_loss, "marian": marian_loss}
    losses = dict(eager)
    if args.loss == "real_positions":
        losses["ours"] = real_positions_loss
    if "ours_compiled" in models:
        losses["ours_compiled"] = torch.compile(all_positions_loss, mode=args.compile_mode)
    if args.compile_peer:
        losses["marian"] = torch.compile(marian_loss, mode=args.compile_mode)
    autocast = dtype != torch.float32 and not args.bf16_true

    def step(name, src, t_in, t_out, fns=losses):
        model = models[name]
        with torch.autocast(device.type, dtype=dtype, enabled=autocast):
            loss, _ = fns[name](model, src, t_in, t_out, 0.1, pad)
        opts[name].zero_grad(set_to_none=True)
        loss.backward()
        opts[name].step()

    for m in models.values():
        m.train()
    times = dict.fromkeys(models, 0.0)
    warm_up = dict.fromkeys(models, 0.0)
    tokens = 0
    n = args.warmup_steps + args.train_steps
    for k, (src, t_in, t_out) in enumerate(batches[:n]):
        src, t_in, t_out = src.to(device), t_in.to(device), t_out.to(device)
        real = int(src.ne(pad).sum() + t_out.ne(pad).sum())
        for name in (list(models) if k % 2 == 0 else list(models)[::-1]):
            sync(device)
            t0 = time.perf_counter()
            step(name, src, t_in, t_out)
            sync(device)
            (times if k >= args.warmup_steps else warm_up)[name] += time.perf_counter() - t0
        if k >= args.warmup_steps:
            tokens += real
    flops = None
    if args.count_flops:
        from torch.utils.flop_counter import FlopCounterMode

        from transformer import accel

        # Counted on the eager, plain modules (the same arithmetic as the timed steps; the
        # counter sees neither compiled graphs nor oneDNN's private products).
        ours = models["ours"]
        models["ours"] = accel.apply(ours, "none")
        flops = dict.fromkeys(models, 0)
        for src, t_in, t_out in batches[args.warmup_steps : n]:
            src, t_in, t_out = src.to(device), t_in.to(device), t_out.to(device)
            for name in flops:
                with FlopCounterMode(display=False) as counter:
                    step(name, src, t_in, t_out, eager)
                flops[name] += counter.get_total_flops()
        models["ours"] = accel.apply(ours, args.accel)
        flops = {name: {"flops": f, "tflops_per_s": f / times[name] / 1e12} for name, f in flops.items()}
    return {name: tokens / t for name, t in times.items()}, tokens, flops, warm_up


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


@torch.no_grad()
def decode_throughput(models, tok, val_src, args, device, beam, one_by_one=False):
    """Decode the same batches with both models, every sentence exactly ``max_output_len``
    tokens long, alternating the two models batch by batch, ``decode_repeats`` times.

    Untrained models stop at EOS at different, arbitrary points, so EOS is suppressed for
    both (ours: EOS is given the PAD id, which search never emits; Marian: ``min_new_tokens``):
    the two do exactly the same number of decoder steps on the same rows, and the ratio of
    their times is the ratio of their per-step costs. (Ours also drops finished sentences from
    the batch; with every sentence running to the cap that advantage is not counted here.)
    """
    from transformer.data.core.batching import token_budget_batches
    from transformer.decoding import beam_search, greedy_search
    from transformer.decoding.compiled import compiled_decoding

    for m in models.values():
        m.eval()
    searchers = {"ours": models["ours"]}
    if "ours_compiled" in models:
        searchers["ours_compiled"] = compiled_decoding(models["ours_compiled"], device)
    if one_by_one:
        val_src = val_src[: args.latency_sentences]
        batches = [pad_to([s], tok.pad_id) for s in val_src]
    else:
        batches = [pad_to([val_src[i] for i in b], tok.pad_id)
                   for b in token_budget_batches([len(s) for s in val_src], args.decode_max_tokens)]
    length = args.max_output_len

    def run_ours(src, name="ours"):
        kw = dict(bos_id=tok.bos_id, eos_id=tok.pad_id, pad_id=tok.pad_id, max_len_a=0.0, max_len_b=length)
        if beam == 1:
            hyps = greedy_search(searchers[name], src, **kw)
        else:
            hyps = [h[0].tokens for h in beam_search(searchers[name], src, beam_size=beam, **kw)]
        return sum(len(h) for h in hyps)

    def run_marian(src):
        peer = models["marian"]
        gen = peer.generate(input_ids=src, attention_mask=src.ne(tok.pad_id), num_beams=beam, do_sample=False,
                            max_new_tokens=length, min_new_tokens=length, length_penalty=1.0)
        return int(gen[:, 1:].ne(tok.pad_id).sum())

    runners = {"ours": run_ours, "marian": run_marian, "ours_compiled": lambda src: run_ours(src, "ours_compiled")}
    warm_up = {}
    if "ours_compiled" in models:  # a first pass compiles, timed apart
        t0 = time.perf_counter()
        for src in batches:
            runners["ours_compiled"](src.to(device))
        sync(device)
        warm_up["ours_compiled"] = time.perf_counter() - t0
    seconds = dict.fromkeys(models, 0.0)
    tokens = dict.fromkeys(models, 0)
    for rep in range(args.decode_repeats):
        for k, src in enumerate(batches):
            src = src.to(device)
            for name in (list(models) if (k + rep) % 2 == 0 else list(models)[::-1]):
                sync(device)
                t0 = time.perf_counter()
                tokens[name] += runners[name](src)
                sync(device)
                seconds[name] += time.perf_counter() - t0
    expected = args.decode_repeats * len(val_src) * length
    if any(n != expected for n in tokens.values()):
        raise RuntimeError(f"expected {expected} generated tokens from each model, got {tokens}")
    n = args.decode_repeats * len(val_src)
    return {name: {"sentences_per_s": n / t, "tokens_per_s": tokens[name] / t, "seconds": t,
                   "ms_per_sentence": 1000 * t / n}
            | ({"warm_up_seconds": warm_up[name]} if name in warm_up else {}) for name, t in seconds.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mirror-root", default=None)
    ap.add_argument("--vocab-size", type=int, default=8000)
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--train-sentences", type=int, default=6000)
    ap.add_argument("--warmup-steps", type=int, default=3)
    ap.add_argument("--train-steps", type=int, default=20)
    ap.add_argument("--decode-sentences", type=int, default=256)
    ap.add_argument("--decode-max-tokens", type=int, default=2048)
    ap.add_argument("--max-output-len", type=int, default=40)
    ap.add_argument("--latency-sentences", type=int, default=32, help="decoded one at a time (0: batched only)")
    ap.add_argument("--decode-repeats", type=int, default=3, help="passes over the decoding batches")
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--layers", type=int, default=3, help="encoder and decoder layers each")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--d-ff", type=int, default=1024)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: leave default)")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast for training (GPU)")
    ap.add_argument("--bf16-true", action="store_true", help="bf16 weights for training, no autocast (GPU)")
    ap.add_argument("--accel", default="none", choices=("none", "cpu"),
                    help="ours' CPU fast paths (transformer.accel), as transformer-train's accel=")
    ap.add_argument("--loss", default="all_positions", choices=("all_positions", "real_positions"),
                    help="ours' training loss, as transformer-train's task.loss= (the CPU recipes: real_positions)")
    ap.add_argument("--compile", action="store_true", help="torch.compile our training loss")
    ap.add_argument("--compile-peer", action="store_true", help="torch.compile Marian's training loss too")
    ap.add_argument("--no-peer", action="store_true", help="ours alone: no MarianMT (transformers not needed)")
    ap.add_argument("--compile-mode", default="default", help="torch.compile mode")
    ap.add_argument("--pad-to-multiple", type=int, default=1, help="round batch widths up to this multiple")
    ap.add_argument("--skip-decode", action="store_true", help="training throughput only")
    ap.add_argument("--tokenizer", default=None, help="tokenizer.json to reuse (trained and saved there if missing)")
    ap.add_argument("--count-flops", action="store_true",
                    help="count training FLOPs (always on a GPU)")
    ap.add_argument("--peak-tflops", type=float, default=989.0, help="for MFU (H100 dense bf16)")
    ap.add_argument("--json", default=None, help="also write results here")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    if device.type == "cpu":
        from transformer.cli.common import keep_freed_memory

        keep_freed_memory()  # as transformer-train does on a CPU (the peer gains from it alike)
    tok, batches, val_src = build_batches(args)
    ours, peer = build_models(tok, args)
    for m in (ours, peer):
        if m is not None:
            m.to(device)
    from transformer import accel

    plain = copy.deepcopy(ours) if args.compile else None  # the same weights, plain modules
    ours = accel.apply(ours, accel.check(args.accel))
    models = {"ours": ours} | ({"ours_compiled": plain} if plain is not None else {}) \
        | ({"marian": peer} if peer is not None else {})
    dtype = torch.bfloat16 if args.bf16 or args.bf16_true else torch.float32
    if args.bf16_true:
        for m in models.values():
            m.to(dtype)
    args.count_flops = args.count_flops or device.type == "cuda"
    train, tokens, flops, warm_up = train_throughput(models, batches, args, device, dtype)
    res = {
        "date": date.today().isoformat(), "device": args.device, "cpu": cpu_name(),
        "threads": torch.get_num_threads(), "torch": torch.__version__, "precision": str(dtype),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "size": {"d_model": args.d_model, "layers": args.layers, "heads": args.heads, "d_ff": args.d_ff},
        "ours": {"accel": args.accel, "compile": args.compile, "compile_mode": args.compile_mode,
                 "bf16_true": args.bf16_true, "pad_to_multiple": args.pad_to_multiple},
        "marian_compiled": args.compile_peer if peer is not None else None,
        "params": {"ours": params(ours), **({"marian": params(peer)} if peer is not None else {})},
        "train_tokens_per_s": train, "train_tokens_measured": tokens,
        "train_warm_up_seconds": warm_up,
    }
    if peer is not None:
        res["train_speedup_vs_marian"] = train["ours"] / train["marian"]
        if "ours_compiled" in train:
            res["train_compiled_speedup_vs_marian"] = train["ours_compiled"] / train["marian"]
    if flops:
        res["train_flops"] = flops
    if flops and device.type == "cpu":
        # The counted GFLOP/s beside this machine's matrix-product limit (scripts/bench_limit.py:
        # plain torch.mm on the model's shapes, as many threads as the timed steps).
        from bench_limit import measure, model_shapes, share

        limits = measure(shapes=model_shapes(args.d_model, args.d_ff, ours.vocab_size))
        res["matmul_limit_gflops_per_s"] = {d: max(v.values()) for d, v in limits.items()}
        res["train_share_of_limit"] = {k: share(v["tflops_per_s"] * 1e3, limits) for k, v in flops.items()}
        for k, v in flops.items():
            print(f"train {k}: {v['tflops_per_s'] * 1e3:.1f} GFLOP/s, {res['train_share_of_limit'][k]}")
    if flops and device.type == "cuda":
        # Counted FLOPs of the timed training steps over their time, as a share of the peak.
        res["mfu"] = {k: v["tflops_per_s"] / args.peak_tflops for k, v in flops.items()}
        res["peak_tflops"] = args.peak_tflops
    for beam in (() if args.skip_decode else (1, 5)):
        for one_by_one, tag in ((False, "batched"), (True, "batch1"))[: 2 if args.latency_sentences else 1]:
            d = decode_throughput(models, tok, val_src, args, device, beam, one_by_one)
            res[f"decode_beam{beam}_{tag}"] = d
            if peer is not None:
                res[f"decode_beam{beam}_{tag}_speedup_vs_marian"] = d["marian"]["seconds"] / d["ours"]["seconds"]
                if "ours_compiled" in d:
                    res[f"decode_beam{beam}_{tag}_compiled_speedup_vs_marian"] = \
                        d["marian"]["seconds"] / d["ours_compiled"]["seconds"]
    text = json.dumps(res, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
