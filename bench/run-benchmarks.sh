#!/usr/bin/env bash
# Benchmarks on a GPU machine (called by tools/gpu-check.sh): fused ops vs the memory floor and
# the cuSPARSE baseline (dfgnn-bench), schedule sweeps that show the best schedule differs by
# graph, and dfgnn vs PyG layers (bench/pyg_compare.py). Writes JSON/Markdown/logs to OUTDIR.
# Usage: bench/run-benchmarks.sh BUILD_DIR OUTDIR DATASETS [targets|tuned]
#   (targets: R-MAT and hub targets only; tuned: only the tuned R-MAT target)
set -uo pipefail
build=${1:?build dir}; out=${2:?out dir}; data=${3:-.bench-data}; only=${4:-all}
bench=$build/tools/dfgnn-bench
common=(--warmup 10 --iters 50)
step() { echo "=== $* ($(date +%T))"; }

# Targets with tuning: the library's own answer for a graph is a tuned schedule, so the slowest
# target is also timed with dispatch reading a database that dfgnn-tune filled for it.
tuned_targets() {
  step "targets, tuned: R-MAT 2^20 Transformer H=4 D=64 (dfgnn-tune, then dispatch from its database)"
  local db=$out/targets.db
  rm -f "$db" "$db"-*
  $build/tools/dfgnn-tune --rmat 20 --model transformer --dtype float32 --heads 4 --dim 64 --direction both \
    --budget 40 --db "$db" --json "$out/tune-rmat20-gt-h4.json" > "$out/tune-rmat20-gt-h4.log" 2>&1
  echo "dfgnn-tune exit $?"; tail -6 "$out/tune-rmat20-gt-h4.log"
  $bench --rmat 20 --model transformer --dtype float32 --heads 4 --dim 64 --direction both --db "$db" "${common[@]}" \
    --json "$out/bench-rmat20-gt-h4-tuned.json" > "$out/bench-rmat20-gt-h4-tuned.txt" 2>&1
  tail -8 "$out/bench-rmat20-gt-h4-tuned.txt"
}
[ "$only" = tuned ] && { tuned_targets; exit 0; }

step "targets: R-MAT 2^20 (about 17M edges)"
$bench --rmat 20 --model transformer --dtype float32,bfloat16 --heads 1 --dim 128 --direction both "${common[@]}" \
  --json "$out/bench-rmat20-gt-h1.json" > "$out/bench-rmat20-gt-h1.txt" 2>&1; tail -12 "$out/bench-rmat20-gt-h1.txt"
$bench --rmat 20 --model transformer --dtype float32 --heads 4 --dim 64 --direction both "${common[@]}" \
  --json "$out/bench-rmat20-gt-h4.json" > "$out/bench-rmat20-gt-h4.txt" 2>&1; tail -8 "$out/bench-rmat20-gt-h4.txt"
$bench --rmat 20 --model gat --dtype float32 --heads 1 --dim 128 --direction both "${common[@]}" \
  --json "$out/bench-rmat20-gat.json" > "$out/bench-rmat20-gat.txt" 2>&1; tail -8 "$out/bench-rmat20-gat.txt"
step "targets: hub-heavy real graphs"
$bench --graph "$data/blogcatalog" --graph "$data/snap-email-Enron" --graph "$data/pubmed" --model transformer \
  --dtype float32 --heads 1 --dim 128 --direction both "${common[@]}" --json "$out/bench-real-gt.json" \
  > "$out/bench-real-gt.txt" 2>&1; tail -14 "$out/bench-real-gt.txt"
tuned_targets
[ "$only" = targets ] && exit 0
step "schedule sweeps (forward and backward): best schedule per graph"
$bench --hubs 200000,16,0,0 --graph "$data/blogcatalog" --graph "$data/tu-PROTEINS" --rmat 17 --model transformer \
  --dtype float32 --heads 1 --dim 128 --direction forward --schedules all --no-baseline --warmup 5 --iters 20 \
  --json "$out/bench-sweep-fwd.json" > "$out/bench-sweep-fwd.txt" 2>&1; grep -iE "best|fastest|default" "$out/bench-sweep-fwd.txt" | tail -12
$bench --hubs 200000,16,0,0 --graph "$data/blogcatalog" --graph "$data/tu-PROTEINS" --rmat 17 --model transformer \
  --dtype float32 --heads 1 --dim 128 --direction backward --schedules all --no-baseline --warmup 5 --iters 20 \
  --json "$out/bench-sweep-bwd.json" > "$out/bench-sweep-bwd.txt" 2>&1; grep -iE "best|fastest|default" "$out/bench-sweep-bwd.txt" | tail -12
step "PyG 2.8 comparison"
# pyg_compare.py runs the dfgnn package: the one bench/run-python-gpu.sh installs (gpu-check's python
# section; without it the step exits 3 saying so), or the one in DFGNN_PYTHON_SITE.
site=${DFGNN_PYTHON_SITE:-$PWD/build-gpu-python/site}
PYTHONUNBUFFERED=1 PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH} python3 bench/pyg_compare.py --graphs data/cora "$data/pubmed" \
  "$data/blogcatalog" --models gat gatv2 transformer agnn --dtypes float32 bfloat16 --heads 1 4 --dim 64 \
  --out "$out/pyg.json" --markdown "$out/pyg.md" > "$out/pyg.log" 2>&1; tail -30 "$out/pyg.log"
