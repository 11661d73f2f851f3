"""Bipartite inputs and lazy in_channels of dfgnn.torch's layers against PyG 2.8 with the same weights.
The CPU tests run the float64 reference path (torch and torch_geometric); the CUDA tests skip without
a device.

The layers run a bipartite edge_index (row 0 into x_src, row 1 into x_dst) on one square graph of
N_src + N_dst nodes (destination i is node N_src + i). Decisions recorded here (PyG differs):
- a prebuilt dfgnn.Graph with a pair x (or GATConv's lin_src / lin_dst) is refused: it has one node
  set;
- GATv2Conv's and TransformerConv's x_dst=None is a ValueError (PyG asserts / fails in lin_query);
  AGNNConv's pair x a TypeError (PyG fails inside forward);
- with add_self_loops and a reduction fill_value, PyG's GATConv / GATv2Conv fail on an edge into a
  destination id >= min(N_src, N_dst) (its scatter has only that many rows); dfgnn reduces over every
  destination and keeps the loops' rows;
- an edge_index id out of range is dfgnn's GraphError (PyG: IndexError)."""

import importlib.util
import math

import pytest

import dfgnn
from conftest import (HAS_TORCH, LAYER_TOL, SLOPE32, check_layer_grads, pyg_pair, rel_error, requires_torch,
                      requires_torch_cuda)

if HAS_TORCH:
    import numpy as np
    import torch
    import dfgnn.torch as dt

HAS_PYG = importlib.util.find_spec("torch_geometric") is not None
pytestmark = [requires_torch, pytest.mark.skipif(not HAS_PYG, reason="torch_geometric is not installed")]

TOL = dict(rtol=1e-10, atol=1e-10)
IN_SRC, IN_DST = 6, 3

# (N_src, N_dst) -> edges (src, dst): duplicates, columns with equal ids (PyG's remove_self_loops drops
# them with add_self_loops), destinations without in-edges (3 of the first; 4 and 5 of the second, past
# min(N_src, N_dst), so they get no loop either).
EDGES = {
    (5, 4): [(0, 1), (1, 2), (1, 2), (4, 0), (2, 2), (3, 0), (4, 1), (0, 0), (3, 2)],
    (4, 6): [(0, 1), (3, 2), (3, 2), (1, 0), (2, 2), (0, 3), (1, 1), (2, 0), (3, 3)],
}


