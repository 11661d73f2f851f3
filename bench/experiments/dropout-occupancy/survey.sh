#!/usr/bin/env bash
# The CPU side of the dropout-occupancy question, no GPU needed: every kernel of the zoo's default schedules on
# Cora compiled without and with dropout, as `dfgnn-nvrtc-levers --resources` compiles them (unheld: it calls
# NVRTC directly, not the runtime's module cache), and the kernels whose resident blocks per SM dropout lowers.
# Usage: bash bench/experiments/dropout-occupancy/survey.sh BUILD_DIR
set -euo pipefail
build=${1:?usage: survey.sh BUILD_DIR}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for p in 0 0.6; do
  "$build/tools/dfgnn-nvrtc-levers" --resources --per-kind 0 --variants baseline --dropout $p |
    sed -n 's/^  baseline *occupancy \([^:]*\): \([0-9]*\) registers, [0-9]* threads, \([0-9]*\) blocks.*/\1 \2 \3/p' |
    sort -u > "$work/p$p"
done
# A dropout kernel's name differs from its sibling's only in Geo's last argument (Lb1E for Lb0E).
sed 's/Lb1EEENS_/Lb0EEENS_/' "$work/p0.6" | sort -u > "$work/p6"
join "$work/p0" "$work/p6" | awk '$3 > 0 { n++; if ($5 < $3) { worse++; printf "%.2f of the blocks, %d -> %d registers: %s\n", $5 / $3, $2, $4, $1 } }
  END { printf "%d of %d kernels lose resident blocks with dropout compiled in\n", worse, n }'
