"""dfgnn.torch: autograd ops and PyG-style layers. Skipped without PyTorch (CPU float64 path) or
without a CUDA device (fused kernels); the skip reason says which."""

import functools
import importlib.util

import numpy as np
import pytest

import dfgnn
import npref
from conftest import (HAS_TORCH, LAYER_TOL, call_op, check_layer_grads, dataset_roots, find_dataset, rel_error,
                      requires_torch, requires_torch_cuda, torch_inputs)

if HAS_TORCH:
    import torch
    import dfgnn.torch as dt

HAS_PYG = importlib.util.find_spec("torch_geometric") is not None
requires_pyg = pytest.mark.skipif(not HAS_PYG, reason="torch_geometric is not installed")

MODELS = ["gat", "gatv2", "transformer", "agnn"]
EDGES = np.array([(0, 1), (0, 1), (1, 2), (3, 2), (4, 2), (5, 2), (0, 2), (2, 0), (3, 3), (4, 5),
                  (5, 4), (1, 3), (6, 2), (2, 1)])
N = 7


# ---------------------------------------------------------------- CPU float64 path (torch only)


@requires_torch
@pytest.mark.parametrize("model", MODELS)
def test_cpu_float64_forward_backward(model):
    g = dfgnn.Graph(np.ascontiguousarray(EDGES.T), num_nodes=N)
    inputs, t = torch_inputs(model, N, 2, 3, "cpu", torch.float64)
    out = call_op(model, g, t)
    want, _ = npref.forward(model, N, EDGES, inputs)
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-12, atol=1e-12)
    grad_out = torch.randn_like(out)
    out.backward(grad_out)
    ref = dfgnn.reference_backward(g, model, inputs, grad_out.numpy())
    for k in inputs:
        np.testing.assert_allclose(t[k].grad.numpy(), ref[k], rtol=1e-12, atol=1e-12)


@requires_torch
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("graph_arg", ["graph", "edge_index"])
def test_eager_functions_match_the_custom_ops(model, graph_arg, monkeypatch):
    # Eager calls take the autograd Functions (less host time), torch.compile the custom ops: same
    # results, bitwise, with attention dropout on.
    ei = torch.tensor(EDGES.T.copy())
    g = dfgnn.Graph(np.ascontiguousarray(EDGES.T), num_nodes=N) if graph_arg == "graph" else ei
    results = {}
    for eager_functions in (True, False):
        monkeypatch.setattr(dt, "use_functions_in_eager", eager_functions)
        _, t = torch_inputs(model, N, 2, 3, "cpu", torch.float64)
        out = call_op(model, g, t, dropout=0.3, dropout_seed=11)
        expected = f"{_FUNCTION_NAMES[model]}Backward"
        assert (type(out.grad_fn).__name__ == expected) == eager_functions, type(out.grad_fn).__name__
        out.backward(torch.linspace(-1, 1, out.numel(), dtype=torch.float64).view_as(out))
        results[eager_functions] = [out.detach()] + [t[k].grad for k in t]
    for a, b in zip(results[True], results[False]):
        assert torch.equal(a, b)


@requires_torch
def test_vmap_takes_the_custom_ops():
    # torch.func transforms wrap tensors; the eager Functions do not support them, the custom ops do
    # (through torch's batching fallback): each vmapped slice equals the unbatched call.
    g = dfgnn.Graph(np.ascontiguousarray(EDGES.T), num_nodes=N)
    _, t = torch_inputs("transformer", N, 2, 3, "cpu", torch.float64)
    q = torch.stack([t["q"].detach(), 2 * t["q"].detach()])
    k, v = t["k"].detach(), t["v"].detach()
    out = torch.vmap(lambda qq: dt.transformer(g, qq, k, v))(q)
    for b in range(2):
        assert torch.equal(out[b], dt.transformer(g, q[b], k, v))


_FUNCTION_NAMES = {"gat": "GATFunction", "gatv2": "GATv2Function", "transformer": "TransformerFunction",
                   "agnn": "AGNNFunction"}


@requires_torch
@pytest.mark.parametrize("model", MODELS)
def test_gradcheck_float64(model):
    g = dfgnn.Graph(np.ascontiguousarray(EDGES.T), num_nodes=N)
    _, t = torch_inputs(model, N, 2, 3, "cpu", torch.float64)
    names = list(t)
    fn = lambda *xs: call_op(model, g, dict(zip(names, xs)))  # noqa: E731
    assert torch.autograd.gradcheck(fn, tuple(t[k] for k in names), eps=1e-6, atol=1e-6)


