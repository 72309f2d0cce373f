#!/usr/bin/env bash
# One GPU check of the project in about 8 minutes, for one call of a lent GPU machine:
#
#   bash scripts/gpu_check.sh OUTDIR                      # on the GPU machine
#   GPU_CHECK_DRY=1 bash scripts/gpu_check.sh /tmp/gc     # dry run here: CPU, tiny sizes, 1.5-3 minutes
#
# Steps, each time-boxed with `timeout`; one that fails does not stop the others, and the exit
# status is 1 when any failed (2 for a usage error):
#   env          nvidia-smi, driver, Python/torch/CUDA and package versions    -> env.txt
#   bench_train  scripts/bench_translation.py --compile, ours (eager and compiled) vs Hugging Face
#                MarianMT at the GPU recipe's size (d512, 4+4, 8 heads, d_ff 2048) on the same
#                Multi30k batches in one run: training in bf16 autocast, 30 measured steps each,
#                with counted-FLOP MFU and the compile time apart    -> bench_train.json
#   bench_decode the same for decoding, greedy and beam 5, batched: eager, and decode.compile's
#                compiled step                                          -> bench_decode.json
#   profile      scripts/profile_step.py: torch.profiler table of one compiled training step of the
#                recipe (top 15 ops by self CUDA time)                        -> profile.txt
#   recipe_train experiment=multi30k (the GPU recipe: model=medium, bf16, 8192-token batches)
#                cut at trainer.max_time=4 min (less if the steps before ran late, said in
#                recipe.json), test_splits=[] (the two evaluations below replace its end-of-run
#                beam-5 tables); its run folder stays in the work folder, outside OUTDIR
#   eval_greedy, eval_beam5  transformer-evaluate of its best checkpoint on test_2016_flickr
#                (-> recipe.json, with the training summary), run side by side with:
#   gpu_tests    pytest -m gpu -q tests/gpu                                     -> gpu_tests.txt
# OUTDIR gets at most these 8 files, flat: log.txt (all output, timestamped step lines), env.txt,
# gpu_tests.txt, bench_train.json, bench_decode.json, profile.txt, recipe.json, summary.md.
# Everything else (bench tokenizer, run folder, data cache) goes to $GPU_CHECK_WORK (default: a
# new /tmp/gpu_check.XXXXXX). GPU_CHECK_SKIP="bench_train profile ..." leaves the named steps out
# (a rerun of the others). The whole run is held to $GPU_CHECK_BUDGET_S seconds (default 510):
# a step's box is cut to what is left, and the recipe's training time to what is left less ~100 s.
# GPU_CHECK_RECIPE=multi30k_multi trains the multilingual recipe (one model, en→{de,fr,cs}: the command
# experiment=multi30k's comment gives) in
# recipe_train instead, and the evaluations score each of its directions (recipe.json holds them
# by direction); the steps before it are then better skipped, to leave it their time:
#   GPU_CHECK_RECIPE=multi30k_multi GPU_CHECK_SKIP="bench_train bench_decode profile" bash scripts/gpu_check.sh OUTDIR
# GPU_CHECK_RECIPE=inputs trains the presets of the other inputs instead, side by side on the one GPU,
# each unchanged but for trainer.accelerator=gpu and the time cap: experiment=fsdd_digits (speech
# frames, one label), experiment=fsdd_strings (speech frames, a digit string), experiment=graph_nodes
# data.preset=cora (graph nodes) and experiment=digits (image patches). Each tests its own best
# checkpoint, so eval_greedy and eval_beam5 do not run; recipe.json holds each run's summary and
# wall time, and gpu_tests adds tests/data/graphs/test_pyg.py (PyTorch Geometric is on the GPU image).
# The data: .gpu_data/fsdd and .gpu_data/planetoid copied from the mirror (~30 MiB), and the speech
# wheels in .whl (soundfile, soxr, librosa, audioread, pooch, decorator, platformdirs, cffi,
# pycparser, filelock):
#   GPU_CHECK_BUDGET_S=560 GPU_CHECK_RECIPE=inputs GPU_CHECK_SKIP="bench_train bench_decode profile" bash scripts/gpu_check.sh OUTDIR
# (the device call's timeout_s=590: the four trainings ~300 s, the GPU tests up to 200 s)
#
# GPU_CHECK_DRY=1: the same steps on the CPU at toy sizes (d_model 32, 1+1 layers, a few steps;
# experiment=multi30k_cpu debug=fast model=tiny and a 20-second cap) to test this script; without
# the transformers package the Marian peer is left out there, with a note (the real run needs it).
#
# Before the device call, here on the CPU, from the repo root (the data the recipe, the benchmark
# and the GPU tests read, ~1.4 MiB, in the mirror's layout; and the packages the device image
# lacks, for its Python 3.12: hydra-core, omegaconf, antlr4 (no wheel on PyPI: built here),
# datasets, dill, multiprocess, pydantic with its core, annotated-types and typing-inspection -- torch, lightning, tokenizers, sacrebleu, transformers, pyarrow
# and pytest are there):
#
#   mkdir -p .gpu_data/multi30k/data/task1/raw
#   cp ../shared/datasets/multi30k/data/task1/raw/*.gz .gpu_data/multi30k/data/task1/raw/   # de en fr cs
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     -d .whl hydra-core==1.3.8 omegaconf==2.3.1 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 \
#     pydantic==2.13.4 pydantic-core==2.46.4 annotated-types typing-inspection
#   python3 -m pip wheel --no-deps -w .whl antlr4-python3-runtime==4.9.3
#   du -sh .gpu_data .whl        # ~1.4 MiB + ~3.5 MiB; both are git-ignored
#
# then the device call: run(command="bash scripts/gpu_check.sh $OUT", carry=[".gpu_data", ".whl"],
# timeout_s=540). At its start the script installs .whl/*.whl (when the folder is there) into
# /tmp/site and puts that and the checkout on PYTHONPATH (no pip install of the project needed).
set -uo pipefail

