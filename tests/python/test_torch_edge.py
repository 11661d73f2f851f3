"""Edge features (PyG's edge_dim) in dfgnn.torch: the ops' ``edge`` argument (eager autograd Functions
and torch custom ops), the layers' ``edge_dim`` / ``edge_attr`` / ``fill_value`` against PyG 2.8 with the
same weights, torch.compile, and the errors. The CPU tests run the float64 reference path (torch, and
torch_geometric for the comparisons); the CUDA tests skip without a device.

Decisions recorded here (PyG differs):
- an edge_attr given to a layer without edge_dim is an error (PyG's GATConv ignores it, GATv2Conv
  asserts, TransformerConv adds it unprojected to the values);
- a layer with edge_dim called without edge_attr is an error (PyG's GATConv and GATv2Conv leave the
  edge term out, TransformerConv asserts);
- a 1-D edge_attr [E] is [E, 1] for GATConv and GATv2Conv as in PyG; TransformerConv rejects it
  (PyG's fails in lin_edge);
- with a prebuilt dfgnn.Graph, edge_attr has one row per edge id of the graph, its added self-loops
  included (dt.self_loop_edge_attr makes them from the input edges as PyG does)."""

import functools
import importlib.util
import math

import numpy as np
import pytest

import dfgnn
from conftest import (HAS_TORCH, LAYER_TOL, SLOPE32, check_layer_grads, dataset_roots, find_dataset, pyg_pair,
                      rel_error, requires_torch, requires_torch_cuda)

if HAS_TORCH:
    import torch
    import dfgnn.torch as dt

pytestmark = requires_torch

HAS_PYG = importlib.util.find_spec("torch_geometric") is not None
requires_pyg = pytest.mark.skipif(not HAS_PYG, reason="torch_geometric is not installed")

# Duplicate edges (0->1, 5->5), existing self-loops (3->3, 5->5 twice), node 6 only sends, node 7 is isolated.
EDGES = [(0, 1), (0, 1), (1, 2), (3, 2), (4, 2), (5, 2), (0, 2), (2, 0), (3, 3), (4, 5), (5, 4), (1, 3), (6, 2),
         (2, 1), (5, 5), (5, 5), (2, 4)]
N, H, D = 8, 2, 3
E = len(EDGES)
E_LOOPS = E - 3 + N  # the graph with add_self_loops: loops removed, one per node added
TOL = dict(rtol=1e-10, atol=1e-10)
EDGE_MODELS = ["gat", "gatv2", "transformer"]
_FUNCTION_NAMES = {"gat": "GATFunction", "gatv2": "GATv2Function", "transformer": "TransformerFunction"}


def edge_index():
    return torch.tensor(EDGES).t().contiguous()


