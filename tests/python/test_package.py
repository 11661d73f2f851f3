"""The installed package: import, version, device probe, errors, optional torch, GPU entry points
that work without a GPU (workspace sizes, schedules, NVRTC) and the NO_DEVICE path."""

import ctypes
import importlib
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import dfgnn
from conftest import HAS_TORCH, REPO


def test_version():
    assert re.fullmatch(r"\d+\.\d+\.\d+", dfgnn.__version__)
    assert dfgnn.__version__ == dfgnn.library_version()
    cmake = (REPO / "CMakeLists.txt").read_text()
    assert f"VERSION {dfgnn.__version__}" in cmake
    from importlib.metadata import version
    assert version("dfgnn") == dfgnn.__version__


def test_installed_layout():
    pkg = pathlib.Path(dfgnn.__file__).parent
    assert REPO / "python_bindings" not in pkg.parents, "tests must run against the installed package"
    names = {p.name for p in pkg.iterdir()}
    assert any(n.startswith("_dfgnn") and n.endswith(".so") for n in names)
    assert "libdfgnn.so.1" in names  # the soname carries DFGNN_ABI_VERSION of dfgnn.h


@pytest.mark.parametrize("name, allowed", [("_dfgnn", r"PyInit__dfgnn"), ("libdfgnn", r"dfgnn\w*")])
def test_binaries_export_only_their_entry_points(name, allowed):
    # A stray export (a C++ standard library instance, an STB_GNU_UNIQUE static) binds process-wide
    # and broke `import dfgnn; import torch` on the H200; see cmake/libdfgnn.map.
    import shutil
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) is not installed")
    pkg = pathlib.Path(dfgnn.__file__).parent
    path = next(p for p in pkg.iterdir() if p.name.startswith(name) and ".so" in p.name)
    out = subprocess.run(["nm", "-D", "--defined-only", str(path)], capture_output=True, text=True, check=True).stdout
    names = [line.split()[-1] for line in out.splitlines() if line.strip()]
    names = [n for n in names if "@" not in n]
    assert names, f"{path.name} exports nothing"
    stray = [n for n in names if not re.fullmatch(allowed, n)]
    assert not stray, f"{path.name} exports {stray[:5]}"


def test_import_before_torch(tmp_path):
    if not HAS_TORCH:
        pytest.skip("torch is not installed")
    code = "import dfgnn, torch; x = torch.ones(3); print(dfgnn.has_device()[0], float(x.sum()))"
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"import dfgnn then torch failed ({r.returncode}): {r.stderr[-2000:]}"
    assert r.stdout.split()[-1] == "3.0"


@pytest.mark.parametrize("holder", ["cycle", "autograd"])
def test_no_leak_report_at_exit(tmp_path, holder):
    # Graphs still referenced at exit (a reference cycle; torch's autograd graph of an output kept in
    # a global, which torch frees after the extension) are released first: no nanobind leak report.
    if holder == "autograd" and not HAS_TORCH:
        pytest.skip("torch is not installed")
    code = {
        "cycle": "import dfgnn\nclass A: pass\na = A(); a.me = a; a.g = dfgnn.Graph([[0, 1], [1, 0]], 2)\n",
        "autograd": "import torch, dfgnn.torch as dt\nei = torch.tensor([[0, 1], [1, 0]])\n"
                    "x = torch.randn(2, 1, 3, dtype=torch.float64, requires_grad=True)\n"
                    "out = dt.transformer(ei, x, x, x)\n",
    }[holder]
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "leaked" not in r.stderr, r.stderr[-2000:]


def test_import_outside_the_repo(tmp_path):
    code = "import dfgnn, sys; print(dfgnn.__version__); sys.exit('torch' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr           # also: importing dfgnn does not import torch
    assert r.stdout.strip() == dfgnn.__version__


def test_has_device():
    has, reason = dfgnn.has_device()
    assert isinstance(has, bool) and isinstance(reason, str)
    if has:
        pytest.skip("a CUDA device is present: nothing to check about its absence")
    assert reason, "without a device, has_device() gives the reason"
    assert dfgnn.default_context().has_device() == (has, reason)


def test_all_exports():
    for name in dfgnn.__all__:
        assert hasattr(dfgnn, name), name