out=${1:?usage: gpu_check.sh OUTDIR   (GPU_CHECK_DRY=1 for a CPU dry run)}
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
# Everything this script prints goes to OUTDIR/log.txt as well.
if [ -z "${GPU_CHECK_LOGGING:-}" ]; then
  GPU_CHECK_LOGGING=1 bash "$0" "$out" 2>&1 | tee "$out/log.txt"
  exit "${PIPESTATUS[0]}"
fi

cd "$repo" || exit 2
dry=${GPU_CHECK_DRY:-0}
[ "$dry" = 0 ] || dry=1
recipe_name=${GPU_CHECK_RECIPE:-multi30k}
case "$recipe_name" in
  multi30k|multi30k_multi|inputs) ;;
  *) echo "error: GPU_CHECK_RECIPE=$recipe_name: expected multi30k, multi30k_multi or inputs" >&2; exit 2 ;;
esac
budget=${GPU_CHECK_BUDGET_S:-510}
work=${GPU_CHECK_WORK:-$(mktemp -d /tmp/gpu_check.XXXXXX)}
mkdir -p "$work"
steps_tsv="$work/steps.tsv"
: >"$steps_tsv"
notes="$work/notes.txt"
: >"$notes"
SECONDS=0

say() { echo "[$(date -u +%H:%M:%S) +${SECONDS}s] $*"; }
note() { echo "$*" >>"$notes"; say "note: $*"; }

# box SECONDS: the step's own limit, cut to the time left in the budget (0: none left).
box() {
  local left=$((budget - SECONDS))
  [ "$left" -lt 15 ] && left=0
  [ "$1" -lt "$left" ] && echo "$1" || echo "$left"
}

# step NAME LIMIT CMD...: run CMD under timeout, its output to the log, and record the result
# (a step that finds under 15 s of the budget left is skipped, and counts as failed).
step() {
  local name=$1 limit start rc
  limit=$(box "$2")
  shift 2
  if [[ " ${GPU_CHECK_SKIP:-} " == *" $name "* ]]; then
    record "$name" off 0 0
    return 1
  fi
  if [ "$limit" = 0 ]; then
    record "$name" skip 0 0
    return 1
  fi
  say "== $name (limit ${limit}s): $*"
  start=$SECONDS
  timeout -k 10 "$limit" "$@"
  rc=$?
  record "$name" "$rc" $((SECONDS - start)) "$limit"
  return $rc
}

