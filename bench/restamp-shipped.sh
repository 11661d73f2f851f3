#!/usr/bin/env bash
# The shipped files after a kernel change that leaves the tuned kernels' machine code as it was
# (attention dropout's own kernels, a comment): the modules file compiled again by this build, and
# the winners files re-stamped with this build's kernel source once dfgnn-db restamp has found every
# module without dropout of the committed modules file unchanged in the new one. Needs NVRTC, not a
# GPU. A change that moves any tuned kernel's code is refused: tune again (bench/tune-site.sh).
#
# Usage: bench/restamp-shipped.sh BUILD_DIR [DATASETS]   (DATASETS as bench/ship-modules.sh takes it)
#   MODULES=FILE: a modules file this build's ship-modules.sh already wrote, instead of compiling one
# Writes data/tuning/sm<ARCH>-modules.db and each data/tuning/sm<ARCH>*.db winners file in place,
# all or none of them.
set -euo pipefail
build=${1:?usage: bench/restamp-shipped.sh BUILD_DIR [DATASETS]}
data=${2:-../shared/datasets}
arch=${ARCH:-90}
here=$(cd "$(dirname "$0")" && pwd)
tuning=$here/../data/tuning
old=$tuning/sm$arch-modules.db
db=$build/tools/dfgnn-db
[ -x "$db" ] || { echo "restamp-shipped: $db not built" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -n "${MODULES:-}" ]; then cp "$MODULES" "$work/modules.db"
else bash "$here/ship-modules.sh" "$build" "$work/modules.db" "$data"; fi
winners=()
for f in "$tuning/sm$arch"*.db; do [ "$f" = "$old" ] || winners+=("$f"); done
[ ${#winners[@]} -gt 0 ] || { echo "restamp-shipped: no winners file beside $old" >&2; exit 1; }
for f in "${winners[@]}"; do
  name=$(basename "$f")
  cp "$f" "$work/user-$name"
  "$db" --db "$work/user-$name" restamp "$old" "$work/modules.db"
  # A shipped file is a compacted snapshot in rollback-journal mode (it opens immutable): export one.
  "$db" --db "$work/user-$name" export "$work/$name"
  "$db" --db "$work/$name" verify
done
for f in "${winners[@]}"; do cp "$work/$(basename "$f")" "$f"; done
cp "$work/modules.db" "$old"
ls -l "$tuning"
