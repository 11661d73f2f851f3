"""dfgnn.torch's lean CUDA call path (python_bindings/dfgnn/torch/_calls.py, _cuda_forward / _cuda_backward,
and _dfgnn.make_launch / Launch in python_bindings/src/dfgnn_ext.cpp).

A call looks up a prepared launch per (graph, op configuration, schedule, kind of arguments), made
by the first call of that kind, which validates the arrays as _dfgnn.forward / backward do; later
calls pass raw pointers. Checked here:
- without a GPU: make_launch rejects bad arrays with exactly the errors of _dfgnn.forward / backward
  (and a bad schedule with the error of the workspace size query that ran first before);
- on a GPU: the lean path gives the DLPack path's results bitwise (dfgnn.ops with the same op),
  warm calls make no op, query no workspace size, build no DLPack capsule and enter no device
  context; a bad call fails the same way every time (nothing of it is cached); a schedule with a
  workspace gets a fresh one per call from torch's allocator (none outlives its call, on any stream,
  captured or not); a graph build inside a capture is refused; the prepared launches go with their
  Graph.
"""

import gc
import weakref

import numpy as np
import pytest

import dfgnn
from dfgnn import _dfgnn
from conftest import HAS_TORCH, call_op, requires_torch_cuda, torch_inputs

if HAS_TORCH:
    import torch
    import dfgnn.torch as dt
    from dfgnn.torch import _calls

@pytest.fixture(autouse=True)
def python_path_only(monkeypatch):
    """These tests are about the Python call path: warm calls stay on it (the native ops, which take
    warm CUDA calls otherwise, have their own tests in test_native_ops.py)."""
    if HAS_TORCH:
        from dfgnn.torch import _native
        monkeypatch.setattr(_native, "ops", lambda: None)


EDGES = np.array([(0, 1), (0, 1), (1, 2), (3, 2), (4, 2), (5, 2), (0, 2), (2, 0), (3, 3), (4, 5),
                  (5, 4), (1, 3), (6, 2), (2, 1)])
N, H, D = 7, 2, 4
MODELS = ["gat", "gatv2", "transformer", "agnn"]


def small_graph():
    return dfgnn.Graph(np.ascontiguousarray(EDGES.T), num_nodes=N)


def _f32(*shape):
    return np.zeros(shape, dtype=np.float32)


def _inputs(model, n=N):
    return {"gat": dict(h=_f32(n, H, D), att_src=_f32(H, D), att_dst=_f32(H, D)),
            "gatv2": dict(h=_f32(n, H, D), h_dst=_f32(n, H, D), att_src=_f32(H, D)),
            "transformer": dict(q=_f32(n, H, D), k=_f32(n, H, D), v=_f32(n, H, D)),
            "agnn": dict(h=_f32(n, H, D), beta=_f32(1))}[model]


def _error(fn):
    with pytest.raises(dfgnn.Error) as info:
        fn()
    e = info.value
    return type(e), str(e)


def _bad_calls(model):
    """(name, inputs, out, lse) of bad first calls: shapes, dtypes, slots, contiguity; and finally
    good shapes on the host (GPU ops take CUDA arrays)."""
    good = _inputs(model)
    first = next(iter(good))
    out, lse = _f32(N, H, D), _f32(N, H)
    cases = [("rows", {**good, first: _f32(N + 1, H, D)}, out, lse),
             ("heads", {**good, first: _f32(N, H + 1, D)}, out, lse),
             ("dtype", {**good, first: np.zeros((N, H, D))}, out, lse),
             ("missing", {k: v for k, v in good.items() if k != first}, out, lse),
             ("extra", {**good, "beta" if model != "agnn" else "q": _f32(1)}, out, lse),
             ("layout", {**good, first: np.asfortranarray(np.zeros((N, H, D), np.float32))}, out, lse),
             ("out shape", good, _f32(N, H, D + 1), lse),
             ("lse shape", good, out, _f32(N, H + 1)),
             ("host arrays", good, out, lse)]
    return cases