record() {  # record NAME RC SECONDS LIMIT
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$steps_tsv"
  if [ "$2" = 0 ]; then
    say "== $1: ok in $3 s"
  elif [ "$2" = skip ]; then
    say "== $1: SKIPPED: the time budget (${budget}s) is spent"
  elif [ "$2" = off ]; then
    say "== $1: not run (GPU_CHECK_SKIP)"
  elif [ "$2" = 124 ] || [ "$2" = 137 ]; then
    say "== $1: TIMED OUT after $3 s (limit $4 s)"
  else
    say "== $1: FAILED (exit $2) after $3 s"
  fi
}

# ---------------------------------------------------------------- setup
export PYTHONUNBUFFERED=1 HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [ -z "${TRANSFORMER_DATA_MIRROR:-}" ]; then
  if [ -d .gpu_data ]; then TRANSFORMER_DATA_MIRROR=.gpu_data; else TRANSFORMER_DATA_MIRROR=../shared/datasets; fi
fi
if [ -d "$TRANSFORMER_DATA_MIRROR/multi30k" ]; then
  TRANSFORMER_DATA_MIRROR=$(cd "$TRANSFORMER_DATA_MIRROR" && pwd)
else
  note "no multi30k under the data mirror $TRANSFORMER_DATA_MIRROR: the benchmark, profile and recipe will fail"
fi
export TRANSFORMER_DATA_MIRROR
say "gpu_check: dry=$dry out=$out work=$work mirror=$TRANSFORMER_DATA_MIRROR budget=${budget}s"
site=""
if [ "$dry" = 0 ] && compgen -G ".whl/*.whl" >/dev/null; then
  say "installing $(ls .whl/*.whl | wc -l) wheels from .whl/ into /tmp/site"
  if timeout 120 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl; then
    site=/tmp/site
  else
    note "installing the wheels of .whl/ failed"
  fi
fi
export PYTHONPATH="${site:+$site:}$repo${PYTHONPATH:+:$PYTHONPATH}"
missing=$(python3 - 2>/dev/null <<'PY'
import importlib
missing = []
for name in ("torch", "lightning", "hydra", "datasets", "tokenizers", "sacrebleu", "transformer", "transformers"):
    try:
        importlib.import_module(name)
    except Exception:  # ImportError, or a wheel that does not fit this Python
        missing.append(name)
print(" ".join(missing))
PY
)
if [ -n "$missing" ] && [ "$missing" != transformers ]; then
  note "not importable: $missing"
fi
peer=1
if [[ " $missing " == *" transformers "* ]]; then
  peer=0
  if [ "$dry" = 1 ]; then
    note "transformers is not installed: the benchmark ran ours alone (--no-peer), no Marian comparison"
  else
    note "transformers is not installed: the benchmark ran ours alone (--no-peer); the real run needs it (pip install -e '.[bench]' or a wheel in .whl/)"
  fi
fi

if [ "$dry" = 1 ]; then
  dims=(--d-model 32 --layers 1 --heads 2 --d-ff 64)
  # Rows padded to 64 under a 512-token budget: one batch shape, so the compiled step compiles once.
  bench_common=(--device cpu --vocab-size 500 --train-sentences 2000 --max-tokens 512 --warmup-steps 1
                --train-steps 3 --pad-to-multiple 64)
  decode_args=(--train-steps 1 --decode-sentences 16 --decode-max-tokens 512 --max-output-len 8
               --latency-sentences 0 --decode-repeats 1)
  recipe=multi30k_cpu
  recipe_overrides=(debug=fast model=tiny data.vocab_size=400 accel=none)  # the compiled plain step, as on a GPU
  max_time_s=20
  profile_warmup=2
  inputs_device=cpu
  # the presets at toy sizes: a few updates each, 40 digit strings
  inputs_overrides=(trainer.max_steps=3 trainer.max_epochs=1 test_checkpoint=last "callbacks.progress_bar=null")
  inputs_strings=(data.n_strings.train=40 data.n_strings.dev=10 data.n_strings.test=10)
