"""dfgnn.torch's native eager ops (_native_ops.cpp: a TORCH_LIBRARY op with its autograd in C++),
built once per torch version against the installed torch and loaded into torch.ops.dfgnn_native.

A torch extension's binary is tied to the torch it was built against, so the package ships the
source and builds it on the first CUDA eager call (about 15-30 s, once; later processes load the
cached library when they import dfgnn.torch), or ahead of time with ``python -m dfgnn.torch._native``. The build needs a C++17 (C++20 for newer torch)
compiler (``CXX``, else ``c++``) and the CUDA runtime headers (the CUDA Toolkit's, or those of
torch's nvidia wheels). Where it cannot be built, dfgnn.torch runs the same kernels through its
Python autograd Functions, with one warning saying why.

``DFGNN_TORCH_NATIVE``: ``auto`` (the default: load on first use, or build in a detached process
while calls take the Python path; a failed build falls back with one warning, and later processes do
not compile it again for a day), ``1`` (required: built on first use, waiting for it, also after a failed build;
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
import time
import warnings

import torch

from .. import _nvrtc

_SOURCE = pathlib.Path(__file__).with_name("_native_ops.cpp")
_CORE = _SOURCE.with_name("_prepared_call.hpp")  # the prepared-call core it includes (shared with _dfgnn)
_PACKAGE = pathlib.Path(__file__).resolve().parents[1]  # site-packages/dfgnn: libdfgnn.so.1, include/

_state = None  # (torch.ops.dfgnn_native or None, status dict), once decided
_builder = None  # mode auto, library not built yet: {"process", "stderr", "next_poll"} of its builder
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
    def candidates():  # in order, the wheels' directories globbed only when needed (0.4 ms of a first call)
        for var in ("CUDA_HOME", "CUDA_PATH"):
            if os.environ.get(var):
                yield pathlib.Path(os.environ[var]) / "include"
        yield pathlib.Path("/usr/local/cuda/include")
        for root in _nvrtc.nvidia_roots():
            yield from sorted(pathlib.Path(root).glob("*/include"))
    return next(([d] for d in candidates() if (d / "cuda_runtime_api.h").is_file()), [])


def _build_inputs():
    """(compile command, cache key) for this machine, or raises RuntimeError naming what is missing."""
    missing = [p.name for p in (_SOURCE, _CORE) if not p.is_file()]
    if missing:
        raise RuntimeError(f"the native ops' sources are not all in {_SOURCE.parent}: {', '.join(missing)} missing")
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
    for part in (_SOURCE.read_bytes(), _CORE.read_bytes(), (header / "dfgnn" / "dfgnn.h").read_bytes(), torch.__version__.encode(),
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


def _cache_paths(key):
    """(the directory of a build key, the library built there)."""
    directory = _cache_dir() / f"native-ops-{key}"
    return directory, directory / "dfgnn_native_ops.so"


def build(retry_failed=True):
    """Builds the native ops for this torch (or finds them built) and returns the library's path.
    Raises RuntimeError with the reason (and the compiler's log) when it cannot. retry_failed=False
    (mode auto's builder): a compile that failed less than a day ago is not run again (ranks waiting
    on the lock would otherwise each compile and fail in turn)."""
    cmd, key = _build_inputs()
    directory, target = _cache_paths(key)
    if target.is_file():
        return target
    directory.mkdir(parents=True, exist_ok=True)
    # one build per key on this machine: other processes (DDP ranks) wait on the lock, then load it
    with open(directory / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file():
            return target
        failed = None if retry_failed else _recent_failure(directory)
        if failed:
            raise RuntimeError(f"an earlier build failed (DFGNN_TORCH_NATIVE=1 or python -m dfgnn.torch._native "
                               f"builds again): {failed}")
        print(f"dfgnn.torch: building the native ops for torch {torch.__version__} into {directory} (once)",
              file=sys.stderr, flush=True)
        # Temporary files left by a builder that was killed: only the lock's holder makes one, so
        # none is in use now.
        for stale in directory.glob(f"{_TEMP_PREFIX}*.so"):
            with contextlib.suppress(OSError):
                stale.unlink()
        fd, temp = tempfile.mkstemp(dir=directory, prefix=_TEMP_PREFIX, suffix=".so")
        os.close(fd)
        log = directory / "build.log"
        try:
            with open(log, "w") as out:
                rc = subprocess.run(cmd[:-1] + ["-o", temp] + cmd[-1:], stdout=out, stderr=subprocess.STDOUT).returncode
            reason = None
            if rc != 0:
                tail = log.read_text(errors="replace").strip().splitlines()[-5:]
                reason = f"building {_SOURCE.name} failed (exit {rc}; log {log}): " + " | ".join(tail)
            elif os.path.getsize(temp) == 0:  # mkstemp's empty file: the compiler wrote nothing
                reason = f"the compiler exited 0 but wrote no library (log {log}): {cmd[0]}"
            if reason:
                if rc >= 0:  # the compiler ran and failed (not a signal, e.g. Ctrl-C): remembered for a day
                    with contextlib.suppress(OSError):
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


_FAILURE_TTL_S = 86400  # a failed compile is retried by mode auto after a day (a fixed compiler, disk)


def _recent_failure(directory):
    """The reason the last compile of this key failed, if it failed less than a day ago, else None."""
    marker = directory / _FAILED
    try:
        if time.time() - marker.stat().st_mtime < _FAILURE_TTL_S:
            return marker.read_text(errors="replace")
    except OSError:
        pass
    return None


def _built():
    """(the library's path when it is already built for this torch, else None; the reason a recent
    build failed, else None). Raises RuntimeError naming what is missing when it cannot be built
    here (a compiler, headers: no builder process is started for that)."""
    directory, target = _cache_paths(_build_inputs()[1])
    return (target, None) if target.is_file() else (None, _recent_failure(directory))


_POLL_S = 0.5  # while a builder runs, calls look at it at most this often


def _start_builder():
    """Mode auto without a built library: builds it in a detached process (python -m
    dfgnn.torch._native --background) while calls take the Python path. A first CUDA call does not
    wait 15-30 s for a compiler, and a script that exits meanwhile (or is interrupted) does not stop
    the build: the next process finds the library."""
    global _builder
    err = tempfile.TemporaryFile()
    process = subprocess.Popen([sys.executable, "-m", "dfgnn.torch._native", "--background"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                               start_new_session=True, close_fds=True)
    _builder = dict(process=process, stderr=err, next_poll=time.monotonic() + _POLL_S)


def _builder_error(builder):
    """The reason a builder process gave for its failure (its last stderr line)."""
    err = builder["stderr"]
    err.seek(0)
    lines = err.read().decode(errors="replace").strip().splitlines()
    err.close()
    return lines[-1] if lines else f"the builder exited with status {builder['process'].returncode}"


def _forget_builder_in_child():
    """A forked child (a DataLoader worker) did not start the builder: it decides again if it needs the ops."""
    global _builder, _state
    if _builder is not None:
        _builder, _state = None, None


os.register_at_fork(after_in_child=_forget_builder_in_child)


def _load(path):
    """torch.ops.dfgnn_native from the built library at path (raises when it does not register the op)."""
    torch.ops.load_library(str(path))
    ops = torch.ops.dfgnn_native
    ops.attention  # noqa: B018 (resolves the op: fails here when the library did not register it)
    return ops


def _decide():
    global _builder
    mode = _mode()
    status = dict(mode=mode, available=False, library=None, reason=None)
    if mode == "0":
        status["reason"] = "DFGNN_TORCH_NATIVE=0"
        return None, status
    try:
        path = None
        if mode == "auto":
            builder = _builder
            if builder is None:
                path, failed = _built()
                if failed:  # compiled and failed recently: not again in every process (mode 1 retries)
                    status["reason"] = (f"an earlier build failed (DFGNN_TORCH_NATIVE=1 or python -m "
                                        f"dfgnn.torch._native builds again): {failed}")
                    return None, status
                if path is None:
                    _start_builder()
                    builder = _builder
            if builder is not None:
                builder["next_poll"] = time.monotonic() + _POLL_S
                if builder["process"].poll() is None:
                    status["reason"] = "building in the background (the Python path runs meanwhile)"
                    return None, status
                _builder = None
                if builder["process"].returncode != 0:
                    raise RuntimeError(_builder_error(builder))
                builder["stderr"].close()
            if path is None:  # the builder has just ended: look again (never compiled on a caller's thread)
                path, _ = _built()
            if path is None:
                raise RuntimeError("the background build ended without leaving the library in the cache")
        else:
            path = build()
        ops = _load(path)
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


_lock = threading.Lock()  # one decision at a time (threads may make their first CUDA calls together)


def ops():
    """torch.ops.dfgnn_native once built and loaded, else None (decided once per process, or, while
    mode auto's builder runs, again every half second until it ended)."""
    global _state
    state, builder = _state, _builder
    if state is None or (builder is not None and time.monotonic() >= builder["next_poll"]):
        with _lock:
            if _state is None or _builder is not None:
                _state = _decide()
            state = _state
    return state[0]


def preload():
    """At ``import dfgnn.torch``: loads the native ops when they are already built for this torch, so that
    a process's first call does not pay the library's load (1-2 ms of a first forward, most of it the
    dynamic loader's). Nothing else is decided here: without a built library, a build (or the fallback
    and its warning) waits for the first CUDA call, as does any failure (that call decides again and
    says why). A torch built without CUDA never takes the native path."""
    global _state
    if torch.version.cuda is None or _state is not None:
        return
    try:
        mode = _mode()
        path = None if mode == "0" else _built()[0]
        if path is None:
            return
        with _lock:
            if _state is None:
                _state = (_load(path), dict(mode=mode, available=True, library=str(path), reason=None))
    except Exception:  # noqa: BLE001 (the first call decides again and raises or warns with the reason)
        pass


def status(wait=False):
    """Whether the native eager path is in use: {"mode", "available", "library", "reason"} (decides
    it; mode 1 builds the library if needed, mode auto starts its builder). wait: also wait for the
    builder to end."""
    ops()
    builder = _builder
    if wait and builder is not None:
        builder["process"].wait()
        builder["next_poll"] = 0.0
        ops()
    return dict(_state[1])


def _main(argv):
    """python -m dfgnn.torch._native [--background]: builds the library (ahead of time, or as mode
    auto's builder, which does not retry a recent failure) and prints its path."""
    try:
        print(build(retry_failed="--background" not in argv))
    except RuntimeError as e:
        print(f"dfgnn.torch._native: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
