"""Error behaviour of dfgnn.torch on the CPU (float64 reference path): bad inputs raise dfgnn
exceptions (or the documented built-in base class) whose message names the problem, on both eager
code paths (autograd Functions and torch custom ops, chosen by dfgnn.torch.use_functions_in_eager).

Decisions recorded here:
- non-contiguous inputs (features, parameters, edge_index, layer inputs) are accepted: they are made
  contiguous internally, and the results and gradients equal those of the contiguous call bitwise;
- with an edge_index tensor the features define N, so features with more rows than max(id) + 1 are
  valid (extra isolated nodes); fewer rows make an edge out of range (GraphError). A dfgnn.Graph
  fixes N, and features with another row count are rejected;
- features of different floating dtypes are promoted to the common dtype (float64 here); a
  non-floating feature is rejected even when promotion would hide it; attention parameters are cast
  to the features' parameter dtype;
- features on different devices need a GPU: that test is skipped here.
Skipped without PyTorch."""

import gc
import math

import numpy as np
import pytest

import dfgnn
from conftest import HAS_TORCH, requires_torch, requires_torch_cuda

if HAS_TORCH:
    import torch
    import dfgnn.torch as dt

pytestmark = requires_torch

EDGES = np.array([(0, 1), (0, 1), (1, 2), (3, 2), (4, 2), (5, 2), (0, 2), (2, 0), (3, 3), (4, 5),
                  (5, 4), (1, 3), (6, 2), (2, 1)])
N, H, D = 7, 2, 3
MODELS = ["gat", "gatv2", "transformer", "agnn"]
_FUNCTION_NAMES = {"gat": "GATFunction", "gatv2": "GATv2Function", "transformer": "TransformerFunction",
                   "agnn": "AGNNFunction"}


@pytest.fixture(params=[True, False], ids=["functions", "custom_ops"])
def eager_functions(request, monkeypatch):
    """Runs a test once with the eager autograd Functions and once with the torch custom ops."""
    monkeypatch.setattr(dt, "use_functions_in_eager", request.param)
    return request.param


def graph():
    return dfgnn.Graph(np.ascontiguousarray(EDGES.T), num_nodes=N)


def edge_index():
    return torch.tensor(EDGES.T.copy())


def rand(*shape, dtype=None, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype or torch.float64)


def inputs(model, n=N, heads=H, dim=D):
    """Inputs of a model in call order (float64, CPU)."""
    f = lambda s: rand(n, heads, dim, seed=s)  # noqa: E731
    p = lambda s: rand(heads, dim, seed=s)  # noqa: E731
    return {"gat": dict(h=f(1), att_src=p(2), att_dst=p(3)),
            "gatv2": dict(h=f(1), h_dst=f(2), att=p(3)),
            "transformer": dict(q=f(1), k=f(2), v=f(3)),
            "agnn": dict(h=f(1), beta=torch.tensor([0.7], dtype=torch.float64))}[model]


def call(model, g, x, **kw):
    return getattr(dt, model)(g, *x.values(), **kw)


def check_path(out, model, eager_functions):
    """The call took the path the fixture chose (so both paths are really exercised)."""
    assert (type(out.grad_fn).__name__ == f"{_FUNCTION_NAMES[model]}Backward") == eager_functions, \
        type(out.grad_fn).__name__


# ---------------------------------------------------------------- node counts


@pytest.mark.parametrize("model,slot", [("gat", "h"), ("gatv2", "h"), ("gatv2", "h_dst"), ("transformer", "q"),
                                        ("transformer", "k"), ("transformer", "v"), ("agnn", "h")])