def rand(*shape, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


def edge_index(sizes):
    return torch.tensor(EDGES[sizes]).t().contiguous()


@pytest.fixture(params=[True, False], ids=["functions", "custom_ops"])
def eager_functions(request, monkeypatch):
    """Runs a test once with the eager autograd Functions and once with the torch custom ops."""
    monkeypatch.setattr(dt, "use_functions_in_eager", request.param)
    return request.param


def compare(ours, theirs, x, ei, edge_attr=None, tol=TOL, **kw):
    """Outputs and the gradients of every input tensor (x or x_src and x_dst, edge_attr) and every
    parameter, dfgnn vs PyG (a parameter PyG leaves unused has no gradient in either)."""
    def copies(t):
        return None if t is None else t.clone().requires_grad_()
    pair = isinstance(x, tuple)
    x1, x2 = (tuple(map(copies, x)), tuple(map(copies, x))) if pair else (copies(x), copies(x))
    e1, e2 = copies(edge_attr), copies(edge_attr)
    extra = () if edge_attr is None else (e1,)
    a = ours(x1, ei, *extra, **kw)
    b = theirs(x2, ei, *(() if edge_attr is None else (e2,)), **kw)
    torch.testing.assert_close(a, b, **tol)
    go = rand(*b.shape, seed=7)
    a.backward(go)
    b.backward(go)
    inputs = list(zip(x1, x2)) if pair else [(x1, x2)]
    if edge_attr is not None:
        inputs.append((e1, e2))
    for i, (t1, t2) in enumerate(inputs):
        if t1 is not None:
            torch.testing.assert_close(t1.grad, t2.grad, **tol, msg=f"input {i}")
    theirs_params = dict(theirs.named_parameters())
    for pname, p in ours.named_parameters():
        want = theirs_params[pname].grad
        assert (p.grad is None) == (want is None), pname
        if want is not None:
            torch.testing.assert_close(p.grad, want, **tol, msg=pname)
    return a


# ---------------------------------------------------------------- layers vs PyG (float64 on the CPU)


def _cases():
    cases = []
    for sizes in EDGES:
        for heads in (1, 3):
            for concat in (True, False):
                for edge_dim in (None, 3):
                    for loops in (True, False):
                        for name in ("GATConv", "GATv2Conv"):
                            cases.append((name, sizes, dict(heads=heads, concat=concat, edge_dim=edge_dim,
                                                            add_self_loops=loops)))
                    cases.append(("TransformerConv", sizes, dict(heads=heads, concat=concat, edge_dim=edge_dim)))
    # the layers' other options with a pair x
    cases += [("GATConv", (5, 4), dict(heads=2, residual=True, bias=False, edge_dim=3, fill_value="max")),
              ("GATv2Conv", (4, 6), dict(heads=2, residual=True, edge_dim=3, fill_value=0.5)),
              ("TransformerConv", (5, 4), dict(heads=2, beta=True, edge_dim=3)),
              ("TransformerConv", (4, 6), dict(heads=2, concat=False, root_weight=False, bias=False))]
    return cases


def _case_id(case):
    name, sizes, kw = case
    return f"{name}-{sizes[0]}x{sizes[1]}-" + "-".join(f"{k}={v}" for k, v in kw.items())


@pytest.mark.parametrize("case", _cases(), ids=_case_id)
def test_bipartite_layers_match_pyg(eager_functions, case):
    name, sizes, kw = case
    ei = edge_index(sizes)
    loops, edge_dim = kw.get("add_self_loops", False), kw.get("edge_dim")
    if not (loops and edge_dim):
        # an edge into a destination past min(N_src, N_dst) (PyG's reduction fill fails there, see below)
        ei = torch.cat([ei, torch.tensor([[1], [sizes[1] - 1]])], dim=1)
    ours, theirs = pyg_pair(name, in_channels=(IN_SRC, IN_DST), out_channels=4, **kw)
    x = (rand(sizes[0], IN_SRC, seed=1), rand(sizes[1], IN_DST, seed=2))
    ea = None if edge_dim is None else rand(ei.shape[1], edge_dim, seed=3)
    out = compare(ours, theirs, x, ei, ea)
    assert out.shape[0] == sizes[1]


@pytest.mark.parametrize("loops", [True, False])
@pytest.mark.parametrize("name", ["GATConv", "GATv2Conv", "TransformerConv"])
def test_one_in_channels_with_a_pair_x(eager_functions, name, loops):
    # an int in_channels with x = (x_src, x_dst) of that width: GATConv's lin (or GATv2Conv's lin_l /
    # lin_r, the Transformer's lins) on both sides
    kw = dict(add_self_loops=loops) if name != "TransformerConv" else {}
    ours, theirs = pyg_pair(name, in_channels=5, out_channels=4, heads=2, **kw)
    compare(ours, theirs, (rand(5, 5, seed=1), rand(4, 5, seed=2)), edge_index((5, 4)))


@pytest.mark.parametrize("share", [False, True])
def test_gatv2_share_weights_with_a_pair_x(eager_functions, share):
    ours, theirs = pyg_pair("GATv2Conv", in_channels=(5, 5), out_channels=4, heads=2, share_weights=share)
    compare(ours, theirs, (rand(4, 5, seed=1), rand(6, 5, seed=2)), edge_index((4, 6)))


@pytest.mark.parametrize("edge_dim", [None, 3])
@pytest.mark.parametrize("name", ["GATConv", "GATv2Conv", "TransformerConv"])
def test_pair_in_channels_on_one_node_set(eager_functions, name, edge_dim):
    # a pair in_channels with one x: GATConv projects it with lin_src and lin_dst (dfgnn runs that as
    # the bipartite graph (x, x)), the others as for an int in_channels
    torch.manual_seed(0)
    ours, theirs = pyg_pair(name, in_channels=(5, 5), out_channels=4, heads=3, edge_dim=edge_dim)
    ei = torch.tensor([(0, 1), (1, 2), (1, 2), (3, 2), (2, 2), (4, 0), (6, 5), (5, 6)]).t().contiguous()
    compare(ours, theirs, rand(7, 5, seed=1), ei, None if edge_dim is None else rand(ei.shape[1], edge_dim, seed=2))


@pytest.mark.parametrize("size", [None, (5, 4), (5, 3)])
@pytest.mark.parametrize("edge_dim", [None, 3])
def test_gat_without_x_dst_matches_pyg(eager_functions, size, edge_dim):
    # x = (x_src, None): no att_dst term (no gradient for att_dst, none for lin_dst), no residual; the
    # destinations are size[1] or N_src
    ours, theirs = pyg_pair("GATConv", in_channels=(IN_SRC, IN_DST), out_channels=4, heads=2, edge_dim=edge_dim,
                            residual=True)
    ei = edge_index((5, 4))
    if size == (5, 3):
        ei = ei[:, ei[1] < 3]
    ea = None if edge_dim is None else rand(ei.shape[1], edge_dim, seed=3)
    out = compare(ours, theirs, (rand(5, IN_SRC, seed=1), None), ei, ea, size=size)
    assert out.shape[0] == (5 if size is None else size[1])
    assert ours.att_dst.grad is None and ours.lin_dst.weight.grad is None


def test_gat_size_matches_pyg(eager_functions):
    ours, theirs = pyg_pair("GATConv", in_channels=(IN_SRC, IN_DST), out_channels=4, heads=2)
    x = (rand(5, IN_SRC, seed=1), rand(4, IN_DST, seed=2))
    compare(ours, theirs, x, edge_index((5, 4)), size=(5, 4))
    ours1, theirs1 = pyg_pair("GATConv", in_channels=5, out_channels=4, heads=2)
    compare(ours1, theirs1, rand(5, 5, seed=1), edge_index((5, 4)), size=(5, 5))
    for layer in (ours, theirs):
        with pytest.raises(ValueError, match="Encountered tensor with size 4 in dimension 0, but expected size 3"):
            layer(x, edge_index((5, 4)), size=(5, 3))
    for layer in (ours1, theirs1):
        with pytest.raises(ValueError, match="Encountered tensor with size 5 in dimension 0, but expected size 4"):
            layer(rand(5, 5), edge_index((5, 4)), size=(5, 4))


@pytest.mark.parametrize("name", ["GATConv", "GATv2Conv"])
def test_reduction_fill_past_the_loops(name):
    # PyG's add_self_loops reduces edge_attr into min(N_src, N_dst) rows and fails on an edge into a
    # destination past them; dfgnn reduces over every destination and keeps the loops' rows
    ours, theirs = pyg_pair(name, in_channels=(IN_SRC, IN_DST), out_channels=4, heads=2, edge_dim=3)
    ei = torch.cat([edge_index((4, 6)), torch.tensor([[1], [5]])], dim=1)
    x, ea = (rand(4, IN_SRC, seed=1), rand(6, IN_DST, seed=2)), rand(ei.shape[1], 3, seed=3)
    with pytest.raises(RuntimeError):
        theirs(x, ei, ea)
    keep = ei[1] < 4  # the same graph without that edge: the loops' rows and the other outputs agree
    out = ours(x, ei, ea)
    want = theirs(x, ei[:, keep], ea[keep])
    torch.testing.assert_close(out[:4], want[:4], **TOL)


def test_bipartite_graph_is_cached_and_relabelled():
    ei = edge_index((5, 4))
    g = dt._bipartite_graph(ei, 5, 4, True)
    assert dt._bipartite_graph(ei, 5, 4, True) is g and dt._bipartite_graph(ei, 5, 4, False) is not g
    assert g.num_nodes == 9 and g.num_edges == len(EDGES[(5, 4)]) - 2 + 4
    by_id = np.argsort(g.csr()[2], kind="stable")
    src, dst = g.edge_index()[:, by_id]
    keep = [(s, d) for s, d in EDGES[(5, 4)] if s != d] + [(i, i) for i in range(4)]
    assert list(zip(src.tolist(), (dst - 5).tolist())) == keep  # PyG's order: kept columns, then the loops
    ei[1, 0] = 3  # modified in place: rebuilt
    assert dt._bipartite_graph(ei, 5, 4, True) is not g


@pytest.mark.parametrize("name,kw", [
    ("GATConv", dict(heads=3, edge_dim=3, negative_slope=0.25)),
    ("GATConv", dict(heads=2, add_self_loops=False, negative_slope=0.25)),
    ("GATv2Conv", dict(heads=3, edge_dim=3, negative_slope=0.25)),
    ("TransformerConv", dict(heads=3, edge_dim=3)),
])
@pytest.mark.parametrize("sizes", list(EDGES))
def test_bipartite_attention_weights_match_pyg(eager_functions, name, kw, sizes):
    # (edge_index, alpha) in PyG's ids and order (self-loops i -> i for i < min(N_src, N_dst) last),
    # differentiable
    ours, theirs = pyg_pair(name, in_channels=(IN_SRC, IN_DST), out_channels=4, **kw)
    ei = edge_index(sizes)
    x = (rand(sizes[0], IN_SRC, seed=1), rand(sizes[1], IN_DST, seed=2).requires_grad_())
    ea = rand(ei.shape[1], 3, seed=3) if "edge_dim" in kw else None
    extra = () if ea is None else (ea,)
    out, (got_ei, alpha) = ours(x, ei, *extra, return_attention_weights=True)
    want, (pei, palpha) = theirs(x, ei, *extra, return_attention_weights=True)
    torch.testing.assert_close(out, want, **TOL)
    assert torch.equal(got_ei, pei)
    torch.testing.assert_close(alpha, palpha, **TOL)
    weights = torch.linspace(-1, 1, alpha.numel(), dtype=torch.float64).view_as(alpha)
    g1 = torch.autograd.grad((alpha * weights).sum(), x[1])[0]
    g2 = torch.autograd.grad((palpha * weights).sum(), x[1])[0]
    torch.testing.assert_close(g1, g2, **TOL)


@pytest.mark.parametrize("model", ["gat", "gatv2", "transformer"])
def test_opcheck_bipartite_spec(model):
    """The custom ops with a bipartite graph argument (edge_index, 1 + N_src, add_self_loops):
    schema, fake implementation, autograd and AOT dispatch, with and without loops and edge input."""
    ei = edge_index((5, 4))
    for loops in (False, True):
        e = ei.shape[1] + (4 - 2 if loops else 0)  # two columns with equal ids removed, four loops added
        shapes = {"gat": [(9, 2, 3), (2, 3), (2, 3)], "gatv2": [(9, 2, 3), (9, 2, 3), (2, 3)],
                  "transformer": [(9, 2, 3)] * 3}[model]
        xs = [rand(*shape, seed=i).requires_grad_() for i, shape in enumerate(shapes)]
        edge = rand(e, 2, seed=4) if model == "gat" else rand(e, 2, 3, seed=4)
        args = (*xs, ei, 1 + 5, loops, 0.2, None, None, 0.0, 0)
        torch.library.opcheck(dt.OPS[model], args)
        torch.library.opcheck(dt.OPS[model], args, {"edge": edge.requires_grad_()})


# ---------------------------------------------------------------- lazy in_channels


def _lazy_cases():
    cases = []
    for name in ("GATConv", "GATv2Conv", "TransformerConv"):
        for channels in (-1, (-1, -1), (-1, IN_DST), (IN_SRC, -1)):
            cases.append((name, channels, {}))
    cases += [("GATConv", -1, dict(residual=True, edge_dim=3, heads=3)),
              ("GATConv", (-1, -1), dict(residual=True, edge_dim=3, concat=False)),
              ("GATv2Conv", -1, dict(residual=True, share_weights=True, edge_dim=3)),
              ("GATv2Conv", (-1, -1), dict(residual=True, edge_dim=3)),
              ("TransformerConv", -1, dict(beta=True, edge_dim=3)),
              ("TransformerConv", (-1, -1), dict(beta=True, edge_dim=3, concat=False))]
    return cases


@pytest.mark.parametrize("name,channels,kw", _lazy_cases(),
                         ids=lambda v: str(v).replace(" ", "") if not isinstance(v, dict) else
                         "-".join(f"{k}={x}" for k, x in v.items()))
def test_lazy_layers_match_pyg(eager_functions, name, channels, kw):
    # both lazy; one forward each materialises them; PyG's state dict then loads into dfgnn's layer
    import torch_geometric.nn as pnn
    torch.manual_seed(0)
    theirs = getattr(pnn, name)(channels, 4, **kw).double()
    ours = getattr(dt, name)(channels, 4, **kw).double()
    ours.reset_parameters()  # not materialised yet: nothing to do, no failure
    if getattr(theirs, "negative_slope", None) == 0.2:
        theirs.negative_slope = SLOPE32
    pair = isinstance(channels, tuple)
    x = (rand(5, IN_SRC, seed=1), rand(4, IN_DST, seed=2)) if pair else rand(6, IN_SRC, seed=1)
    ei = edge_index((5, 4)) if pair else torch.tensor([(0, 1), (1, 2), (3, 2), (2, 2), (4, 0), (5, 3), (5, 3)]).t()
    ea = rand(ei.shape[1], 3, seed=3) if "edge_dim" in kw else None
    extra = () if ea is None else (ea,)
    with torch.no_grad():
        theirs(x, ei, *extra)
        ours(x, ei, *extra)
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in theirs.state_dict().items()}
    ours.load_state_dict(theirs.state_dict())
    compare(ours, theirs, x, ei, ea)