def rand(*shape, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


@pytest.fixture(params=[True, False], ids=["functions", "custom_ops"])
def eager_functions(request, monkeypatch):
    """Runs a test once with the eager autograd Functions and once with the torch custom ops."""
    monkeypatch.setattr(dt, "use_functions_in_eager", request.param)
    return request.param


# ---------------------------------------------------------------- the ops' edge argument


def op_inputs(model, n=N, e=E, seed=0):
    """The tensor arguments of an op in call order and its edge input (float64, requiring grad)."""
    f = lambda s: rand(n, H, D, seed=seed + s).requires_grad_()  # noqa: E731
    p = lambda s: rand(H, D, seed=seed + s).requires_grad_()  # noqa: E731
    xs = {"gat": [f(1), p(2), p(3)], "gatv2": [f(1), f(2), p(3)], "transformer": [f(1), f(2), f(3)]}[model]
    edge = rand(e, H, seed=seed + 4) if model == "gat" else rand(e, H, D, seed=seed + 4)
    return xs, edge.requires_grad_()


def call(model, g, xs, edge, **kw):
    return getattr(dt, model)(g, *xs, edge=edge, **kw)


def torch_attention(model, ei, n, xs, edge):
    """The ops' formulas (dfgnn.h, dfgnn_op_t.edge_features) with torch ops, over ei [2, E] in edge
    id order: a softmax per target of the scores, then the sum of the weighted values."""
    src, dst = ei[0], ei[1]
    leaky = lambda z: torch.nn.functional.leaky_relu(z, SLOPE32)  # noqa: E731
    if model == "gat":
        h, a_src, a_dst = xs
        scores = leaky((h * a_dst).sum(-1)[dst] + (h * a_src).sum(-1)[src] + edge)
        values = h[src]
    elif model == "gatv2":
        h, h_dst, att = xs
        scores = (leaky(h_dst[dst] + h[src] + edge) * att).sum(-1)
        values = h[src]
    else:
        q, k, v = xs
        scores = (q[dst] * (k[src] + edge)).sum(-1) / math.sqrt(q.shape[-1])
        values = v[src] + edge
    heads = scores.shape[1]
    row_max = scores.new_full((n, heads), float("-inf")).scatter_reduce(
        0, dst.unsqueeze(1).expand_as(scores), scores, "amax")
    w = torch.exp(scores - row_max[dst])
    alpha = w / w.new_zeros((n, heads)).index_add(0, dst, w)[dst]
    return values.new_zeros((n,) + values.shape[1:]).index_add(0, dst, alpha.unsqueeze(-1) * values)


def loop_edges():
    """The edges of Graph(edge_index(), add_self_loops=True) in edge id order."""
    ei = edge_index()
    ei = ei[:, ei[0] != ei[1]]
    loops = torch.arange(N).repeat(2, 1)
    return torch.cat([ei, loops], dim=1)


@pytest.mark.parametrize("model", EDGE_MODELS)
@pytest.mark.parametrize("graph_kind", ["Graph", "edge_index", "edge_index+loops", "Graph+loops"])
def test_op_with_edge_matches_torch(eager_functions, model, graph_kind):
    loops = graph_kind.endswith("+loops")
    ei = edge_index()
    g = dfgnn.Graph(ei.numpy(), N, add_self_loops=loops) if graph_kind.startswith("Graph") else ei
    xs, edge = op_inputs(model, e=E_LOOPS if loops else E)
    out = call(model, g, xs, edge, add_self_loops=loops)
    assert (type(out.grad_fn).__name__ == f"{_FUNCTION_NAMES[model]}Backward") == eager_functions
    xs2 = [x.detach().clone().requires_grad_() for x in xs]
    edge2 = edge.detach().clone().requires_grad_()
    want = torch_attention(model, loop_edges() if loops else ei, N, xs2, edge2)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    go = rand(*out.shape, seed=9)
    out.backward(go)
    want.backward(go)
    for i, (a, b) in enumerate(zip(xs + [edge], xs2 + [edge2])):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-11, atol=1e-12, msg=f"gradient {i}")


@pytest.mark.parametrize("model", EDGE_MODELS)
def test_op_edge_changes_the_result(model):
    # guards the comparisons above against an edge input that would be dropped on the way
    g = dfgnn.Graph(edge_index().numpy(), N)
    xs, edge = op_inputs(model)
    assert not torch.allclose(call(model, g, xs, edge), call(model, g, xs, 2 * edge))
    assert not torch.allclose(call(model, g, xs, edge), getattr(dt, model)(g, *xs))


@pytest.mark.parametrize("model", EDGE_MODELS)
def test_eager_functions_match_the_custom_ops_with_edge(model, monkeypatch):
    # bitwise, with attention dropout on (the mask is per CSR position, independent of the edge input)
    g = dfgnn.Graph(edge_index().numpy(), N)
    results = {}
    for eager_functions in (True, False):
        monkeypatch.setattr(dt, "use_functions_in_eager", eager_functions)
        xs, edge = op_inputs(model)
        out = call(model, g, xs, edge, dropout=0.3, dropout_seed=11)
        out.backward(torch.linspace(-1, 1, out.numel(), dtype=torch.float64).view_as(out))
        results[eager_functions] = [out.detach()] + [x.grad for x in xs] + [edge.grad]
    for a, b in zip(results[True], results[False]):
        assert torch.equal(a, b)


@pytest.mark.parametrize("model", EDGE_MODELS)
def test_gradcheck_with_edge(eager_functions, model):
    g = dfgnn.Graph(edge_index().numpy(), N, add_self_loops=True)
    xs, edge = op_inputs(model, e=E_LOOPS)
    fn = lambda *args: call(model, g, list(args[:-1]), args[-1])  # noqa: E731
    assert torch.autograd.gradcheck(fn, (*xs, edge), eps=1e-6, atol=1e-6)