@pytest.mark.parametrize("rows", [N + 1, N - 1])
def test_features_rows_differ_from_graph_nodes(eager_functions, model, slot, rows):
    x = inputs(model)
    x[slot] = rand(rows, H, D)
    with pytest.raises(dfgnn.InvalidArgumentError,
                       match=rf"inputs\['{slot}'\] must have shape \[N, H, D\] = \[7, 2, 3\].*got \[{rows}, 2, 3\] "
                             r"\(the graph has 7 nodes\)") as info:
        call(model, graph(), x)
    # the C API's message, status and entry point
    assert info.value.status == dfgnn.Status.INVALID_ARGUMENT
    assert info.value.function == "dfgnnReferenceForward"
    assert info.value.kind == "shape"


def test_edge_index_with_more_feature_rows_adds_isolated_nodes(eager_functions):
    # PyG semantics: the features define N; node N (no in-edges) gets a zero output
    x = {k: _leaf(v) for k, v in inputs("gat", n=N + 1).items()}
    out = call("gat", edge_index(), x)
    check_path(out, "gat", eager_functions)
    want = call("gat", dfgnn.Graph(np.ascontiguousarray(EDGES.T), num_nodes=N + 1), x)
    assert out.shape == (N + 1, H, D)
    assert torch.equal(out, want)
    assert torch.equal(out[N], torch.zeros(H, D, dtype=torch.float64))


def test_edge_index_with_fewer_feature_rows(eager_functions):
    with pytest.raises(dfgnn.GraphError, match=r"edge_index\[0\]\[\d+\] = 6 is out of range \[0, 6\)") as info:
        call("gat", edge_index(), inputs("gat", n=N - 1))
    assert info.value.status == dfgnn.Status.INDEX_OUT_OF_RANGE
    assert info.value.function == "dfgnnGraphCreateCoo"


def test_edge_index_transformer_k_rows_differ_from_q(eager_functions):
    # with an edge_index, N comes from the first feature (q): k with N + 1 rows is the mismatch
    x = inputs("transformer")
    x["k"] = rand(N + 1, H, D)
    with pytest.raises(dfgnn.InvalidArgumentError, match=r"inputs\['k'\].*got \[8, 2, 3\] \(the graph has 7 nodes\)"):
        call("transformer", edge_index(), x)


@pytest.mark.parametrize("name", ["GATConv", "GATv2Conv", "TransformerConv", "AGNNConv"])
def test_layer_input_rows_differ_from_graph_nodes(eager_functions, name):
    layer = (dt.AGNNConv() if name == "AGNNConv" else getattr(dt, name)(4, 2, heads=2)).double()
    with pytest.raises(dfgnn.InvalidArgumentError, match=r"\(the graph has 7 nodes\)"):
        layer(rand(N + 1, 4), graph())


# ---------------------------------------------------------------- rank and shape


@pytest.mark.parametrize("model,slot", [("gat", "h"), ("gatv2", "h_dst"), ("transformer", "q"), ("agnn", "h")])
@pytest.mark.parametrize("shape", [(N,), (N, H, D, 1)], ids=["1d", "4d"])
def test_wrong_rank(eager_functions, model, slot, shape):
    x = inputs(model)
    x[slot] = rand(*shape)
    dims = ", ".join(map(str, shape))
    with pytest.raises(dfgnn.InvalidArgumentError,
                       match=rf"^{slot} must have shape \[N, H, D\] \(or \[N, H\*D\] with heads=\), got \[{dims}\]") \
            as info:
        call(model, graph(), x)
    assert info.value.kind == "shape"


def test_2d_features_without_heads(eager_functions):
    x = inputs("gat")
    x["h"] = x["h"].reshape(N, H * D)
    with pytest.raises(dfgnn.InvalidArgumentError, match=r"h must have shape .*with heads=\), got \[7, 6\]"):
        call("gat", graph(), x)
    # ... and with heads= it is the [N, H, D] call
    assert torch.equal(call("gat", graph(), x, heads=H), call("gat", graph(), inputs("gat")))


