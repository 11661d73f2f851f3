#!/usr/bin/env bash
# NVRTC compile time per module of default dispatch, per compile-time lever (issue 25, "fast
# compiles"): the two runs behind bench/results/2026-12-05-nvrtc-levers.md. Needs NVRTC, not a GPU.
#
# Usage: bench/nvrtc-levers.sh BUILD_DIR OUT_DIR
#   BUILD_DIR holds tools/dfgnn-nvrtc-levers (ninja -C BUILD_DIR dfgnn-nvrtc-levers).
#   Writes OUT_DIR/levers.json (every lever, 3 reps, with NVRTC's phase split) and OUT_DIR/focus.json
#   (the levers that keep the machine code, 4 reps, plus the fixed per-program cost and 2 threads
#   against 1). The sample: 4 modules of each kind (forward, backward row, backward column, helpers)
#   spread over the zoo, fp32 and bf16, on Cora with self-loops. About 15 minutes on 2 cores.
set -euo pipefail
build=${1:?usage: bench/nvrtc-levers.sh BUILD_DIR OUT_DIR}
out=${2:?usage: bench/nvrtc-levers.sh BUILD_DIR OUT_DIR}
tool=$build/tools/dfgnn-nvrtc-levers
[ -x "$tool" ] || { echo "nvrtc-levers: $tool not built" >&2; exit 1; }
cd "$(dirname "$0")/.."
mkdir -p "$out"
"$tool" --per-kind 4 --reps 3 --phases --json "$out/levers.json" --variants \
  lineinfo,minimal,extra-vec,split-compile,ptxas-O2,ptxas-O1,fast-compile-min,fast-compile-max,header,header-pch,no-default-device,fmad-false
"$tool" --per-kind 4 --reps 4 --overheads --parallel 2 --json "$out/focus.json" \
  --variants minimal,lineinfo,header-pch