else
  dims=(--d-model 512 --layers 4 --heads 8 --d-ff 2048)
  bench_common=(--device cuda --train-sentences 29000 --warmup-steps 10 --train-steps 30 --pad-to-multiple 8)
  decode_args=(--warmup-steps 1 --train-steps 1 --decode-sentences 256 --latency-sentences 0 --decode-repeats 1)
  recipe=multi30k
  recipe_overrides=()
  max_time_s=240
  profile_warmup=3
  inputs_device=gpu
  inputs_overrides=("callbacks.progress_bar=null")
  inputs_strings=()
fi
# The multilingual recipe: the single-pair one with three directions, a vocabulary for four languages
# and three times the warm-up (as the commands in conf/experiment/multi30k.yaml and multi30k_cpu.yaml).
multilingual=()
if [ "$recipe_name" = multi30k_multi ]; then
  multilingual=("data.pairs=[en-de,en-fr,en-cs]" data.vocab_size=12000 "name=multi30k_multi${recipe#multi30k}")
  if [ "$recipe" = multi30k ]; then multilingual+=(task.warmup_steps=3000); else multilingual+=(task.warmup_steps=900); fi
fi
recipe_overrides=("${multilingual[@]}" "${recipe_overrides[@]}")
no_peer=()
[ "$peer" = 1 ] || no_peer=(--no-peer)
bench_tok="$work/bench_tokenizer.json"
cache="$work/cache"
run="$work/recipe"

# ---------------------------------------------------------------- a. environment
env_info() {
  echo "date: $(date -u '+%F %T UTC')  host: ${HOSTNAME:-?}  cpus: $(nproc)  dry: $dry"
  echo "checkout: $repo  commit: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?')"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
    nvidia-smi
  else
    echo "nvidia-smi: not found"
  fi
  python3 - <<'PY'
import importlib, platform, sys
import torch
print(f"python {platform.python_version()} ({sys.executable})")
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, "
      f"CUDA available: {torch.cuda.is_available()}")
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"device 0: {p.name}, capability {p.major}.{p.minor}, {p.multi_processor_count} SMs, "
          f"{p.total_memory / 2**30:.1f} GiB")
for name in ("lightning", "hydra", "omegaconf", "datasets", "pyarrow", "tokenizers", "sacrebleu",
             "transformers", "triton", "numpy", "pytest", "transformer"):
    try:
        m = importlib.import_module(name)
        print(f"{name} {getattr(m, '__version__', '?')} ({m.__file__})")
    except Exception as exc:  # a missing package is what this file is for
        print(f"{name}: NOT IMPORTABLE ({type(exc).__name__}: {exc})")
PY
}
export -f env_info
export dry repo
# to_file FILE CMD...: CMD's standard output to FILE and to the log (its errors to the log only).
to_file='set -o pipefail; f=$1; shift; "$@" | tee "$f"'
step env 60 bash -c "$to_file" _ "$out/env.txt" bash -c 'env_info 2>&1'

# ---------------------------------------------------------------- b. benchmark vs Marian
step bench_train 300 python3 scripts/bench_translation.py "${bench_common[@]}" "${dims[@]}" --skip-decode \
  --bf16 --compile --tokenizer "$bench_tok" "${no_peer[@]}" --json "$work/bench_train.json"
if [ -f "$work/bench_train.json" ]; then
  cp "$work/bench_train.json" "$out/bench_train.json"
else
  echo '{"error": "no result: see log.txt"}' >"$out/bench_train.json"
fi
step bench_decode 180 python3 scripts/bench_translation.py "${bench_common[@]}" "${dims[@]}" "${decode_args[@]}" \
  --compile --tokenizer "$bench_tok" "${no_peer[@]}" --json "$work/bench_decode.json"
if [ -f "$work/bench_decode.json" ]; then
  cp "$work/bench_decode.json" "$out/bench_decode.json"
else
  echo '{"error": "no result: see log.txt"}' >"$out/bench_decode.json"