@pytest.mark.parametrize("heads", [4, 0, -2])
def test_heads_does_not_divide_features(eager_functions, heads):
    x = inputs("gat")
    x["h"] = x["h"].reshape(N, H * D)
    with pytest.raises(dfgnn.InvalidArgumentError,
                       match=rf"h has shape \[7, 6\]: heads={heads} must be >= 1 and divide its second dimension"):
        call("gat", graph(), x, heads=heads)


def test_heads_contradicts_3d_features(eager_functions):
    with pytest.raises(dfgnn.InvalidArgumentError, match=r"q has shape \[7, 2, 3\] \(2 heads\), but heads=3"):
        call("transformer", graph(), inputs("transformer"), heads=3)


@pytest.mark.parametrize("slot,shape", [("k", (N, 3, D)), ("k", (N, H, 4)), ("v", (N, H, 4)), ("v", (N, 1, D))],
                         ids=["k-heads", "k-dim", "v-dim", "v-heads"])
def test_transformer_qkv_heads_or_dims_differ(eager_functions, slot, shape):
    x = inputs("transformer")
    x[slot] = rand(*shape)
    got = ", ".join(map(str, shape))
    with pytest.raises(dfgnn.InvalidArgumentError,
                       match=rf"inputs\['{slot}'\] must have shape \[N, H, D\] = \[7, 2, 3\] .*got \[{got}\]"):
        call("transformer", graph(), x)


def test_gatv2_h_dst_dim_differs(eager_functions):
    x = inputs("gatv2")
    x["h_dst"] = rand(N, H, D + 1)
    with pytest.raises(dfgnn.InvalidArgumentError, match=r"inputs\['h_dst'\] must have shape .*got \[7, 2, 4\]"):
        call("gatv2", graph(), x)


@pytest.mark.parametrize("slot", ["att_src", "att_dst"])
def test_gat_attention_vector_shape(eager_functions, slot):
    x = inputs("gat")
    x[slot] = rand(H, D + 1)
    with pytest.raises(dfgnn.InvalidArgumentError,
                       match=rf"inputs\['{slot}'\] must have shape \[H, D\] = \[2, 3\] .*got \[2, 4\]"):
        call("gat", graph(), x)


def test_agnn_beta_not_one_element(eager_functions):
    x = inputs("agnn")
    x["beta"] = torch.ones(2, dtype=torch.float64)
    with pytest.raises(dfgnn.InvalidArgumentError, match=r"beta must be a one-element tensor, got shape \[2\]"):
        call("agnn", graph(), x)
    x["beta"] = 0.7
    with pytest.raises(dfgnn.InvalidArgumentError, match=r"beta must be a torch.Tensor, got float"):
        call("agnn", graph(), x)


@pytest.mark.parametrize("model", MODELS)
def test_features_not_a_tensor(eager_functions, model):
    x = inputs(model)
    first = next(iter(x))
    x[first] = x[first].numpy()
    with pytest.raises(dfgnn.InvalidArgumentError, match=rf"{first} must be a torch.Tensor, got ndarray"):
        call(model, graph(), x)


# ---------------------------------------------------------------- dtypes


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_cpu_needs_float64(eager_functions, model, dtype):
    x = {k: v.to(getattr(torch, dtype)) for k, v in inputs(model).items()}
    with pytest.raises(TypeError, match=rf"on the CPU dfgnn.torch runs the float64 reference ops, but the features "
                                        rf"are torch.{dtype}") as info:
        call(model, graph(), x)
    assert isinstance(info.value, dfgnn.DTypeError) and info.value.kind == "dtype"


@pytest.mark.parametrize("model,slot", [("gat", "h"), ("gatv2", "h_dst"), ("transformer", "k"), ("agnn", "h")])
@pytest.mark.parametrize("dtype", ["int64", "int32", "bool", "complex128"])
def test_non_floating_features(eager_functions, model, slot, dtype):
    # also when the other features are float64 (promotion would otherwise cast it silently)
    x = inputs(model)
    x[slot] = x[slot].to(getattr(torch, dtype))
    with pytest.raises(dfgnn.DTypeError, match=rf"^{slot} must be a floating-point tensor .*got torch.{dtype}"):
        call(model, graph(), x)


