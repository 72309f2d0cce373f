#!/usr/bin/env bash
# Everything the project measures on a GPU, in steps of under 10 minutes each:
#
#   TRANSFORMER_DATA_MIRROR=../shared/datasets bash scripts/gpu_suite.sh OUTDIR [STEP...]
#
# STEP (default: all four, in this order):
#   bench  ours vs Hugging Face MarianMT at the recipe's size (d512, 4+4): training throughput and
#          counted-FLOP MFU in fp32, bf16 autocast, bf16 weights, and compiled (bf16 autocast and
#          bf16 weights); then decoding speed -> OUTDIR/bench/*.json, OUTDIR/bench.md
#   bench_small  the same at d256, 3+3
#   de_en  the full de→en recipe (experiment=multi30k) to its configured end, the last five
#   en_de  epochs' checkpoints averaged, then greedy and beam 5 on test_2016_flickr,
#          test_2017_flickr and test_2017_mscoco for the best and the averaged checkpoint
#          -> OUTDIR/<step>/ (run folder), OUTDIR/<step>.md (training time, epochs, tables)
#   nat_ctc  (not in the default list; after de_en) the de_en step's averaged checkpoint distils the
#          training set (transformer-distill, beam 5; kept and reused if OUTDIR/nat_ctc_distill
#          holds it), experiment=multi30k_nat_ctc_cpu with the GPU command its comment gives
#          trains on it to $SUITE_CTC_MAX_TIME (default
#          00:00:05:00), then one pass on test_2016_flickr (BLEU cased and lowercased) and
#          scripts/nat_benchmark.py (AT greedy vs CTC one pass, batch 1 and 64, on the GPU and on
#          one warm CPU thread) -> OUTDIR/nat_ctc/, OUTDIR/nat_ctc.md. A CPU try-out:
#            SUITE_CTC_CPU=1 SUITE_CTC_MAX_TIME=00:00:01:00 SUITE_CTC_OVERRIDES="debug=fast" \
#            SUITE_DISTILL_OVERRIDES="limit=64" bash scripts/gpu_suite.sh OUTDIR nat_ctc
#
# Training uses the recipe plus $SUITE_TRAIN_OVERRIDES (default: a compiled loss); a training
# step is cut at $SUITE_MAX_TIME (default 00:00:08:00) so that it ends inside 10 minutes, and its
# .md says whether the recipe reached its configured end. The exit status is non-zero when a
# step failed; the others still run.
set -uo pipefail
out=${1:?usage: gpu_suite.sh OUTDIR [bench|bench_small|de_en|en_de|nat_ctc ...]}
shift
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(bench bench_small de_en en_de)
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
overrides=${SUITE_TRAIN_OVERRIDES:-task.compile=true}
max_time=${SUITE_MAX_TIME:-00:00:08:00}
status=0

bench() {  # bench D_MODEL LAYERS HEADS D_FF: five precision/compile variants, then decoding
  mkdir -p "$out/bench"
  local dims=(--d-model "$1" --layers "$2" --heads "$3" --d-ff "$4") name variant flags
  local common=(--device cuda --train-sentences 29000 --warmup-steps 10 --train-steps 50 --skip-decode
                --pad-to-multiple 8 --tokenizer "$out/bench/tokenizer.json")
  for variant in fp32 bf16 bf16_true compiled_bf16 compiled_bf16_true; do
    case $variant in
      fp32) flags=() ;;
      bf16) flags=(--bf16) ;;
      bf16_true) flags=(--bf16-true) ;;
      compiled_bf16) flags=(--bf16 --compile) ;;
      compiled_bf16_true) flags=(--bf16-true --compile) ;;
    esac
    name="d$1_${variant}"
    echo "bench $name" >&2
    python3 "$here/bench_translation.py" "${common[@]}" "${dims[@]}" "${flags[@]}" \
      --json "$out/bench/$name.json" >"$out/bench/$name.log" 2>&1 || { echo "bench $name failed: $out/bench/$name.log" >&2; status=1; }
  done
  # Decoding (greedy and beam 5, batched and one sentence at a time), eager fp32.
  python3 "$here/bench_translation.py" --device cuda --train-steps 5 "${dims[@]}" --tokenizer "$out/bench/tokenizer.json" \
    --latency-sentences 8 --decode-repeats 1 --json "$out/bench/decode_d$1.json" >"$out/bench/decode_d$1.log" 2>&1 || status=1
  python3 "$here/bench_table.py" "$out"/bench/d*_*.json >"$out/bench.md" || status=1
  cat "$out/bench.md"
}

