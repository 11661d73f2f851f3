"""The functional ops of dfgnn.torch (gat, gatv2, transformer, agnn): argument checks, then the
autograd Function (eager calls on plain tensors) or the custom op (everything else, torch.compile
included) of the model."""

import sys

import torch

from .._errors import invalid_argument
from .._graph import Graph
from .._op import check_dropout, check_dropout_seed
from ._autograd import FUNCTIONS
from ._calls import _device_seed, _native_call
from ._custom_ops import OPS
from ._graphs import _op_graph_args, _resolve
from ._spec import OPTIONS, SPECS

# The package, whose use_functions_in_eager switch (set by users and tests) _call reads at every call.
_package = sys.modules[__name__.rpartition(".")[0]]


def _dropout_args(dropout, dropout_seed, features):
    """(dropout, seed, seed tensor) for the ops: dropout a float in [0, 1); the seed an int in
    [0, 2**63) (the custom ops take an int64), a one-element integer tensor, or a symbolic int under
    torch.compile. A tensor on the CUDA device of the features becomes the seed tensor (int64, read by
    the kernels: no host sync, see _device_seed); another is read with .item(). Without dropout the
    seed is not used and becomes 0."""
    dropout = check_dropout(dropout)
    if dropout == 0.0:
        return 0.0, 0, None
    if isinstance(dropout_seed, torch.Tensor):
        if dropout_seed.is_cuda and dropout_seed.device == features.device:
            return dropout, 0, _device_seed(dropout_seed)
        if dropout_seed.numel() != 1 or dropout_seed.is_floating_point() or dropout_seed.is_complex():
            raise invalid_argument(f"a dropout_seed tensor must hold one integer, got {dropout_seed.dtype} "
                                   f"{list(dropout_seed.shape)}", kind="type")
        dropout_seed = dropout_seed.item()
    if torch.compiler.is_compiling():
        # possibly a data-dependent symbolic int (a seed drawn in the compiled code): no Python
        # range check here; the op checks the value when it runs
        return dropout, dropout_seed, None
    return dropout, check_dropout_seed(dropout_seed, 1 << 63, "2**63"), None


_PLAIN = (torch.Tensor, torch.nn.Parameter)
_functorch_wrapped = getattr(getattr(torch._C, "_functorch", None), "is_functorch_wrapped_tensor", lambda t: False)


def _call(model, g, tensors, add_self_loops, schedule=None, dropout=0.0, dropout_seed=0, edge=None, **options):
    """Runs a model on its tensors (spec order) through its Function or its custom op; options: the
    op options by name (those not given take their defaults)."""
    spec = SPECS[model]
    dropout, dropout_seed, seed_tensor = _dropout_args(dropout, dropout_seed, tensors[0])
    edge_arg = () if edge is None else (edge,)  # without edge features the calls are as before
    seed_arg = () if seed_tensor is None else (seed_tensor,)
    if (_package.use_functions_in_eager and not torch.compiler.is_compiling()
            and all(type(t) in _PLAIN and (t.is_cuda or t.is_cpu) and not _functorch_wrapped(t)
                    for t in tensors + edge_arg + seed_arg)
            and not isinstance(dropout_seed, torch.SymInt)):
        if not isinstance(g, Graph):
            g = _resolve(g, tensors[0].shape[0], add_self_loops)
        values = [o.convert(options.get(o.name, o.default)) for o in spec.options]
        if tensors[0].is_cuda:
            out = _native_call(model, g, tensors + edge_arg, values, schedule, dropout, dropout_seed, seed_tensor)
            if out is not None:
                return out
        return FUNCTIONS[model].apply(g, *tensors, *values, schedule, dropout,
                                      dropout_seed if seed_tensor is None else seed_tensor, *edge_arg)
    held, graph_args = _op_graph_args(g, add_self_loops, tensors[0].shape[0])
    values = [o.convert(options.get(o.name, o.default)) for o in OPTIONS]  # the custom ops take every option
    # the trailing optional arguments by name: edge (not AGNN) and the seed tensor
    tail = {} if seed_tensor is None else dict(dropout_seed_tensor=seed_tensor)
    out, _lse = OPS[model](*tensors, *graph_args, *values, schedule, dropout, dropout_seed, *edge_arg, **tail)
    del held  # the op's autograd context holds the Graph from here on (see setup_context)
    return out