def test_mixed_float_features_are_promoted(eager_functions):
    x = {k: _leaf(v) for k, v in inputs("transformer").items()}
    x32 = dict(x, k=x["k"].float())
    ref = dict(x, k=x32["k"].double())
    out = call("transformer", graph(), x32)
    check_path(out, "transformer", eager_functions)
    assert out.dtype == torch.float64
    assert torch.equal(out, call("transformer", graph(), ref))


def test_float32_attention_vectors_are_cast(eager_functions):
    x = inputs("gat")
    x32 = dict(x, att_src=x["att_src"].float(), att_dst=x["att_dst"].float())
    ref = dict(x, att_src=x32["att_src"].double(), att_dst=x32["att_dst"].double())
    assert torch.equal(call("gat", graph(), x32), call("gat", graph(), ref))


# ---------------------------------------------------------------- devices


@requires_torch_cuda
@pytest.mark.parametrize("slot", ["k", "v"])
def test_features_on_different_devices(eager_functions, slot):
    # (never run on the CPU-only machine that wrote it)
    x = {k: v.float().cuda() for k, v in inputs("transformer").items()}
    x[slot] = x[slot].cpu()
    with pytest.raises(dfgnn.DeviceError, match=rf"inputs\['{slot}'\] is on cpu"):
        call("transformer", graph(), x)


def test_meta_tensors(eager_functions):
    # meta tensors (shape inference, no data): both paths answer with the custom ops' fake implementation
    x = {k: v.to("meta") for k, v in inputs("gat").items()}
    out = call("gat", graph(), x)
    assert out.device.type == "meta" and out.shape == (N, H, D)


# ---------------------------------------------------------------- non-contiguous inputs (accepted)


def _leaf(t):
    return t.detach().requires_grad_()


def _noncontiguous_case(case):
    """(model, graph, inputs with a non-contiguous tensor, kwargs) for one case."""
    x = inputs("transformer" if case in ("k", "v") else "agnn" if case == "agnn" else "gat")
    if case == "h":
        x["h"] = x["h"].permute(2, 1, 0).contiguous().permute(2, 1, 0)
        return "gat", graph(), x, {}
    if case == "att":
        x["att_src"] = x["att_src"].t().contiguous().t()
        return "gat", graph(), x, {}
    if case == "h2d":
        x["h"] = x["h"].reshape(N, H * D).t().contiguous().t()
        return "gat", graph(), x, dict(heads=H)
    if case == "k":
        x["k"] = torch.stack([x["k"], x["k"]], dim=-1)[..., 0]
        return "transformer", graph(), x, {}
    if case == "v":
        x["v"] = x["v"].transpose(0, 1).contiguous().transpose(0, 1)
        return "transformer", graph(), x, {}
    if case == "agnn":
        x["h"] = x["h"].reshape(N, H * D).t().contiguous().t()
        return "agnn", graph(), x, {}
    if case == "edge_index":
        return "gat", torch.tensor(EDGES.copy()).t(), x, {}
    raise ValueError(case)


@pytest.mark.parametrize("case", ["h", "att", "h2d", "k", "v", "agnn", "edge_index"])
def test_noncontiguous_inputs_match_contiguous(eager_functions, case):
    model, g, x, kw = _noncontiguous_case(case)
    noncontiguous = [k for k, t in x.items() if not t.is_contiguous()]
    if isinstance(g, torch.Tensor):
        noncontiguous += ["edge_index"] if not g.is_contiguous() else []
    assert len(noncontiguous) == 1, noncontiguous
    nc = {k: _leaf(v) for k, v in x.items()}
    cont = {k: _leaf(v.contiguous()) for k, v in x.items()}
    g_cont = g.contiguous() if isinstance(g, torch.Tensor) else g
    a = call(model, g, nc, dropout=0.3, dropout_seed=5, **kw)
    b = call(model, g_cont, cont, dropout=0.3, dropout_seed=5, **kw)
    check_path(a, model, eager_functions)
    assert torch.equal(a, b)
    go = rand(*a.shape, seed=9)
    a.backward(go)
    b.backward(go)
    for k in x:
        assert torch.equal(nc[k].grad, cont[k].grad), k