@pytest.mark.parametrize("name", ["GATConv", "GATv2Conv", "TransformerConv"])
def test_lazy_initialisation_like_pyg(name):
    # PyG's initialisers at materialisation: glorot weights for GATConv / GATv2Conv (GATv2Conv's bias
    # uniform in +-1/sqrt(in)), torch.nn.Linear's (kaiming) for TransformerConv; reset_parameters
    # draws again
    torch.manual_seed(0)
    layer = getattr(dt, name)(-1, 64, heads=2).double()
    layer.reset_parameters()
    layer(rand(30, 40), torch.randint(0, 30, (2, 60)))
    lin = {"GATConv": "lin", "GATv2Conv": "lin_l", "TransformerConv": "lin_key"}[name]
    w = getattr(layer, lin).weight.detach()
    assert w.shape == (128, 40)
    bound = 1 / math.sqrt(40) if name == "TransformerConv" else math.sqrt(6 / (40 + 128))
    assert w.abs().max() <= bound and w.std() > 0.9 * bound / math.sqrt(3)
    bias = getattr(layer, lin).bias
    if bias is not None:
        assert 0 < bias.abs().max() <= 1 / math.sqrt(40)
    before = w.clone()
    layer.reset_parameters()
    assert not torch.equal(before, getattr(layer, lin).weight)
    if name != "TransformerConv":
        assert getattr(layer, lin).weight.abs().max() <= bound


