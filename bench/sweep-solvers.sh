#!/usr/bin/env bash
# Times every candidate schedule of every solver (dfgnn-bench --schedules all) on graphs of different
# shapes, forward and backward, so the tables show which solver wins where and by how much.
# Usage: bench/sweep-solvers.sh BUILD_DIR OUTDIR DATASETS
set -uo pipefail
build=${1:?build dir}; out=${2:?out dir}; data=${3:-.bench-data}
bench=$build/tools/dfgnn-bench
common=(--no-baseline --warmup 3 --iters 20 --schedules all)
step() { echo "=== $* ($(date +%T))"; }
graphs=(--hubs 200000,16,0,0 --graph "$data/blogcatalog" --graph "$data/tu-PROTEINS" --graph "$data/amazon-photo"
        --graph "$data/pubmed" --rmat 17)
for dir in forward backward; do
  step "sweep: transformer H=1 D=128 $dir"
  $bench "${graphs[@]}" --model transformer --heads 1 --dim 128 --direction $dir "${common[@]}" \
    --json "$out/sweep-gt-$dir.json" > "$out/sweep-gt-$dir.txt" 2>&1
  grep -E "\*|default" "$out/sweep-gt-$dir.txt" | tail -16
done
step "sweep: GAT H=4 D=32 forward"
$bench "${graphs[@]}" --model gat --heads 4 --dim 32 --direction forward "${common[@]}" \
  --json "$out/sweep-gat-forward.json" > "$out/sweep-gat-forward.txt" 2>&1
grep -E "\*|default" "$out/sweep-gat-forward.txt" | tail -16
step "R-MAT 2^20: default dispatch against edge_balanced, Transformer H=1 D=128 and H=4 D=64, GAT H=1 D=128"
eb() { echo "default;edge_balanced:lanes=$1,groups=$2,vec=4,chunk=$((16 * $2));edge_balanced:lanes=$1,groups=$2,vec=4,chunk=$((64 * $2));edge_balanced:lanes=$1,groups=$((2 * $2)),vec=4,chunk=$((32 * $2))"; }
for spec in "transformer 1 128 32 8" "transformer 4 64 16 16" "gat 1 128 32 8"; do
  set -- $spec
  $bench --rmat 20 --model $1 --heads $2 --dim $3 --direction both --no-baseline --warmup 5 --iters 30 \
    --schedules "$(eb $4 $5)" --json "$out/sweep-rmat20-$1-h$2.json" > "$out/sweep-rmat20-$1-h$2.txt" 2>&1
  grep -E "^\*|default|best" "$out/sweep-rmat20-$1-h$2.txt" | tail -8
done