@pytest.mark.parametrize("name", ["GATConv", "AGNNConv"])
def test_layer_noncontiguous_input(eager_functions, name):
    torch.manual_seed(0)
    layer = (dt.AGNNConv() if name == "AGNNConv" else dt.GATConv(4, 3, heads=2)).double()
    x = rand(4, N).t()
    assert not x.is_contiguous()
    a, b = layer(x, edge_index()), layer(x.contiguous(), edge_index())
    if name == "AGNNConv":  # x reaches the op as given (a non-contiguous [N, 1, F] view)
        assert torch.equal(a, b)
    else:  # x goes through torch.nn.Linear first, whose BLAS call rounds differently for a transposed x
        torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-13)


# ---------------------------------------------------------------- edge_index


@pytest.mark.parametrize("bad,shape", [(lambda: torch.zeros(3, 4, dtype=torch.int64), "3, 4"),
                                       (lambda: torch.zeros(4, dtype=torch.int64), "4"),
                                       (lambda: torch.tensor(EDGES.copy()), "14, 2")],
                         ids=["3xE", "1d", "Ex2"])
def test_edge_index_not_2_by_E(eager_functions, bad, shape):
    with pytest.raises(dfgnn.InvalidArgumentError, match=rf"edge_index must have shape \[2, E\], got \[{shape}\]") \
            as info:
        call("gat", bad(), inputs("gat"))
    assert info.value.function == "dfgnnGraphCreateCoo"


@pytest.mark.parametrize("bad_id", [9, N, -1])
def test_edge_index_out_of_range(eager_functions, bad_id):
    ei = edge_index()
    ei[0, 3] = bad_id
    # the features fix N = 7 (num_nodes is not inferred from the edges when features are given)
    with pytest.raises(ValueError, match=rf"edge_index\[0\]\[3\] = {bad_id} is out of range \[0, 7\)") as info:
        call("gat", ei, inputs("gat"))
    assert isinstance(info.value, dfgnn.GraphError)
    assert info.value.status == dfgnn.Status.INDEX_OUT_OF_RANGE


def test_graph_with_num_nodes_below_edge_ids():
    with pytest.raises(dfgnn.GraphError, match=r"edge_index\[0\]\[5\] = 5 is out of range \[0, 5\)"):
        dt.graph(edge_index(), 5)


@pytest.mark.parametrize("dtype", ["float64", "float32", "bool", "int16"])
def test_edge_index_wrong_dtype(eager_functions, dtype):
    ei = edge_index().to(getattr(torch, dtype))
    with pytest.raises(dfgnn.DTypeError, match=rf"edge_index must have dtype int32 or int64, got {dtype}"):
        call("gat", ei, inputs("gat"))


# ---------------------------------------------------------------- the graph argument


@pytest.mark.parametrize("bad,match", [(None, r"graph must be a dfgnn.Graph or an edge_index .*got None"),
                                       ("abc", r"edge_index must be an array .*got str"),
                                       (3, r"edge_index must be an array .*got int"),
                                       ({"edge_index": 1}, r"edge_index must be an array .*got dict")],
                         ids=["None", "str", "int", "dict"])
def test_wrong_graph_type(eager_functions, bad, match):
    with pytest.raises(dfgnn.InvalidArgumentError, match=match):
        call("gat", bad, inputs("gat"))