def test_agnn_has_no_in_channels():
    # nothing lazy in AGNNConv (PyG's has no in_channels): any width runs, as in PyG
    ours, theirs = pyg_pair("AGNNConv")
    ei = torch.tensor([(0, 1), (1, 2), (3, 2), (2, 2), (4, 0)]).t()
    for width in (3, 7):
        compare(ours, theirs, rand(5, width, seed=width), ei)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("name", ["GATConv", "GATv2Conv", "TransformerConv"])
def test_prebuilt_graph_with_a_pair_x_is_refused(name):
    layer = getattr(dt, name)((IN_SRC, IN_DST), 4).double()
    g = dfgnn.Graph(edge_index((5, 4)).numpy(), 9)
    with pytest.raises(dfgnn.InvalidArgumentError, match=rf"{name}: a dfgnn.Graph has one node set"):
        layer((rand(5, IN_SRC), rand(4, IN_DST)), g)
    if name == "GATConv":  # lin_src / lin_dst on one node set need the relabelled graph too
        with pytest.raises(dfgnn.InvalidArgumentError, match="or separate lin_src / lin_dst"):
            dt.GATConv((5, 5), 4).double()(rand(9, 5), g)


@pytest.mark.parametrize("name", ["GATv2Conv", "TransformerConv"])
def test_x_dst_none_is_refused_as_in_pyg(name):
    import torch_geometric.nn as pnn
    x = (rand(5, IN_SRC), None)
    with pytest.raises((AssertionError, TypeError, AttributeError)):
        getattr(pnn, name)((IN_SRC, IN_DST), 4).double()(x, edge_index((5, 4)))
    with pytest.raises(dfgnn.InvalidArgumentError, match=rf"{name}: x_dst is None, which PyG's {name} does not take"):
        getattr(dt, name)((IN_SRC, IN_DST), 4).double()(x, edge_index((5, 4)))