def test_function_apply_takes_edge_last():
    # the autograd Functions' edge argument comes after the options
    g = dfgnn.Graph(edge_index().numpy(), N)
    (h, a_s, a_d), edge = op_inputs("gat")
    out = dt.GATFunction.apply(g, h, a_s, a_d, 0.2, None, 0.0, 0, edge)
    out.sum().backward()
    want = torch_attention("gat", edge_index(), N, [h.detach(), a_s.detach(), a_d.detach()], edge.detach())
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    assert edge.grad is not None and edge.grad.shape == edge.shape and h.grad is not None


@pytest.mark.parametrize("model", EDGE_MODELS)
def test_opcheck_with_edge(model):
    """Schema (the optional edge argument), fake implementations (the edge gradient's shape),
    autograd registration and AOT dispatch, with the graph by key and as edge_index (with and
    without added self-loops), with and without dropout."""
    ei = edge_index()
    g = dt.graph(ei, N)
    for spec, e in [((None, g.key, False), E), ((ei, 0, False), E), ((ei, 0, True), E_LOOPS)]:
        for dropout in ((0.0, 0), (0.3, 1234)):
            xs, edge = op_inputs(model, e=e)
            args = (*xs, *spec, 0.2, None, None, *dropout)
            torch.library.opcheck(dt.OPS[model], args + (edge,))
            torch.library.opcheck(dt.OPS[model], args, {"edge": edge})


def test_op_edge_errors(eager_functions):
    g = dfgnn.Graph(edge_index().numpy(), N)
    (h, a_s, a_d), edge = op_inputs("gat")
    with pytest.raises(dfgnn.InvalidArgumentError,
                       match=r"\[E, H\] = \[17, 2\].*got \[16, 2\] \(the graph has 17 edges\)"):
        dt.gat(g, h, a_s, a_d, edge=edge[1:])
    with pytest.raises(dfgnn.InvalidArgumentError, match=r"must have shape \[E, H\]"):
        dt.gat(g, h, a_s, a_d, edge=rand(E, H, D))
    with pytest.raises(dfgnn.DTypeError, match="edge must be a floating-point tensor"):
        dt.gat(g, h, a_s, a_d, edge=torch.ones(E, H, dtype=torch.long))
    with pytest.raises(dfgnn.InvalidArgumentError, match="edge must be a torch.Tensor"):
        dt.gat(g, h, a_s, a_d, edge=np.ones((E, H)))
    xs, edge = op_inputs("transformer")
    with pytest.raises(dfgnn.InvalidArgumentError, match=r"\[E, H, D\] = \[17, 2, 3\]"):
        dt.transformer(g, *xs, edge=edge[:, :1])
    with pytest.raises(TypeError, match="edge"):
        dt.agnn(g, rand(N, H, D), torch.ones(1, dtype=torch.float64), edge=rand(E, H, D))


# ---------------------------------------------------------------- layers vs PyG (float64 on the CPU)


def compare(ours, theirs, x, ei, edge_attr, ours_graph=None, ours_edge_attr=None, tol=TOL):
    """Outputs and the gradients of x, edge_attr and every parameter, dfgnn vs PyG. ours_graph /
    ours_edge_attr: what dfgnn's layer gets instead of ei / edge_attr (a Graph and its rows); the
    gradient of edge_attr then flows back through ours_edge_attr(edge_attr)."""
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    e1, e2 = edge_attr.clone().requires_grad_(), edge_attr.clone().requires_grad_()
    a = ours(x1, ei if ours_graph is None else ours_graph, e1 if ours_edge_attr is None else ours_edge_attr(e1))
    b = theirs(x2, ei, e2)
    torch.testing.assert_close(a, b, **tol)
    go = rand(*b.shape, seed=7)
    a.backward(go)
    b.backward(go)
    torch.testing.assert_close(x1.grad, x2.grad, **tol, msg="x")
    torch.testing.assert_close(e1.grad, e2.grad, **tol, msg="edge_attr")
    theirs_params = dict(theirs.named_parameters())
    for pname, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, theirs_params[pname].grad, **tol, msg=pname)


def fill_tensor(edge_dim):
    return torch.linspace(-0.5, 0.7, edge_dim, dtype=torch.float64)