def _feature_dtype(*features):
    """The dtype the kernels run in: the features' common dtype, or autocast's on CUDA."""
    dtype = features[0].dtype
    for f in features[1:]:
        dtype = torch.promote_types(dtype, f.dtype)
    if features[0].is_cuda and torch.is_autocast_enabled("cuda") and dtype == torch.float32:
        dtype = torch.get_autocast_dtype("cuda")
    return dtype


def _check_tensor(x, name):
    if not isinstance(x, torch.Tensor):
        raise invalid_argument(f"{name} must be a torch.Tensor, got {type(x).__name__}", kind="type")


def _features(x, heads, name):
    """[N, H, D] view of a feature tensor given as [N, H, D] or [N, H*D]."""
    _check_tensor(x, name)
    if not x.is_floating_point():
        # checked per tensor: type promotion would otherwise turn an integer k or v silently into floats
        raise invalid_argument(f"{name} must be a floating-point tensor (float64 on the CPU; float32, float16 or "
                               f"bfloat16 on CUDA), got {x.dtype}", kind="dtype")
    if x.dim() == 3:
        if heads is not None and x.shape[1] != heads:
            raise invalid_argument(f"{name} has shape {list(x.shape)} ({x.shape[1]} heads), but heads={heads}",
                                   kind="shape")
        return x
    if x.dim() == 2 and heads is not None:
        if heads < 1 or x.shape[1] % heads != 0:
            raise invalid_argument(f"{name} has shape {list(x.shape)}: heads={heads} must be >= 1 and divide its "
                                   f"second dimension (H*D)", kind="shape")
        return x.view(x.shape[0], heads, -1)
    raise invalid_argument(f"{name} must have shape [N, H, D] (or [N, H*D] with heads=), got {list(x.shape)}",
                           kind="shape")


def _edge_input(model, edge, features):
    """The op's edge input: GAT's [E, H] logit terms in the attention vectors' dtype, GATv2's and the
    Transformer's [E, H, D] (or [E, H*D]) features in the features' dtype. Its rows follow the graph's
    edge ids; the op checks the shape against the graph."""
    if edge is None:
        return None
    _check_tensor(edge, "edge")
    if not edge.is_floating_point():
        raise invalid_argument(f"edge must be a floating-point tensor, got {edge.dtype}", kind="dtype")
    return edge.to(_param_dtype(features.dtype) if model == "gat" else features.dtype)


def _param_dtype(feature_dtype):
    return torch.float64 if feature_dtype == torch.float64 else torch.float32


def _params_like(h, *params):
    dtype, device = _param_dtype(h.dtype), h.device
    return tuple(p if p.dtype == dtype and p.device == device else p.to(device=device, dtype=dtype) for p in params)


def _as_dtype(dtype, *tensors):
    """The tensors in dtype (a tensor already in it is returned as it is, without a .to call)."""
    return tuple(t if t.dtype == dtype else t.to(dtype) for t in tensors)


