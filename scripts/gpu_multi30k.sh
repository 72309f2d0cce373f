#!/usr/bin/env bash
# The full Multi30k recipes on one GPU, de→en and en→de side by side, then the test tables:
#
#   TRANSFORMER_DATA_MIRROR=../shared/datasets bash scripts/gpu_multi30k.sh runs/gpu [overrides...]
#
# Each direction trains with `transformer-train experiment=multi30k data.src_lang=<src> data.tgt_lang=<tgt>`
# plus the overrides
# (e.g. trainer.max_time=00:00:07:00), in OUTDIR/multi30k_<pair>/ with its own data cache. The best
# checkpoint by validation BLEU is then decoded greedy and beam 5 on test_2016_flickr,
# test_2017_flickr and test_2017_mscoco by scripts/evaluate_multi30k.py, whose Markdown table
# lands in OUTDIR/multi30k_<pair>.eval.md (hypotheses and JSON in OUTDIR/multi30k_<pair>/eval/).
set -uo pipefail
out=${1:?usage: gpu_multi30k.sh OUTDIR [train overrides...]}
shift
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
exps=(multi30k_de_en multi30k_en_de)
pids=()
for exp in "${exps[@]}"; do
  pair=${exp#multi30k_}
  python3 -m transformer.cli.train experiment=multi30k data.src_lang="${pair%_*}" data.tgt_lang="${pair#*_}" \
    hydra.run.dir="$out/$exp" data.data_dir="$out/$exp/cache" test_splits=[] "$@" >"$out/$exp.log" 2>&1 &
  pids+=($!)
done
status=0
for i in "${!exps[@]}"; do
  if ! wait "${pids[$i]}"; then
    echo "training ${exps[$i]} failed: see $out/${exps[$i]}.log" >&2
    status=1
  fi
done
pids=()
for exp in "${exps[@]}"; do
  best=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["best_checkpoint"] or "")' \
    "$out/$exp/train_summary.json" 2>/dev/null)
  if [ -z "$best" ]; then
    echo "no best checkpoint for $exp (see $out/$exp.log)" >&2
    status=1
    continue
  fi
  python3 "$here/evaluate_multi30k.py" "$best" --out "$out/$exp/eval" --data-dir "$out/$exp/cache" \
    >"$out/$exp.eval.md" 2>"$out/$exp.eval.log" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
for exp in "${exps[@]}"; do
  [ -f "$out/$exp.eval.md" ] && { echo "## $exp"; cat "$out/$exp.eval.md"; }
done
exit $status
