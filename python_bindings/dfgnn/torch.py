"""PyTorch front end of dfgnn: autograd ops and PyG-style layers over the fused kernels.

Ops (``torch.autograd.Function`` subclasses, plus functional wrappers):

- :class:`GATFunction` / :func:`gat`: ``h`` [N, H, D], ``att_src``, ``att_dst`` [H, D] (or [1, H, D])
- :class:`GATv2Function` / :func:`gatv2`: ``h`` (source side), ``h_dst``, ``att``
- :class:`TransformerFunction` / :func:`transformer`: ``q``, ``k``, ``v``
- :class:`AGNNFunction` / :func:`agnn`: ``h``, ``beta`` [1]

Each returns ``out`` [N, H, D]. On CUDA tensors they run the fused kernels (float32, float16 or
bfloat16 features; attention vectors and beta in float32) asynchronously on torch's current
stream of the tensors' device, with device scratch from torch's caching allocator (nothing is
allocated outside torch and nothing waits on the host after an op's first call on a graph, so the
calls can be captured in CUDA graphs once warmed up). Under ``torch.autocast`` float32 features
run in the autocast dtype. On CPU float64 tensors they run dfgnn's float64 reference ops (for
``torch.autograd.gradcheck`` and tests). The backward recomputes attention from the saved
per-(node, head) log-sum-exp; no E x H tensor is stored. Double backward is not supported.

The functions (and the layers) run through torch custom ops, ``torch.ops.dfgnn.gat`` /
``gatv2`` / ``transformer`` / ``agnn`` and their ``*_backward`` ops (see :data:`OPS`), with fake
implementations and autograd registered, so ``torch.compile(model, fullgraph=True)`` traces them
without graph breaks. The autograd.Function classes remain as a lower-level API.

A graph is a :class:`dfgnn.Graph`, or a PyG ``edge_index`` (int32/int64 [2, E], on the CPU or
on the tensors' device) that is turned into one and cached for as long as that tensor lives
unmodified (:func:`graph`). One Graph serves one CUDA device.

Layers mirroring PyG 2.8 (constructor arguments, parameter names, so ``load_state_dict`` of a
PyG layer works): :class:`GATConv`, :class:`GATv2Conv`, :class:`TransformerConv`,
:class:`AGNNConv`. Not supported yet (NotImplementedError): attention dropout in training,
``edge_dim``, bipartite inputs, ``return_attention_weights``.
"""

try:
    import torch
except ImportError as _e:  # pragma: no cover - exercised where torch is absent
    raise ImportError("dfgnn.torch needs PyTorch, which is not installed (pip install torch); the rest of dfgnn "
                      "(graphs, fingerprints, reference ops, dfgnn.ops on DLPack arrays) works without it") from _e

import math
import weakref

from . import _dfgnn
from ._errors import InvalidArgumentError, invalid_argument
from ._graph import Graph, graph_by_key
from ._op import MODEL_INPUTS, Direction, make_op

__all__ = [
    "graph", "gat", "gatv2", "transformer", "agnn", "OPS",
    "GATFunction", "GATv2Function", "TransformerFunction", "AGNNFunction",
    "GATConv", "GATv2Conv", "TransformerConv", "AGNNConv",
]

_GPU_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# ---------------------------------------------------------------- graphs from edge_index tensors

_CACHE_SIZE = 32
_graph_cache = {}  # key -> (weakref to edge_index, its _version, Graph)


def _drop_cached(key):
    def callback(_ref):
        _graph_cache.pop(key, None)
    return callback


def _version(t):
    try:
        return t._version
    except RuntimeError:  # inference tensors keep no version counter (and cannot change in place)
        return None