@requires_torch
def test_edge_index_tensor_is_cached():
    ei = torch.tensor(EDGES.T.copy())
    g1 = dt.graph(ei, N)
    assert dt.graph(ei, N) is g1
    assert dt.graph(ei, N, add_self_loops=True) is not g1
    ei[0, 0] = 3      # in-place change: rebuilt
    assert dt.graph(ei, N) is not g1


@requires_torch
def test_cpu_float32_is_rejected():
    g = dfgnn.Graph(np.ascontiguousarray(EDGES.T), num_nodes=N)
    _, t = torch_inputs("gat", N, 1, 4, "cpu", torch.float32)
    with pytest.raises(dfgnn.DTypeError, match="float64 reference ops"):
        call_op("gat", g, t)


# ---------------------------------------------------------------- layers vs PyG (float64 on the CPU)


def _pyg_pair(name, **kw):
    import torch_geometric.nn as pnn
    ours = getattr(dt, name)(**kw).double()
    theirs = getattr(pnn, name)(**kw).double()
    theirs.load_state_dict(ours.state_dict())
    return ours, theirs


@requires_torch
@requires_pyg
@pytest.mark.parametrize("name,kw", [
    # slopes exactly representable in the op's float (0.2 becomes 0.2f in the fused output)
    ("GATConv", dict(in_channels=5, out_channels=4, heads=3, negative_slope=0.25)),
    ("GATConv", dict(in_channels=5, out_channels=4, heads=2, add_self_loops=False, negative_slope=0.5)),
    ("GATv2Conv", dict(in_channels=5, out_channels=4, heads=3, negative_slope=0.25)),
    ("GATv2Conv", dict(in_channels=5, out_channels=4, heads=2, share_weights=True, negative_slope=0.25)),
    ("TransformerConv", dict(in_channels=5, out_channels=4, heads=3)),
])
@pytest.mark.parametrize("flag", [True, False])
def test_attention_weights_match_pyg(name, kw, flag):
    # return_attention_weights as PyG 2.8: (out, (edge_index, alpha)); GATConv and GATv2Conv for a
    # true flag only, TransformerConv for any bool. Edges come in another order, so alpha is compared
    # per (source, target) pair (no duplicate edges here).
    torch.manual_seed(0)
    ours, theirs = _pyg_pair(name, **kw)
    ours.eval(), theirs.eval()
    edges = torch.tensor([(0, 1), (1, 2), (3, 2), (4, 2), (5, 2), (0, 2), (2, 0), (3, 3), (4, 5), (5, 4), (1, 3),
                          (6, 2), (2, 1)]).t().contiguous()
    x = torch.randn(N, 5, dtype=torch.float64, requires_grad=True)
    got, expected = ours(x, edges, return_attention_weights=flag), theirs(x, edges, return_attention_weights=flag)
    if isinstance(expected, torch.Tensor):
        assert not flag and name != "TransformerConv" and isinstance(got, torch.Tensor)
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
        return
    out, (ei, alpha) = got
    want, (pei, palpha) = expected
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-12)
    assert alpha.shape == palpha.shape and ei.shape == pei.shape
    mine = {(int(s), int(d)): alpha[e] for e, (s, d) in enumerate(ei.t())}
    assert len(mine) == ei.shape[1]
    for e, (s, d) in enumerate(pei.t()):
        torch.testing.assert_close(mine[(int(s), int(d))], palpha[e], rtol=1e-10, atol=1e-12)
    # differentiable, like PyG's
    g_ours = torch.autograd.grad((alpha * torch.arange(alpha.numel()).view_as(alpha)).sum(), x)[0]
    key = {(int(s), int(d)): e for e, (s, d) in enumerate(pei.t())}
    perm = torch.tensor([key[(int(s), int(d))] for s, d in ei.t()])
    g_theirs = torch.autograd.grad((palpha[perm] * torch.arange(alpha.numel()).view_as(alpha)).sum(), x)[0]
    torch.testing.assert_close(g_ours, g_theirs, rtol=1e-9, atol=1e-12)


