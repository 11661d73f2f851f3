"""Where libdfgnn should look for NVRTC, as seen from Python.

libdfgnn opens NVRTC on its first compile (see runtime/src/nvrtc.cpp for the search order). It
finds the nvidia-cuda-nvrtc wheel (which PyTorch's CUDA builds depend on) by itself when the wheel
lies in the same site-packages as dfgnn; in a virtual environment that sees the system's packages
it may lie elsewhere, so the package names every such directory on ``sys.path`` in
``DFGNN_NVRTC_WHEEL_DIRS``, which libdfgnn searches where it searches its own site-packages (after
the CUDA Toolkit). ``DFGNN_NVRTC_PATH`` stays the user's, searched first. Nothing is imported or
loaded.
"""

import importlib.util
import os

_VARIABLE = "DFGNN_NVRTC_WHEEL_DIRS"
# CUDA 13 wheels put NVRTC in nvidia/cu13/lib, CUDA 12 wheels in nvidia/cuda_nvrtc/lib.
_WHEEL_DIRS = ("cu13/lib", "cuda_nvrtc/lib")


def nvidia_roots():
    """The directories of the ``nvidia`` namespace package (torch's CUDA wheels), in ``sys.path`` order."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    return list(spec.submodule_search_locations or []) if spec is not None else []


def wheel_dirs():
    """The directories of installed nvidia-cuda-nvrtc wheels, in ``sys.path`` order."""
    found = []
    for root in nvidia_roots():
        for sub in _WHEEL_DIRS:
            d = os.path.join(root, sub)
            if os.path.isdir(d) and any(n.startswith("libnvrtc.so") for n in os.listdir(d)):
                found.append(d)
    return found


def add_wheel_hint():
    """Adds the wheel directories to DFGNN_NVRTC_WHEEL_DIRS (inherited by the CLIs too)."""
    entries = [e for e in os.environ.get(_VARIABLE, "").split(":") if e]
    added = [d for d in wheel_dirs() if d not in entries]
    if added:
        os.environ[_VARIABLE] = ":".join(entries + added)
