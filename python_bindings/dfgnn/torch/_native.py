"""dfgnn.torch's native eager ops (_native_ops.cpp: a TORCH_LIBRARY op with its autograd in C++),
built once per torch version against the installed torch and loaded into torch.ops.dfgnn_native.

A torch extension's binary is tied to the torch it was built against, so the package ships the
source and builds it on the first CUDA eager call (about 15-30 s, once; later processes load the
cached library), or ahead of time with ``python -m dfgnn.torch._native``. The build needs a C++17 (C++20 for newer torch)
compiler (``CXX``, else ``c++``) and the CUDA runtime headers (the CUDA Toolkit's, or those of
torch's nvidia wheels). Where it cannot be built, dfgnn.torch runs the same kernels through its
Python autograd Functions, with one warning saying why.

``DFGNN_TORCH_NATIVE``: ``auto`` (the default: load on first use, or build in the background while
calls take the Python path; a failed build falls back with one warning, and later processes do not
compile it again), ``1`` (required: built on first use, waiting for it, also after a failed build;
a failure is an error), ``0`` (the Python path). On the H200 the native path cost 0.63x the Python
path's host time per forward call and 0.68x per forward+backward, in the user's call
(bench/results/2026-12-01d-h200.md).
The built library is kept
in ``DFGNN_NATIVE_CACHE_DIR``, else ``DFGNN_CACHE_DIR``, else ``$XDG_CACHE_HOME/dfgnn`` or
``~/.cache/dfgnn``.
"""

import contextlib
import fcntl
import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading
import warnings

import torch

from .. import _nvrtc

_SOURCE = pathlib.Path(__file__).with_name("_native_ops.cpp")
_PACKAGE = pathlib.Path(__file__).resolve().parents[1]  # site-packages/dfgnn: libdfgnn.so.1, include/

_state = None  # (torch.ops.dfgnn_native or None, status dict), once decided
_background = None  # mode auto, library not built yet: {"thread", "path" or "error"} of its build
_FAILED = "build.failed"  # in a key's directory: the reason its last build failed
_TEMP_PREFIX = "building-"  # a build's temporary library, renamed into place when it is whole


def _mode():
    mode = os.environ.get("DFGNN_TORCH_NATIVE", "auto").strip().lower()
    if mode not in ("auto", "0", "1"):
        raise ValueError(f"DFGNN_TORCH_NATIVE must be auto, 0 or 1, got {mode!r}")
    return mode


def _header_dir():
    """The directory holding dfgnn/dfgnn.h: the installed package's include/, or the source tree's."""
    for d in (_PACKAGE / "include", _PACKAGE.parents[1] / "runtime" / "include"):
        if (d / "dfgnn" / "dfgnn.h").is_file():
            return d
    return None


def _library():
    lib = _PACKAGE / "libdfgnn.so.1"
    return lib if lib.is_file() else None


def _cuda_include_dirs():
    """Where cuda_runtime_api.h is (c10/cuda's headers include it): the toolkit, or torch's nvidia
    wheels (which bring the CUDA runtime headers with them)."""
    candidates = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(pathlib.Path(os.environ[var]) / "include")
    candidates.append(pathlib.Path("/usr/local/cuda/include"))
    for root in _nvrtc.nvidia_roots():
        candidates += sorted(pathlib.Path(root).glob("*/include"))
    return [d for d in candidates if (d / "cuda_runtime_api.h").is_file()][:1]


