"""dfgnn.ops on CUDA arrays of a framework other than PyTorch (CuPy, through DLPack). Skipped
without CuPy or without a CUDA device."""

import importlib.util

import numpy as np
import pytest

import dfgnn
import npref
from conftest import requires_gpu

HAS_CUPY = importlib.util.find_spec("cupy") is not None
requires_cupy = pytest.mark.skipif(not HAS_CUPY, reason="CuPy is not installed")

EDGES = np.array([(0, 1), (0, 1), (1, 2), (3, 2), (4, 2), (5, 2), (0, 2), (2, 0), (3, 3), (4, 5),
                  (5, 4), (1, 3), (6, 2), (2, 1)])
N = 7


@requires_cupy
@requires_gpu
@pytest.mark.parametrize("model", ["gat", "gatv2", "transformer", "agnn"])
def test_cupy_forward_backward(model):
    import cupy as cp
    rng = np.random.default_rng(3)
    heads, dim = 2, 8
    host = npref.random_inputs(model, N, heads, dim, rng)
    host = {k: v.astype(np.float32) for k, v in host.items()}
    dev = {k: cp.asarray(v) for k, v in host.items()}
    # the graph from a CUDA edge_index
    g = dfgnn.Graph(cp.asarray(np.ascontiguousarray(EDGES.T)), num_nodes=N)
    assert g.csr()[0].tolist() == dfgnn.Graph(np.ascontiguousarray(EDGES.T), num_nodes=N).csr()[0].tolist()
    out = cp.empty((N, heads, dim), cp.float32)
    lse = cp.empty((N, heads), cp.float32)
    stream = cp.cuda.get_current_stream()
    alloc = lambda n: cp.empty(n, cp.uint8)  # noqa: E731
    dfgnn.ops.forward(g, model, dev, out, lse, stream=stream.ptr, allocator=alloc)
    ref_in = {k: v.astype(np.float64) for k, v in host.items()}
    want, want_lse = dfgnn.reference_forward(g, model, ref_in)
    np.testing.assert_allclose(cp.asnumpy(out), want, rtol=1e-4, atol=1e-5)
    finite = np.isfinite(want_lse)
    np.testing.assert_allclose(cp.asnumpy(lse)[finite], want_lse[finite], rtol=1e-4, atol=1e-5)
    go = rng.standard_normal((N, heads, dim)).astype(np.float32)
    grads = {k: cp.empty_like(v) for k, v in dev.items()}
    dfgnn.ops.backward(g, model, dev, out, lse, cp.asarray(go), grads, stream=stream.ptr, allocator=alloc)
    ref = dfgnn.reference_backward(g, model, ref_in, go.astype(np.float64))
    for k in dev:
        np.testing.assert_allclose(cp.asnumpy(grads[k]), ref[k], rtol=1e-3, atol=1e-4, err_msg=k)