def graph(edge_index, num_nodes=None, *, add_self_loops=False, reject_duplicates=False):
    """A :class:`dfgnn.Graph` for a PyG ``edge_index`` tensor, cached while that tensor lives and
    is not modified in place (so a training loop builds CSR, CSC, fingerprint and plans once).
    A :class:`dfgnn.Graph` is returned as it is."""
    if isinstance(edge_index, Graph):
        return edge_index
    if not isinstance(edge_index, torch.Tensor):
        return Graph(edge_index, num_nodes, add_self_loops=add_self_loops, reject_duplicates=reject_duplicates)
    if num_nodes is None:
        num_nodes = int(edge_index.max()) + 1 if edge_index.numel() > 0 else 0
    key = (id(edge_index), int(num_nodes), bool(add_self_loops), bool(reject_duplicates))
    hit = _graph_cache.get(key)
    if hit is not None and hit[0]() is edge_index and hit[1] == _version(edge_index):
        return hit[2]
    ei = edge_index.detach()
    if not ei.is_contiguous():
        ei = ei.contiguous()
    if ei.is_cuda:
        # The library copies device data with cudaMemcpy on the legacy default stream: let the
        # stream that produced edge_index finish first.
        torch.cuda.current_stream(ei.device).synchronize()
        with torch.cuda.device(ei.device):
            g = Graph(_dl(ei), num_nodes, add_self_loops=add_self_loops, reject_duplicates=reject_duplicates)
    else:
        g = Graph(ei, num_nodes, add_self_loops=add_self_loops, reject_duplicates=reject_duplicates)
    if len(_graph_cache) >= _CACHE_SIZE:
        _graph_cache.pop(next(iter(_graph_cache)))
    try:
        ref = weakref.ref(edge_index, _drop_cached(key))
    except TypeError:
        return g
    _graph_cache[key] = (ref, _version(edge_index), g)
    return g


# ---------------------------------------------------------------- running one op

def _check_graph(g):
    if not isinstance(g, Graph):
        raise invalid_argument(f"graph must be a dfgnn.Graph (see dfgnn.torch.graph), got {type(g).__name__}",
                               kind="type")


def _device_context(t):
    return torch.cuda.device(t.device) if t.is_cuda else _NullContext()


class _NullContext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _run_forward(g, model, inputs, params, schedule):
    """inputs: dict slot -> detached contiguous tensors. Returns (out, lse)."""
    _check_graph(g)
    first = next(iter(inputs.values()))
    n, heads, dim = g.num_nodes, first.shape[1], first.shape[2]
    ctx = _dfgnn.default_context()
    if first.is_cuda:
        if first.dtype not in _GPU_DTYPES:
            raise invalid_argument(f"CUDA features must be float32, float16 or bfloat16, got {first.dtype}",
                                   kind="dtype")
        _bind_device(g, first)
        op = make_op(model, str(first.dtype), heads, dim, **params)
        out = torch.empty((n, heads, dim), dtype=first.dtype, device=first.device)
        lse = torch.empty((n, heads), dtype=torch.float32, device=first.device)
        with torch.cuda.device(first.device):
            ws = _workspace(ctx, g, op, Direction.FORWARD, schedule, first.device)
            stream = torch.cuda.current_stream(first.device).cuda_stream
            _dfgnn.forward(ctx, g._h, op, _dls(inputs), _dl(out), _dl(lse), stream, _dl(ws), schedule)
        g._device = first.device.index
        return out, lse
    if first.dtype != torch.float64:
        raise invalid_argument(f"on the CPU dfgnn.torch runs the float64 reference ops, but the features are "
                               f"{first.dtype}: use CUDA tensors for float32/float16/bfloat16, or .double()",
                               kind="dtype")
    op = make_op(model, "float64", heads, dim, **params)
    out = torch.empty((n, heads, dim), dtype=torch.float64)
    lse = torch.empty((n, heads), dtype=torch.float64)
    _dfgnn.reference_forward(g._h, op, _dls(inputs), _dl(out), _dl(lse))
    return out, lse


def _run_backward(g, model, inputs, out, lse, grad_out, params, schedule):
    first = next(iter(inputs.values()))
    heads, dim = first.shape[1], first.shape[2]
    grad_out = grad_out.to(out.dtype).contiguous().view(out.shape)
    grads = {k: torch.empty_like(v) for k, v in inputs.items()}
    if first.is_cuda:
        op = make_op(model, str(first.dtype), heads, dim, **params)
        ctx = _dfgnn.default_context()
        with torch.cuda.device(first.device):
            ws = _workspace(ctx, g, op, Direction.BACKWARD, schedule, first.device)
            stream = torch.cuda.current_stream(first.device).cuda_stream
            _dfgnn.backward(ctx, g._h, op, _dls(inputs), _dl(out), _dl(lse), _dl(grad_out), _dls(grads), stream,
                            _dl(ws), schedule)
    else:
        op = make_op(model, "float64", heads, dim, **params)
        _dfgnn.reference_backward(g._h, op, _dls(inputs), _dl(grad_out), _dls(grads))
    return grads


