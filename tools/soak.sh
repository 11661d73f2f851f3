#!/usr/bin/env bash
# Soak test of the tuning database (issue 15; long: not in CI's default run).
# For MINUTES (default 10), DFGNN_SOAK_PROCS (default 16) soak_worker processes tune on fake timings
# and put, merge, export and read one shared database on a small tmpfs, while this script SIGKILLs
# a random worker every 0.3-1.5 s (and restarts it) and a filler fills the filesystem up (ENOSPC)
# for a second or two every few seconds. Then a final merge + export without faults, and the checks:
#   dfgnn-db verify passes on the shared database and the export; every run a worker logged as
#   committed (logged only after put_result returned) is in the shared database; no temp files
#   are left; no lock error reached a caller.
# The per-file atomicity case (issue 26): workers also write files of 8-24 new runs and merge each
# into the shared database in a child process that they SIGKILL a random time after the merge
# began. The shared database must hold all of each such file's runs or none, and all of them when
# the merge returned.
# Usage: sudo tools/soak.sh [MINUTES]   (root: it mounts the tmpfs). Env: DFGNN_BUILD_DIR (build),
#   DFGNN_SOAK_FS_MB (256), DFGNN_SOAK_REPORT=FILE (writes the markdown report there).
# ctest -C long -L long runs it too.
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-10}
procs=${DFGNN_SOAK_PROCS:-16}
fs_mb=${DFGNN_SOAK_FS_MB:-256}
build=${DFGNN_BUILD_DIR:-build}
[ "$(id -u)" = 0 ] || { echo "soak: needs root to mount a tmpfs (run it with sudo)" >&2; exit 1; }
cmake --build "$build" --target soak_worker dfgnn-db >/dev/null
worker=$build/tests/soak/soak_worker
dbtool=$build/tools/dfgnn-db