recipe() {  # recipe PAIR: train, average, evaluate
  local pair=$1 run="$out/$1" start end
  start=$(date +%s)
  python3 -m transformer.cli.train experiment=multi30k data.src_lang="${pair%_*}" data.tgt_lang="${pair#*_}" \
    hydra.run.dir="$run" data.data_dir="$run/cache" test_splits=[] trainer.max_time="$max_time" \
    callbacks.recent_checkpoints.save_top_k=5 $overrides >"$run.train.log" 2>&1
  local rc=$?
  end=$(date +%s)
  if [ $rc -ne 0 ] || [ ! -f "$run/train_summary.json" ]; then
    echo "training $pair failed: see $run.train.log" >&2; status=1; return
  fi
  python3 -m transformer.cli.average ckpt_dir="$run/checkpoints/recent" last_n=5 \
    output="$run/checkpoints/averaged.ckpt" >>"$run.train.log" 2>&1 || status=1
  local best
  best=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["best_checkpoint"] or "")' "$run/train_summary.json")
  {
    local gpu
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
    echo "## multi30k_$pair ($(date -u +%F), ${gpu:-no GPU})"
    echo
    echo "Overrides: \`$overrides trainer.max_time=$max_time\`; wall time of transformer-train: $((end - start)) s."
    python3 - "$run" <<'PY'
import json, sys
from pathlib import Path
run = Path(sys.argv[1])
s = json.load(open(run / "train_summary.json"))
cfg = (run / ".hydra" / "config.yaml").read_text()
max_epochs = next((int(l.split(":")[1]) for l in cfg.splitlines() if l.strip().startswith("max_epochs:")), None)
print(f"Epochs run: {s['epochs']} of {max_epochs} configured; updates: {s['global_step']}; "
      f"best val/bleu {s['best_score']}.")
PY
    for ckpt in "$best" "$run/checkpoints/averaged.ckpt"; do
      [ -f "$ckpt" ] || continue
      echo; echo "### $(basename "$ckpt")"; echo
      python3 "$here/evaluate_multi30k.py" "$ckpt" --out "$run/eval_$(basename "$ckpt" .ckpt)" \
        --data-dir "$run/cache" 2>>"$run.eval.log" || status=1
    done
  } >"$out/$pair.md"
  cat "$out/$pair.md"
}

