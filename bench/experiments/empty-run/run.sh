#!/usr/bin/env bash
# An experiment kit (not part of the library): how long a run of rows without edges an edge_balanced
# row group may hold (solvers::kMaxEmptyRowsInGroup, 4 since 2026-12-06; R-MAT 2^20's Graph Transformer
# backward has been 3-7% slower than 0cbcf60 since, bench/results/2026-12-07-h100.md). limit.patch, applied
# to the working tree and never committed, reads the limit per process from DFGNN_EXP_EMPTY_RUN (a number
# of rows, "piece": the block's edges over its lane groups, "none": no cut), so one build times every
# variant, interleaved, on bench/ab-empty-rows.txt's cases with dfgnn-bench (CUDA events).
# Result (bench/results/2026-12-07c-h100.md): a longer limit wins 1.1-1.4% on R-MAT 2^20 and loses up to
# 1.7x on batched small graphs (tu-ENZYMES); the limit stays 4.
# Usage, on a device, from the repository root after `git apply bench/experiments/empty-run/limit.patch`:
#   AB_CASES=/dev/null T_VERIFY=1 bash bench/shapes-gpu.sh OUT/q quick    # builds build-gpu's dfgnn-bench
#   bash bench/experiments/empty-run/run.sh OUT/e ROUNDS 4 16 piece none  # the first variant is the base
#   (CASES=FILE: other cases, in bench/ab-empty-rows.txt's format)
# Then bench/experiments/empty-run/table.py OUT/e 4 16 piece none prints the medians and the ratios.
set -uo pipefail
out=$1 rounds=$2; shift 2; variants=("$@")
mkdir -p "$out"
datasets=.bench-data
export LD_LIBRARY_PATH=/opt/dfgnn-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
k=0
while IFS='|' read -r graph config sched; do
  case $graph in ''|'#'*) continue ;; esac
  graph=$(echo $graph) sched=$(echo $sched)
  case $graph in --*) ;; *) graph="--graph $datasets/$graph" ;; esac
  read -r model heads dim <<< "$config"
  k=$((k + 1))
  echo "$k	$graph	$model $heads $dim	$sched" >> "$out/cases.tsv"
done < "${CASES:-bench/ab-empty-rows.txt}"
for r in $(seq 1 "$rounds"); do
  while IFS=$'\t' read -r k graph config sched; do
    read -r model heads dim <<< "$config"
    n=${#variants[@]}; shift_by=$(( (k + r) % n ))
    for i in $(seq 0 $((n - 1))); do
      v=${variants[$(( (i + shift_by) % n ))]}
      DFGNN_EXP_EMPTY_RUN=$v timeout 60 build-gpu/tools/dfgnn-bench $graph --model $model --heads $heads --dim $dim \
        --direction both --schedules "$sched" --warmup 10 --iters ${ITERS:-100} --no-baseline \
        --json "$out/r$r-$k-$v.json" > "$out/r$r-$k-$v.txt" 2>&1 || { echo "case $k $v failed"; tail -2 "$out/r$r-$k-$v.txt"; }
    done
  done < "$out/cases.tsv"
  echo "round $r done at $SECONDS s"
done
python3 bench/experiments/empty-run/table.py "$out" "${variants[@]}" | tee "$out/table.md"