fi
if [ "$peer" = 0 ] && [ "$dry" = 0 ]; then
  record bench_marian 1 0 0   # the real run must compare against Marian
fi

# ---------------------------------------------------------------- d. profile of one compiled step
# It builds the recipe's data module first, so it also prepares the recipe's data cache.
step profile 180 bash -c "$to_file" _ "$out/profile.txt" python3 scripts/profile_step.py --warmup "$profile_warmup" \
  --output-dir "$work/profile" experiment=$recipe "${recipe_overrides[@]}" data.data_dir="$cache"

# ---------------------------------------------------------------- c. the de→en recipe, cut short
# Training gets its 4 minutes unless the steps above ran late: then what is left, less ~100 s for
# start-up and the evaluations (at least 30 s).
left=$((budget - SECONDS - 100))
[ "$left" -ge 30 ] || left=30
if [ "$left" -lt "$max_time_s" ]; then
  note "recipe training cut to $left s instead of $max_time_s s: the steps before it ran late"
  max_time_s=$left
fi
max_time=$(printf '00:00:%02d:%02d' $((max_time_s / 60)) $((max_time_s % 60)))
train_args=(experiment=$recipe "${recipe_overrides[@]}" "trainer.max_time=$max_time" "test_splits=[]"
            "hydra.run.dir=$run" "data.data_dir=$cache")
echo "python3 -m transformer.cli.train ${train_args[*]}" >"$work/recipe_command.txt"
recipe_start=$SECONDS
if [ "$recipe_name" = inputs ]; then
  # The four presets side by side, a quarter of the CPU threads each (their data loading and speech
  # features are CPU work); each writes its own run folder and its wall time beside it.
  # (a function run by `timeout` through `bash -c`: its settings travel in the environment)
  inputs_train() {
    local name pid rc=0 pids=() threads=$(( $(nproc) / 4 > 0 ? $(nproc) / 4 : 1 ))
    for name in fsdd_digits fsdd_strings cora digits; do
      local args=("experiment=$name")
      [ "$name" = cora ] && args=(experiment=graph_nodes data.preset=cora)
      # shellcheck disable=SC2206
      [ "$name" = fsdd_strings ] && args+=($INPUTS_STRINGS)
      # shellcheck disable=SC2206  # the overrides hold no spaces
      args+=("trainer.accelerator=$inputs_device" "trainer.max_time=$max_time" $INPUTS_OVERRIDES
             "hydra.run.dir=$work/inputs/$name" "data.data_dir=$cache/$name")
      mkdir -p "$work/inputs/$name"
      echo "python3 -m transformer.cli.train ${args[*]}" >"$work/inputs/$name.command"
      ( start=$SECONDS; OMP_NUM_THREADS=$threads python3 -m transformer.cli.train "${args[@]}" >"$work/inputs/$name.log" 2>&1
        r=$?; echo $((SECONDS - start)) >"$work/inputs/$name.wall"; exit $r ) &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
    for name in fsdd_digits fsdd_strings cora digits; do
      echo "---- $name: the end of its log"
      tail -n 15 "$work/inputs/$name.log"
    done
    return $rc
  }
  export -f inputs_train
  export inputs_device max_time work cache INPUTS_OVERRIDES="${inputs_overrides[*]}" \
    INPUTS_STRINGS="${inputs_strings[*]}"
  echo "the four presets: see recipe.json" >"$work/recipe_command.txt"
  step recipe_train $((max_time_s + 150)) bash -c inputs_train
else
  step recipe_train $((max_time_s + 120)) python3 -m transformer.cli.train "${train_args[@]}"
fi
echo $((SECONDS - recipe_start)) >"$work/recipe_wall_s.txt"
best=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["best_checkpoint"] or "")' \
  "$run/train_summary.json" 2>/dev/null)