def test_error_hierarchy():
    expect = {
        dfgnn.Status.INVALID_ARGUMENT: (dfgnn.InvalidArgumentError, ValueError),
        dfgnn.Status.ROW_PTR_START: (dfgnn.GraphError, ValueError),
        dfgnn.Status.DUPLICATE_EDGE: (dfgnn.GraphError, ValueError),
        dfgnn.Status.OUT_OF_MEMORY: (dfgnn.OutOfMemoryError, MemoryError),
        dfgnn.Status.NO_DEVICE: (dfgnn.NoDeviceError, RuntimeError),
        dfgnn.Status.CUDA_ERROR: (dfgnn.CudaError, RuntimeError),
        dfgnn.Status.COMPILE_ERROR: (dfgnn.CompileError, RuntimeError),
        dfgnn.Status.NOT_SUPPORTED: (dfgnn.NotSupportedError, NotImplementedError),
        dfgnn.Status.IO_ERROR: (dfgnn.IoError, OSError),
        dfgnn.Status.PARSE_ERROR: (dfgnn.ParseError, ValueError),
        dfgnn.Status.DATABASE_ERROR: (dfgnn.DatabaseError, RuntimeError),
        dfgnn.Status.INTERNAL_ERROR: (dfgnn.InternalError, RuntimeError),
    }
    from dfgnn._errors import make_error
    for status, (cls, builtin) in expect.items():
        e = make_error(int(status), "dfgnnSomething", "what happened")
        assert type(e) is cls and isinstance(e, builtin) and isinstance(e, dfgnn.Error)
        assert e.status == status and e.function == "dfgnnSomething" and e.message == "what happened"
        assert str(e) == f"what happened [{status.name} in dfgnnSomething]"
    io = make_error(int(dfgnn.Status.IO_ERROR), "f", "cannot open 'x'")
    assert io.errno is None and str(io).startswith("cannot open 'x'")


@pytest.mark.skipif(HAS_TORCH, reason="PyTorch is installed: the ImportError path cannot be checked")
def test_torch_module_needs_torch():
    sys.modules.pop("dfgnn.torch", None)
    with pytest.raises(ImportError, match=r"dfgnn.torch needs PyTorch.*pip install torch"):
        importlib.import_module("dfgnn.torch")
    assert "dfgnn" in sys.modules       # the core package stays usable


def test_op_objects():
    op = dfgnn.op("transformer", "bf16", heads=4, dim=64, scale=0.5)
    assert op.model == dfgnn.Model.TRANSFORMER and op.dtype == dfgnn.DType.BFLOAT16
    assert (op.heads, op.dim, op.scale) == (4, 64, 0.5)
    # `deterministic` was never read (every kernel is deterministic): gone from the op, and the keyword
    # is accepted for one more release with a warning, changing nothing.
    assert not hasattr(op, "deterministic") and "deterministic" not in repr(op)
    with pytest.warns(DeprecationWarning, match=r"make_op\(deterministic=\.\.\.\) is deprecated") as caught:
        legacy = dfgnn.op("transformer", "bf16", heads=4, dim=64, scale=0.5, deterministic=False)
    assert repr(legacy) == repr(op)
    assert caught[0].filename == __file__  # the warning points at the caller
    assert dfgnn.op("gat").negative_slope == pytest.approx(0.2)
    assert "model=transformer" in repr(op)
    with pytest.raises(dfgnn.DTypeError, match="unsupported dtype 'int8'"):
        dfgnn.op("gat", "int8")
    with pytest.raises(dfgnn.InvalidArgumentError, match="heads and dim must be >= 1"):
        dfgnn.op("gat", heads=0)


# ---------------------------------------------------------------- GPU entry points without a GPU


def test_workspace_and_schedules(cora_path):
    g = dfgnn.Graph.from_file(cora_path, add_self_loops=True)
    op = dfgnn.op("gat", "float32", heads=8, dim=8)
    assert dfgnn.ops.workspace_size(g, op) >= 0
    assert dfgnn.ops.workspace_size(g, op, "backward") >= 0
    fwd = dfgnn.ops.schedule(g, op)
    assert re.match(r"[a-z_]+:lanes=\d+", fwd)
    assert "|" in dfgnn.ops.schedule(g, op, "backward")
    candidates = dfgnn.ops.list_schedules(g, op, "forward")
    assert fwd in candidates and len(candidates) > 1
    assert dfgnn.ops.list_schedules(g, op, 2)
    forced = "subwarp:lanes=8,groups=8,vec=4"
    assert dfgnn.ops.schedule(g, op, "forward", forced).startswith("subwarp:lanes=8,groups=8")
    with pytest.raises(dfgnn.ParseError):
        dfgnn.ops.schedule(g, op, "forward", "no-such-solver:::")
    with pytest.raises(dfgnn.InvalidArgumentError):
        dfgnn.ops.list_schedules(g, op, "sideways")


