"""pytest configuration of dfgnn's Python tests (tests/python).

The tests import the *installed* package (`pip install .`, see tools/python-tests.sh); nothing here
puts python_bindings/ on sys.path. They need neither a GPU nor PyTorch: tests that do are skipped
with the reason. Only GPU tests read datasets beyond data/cora (see find_dataset), and they skip
when a dataset is absent.
"""

import importlib.util
import os
import pathlib
import tempfile

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]

# Hermetic tuning database: the default context's user database goes to a scratch directory, no
# site or shipped database, no implicit tuning (set before dfgnn creates its first context).
# dfgnn.torch's native ops stay in the user's cache, where they are built once per torch version.
os.environ.setdefault("DFGNN_NATIVE_CACHE_DIR", os.path.join(os.environ.get("XDG_CACHE_HOME") or
                                                             os.path.expanduser("~/.cache"), "dfgnn"))
os.environ["DFGNN_CACHE_DIR"] = tempfile.mkdtemp(prefix="dfgnn-pytest-")
os.environ.pop("DFGNN_SITE_DB", None)
os.environ["DFGNN_TUNE"] = "off"
# No shipped database either (the installed package's data/tuning/*.db would answer on an sm_90 GPU);
# test_shipped_db.py brings its own or removes this for a subprocess.
os.environ["DFGNN_SHIPPED_DB"] = "off"


def _has_torch():
    return importlib.util.find_spec("torch") is not None


def _device():
    import dfgnn
    return dfgnn.has_device()


HAS_TORCH = _has_torch()


def _torch_cuda():
    if not HAS_TORCH:
        return False, "PyTorch is not installed"
    import torch
    if not torch.cuda.is_available():
        return False, "torch.cuda.is_available() is False"
    has, reason = _device()
    if not has:
        return False, f"dfgnn sees no CUDA device: {reason}"
    return True, ""


requires_torch = pytest.mark.skipif(not HAS_TORCH, reason="PyTorch is not installed (dfgnn.torch tests)")


def requires_gpu(fn):
    """Skips unless dfgnn reports a usable CUDA device (the reason is dfgnn's)."""
    has, reason = _device()
    return pytest.mark.skipif(not has, reason=f"dfgnn.has_device(): {reason}")(fn)


def requires_torch_cuda(fn):
    ok, reason = _torch_cuda()
    return pytest.mark.skipif(not ok, reason=reason)(fn)


def torch_inputs(model, n, heads, dim, device, dtype, seed=0):
    """Random inputs of a model (npref.random_inputs) as NumPy arrays and as torch tensors that
    require grad: features in dtype, parameters in float32 (float64 when dtype is float64)."""
    import numpy as np
    import torch

    import npref

    inputs = npref.random_inputs(model, n, heads, dim, np.random.default_rng(seed))
    out = {}
    for k, v in inputs.items():
        feature = k in ("h", "h_dst", "q", "k", "v")
        t = torch.tensor(v, device=device, dtype=dtype if feature or dtype == torch.float64 else torch.float32)
        out[k] = t.requires_grad_()
    return inputs, out


def call_op(model, g, t, **kw):
    """The dfgnn.torch function of a model on the tensors of torch_inputs."""
    import dfgnn.torch as dt

    if model == "gat":
        return dt.gat(g, t["h"], t["att_src"], t["att_dst"], **kw)
    if model == "gatv2":
        return dt.gatv2(g, t["h"], t["h_dst"], t["att_src"], **kw)
    if model == "transformer":
        return dt.transformer(g, t["q"], t["k"], t["v"], **kw)
    return dt.agnn(g, t["h"], t["beta"], **kw)


def load_bench(name):
    """A script of bench/ imported as a module (they are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dataset_roots():
    """Where datasets in the ../shared/datasets format are looked up, in order: $DFGNN_DATASETS
    (':'-separated), ../shared/datasets beside the repository, .bench-data in it."""
    roots = [pathlib.Path(p) for p in os.environ.get("DFGNN_DATASETS", "").split(":") if p]
    return roots + [REPO.parent / "shared" / "datasets", REPO / ".bench-data"]


def find_dataset(name):
    """The directory of a dataset (data/cora for "cora"), or None."""
    if name == "cora":
        return REPO / "data" / "cora"
    for root in dataset_roots():
        d = root / name
        if (d / "edges.txt").is_file() or (d / "edges.txt.gz").is_file():
            return d
    return None


@pytest.fixture(scope="session")
def repo():
    return REPO


@pytest.fixture(scope="session")
def cora_path():
    return REPO / "data" / "cora"


@pytest.fixture
def rng():
    import numpy as np
    return np.random.default_rng(12345)


# (output, gradient) norm-wise relative error bounds of a dfgnn layer against PyG's in float64 with the same
# weights. bfloat16 runs the whole layer under autocast (projections included); GATv2Conv's lin_r gradient, a
# sum over all nodes of bf16 products, measured 0.053 (cora) and 0.061 (hub graph) on the H200 on
# 2026-11-30, hence 8e-2.
LAYER_TOL = {"float32": (1e-4, 1e-4), "bfloat16": (3e-2, 8e-2)}


def rel_error(a, b, floor=0.0):
    """||a - b|| / max(||b||, floor): norm-wise relative error. The floor keeps gradients that are
    analytically zero (TransformerConv's key bias: softmax ignores a per-row shift) from turning
    rounding noise into a huge relative error."""
    a, b = a.detach().double(), b.detach().double()
    return ((a - b).norm() / max(b.norm().item(), floor, 1e-300)).item()


def check_layer_grads(ours, theirs, pairs, grad_tol):
    """Every parameter gradient of `ours` against the same-named one of `theirs` (PyG), plus the
    (got, want) `pairs` given (input gradients), within grad_tol of a tenth of the largest norm."""
    pairs = dict(pairs)
    theirs_params = dict(theirs.named_parameters())
    for pname, p in ours.named_parameters():
        pairs[pname] = (p.grad, theirs_params[pname].grad)
    floor = 0.1 * max(want.norm().item() for _, want in pairs.values())
    errors = {k: rel_error(got, want, floor) for k, (got, want) in pairs.items()}
    bad = {k: f"{v:.3g}" for k, v in errors.items() if not v < grad_tol}
    assert not bad, f"gradients beyond {grad_tol} (relative error): {bad}"


# dfgnn_op_t holds negative_slope as a C float: PyG's default 0.2 becomes 0.2f (relative 1.5e-8), which a
# float64 comparison sees, so PyG's layers get the same value.
SLOPE32 = 0.20000000298023224


def pyg_pair(name, **kw):
    """(dfgnn layer, PyG layer) in float64 with PyG's parameters copied into dfgnn's (state dict names
    equal); PyG's slope set to the float value dfgnn computes with."""
    import torch_geometric.nn as pnn
    import dfgnn.torch as dt
    theirs = getattr(pnn, name)(**kw).double()
    ours = getattr(dt, name)(**kw).double()
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in theirs.state_dict().items()}
    ours.load_state_dict(theirs.state_dict())
    if getattr(theirs, "negative_slope", None) == 0.2:
        theirs.negative_slope = SLOPE32
    return ours, theirs