def _bind_device(g, t):
    if g._device is not None and g._device != t.device.index:
        raise invalid_argument(f"this graph's device copy lives on cuda:{g._device}, but the features are on "
                               f"{t.device}; build one dfgnn.Graph per device", kind="device")


def _workspace(ctx, g, op, direction, schedule, device):
    nbytes = _dfgnn.workspace_size(ctx, g._h, op, direction, schedule)
    return torch.empty(nbytes, dtype=torch.uint8, device=device) if nbytes else None


def _dl(t):
    """A DLPack capsule of a (detached) tensor without any stream synchronisation: by default
    Tensor.__dlpack__ makes the legacy default stream wait on the current one, which costs an
    event per tensor and is not allowed while a CUDA graph is being captured. The kernels run on
    the current stream, so no synchronisation is needed."""
    return None if t is None else t.__dlpack__(stream=-1)


def _dls(tensors):
    return {k: _dl(v) for k, v in tensors.items()}


def _save(ctx, g, model, names, inputs, out, lse, params, schedule):
    ctx.dfgnn = (g, model, names, params, schedule)
    ctx.save_for_backward(*[inputs[k] for k in names], out, lse)


def _restore(ctx):
    g, model, names, params, schedule = ctx.dfgnn
    saved = ctx.saved_tensors
    inputs = dict(zip(names, saved[:len(names)]))
    out, lse = saved[len(names)], saved[len(names) + 1]
    return g, model, names, params, schedule, inputs, out, lse


def _grads_for(ctx, names, grads, offset):
    """Gradients in the order of forward's arguments; None where not needed."""
    return tuple(grads[k] if ctx.needs_input_grad[offset + i] else None for i, k in enumerate(names))


def _prepared(inputs):
    return {k: v.detach().contiguous() for k, v in inputs.items()}


class _AttentionFunction(torch.autograd.Function):
    """The backward shared by the four ops: gradients of the tensor arguments, None for the graph and
    for the trailing options."""

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        g, model, names, params, schedule, inputs, out, lse = _restore(ctx)
        grads = _run_backward(g, model, inputs, out, lse, grad_out, params, schedule)
        options = len(ctx.needs_input_grad) - 1 - len(names)
        return (None,) + _grads_for(ctx, names, grads, 1) + (None,) * options


class GATFunction(_AttentionFunction):
    """GAT attention: e_ij = LeakyReLU(att_dst . h_i + att_src . h_j), out_i = sum_j alpha_ij h_j.

    ``apply(graph, h, att_src, att_dst, negative_slope=0.2, deterministic=True, schedule=None)``"""

    @staticmethod
    def forward(ctx, graph, h, att_src, att_dst, negative_slope=0.2, deterministic=True, schedule=None):
        names = ("h", "att_src", "att_dst")
        inputs = _prepared(dict(h=h, att_src=att_src, att_dst=att_dst))
        params = dict(negative_slope=negative_slope, deterministic=deterministic)
        out, lse = _run_forward(graph, "gat", inputs, params, schedule)
        _save(ctx, graph, "gat", names, inputs, out, lse, params, schedule)
        return out



class GATv2Function(_AttentionFunction):
    """GATv2 attention: e_ij = att . LeakyReLU(h_dst_i + h_j), out_i = sum_j alpha_ij h_j.

    ``apply(graph, h, h_dst, att, negative_slope=0.2, deterministic=True, schedule=None)``"""

    @staticmethod
    def forward(ctx, graph, h, h_dst, att, negative_slope=0.2, deterministic=True, schedule=None):
        names = ("h", "h_dst", "att_src")
        inputs = _prepared(dict(h=h, h_dst=h_dst, att_src=att))
        params = dict(negative_slope=negative_slope, deterministic=deterministic)
        out, lse = _run_forward(graph, "gatv2", inputs, params, schedule)
        _save(ctx, graph, "gatv2", names, inputs, out, lse, params, schedule)
        return out



