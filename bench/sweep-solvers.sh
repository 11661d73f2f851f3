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