@pytest.mark.parametrize("model", MODELS)
def test_make_launch_forward_errors_equal_forward(model):
    """For each bad first call, make_launch raises what _dfgnn.forward raises (same class, message,
    status): the lean path keeps the DLPack path's validation and errors."""
    g = small_graph()
    ctx = _dfgnn.default_context()
    op = dfgnn.op(model, "float32", H, D)
    for name, inputs, out, lse in _bad_calls(model):
        want = _error(lambda: _dfgnn.forward(ctx, g._h, op, inputs, out, lse, 0, None, None))
        got = _error(lambda: _dfgnn.make_launch(ctx, g._h, op, dfgnn.Direction.FORWARD, None, inputs, out, lse,
                                                None, None))
        assert got == want, name


@pytest.mark.parametrize("model", MODELS)
def test_make_launch_backward_errors_equal_backward(model):
    g = small_graph()
    ctx = _dfgnn.default_context()
    op = dfgnn.op(model, "float32", H, D)
    for name, inputs, out, lse in _bad_calls(model):
        grads = {k: np.zeros_like(v) for k, v in _inputs(model).items()}
        go = _f32(N, H, D)
        want = _error(lambda: _dfgnn.backward(ctx, g._h, op, inputs, out, lse, go, grads, 0, None, None))
        got = _error(lambda: _dfgnn.make_launch(ctx, g._h, op, dfgnn.Direction.BACKWARD, None, inputs, out, lse,
                                                go, grads))
        assert got == want, name
    inputs, out = _inputs(model), _f32(N, H, D)
    grads = {k: np.zeros_like(v) for k, v in inputs.items()}
    for name, go, gr, lse in (("grad_out", _f32(N, H, D + 1), grads, _f32(N, H)),
                              ("grads", _f32(N, H, D), {k: v for k, v in list(grads.items())[1:]}, _f32(N, H)),
                              ("no lse", _f32(N, H, D), grads, None)):
        want = _error(lambda: _dfgnn.backward(ctx, g._h, op, inputs, out, lse, go, gr, 0, None, None))
        got = _error(lambda: _dfgnn.make_launch(ctx, g._h, op, dfgnn.Direction.BACKWARD, None, inputs, out, lse,
                                                go, gr))
        assert got == want, name


def test_make_launch_bad_schedule_is_the_size_query_error():
    """A bad forced schedule fails as the workspace size query (which ran first on the old path)."""
    g = small_graph()
    ctx = _dfgnn.default_context()
    op = dfgnn.op("gat", "float32", H, D)
    inputs, out, lse = _inputs("gat"), _f32(N, H, D), _f32(N, H)
    for schedule in ("subwarp:lanes=3", "nonsense", "subwarp:lanes=32,groups=8,vec=4|subwarp:lanes=32"):
        want = _error(lambda: _dfgnn.workspace_size(ctx, g._h, op, dfgnn.Direction.FORWARD, schedule))
        got = _error(lambda: _dfgnn.make_launch(ctx, g._h, op, dfgnn.Direction.FORWARD, schedule, inputs, out, lse,
                                                None, None))
        assert got == want, schedule


# ---------------------------------------------------------------- CUDA


def _ops_reference(model, g, t, **kw):
    """(out, grads) through dfgnn.ops (the DLPack path) with the op the torch function makes."""
    dev = {k: v.detach().contiguous() for k, v in t.items()}
    stream = torch.cuda.current_stream().cuda_stream
    alloc = lambda nbytes: torch.empty(nbytes, dtype=torch.uint8, device="cuda")  # noqa: E731
    out = torch.empty(N, H, D, device="cuda")
    lse = torch.empty(N, H, device="cuda")
    dfgnn.ops.forward(g, model, dev, out, lse, stream=stream, allocator=alloc, **kw)
    grads = {k: torch.empty_like(v) for k, v in dev.items()}
    dfgnn.ops.backward(g, model, dev, out, lse, torch.ones_like(out), grads, stream=stream, allocator=alloc, **kw)
    return out, grads