def _build_inputs():
    """(compile command, cache key) for this machine, or raises RuntimeError naming what is missing."""
    header, library = _header_dir(), _library()
    if header is None:
        raise RuntimeError(f"dfgnn/dfgnn.h is in neither {_PACKAGE / 'include'} nor the source tree")
    if library is None:
        raise RuntimeError(f"libdfgnn.so.1 is not in {_PACKAGE}")
    cuda = _cuda_include_dirs()
    if not cuda:
        raise RuntimeError("no CUDA runtime headers (cuda_runtime_api.h) in $CUDA_HOME/include, /usr/local/cuda/include "
                           "or torch's nvidia wheels")
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not compiler:
        raise RuntimeError("no C++ compiler (set CXX, or install g++)")
    torch_dir = pathlib.Path(torch.__file__).resolve().parent
    torch_lib = torch_dir / "lib"
    cmd = [compiler, "-O2", "-shared", "-fPIC", f"-std={_standard(torch_dir)}", "-w",
           f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
           f"-I{header}", f"-I{torch_dir / 'include'}", f"-I{torch_dir / 'include' / 'torch' / 'csrc' / 'api' / 'include'}",
           *[f"-I{d}" for d in cuda], str(_SOURCE),
           f"-L{torch_lib}", f"-Wl,-rpath,{torch_lib}", "-lc10", "-lc10_cuda", "-ltorch_cpu", "-ltorch_cuda", "-ltorch",
           f"-L{library.parent}", f"-Wl,-rpath,{library.parent}", f"-l:{library.name}"]
    digest = hashlib.sha256()
    for part in (_SOURCE.read_bytes(), (header / "dfgnn" / "dfgnn.h").read_bytes(), torch.__version__.encode(),
                 str(torch.version.cuda).encode(), " ".join(cmd).encode()):
        digest.update(part)
        digest.update(b"\0")
    return cmd, digest.hexdigest()[:16]


def _standard(torch_dir):
    """The C++ standard torch itself was built with: C++20 where its headers require it (newer
    torch), else C++17, the standard of libtorch's own inline code."""
    aten = torch_dir / "include" / "ATen" / "ATen.h"
    text = aten.read_text(errors="replace") if aten.is_file() else ""
    return "c++20" if "C++20 or later" in text else "c++17"


def _cache_dir():
    root = os.environ.get("DFGNN_NATIVE_CACHE_DIR") or os.environ.get("DFGNN_CACHE_DIR")
    if not root:
        root = pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "dfgnn"
    return pathlib.Path(root)


def build():
    """Builds the native ops for this torch (or finds them built) and returns the library's path.
    Raises RuntimeError with the reason (and the compiler's log) when it cannot."""
    cmd, key = _build_inputs()
    directory = _cache_dir() / f"native-ops-{key}"
    target = directory / "dfgnn_native_ops.so"
    if target.is_file():
        return target
    directory.mkdir(parents=True, exist_ok=True)
    # one build per key on this machine: other processes (DDP ranks) wait on the lock, then load it
    with open(directory / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file():
            return target
        print(f"dfgnn.torch: building the native ops for torch {torch.__version__} into {directory} (once)",
              file=sys.stderr, flush=True)
        # Temporary files left by a builder that died (a process that exited during its background
        # build): only the lock's holder makes one, so none is in use now.
        for stale in directory.glob(f"{_TEMP_PREFIX}*.so"):
            with contextlib.suppress(OSError):
                stale.unlink()
        fd, temp = tempfile.mkstemp(dir=directory, prefix=_TEMP_PREFIX, suffix=".so")
        os.close(fd)
        log = directory / "build.log"
        try:
            with open(log, "w") as out:
                rc = subprocess.run(cmd[:-1] + ["-o", temp] + cmd[-1:], stdout=out, stderr=subprocess.STDOUT).returncode
            if rc != 0:
                tail = log.read_text(errors="replace").strip().splitlines()[-5:]
                reason = f"building {_SOURCE.name} failed (exit {rc}; log {log}): " + " | ".join(tail)
                with contextlib.suppress(OSError):  # later processes in mode auto do not compile it again
                    (directory / _FAILED).write_text(reason)
                raise RuntimeError(reason)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temp, 0o755 & ~umask)  # mkstemp made it 0600: others sharing the cache load it too
            os.replace(temp, target)  # atomic: a reader sees no library or a whole one
            with contextlib.suppress(OSError):
                (directory / _FAILED).unlink(missing_ok=True)
        except BaseException as e:  # a failed or interrupted build leaves no temporary file behind
            with contextlib.suppress(OSError):
                os.unlink(temp)
            if isinstance(e, OSError):  # the compiler missing, the cache unwritable
                raise RuntimeError(f"building {_SOURCE.name} failed: {e}") from e
            raise
    return target