nat_ctc() {  # distil with de_en's averaged teacher, train the CTC recipe on it, measure one pass
  local teacher="$out/de_en/checkpoints/averaged.ckpt" run="$out/nat_ctc" distilled="$out/nat_ctc_distill"
  local cache="$out/de_en/cache" dev start end best
  [ -f "$teacher" ] || { echo "nat_ctc needs the de_en step's $teacher" >&2; status=1; return; }
  dev=$(python3 -c 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")')
  if [ ! -f "$distilled/distill.json" ]; then
    python3 -m transformer.cli.distill ckpt_path="$teacher" split=train output_dir="$distilled" decode.strategy=beam \
      decode.beam_size=5 data_dir="$cache" ${SUITE_DISTILL_OVERRIDES:-} >"$run.distill.log" 2>&1 \
      || { echo "distillation failed: see $run.distill.log" >&2; status=1; return; }
  fi
  # The GPU command conf/experiment/multi30k_nat_ctc_cpu.yaml gives (SUITE_CTC_CPU=1: the CPU recipe).
  local gpu=(accel=none model=medium trainer.accelerator=gpu trainer.precision=bf16-mixed data.max_tokens=8192
             data.pad_to_multiple=8 task.lr=7e-4 task.warmup_steps=1000 trainer.max_epochs=120
             task.glancing.anneal_steps=4000 callbacks.recent_checkpoints.save_top_k=0 test_decode.blank_penalty=0.0
             'name=multi30k_${data.src_lang}_${data.tgt_lang}_nat_ctc')
  [ "${SUITE_CTC_CPU:-0}" = 1 ] && gpu=()
  start=$(date +%s)
  python3 -m transformer.cli.train experiment=multi30k_nat_ctc_cpu "${gpu[@]}" data.distill_dir="$distilled" \
    hydra.run.dir="$run" data.data_dir="$cache" test_splits=[] trainer.max_time="${SUITE_CTC_MAX_TIME:-00:00:05:00}" \
    ${SUITE_CTC_OVERRIDES:-} >"$run.train.log" 2>&1
  local rc=$?
  end=$(date +%s)
  if [ $rc -ne 0 ] || [ ! -f "$run/train_summary.json" ]; then
    echo "training nat_ctc failed: see $run.train.log" >&2; status=1; return
  fi
  best=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["best_checkpoint"] or "")' "$run/train_summary.json")
  python3 -m transformer.cli.evaluate ckpt_path="$best" split=test_2016_flickr decode.strategy=ctc_one_pass \
    output_dir="$run/eval" data_dir="$cache" >>"$run.eval.log" 2>&1 || status=1
  python3 "$here/nat_benchmark.py" --at-ckpt "$teacher" --ctc-ckpt "$best" --only "AT greedy" "CTC one pass" \
    --device "$dev" --data-dir "$cache" --output "$run/bench_$dev.json" >"$run/bench_$dev.log" 2>&1 || status=1
  OMP_NUM_THREADS=1 python3 "$here/nat_benchmark.py" --at-ckpt "$teacher" --ctc-ckpt "$best" --threads 1 --turn 20 \
    --only "AT greedy" "CTC one pass" --data-dir "$cache" --output "$run/bench_cpu1.json" >"$run/bench_cpu1.log" 2>&1 || status=1
  {
    local gpu
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
    echo "## multi30k_nat_ctc_cpu's GPU command on distilled de→en ($(date -u +%F), ${gpu:-no GPU})"
    echo
    echo "Teacher: $teacher; overrides: \`${SUITE_CTC_OVERRIDES:-}\`; wall time of transformer-train: $((end - start)) s."
    python3 - "$run" <<'PY'
import json, sys
from pathlib import Path
run = Path(sys.argv[1])
s = json.load(open(run / "train_summary.json"))
print(f"Epochs run: {s['epochs']}; updates: {s['global_step']}; best val/bleu {s['best_score']}.\n")
m = json.load(open(run / "eval" / "test_2016_flickr.ctc_one_pass.json"))
print(f"test_2016_flickr, one pass: BLEU {m['bleu']} cased, {m['bleu_lowercase']} lowercased ({m['bleu_signature']}).")
for name in sorted(run.glob("bench_*.log")):
    table = [l for l in name.read_text().splitlines() if l.startswith("|")]
    print(f"\n### {name.stem}\n"); print("\n".join(table))
PY
  } >"$out/nat_ctc.md"
  cat "$out/nat_ctc.md"
}

for step in "${steps[@]}"; do
  case $step in
    bench) bench 512 4 8 2048 ;;
    bench_small) bench 256 3 4 1024 ;;
    de_en|en_de) recipe "$step" ;;
    nat_ctc) nat_ctc ;;
    *) echo "unknown step $step (bench, bench_small, de_en, en_de, nat_ctc)" >&2; status=2 ;;
  esac
done
exit $status
