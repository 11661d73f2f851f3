#!/usr/bin/env bash
# After run.sh on the same warm machine: dfgnn-verify --tiny (every solver and lane mapping against the
# float64 reference, the held dropout kernels among them), then compute-sanitizer memcheck of PART.
# Usage (device, repository root): bash bench/experiments/dropout-occupancy/check.sh OUTDIR
set -uo pipefail
out=${1:?outdir}
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH LD_LIBRARY_PATH=/opt/dfgnn-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
cmake --build build-gpu -j "$(nproc)" --target dfgnn-verify > "$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
timeout "${T_VERIFY:-220}" build-gpu/tools/dfgnn-verify --tiny --repo . --threads 16 > "$out/verify-tiny.log" 2>&1
echo "dfgnn-verify --tiny exit $?: $(grep -E 'cases:' "$out/verify-tiny.log") ($SECONDS s)"
grep FAIL "$out/verify-tiny.log" | head -10
PART=${PART:-1/4} MEMCHECK_SECONDS=${MEMCHECK_SECONDS:-240} bash bench/shapes-gpu.sh "$out/memcheck" memcheck