@requires_torch_cuda
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("functions", [True, False], ids=["functions", "custom_ops"])
def test_cuda_lean_path_equals_dlpack_path(model, functions, monkeypatch):
    """Cold and warm calls of the torch function equal dfgnn.ops' DLPack path bitwise, forward and
    backward, with and without dropout, on both eager paths."""
    monkeypatch.setattr(dt, "use_functions_in_eager", functions)
    g = small_graph()
    _, t = torch_inputs(model, N, H, D, "cuda", torch.float32)
    for kw in (dict(), dict(dropout=0.3, dropout_seed=5)):
        want_out, want_grads = _ops_reference(model, g, t, **kw)
        for _ in range(3):
            for x in t.values():
                x.grad = None
            out = call_op(model, g, t, **kw)
            out.backward(torch.ones_like(out))
            assert torch.equal(out, want_out)
            for k in t:
                assert torch.equal(t[k].grad, want_grads[k]), k


def _forbid(monkeypatch, obj, name):
    def fail(*args, **kwargs):
        raise AssertionError(f"{name} called on a warm call")
    monkeypatch.setattr(obj, name, fail)


@requires_torch_cuda
@pytest.mark.parametrize("model", MODELS)
def test_cuda_warm_calls_do_only_the_launch(model, monkeypatch):
    """After a first forward+backward, calls make no op (make_op), no Launch, query no workspace size,
    export no DLPack capsule and enter no torch.cuda.device block (the tensors are on the current
    device), and still give the first call's results."""
    g = small_graph()
    _, t = torch_inputs(model, N, H, D, "cuda", torch.float32)
    first = call_op(model, g, t, dropout=0.2, dropout_seed=9)
    first.backward(torch.ones_like(first))
    want = [first.detach().clone()] + [x.grad.clone() for x in t.values()]
    for obj, name in ((_calls, "make_op"), (_dfgnn, "make_launch"), (_dfgnn, "workspace_size"), (_calls, "_dl"),
                      (torch.cuda, "device")):
        _forbid(monkeypatch, obj, name)
    for _ in range(2):
        for x in t.values():
            x.grad = None
        out = call_op(model, g, t, dropout=0.2, dropout_seed=9)
        out.backward(torch.ones_like(out))
        for a, b in zip([out] + [x.grad for x in t.values()], want):
            assert torch.equal(a, b)


@requires_torch_cuda
def test_cuda_bad_call_fails_every_time():
    """A call that fails validation leaves nothing cached: it fails the same way again, and a good
    call on the same graph still works."""
    g = small_graph()
    _, t = torch_inputs("transformer", N, H, D, "cuda", torch.float32)
    bad = dict(t, q=torch.randn(N + 1, H, D, device="cuda"))
    errors = []
    for _ in range(2):
        with pytest.raises(dfgnn.InvalidArgumentError) as info:
            call_op("transformer", g, bad)
        errors.append(str(info.value))
    assert errors[0] == errors[1] and "must have shape [N, H, D]" in errors[0]
    out = call_op("transformer", g, t)
    assert out.shape == (N, H, D)


@requires_torch_cuda
def test_cuda_features_on_two_devices_are_rejected():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices")
    g = small_graph()
    _, t = torch_inputs("transformer", N, H, D, "cuda", torch.float32)
    call_op("transformer", g, t)
    other = dict(t, k=t["k"].detach().to("cuda:1"))
    with pytest.raises(dfgnn.InvalidArgumentError, match="same device"):
        call_op("transformer", g, other)


