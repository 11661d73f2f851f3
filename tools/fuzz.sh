#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan, in their own build directory),
# replays the committed regression inputs, then fuzzes each target from its committed seed corpus.
# Usage: tools/fuzz.sh [SECONDS_PER_TARGET]   (default 60; 0 = build and replay regressions only)
# Environment: DFGNN_FUZZ_TOTAL_SECONDS=S splits S seconds evenly across the targets instead (CI);
#   DFGNN_FUZZ_BUILD_DIR (default build-fuzz); DFGNN_FUZZ_TARGETS="fuzz_schedule ..." (default all);
#   DFGNN_FUZZ_REPORT=FILE appends a markdown table of executions and coverage per target;
#   DFGNN_FUZZ_SEED=N fixes libFuzzer's seed (default: a random one, to explore).
# New corpus entries go to $build/corpus/<target> (the committed seeds are never modified); a crash
# is saved under $build/artifacts/<target>/ and the script fails, printing the command to replay it.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${DFGNN_FUZZ_BUILD_DIR:-build-fuzz}
export PATH=/usr/local/cuda/bin:$PATH

command -v clang++ >/dev/null || { echo "fuzz: clang++ not found (Debian: apt-get install clang libclang-rt-14-dev)" >&2; exit 1; }
if [ ! -f "$build/build.ninja" ]; then
  # Debug: assertions on (the fuzz flags add -O1 after the build type's -O0).
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DDFGNN_BUILD_FUZZERS=ON \
    -DDFGNN_BUILD_TESTS=OFF -DDFGNN_BUILD_TOOLS=OFF ${DFGNN_CMAKE_ARGS:-} >/dev/null
fi
cmake --build "$build" --target dfgnn_fuzzers -j "$(nproc)"

targets=(${DFGNN_FUZZ_TARGETS:-fuzz_graph_file fuzz_graph_arrays fuzz_schedule fuzz_fingerprint fuzz_db_open})
seconds=${1:-60}
if [ -n "${DFGNN_FUZZ_TOTAL_SECONDS:-}" ]; then seconds=$(( (DFGNN_FUZZ_TOTAL_SECONDS + ${#targets[@]} - 1) / ${#targets[@]} )); fi

# protect_shadow_gap=0: CUDA's runtime maps memory where ASan keeps its gap (never called here, but linked).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:protect_shadow_gap=0:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export DFGNN_LOG_LEVEL=${DFGNN_LOG_LEVEL:-off}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dfgnn-fuzz.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export TMPDIR=$tmp
# 2 GiB of RSS and 1 GiB per allocation: a larger request from a few bytes of input is a defect.
# A target's tests/fuzz/<target>.options (libFuzzer flags, one line) comes after these and wins.
limits=(-rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=20)
[ -n "${DFGNN_FUZZ_SEED:-}" ] && limits+=(-seed="$DFGNN_FUZZ_SEED")

failed=()
report=()
for t in "${targets[@]}"; do
  exe=$build/tests/fuzz/$t
  flags=("${limits[@]}")
  [ -f "tests/fuzz/$t.options" ] && read -r -a extra <"tests/fuzz/$t.options" && flags+=("${extra[@]}")
  # Regressions: every input that once crashed must now pass (each is run once).
  regressions=(tests/fuzz/regressions/$t/*)
  if [ -e "${regressions[0]}" ]; then
    if ! "$exe" "${flags[@]}" "${regressions[@]}" >"$tmp/$t.replay.log" 2>&1; then
      tail -40 "$tmp/$t.replay.log" >&2
      echo "fuzz: $t fails a regression input under tests/fuzz/regressions/$t" >&2
      failed+=("$t (regression)")
      continue
    fi
    echo "fuzz: $t: ${#regressions[@]} regression inputs pass"
  fi
  [ "$seconds" -gt 0 ] || continue
  mkdir -p "$build/corpus/$t" "$build/artifacts/$t"
  log=$build/artifacts/$t.log
  rc=0
  "$exe" "${flags[@]}" -max_total_time="$seconds" -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$t/" "$build/corpus/$t" "tests/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  # The last status line ("#N DONE cov: C ft: F corp: ...") and the final stats.
  status_line=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$status_line")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$status_line")
  corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9a-zA-Z]*\).*/\1/p' <<<"$status_line")
  echo "fuzz: $t: ${seconds}s, ${execs:-?} executions, cov ${cov:-?}, ft ${ft:-?}, corpus ${corp:-?}, rc $rc"
  report+=("| $t | $seconds | ${execs:-?} | ${cov:-?} | ${ft:-?} | ${corp:-?} | $([ "$rc" = 0 ] && echo ok || echo CRASH) |")
  if [ "$rc" != 0 ]; then
    grep -E 'ERROR|PROPERTY VIOLATED|SUMMARY|Test unit written' "$log" | head -20 >&2 || true
    echo "fuzz: $t failed (log $log); replay with: $exe $build/artifacts/$t/<crash-file>" >&2
    failed+=("$t")
  fi
done

if [ -n "${DFGNN_FUZZ_REPORT:-}" ] && ((${#report[@]})); then
  { echo "| target | seconds | executions | cov | ft | corpus (units/size) | result |"
    echo "|---|---|---|---|---|---|---|"
    printf '%s\n' "${report[@]}"; } >>"$DFGNN_FUZZ_REPORT"
fi
if ((${#failed[@]})); then echo "fuzz: FAILED: ${failed[*]}" >&2; exit 1; fi
echo "fuzz: all targets passed"