def _layer_cases():
    cases = []
    for name in ("GATConv", "GATv2Conv"):
        for heads in (1, 3):
            for concat in (True, False):
                for edge_dim in (1, 4):
                    for loops, fill in [(False, "mean"), (True, "mean"), (True, 0.5), (True, "add"), (True, "max"),
                                        (True, "tensor")]:
                        cases.append((name, dict(heads=heads, concat=concat, edge_dim=edge_dim, add_self_loops=loops,
                                                 fill_value=fill)))
    for heads in (1, 3):
        for concat in (True, False):
            for edge_dim in (1, 4):
                cases.append(("TransformerConv", dict(heads=heads, concat=concat, edge_dim=edge_dim)))
    # the layers' other options with edge features
    cases += [("GATConv", dict(heads=2, edge_dim=4, residual=True, bias=False)),
              ("GATv2Conv", dict(heads=2, edge_dim=4, share_weights=True, residual=True)),
              ("TransformerConv", dict(heads=2, edge_dim=4, beta=True)),
              ("TransformerConv", dict(heads=2, edge_dim=4, concat=False, root_weight=False, bias=False))]
    return cases


def _case_id(case):
    name, kw = case
    return name + "-" + "-".join(f"{k}={v}" for k, v in kw.items())


@requires_pyg
@pytest.mark.parametrize("case", _layer_cases(), ids=_case_id)
def test_layers_with_edges_match_pyg(eager_functions, case):
    name, kw = case
    kw = dict(kw)
    if kw.get("fill_value") == "tensor":
        kw["fill_value"] = fill_tensor(kw["edge_dim"])
    torch.manual_seed(0)
    ours, theirs = pyg_pair(name, in_channels=5, out_channels=4, **kw)
    compare(ours, theirs, rand(N, 5, seed=1), edge_index(), rand(E, kw["edge_dim"], seed=2))


@requires_pyg
@pytest.mark.parametrize("fill", ["sum", "min", "amax", "mul", "any", None, 2, True, "tensor0d", "tensor2d"])
@pytest.mark.parametrize("name", ["GATConv", "GATv2Conv"])
def test_every_fill_value_matches_pyg(name, fill):
    fill = {"tensor0d": torch.tensor(0.25, dtype=torch.float64),
            "tensor2d": torch.tensor([[0.1, -0.2, 0.3, 0.4]], dtype=torch.float64)}.get(fill, fill) \
        if isinstance(fill, str) else fill
    ours, theirs = pyg_pair(name, in_channels=5, out_channels=4, heads=2, edge_dim=4, fill_value=fill)
    compare(ours, theirs, rand(N, 5, seed=1), edge_index(), rand(E, 4, seed=2))


@requires_pyg
@pytest.mark.parametrize("loops,fill", [(False, "mean"), (True, "mean"), (True, "max"), (True, "tensor1d")])
@pytest.mark.parametrize("name", ["GATConv", "GATv2Conv"])
def test_one_dim_edge_attr_matches_pyg(eager_functions, name, loops, fill):
    # [E] is one feature per edge (PyG views it as [E, 1] after adding the self-loops' rows). The
    # tensor fill is made here, not in the parameters, which are evaluated without torch too.
    if fill == "tensor1d":
        fill = torch.tensor([0.5], dtype=torch.float64)
    ours, theirs = pyg_pair(name, in_channels=5, out_channels=4, heads=3, edge_dim=1, add_self_loops=loops,
                            fill_value=fill)
    compare(ours, theirs, rand(N, 5, seed=1), edge_index(), rand(E, seed=2))


@requires_pyg
def test_transformer_rejects_one_dim_edge_attr():
    # PyG's TransformerConv gives a 1-D edge_attr to lin_edge as it is, which fails
    ours, theirs = pyg_pair("TransformerConv", in_channels=5, out_channels=4, heads=2, edge_dim=1)
    with pytest.raises(RuntimeError):
        theirs(rand(N, 5), edge_index(), rand(E))
    with pytest.raises(dfgnn.InvalidArgumentError, match=r"TransformerConv: edge_attr must have shape \[E, edge_dim\], "
                                                         r"got \[17\]"):
        ours(rand(N, 5), edge_index(), rand(E))


@requires_pyg
@pytest.mark.parametrize("name,loops,fill", [
    ("GATConv", False, None), ("GATConv", True, "mean"), ("GATConv", True, "max"), ("GATv2Conv", False, None),
    ("GATv2Conv", True, "mean"), ("GATv2Conv", True, 0.5), ("TransformerConv", False, None)])
