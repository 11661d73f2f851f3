"""Attention dropout (dfgnn_op_t.dropout / dropout_seed) through the Python package.

The mask: the weight alpha_ij of the edge at CSR position e in head h is kept and scaled by
1 / (1 - p) when a 32-bit counter hash of (seed, e, h) is at or above p * 2^32, else dropped; the
softmax normaliser and lse do not change (kernel_templates/params.cuh, dropout_factor). Checked here
against an independent NumPy version of that hash and of the transformer op, by finite differences
and torch.autograd.gradcheck with a fixed seed (a fixed mask makes the op smooth), and through the
torch ops and layers (training/eval, seeds from torch's generator). CPU tests run the float64
reference ops (NumPy only, or torch); the CUDA tests compare the kernels with the reference under
the same seed and skip without a device.
"""

import math

import numpy as np
import pytest

import dfgnn
import npref
from conftest import HAS_TORCH, find_dataset, requires_torch, requires_torch_cuda, call_op, torch_inputs

if HAS_TORCH:
    import torch
    import dfgnn.torch as dt

MODELS = ["gat", "gatv2", "transformer", "agnn"]
LAYERS = ["GATConv", "GATv2Conv", "TransformerConv"]   # AGNNConv has no dropout argument (as in PyG)

# 7 nodes: a duplicate edge (0->1 twice), a self-loop (3->3), node 6 without in-edges, a hub (node 2);
# the CSR order differs from the input order and from the CSC order.
EDGES = np.array([(0, 1), (0, 1), (1, 2), (3, 2), (4, 2), (5, 2), (0, 2), (2, 0), (3, 3), (4, 5),
                  (5, 4), (1, 3), (6, 2), (2, 1)])
N = 7
SEED = 1234


def small_graph():
    return dfgnn.Graph(np.ascontiguousarray(EDGES.T), num_nodes=N)


# ---------------------------------------------------------------- an independent NumPy mask

_U32 = np.uint32


def _mix32(x):
    """params.cuh's mix32 on a uint32 array (wrapping multiplies): the key's mixer."""
    x = x ^ (x >> _U32(16))
    x = x * _U32(0x7FEB352D)
    x = x ^ (x >> _U32(15))
    x = x * _U32(0x846CA68B)
    return x ^ (x >> _U32(16))


def _edge_bits(e, key):
    """params.cuh's dropout_bits: the mixer's core (two multiplies around one shift) over edge ^ key."""
    x = (e ^ key) * _U32(0x7FEB352D)
    x = x ^ (x >> _U32(15))
    return x * _U32(0x846CA68B)


def numpy_keep(p, seed, num_edges, heads):
    """[E, H] float64 dropout factors (0 or 1 / (1 - p)) of the edges at CSR positions 0..E-1: the
    hash of params.cuh's dropout_bits, in NumPy uint32 arithmetic (wrapping mod 2^32): the edge mixed
    once with a key per (seed, head) by the mixer's core, the key two full rounds of the mixer over the
    seed's halves and the head. p is held as a float32 by the op: threshold = min(round(p32 * 2^32), 2^32 - 1),
    scale = 1 / (1 - p32) in float32."""
    p32 = np.float32(p)
    threshold = min(math.floor(float(p32) * 4294967296.0 + 0.5), 4294967295)
    scale = float(np.float32(1) / (np.float32(1) - p32))
    lo, hi = _U32(seed & 0xFFFFFFFF), _U32(seed >> 32)
    with np.errstate(over="ignore"):
        h = np.arange(1, heads + 1, dtype=_U32)[None, :]
        key = _mix32(_mix32(lo ^ (h * _U32(0x9E3779B9))) ^ hi)
        e = np.arange(num_edges, dtype=np.uint64).astype(_U32)[:, None]
        x = _edge_bits(e, key)
    keep = x >= _U32(threshold)
    if threshold == 0:
        keep[:] = True
    return np.where(keep, scale, 0.0)


def numpy_transformer(g, q, k, v, p, seed, scale=None):
    """(out, lse) of the Graph Transformer op with attention dropout, in NumPy float64: per
    destination i, a softmax over its in-edges in the graph's CSR order, weights alpha * m / (1 - p)
    with m the NumPy mask of the edges' CSR positions."""
    row_ptr, col_idx, _ = g.csr()
    n, heads, dim = q.shape
    s = 1.0 / np.sqrt(dim) if scale is None else scale
    keep = numpy_keep(p, seed, len(col_idx), heads)
    out = np.zeros((n, heads, dim))
    lse = np.full((n, heads), -np.inf)
    for i in range(n):
        pos = np.arange(row_ptr[i], row_ptr[i + 1])
        if len(pos) == 0:
            continue
        src = col_idx[pos]
        e = s * (q[i][None] * k[src]).sum(-1)            # [deg, H]
        m = e.max(axis=0)
        w = np.exp(e - m)
        alpha = w / w.sum(axis=0)
        out[i] = ((alpha * keep[pos])[:, :, None] * v[src]).sum(axis=0)
        lse[i] = m + np.log(w.sum(axis=0))
    return out, lse


def test_numpy_mask_against_known_values():
    """Pins the NumPy hash itself (so a change in it cannot pass the comparisons below unnoticed):
    for seed 7, edge 3, head 1 the hash is 0x7335E24C and for seed 5, edge 10, head 2 0x34986CD9
    (worked out by hand in Python integers), 0.45004 and 0.20545 of 2^32: the first pair is kept for
    p = 0.45 and dropped for p = 0.46, the second kept for p = 0.20 and dropped for p = 0.21."""
    kept = lambda p: float(np.float32(1) / (np.float32(1) - np.float32(p)))  # noqa: E731
    assert numpy_keep(0.45, 7, 4, 2)[3, 1] == kept(0.45)
    assert numpy_keep(0.46, 7, 4, 2)[3, 1] == 0.0
    assert numpy_keep(0.20, 5, 11, 3)[10, 2] == kept(0.20)
    assert numpy_keep(0.21, 5, 11, 3)[10, 2] == 0.0
    assert (numpy_keep(0.0, 7, 100, 3) == 1.0).all()
    # the seed's high half matters too
    assert (numpy_keep(0.5, 7, 2000, 2) != numpy_keep(0.5, 7 + 2 ** 32, 2000, 2)).mean() > 0.4


