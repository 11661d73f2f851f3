#!/usr/bin/env bash
# Tuner and dispatch quality on a GPU (called by tools/gpu-check.sh, section "tune"):
#  1. tuning time: Graph Transformer H=1 D=128 fp32, forward and backward, on R-MAT 2^20 (16M edges);
#  2. tunes a training set of graphs (real ones and R-MAT 2^18) into the same database;
#  3. one dfgnn-bench run times every candidate schedule (exhaustive) of tuned graphs and of graphs
#     that were not tuned, with dispatch reading that database: tuned (exact) and nearest-fingerprint
#     answers are compared with the exhaustive best measured side by side in that run.
# Usage: bench/tune-quality.sh BUILD_DIR OUTDIR DATASETS
set -uo pipefail
build=${1:?build dir}; out=${2:?out dir}; data=${3:-.bench-data}
tools=$build/tools
db=$out/train.db
rm -f "$db" "$db"-*
op=(--model transformer --dtype float32 --heads 1 --dim 128 --direction both)
step() { echo "=== $* ($(date +%T))"; }

step "tuning time: R-MAT 2^20, forward and backward"
start=$(date +%s.%N)
$tools/dfgnn-tune --rmat 20 "${op[@]}" --budget 24 --db "$db" --json "$out/tune-rmat20.json" > "$out/tune-rmat20.log" 2>&1
code=$?; echo "dfgnn-tune exit $code, wall $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s (graph generation and fingerprint included)"
tail -25 "$out/tune-rmat20.log"

step "tuning the training set"
tuned=(--graph data/cora --graph "$data/pubmed" --graph "$data/blogcatalog" --graph "$data/snap-email-Enron"
       --graph "$data/tu-PROTEINS" --rmat 18)
$tools/dfgnn-tune "${tuned[@]}" "${op[@]}" --budget 6 --db "$db" --json "$out/tune-set.json" > "$out/tune-set.log" 2>&1
echo "dfgnn-tune exit $?"

step "exhaustive sweep with dispatch from the database (tuned and held-out graphs)"
held_out=(--graph "$data/citeseer" --graph "$data/amazon-photo" --graph "$data/coauthor-cs" --graph "$data/lastfm-asia"
          --rmat 19)
$tools/dfgnn-bench "${tuned[@]}" --rmat 20 "${held_out[@]}" "${op[@]}" --schedules all --no-baseline --warmup 3 \
  --iters 15 --db "$db" --json "$out/tune-sweep.json" > "$out/tune-sweep.log" 2>&1
echo "dfgnn-bench exit $?"
$tools/dfgnn-db --db "$db" verify > "$out/tune-db-verify.log" 2>&1; echo "dfgnn-db verify exit $?"
python3 bench/summarize_tuning.py "$out/tune-rmat20.json" "$out/tune-set.json" "$out/tune-sweep.json" \
  --markdown "$out/tuning.md"
