#!/usr/bin/env bash
# Runs the GPU side of dfgnn on a machine with a CUDA device: builds, runs the GPU test label, the
# differential verification, compute-sanitizer, and the benchmarks, writing logs and reports to
# OUTDIR. Dev packages the machine lacks (sqlite3.h, Boost.Program_options, nlohmann-json,
# xxhash, zlib headers, Boost 1.74 headers to match the Program_options library) are taken from DEBS (.deb files fetched on a Debian machine with
#   ../shared/tools/device-deps.sh .devdeps && (cd .devdeps && apt-get download nlohmann-json3-dev libxxhash-dev zlib1g-dev libboost1.74-dev)
# ) and unpacked into a private prefix.
# Usage: tools/gpu-check.sh OUTDIR [SECTIONS] [DEBS=.devdeps] [DATASETS=.bench-data]
#   SECTIONS (space-separated, default "tests"):
#     tests     GPU tests (ctest -L gpu, without the long verify_quick) + compute-sanitizer memcheck,
#               racecheck and synccheck on the tiny corpus (SANITIZERS picks) and on the device graph build
#     quick     tests, plus verify_quick
#     verify    the full differential verification sweep (all schedules, real graphs)
#     real      verification on R-MAT and the real graphs
#     dispatch  host overhead per call and the fresh-process first launch (bench/dispatch.sh)
#     tune      tuning time, tuned vs exhaustive, nearest-fingerprint dispatch (bench/tune-quality.sh)
#     bench     kernel benchmarks (bench/run-benchmarks.sh)
#     targets   the R-MAT and hub-graph target benchmarks only
#     tuned     the slowest target again with a tuned schedule (dfgnn-tune, then dispatch from its database)
#     ab        the R-MAT targets timed with this tree and with .ab/base.tgz (an older commit) side by side
#     sweep     every candidate schedule of every solver on graphs of different shapes (bench/sweep-solvers.sh)
#     site      tunes the shared graphs into a site database to ship, and the fitting data (bench/tune-site.sh)
#     profile   Nsight Compute counters per kernel on R-MAT 2^20 (bench/profile-passes.sh)
#     python    the Python package on the GPU (bench/run-python-gpu.sh)
#   full = "quick verify bench" (the old "full").
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: tools/gpu-check.sh OUTDIR [quick|full]}
sections=" ${2:-tests} "
sections=${sections/ full / quick verify bench }
has() { [[ "$sections" == *" $1 "* ]]; }
debs=${3:-.devdeps}
datasets=${4:-.bench-data}
mkdir -p "$out"
prefix=/opt/dfgnn-deps
if [ -d "$debs" ]; then
  mkdir -p $prefix
  for f in "$debs"/*.deb; do dpkg -x "$f" $prefix; done
fi
export LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
step() { echo "=== $* ($(date +%T))"; }

step configure
# Link the machine's own shared zlib (the Debian package ships only a non-PIC static archive).
zlib=$(ls /usr/lib/x86_64-linux-gnu/libz.so.1 /lib/x86_64-linux-gnu/libz.so.1 2>/dev/null | head -1)
# Where CMake finds the unpacked dependencies (also for the A/B section's second build).
deps=(-DCMAKE_PREFIX_PATH=$prefix/usr -DSQLite3_INCLUDE_DIR=$prefix/usr/include
      -DSQLite3_LIBRARY=$prefix/usr/lib/x86_64-linux-gnu/libsqlite3.so
      -DZLIB_INCLUDE_DIR=$prefix/usr/include -DZLIB_LIBRARY=$zlib
      -DBoost_DIR=$prefix/usr/lib/x86_64-linux-gnu/cmake/Boost-1.74.0
      "-DCMAKE_CXX_FLAGS=-isystem $prefix/usr/include")
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDFGNN_SANITIZE_TESTS=OFF "${deps[@]}" \
  > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
step build
cmake --build build-gpu -j "$(nproc)" --target dfgnn dfgnn_tests_gpu dfgnn-verify dfgnn-graph > "$out/build.log" 2>&1 \
  || { grep -E "error|Error" -A3 "$out/build.log" | head -40; exit 1; }
cmake --build build-gpu -j "$(nproc)" --target dfgnn-bench dfgnn-bench-dispatch dfgnn-tune dfgnn-db >> "$out/build.log" 2>&1 \
  || echo "a benchmark tool did not build (see build.log)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/device.txt" 2>&1

if has tests || has quick; then
  step "ctest -L gpu"
  exclude=(-E verify_quick); has quick && exclude=()
  ctest --test-dir build-gpu -L gpu -j 8 "${exclude[@]}" --output-on-failure --timeout 900 > "$out/ctest-gpu.log" 2>&1
  tail -4 "$out/ctest-gpu.log"; grep -E "Failed|\*\*\*" "$out/ctest-gpu.log" | head -20
  step "compute-sanitizer on the tiny corpus"
  read -r -a tools <<< "${SANITIZERS:-memcheck racecheck synccheck}"
  for tool in "${tools[@]}"; do
    limit=300; [ $tool = memcheck ] || limit=${SANITIZER_LIMIT:-150}
    timeout $limit compute-sanitizer --tool $tool --error-exitcode 9 build-gpu/tools/dfgnn-verify --tiny --repo . \
      --threads 16 > "$out/sanitizer-$tool.log" 2>&1
    echo "$tool exit $? : $(grep -E 'ERROR SUMMARY|cases:' "$out/sanitizer-$tool.log" | tr '\n' ' ')"
  done
  step "compute-sanitizer on the device graph build"
  for tool in memcheck synccheck; do
    timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 build-gpu/tests/dfgnn_tests_gpu \
      --gtest_filter='DeviceBuild.*:-DeviceBuild.FailedBuildsKeepNoDeviceMemory:DeviceBuild.OutOfMemoryIsReportedAndTheContextStaysUsable' > "$out/sanitizer-build-$tool.log" 2>&1
    echo "device build $tool exit $? : $(grep -E 'ERROR SUMMARY|PASSED|FAILED' "$out/sanitizer-build-$tool.log" | tr '\n' ' ')"
  done
fi
if has verify; then
  step "dfgnn-verify full"
  build-gpu/tools/dfgnn-verify --repo . --datasets "$datasets" --all-schedules --threads 16 \
    --report "$out/verify.md" > "$out/verify.log" 2>&1
  tail -3 "$out/verify.log"
fi
if has real; then
  step "dfgnn-verify on R-MAT and the real graphs"
  build-gpu/tools/dfgnn-verify --repo . --datasets "$datasets" --real --threads 16 \
    --report "$out/verify-real.md" > "$out/verify-real.log" 2>&1
  tail -3 "$out/verify-real.log"
fi
has dispatch && { step dispatch; bash bench/dispatch.sh build-gpu "$out" "$datasets"; }
has tune && { step tune; bash bench/tune-quality.sh build-gpu "$out" "$datasets"; }
has bench && { step benchmarks; bash bench/run-benchmarks.sh build-gpu "$out" "$datasets"; }
has targets && { step "benchmark targets"; bash bench/run-benchmarks.sh build-gpu "$out" "$datasets" targets; }
has tuned && { step "tuned target"; bash bench/run-benchmarks.sh build-gpu "$out" "$datasets" tuned; }
has ab && { step "A/B against .ab/base.tgz"; bash bench/ab-compare.sh .ab/base.tgz build-gpu "$out" -- "${deps[@]}"; }
has sweep && { step "solver sweeps"; bash bench/sweep-solvers.sh build-gpu "$out" "$datasets"; }
has site && { step "site database"; bash bench/tune-site.sh build-gpu "$out/site" "$datasets"; }
has profile && { step "ncu profile"; bash bench/profile-passes.sh build-gpu "$out"; }
if has python; then
  step python
  export CMAKE_ARGS="-DCMAKE_PREFIX_PATH=$prefix/usr -DSQLite3_INCLUDE_DIR=$prefix/usr/include \
-DSQLite3_LIBRARY=$prefix/usr/lib/x86_64-linux-gnu/libsqlite3.so -DZLIB_INCLUDE_DIR=$prefix/usr/include \
-DZLIB_LIBRARY=$zlib -DBoost_DIR=$prefix/usr/lib/x86_64-linux-gnu/cmake/Boost-1.74.0 \
-DCMAKE_CXX_FLAGS=-isystem\ $prefix/usr/include"
  bash bench/run-python-gpu.sh "$out" "$datasets"
fi
step done