# ---------------------------------------------------------------- Op fields and argument checks (no torch)


def test_op_fields():
    op = dfgnn.op("gat", "float32", heads=2, dim=4)
    assert op.dropout == 0.0 and op.dropout_seed == 0
    op = dfgnn.op("gat", "float32", heads=2, dim=4, dropout=0.25, dropout_seed=2 ** 64 - 1)
    assert op.dropout == 0.25 and op.dropout_seed == 2 ** 64 - 1
    assert "dropout=0.25" in repr(op)
    # without dropout the seed is not stored: equal ops whatever seed was given
    assert dfgnn.op("gat", dropout=0.0, dropout_seed=99).dropout_seed == 0
    assert dfgnn.ops.op("transformer", dropout=0.5, dropout_seed=3).dropout == 0.5


@pytest.mark.parametrize("bad", [-0.1, 1.0, 1.5, float("nan"), 0.99999999])
def test_invalid_dropout_is_a_clear_error(bad):
    g = small_graph()
    inputs = npref.random_inputs("gat", N, 2, 3, np.random.default_rng(0))
    with pytest.raises(dfgnn.InvalidArgumentError, match=r"dropout must be a probability in \[0, 1\)"):
        dfgnn.reference_forward(g, "gat", inputs, dropout=bad)
    with pytest.raises(dfgnn.InvalidArgumentError, match=r"dropout must be a probability in \[0, 1\)"):
        dfgnn.reference_backward(g, "gat", inputs, np.ones((N, 2, 3)), dropout=bad)
    with pytest.raises(dfgnn.InvalidArgumentError, match=r"dropout must be a probability in \[0, 1\)"):
        dfgnn.op("gat", dropout=bad)


def test_invalid_dropout_seed_and_type():
    with pytest.raises(dfgnn.InvalidArgumentError, match=r"dropout_seed must be an int in \[0, 2\*\*64\), got -1"):
        dfgnn.op("gat", dropout=0.5, dropout_seed=-1)
    with pytest.raises(dfgnn.InvalidArgumentError, match=r"dropout_seed must be an int"):
        dfgnn.op("gat", dropout=0.5, dropout_seed=2 ** 64)
    with pytest.raises(dfgnn.InvalidArgumentError, match=r"dropout_seed must be an int .* got float"):
        dfgnn.op("gat", dropout=0.5, dropout_seed=1.5)
    with pytest.raises(dfgnn.InvalidArgumentError, match="dropout must be a probability"):
        dfgnn.op("gat", dropout="0.5x")


def test_library_rejects_dropout_set_on_the_op():
    """The C API validates too (an Op edited directly): dfgnn_status INVALID_ARGUMENT."""
    op = dfgnn.op("gat", "float32", heads=2, dim=3)
    op.dropout = 1.0
    with pytest.raises(dfgnn.InvalidArgumentError, match=r"op.dropout must be in \[0, 1\)"):
        dfgnn.ops.schedule(small_graph(), op)


# ---------------------------------------------------------------- float64 reference ops (no torch)


@pytest.mark.parametrize("model", MODELS)
def test_dropout_zero_equals_no_dropout(model, rng):
    g = small_graph()
    inputs = npref.random_inputs(model, N, 2, 3, rng)
    go = rng.standard_normal((N, 2, 3))
    out, lse = dfgnn.reference_forward(g, model, inputs)
    out0, lse0 = dfgnn.reference_forward(g, model, inputs, dropout=0.0, dropout_seed=987654321)
    np.testing.assert_array_equal(out0, out)
    np.testing.assert_array_equal(lse0, lse)
    grads = dfgnn.reference_backward(g, model, inputs, go)
    grads0 = dfgnn.reference_backward(g, model, inputs, go, dropout=0.0, dropout_seed=5)
    for k in inputs:
        np.testing.assert_array_equal(grads0[k], grads[k])


@pytest.mark.parametrize("model", MODELS)
def test_dropout_changes_output_not_lse(model, rng):
    g = small_graph()
    inputs = npref.random_inputs(model, N, 2, 3, rng)
    out, lse = dfgnn.reference_forward(g, model, inputs)
    a, lse_a = dfgnn.reference_forward(g, model, inputs, dropout=0.5, dropout_seed=1)
    b, _ = dfgnn.reference_forward(g, model, inputs, dropout=0.5, dropout_seed=2)
    a2, _ = dfgnn.reference_forward(g, model, inputs, dropout=0.5, dropout_seed=1)
    np.testing.assert_array_equal(lse_a, lse)       # the normaliser ignores dropout
    np.testing.assert_array_equal(a, a2)            # same seed, same mask
    assert not np.allclose(a, out) and not np.allclose(a, b)
    assert (a[6] == 0).all()                        # no in-edges: still 0


@pytest.mark.parametrize("p", [0.3, 0.5, 0.9])
@pytest.mark.parametrize("seed", [0, SEED, 2 ** 64 - 1])
def test_transformer_matches_numpy_mask(p, seed, rng):
    """The reference op's output equals a NumPy transformer with the NumPy hash's mask (CSR
    positions from Graph.csr()); lse is the undropped softmax's."""
    g = small_graph()
    heads, dim = 3, 4
    q, k, v = (rng.standard_normal((N, heads, dim)) for _ in range(3))
    out, lse = dfgnn.reference_forward(g, "transformer", dict(q=q, k=k, v=v), dropout=p, dropout_seed=seed)
    want, want_lse = numpy_transformer(g, q, k, v, p, seed)
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-12, atol=1e-13)