# The two evaluations and the GPU tests side by side: none of them is timed. A third of the CPU
# threads each, so that three processes do not oversubscribe the cores.
tail_limit=$(box 150)
# the inputs recipe's GPU tests train each input kind and evaluate it twice (~140 s with 4 workers)
[ "$recipe_name" = inputs ] && tail_limit=$(box 200)
[ "$tail_limit" -gt 0 ] || tail_limit=30  # the evaluations and tests still get a try
threads=$(($(nproc) / 3))
[ "$threads" -ge 1 ] || threads=1
export OMP_NUM_THREADS=$threads
pids=() names=()
launch() {  # launch NAME LOGFILE CMD...: in the background, its output to LOGFILE
  local name=$1 log=$2
  shift 2
  say "== $name (limit ${tail_limit}s, in the background): $*"
  ( start=$SECONDS; timeout -k 10 "$tail_limit" "$@" >"$log" 2>&1; echo "$? $((SECONDS - start))" >"$log.rc" ) &
  pids+=($!) names+=("$name")
}
if [ "$recipe_name" = inputs ]; then
  note "GPU_CHECK_RECIPE=inputs: each preset tested its own best checkpoint (recipe.json), no Multi30k evaluation"
elif [ -n "$best" ] && [ -f "$best" ]; then
  launch eval_greedy "$work/eval_greedy.log" python3 -m transformer.cli.evaluate ckpt_path="$best" \
    split=test_2016_flickr decode.strategy=greedy output_dir="$work/eval_greedy" data_dir="$cache"
  launch eval_beam5 "$work/eval_beam5.log" python3 -m transformer.cli.evaluate ckpt_path="$best" \
    split=test_2016_flickr decode.strategy=beam decode.beam_size=5 output_dir="$work/eval_beam5" data_dir="$cache"
else
  note "no best checkpoint from recipe_train: nothing to evaluate"
  record eval_greedy 1 0 0
  record eval_beam5 1 0 0
fi
if [ "$recipe_name" = inputs ]; then
  launch gpu_tests "$out/gpu_tests.txt" bash -c 'python3 -m pytest -m gpu -q -p no:cacheprovider -n 4 tests/gpu; a=$?;
    python3 -m pytest -q -p no:cacheprovider tests/data/graphs/test_pyg.py; b=$?; exit $((a || b))'
else
  launch gpu_tests "$out/gpu_tests.txt" python3 -m pytest -m gpu -q tests/gpu
fi
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"
  name=${names[$i]}
  log="$work/$name.log"
  [ "$name" = gpu_tests ] && log="$out/gpu_tests.txt"
  say "---- output of $name:"
  tail -n 60 "$log"
  read -r rc secs <"$log.rc" || { rc=1; secs=0; }
  rm -f "$log.rc"
  record "$name" "$rc" "$secs" "$tail_limit"
done

# ---------------------------------------------------------------- recipe.json and summary.md
python3 - "$work" "$out" "$dry" <<'PY' || say "writing recipe.json or summary.md failed"
import csv, json, sys
from pathlib import Path

work, out, dry = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "1"
run = work / "recipe"