def test_agnn_has_no_bipartite_form():
    import torch_geometric.nn as pnn
    x = (rand(5, 4), rand(4, 4))
    with pytest.raises((AttributeError, TypeError)):
        pnn.AGNNConv()(x, edge_index((5, 4)))
    with pytest.raises(TypeError, match="AGNNConv has no bipartite"):
        dt.AGNNConv().double()(x, edge_index((5, 4)))


@pytest.mark.parametrize("bad", [(4, 0), (0, 6), (-1, 0)], ids=["source", "destination", "negative"])
def test_bipartite_ids_out_of_range(eager_functions, bad):
    # a source id past N_src must not become a destination of the relabelled graph
    ei = torch.cat([edge_index((4, 6))[:, :3], torch.tensor(bad).view(2, 1)], dim=1)
    layer = dt.GATConv((IN_SRC, IN_DST), 4, add_self_loops=False).double()
    with pytest.raises(dfgnn.GraphError, match=r"sources in \[0, 4\).*destinations in \[0, 6\)"):
        layer((rand(4, IN_SRC), rand(6, IN_DST)), ei)


def test_bad_x_pair():
    layer = dt.GATConv((IN_SRC, IN_DST), 4).double()
    with pytest.raises(dfgnn.InvalidArgumentError, match="a pair .x_src, x_dst., got 3 items"):
        layer((rand(5, IN_SRC), rand(4, IN_DST), rand(4, IN_DST)), edge_index((5, 4)))
    with pytest.raises(dfgnn.InvalidArgumentError, match="x_src must be a torch.Tensor"):
        layer((None, rand(4, IN_DST)), edge_index((5, 4)))
    with pytest.raises(TypeError, match=r"in_channels must be an int or a pair of ints"):
        dt.GATConv((1, 2, 3), 4)
    with pytest.raises(dfgnn.InvalidArgumentError, match=r"edge_index must have shape \[2, E\], got \[3, 4\]"):
        layer((rand(5, IN_SRC), rand(4, IN_DST)), torch.zeros(3, 4, dtype=torch.long))
    # a bool mask or bytes are not taken as ids (as on one node set)
    for dtype in (torch.bool, torch.uint8, torch.int16):
        with pytest.raises(dfgnn.DTypeError, match=rf"edge_index must have dtype int32 or int64, got {dtype}"):
            layer((rand(5, IN_SRC), rand(4, IN_DST)), edge_index((5, 4)).to(dtype))
    with pytest.raises(dfgnn.InvalidArgumentError, match="bipartite inputs need an edge_index tensor"):
        layer((rand(5, IN_SRC), rand(4, IN_DST)), None)