def test_function_apply_wrong_graph_type():
    x = inputs("gat")
    with pytest.raises(dfgnn.InvalidArgumentError, match=r"graph must be a dfgnn.Graph \(see dfgnn.torch.graph\), "
                                                         r"got Tensor"):
        dt.GATFunction.apply(edge_index(), *x.values())


@pytest.mark.parametrize("how", ["released", "uninitialised"])
def test_graph_without_native_graph(eager_functions, how):
    if how == "released":
        g = graph()
        g._h = None  # what dfgnn does to live graphs at interpreter exit
    else:
        g = dfgnn.Graph.__new__(dfgnn.Graph)
    with pytest.raises(dfgnn.InvalidArgumentError, match=r"this dfgnn.Graph has no native graph"):
        call("gat", g, inputs("gat"))


def test_custom_op_with_freed_graph_key():
    g = graph()
    key = g.key
    del g
    gc.collect()
    x = inputs("gat")
    with pytest.raises(dfgnn.InvalidArgumentError, match=rf"dfgnn.Graph #{key} no longer exists"):
        dt.OPS["gat"](*x.values(), None, key, False, 0.2, None, None, 0.0, 0)


@pytest.mark.parametrize("model", MODELS)
def test_graph_dropped_before_backward(eager_functions, model):
    # the op keeps the Graph alive for its backward, on both paths
    grads = []
    for drop in (False, True):
        g = graph()
        x = {k: _leaf(v) for k, v in inputs(model).items()}
        out = call(model, g, x, dropout=0.25, dropout_seed=3)
        check_path(out, model, eager_functions)
        if drop:
            del g
            gc.collect()
        out.backward(rand(*out.shape, seed=4))
        grads.append([x[k].grad for k in x])
    for a, b in zip(*grads):
        assert torch.equal(a, b)


# ---------------------------------------------------------------- dropout and its seed


@pytest.mark.parametrize("bad", [-0.1, 1.0, 1.5, math.nan, "x", True], ids=repr)
def test_invalid_dropout(eager_functions, bad):
    with pytest.raises(dfgnn.InvalidArgumentError, match=r"dropout must be a probability in \[0, 1\), got"):
        call("gat", graph(), inputs("gat"), dropout=bad, dropout_seed=1)


@pytest.mark.parametrize("bad", [-0.5, 1.0, math.nan], ids=repr)
def test_layer_invalid_dropout_in_training(eager_functions, bad):
    layer = dt.TransformerConv(4, 2, heads=2, dropout=bad).double().train()
    with pytest.raises(dfgnn.InvalidArgumentError, match=r"dropout must be a probability in \[0, 1\)"):
        layer(rand(N, 4), edge_index())
    layer.eval()  # no dropout in eval mode: the layer runs
    assert layer(rand(N, 4), edge_index()).shape == (N, 4)


@pytest.mark.parametrize("bad,match", [
    (-1, r"dropout_seed must be an int in \[0, 2\*\*63\), got -1"),
    (2 ** 63, r"dropout_seed must be an int in \[0, 2\*\*63\), got 9223372036854775808"),
    (1.5, r"dropout_seed must be an int in \[0, 2\*\*63\), got float"),
    ("7", r"dropout_seed must be an int in \[0, 2\*\*63\), got str"),
    (lambda: torch.tensor([1.0]), r"a dropout_seed tensor must hold one integer, got torch.float32 \[1\]"),
    (lambda: torch.tensor([1, 2]), r"a dropout_seed tensor must hold one integer, got torch.int64 \[2\]"),
], ids=["negative", "2**63", "float", "str", "float-tensor", "two-element-tensor"])
def test_invalid_dropout_seed(eager_functions, bad, match):
    seed = bad() if callable(bad) else bad
    with pytest.raises(dfgnn.InvalidArgumentError, match=match):
        call("gat", graph(), inputs("gat"), dropout=0.5, dropout_seed=seed)


# ---------------------------------------------------------------- layers: unsupported PyG features


