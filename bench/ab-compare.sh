#!/usr/bin/env bash
# A/B timing of two versions of the library in one GPU run: builds dfgnn-bench from a base tree
# (a `git archive` tarball of the older commit) beside the current build, then times the same
# configurations with each, alternating which goes first, and prints new/base ratios.
# Usage: bench/ab-compare.sh BASE_TGZ NEW_BUILD_DIR OUTDIR -- CMAKE_ARGS...
#   (tools/gpu-check.sh, section "ab", passes its dependency prefix as CMAKE_ARGS)
set -uo pipefail
base_tgz=${1:?base tarball}; new_build=${2:?new build dir}; out=${3:?out dir}; shift 3
[ "${1:-}" = "--" ] && shift
step() { echo "=== $* ($(date +%T))"; }
base=/tmp/dfgnn-ab-base
rm -rf "$base"; mkdir -p "$base"; tar xzf "$base_tgz" -C "$base"
step "build base"
cmake -S "$base" -B "$base/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDFGNN_SANITIZE_TESTS=OFF "$@" \
  > "$out/ab-base-configure.log" 2>&1 && cmake --build "$base/build" -j "$(nproc)" --target dfgnn-bench \
  > "$out/ab-base-build.log" 2>&1 || { tail -20 "$out/ab-base-build.log"; exit 1; }
common=(--warmup 10 --iters 50 --no-baseline --rmat 20)
configs=("--model transformer --heads 1 --dim 128 --direction both"
         "--model transformer --heads 4 --dim 64 --direction both"
         "--model gat --heads 1 --dim 128 --direction both")
k=0
for c in "${configs[@]}"; do
  k=$((k + 1))
  order=(base new); [ $((k % 2)) = 0 ] && order=(new base)
  for v in "${order[@]}"; do
    dir=$new_build; [ $v = base ] && dir=$base/build
    step "$v: $c"
    $dir/tools/dfgnn-bench $c "${common[@]}" --json "$out/ab-$v-$k.json" > "$out/ab-$v-$k.txt" 2>&1 || tail -5 "$out/ab-$v-$k.txt"
  done
done
python3 "$(dirname "$0")/ab_table.py" "$out" $k | tee "$out/ab.md"