def test_gat_without_x_dst_attention_weights_leave_att_dst_alone(eager_functions):
    # x = (x_src, None) with attention weights: alpha has no att_dst term, so att_dst gets no gradient (PyG: None)
    ours, theirs = pyg_pair("GATConv", in_channels=(IN_SRC, IN_DST), out_channels=4, heads=2)
    x, ei = rand(5, IN_SRC, seed=1), edge_index((5, 4))
    for layer in (ours, theirs):
        out, (_, alpha) = layer((x, None), ei, return_attention_weights=True)
        (out.square().sum() + alpha.square().sum()).backward()
    assert theirs.att_dst.grad is None and ours.att_dst.grad is None
    # alpha is recomputed with torch ops at the layer's slope 0.2, PyG's here at 0.2f (SLOPE32): 1e-8 apart
    torch.testing.assert_close(ours.att_src.grad, theirs.att_src.grad, rtol=1e-7, atol=1e-7)


# ---------------------------------------------------------------- torch.compile (CPU float64)


class BipartiteStack(torch.nn.Module if HAS_TORCH else object):
    def __init__(self):
        super().__init__()
        self.gat = dt.GATConv((IN_SRC, IN_DST), 4, heads=2, edge_dim=3)
        self.gt = dt.TransformerConv((IN_SRC, 8), 4, heads=2)

    def forward(self, x_src, x_dst, ei, ea):
        h = torch.relu(self.gat((x_src, x_dst), ei, ea))
        return self.gt((x_src, h), ei)