def test_prebuilt_graph_takes_rows_by_edge_id(eager_functions, name, loops, fill):
    # A Graph is used as given: edge_attr has a row per edge id, its self-loops included;
    # self_loop_edge_attr makes them from the input edges as PyG's layers do.
    kw = dict(add_self_loops=loops, fill_value=fill) if name != "TransformerConv" else {}
    ours, theirs = pyg_pair(name, in_channels=5, out_channels=4, heads=2, edge_dim=4, **kw)
    ei = edge_index()
    g = dfgnn.Graph(ei.numpy(), N, add_self_loops=loops)
    rows = (lambda ea: dt.self_loop_edge_attr(ei, ea, N, fill)) if loops else None
    compare(ours, theirs, rand(N, 5, seed=1), ei, rand(E, 4, seed=2), ours_graph=g, ours_edge_attr=rows)
    if loops:
        with pytest.raises(dfgnn.InvalidArgumentError, match=rf"edge_attr has {E} rows, but the dfgnn.Graph has "
                                                             rf"{E_LOOPS} edges"):
            ours(rand(N, 5), g, rand(E, 4))


def test_self_loop_edge_attr_order():
    # rows of the edges that are not self-loops in input order, then node i's loop: the Graph's edge ids
    ei = edge_index()
    ea = torch.arange(E, dtype=torch.float64).unsqueeze(1)
    rows = dt.self_loop_edge_attr(ei, ea, N, fill_value=-1.0)
    keep = [i for i, (s, d) in enumerate(EDGES) if s != d]
    assert rows[:, 0].tolist() == keep + [-1.0] * N
    g = dfgnn.Graph(ei.numpy(), N, add_self_loops=True)
    _, _, edge_id = g.csr()
    src_by_id = np.empty(g.num_edges, dtype=np.int64)
    src_by_id[edge_id] = g.edge_index()[0]
    dst_by_id = np.empty(g.num_edges, dtype=np.int64)
    dst_by_id[edge_id] = g.edge_index()[1]
    np.testing.assert_array_equal(np.stack([src_by_id, dst_by_id]), loop_edges().numpy())


@requires_pyg
@pytest.mark.parametrize("name,kw", [
    ("GATConv", dict(heads=3, edge_dim=4)),
    ("GATConv", dict(heads=2, edge_dim=1, add_self_loops=False)),
    ("GATv2Conv", dict(heads=3, edge_dim=4, fill_value="max")),
    ("TransformerConv", dict(heads=3, edge_dim=4)),
])
def test_attention_weights_with_edges_match_pyg(eager_functions, name, kw):
    # edges in PyG's order (edge id order), alpha with the edge terms, differentiable w.r.t. edge_attr;
    # a slope that is exact as a float (alpha is computed with the layer's slope, the output with 0.2f)
    if name != "TransformerConv":
        kw = dict(kw, negative_slope=0.25)
    ours, theirs = pyg_pair(name, in_channels=5, out_channels=4, **kw)
    x = rand(N, 5, seed=1)
    e1 = rand(E, kw["edge_dim"], seed=2).requires_grad_()
    e2 = e1.detach().clone().requires_grad_()
    out, (ei, alpha) = ours(x, edge_index(), e1, return_attention_weights=True)
    want, (pei, palpha) = theirs(x, edge_index(), e2, return_attention_weights=True)
    torch.testing.assert_close(out, want, **TOL)
    assert torch.equal(ei, pei)
    torch.testing.assert_close(alpha, palpha, **TOL)
    weights = torch.linspace(-1, 1, alpha.numel(), dtype=torch.float64).view_as(alpha)
    (alpha * weights).sum().backward()
    (palpha * weights).sum().backward()
    torch.testing.assert_close(e1.grad, e2.grad, **TOL)