@requires_torch
def test_attention_weights_refused_with_training_dropout():
    layer = dt.GATConv(5, 4, heads=2, dropout=0.5).double().train()
    x = torch.randn(N, 5, dtype=torch.float64)
    with pytest.raises(NotImplementedError, match="return_attention_weights with attention dropout"):
        layer(x, torch.tensor(EDGES.T.copy()), return_attention_weights=True)


@requires_torch
@requires_pyg
@pytest.mark.parametrize("name,kw", [
    ("GATConv", dict(in_channels=5, out_channels=4, heads=3)),
    ("GATConv", dict(in_channels=5, out_channels=4, heads=2, concat=False, residual=True, negative_slope=0.25)),
    ("GATv2Conv", dict(in_channels=5, out_channels=4, heads=3)),
    ("GATv2Conv", dict(in_channels=5, out_channels=4, heads=2, share_weights=True, negative_slope=0.25)),
    ("TransformerConv", dict(in_channels=5, out_channels=4, heads=3)),
    ("TransformerConv", dict(in_channels=5, out_channels=4, heads=2, concat=False, beta=True)),
    ("AGNNConv", dict()),
])
def test_layers_match_pyg(name, kw):
    torch.manual_seed(0)
    ours, theirs = _pyg_pair(name, **kw)
    x = torch.randn(N, 5, dtype=torch.float64)
    ei = torch.tensor(EDGES.T.copy())
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    a, b = ours(x1, ei), theirs(x2, ei)
    # dfgnn_op_t holds negative_slope as a float: PyG's default 0.2 becomes 0.2f (relative 1.5e-8)
    slope = kw.get("negative_slope", 0.2)
    tol = dict(rtol=1e-10, atol=1e-10) if name in ("TransformerConv", "AGNNConv") or slope == 0.25 else \
        dict(rtol=1e-7, atol=1e-8)
    torch.testing.assert_close(a, b, **tol)
    go = torch.randn_like(a)
    a.backward(go)
    b.backward(go)
    torch.testing.assert_close(x1.grad, x2.grad, **tol)
    theirs_params = dict(theirs.named_parameters())
    for pname, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, theirs_params[pname].grad, **tol, msg=pname)


# ---------------------------------------------------------------- fused kernels (CUDA)

TOL = {"float32": dict(rtol=1e-4, atol=1e-5), "float16": dict(rtol=2e-2, atol=2e-2),
       "bfloat16": dict(rtol=5e-2, atol=5e-2)}


@requires_torch_cuda
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("dtype_name", ["float32", "float16", "bfloat16"])
def test_cuda_matches_reference(model, dtype_name):
    dtype, tol = getattr(torch, dtype_name), TOL[dtype_name]
    g = dfgnn.Graph(np.ascontiguousarray(EDGES.T), num_nodes=N)
    inputs, t = torch_inputs(model, N, 2, 8, "cuda", dtype)
    out = call_op(model, g, t)
    assert out.dtype == dtype and out.is_cuda
    # the reference on the inputs as rounded to dtype
    rounded = {k: v.detach().double().cpu().numpy() for k, v in t.items()}
    want, _ = dfgnn.reference_forward(g, model, rounded)
    torch.testing.assert_close(out.double().cpu(), torch.from_numpy(want), **tol)
    go = torch.randn_like(out)
    out.backward(go)
    ref = dfgnn.reference_backward(g, model, rounded, go.double().cpu().numpy())
    for k in t:
        torch.testing.assert_close(t[k].grad.double().cpu(), torch.from_numpy(ref[k]), **tol, msg=k)


@requires_torch_cuda
def test_cuda_deterministic_and_stream():
    g = dfgnn.Graph.planted_hubs(5000, 8, 2, 3000, seed=1, add_self_loops=True)
    torch.manual_seed(1)
    h = torch.randn(5000, 4, 16, device="cuda", requires_grad=True)
    a_s = torch.randn(4, 16, device="cuda", requires_grad=True)
    a_d = torch.randn(4, 16, device="cuda", requires_grad=True)
    results = []
    s = torch.cuda.Stream()
    for run in range(2):
        for p in (h, a_s, a_d):
            p.grad = None
        with torch.cuda.stream(s if run else torch.cuda.current_stream()):
            out = dt.gat(g, h, a_s, a_d)
            out.square().sum().backward()
        torch.cuda.synchronize()
        results.append([out.detach().clone()] + [p.grad.clone() for p in (h, a_s, a_d)])
    for x, y in zip(*results):
        assert torch.equal(x, y)