def load(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


# recipe.json: the training summary, what the recipe was configured to do, and the test BLEU.
recipe = {"command": (work / "recipe_command.txt").read_text().strip() if (work / "recipe_command.txt").exists() else None}
wall = work / "recipe_wall_s.txt"
recipe["train_wall_s"] = int(wall.read_text()) if wall.exists() else None
recipe["train_summary"] = load(run / "train_summary.json")
cfg_file = run / ".hydra" / "config.yaml"
if cfg_file.exists():
    import yaml

    cfg = yaml.safe_load(cfg_file.read_text())
    model = cfg.get("model", {})
    recipe["config"] = {
        "max_epochs": cfg["trainer"].get("max_epochs"), "max_time": cfg["trainer"].get("max_time"),
        "precision": cfg["trainer"].get("precision"), "max_tokens": cfg["data"].get("max_tokens"),
        "lr": cfg["task"].get("lr"), "warmup_steps": cfg["task"].get("warmup_steps"),
        "model": {k: model.get(k) for k in ("d_model", "n_heads", "n_encoder_layers", "n_decoder_layers", "d_ff", "dropout", "norm_first")},
    }
metrics_csv = run / "csv" / "metrics.csv"
if metrics_csv.exists():
    rows = list(csv.DictReader(metrics_csv.open()))
    recipe["val_bleu_by_epoch"] = [
        {"epoch": int(float(r["epoch"])), "step": int(float(r["step"])), "val/bleu": float(r["val/bleu"]),
         "val/loss": float(r["val/loss"]) if r.get("val/loss") else None}
        for r in rows if r.get("val/bleu") not in (None, "")
    ]
recipe["test_2016_flickr"] = {}
keys = ("bleu", "bleu_lowercase", "chrf", "bleu_signature", "sentences", "seconds", "decode")
for name, stem in (("greedy", "greedy"), ("beam5", "beam")):
    m = load(work / f"eval_{name}" / f"test_2016_flickr.{stem}.json")
    # A multilingual model's evaluation writes a file per direction: test_2016_flickr.<src>-<tgt>.<stem>.json
    each = {f.name.split(".")[1]: load(f) for f in sorted((work / f"eval_{name}").glob(f"test_2016_flickr.*-*.{stem}.json"))}
    if m is not None:
        recipe["test_2016_flickr"][name] = {k: m.get(k) for k in keys if k in m}
    elif each and all(r is not None for r in each.values()):
        recipe["test_2016_flickr"][name] = {d: {k: r.get(k) for k in keys if k in r} for d, r in each.items()}
    else:
        recipe["test_2016_flickr"][name] = {"error": "no result: see log.txt"}
inputs = {}
for f in sorted((work / "inputs").glob("*.command")):
    name = f.stem
    s = load(work / "inputs" / name / "train_summary.json") or {}
    wall = work / "inputs" / f"{name}.wall"
    inputs[name] = {"command": f.read_text().strip(), "wall_s": int(wall.read_text()) if wall.exists() else None,
                    **{k: s.get(k) for k in ("epochs", "global_step", "parameters", "monitor", "best_score", "test")},
                    "error": None if s else "no train_summary.json: see log.txt"}
if inputs:
    recipe = {"inputs": inputs, "train_wall_s": recipe["train_wall_s"]}
(out / "recipe.json").write_text(json.dumps(recipe, indent=2) + "\n")

# summary.md: one row per step, then the numbers that matter.
steps = [line.split("\t") for line in (work / "steps.tsv").read_text().splitlines() if line]
notes = [n for n in (work / "notes.txt").read_text().splitlines() if n]
env = (out / "env.txt").read_text().splitlines() if (out / "env.txt").exists() else []
gpu = next((l for l in env if l.startswith("device 0:")), "no CUDA device")


def status(rc):
    if rc == "skip":
        return "skipped (no time left)"
    if rc == "off":
        return "not run (GPU_CHECK_SKIP)"
    return "ok" if rc == "0" else ("timed out" if rc in ("124", "137") else f"failed (exit {rc})")


lines = [f"# gpu_check{' (dry run, CPU, toy sizes)' if dry else ''}", "", f"{gpu}", "",
         "| step | status | seconds | limit |", "|---|---|---|---|"]
lines += [f"| {name} | {status(rc)} | {secs} | {limit} |" for name, rc, secs, limit in steps]
if notes:
    lines += ["", "Notes:", ""] + [f"- {n}" for n in notes]

lines += ["", "## bench_train (scripts/bench_translation.py --bf16 --compile)", ""]
bench = load(out / "bench_train.json") or {}
lines += ["| model | tokens/s | / Marian | MFU | warm-up s |", "|---|---|---|---|---|"]
tps, mfu, warm = bench.get("train_tokens_per_s", {}), bench.get("mfu") or {}, bench.get("train_warm_up_seconds", {})
for name in ("ours", "ours_compiled", "marian"):
    if name not in tps:
        lines.append(f"| {name} | {bench.get('error', 'no result')} | | | |")
        continue
    ratio = f"{tps[name] / tps['marian']:.2f}×" if "marian" in tps else "–"
    pct = f"{100 * mfu[name]:.1f} %" if name in mfu else "–"
    lines.append(f"| {name} | {tps[name]:,.0f} | {ratio} | {pct} | {warm.get(name, 0):.1f} |")
lines += ["", "## bench_decode (batched, every output the same length; ours eager and compiled)", ""]
dec = load(out / "bench_decode.json") or {}
lines += ["| search | ours | ours compiled (warm-up s) | Marian |", "|---|---|---|---|"]
for key, label in (("decode_beam1_batched", "greedy"), ("decode_beam5_batched", "beam 5")):
    d = dec.get(key)
    if not d:
        lines.append(f"| {label} | {dec.get('error', 'no result')} | | |")
        continue
    cell = lambda n: f"{d[n]['sentences_per_s']:,.1f}" if n in d else "–"
    warm = f" ({d['ours_compiled']['warm_up_seconds']:.0f})" if "ours_compiled" in d else ""
    lines.append(f"| {label} | {cell('ours')} | {cell('ours_compiled')}{warm} | {cell('marian')} |")

lines += ["", "## profile (scripts/profile_step.py, one compiled training step)", ""]
prof = (out / "profile.txt").read_text().splitlines() if (out / "profile.txt").exists() else []
lines += [f"    {l}" for l in prof if l.startswith(("data and model", "one step", "loss")) or "warm-up" in l] \
    or ["    no result: see profile.txt"]

multi = "multi30k_multi" in (recipe.get("command") or "")
if "inputs" in recipe:
    lines += ["", "## recipe_train (GPU_CHECK_RECIPE=inputs: the presets of speech, graphs and images)", "",
              "| preset | wall s | epochs | updates | best dev | test |", "|---|---|---|---|---|---|"]
    for name, r in recipe["inputs"].items():
        test = (r.get("test") or {}).get("test") or {}
        shown = ", ".join(f"{k} {v:.4g}" for k, v in test.items() if isinstance(v, float) and k not in ("seconds",))
        lines.append(f"| {name} | {r['wall_s']} | {r['epochs']} | {r['global_step']} | {r['best_score']} | "
                     f"{shown or r['error'] or 'no test'} |")
    recipe["test_2016_flickr"] = {}
title = "experiment=multi30k_multi, en→{de,fr,cs}" if multi else "experiment=multi30k, de→en"
if "inputs" not in recipe:
    lines += ["", f"## recipe_train ({title}) and eval_greedy / eval_beam5", ""]
s = recipe.get("train_summary")
if "inputs" in recipe:
    pass
elif s:
    conf = recipe.get("config", {})
    lines.append(f"Trained {recipe['train_wall_s']} s wall ({conf.get('max_time')} cap): {s['epochs']} epochs "
                 f"of {conf.get('max_epochs')} configured, {s['global_step']} updates, best val/bleu "
                 f"{s['best_score']}, {s['parameters']:,} parameters.")
else:
    lines.append("No training summary: see log.txt.")
for name, m in recipe["test_2016_flickr"].items():
    for label, r in (m.items() if "bleu" not in m and "error" not in m else [("", m)]):
        lines.append(f"- test_2016_flickr{' ' + label if label else ''} {name}: BLEU {r.get('bleu', r.get('error'))}"
                     + (f" (lowercased {r['bleu_lowercase']})" if "bleu_lowercase" in r else ""))
lines += ["", "## gpu_tests (pytest -m gpu -q tests/gpu)", ""]
tests = (out / "gpu_tests.txt").read_text().strip().splitlines() if (out / "gpu_tests.txt").exists() else ["no output"]
lines += [f"    {l}" for l in tests if " in " in l and l.rstrip().endswith("s")
          and any(w in l for w in ("passed", "failed", "skipped", "error"))] or ["    no output"]
(out / "summary.md").write_text("\n".join(lines) + "\n")
PY
for f in env.txt profile.txt gpu_tests.txt; do  # a step that never ran still leaves its file
  [ -s "$out/$f" ] || echo "not run: see summary.md and log.txt" >"$out/$f"
done
failed=$(awk -F'\t' '$2 != 0 && $2 != "off"' "$steps_tsv" | wc -l)
say "done in ${SECONDS}s: $(wc -l <"$steps_tsv") steps, $failed failed; outputs in $out:"
ls -l "$out"
cat "$out/summary.md" 2>/dev/null
[ "$failed" = 0 ]
