"""PyTorch front end of dfgnn: autograd ops and PyG-style layers over the fused kernels.

Ops (``torch.autograd.Function`` subclasses, plus functional wrappers):

- :class:`GATFunction` / :func:`gat`: ``h`` [N, H, D], ``att_src``, ``att_dst`` [H, D] (or [1, H, D])
- :class:`GATv2Function` / :func:`gatv2`: ``h`` (source side), ``h_dst``, ``att``
- :class:`TransformerFunction` / :func:`transformer`: ``q``, ``k``, ``v``
- :class:`AGNNFunction` / :func:`agnn`: ``h``, ``beta`` [1]

Each returns ``out`` [N, H, D]. On CUDA tensors they run the fused kernels (float32, float16 or
bfloat16 features; attention vectors and beta in float32) asynchronously on torch's current
stream of the tensors' device, with device scratch from torch's caching allocator. On CPU
float64 tensors they run dfgnn's float64 reference ops (for ``torch.autograd.gradcheck`` and
tests). The backward recomputes attention from the saved per-(node, head) log-sum-exp; no E x H
tensor is stored. Double backward is not supported.

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
from ._errors import invalid_argument
from ._graph import Graph
from ._op import Direction, make_op

__all__ = [
    "graph", "gat", "gatv2", "transformer", "agnn",
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


def _graph_arg(g, n):
    return graph(g, n) if not isinstance(g, Graph) else g


def gat(graph, h, att_src, att_dst, *, heads=None, negative_slope=0.2, deterministic=True, schedule=None):
    """GAT attention over a graph (a dfgnn.Graph or an edge_index tensor). h: [N, H, D]."""
    h = _features(h, heads, "h")
    h = h.to(_feature_dtype(h))
    att_src, att_dst = _params_like(h, att_src, att_dst)
    return GATFunction.apply(_graph_arg(graph, h.shape[0]), h, att_src, att_dst, float(negative_slope),
                             bool(deterministic), schedule)


def gatv2(graph, h, h_dst, att, *, heads=None, negative_slope=0.2, deterministic=True, schedule=None):
    """GATv2 attention. h: source-side features [N, H, D] (aggregated), h_dst: target side."""
    h, h_dst = _features(h, heads, "h"), _features(h_dst, heads, "h_dst")
    dtype = _feature_dtype(h, h_dst)
    h, h_dst = h.to(dtype), h_dst.to(dtype)
    (att,) = _params_like(h, att)
    return GATv2Function.apply(_graph_arg(graph, h.shape[0]), h, h_dst, att, float(negative_slope),
                               bool(deterministic), schedule)


def transformer(graph, q, k, v, *, heads=None, scale=None, deterministic=True, schedule=None):
    """Graph Transformer attention (PyG TransformerConv's): q (targets), k, v (sources) [N, H, D]."""
    q, k, v = _features(q, heads, "q"), _features(k, heads, "k"), _features(v, heads, "v")
    dtype = _feature_dtype(q, k, v)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    return TransformerFunction.apply(_graph_arg(graph, q.shape[0]), q, k, v,
                                     None if scale is None else float(scale), bool(deterministic), schedule)


def agnn(graph, h, beta, *, heads=None, deterministic=True, schedule=None):
    """AGNN attention: h [N, H, D] (or [N, F] as one head), beta: one-element tensor."""
    if h.dim() == 2 and heads is None:
        h = h.unsqueeze(1)
    h = _features(h, heads, "h")
    h = h.to(_feature_dtype(h))
    (beta,) = _params_like(h, beta.reshape(1))
    return AGNNFunction.apply(_graph_arg(graph, h.shape[0]), h, beta, bool(deterministic), schedule)


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
    if isinstance(edge_index, Graph):
        return edge_index  # used as given: build it with add_self_loops=True for PyG's default
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
        out = gat(g, h, self.att_src, self.att_dst, negative_slope=self.negative_slope)
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
        out = gatv2(g, x_l, x_r, self.att, negative_slope=self.negative_slope)
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
        return agnn(g, x.unsqueeze(1), self.beta).squeeze(1)

    def __repr__(self):
        return f"{self.__class__.__name__}()"