class TransformerFunction(_AttentionFunction):
    """Graph Transformer attention: e_ij = scale * (q_i . k_j), out_i = sum_j alpha_ij v_j.

    ``apply(graph, q, k, v, scale=None, deterministic=True, schedule=None)``; scale None = 1/sqrt(D)."""

    @staticmethod
    def forward(ctx, graph, q, k, v, scale=None, deterministic=True, schedule=None):
        names = ("q", "k", "v")
        inputs = _prepared(dict(q=q, k=k, v=v))
        params = dict(scale=scale, deterministic=deterministic)
        out, lse = _run_forward(graph, "transformer", inputs, params, schedule)
        _save(ctx, graph, "transformer", names, inputs, out, lse, params, schedule)
        return out



class AGNNFunction(_AttentionFunction):
    """AGNN attention: e_ij = beta * cos(h_i, h_j), out_i = sum_j alpha_ij h_j.

    ``apply(graph, h, beta, deterministic=True, schedule=None)``"""

    @staticmethod
    def forward(ctx, graph, h, beta, deterministic=True, schedule=None):
        names = ("h", "beta")
        inputs = _prepared(dict(h=h, beta=beta))
        params = dict(deterministic=deterministic)
        out, lse = _run_forward(graph, "agnn", inputs, params, schedule)
        _save(ctx, graph, "agnn", names, inputs, out, lse, params, schedule)
        return out



# ---------------------------------------------------------------- torch custom ops (torch.compile)

# The four ops are registered as torch custom ops: dfgnn::gat, dfgnn::gatv2, dfgnn::transformer,
# dfgnn::agnn (forward; returns out and lse) and dfgnn::<model>_backward, with fake implementations
# (shapes only, for torch.compile's tracing) and the backward attached with register_autograd. The
# functional API and the layers call them, so torch.compile(fullgraph=True) traces a layer stack
# without graph breaks, and the backward shows up in the compiled backward graph.
#
# A dfgnn.Graph is not a tensor, so an op takes its graph as three arguments
# (edge_index, graph_key, add_self_loops):
#   - a dfgnn.Graph travels by Graph.key, an int (torch.compile guards on it or makes it symbolic);
#     the op looks the live Graph up in a weak registry (dfgnn._graph.graph_by_key);
#   - an edge_index tensor travels as itself and becomes a Graph inside the op, where real data
#     exists (through graph()'s cache: built once per edge_index tensor, not per call).
# Torch's opaque-object support for custom ops is still changing between releases (2.11 and 2.15
# differ), so an int key is the portable choice.

_GRAPH_ARGS = "Tensor? edge_index, SymInt graph_key, bool add_self_loops"
_OPTION_ARGS = "float negative_slope, float? scale, bool deterministic, str? schedule"
_EXTRA = 7  # number of graph + option arguments after the tensors


def _op_graph(edge_index, key, add_self_loops, num_nodes):
    if edge_index is not None:
        return graph(edge_index, num_nodes, add_self_loops=add_self_loops)
    return graph_by_key(key)


def _op_params(model, negative_slope, scale, deterministic):
    """The op fields this model reads (others stay at their defaults, so op keys do not vary)."""
    params = dict(deterministic=deterministic)
    if model in ("gat", "gatv2"):
        params["negative_slope"] = negative_slope
    elif model == "transformer":
        params["scale"] = scale
    return params