@requires_torch_cuda
def test_cuda_workspace_per_call_on_streams_and_in_cuda_graphs():
    """A schedule that needs scratch (hub split rows on a graph with hubs): results equal the reference
    ops on the current stream, on a side stream, and in a captured CUDA graph replayed after eager
    calls. Nothing of the scratch outlives a call: _Prepared holds no tensor (CUDA graph trees refuse
    pool allocations that outlive their warm-up), and every call's scratch comes back to torch's
    allocator (allocated memory returns to where it was)."""
    g = dfgnn.Graph.planted_hubs(3000, 8, 2, 1500, seed=3)
    n = g.num_nodes
    op = dfgnn.op("transformer", "float32", H, D)
    schedules = [s for s in dfgnn.ops.list_schedules(g, op, "forward")
                 if dfgnn.ops.workspace_size(g, op, "forward", s) > 0]
    assert schedules, "no forward schedule with a workspace on this graph"
    schedule = schedules[0]
    inputs, t = torch_inputs("transformer", n, H, D, "cuda", torch.float32)
    want, _ = dfgnn.reference_forward(g, "transformer", inputs)
    check = lambda out: np.testing.assert_allclose(out.double().cpu().numpy(), want, rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        check(dt.transformer(g, t["q"], t["k"], t["v"], schedule=schedule))
        (prep,) = [p for key, p in dt._launches[g].items() if key[1] == schedule]
        assert not any(isinstance(getattr(prep, f), torch.Tensor) for f in prep.__slots__)
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        out = dt.transformer(g, t["q"], t["k"], t["v"], schedule=schedule)
        del out
        torch.cuda.synchronize()
        assert torch.cuda.memory_allocated() == before, "a call's scratch outlived it"
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            on_side = dt.transformer(g, t["q"], t["k"], t["v"], schedule=schedule)
        torch.cuda.current_stream().wait_stream(side)
        check(on_side)
        cuda_graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(cuda_graph):
            static = dt.transformer(g, t["q"], t["k"], t["v"], schedule=schedule)
        for _ in range(2):
            dt.transformer(g, t["q"], t["k"], t["v"], schedule=schedule)
        cuda_graph.replay()
    check(static)


@requires_torch_cuda
def test_cuda_prepared_launches_go_with_their_graph():
    g = small_graph()
    _, t = torch_inputs("gat", N, H, D, "cuda", torch.float32)
    call_op("gat", g, t).sum().backward()
    assert len(dt._launches[g]) == 1
    ref = weakref.ref(g)
    del g
    gc.collect()
    assert ref() is None
    assert all(k() is not None for k in dt._launches.keyrefs())


@requires_torch_cuda
def test_cuda_graph_capture_refuses_to_build_a_graph_from_an_edge_index():
    """A graph build inside a CUDA graph capture (what torch.compile's reduce-overhead would do with
    an edge_index it copied into a static buffer) is refused with a message naming the fix, before
    any CUDA call, so the capture itself stays valid; a Graph built and called once before capture works
    there (a graph's first call plans and allocates, which a capture forbids, as for every op)."""
    g = small_graph()
    ei = torch.from_numpy(g.edge_index()).cuda()
    _, t = torch_inputs("transformer", N, H, D, "cuda", torch.float32)
    with torch.no_grad():
        want = dt.transformer(ei, t["q"], t["k"], t["v"])  # warm: kernels compiled, graph cached
        fresh = ei.clone()  # same content, a new tensor: not in the op's graph cache
        cuda_graph = torch.cuda.CUDAGraph()
        with pytest.raises(dfgnn.InvalidArgumentError, match="build it before"):
            with torch.cuda.graph(cuda_graph):
                dt.transformer(fresh, t["q"], t["k"], t["v"])
        built = dt.graph(fresh, N)
        dt.transformer(built, t["q"], t["k"], t["v"])  # its first call (plans, launch) before capture
        torch.cuda.synchronize()
        cuda_graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(cuda_graph):
            static = dt.transformer(built, t["q"], t["k"], t["v"])
        cuda_graph.replay()
    torch.testing.assert_close(static, want)