def _built():
    """(the library's path when it is already built for this torch, else None; the reason its last
    build failed, else None). Both None also when it cannot be built here (build() says why)."""
    try:
        _, key = _build_inputs()
    except RuntimeError:
        return None, None
    directory = _cache_dir() / f"native-ops-{key}"
    target = directory / "dfgnn_native_ops.so"
    if target.is_file():
        return target, None
    try:
        return None, (directory / _FAILED).read_text(errors="replace")
    except OSError:
        return None, None


def _build_in_background():
    """Mode auto without a built library: builds it on a daemon thread while calls take the Python
    path (a first CUDA call does not wait 15-30 s for a compiler); the call after it finished loads it."""
    global _background
    job = {}

    def work():
        try:
            job["path"] = build()
        except Exception as e:  # noqa: BLE001 (reported by _decide on the caller's thread)
            job["error"] = e
    job["thread"] = threading.Thread(target=work, name="dfgnn-native-build", daemon=True)
    _background = job
    job["thread"].start()


def _forget_background_in_child():
    """A forked child (a DataLoader worker) has no build thread: it decides again if it needs the ops."""
    global _background, _state
    if _background is not None:
        _background, _state = None, None


os.register_at_fork(after_in_child=_forget_background_in_child)


def _decide():
    global _background
    mode = _mode()
    status = dict(mode=mode, available=False, library=None, reason=None)
    if mode == "0":
        status["reason"] = "DFGNN_TORCH_NATIVE=0"
        return None, status
    try:
        if mode == "auto":
            if _background is None:
                path, failed = _built()
                if failed:  # compiled and failed before: not again in every process (mode 1 retries)
                    status["reason"] = f"an earlier build failed (DFGNN_TORCH_NATIVE=1 builds again): {failed}"
                    return None, status
                if path is None:
                    _build_in_background()
            if _background is not None:
                if _background["thread"].is_alive():
                    status["reason"] = "building in the background (the Python path runs meanwhile)"
                    return None, status
                job, _background = _background, None
                if "error" in job:
                    raise job["error"]
        path = build()
        torch.ops.load_library(str(path))
        ops = torch.ops.dfgnn_native
        ops.attention  # noqa: B018 (resolves the op: fails here when the library did not register it)
    except Exception as e:  # noqa: BLE001 (any failure: fall back, or raise when required)
        if mode == "1":
            raise RuntimeError(f"dfgnn.torch: the native ops are required (DFGNN_TORCH_NATIVE=1) but unavailable: {e}") \
                from e
        status["reason"] = str(e)
        warnings.warn(f"dfgnn.torch runs its Python call path (slower host side): the native ops are unavailable: {e} "
                      "(DFGNN_TORCH_NATIVE=0 chooses that path without this warning)", RuntimeWarning, stacklevel=4)
        return None, status
    status.update(available=True, library=str(path))
    return ops, status


def ops():
    """torch.ops.dfgnn_native once built and loaded, else None (decided once per process, or, while
    mode auto builds the library in the background, again at each call until the build ended)."""
    global _state
    if _state is None or _background is not None:
        _state = _decide()
    return _state[0]


def status(wait=False):
    """Whether the native eager path is in use: {"mode", "available", "library", "reason"} (decides
    it; mode 1 builds the library if needed, mode auto starts its build in the background). wait:
    first wait for a background build to end."""
    job = _background
    if wait and job is not None:
        job["thread"].join()
    ops()
    return dict(_state[1])


if __name__ == "__main__":
    print(build())