def _lse_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _define_ops(model):
    names = MODEL_INPUTS[model]
    k = len(names)
    tensors = ", ".join(f"Tensor {n}" for n in names)

    def forward_impl(*args):
        xs = args[:k]
        edge_index, key, loops, slope, scale, deterministic, schedule = args[k:]
        inputs = _prepared(dict(zip(names, xs)))
        g = _op_graph(edge_index, key, loops, xs[0].shape[0])
        return _run_forward(g, model, inputs, _op_params(model, slope, scale, deterministic), schedule)

    def forward_fake(*args):
        first = args[0]
        n, heads, dim = first.shape
        return first.new_empty((n, heads, dim)), first.new_empty((n, heads), dtype=_lse_dtype(first.dtype))

    def backward_impl(grad_out, *args):
        xs, out, lse = args[:k], args[k], args[k + 1]
        edge_index, key, loops, slope, scale, deterministic, schedule = args[k + 2:]
        inputs = _prepared(dict(zip(names, xs)))
        g = _op_graph(edge_index, key, loops, xs[0].shape[0])
        grads = _run_backward(g, model, inputs, out.contiguous(), lse.contiguous(), grad_out,
                              _op_params(model, slope, scale, deterministic), schedule)
        return tuple(grads[n] for n in names)

    def backward_fake(grad_out, *args):
        return tuple(x.new_empty(x.shape) for x in args[:k])

    def setup_context(ctx, inputs, output):
        edge_index, key = inputs[k], inputs[k + 1]
        ctx.dfgnn_args = inputs[k + 1:]
        ctx.save_for_backward(*inputs[:k], *output, edge_index)
        if edge_index is None and isinstance(key, int):
            # eager mode: hold the Graph until the backward (the caller may drop it right away)
            ctx.dfgnn_graph = _by_key_or_none(key)

    def backward(ctx, grad_out, _grad_lse):
        saved = ctx.saved_tensors
        xs, out, lse, edge_index = saved[:k], saved[k], saved[k + 1], saved[k + 2]
        # under autocast the incoming gradient may be float32 for a bfloat16 output
        grads = backward_op(grad_out.to(out.dtype), *xs, out, lse, edge_index, *ctx.dfgnn_args)
        return tuple(grads) + (None,) * _EXTRA

    forward_def = torch.library.custom_op(
        f"dfgnn::{model}", forward_impl, mutates_args=(),
        schema=f"({tensors}, {_GRAPH_ARGS}, {_OPTION_ARGS}) -> (Tensor, Tensor)")
    backward_def = torch.library.custom_op(
        f"dfgnn::{model}_backward", backward_impl, mutates_args=(),
        schema=f"(Tensor grad_out, {tensors}, Tensor out, Tensor lse, {_GRAPH_ARGS}, {_OPTION_ARGS}) -> "
               f"({', '.join(['Tensor'] * k)})")
    forward_def.register_fake(forward_fake)
    backward_def.register_fake(backward_fake)
    backward_op = getattr(torch.ops.dfgnn, f"{model}_backward").default
    forward_def.register_autograd(backward, setup_context=setup_context)
    return getattr(torch.ops.dfgnn, model).default


def _by_key_or_none(key):
    try:
        return graph_by_key(key)
    except InvalidArgumentError:  # freed already: the op itself reports it
        return None


#: The forward custom ops, by model name (torch.ops.dfgnn.<model>.default).
OPS = {model: _define_ops(model) for model in MODEL_INPUTS}


def _graph_spec(g, add_self_loops, num_nodes):
    """(Graph or None, (edge_index, graph_key, add_self_loops)) of a graph argument, for the custom
    ops; the Graph is returned so that the caller holds it during the call."""
    if isinstance(g, torch.Tensor):
        return None, (g, 0, bool(add_self_loops))
    if not isinstance(g, Graph):
        g = graph(g, num_nodes, add_self_loops=add_self_loops)  # NumPy arrays, lists: eager only
    return g, (None, g.key, False)


def _call(model, g, tensors, add_self_loops, negative_slope=0.2, scale=None, deterministic=True, schedule=None):
    held, spec = _graph_spec(g, add_self_loops, tensors[0].shape[0])
    out, _lse = OPS[model](*tensors, *spec, float(negative_slope), None if scale is None else float(scale),
                           bool(deterministic), schedule)
    del held  # the op's autograd context holds the Graph from here on (see setup_context)
    return out


# ---------------------------------------------------------------- functional API

def _feature_dtype(*features):
    """The dtype the kernels run in: the features' common dtype, or autocast's on CUDA."""
    dtype = features[0].dtype
    for f in features[1:]:
        dtype = torch.promote_types(dtype, f.dtype)
    if features[0].is_cuda and torch.is_autocast_enabled("cuda") and dtype == torch.float32:
        dtype = torch.get_autocast_dtype("cuda")
    return dtype


def _features(x, heads, name):
    """[N, H, D] view of a feature tensor given as [N, H, D] or [N, H*D]."""
    if x.dim() == 3:
        return x
    if x.dim() == 2 and heads is not None:
        return x.view(x.shape[0], heads, -1)
    raise invalid_argument(f"{name} must have shape [N, H, D] (or [N, H*D] with heads=), got {list(x.shape)}",
                           kind="shape")


def _param_dtype(feature_dtype):
    return torch.float64 if feature_dtype == torch.float64 else torch.float32


def _params_like(h, *params):
    dtype = _param_dtype(h.dtype)
    return tuple(p.to(device=h.device, dtype=dtype) for p in params)