def test_transformer_matches_numpy_mask_random_graph(rng):
    """A larger graph (R-MAT, 1024 nodes, skewed degrees) and a scale given."""
    g = dfgnn.Graph.rmat(10, 8000, seed=3, permute=True)
    n, heads, dim = g.num_nodes, 2, 5
    q, k, v = (rng.standard_normal((n, heads, dim)) for _ in range(3))
    out, lse = dfgnn.reference_forward(g, "transformer", dict(q=q, k=k, v=v), scale=0.7, dropout=0.4,
                                       dropout_seed=2 ** 40 + 17)
    want, want_lse = numpy_transformer(g, q, k, v, 0.4, 2 ** 40 + 17, scale=float(np.float32(0.7)))
    np.testing.assert_allclose(out, want, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("p", [0.1, 0.6, 0.9])
def test_dropped_fraction(p, cora_path):
    """Counts the kept (edge, head) weights through the library: with q = 0 every weight is 1/deg,
    with v = 1 out_i = kept_i / (deg_i (1 - p)). The count equals the NumPy mask's exactly, and the
    dropped fraction is within 5 standard deviations of p (about 10^4 edges x 4 heads)."""
    g = dfgnn.Graph.from_file(cora_path, add_self_loops=True)
    n, heads, e = g.num_nodes, 4, g.num_edges
    q = np.zeros((n, heads, 1))
    v = np.ones((n, heads, 1))
    out, _ = dfgnn.reference_forward(g, "transformer", dict(q=q, k=q, v=v), dropout=p, dropout_seed=SEED)
    deg = g.in_degrees().astype(np.float64)
    scale = float(np.float32(1) / (np.float32(1) - np.float32(p)))
    kept = np.rint(out[:, :, 0] * deg[:, None] / scale)      # [N, H]
    keep = numpy_keep(p, SEED, e, heads)                      # [E, H]
    row_ptr = g.csr()[0]
    np.testing.assert_array_equal(kept, np.add.reduceat(keep > 0, row_ptr[:-1], axis=0))
    dropped = 1.0 - kept.sum() / (e * heads)
    sigma = math.sqrt(p * (1 - p) / (e * heads))
    assert abs(dropped - p) < 5 * sigma, f"dropped {dropped:.4f} of the weights for p = {p}"
    # the heads draw different masks
    assert not np.array_equal(keep[:, 0], keep[:, 1])


def test_dropout_is_unbiased(rng):
    """The mean over many seeds of the dropped-out output is the output without dropout (the
    1 / (1 - p) scaling); within 6 standard errors of the mean."""
    g = small_graph()
    inputs = npref.random_inputs("gat", N, 2, 3, rng)
    want, _ = dfgnn.reference_forward(g, "gat", inputs)
    outs = np.stack([dfgnn.reference_forward(g, "gat", inputs, dropout=0.4, dropout_seed=s)[0] for s in range(2000)])
    err = np.abs(outs.mean(axis=0) - want)
    sem = outs.std(axis=0) / math.sqrt(len(outs))
    assert (err <= 6 * sem + 1e-12).all(), f"largest deviation {np.max(err / (sem + 1e-300)):.1f} standard errors"


@pytest.mark.parametrize("model", MODELS)
def test_reference_backward_matches_finite_differences(model, rng):
    """With a fixed seed the mask is fixed: reference_backward is the derivative of reference_forward
    with the same dropout and seed (and not of another seed's)."""
    g = small_graph()
    kw = dict(dropout=0.3, dropout_seed=SEED)
    inputs = npref.random_inputs(model, N, 2, 3, rng)
    go = rng.standard_normal((N, 2, 3))
    grads = dfgnn.reference_backward(g, model, inputs, go, **kw)
    other = dfgnn.reference_backward(g, model, inputs, go, dropout=0.3, dropout_seed=SEED + 1)
    num = npref.numeric_grads(lambda: dfgnn.reference_forward(g, model, inputs, **kw)[0], inputs, go)
    for name in inputs:
        np.testing.assert_allclose(grads[name], num[name], rtol=1e-6, atol=1e-7, err_msg=f"{model} d/d{name}")
    assert any(not np.allclose(other[k], grads[k]) for k in inputs)


# ---------------------------------------------------------------- torch ops (CPU float64 path)


def _apply(model, g, t, dropout, seed):
    """The autograd.Function classes, options positional (dropout and seed last)."""
    if model == "gat":
        return dt.GATFunction.apply(g, t["h"], t["att_src"], t["att_dst"], 0.2, None, dropout, seed)
    if model == "gatv2":
        return dt.GATv2Function.apply(g, t["h"], t["h_dst"], t["att_src"], 0.2, None, dropout, seed)
    if model == "transformer":
        return dt.TransformerFunction.apply(g, t["q"], t["k"], t["v"], None, None, dropout, seed)
    return dt.AGNNFunction.apply(g, t["h"], t["beta"], None, dropout, seed)


@requires_torch
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("graph_kind", ["Graph", "edge_index"])
def test_gradcheck_with_dropout(model, graph_kind):
    """gradcheck (first derivatives: the ops are once-differentiable) of each op with dropout 0.3
    and a fixed seed, through the custom op (a Graph by key, or an edge_index tensor) and through
    the autograd.Function."""
    g = small_graph() if graph_kind == "Graph" else torch.tensor(EDGES.T.copy())
    _, t = torch_inputs(model, N, 2, 3, "cpu", torch.float64)
    names = list(t)
    fn = lambda *xs: call_op(model, g, dict(zip(names, xs)), dropout=0.3, dropout_seed=SEED)  # noqa: E731
    assert torch.autograd.gradcheck(fn, tuple(t[k] for k in names), eps=1e-6, atol=1e-6)
    if graph_kind == "Graph":
        fn = lambda *xs: _apply(model, g, dict(zip(names, xs)), 0.3, SEED)  # noqa: E731
        assert torch.autograd.gradcheck(fn, tuple(t[k] for k in names), eps=1e-6, atol=1e-6)


@requires_torch
@pytest.mark.parametrize("model", MODELS)
def test_torch_ops_match_reference_with_the_same_seed(model):
    """Forward and backward of the torch op equal the reference ops with the same dropout and seed
    (so the backward got the forward's seed), and differ from another seed's."""
    g = small_graph()
    inputs, t = torch_inputs(model, N, 2, 3, "cpu", torch.float64)
    out = call_op(model, g, t, dropout=0.3, dropout_seed=SEED)
    want, _ = dfgnn.reference_forward(g, model, inputs, dropout=0.3, dropout_seed=SEED)
    np.testing.assert_array_equal(out.detach().numpy(), want)
    go = torch.randn_like(out)
    out.backward(go)
    ref = dfgnn.reference_backward(g, model, inputs, go.numpy(), dropout=0.3, dropout_seed=SEED)
    for k in inputs:
        np.testing.assert_array_equal(t[k].grad.numpy(), ref[k], err_msg=k)
    other, _ = dfgnn.reference_forward(g, model, inputs, dropout=0.3, dropout_seed=SEED + 1)
    assert not np.allclose(other, want)


@requires_torch
@pytest.mark.parametrize("model", MODELS)
def test_torch_dropout_zero_equals_no_dropout(model):
    g = small_graph()
    _, t = torch_inputs(model, N, 2, 3, "cpu", torch.float64)
    results = []
    for kw in (dict(), dict(dropout=0.0, dropout_seed=777), dict(dropout=0, dropout_seed=2 ** 63 - 1)):
        for x in t.values():
            x.grad = None
        out = call_op(model, g, t, **kw)
        out.square().sum().backward()
        results.append([out.detach()] + [x.grad for x in t.values()])
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert torch.equal(a, b)


@requires_torch
def test_torch_seed_forms():
    """The seed may be an int in [0, 2**63) or a one-element integer tensor."""
    g = small_graph()
    _, t = torch_inputs("transformer", N, 2, 3, "cpu", torch.float64)
    a = call_op("transformer", g, t, dropout=0.4, dropout_seed=2 ** 63 - 1)
    b = call_op("transformer", g, t, dropout=0.4, dropout_seed=torch.tensor([2 ** 63 - 1]))
    assert torch.equal(a, b)
    with pytest.raises(dfgnn.InvalidArgumentError, match="one integer"):
        call_op("transformer", g, t, dropout=0.4, dropout_seed=torch.tensor([1.0]))


@requires_torch
@pytest.mark.parametrize("bad", [-0.1, 1.0, float("nan")])
def test_torch_invalid_dropout(bad):
    g = small_graph()
    _, t = torch_inputs("gat", N, 2, 3, "cpu", torch.float64)
    with pytest.raises(dfgnn.InvalidArgumentError, match=r"dropout must be a probability in \[0, 1\), got"):
        call_op("gat", g, t, dropout=bad, dropout_seed=1)
    with pytest.raises(dfgnn.InvalidArgumentError, match=r"dropout must be a probability in \[0, 1\)"):
        _apply("gat", g, t, bad, 1)
    layer = dt.GATConv(4, 2, heads=2, dropout=bad).double().train()
    x = torch.randn(N, 4, dtype=torch.float64)
    with pytest.raises(dfgnn.InvalidArgumentError, match=r"dropout must be a probability in \[0, 1\)"):
        layer(x, torch.tensor(EDGES.T.copy()))


@requires_torch
@pytest.mark.parametrize("seed", [-1, 2 ** 63])
def test_torch_invalid_seed(seed):
    """The custom ops take the seed as an int64: the functions accept [0, 2**63)."""
    g = small_graph()
    _, t = torch_inputs("gat", N, 2, 3, "cpu", torch.float64)
    with pytest.raises(dfgnn.InvalidArgumentError, match=r"dropout_seed must be an int in \[0, 2\*\*63\)"):
        call_op("gat", g, t, dropout=0.5, dropout_seed=seed)


# ---------------------------------------------------------------- layers


_LAYER_KW = {"GATConv": dict(heads=3), "GATv2Conv": dict(heads=2), "TransformerConv": dict(heads=2)}


def _layers(name, device="cpu", dtype=None, dropout=0.5, cin=5, cout=4):
    """(layer with dropout, the same weights without dropout)."""
    dtype = dtype or torch.float64
    cls = getattr(dt, name)
    torch.manual_seed(0)
    layer = cls(cin, cout, dropout=dropout, **_LAYER_KW[name]).to(device, dtype)
    plain = cls(cin, cout, dropout=0.0, **_LAYER_KW[name]).to(device, dtype)
    plain.load_state_dict(layer.state_dict())
    return layer, plain


def _forward_backward(layer, x, ei):
    layer.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_()
    out = layer(x, ei)
    out.square().sum().backward()
    return [out.detach(), x.grad] + [p.grad for p in layer.parameters()]


def _check_layer_dropout(name, device, dtype, ei, n, cin=5, cout=4):
    layer, plain = _layers(name, device, dtype, cin=cin, cout=cout)
    x = torch.randn(n, cin, device=device, dtype=dtype)
    # training: a new mask per call
    layer.train()
    a = _forward_backward(layer, x, ei)
    b = _forward_backward(layer, x, ei)
    assert not torch.equal(a[0], b[0])
    # ... drawn from torch's generator: manual_seed reproduces output and gradients
    torch.manual_seed(42)
    c = _forward_backward(layer, x, ei)
    torch.manual_seed(42)
    d = _forward_backward(layer, x, ei)
    for u, w in zip(c, d):
        assert torch.equal(u, w)
    # eval: no dropout, deterministic, equal to the layer without dropout (in either mode)
    layer.eval()
    e1, e2 = _forward_backward(layer, x, ei), _forward_backward(layer, x, ei)
    want_eval = _forward_backward(plain.eval(), x, ei)
    want_train = _forward_backward(plain.train(), x, ei)
    for u, v, w, z in zip(e1, e2, want_eval, want_train):
        assert torch.equal(u, v) and torch.equal(u, w) and torch.equal(u, z)
    assert not torch.equal(c[0], e1[0])
    return layer, x


def _layer_op(name, layer, x, ei, seed):
    """The layer's attention computed by hand through the functional op with the given seed."""
    H, C = layer.heads, layer.out_channels
    if name == "GATConv":
        h = layer.lin(x).view(-1, H, C)
        out = dt.gat(ei, h, layer.att_src, layer.att_dst, add_self_loops=True, dropout=layer.dropout,
                     dropout_seed=seed)
        return out.reshape(-1, H * C) + layer.bias
    if name == "GATv2Conv":
        xl, xr = layer.lin_l(x).view(-1, H, C), layer.lin_r(x).view(-1, H, C)
        out = dt.gatv2(ei, xl, xr, layer.att, add_self_loops=True, dropout=layer.dropout, dropout_seed=seed)
        return out.reshape(-1, H * C) + layer.bias
    q, k, v = (lin(x).view(-1, H, C) for lin in (layer.lin_query, layer.lin_key, layer.lin_value))
    out = dt.transformer(ei, q, k, v, dropout=layer.dropout, dropout_seed=seed)
    return out.reshape(-1, H * C) + layer.lin_skip(x)


@requires_torch
@pytest.mark.parametrize("name", LAYERS)
def test_layer_dropout_train_and_eval(name):
    ei = torch.tensor(EDGES.T.copy())
    layer, x = _check_layer_dropout(name, "cpu", torch.float64, ei, N)
    # the seed is torch.randint(0, 2**62, (1,)) from the default generator, one draw per call
    layer.train()
    torch.manual_seed(7)
    got = layer(x, ei)
    torch.manual_seed(7)
    seed = int(torch.randint(0, 2 ** 62, (1,)).item())
    torch.testing.assert_close(got, _layer_op(name, layer, x, ei, seed), rtol=0, atol=0)


@requires_torch
def test_agnn_layer_has_no_dropout():
    layer = dt.AGNNConv().double().train()
    x = torch.randn(N, 5, dtype=torch.float64)
    ei = torch.tensor(EDGES.T.copy())
    assert torch.equal(layer(x, ei), layer(x, ei))


@requires_torch
@pytest.mark.parametrize("name", LAYERS)
def test_layer_eval_matches_pyg_with_dropout_set(name):
    """In eval mode a layer built with dropout=0.6 is PyG's layer with dropout=0.6 (no dropout in eval)."""
    pytest.importorskip("torch_geometric", reason="torch_geometric is not installed")
    import torch_geometric.nn as pnn
    kw = dict(in_channels=5, out_channels=4, dropout=0.6, **_LAYER_KW[name])
    torch.manual_seed(0)
    ours = getattr(dt, name)(**kw).double().eval()
    theirs = getattr(pnn, name)(**kw).double().eval()
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(N, 5, dtype=torch.float64)
    ei = torch.tensor(EDGES.T.copy())
    torch.testing.assert_close(ours(x, ei), theirs(x, ei), rtol=1e-7, atol=1e-8)


# ---------------------------------------------------------------- CUDA (fused kernels vs the float64 reference)

TOL = {"float32": dict(rtol=1e-4, atol=1e-5), "bfloat16": dict(rtol=5e-2, atol=5e-2)}


def _rel(a, b, floor=0.0):
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return ((a - b).norm() / max(b.norm().item(), floor, 1e-300)).item()


def _grad_errors(t, ref):
    """Norm-wise relative error of each gradient, with a floor of a tenth of the largest gradient's
    norm (a gradient near zero keeps the absolute rounding error of the others)."""
    floor = 0.1 * max(np.linalg.norm(r) for r in ref.values())
    return {k: _rel(t[k].grad, torch.from_numpy(ref[k]), floor) for k in t}


@requires_torch_cuda
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
def test_cuda_dropout_matches_reference(model, dtype_name):
    """The kernels' forward and backward with dropout 0.3 and a seed equal the float64 reference ops
    with the same dropout and seed (on the inputs as rounded to dtype): same mask on both sides, and
    the backward regenerates the forward's. float32: elementwise to 1e-4. bfloat16: the forward
    elementwise to 5e-2; the gradients norm-wise (floor: a tenth of the largest gradient's norm),
    the value-side one (h, or v) to 3e-2, the score-side ones (attention vectors, h_dst, q, k, beta)
    to 0.15. The backward takes Delta = dout . out from the bf16-rounded output, so a score gradient
    that is exactly 0 (a one-edge row, duplicate edges) comes out as bf16 noise of dout . out, and
    the score-side gradients are small: over 30 draws of dout on an H200 their worst errors were
    0.084 with dropout 0.3 (GATv2's h_dst) and 0.043 without; the value side's 0.010. A wrong mask
    gives errors of order 1."""
    dtype, tol = getattr(torch, dtype_name), TOL[dtype_name]
    g = small_graph()
    _, t = torch_inputs(model, N, 2, 8, "cuda", dtype)
    kw = dict(dropout=0.3, dropout_seed=SEED)
    out = call_op(model, g, t, **kw)
    rounded = {k: v.detach().double().cpu().numpy() for k, v in t.items()}
    want, _ = dfgnn.reference_forward(g, model, rounded, **kw)
    torch.testing.assert_close(out.double().cpu(), torch.from_numpy(want), **tol)
    undropped, _ = dfgnn.reference_forward(g, model, rounded)
    assert not np.allclose(want, undropped)
    go = torch.randn(out.shape, generator=torch.Generator().manual_seed(11), dtype=torch.float64)
    out.backward(go.to(out))
    ref = dfgnn.reference_backward(g, model, rounded, go.to(out).double().cpu().numpy(), **kw)
    if dtype_name == "float32":
        for k in t:
            torch.testing.assert_close(t[k].grad.double().cpu(), torch.from_numpy(ref[k]), **tol, msg=k)
    else:
        errors = _grad_errors(t, ref)
        value = "v" if model == "transformer" else "h"
        assert errors[value] < 3e-2 and max(errors.values()) < 0.15, \
            f"gradients (norm-wise relative error): {errors}"


def _some_schedules(g, op, pass_):
    """The first and last candidate of each solver family of one pass."""
    by_family = {}
    for s in dfgnn.ops.list_schedules(g, op, pass_):
        by_family.setdefault(s.split(":")[0], []).append(s)
    return sorted({c for cands in by_family.values() for c in (cands[0], cands[-1])})


@requires_torch_cuda
@pytest.mark.parametrize("model", ["gat", "transformer"])
def test_cuda_dropout_every_solver_family(model):
    """On a hub-heavy graph (split rows, hybrid and block-row schedules), every solver family of
    the forward, backward row and backward column passes applies the reference's mask: forced
    schedules through dfgnn.ops on torch tensors, against the float64 reference with the same seed."""
    g = dfgnn.Graph.planted_hubs(20000, 8, 4, 4000, seed=7)
    n, heads, dim = g.num_nodes, 2, 8
    inputs, t = torch_inputs(model, n, heads, dim, "cuda", torch.float32)
    dev = {k: v.detach().contiguous() for k, v in t.items()}
    host = {k: v.double().cpu().numpy() for k, v in dev.items()}
    kw = dict(dropout=0.3, dropout_seed=SEED)
    want, _ = dfgnn.reference_forward(g, model, host, **kw)
    go = torch.randn(n, heads, dim, device="cuda")
    ref = dfgnn.reference_backward(g, model, host, go.double().cpu().numpy(), **kw)
    op = dfgnn.op(model, "float32", heads, dim, **kw)
    stream = torch.cuda.current_stream().cuda_stream
    alloc = lambda nbytes: torch.empty(nbytes, dtype=torch.uint8, device="cuda")  # noqa: E731
    out = torch.empty(n, heads, dim, device="cuda")
    lse = torch.empty(n, heads, device="cuda")
    bad = []
    for s in _some_schedules(g, op, "forward"):
        dfgnn.ops.forward(g, model, dev, out, lse, stream=stream, allocator=alloc, schedule=s, **kw)
        if _rel(out, torch.from_numpy(want)) > 1e-5:
            bad.append(("forward", s, _rel(out, torch.from_numpy(want))))
    dfgnn.ops.forward(g, model, dev, out, lse, stream=stream, allocator=alloc, **kw)
    row0, col0 = dfgnn.ops.schedule(g, op, "backward").split("|")
    pairs = [(r, col0) for r in _some_schedules(g, op, "backward_row")] + \
            [(row0, c) for c in _some_schedules(g, op, "backward_col")]
    floor = 0.1 * max(np.linalg.norm(r) for r in ref.values())
    for row, col in pairs:
        grads = {k: torch.empty_like(v) for k, v in dev.items()}
        dfgnn.ops.backward(g, model, dev, out, lse, go, grads, stream=stream, allocator=alloc,
                           schedule=f"{row}|{col}", **kw)
        for k in grads:
            e = _rel(grads[k], torch.from_numpy(ref[k]), floor)
            if e > 1e-4:
                bad.append((f"d{k}", f"{row}|{col}", e))
    assert not bad, f"schedules off the reference (relative error): {bad[:8]}"


@requires_torch_cuda
@pytest.mark.parametrize("name", LAYERS)
def test_cuda_layer_dropout_train_and_eval(name):
    """(e) on CUDA: training draws a new mask per call, torch.manual_seed reproduces it bitwise
    (deterministic kernels), eval mode equals the layer without dropout."""
    d = find_dataset("cora")
    edges = dfgnn.Graph.from_file(d).edge_index()
    ei = torch.from_numpy(edges).cuda()
    _check_layer_dropout(name, "cuda", torch.float32, ei, int(edges.max()) + 1, cin=16, cout=8)


@requires_torch_cuda
@pytest.mark.parametrize("name", LAYERS)
def test_cuda_layer_dropout_matches_cpu_reference(name):
    """A training step of a layer on CUDA equals the CPU float64 reference of the same attention with
    the seed the CUDA layer drew: under torch.manual_seed(5), the first draw of
    torch.randint(0, 2**62, (1,)) from torch's CUDA generator (the layers draw their seed on the
    features' device)."""
    ei = torch.tensor(EDGES.T.copy())
    layer, _ = _layers(name, "cpu", torch.float64, dropout=0.4, cin=16, cout=8)
    gpu = _layers(name, "cuda", torch.float32, dropout=0.4, cin=16, cout=8)[0]
    gpu.load_state_dict(layer.state_dict())
    x = torch.randn(N, 16, dtype=torch.float64)
    layer.train()
    gpu.train()
    torch.manual_seed(5)
    got = _forward_backward(gpu, x.float().cuda(), ei.cuda())
    torch.manual_seed(5)
    seed = int(torch.randint(0, 2 ** 62, (1,), device="cuda").item())
    layer.zero_grad(set_to_none=True)
    xx = x.clone().requires_grad_()
    out = _layer_op(name, layer, xx, ei, seed)
    out.square().sum().backward()
    want = [out.detach(), xx.grad] + [p.grad for p in layer.parameters()]
    floor = 0.1 * max(w.norm().item() for w in want)
    errors = [_rel(a, b, floor) for a, b in zip(got, want)]
    assert max(errors) < 1e-4, f"relative errors (output, dx, parameter gradients): {errors}"


# ---------------------------------------------------------------- device seeds (CUDA graphs, torch.compile)


def _seed_op(model, t, seed_tensor, seed=0, p=0.3):
    """The forward custom op with a seed tensor (the last argument) on a small Graph."""
    g = small_graph()
    names = dfgnn.MODEL_INPUTS[model]
    edge = (None,) if model != "agnn" else ()
    return g, dt.OPS[model](*(t[k] for k in names), None, g.key, False, 0.2, None, None, p, seed, *edge,
                            dropout_seed_tensor=seed_tensor)


@requires_torch
@pytest.mark.parametrize("model", MODELS)
def test_custom_op_seed_tensor_reaches_forward_and_backward(model):
    """The custom ops' seed tensor argument (dropout_seed_tensor) takes the place of the int seed
    (given 0 here) in the forward and, saved for it, in the backward: both equal the reference ops
    with that seed (CPU: the reference path reads the tensor's value)."""
    g = small_graph()
    inputs, t = torch_inputs(model, N, 2, 3, "cpu", torch.float64)
    g, (out, _lse) = _seed_op(model, t, torch.tensor([SEED]))
    want, _ = dfgnn.reference_forward(g, model, inputs, dropout=0.3, dropout_seed=SEED)
    np.testing.assert_array_equal(out.detach().numpy(), want)
    go = torch.randn_like(out)
    out.backward(go)
    ref = dfgnn.reference_backward(g, model, inputs, go.numpy(), dropout=0.3, dropout_seed=SEED)
    for k in inputs:
        np.testing.assert_array_equal(t[k].grad.numpy(), ref[k], err_msg=k)


@requires_torch
def test_custom_op_seed_tensor_opcheck():
    """Schema, fake implementation and autograd registration with the seed tensor given."""
    _, t = torch_inputs("gat", N, 2, 3, "cpu", torch.float64)
    g = small_graph()
    args = (t["h"], t["att_src"], t["att_dst"], None, g.key, False, 0.2, None, None, 0.3, 0, None,
            torch.tensor([SEED]))
    torch.library.opcheck(dt.OPS["gat"], args)


@requires_torch
def test_function_seed_tensor_on_the_cpu():
    """An autograd Function given a CPU seed tensor reads its value (the CPU path takes ints)."""
    g = small_graph()
    _, t = torch_inputs("transformer", N, 2, 3, "cpu", torch.float64)
    a = _apply("transformer", g, t, 0.3, torch.tensor([SEED]))
    b = _apply("transformer", g, t, 0.3, SEED)
    assert torch.equal(a, b)


def _cuda_call_both_paths(model, g, t, monkeypatch, **kw):
    """(out, grads) of the function call through the autograd Functions and through the custom ops."""
    results = []
    for functions in (True, False):
        monkeypatch.setattr(dt, "use_functions_in_eager", functions)
        for x in t.values():
            x.grad = None
        out = call_op(model, g, t, **kw)
        out.backward(torch.ones_like(out))
        results.append((out.detach().clone(), {k: x.grad.clone() for k, x in t.items()}))
    return results


@requires_torch_cuda
@pytest.mark.parametrize("model", MODELS)
def test_cuda_device_seed_equals_int_seed(model, monkeypatch):
    """A CUDA seed tensor (read by the kernels through dfgnn_launch_t.dropout_seed_device) gives the
    int seed's mask, forward and backward, bitwise (deterministic kernels), on both eager paths; an
    int32 tensor works as int64."""
    g = small_graph()
    _, t = torch_inputs(model, N, 2, 8, "cuda", torch.float32)
    want = _cuda_call_both_paths(model, g, t, monkeypatch, dropout=0.3, dropout_seed=SEED)
    for seed in (torch.tensor([SEED], device="cuda"), torch.tensor(SEED, device="cuda", dtype=torch.int32)):
        got = _cuda_call_both_paths(model, g, t, monkeypatch, dropout=0.3, dropout_seed=seed)
        for (out_a, grads_a), (out_b, grads_b) in zip(got, want):
            assert torch.equal(out_a, out_b)
            for k in grads_a:
                assert torch.equal(grads_a[k], grads_b[k]), k
    other = _cuda_call_both_paths(model, g, t, monkeypatch, dropout=0.3,
                                  dropout_seed=torch.tensor([SEED + 1], device="cuda"))
    assert not torch.equal(other[0][0], want[0][0])


@requires_torch_cuda
@pytest.mark.parametrize("name", LAYERS)
def test_cuda_layer_draws_its_seed_on_the_device(name):
    """In training a CUDA layer draws its seed with torch.randint on the features' device (torch's
    CUDA generator): under the same torch.manual_seed it equals the functional op with that seed."""
    ei = torch.tensor(EDGES.T.copy()).cuda()
    layer = _layers(name, "cuda", torch.float32, dropout=0.5, cin=16, cout=8)[0].train()
    x = torch.randn(N, 16, device="cuda")
    torch.manual_seed(7)
    got = layer(x, ei)
    torch.manual_seed(7)
    seed = torch.randint(0, 2 ** 62, (1,), device="cuda")
    torch.testing.assert_close(got, _layer_op(name, layer, x, ei, int(seed.item())), rtol=0, atol=0)
    torch.testing.assert_close(got, _layer_op(name, layer, x, ei, seed), rtol=0, atol=0)


@requires_torch_cuda
def test_cuda_training_step_with_dropout_does_not_sync():
    """A warm training forward+backward of CUDA layers with dropout on a dfgnn.Graph makes no
    synchronising CUDA call (torch.cuda.set_sync_debug_mode("error") raises on one, e.g. .item())."""
    d = find_dataset("cora")
    g = dt.graph(torch.from_numpy(dfgnn.Graph.from_file(d).edge_index()).cuda(), add_self_loops=True)
    conv1, conv2 = dt.GATConv(16, 8, heads=4, dropout=0.6).cuda(), dt.TransformerConv(32, 8, dropout=0.6).cuda()
    x = torch.randn(g.num_nodes, 16, device="cuda")

    def step():
        conv2(torch.relu(conv1(x, g)), g).square().sum().backward()
    for _ in range(2):
        step()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


def _gat2(dropout=0.6, cin=16):
    torch.manual_seed(0)
    return torch.nn.ModuleList([dt.GATConv(cin, 8, heads=8, dropout=dropout),
                                dt.GATConv(64, 7, heads=1, concat=False, dropout=dropout)]).cuda()


def _gat2_forward(layers, x, g):
    return layers[1](torch.nn.functional.elu(layers[0](x, g)), g)


@requires_torch_cuda
def test_cuda_graph_replays_draw_fresh_masks():
    """A training forward+backward with GATConv(dropout=0.6) captured in a CUDA graph (torch.cuda.graph):
    each replay draws a new seed on the device (a new mask: outputs differ between replays on the same
    input), and a replay after torch.manual_seed(s) gives what an eager step after torch.manual_seed(s)
    gives (the captured torch.randint reads torch's CUDA generator state at replay)."""
    d = find_dataset("cora")
    g = dt.graph(torch.from_numpy(dfgnn.Graph.from_file(d).edge_index()).cuda(), add_self_loops=True)
    layers = _gat2().train()
    static_x = torch.randn(g.num_nodes, 16, device="cuda")

    def step():
        out = _gat2_forward(layers, static_x, g)
        out.square().sum().backward()
        return out

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            layers.zero_grad(set_to_none=True)
            step()
    torch.cuda.current_stream().wait_stream(side)
    layers.zero_grad(set_to_none=True)
    cuda_graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(cuda_graph):
        static_out = step()
    static = [static_out] + [p.grad for p in layers.parameters()]
    replays = []
    for s in range(3):
        torch.manual_seed(100 + s)
        cuda_graph.replay()
        replays.append([t.clone() for t in static])
    assert not torch.equal(replays[0][0], replays[1][0]) and not torch.equal(replays[1][0], replays[2][0]), \
        "the same mask on two replays"
    for s in range(3):
        layers.zero_grad(set_to_none=True)
        torch.manual_seed(100 + s)
        want = [step().detach()] + [p.grad for p in layers.parameters()]
        for a, b in zip(replays[s], want):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@requires_torch_cuda
def test_cuda_compile_reduce_overhead_training_with_dropout():
    """torch.compile(mode="reduce-overhead", fullgraph=True) of the training forward and loss of a
    2-layer GAT with dropout=0.6 (PyG's examples/gat.py), backward and optimiser step after it: no graph
    break (fullgraph raises on one), CUDA graphs recorded and not skipped, a new mask each step, and,
    with torch._inductor.config.fallback_random (inductor then draws with eager's generator calls), each
    step's loss and gradients equal eager's under the same torch.manual_seed."""
    from torch._dynamo.utils import counters
    d = find_dataset("cora")
    g = dt.graph(torch.from_numpy(dfgnn.Graph.from_file(d).edge_index()).cuda(), add_self_loops=True)
    n = g.num_nodes
    x = torch.randn(n, 16, device="cuda")
    y = torch.randint(0, 7, (n,), device="cuda")
    layers = _gat2().train()

    def loss_fn(x, y):
        return torch.nn.functional.cross_entropy(_gat2_forward(layers, x, g), y)

    torch._dynamo.reset()
    counters.clear()
    import torch._inductor.config as inductor_config
    with inductor_config.patch(fallback_random=True):
        compiled = torch.compile(loss_fn, fullgraph=True, mode="reduce-overhead")
        losses = []
        for step in range(5):
            layers.zero_grad(set_to_none=True)
            torch.manual_seed(100 + step)
            want = loss_fn(x, y)
            want.backward()
            want_grads = [p.grad.clone() for p in layers.parameters()]
            layers.zero_grad(set_to_none=True)
            torch.manual_seed(100 + step)
            loss = compiled(x, y)
            loss.backward()
            torch.testing.assert_close(loss.detach().clone(), want.detach(), rtol=1e-5, atol=1e-6)
            for a, b in zip([p.grad for p in layers.parameters()], want_grads):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
            losses.append(loss.item())
    assert len(set(losses)) == len(losses), f"the same mask in two steps: losses {losses}"
    assert counters["inductor"]["cudagraph_skips"] == 0, "inductor skipped CUDA graphs (see the log)"
    # and a real training loop (Adam) on the compiled loss runs and learns
    opt = torch.optim.Adam(layers.parameters(), lr=0.01)
    first = None
    for step in range(30):
        opt.zero_grad(set_to_none=True)
        loss = compiled(x, y)
        loss.backward()
        opt.step()
        first = loss.item() if first is None else first
    assert loss.item() < first
    torch._dynamo.reset()