def test_compile_fullgraph_bipartite():
    """torch.compile(fullgraph=True) traces bipartite layers (the relabelled graph travels as the
    edge_index and the source count) without a graph break and gives eager's results."""
    torch.manual_seed(0)
    ei = torch.stack([torch.randint(0, 30, (200,)), torch.randint(0, 20, (200,))])
    ea = torch.randn(200, 3, dtype=torch.float64)
    xs, xd = torch.randn(30, IN_SRC, dtype=torch.float64), torch.randn(20, IN_DST, dtype=torch.float64)
    model = BipartiteStack().double()

    def run(m):
        m.zero_grad(set_to_none=True)
        a, b = xs.clone().requires_grad_(), xd.clone().requires_grad_()
        out = m(a, b, ei, ea)
        out.square().sum().backward()
        return [out.detach(), a.grad, b.grad] + [p.grad for p in model.parameters()]

    want = run(model)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    for _ in range(2):
        got = run(compiled)
        for i, (a, b) in enumerate(zip(got, want)):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12, msg=f"result {i}")
    torch._dynamo.reset()


# ---------------------------------------------------------------- fused kernels (CUDA)

CUDA_LAYERS = [
    # a number as fill_value: PyG's reduction fills fail on edges into destinations >= min(N_src, N_dst)
    ("GATConv", dict(in_channels=(16, 8), out_channels=8, heads=4, edge_dim=4, fill_value=0.5)),
    ("GATv2Conv", dict(in_channels=(16, 8), out_channels=8, heads=4, edge_dim=4, fill_value=0.5)),
    ("TransformerConv", dict(in_channels=(16, 8), out_channels=16, heads=2, edge_dim=4)),
]


@requires_torch_cuda
@pytest.mark.parametrize("sizes", [(3000, 2000), (2000, 3000)])
@pytest.mark.parametrize("name,kw", CUDA_LAYERS)
def test_cuda_bipartite_layers_match_pyg(name, kw, sizes):
    import torch_geometric.nn as pnn
    torch.manual_seed(0)
    theirs = getattr(pnn, name)(**kw).cuda().double()
    ours = getattr(dt, name)(**kw).cuda()
    ours.load_state_dict(theirs.state_dict())
    n_src, n_dst = sizes
    ei = torch.stack([torch.randint(0, n_src, (20000,)), torch.randint(0, n_dst, (20000,))]).cuda()
    xs, xd = torch.randn(n_src, 16, device="cuda"), torch.randn(n_dst, 8, device="cuda")
    ea = torch.randn(ei.shape[1], 4, device="cuda")
    leaves = [t.clone().requires_grad_() for t in (xs, xd, ea)]
    leaves64 = [t.double().requires_grad_() for t in (xs, xd, ea)]
    a = ours((leaves[0], leaves[1]), ei, leaves[2])
    b = theirs((leaves64[0], leaves64[1]), ei, leaves64[2])
    assert a.shape == (n_dst, b.shape[1])
    out_tol, grad_tol = LAYER_TOL["float32"]
    assert rel_error(a, b) < out_tol, f"output: relative error {rel_error(a, b):.3g}"
    go = torch.randn_like(b)
    a.backward(go.float())
    b.backward(go)
    check_layer_grads(ours, theirs, {k: (t1.grad, t2.grad) for k, t1, t2 in zip(("x_src", "x_dst", "edge_attr"),
                                                                              leaves, leaves64)}, grad_tol)