# The graph argument of the functions below: a dfgnn.Graph (used as given), or an edge_index tensor
# [2, E] (int32/int64) turned into a cached Graph with add_self_loops as given. Each function runs
# through the custom op torch.ops.dfgnn.<model> (see OPS), also inside torch.compile.

def gat(graph, h, att_src, att_dst, *, heads=None, negative_slope=0.2, deterministic=True, schedule=None,
        add_self_loops=False):
    """GAT attention over a graph (a dfgnn.Graph or an edge_index tensor). h: [N, H, D]."""
    h = _features(h, heads, "h")
    h = h.to(_feature_dtype(h))
    att_src, att_dst = _params_like(h, att_src, att_dst)
    return _call("gat", graph, (h, att_src, att_dst), add_self_loops,
                 negative_slope=negative_slope, deterministic=deterministic, schedule=schedule)


def gatv2(graph, h, h_dst, att, *, heads=None, negative_slope=0.2, deterministic=True, schedule=None,
          add_self_loops=False):
    """GATv2 attention. h: source-side features [N, H, D] (aggregated), h_dst: target side."""
    h, h_dst = _features(h, heads, "h"), _features(h_dst, heads, "h_dst")
    dtype = _feature_dtype(h, h_dst)
    h, h_dst = h.to(dtype), h_dst.to(dtype)
    (att,) = _params_like(h, att)
    return _call("gatv2", graph, (h, h_dst, att), add_self_loops,
                 negative_slope=negative_slope, deterministic=deterministic, schedule=schedule)


def transformer(graph, q, k, v, *, heads=None, scale=None, deterministic=True, schedule=None, add_self_loops=False):
    """Graph Transformer attention (PyG TransformerConv's): q (targets), k, v (sources) [N, H, D]."""
    q, k, v = _features(q, heads, "q"), _features(k, heads, "k"), _features(v, heads, "v")
    dtype = _feature_dtype(q, k, v)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    return _call("transformer", graph, (q, k, v), add_self_loops, scale=scale, deterministic=deterministic,
                 schedule=schedule)


def agnn(graph, h, beta, *, heads=None, deterministic=True, schedule=None, add_self_loops=False):
    """AGNN attention: h [N, H, D] (or [N, F] as one head), beta: one-element tensor."""
    if h.dim() == 2 and heads is None:
        h = h.unsqueeze(1)
    h = _features(h, heads, "h")
    h = h.to(_feature_dtype(h))
    (beta,) = _params_like(h, beta.reshape(1))
    return _call("agnn", graph, (h, beta), add_self_loops, deterministic=deterministic, schedule=schedule)


# ---------------------------------------------------------------- layers

def _glorot(t):
    if t is not None:
        a = math.sqrt(6.0 / (t.size(-2) + t.size(-1)))
        with torch.no_grad():
            t.uniform_(-a, a)


def _linear(in_channels, out_channels, bias, glorot):
    lin = torch.nn.Linear(in_channels, out_channels, bias=bias)
    if glorot:
        torch.nn.init.xavier_uniform_(lin.weight)
        if bias:
            torch.nn.init.zeros_(lin.bias)
    return lin


def _unsupported(name, **args):
    for arg, value in args.items():
        if value:
            raise NotImplementedError(f"dfgnn.torch.{name}: {arg} is not supported yet")


def _int_channels(name, in_channels):
    if not isinstance(in_channels, int):
        raise NotImplementedError(f"dfgnn.torch.{name}: bipartite (tuple) in_channels are not supported yet")
    return in_channels


def _layer_graph(edge_index, x, add_self_loops):
    """A Graph is used as given (build it with add_self_loops=True for PyG's default); an
    edge_index tensor goes to the op as it is (the op caches its Graph, also under torch.compile)."""
    if isinstance(edge_index, (Graph, torch.Tensor)):
        return edge_index
    return graph(edge_index, x.size(0), add_self_loops=add_self_loops)


def _check_training_dropout(layer, name):
    if layer.dropout > 0 and layer.training:
        raise NotImplementedError(f"dfgnn.torch.{name}: attention dropout (dropout={layer.dropout}) in training "
                                  "is not implemented yet; use dropout=0.0 or eval mode")