@requires_pyg
@pytest.mark.parametrize("name", ["GATConv", "GATv2Conv", "TransformerConv"])
def test_layer_parameters_like_pyg(name):
    # names and shapes as PyG's (lin_edge, GATConv's att_edge), nothing extra without edge_dim, and
    # PyG's initialisation (glorot for GATConv / GATv2Conv, torch.nn.Linear's for TransformerConv)
    import torch_geometric.nn as pnn
    for edge_dim in (None, 6):
        ours, theirs = getattr(dt, name)(5, 4, heads=3, edge_dim=edge_dim), getattr(pnn, name)(5, 4, heads=3,
                                                                                               edge_dim=edge_dim)
        assert [(k, v.shape) for k, v in ours.named_parameters()] == \
            [(k, v.shape) for k, v in theirs.named_parameters()]
        assert (ours.lin_edge is None) == (edge_dim is None)
    torch.manual_seed(0)
    layer = getattr(dt, name)(5, 64, heads=4, edge_dim=6)
    bound = 1 / math.sqrt(6) if name == "TransformerConv" else math.sqrt(6 / (6 + 4 * 64))
    w = layer.lin_edge.weight.detach()
    assert w.abs().max() <= bound and w.std() > 0.8 * bound / math.sqrt(3) and layer.lin_edge.bias is None
    if name == "GATConv":
        a = layer.att_edge.detach()
        assert a.shape == (1, 4, 64) and a.abs().max() <= math.sqrt(6 / (4 + 64)) and a.std() > 0
    before = w.clone()
    layer.reset_parameters()
    assert not torch.equal(before, layer.lin_edge.weight)


# ---------------------------------------------------------------- layer errors


@pytest.mark.parametrize("name", ["GATConv", "GATv2Conv", "TransformerConv"])
def test_layer_edge_dim_without_edge_attr(eager_functions, name):
    layer = getattr(dt, name)(5, 4, heads=2, edge_dim=3).double()
    with pytest.raises(dfgnn.InvalidArgumentError, match=rf"{name}: the layer has edge_dim=3, but forward got no "
                                                         r"edge_attr"):
        layer(rand(N, 5), edge_index())


@pytest.mark.parametrize("name", ["GATConv", "GATv2Conv", "TransformerConv"])
def test_layer_edge_attr_sizes(eager_functions, name):
    layer = getattr(dt, name)(5, 4, heads=2, edge_dim=3).double()
    with pytest.raises(dfgnn.InvalidArgumentError, match=rf"{name}: edge_attr has 16 rows, but edge_index has 17 "
                                                         r"edges"):
        layer(rand(N, 5), edge_index(), rand(E - 1, 3))
    with pytest.raises(dfgnn.InvalidArgumentError, match=rf"{name}: edge_attr has 4 features per edge, but the "
                                                         r"layer has edge_dim=3"):
        layer(rand(N, 5), edge_index(), rand(E, 4))
    with pytest.raises(dfgnn.InvalidArgumentError, match=rf"{name}: edge_attr must have shape \[E, edge_dim\]"):
        layer(rand(N, 5), edge_index(), rand(E, 3, 1))
    with pytest.raises(dfgnn.InvalidArgumentError, match="edge_attr must be a torch.Tensor"):
        layer(rand(N, 5), edge_index(), np.ones((E, 3)))
    if name != "TransformerConv":
        with pytest.raises(dfgnn.InvalidArgumentError, match=rf"{name}: edge_attr has 1 features per edge, but "
                                                             r"the layer has edge_dim=3"):
            layer(rand(N, 5), edge_index(), rand(E))


@pytest.mark.parametrize("name", ["GATConv", "GATv2Conv"])
def test_layer_bad_fill_value(name):
    layer = getattr(dt, name)(5, 4, edge_dim=3, fill_value="median").double()
    with pytest.raises(dfgnn.InvalidArgumentError, match="fill_value 'median' is not a reduction PyG knows"):
        layer(rand(N, 5), edge_index(), rand(E, 3))
    layer.fill_value = [1.0]
    with pytest.raises(dfgnn.InvalidArgumentError, match="fill_value must be a float, a tensor or a reduction"):
        layer(rand(N, 5), edge_index(), rand(E, 3))
    layer.add_self_loops = False  # no loops, no fill
    layer(rand(N, 5), edge_index(), rand(E, 3))


def test_layer_bad_edge_index_fails_before_the_fill():
    # an out-of-range node id is dfgnn's GraphError (not an index error of the self-loop rows)
    layer = dt.GATConv(5, 4, edge_dim=3).double()
    ei = edge_index()
    ei[1, 0] = N + 5
    with pytest.raises(dfgnn.GraphError):
        layer(rand(N, 5), ei, rand(E, 3))