def test_nvrtc_compile_without_gpu():
    op = dfgnn.op("agnn", "float16", heads=1, dim=16)
    ctx = dfgnn.Context()
    dfgnn.ops.compile(op, "forward", "subwarp:lanes=16,groups=8,vec=4", arch=90, context=ctx)
    counters = dfgnn.ops.cache_counters(ctx)
    assert counters["compiles"] + counters["hits"] >= 1 and counters["loads"] == 0
    with pytest.raises(dfgnn.InvalidArgumentError, match="needs a graph or a schedule"):
        dfgnn.ops.compile(op, "forward", None, context=ctx)


def test_gpu_ops_reject_host_arrays(rng):
    g = dfgnn.Graph([[0, 1], [1, 0]])
    h = np.zeros((2, 1, 4), np.float32)
    att = np.zeros((1, 4), np.float32)
    with pytest.raises(dfgnn.DeviceError, match=r"inputs\['h'\] is on cpu, but GPU ops take CUDA arrays"):
        dfgnn.ops.forward(g, "gat", {"h": h, "att_src": att, "att_dst": att}, np.empty_like(h))


# A CUDA array known only through DLPack: a hand-made DLPack capsule that claims device memory
# (the pointer is never dereferenced: without a device the library stops at NO_DEVICE first).
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class FakeCudaArray:
    _keep = []

    def __init__(self, shape, code=2, bits=32):
        self.shape = tuple(shape)
        self._shape = (ctypes.c_int64 * len(shape))(*shape)
        self._mt = _DLManagedTensor()
        t = self._mt.dl_tensor
        t.data, t.device, t.ndim = 0x7F0000000000, _DLDevice(2, 0), len(shape)
        t.dtype = _DLDataType(code, bits, 1)
        t.shape, t.strides, t.byte_offset = self._shape, None, 0
        FakeCudaArray._keep.append(self)    # the capsule has no deleter: keep the struct alive

    def __dlpack__(self, stream=None):
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(self._mt), b"dltensor", None)

    def __dlpack_device__(self):
        return (2, 0)


def test_gpu_ops_report_no_device():
    if dfgnn.has_device()[0]:
        pytest.skip("a CUDA device is present")
    g = dfgnn.Graph([[0, 1], [1, 0]])
    inputs = {"q": FakeCudaArray((2, 1, 4)), "k": FakeCudaArray((2, 1, 4)), "v": FakeCudaArray((2, 1, 4))}
    info = dfgnn._dfgnn.array_info(inputs["q"])
    assert info["is_cuda"] and info["device"] == "cuda:0" and info["dtype"] == "float32"
    out, lse = FakeCudaArray((2, 1, 4)), FakeCudaArray((2, 1))
    with pytest.raises(dfgnn.NoDeviceError) as e:
        dfgnn.ops.forward(g, "transformer", inputs, out, lse)
    assert isinstance(e.value, RuntimeError) and e.value.status == dfgnn.Status.NO_DEVICE
    assert e.value.function == "dfgnnForward"
    grads = {k: FakeCudaArray((2, 1, 4)) for k in inputs}
    with pytest.raises(dfgnn.NoDeviceError):
        dfgnn.ops.backward(g, "transformer", inputs, out, lse, FakeCudaArray((2, 1, 4)), grads,
                           allocator=lambda n: FakeCudaArray((n,), code=1, bits=8))
    # checks before the library: wrong dtype of lse, mixed devices
    with pytest.raises(dfgnn.DTypeError, match="lse must have dtype float32"):
        dfgnn.ops.forward(g, "transformer", inputs, out, FakeCudaArray((2, 1), bits=16))
    with pytest.raises(dfgnn.DeviceError, match="out is on cpu"):
        dfgnn.ops.forward(g, "transformer", inputs, np.empty((2, 1, 4), np.float32), lse)
    # a backward that needs scratch asks for it (hub rows are split into chunks)
    hub = dfgnn.Graph.planted_hubs(3000, 2, 1, 2000, seed=1)
    op = dfgnn.op("transformer", "float32", 1, 4)
    need = dfgnn.ops.workspace_size(hub, op, "backward")
    if need:
        big = {k: FakeCudaArray((3000, 1, 4)) for k in inputs}
        o, l, go = FakeCudaArray((3000, 1, 4)), FakeCudaArray((3000, 1)), FakeCudaArray((3000, 1, 4))
        gr = {k: FakeCudaArray((3000, 1, 4)) for k in inputs}
        with pytest.raises(dfgnn.InvalidArgumentError, match=f"needs {need} bytes of device workspace"):
            dfgnn.ops.backward(hub, "transformer", big, o, l, go, gr)
        seen = []
        with pytest.raises(dfgnn.NoDeviceError):
            dfgnn.ops.backward(hub, "transformer", big, o, l, go, gr,
                               allocator=lambda n: seen.append(n) or FakeCudaArray((n,), code=1, bits=8))
        assert seen == [need]