LAYERS = [
    ("GATConv", dict(in_channels=16, out_channels=8, heads=8)),
    ("GATv2Conv", dict(in_channels=16, out_channels=8, heads=4)),
    ("TransformerConv", dict(in_channels=16, out_channels=16, heads=4)),
    ("AGNNConv", dict()),
]


@functools.lru_cache(maxsize=None)
def _test_graph(name):
    """int64 [2, E] edge_index (NumPy) of a GPU test graph, or None when the dataset is absent."""
    if name == "hubs":
        # hub-heavy: 20000 nodes with 8 in-edges each, plus 4 hubs with 4000 in- and out-edges
        return dfgnn.Graph.planted_hubs(20000, 8, 4, 4000, seed=7).edge_index()
    d = find_dataset(name)
    return None if d is None else dfgnn.Graph.from_file(d).edge_index()


_rel = rel_error


@requires_torch_cuda
@requires_pyg
@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
@pytest.mark.parametrize("graph_name", ["cora", "pubmed", "hubs"])
@pytest.mark.parametrize("name,kw", LAYERS)
def test_cuda_layers_match_pyg(name, kw, graph_name, precision):
    import torch_geometric.nn as pnn
    edges = _test_graph(graph_name)
    if edges is None:
        pytest.skip(f"dataset {graph_name} not found under {', '.join(map(str, dataset_roots()))} "
                    "(set DFGNN_DATASETS)")
    torch.manual_seed(0)
    ours = getattr(dt, name)(**kw).cuda()
    theirs = getattr(pnn, name)(**kw).cuda().double()
    theirs.load_state_dict(ours.state_dict())
    ei = torch.from_numpy(edges).cuda()
    n = int(edges.max()) + 1
    x = torch.randn(n, 16, device="cuda")
    x1, x2 = x.clone().requires_grad_(), x.double().requires_grad_()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bfloat16"):
        a = ours(x1, ei)
    b = theirs(x2, ei)
    out_tol, grad_tol = LAYER_TOL[precision]
    assert _rel(a, b) < out_tol, f"output: relative error {_rel(a, b):.3g}"
    go = torch.randn_like(b)
    a.backward(go.to(a.dtype))
    b.backward(go)
    check_layer_grads(ours, theirs, {"x": (x1.grad, x2.grad)}, grad_tol)


@requires_torch_cuda
def test_cuda_layers_deterministic():
    """Two identical training steps (hub-heavy graph, split rows) give bitwise-identical gradients."""
    ei = torch.from_numpy(_test_graph("hubs")).cuda()
    n = int(ei.max()) + 1
    grads = []
    for _ in range(2):
        torch.manual_seed(3)
        model = torch.nn.ModuleList([dt.GATConv(32, 8, heads=8), dt.TransformerConv(64, 16, heads=4),
                                     dt.GATv2Conv(64, 8, heads=2), dt.AGNNConv()]).cuda()
        x = torch.randn(n, 32, device="cuda", requires_grad=True)
        h = x
        for layer in model:
            h = torch.relu(layer(h, ei))
        h.square().sum().backward()
        grads.append([x.grad] + [p.grad for p in model.parameters()])
    for i, (g1, g2) in enumerate(zip(*grads)):
        assert torch.equal(g1, g2), f"gradient {i} differs between two identical runs"


@requires_torch_cuda
def test_cuda_errors():
    g = dfgnn.Graph(np.ascontiguousarray(EDGES.T), num_nodes=N)
    _, t = torch_inputs("gat", N, 1, 4, "cuda", torch.float32)
    with pytest.raises(dfgnn.DeviceError):
        dt.GATFunction.apply(g, t["h"], t["att_src"].cpu(), t["att_dst"], 0.2, None)
    with pytest.raises(dfgnn.InvalidArgumentError, match="the graph has 7 nodes"):
        dt.gat(g, t["h"][:5], t["att_src"], t["att_dst"])
    with pytest.raises(dfgnn.DTypeError):
        dt.GATFunction.apply(g, t["h"], t["att_src"].double(), t["att_dst"], 0.2, None)