# The graph argument of the functions below: a dfgnn.Graph (used as given), or an edge_index tensor
# [2, E] (int32/int64) turned into a cached Graph with add_self_loops as given. Each function runs
# through the custom op torch.ops.dfgnn.<model> (see OPS), also inside torch.compile.
#
# dropout / dropout_seed: attention dropout whenever dropout > 0 (there is no training flag: pass
# dropout=0 for evaluation), with the mask of dropout_seed, an int in [0, 2**63) or a one-element
# integer tensor (on the features' CUDA device: read by the kernels, no host sync). The same seed
# gives the same mask: pass a new one per step, e.g. torch.randint(0, 2**62, (1,), device="cuda"),
# which also traces under torch.compile(fullgraph=True) and is drawn afresh by each CUDA graph replay.
#
# edge (gat, gatv2, transformer; PyG's edge_dim): optional edge features, differentiable, one row per
# edge id of the graph (dfgnn.Graph.csr()'s edge_id: an edge_index's column order; with
# add_self_loops, the edges that are not self-loops in input order, then node i's loop as row
# kept + i, see self_loop_edge_attr). gat: [E, H] terms added to the logit inside the LeakyReLU
# (PyG's alpha_edge); gatv2: [E, H, D] added to h_dst_i + h_j inside the LeakyReLU; transformer:
# [E, H, D] added to the key and the value of every edge.

def gat(graph, h, att_src, att_dst, *, heads=None, negative_slope=0.2, schedule=None, add_self_loops=False,
        dropout=0.0, dropout_seed=0, edge=None):
    """GAT attention over a graph (a dfgnn.Graph or an edge_index tensor). h: [N, H, D]; edge: optional
    [E, H] logit terms by edge id."""
    h = _features(h, heads, "h")
    (h,) = _as_dtype(_feature_dtype(h), h)
    att_src, att_dst = _params_like(h, att_src, att_dst)
    return _call("gat", graph, (h, att_src, att_dst), add_self_loops,
                 negative_slope=negative_slope, schedule=schedule, dropout=dropout,
                 dropout_seed=dropout_seed, edge=_edge_input("gat", edge, h))


def gatv2(graph, h, h_dst, att, *, heads=None, negative_slope=0.2, schedule=None, add_self_loops=False,
          dropout=0.0, dropout_seed=0, edge=None):
    """GATv2 attention. h: source-side features [N, H, D] (aggregated), h_dst: target side; edge:
    optional [E, H, D] edge features by edge id."""
    h, h_dst = _features(h, heads, "h"), _features(h_dst, heads, "h_dst")
    dtype = _feature_dtype(h, h_dst)
    h, h_dst = _as_dtype(dtype, h, h_dst)
    (att,) = _params_like(h, att)
    return _call("gatv2", graph, (h, h_dst, att), add_self_loops,
                 negative_slope=negative_slope, schedule=schedule, dropout=dropout,
                 dropout_seed=dropout_seed, edge=_edge_input("gatv2", edge, h))


def transformer(graph, q, k, v, *, heads=None, scale=None, schedule=None, add_self_loops=False,
                dropout=0.0, dropout_seed=0, edge=None):
    """Graph Transformer attention (PyG TransformerConv's): q (targets), k, v (sources) [N, H, D]; edge:
    optional [E, H, D] edge features by edge id."""
    q, k, v = _features(q, heads, "q"), _features(k, heads, "k"), _features(v, heads, "v")
    dtype = _feature_dtype(q, k, v)
    q, k, v = _as_dtype(dtype, q, k, v)
    return _call("transformer", graph, (q, k, v), add_self_loops, scale=scale,
                 schedule=schedule, dropout=dropout, dropout_seed=dropout_seed,
                 edge=_edge_input("transformer", edge, q))


def agnn(graph, h, beta, *, heads=None, schedule=None, add_self_loops=False, dropout=0.0, dropout_seed=0):
    """AGNN attention: h [N, H, D] (or [N, F] as one head), beta: one-element tensor."""
    _check_tensor(h, "h")
    if h.dim() == 2 and heads is None:
        h = h.unsqueeze(1)
    h = _features(h, heads, "h")
    (h,) = _as_dtype(_feature_dtype(h), h)
    _check_tensor(beta, "beta")
    if beta.numel() != 1:
        raise invalid_argument(f"beta must be a one-element tensor, got shape {list(beta.shape)}", kind="shape")
    (beta,) = _params_like(h, beta.reshape(1))
    return _call("agnn", graph, (h, beta), add_self_loops, schedule=schedule,
                 dropout=dropout, dropout_seed=dropout_seed)