work=$(mktemp -d /tmp/dfgnn-soak.XXXXXX)
fs=$work/fs
logs=$work/logs
mkdir -p "$fs" "$logs"
mount -t tmpfs -o size="${fs_mb}m" dfgnn-soak "$fs"
pids=()
filler=""
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  [ -n "$filler" ] && kill "$filler" 2>/dev/null || true
  wait 2>/dev/null || true
  umount "$fs" 2>/dev/null || true
  [ -n "${DFGNN_SOAK_KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
echo "soak: $procs workers for $minutes min on a ${fs_mb} MiB tmpfs at $fs (logs in $logs)"

export DFGNN_LOG_LEVEL=off
end=$(( $(date +%s) + minutes * 60 ))
start_worker() {  # id
  local left=$(( end - $(date +%s) ))
  nice -n 10 "$worker" work "$fs" "$1" "$logs/worker-$1.log" "$RANDOM$RANDOM" "$left" 2>>"$logs/worker-$1.stderr" &
  pids[$1]=$!
}
for ((i = 0; i < procs; i++)); do start_worker "$i"; done

# The filler: takes all free space for 0.5-2 s, every 2-6 s.
(
  while :; do
    sleep "$(( 2 + RANDOM % 5 ))"
    dd if=/dev/zero of="$fs/ballast" bs=64k 2>/dev/null || true
    echo fill >>"$logs/filler.log"
    sleep "0.$(( 5 + RANDOM % 5 ))"; (( RANDOM % 2 )) && sleep 1
    rm -f "$fs/ballast"
  done
) &
filler=$!

kills=0
while (( $(date +%s) < end - 2 )); do
  sleep "$(( RANDOM % 2 )).$(( 3 + RANDOM % 7 ))"
  i=$(( RANDOM % procs ))
  if kill -9 "${pids[$i]}" 2>/dev/null; then
    wait "${pids[$i]}" 2>/dev/null || true
    kills=$((kills + 1))
    (( $(date +%s) < end - 1 )) && start_worker "$i"
  fi
done
for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
pids=()
kill "$filler" 2>/dev/null || true
wait "$filler" 2>/dev/null || true
filler=""
rm -f "$fs/ballast"

# Final merge of every private database and export, without faults.
final_ok=yes
"$worker" final "$fs" "$logs/final.log" || final_ok=no
verify_ok=yes
"$dbtool" --db "$fs/shared.db" verify >"$logs/verify-shared.txt" 2>&1 || verify_ok=no
"$dbtool" --site "$fs/export.db" verify >"$logs/verify-export.txt" 2>&1 || verify_ok=no
# Temp files of exports (OUT.tmp-*, and their SQLite journals); anything else that is not a database or
# its WAL/shared-memory file is listed too.
temp_files=$(find "$fs" -name '*.tmp-*' | wc -l)
temp_examples=$(find "$fs" -name '*.tmp-*' -printf '%f\n' | sort | head -4 | tr '\n' ' ')
leftovers=$(find "$fs" -type f ! -name '*.tmp-*' ! -name '*.db' ! -name '*.db-wal' ! -name '*.db-shm' -printf '%f\n' |
            sort | tr '\n' ' ')

# Every logged commit must be in the shared database (private ones arrived through the merges).
counts=$(python3 - "$fs/shared.db" "$logs" 2>"$logs/problems.txt" <<'PY'
import glob, os, sqlite3, sys
db, logs = sys.argv[1], sys.argv[2]
present = {r[0] for r in sqlite3.connect(f"file:{db}?mode=ro", uri=True).execute("SELECT uuid FROM runs")}
c = dict(commits=0, shared=0, private=0, merges=0, exports=0, reads=0, enospc=0, enospc_tune=0, enospc_merge=0,
         enospc_export=0, enospc_read=0, enospc_atomic=0, lockerrors=0, errors=0, lost=0)
lost, errors = [], []
batches, outcome = {}, {}  # the atomicity case: file -> its run ids; file -> done / killed / failed
for path in glob.glob(os.path.join(logs, "worker-*.log")):
    for line in open(path):
        w = line.split()
        if not w: continue
        if w[0] == "commit":
            c["commits"] += 1; c[w[1]] += 1
            if w[2] not in present: lost.append(w[2])
        elif w[0] == "merge": c["merges"] += 1
        elif w[0] == "export": c["exports"] += 1
        elif w[0] == "read": c["reads"] += 1
        elif w[0] == "enospc": c["enospc"] += 1; k = "enospc_" + w[1]; c[k] = c.get(k, 0) + 1
        elif w[0] == "lockerror": c["lockerrors"] += 1; errors.append(line.strip())
        elif w[0] == "error": c["errors"] += 1; errors.append(line.strip())
        elif w[0] == "batch": batches[w[1]] = w[2:]
        elif w[0] == "atomic": outcome[w[2]] = w[1]
# All of a file's runs or none; all once its merge returned. A file without an outcome lost its
# worker (and with it the merge) to the script's SIGKILL.
a = dict(atomic_files=len(batches), atomic_done=0, atomic_killed=0, atomic_killed_all=0, atomic_killed_none=0,
         atomic_failed=0, atomic_cut=0, atomic_partial=0)
partial = []
for name, uuids in batches.items():
    held = sum(u in present for u in uuids)
    how = outcome.get(name, "cut")
    a["atomic_" + how] += 1
    if how == "killed" and held == len(uuids): a["atomic_killed_all"] += 1
    if how == "killed" and held == 0: a["atomic_killed_none"] += 1
    if 0 < held < len(uuids):
        a["atomic_partial"] += 1; partial.append(f"{name} ({how}): {held} of {len(uuids)} runs in the shared database")
    elif how == "done" and held == 0:
        lost.extend(uuids)
c.update(a)
c["lost"] = len(lost)
c["runs_in_db"] = len(present)
c["results_in_db"] = sqlite3.connect(f"file:{db}?mode=ro", uri=True).execute("SELECT COUNT(*) FROM results").fetchone()[0]
print(" ".join(f"{k}={v}" for k, v in c.items()))
for l in lost[:10]: print("LOST", l, file=sys.stderr)
for e in sorted(set(errors))[:20]: print("ERROR", e[:300], file=sys.stderr)
for p in partial[:10]: print("PARTIAL", p, file=sys.stderr)
PY
)
eval "$counts"
fills=$(wc -l <"$logs/filler.log" 2>/dev/null || echo 0)

ok=yes
[ "$final_ok" = yes ] && [ "$verify_ok" = yes ] && [ "$lost" = 0 ] && [ "$lockerrors" = 0 ] && [ "$temp_files" = 0 ] && [ "$atomic_partial" = 0 ] || ok=no
report=$(cat <<MD
| quantity | value |
|---|---|
| duration | $minutes min |
| processes | $procs |
| SIGKILLs | $kills |
| filesystem fills (tmpfs ${fs_mb} MiB) | $fills |
| commits logged (shared / private) | $commits ($shared / $private) |
| runs in the final database | $runs_in_db ($results_in_db results) |
| merges | $merges |
| exports | $exports |
| reads of the export | $reads |
| ENOSPC events reported to a caller (tune / merge / export / read / atomicity-case file) | $enospc ($enospc_tune / $enospc_merge / $enospc_export / $enospc_read / $enospc_atomic) |
| atomicity case: files / merges returned / failed (an error, logged) / cut with their worker | $atomic_files / $atomic_done / $atomic_failed / $atomic_cut |
| atomicity case: merges SIGKILLed after they began (target then held all / none) | $atomic_killed ($atomic_killed_all / $atomic_killed_none) |
| atomicity case: files with some but not all runs in the target | $atomic_partial |
| lock errors reported to a caller | $lockerrors |
| other errors reported to a caller | $errors |
| committed rows lost | $lost |
| final merge + export | $final_ok |
| dfgnn-db verify (shared, export) | $verify_ok |
| temp files left | $temp_files${temp_examples:+ (e.g. $temp_examples)} |
| other files left | ${leftovers:-none} |
| result | $([ $ok = yes ] && echo PASS || echo FAIL) |
MD
)
if [ -s "$logs/problems.txt" ]; then  # the lost run ids and distinct error lines, for the report
  report+=$'\n\nLost runs, distinct errors and partly merged files (at most 10, 20 and 10):\n\n```\n'"$(cat "$logs/problems.txt")"$'\n```'
fi
echo "$report"
cat "$logs/verify-shared.txt" "$logs/verify-export.txt"
[ -n "${DFGNN_SOAK_REPORT:-}" ] && echo "$report" >"$DFGNN_SOAK_REPORT"
if [ "$ok" != yes ]; then
  cp -a "$fs" "$work/fs-kept"
  DFGNN_SOAK_KEEP=1
  echo "soak: FAILED (logs in $logs, the database files in $work/fs-kept)" >&2
  exit 1
fi
echo "soak: PASS"