class GATConv(torch.nn.Module):
    """PyG's GATConv on dfgnn's fused kernels (same arguments and parameter names:
    ``lin.weight``, ``att_src``, ``att_dst``, ``bias``, ``res.weight``).

    ``forward(x, edge_index)`` with ``edge_index`` a PyG edge_index tensor or a
    :class:`dfgnn.Graph` (used as given: build it with ``add_self_loops=True`` to match PyG's
    default)."""

    def __init__(self, in_channels, out_channels, heads=1, concat=True, negative_slope=0.2, dropout=0.0,
                 add_self_loops=True, edge_dim=None, fill_value="mean", bias=True, residual=False, **kwargs):
        super().__init__()
        _unsupported("GATConv", edge_dim=edge_dim is not None)
        in_channels = _int_channels("GATConv", in_channels)
        self.in_channels, self.out_channels, self.heads, self.concat = in_channels, out_channels, heads, concat
        self.negative_slope, self.dropout, self.add_self_loops = negative_slope, dropout, add_self_loops
        self.edge_dim, self.fill_value, self.residual = edge_dim, fill_value, residual
        self.lin = _linear(in_channels, heads * out_channels, False, True)
        self.att_src = torch.nn.Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = torch.nn.Parameter(torch.empty(1, heads, out_channels))
        total = out_channels * (heads if concat else 1)
        self.res = _linear(in_channels, total, False, True) if residual else None
        self.bias = torch.nn.Parameter(torch.empty(total)) if bias else None
        self.reset_parameters()

    def reset_parameters(self):
        torch.nn.init.xavier_uniform_(self.lin.weight)
        if self.res is not None:
            torch.nn.init.xavier_uniform_(self.res.weight)
        _glorot(self.att_src)
        _glorot(self.att_dst)
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)

    def forward(self, x, edge_index, edge_attr=None, size=None, return_attention_weights=None):
        _unsupported("GATConv", edge_attr=edge_attr is not None, size=size is not None,
                     return_attention_weights=return_attention_weights is not None)
        _check_training_dropout(self, "GATConv")
        H, C = self.heads, self.out_channels
        g = _layer_graph(edge_index, x, self.add_self_loops)
        h = self.lin(x).view(-1, H, C)
        out = gat(g, h, self.att_src, self.att_dst, negative_slope=self.negative_slope,
                  add_self_loops=self.add_self_loops)
        out = out.reshape(-1, H * C) if self.concat else out.mean(dim=1)
        if self.res is not None:
            out = out + self.res(x)
        if self.bias is not None:
            out = out + self.bias
        return out

    def __repr__(self):
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"


class GATv2Conv(torch.nn.Module):
    """PyG's GATv2Conv on dfgnn's fused kernels (parameters ``lin_l``, ``lin_r``, ``att``,
    ``bias``, ``res``)."""

    def __init__(self, in_channels, out_channels, heads=1, concat=True, negative_slope=0.2, dropout=0.0,
                 add_self_loops=True, edge_dim=None, fill_value="mean", bias=True, share_weights=False,
                 residual=False, **kwargs):
        super().__init__()
        _unsupported("GATv2Conv", edge_dim=edge_dim is not None)
        in_channels = _int_channels("GATv2Conv", in_channels)
        self.in_channels, self.out_channels, self.heads, self.concat = in_channels, out_channels, heads, concat
        self.negative_slope, self.dropout, self.add_self_loops = negative_slope, dropout, add_self_loops
        self.edge_dim, self.fill_value, self.residual = edge_dim, fill_value, residual
        self.share_weights = share_weights
        self.lin_l = _linear(in_channels, heads * out_channels, bias, True)
        self.lin_r = self.lin_l if share_weights else _linear(in_channels, heads * out_channels, bias, True)
        self.att = torch.nn.Parameter(torch.empty(1, heads, out_channels))
        total = out_channels * (heads if concat else 1)
        self.res = _linear(in_channels, total, False, True) if residual else None
        self.bias = torch.nn.Parameter(torch.empty(total)) if bias else None
        self.reset_parameters()

    def reset_parameters(self):
        for lin in (self.lin_l, self.lin_r, self.res):
            if lin is not None:
                torch.nn.init.xavier_uniform_(lin.weight)
                if lin.bias is not None:
                    torch.nn.init.zeros_(lin.bias)
        _glorot(self.att)
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)

    def forward(self, x, edge_index, edge_attr=None, return_attention_weights=None):
        _unsupported("GATv2Conv", edge_attr=edge_attr is not None,
                     return_attention_weights=return_attention_weights is not None)
        _check_training_dropout(self, "GATv2Conv")
        H, C = self.heads, self.out_channels
        g = _layer_graph(edge_index, x, self.add_self_loops)
        x_l = self.lin_l(x).view(-1, H, C)
        x_r = x_l if self.share_weights else self.lin_r(x).view(-1, H, C)
        out = gatv2(g, x_l, x_r, self.att, negative_slope=self.negative_slope, add_self_loops=self.add_self_loops)
        out = out.reshape(-1, H * C) if self.concat else out.mean(dim=1)
        if self.res is not None:
            out = out + self.res(x)
        if self.bias is not None:
            out = out + self.bias
        return out

    def __repr__(self):
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"


