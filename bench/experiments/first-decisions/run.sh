#!/usr/bin/env bash
# Builds first_decisions.cpp against a CPU build's libdfgnn_internal.a and times a process's first
# decisions, ROUNDS fresh processes per case, the shipped winners files answering (see the .cpp).
# Usage, from the repository root after tools/setup.sh (BUILD, default build):
#   bash bench/experiments/first-decisions/run.sh ROUNDS GRAPH_DIR "MODEL HEADS DIM" [...]
#   e.g. LOOPS=1 GPU="NVIDIA H100 80GB HBM3" bash bench/experiments/first-decisions/run.sh 5 \
#          ../shared/datasets/pubmed "0 8 8" "2 4 64"
# Prints each case's median over the rounds (ms): the layers' open, the forward's decision, the backward's.
set -euo pipefail
cd "$(dirname "$0")/../../.."
build=${BUILD:-build}
rounds=$1 graph=$2; shift 2
exe=$build/first-decisions
g++ -std=c++20 -O2 -I runtime/include -I runtime/src -I db/src -I stats -I kernel_templates -I /usr/local/cuda/include \
  bench/experiments/first-decisions/first_decisions.cpp "$build/libdfgnn_internal.a" -o "$exe" \
  -L/usr/local/cuda/lib64 -lcudart_static -lsqlite3 -lspdlog -lfmt -lz -lxxhash -ldl -lpthread -lrt
export DFGNN_SHIPPED_DB=${DFGNN_SHIPPED_DB:-$PWD/data/tuning} DFGNN_LOG_LEVEL=${DFGNN_LOG_LEVEL:-error}
for config in "$@"; do
  for r in $(seq 1 "$rounds"); do "$exe" "$graph" $config; done |
    python3 -c "
import statistics, sys
rows = [dict(zip(l.split()[::2], map(float, l.split()[1::2]))) for l in sys.stdin if l.startswith('open')]
print('$config:', ', '.join(f'{k} {statistics.median(r[k] for r in rows):.2f}' for k in rows[0]), f'(median of {len(rows)})')"
done
