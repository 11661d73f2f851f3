#!/usr/bin/env bash
# A/B timing of two versions of the library in one GPU run: builds dfgnn-bench from a base tree
# (a `git archive` tarball of the older commit) beside the current build, then times the same
# configurations with each, alternating which goes first, and prints new/base ratios. Then, for the
# refactors that must not change results (issue 13): dfgnn-verify --tiny with each (the worst error
# against the float64 reference per graph, model, dtype and direction, which is identical when the
# outputs are), and the database and dispatch path with each: dfgnn-tune of Cora into a database of
# its own, the winners, and dfgnn-bench-dispatch's host time per call and fresh-process first launch.
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
  > "$out/ab-base-configure.log" 2>&1 && cmake --build "$base/build" -j "$(nproc)" --target dfgnn-bench dfgnn-verify dfgnn-tune dfgnn-bench-dispatch dfgnn-db \
  > "$out/ab-base-build.log" 2>&1 || { tail -20 "$out/ab-base-build.log"; exit 1; }
common=(--warmup 10 --iters 50 --no-baseline --rmat 20)
# Each configuration times dispatch's choice and, with AB_SCHEDULES, named schedules as well (';'-separated,
# one list for all configurations; {W} stands for the configuration's lanes): when the two versions' default
# rules differ, the same schedules side by side are what show a change of speed.
configs=("--model transformer --heads 1 --dim 128 --direction both"
         "--model transformer --heads 4 --dim 64 --direction both"
         "--model gat --heads 1 --dim 128 --direction both")
if [ -n "${AB_SCHEDULES:-}" ]; then
  lanes=(32 16 32)
  for i in 0 1 2; do configs[$i]="${configs[$i]} --schedules default;${AB_SCHEDULES//\{W\}/${lanes[$i]}}"; done
fi
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
[ -n "${AB_ONLY_TIMES:-}" ] && exit 0

# results: the verify reports' worst errors must be equal line for line
root=$(cd "$(dirname "$0")/.." && pwd)
for v in base new; do
  dir=$new_build src=$root; [ $v = base ] && dir=$base/build src=$base
  step "$v: dfgnn-verify --tiny"
  # DFGNN_DEFAULT_RULE=hand: verify pairs each backward candidate with the default of the other pass,
  # so both versions must default alike (the base knows only the hand rule and ignores the variable)
  DFGNN_DEFAULT_RULE=hand $dir/tools/dfgnn-verify --tiny --repo "$src" --report "$out/ab-verify-$v.md" \
    > "$out/ab-verify-$v.txt" 2>&1
  echo "exit $?: $(tail -1 "$out/ab-verify-$v.txt")"
done
if diff <(grep '^| ' "$out/ab-verify-base.md") <(grep '^| ' "$out/ab-verify-new.md") > "$out/ab-verify.diff"; then
  echo "verify: the worst-error tables of base and new are identical ($(grep -c '^| ' "$out/ab-verify-new.md") lines)" | tee -a "$out/ab.md"
else
  echo "verify: the worst-error tables differ ($(grep -c '^[<>]' "$out/ab-verify.diff") lines, ab-verify.diff)" | tee -a "$out/ab.md"
fi

# the database and dispatch: each version tunes Cora into its own database, then dispatches from it
for v in base new; do
  dir=$new_build src=$root; [ $v = base ] && dir=$base/build src=$base
  db=$out/ab-$v.db; rm -f "$db"
  step "$v: dfgnn-tune + dfgnn-bench-dispatch"
  $dir/tools/dfgnn-tune "$src/data/cora" --self-loops --model transformer,gat --direction both --budget 4 --db "$db" \
    --json "$out/ab-tune-$v.json" > "$out/ab-tune-$v.txt" 2>&1 || tail -3 "$out/ab-tune-$v.txt"
  $dir/tools/dfgnn-db --db "$db" list > "$out/ab-db-$v.txt" 2>&1
  for r in 1 2 3; do
    $dir/tools/dfgnn-bench-dispatch first-launch --graph "$src/data/cora" --self-loops --dim 128 --db "$db" \
      --json "$out/ab-first-$v-$r.json" > "$out/ab-first-$v-$r.txt" 2>&1 || tail -3 "$out/ab-first-$v-$r.txt"
  done
  $dir/tools/dfgnn-bench-dispatch overhead --graph "$src/data/cora" --self-loops --dim 128 --db "$db" \
    --json "$out/ab-overhead-$v.json" > "$out/ab-overhead-$v.txt" 2>&1 || tail -3 "$out/ab-overhead-$v.txt"
done
python3 "$(dirname "$0")/ab_table.py" --dispatch "$out" | tee -a "$out/ab.md"