class TransformerConv(torch.nn.Module):
    """PyG's TransformerConv on dfgnn's fused kernels (parameters ``lin_key``, ``lin_query``,
    ``lin_value``, ``lin_skip``, ``lin_beta``). Like PyG, it adds no self-loops."""

    def __init__(self, in_channels, out_channels, heads=1, concat=True, beta=False, dropout=0.0, edge_dim=None,
                 bias=True, root_weight=True, **kwargs):
        super().__init__()
        _unsupported("TransformerConv", edge_dim=edge_dim is not None)
        in_channels = _int_channels("TransformerConv", in_channels)
        self.in_channels, self.out_channels, self.heads, self.concat = in_channels, out_channels, heads, concat
        self.beta, self.root_weight = beta and root_weight, root_weight
        self.dropout, self.edge_dim = dropout, edge_dim
        self.lin_key = torch.nn.Linear(in_channels, heads * out_channels, bias=bias)
        self.lin_query = torch.nn.Linear(in_channels, heads * out_channels, bias=bias)
        self.lin_value = torch.nn.Linear(in_channels, heads * out_channels, bias=bias)
        skip = heads * out_channels if concat else out_channels
        self.lin_skip = torch.nn.Linear(in_channels, skip, bias=bias)
        self.lin_beta = torch.nn.Linear(3 * skip, 1, bias=False) if self.beta else None

    def reset_parameters(self):
        for lin in (self.lin_key, self.lin_query, self.lin_value, self.lin_skip, self.lin_beta):
            if lin is not None:
                lin.reset_parameters()

    def forward(self, x, edge_index, edge_attr=None, return_attention_weights=None):
        _unsupported("TransformerConv", edge_attr=edge_attr is not None,
                     return_attention_weights=return_attention_weights is not None)
        _check_training_dropout(self, "TransformerConv")
        H, C = self.heads, self.out_channels
        g = _layer_graph(edge_index, x, False)
        q = self.lin_query(x).view(-1, H, C)
        k = self.lin_key(x).view(-1, H, C)
        v = self.lin_value(x).view(-1, H, C)
        out = transformer(g, q, k, v)
        out = out.reshape(-1, H * C) if self.concat else out.mean(dim=1)
        if self.root_weight:
            x_r = self.lin_skip(x)
            if self.lin_beta is not None:
                b = self.lin_beta(torch.cat([out, x_r, out - x_r], dim=-1)).sigmoid()
                out = b * x_r + (1 - b) * out
            else:
                out = out + x_r
        return out

    def __repr__(self):
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"


class AGNNConv(torch.nn.Module):
    """PyG's AGNNConv on dfgnn's fused kernels (parameter or buffer ``beta``)."""

    def __init__(self, requires_grad=True, add_self_loops=True, **kwargs):
        super().__init__()
        self.requires_grad, self.add_self_loops = requires_grad, add_self_loops
        if requires_grad:
            self.beta = torch.nn.Parameter(torch.empty(1))
        else:
            self.register_buffer("beta", torch.ones(1))
        self.reset_parameters()

    def reset_parameters(self):
        if self.requires_grad:
            with torch.no_grad():
                self.beta.fill_(1)

    def forward(self, x, edge_index):
        g = _layer_graph(edge_index, x, self.add_self_loops)
        return agnn(g, x.unsqueeze(1), self.beta, add_self_loops=self.add_self_loops).squeeze(1)

    def __repr__(self):
        return f"{self.__class__.__name__}()"