def test_agnn_has_no_edge_dim():
    with pytest.raises(TypeError, match="unexpected keyword argument 'edge_dim'"):
        dt.AGNNConv(edge_dim=3)
    with pytest.raises(TypeError, match="edge_attr"):
        dt.AGNNConv().double()(rand(N, 5), edge_index(), edge_attr=rand(E, 3))


def test_layer_edge_attr_gradient_on_graph_without_edges():
    # no input edges: the self-loops' rows come from the fill alone ('mean' of nothing is 0)
    layer = dt.GATv2Conv(5, 4, heads=2, edge_dim=3).double()
    ea = torch.empty(0, 3, dtype=torch.float64, requires_grad=True)
    out = layer(rand(N, 5), torch.empty(2, 0, dtype=torch.long), ea)
    out.sum().backward()
    assert out.shape == (N, 8) and ea.grad.shape == (0, 3)


# ---------------------------------------------------------------- torch.compile (CPU float64)


class EdgeStack(torch.nn.Module if HAS_TORCH else object):
    """The three layers with edge features, as a compiled model would hold them."""

    def __init__(self, edge_dim=4):
        super().__init__()
        self.gat = dt.GATConv(16, 8, heads=4, edge_dim=edge_dim)
        self.gt = dt.TransformerConv(32, 8, heads=2, edge_dim=edge_dim)
        self.gatv2 = dt.GATv2Conv(16, 4, heads=2, concat=False, edge_dim=edge_dim, fill_value="max")

    def forward(self, x, g, edge_attr):
        x = torch.relu(self.gat(x, g, edge_attr))
        x = torch.relu(self.gt(x, g, edge_attr))
        return self.gatv2(x, g, edge_attr)


def _run(model, x, g, edge_attr, rows=None):
    """Output and the gradients of x, edge_attr and every parameter for loss = sum(out^2); rows:
    edge_attr -> the rows the model gets (computed outside it)."""
    model.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_()
    ea = edge_attr.detach().clone().requires_grad_()
    out = model(x, g, ea if rows is None else rows(ea))
    out.square().sum().backward()
    return [out.detach(), x.grad, ea.grad] + [p.grad for p in model.parameters()]


@pytest.mark.parametrize("graph_kind", ["Graph", "edge_index"])
def test_compile_fullgraph_with_edges(graph_kind):
    """torch.compile(fullgraph=True) traces the layers with edge features (the custom ops' edge
    argument; with an edge_index, the self-loops' rows: a data-dependent row count) without a graph
    break and gives eager's output and gradients."""
    torch.manual_seed(0)
    ei = torch.randint(0, 60, (2, 400))
    ea = torch.randn(400, 4, dtype=torch.float64)
    x = torch.randn(60, 16, dtype=torch.float64)
    model = EdgeStack().double()
    if graph_kind == "Graph":
        # every layer gets the rows of the graph with self-loops (the Transformer uses it as given)
        g, rows = dt.graph(ei, 60, add_self_loops=True), (lambda a: dt.self_loop_edge_attr(ei, a, 60))
    else:
        g, rows = ei, None
    want = _run(model, x, g, ea, rows)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    for _ in range(2):
        got = _run(compiled, x, g, ea, rows)
        assert len(got) == len(want)
        for i, (a, b) in enumerate(zip(got, want)):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12, msg=f"result {i}")
    torch._dynamo.reset()


# ---------------------------------------------------------------- fused kernels (CUDA)

CUDA_TOL = {"float32": dict(rtol=1e-4, atol=1e-5), "bfloat16": dict(rtol=5e-2, atol=5e-2)}


@requires_torch_cuda
@pytest.mark.parametrize("model", EDGE_MODELS)
@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
@pytest.mark.parametrize("loops", [False, True])
def test_cuda_op_with_edge_matches_reference(model, dtype_name, loops):
    # GAT's edge terms in float32, GATv2's and the Transformer's edge features in the feature dtype
    dtype, tol = getattr(torch, dtype_name), CUDA_TOL[dtype_name]
    g = dfgnn.Graph(edge_index().numpy(), N, add_self_loops=loops)
    xs, edge = op_inputs(model, e=E_LOOPS if loops else E)
    xs = [(x.detach().to("cuda", dtype) if x.dim() == 3 else x.detach().float().cuda()).requires_grad_() for x in xs]
    edge = edge.detach().to("cuda", torch.float32 if model == "gat" else dtype).requires_grad_()
    out = call(model, g, xs, edge)
    assert out.dtype == dtype and out.is_cuda
    names = dfgnn.MODEL_INPUTS[model]
    rounded = {k: x.detach().double().cpu().numpy() for k, x in zip(names, xs)}
    rounded["edge"] = edge.detach().double().cpu().numpy()
    want, _ = dfgnn.reference_forward(g, model, rounded)
    torch.testing.assert_close(out.double().cpu(), torch.from_numpy(want), **tol)
    go = torch.randn_like(out)
    out.backward(go)
    ref = dfgnn.reference_backward(g, model, rounded, go.double().cpu().numpy())
    for k, t in zip(names + ("edge",), xs + [edge]):
        assert t.grad.dtype == t.dtype
        torch.testing.assert_close(t.grad.double().cpu(), torch.from_numpy(ref[k]), **tol, msg=k)