@pytest.mark.parametrize("name", ["GATConv", "GATv2Conv", "TransformerConv"])
def test_layer_return_attention_weights_with_training_dropout(eager_functions, name):
    # the weights are computed outside the kernels, which hold the dropout mask
    layer = getattr(dt, name)(4, 2, heads=2, dropout=0.5).double().train()
    with pytest.raises(NotImplementedError, match=rf"{name}: return_attention_weights with attention dropout"):
        layer(rand(N, 4), edge_index(), return_attention_weights=True)


@pytest.mark.parametrize("name", ["GATConv", "GATv2Conv", "TransformerConv"])
def test_layer_edge_attr_without_edge_dim(eager_functions, name):
    # PyG's GATConv ignores it silently (GATv2Conv asserts; TransformerConv adds it to the values
    # unprojected): an error here. Edge features themselves: test_torch_edge.py.
    layer = getattr(dt, name)(4, 2, heads=2).double()
    with pytest.raises(dfgnn.InvalidArgumentError, match=rf"{name}: edge_attr was given, but the layer has no edge"):
        layer(rand(N, 4), edge_index(), edge_attr=rand(len(EDGES), 3))


# ---------------------------------------------------------------- PyG compatibility edges (review findings)

ALL_LAYERS = [("GATConv", (4, 2)), ("GATv2Conv", (4, 2)), ("TransformerConv", (4, 2)), ("AGNNConv", ())]


@pytest.mark.parametrize("name,args", ALL_LAYERS)
def test_layer_keywords_like_pyg(name, args):
    # PyG hands extra keywords to MessagePassing: its defaults pass, other aggregations are not
    # supported here, and an unknown keyword (a typo) is a TypeError, never silently dropped.
    getattr(dt, name)(*args, aggr="add", flow="source_to_target")
    with pytest.raises(NotImplementedError, match=rf"{name}: aggr='mean' is not supported"):
        getattr(dt, name)(*args, aggr="mean")
    with pytest.raises(NotImplementedError, match=rf"{name}: flow='target_to_source' is not supported"):
        getattr(dt, name)(*args, flow="target_to_source")
    with pytest.raises(TypeError, match="unexpected keyword argument 'add_self_loop'"):
        getattr(dt, name)(*args, add_self_loop=False)


@pytest.mark.parametrize("name,args", ALL_LAYERS)
def test_layer_sparse_adjacency_is_not_supported(name, args):
    layer = getattr(dt, name)(*args).double()
    adj = torch.sparse_coo_tensor(edge_index(), torch.ones(edge_index().shape[1]), (N, N))
    with pytest.raises(NotImplementedError, match="sparse adjacency"):
        layer(rand(N, 4), adj)


@pytest.mark.parametrize("name,args", ALL_LAYERS)
def test_layer_on_a_graph_without_nodes(eager_functions, name, args):
    # as PyG: an empty output of the right width, and a backward that runs
    layer = getattr(dt, name)(*args).double()
    x = torch.empty(0, 4, dtype=torch.float64, requires_grad=True)
    out = layer(x, torch.empty(2, 0, dtype=torch.long))
    assert out.shape[0] == 0 and out.dtype == torch.float64
    out.sum().backward()
    assert x.grad is not None and x.grad.shape == (0, 4)


def test_gatv2_linear_biases_start_like_pyg():
    # PyG's Linear(weight_initializer='glorot') keeps its default bias: uniform in +-1/sqrt(in_channels)
    torch.manual_seed(0)
    layer = dt.GATv2Conv(64, 32, heads=2)
    for lin in (layer.lin_l, layer.lin_r):
        bias = lin.bias.detach()
        assert 0 < bias.abs().max() <= 1 / 64 ** 0.5
        assert bias.std() > 0.5 * (1 / 64 ** 0.5) / 3 ** 0.5  # a uniform spread, not zeros
    layer.reset_parameters()
    assert layer.lin_l.bias.abs().max() > 0