CUDA_LAYERS = [
    ("GATConv", dict(in_channels=16, out_channels=8, heads=8, edge_dim=4)),
    ("GATv2Conv", dict(in_channels=16, out_channels=8, heads=4, edge_dim=4, fill_value="max")),
    ("TransformerConv", dict(in_channels=16, out_channels=16, heads=4, edge_dim=4)),
]


@functools.lru_cache(maxsize=None)
def _test_edges(name):
    if name == "small":
        return np.array(EDGES).T.copy()
    d = find_dataset(name)
    return None if d is None else dfgnn.Graph.from_file(d).edge_index()


_rel = rel_error


@requires_torch_cuda
@requires_pyg
@pytest.mark.parametrize("name,kw,graph_name,precision",
                         [(*layer, g, "float32") for layer in CUDA_LAYERS for g in ("small", "cora")] +
                         [(*CUDA_LAYERS[2], "cora", "bfloat16")])  # edge features in bf16 in key and value
def test_cuda_layers_with_edges_match_pyg(name, kw, graph_name, precision):
    import torch_geometric.nn as pnn
    edges = _test_edges(graph_name)
    if edges is None:
        pytest.skip(f"dataset {graph_name} not found under {', '.join(map(str, dataset_roots()))}")
    torch.manual_seed(0)
    theirs = getattr(pnn, name)(**kw).cuda().double()
    ours = getattr(dt, name)(**kw).cuda()
    ours.load_state_dict(theirs.state_dict())
    ei = torch.from_numpy(edges).cuda()
    n = max(int(edges.max()) + 1, N if graph_name == "small" else 0)
    x = torch.randn(n, 16, device="cuda")
    ea = torch.randn(ei.shape[1], 4, device="cuda")
    x1, x2 = x.clone().requires_grad_(), x.double().requires_grad_()
    e1, e2 = ea.clone().requires_grad_(), ea.double().requires_grad_()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bfloat16"):
        a = ours(x1, ei, e1)
    b = theirs(x2, ei, e2)
    out_tol, grad_tol = LAYER_TOL[precision]
    assert _rel(a, b) < out_tol, f"output: relative error {_rel(a, b):.3g}"
    go = torch.randn_like(b)
    a.backward(go.to(a.dtype))
    b.backward(go)
    check_layer_grads(ours, theirs, {"x": (x1.grad, x2.grad), "edge_attr": (e1.grad, e2.grad)}, grad_tol)


@requires_torch_cuda
def test_cuda_compile_with_edges():
    """fullgraph compilation of the layers with edge features on CUDA (aot_eager) gives eager's results."""
    torch.manual_seed(0)
    edges = _test_edges("cora")
    ei = torch.from_numpy(edges).cuda()
    n = int(edges.max()) + 1
    model = EdgeStack().cuda()
    x = torch.randn(n, 16, device="cuda")
    ea = torch.randn(ei.shape[1], 4, device="cuda")
    want = _run(model, x, ei, ea)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    got = _run(compiled, x, ei, ea)
    # The self-loop rows' CUDA scatter sums are not bitwise reproducible, so results differ by rounding;
    # a gradient that is zero analytically (GAT's att_dst: a per-row constant under the softmax) is
    # pure rounding noise, hence the floor at a small share of the largest result.
    scale = max(b.double().norm().item() for b in want)
    for i, (a, b) in enumerate(zip(got, want)):
        assert _rel(a, b, 1e-4 * scale) < 1e-5, f"result {i}"
    torch._dynamo.reset()
