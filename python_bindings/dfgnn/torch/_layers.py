"""PyG-style layers of dfgnn.torch (GATConv, GATv2Conv, TransformerConv, AGNNConv) and their helpers:
PyG's initialisation, bipartite inputs, edge features with self-loop rows, attention dropout seeds and
return_attention_weights."""

import math

import numpy as np
import torch

from .._errors import invalid_argument
from .._graph import Graph
from ._functional import _PLAIN, _check_tensor, _functorch_wrapped, agnn, gat, gatv2, transformer
from ._graphs import _Bipartite, _bipartite_graph, _check_graph, _resolve, graph


def _glorot(t):
    if t is not None:
        a = math.sqrt(6.0 / (t.size(-2) + t.size(-1)))
        with torch.no_grad():
            t.uniform_(-a, a)


class _LazyGlorotLinear(torch.nn.LazyLinear):
    """PyG's Linear(-1, ..., weight_initializer='glorot'): the parameters materialise at the first
    call, then take glorot's weight and the default bias."""
    cls_to_become = None  # stays this class after materialising: reset_parameters stays glorot

    def reset_parameters(self):
        if not self.has_uninitialized_params() and self.in_features != 0:
            _reset_glorot_linear(self)


def _linear(in_channels, out_channels, bias, glorot):
    """PyG's Linear: glorot or torch.nn.Linear's initialisation; lazy for in_channels <= 0 (PyG's
    -1: materialised and initialised at the first call, as PyG's UninitializedParameter)."""
    if in_channels <= 0:
        return _LazyGlorotLinear(out_channels, bias=bias) if glorot else torch.nn.LazyLinear(out_channels, bias=bias)
    lin = torch.nn.Linear(in_channels, out_channels, bias=bias)
    if glorot:
        _reset_glorot_linear(lin)
    return lin


def _reset_linear(lin, glorot):
    """Re-initialises a layer's Linear as PyG's; a lazy one not called yet initialises at its first call."""
    if lin is None or isinstance(lin.weight, torch.nn.parameter.UninitializedParameter):
        return
    if glorot:
        _reset_glorot_linear(lin)
    else:
        lin.reset_parameters()


def _reset_glorot_linear(lin):
    """PyG's Linear(..., weight_initializer='glorot'): a glorot weight and its default bias,
    uniform in +-1/sqrt(in_channels) (as torch.nn.Linear's)."""
    torch.nn.init.xavier_uniform_(lin.weight)
    if lin.bias is not None:
        bound = 1.0 / math.sqrt(lin.in_features) if lin.in_features > 0 else 0.0
        torch.nn.init.uniform_(lin.bias, -bound, bound)


def _check_kwargs(name, kwargs):
    """PyG passes extra keywords to MessagePassing: its defaults are accepted, other aggregations or
    flows are not supported, and anything else is a TypeError there as here."""
    defaults = {"aggr": "add", "flow": "source_to_target", "decomposed_layers": 1}
    for key, value in kwargs.items():
        if key not in defaults:
            raise TypeError(f"dfgnn.torch.{name}.__init__() got an unexpected keyword argument '{key}'")
        if value != defaults[key]:
            raise NotImplementedError(f"dfgnn.torch.{name}: {key}={value!r} is not supported yet "
                                      f"(only {defaults[key]!r})")


def _split_x(name, x, dst_optional=False):
    """(x_src, x_dst, bipartite) of a layer's x: one tensor, or PyG's pair (x_src, x_dst) (x_dst
    None only where PyG's layer takes it: GATConv)."""
    if not isinstance(x, (tuple, list)):
        return x, x, False
    if len(x) != 2:
        raise invalid_argument(f"dfgnn.torch.{name}: x must be a tensor or a pair (x_src, x_dst), got {len(x)} "
                               f"items", kind="type")
    x_src, x_dst = x
    _check_tensor(x_src, "x_src")
    if x_dst is not None:
        _check_tensor(x_dst, "x_dst")
    elif not dst_optional:
        raise invalid_argument(f"dfgnn.torch.{name}: x_dst is None, which PyG's {name} does not take either "
                               f"(only GATConv does)", kind="type")
    return x_src, x_dst, True


def _pair_sizes(x_src, x_dst, size=None):
    """(N_src, N_dst) as PyG's MessagePassing takes them: the tensors' rows (x_src's for a missing
    x_dst, unless size gives it); a size that disagrees with the tensors is PyG's ValueError."""
    n_src = x_src.size(0)
    n_dst = n_src if x_dst is None else x_dst.size(0)
    if size is not None:
        for want, t in zip(size, (x_src, x_dst)):
            if want is not None and t is not None and t.size(0) != want:
                raise invalid_argument(f"Encountered tensor with size {t.size(0)} in dimension 0, but expected size "
                                       f"{want} (size={tuple(size)})", kind="shape")
        if x_dst is None and size[1] is not None:
            n_dst = size[1]
    return n_src, n_dst


def _channels(name, in_channels):
    """(source, destination) input widths: in_channels is an int or PyG's pair (in_src, in_dst); a
    width <= 0 (PyG's -1) is lazy."""
    pair = tuple(in_channels) if isinstance(in_channels, (tuple, list)) else (in_channels, in_channels)
    if len(pair) != 2 or not all(isinstance(c, int) for c in pair):
        raise TypeError(f"dfgnn.torch.{name}: in_channels must be an int or a pair of ints (in_src, in_dst), got "
                        f"{in_channels!r}")
    return pair


def _check_layout(edge_index):
    if isinstance(edge_index, torch.Tensor) and edge_index.layout != torch.strided:
        raise NotImplementedError(f"dfgnn.torch layers take an edge_index [2, E] or a dfgnn.Graph; a sparse "
                                  f"adjacency ({edge_index.layout}) is not supported yet")


def _resolves_here(edge_index):
    """Whether a layer resolves its graph argument itself: an eager call on a plain edge_index tensor.
    Under torch.compile (and for tensor subclasses) the edge_index goes to the custom op, which
    resolves it."""
    return type(edge_index) in _PLAIN and not torch.compiler.is_compiling() and not _functorch_wrapped(edge_index)


def _layer_graph(edge_index, x, add_self_loops):
    """The graph argument of a call on one node set, resolved once, here: a Graph as given (build it
    with add_self_loops=True for PyG's default); an edge_index's cached Graph, which the op, the
    edge_attr checks and return_attention_weights then take as it is; under torch.compile the
    edge_index itself (the custom op resolves and caches it)."""
    _check_layout(edge_index)
    if isinstance(edge_index, Graph) or (isinstance(edge_index, torch.Tensor) and not _resolves_here(edge_index)):
        return edge_index
    return graph(edge_index, x.size(0), add_self_loops=add_self_loops)


def _pair_graph(name, edge_index, num_src, num_dst, add_self_loops):
    """The graph argument of a bipartite call (row 0 of edge_index indexes x_src, row 1 x_dst), resolved
    once, here: _bipartite_graph's square graph of num_src + num_dst nodes, cached per tensor; under
    torch.compile a _Bipartite, which the custom op resolves."""
    _check_layout(edge_index)
    if isinstance(edge_index, Graph):
        raise invalid_argument(f"dfgnn.torch.{name}: a dfgnn.Graph has one node set, so it cannot run bipartite "
                               f"inputs (x_src, x_dst){' or separate lin_src / lin_dst' if name == 'GATConv' else ''}"
                               f": pass the edge_index (row 0 indexes x_src, row 1 x_dst)", kind="type")
    if not isinstance(edge_index, (torch.Tensor, np.ndarray)):
        raise invalid_argument(f"dfgnn.torch.{name}: bipartite inputs need an edge_index tensor [2, E] (row 0 indexes "
                               f"x_src, row 1 x_dst), got {type(edge_index).__name__}", kind="type")
    edge_index = torch.as_tensor(edge_index)
    if _resolves_here(edge_index):
        return _bipartite_graph(edge_index, num_src, num_dst, add_self_loops)
    return _Bipartite(edge_index, num_src)


# PyG's add_self_loops(edge_attr, fill_value=<str>) reductions (torch_geometric.utils.scatter's names)
_LOOP_REDUCE = {"add": "sum", "sum": "sum", "mean": "mean", "min": "amin", "amin": "amin", "max": "amax",
                "amax": "amax", "mul": "prod", "any": "any"}


def _loop_fill(edge_attr, dst, num_nodes, fill_value):
    """The self-loop rows of PyG's add_self_loops (torch_geometric.utils.loop.compute_loop_attr), with
    torch ops (dfgnn.torch does not import torch_geometric): None gives ones, a number or a tensor
    that value, a reduction name that reduction of each node's incoming rows (0 for a node without
    any; 1 for 'mul')."""
    size = (num_nodes,) + tuple(edge_attr.shape[1:])
    if fill_value is None:
        return edge_attr.new_ones(size)
    if isinstance(fill_value, (int, float)):
        return edge_attr.new_full(size, fill_value)
    if isinstance(fill_value, torch.Tensor):
        loop = fill_value.to(edge_attr.device, edge_attr.dtype)
        return (loop if loop.dim() == edge_attr.dim() else loop.unsqueeze(0)).expand(size).contiguous()
    if not isinstance(fill_value, str):
        raise invalid_argument(f"fill_value must be a float, a tensor or a reduction name, got "
                               f"{type(fill_value).__name__}", kind="type")
    reduce = _LOOP_REDUCE.get(fill_value)
    if reduce is None:
        raise invalid_argument(f"fill_value {fill_value!r} is not a reduction PyG knows "
                               f"({', '.join(map(repr, _LOOP_REDUCE))})")
    per_row = (-1,) + (1,) * (edge_attr.dim() - 1)
    index = dst.view(per_row).expand_as(edge_attr)
    if reduce in ("sum", "mean"):
        total = edge_attr.new_zeros(size).scatter_add(0, index, edge_attr)
        if reduce == "sum":
            return total
        count = edge_attr.new_zeros(num_nodes).index_add(0, dst, edge_attr.new_ones(dst.shape[0]))
        return total / count.clamp(min=1).view(per_row)
    if reduce == "any":
        return edge_attr.new_zeros(size).scatter(0, index, edge_attr)
    if reduce == "prod":
        return edge_attr.new_ones(size).scatter_reduce(0, index, edge_attr, "prod", include_self=True)
    return edge_attr.new_zeros(size).scatter_reduce(0, index, edge_attr, reduce, include_self=False)


def self_loop_edge_attr(edge_index, edge_attr, num_nodes=None, fill_value="mean"):
    """Edge features of ``edge_index`` [2, E] (``edge_attr`` [E, ...]) as rows of the graph
    ``dfgnn.Graph(edge_index, num_nodes, add_self_loops=True)`` (edge id order): the rows of the
    edges that are not self-loops, in input order, then one row per node for its added loop, filled
    as PyG's ``remove_self_loops`` + ``add_self_loops(..., fill_value)`` do (a float, a tensor, or
    a reduction of the node's incoming rows: 'mean', 'add', 'sum', 'min', 'max', 'mul', 'any';
    None: ones). The layers do this for an edge_index; with a prebuilt Graph, pass them the result.
    Differentiable. The layers do it on every call (a boolean mask: a host sync on CUDA; torch's
    scatter sums, as PyG's, are bitwise reproducible on CUDA only under
    ``torch.use_deterministic_algorithms``): for fixed edge features, make the rows once and pass
    them with the Graph."""
    ei = torch.as_tensor(edge_index)
    if num_nodes is None:
        num_nodes = int(ei.max()) + 1 if ei.numel() > 0 else 0
    return _with_loop_rows(ei, edge_attr, num_nodes, fill_value)


def _with_loop_rows(ei, edge_attr, num_loops, fill_value, num_dst=0):
    """self_loop_edge_attr with num_loops loops; a reduction runs over max(num_loops, num_dst)
    destinations (a bipartite graph has loops only for i < min(N_src, N_dst), where PyG's scatter
    fails on edges into the destinations past them)."""
    ei = ei.to(edge_attr.device)
    keep = ei[0] != ei[1]
    edge_attr, dst = edge_attr[keep], ei[1][keep].long()
    loops = _loop_fill(edge_attr, dst, max(num_loops, num_dst), fill_value)[:num_loops]
    return torch.cat([edge_attr, loops], dim=0)


def _layer_edge_attr(layer, name, edge_index, nodes, edge_attr, add_self_loops, flat=True):
    """A layer's edge_attr as [E', edge_dim] rows by the graph's edge ids (for lin_edge), or None
    without edge_dim; nodes: N, or (N_src, N_dst) for a bipartite edge_index. With an edge_index,
    edge_attr has a row per column, and with add_self_loops the
    loops' rows are made as PyG makes them (self_loop_edge_attr, the layer's fill_value); with a
    dfgnn.Graph, a row per edge id of the graph, its self-loops included. A 1-D [E] edge_attr is
    [E, 1] where PyG takes it (flat). PyG ignores edge_attr without edge_dim (GATConv) or fails, and
    leaves the edge term out (GATConv, GATv2Conv) or fails without edge_attr: both are errors here."""
    if layer.lin_edge is None:
        if edge_attr is not None:
            raise invalid_argument(f"dfgnn.torch.{name}: edge_attr was given, but the layer has no edge_dim and "
                                   f"would not use it: build it with edge_dim=<edge features>")
        return None
    if edge_attr is None:
        raise invalid_argument(f"dfgnn.torch.{name}: the layer has edge_dim={layer.edge_dim}, but forward got no "
                               f"edge_attr")
    _check_tensor(edge_attr, "edge_attr")
    if edge_attr.dim() not in ((1, 2) if flat else (2,)):
        raise invalid_argument(f"dfgnn.torch.{name}: edge_attr must have shape [E, edge_dim]"
                               f"{' (or [E] for edge_dim=1)' if flat else ''}, got {list(edge_attr.shape)}",
                               kind="shape")
    features = 1 if edge_attr.dim() == 1 else edge_attr.shape[1]
    if features != layer.edge_dim:
        raise invalid_argument(f"dfgnn.torch.{name}: edge_attr has {features} features per edge, but the layer "
                               f"has edge_dim={layer.edge_dim}", kind="shape")
    if isinstance(edge_index, Graph):
        # (not while compiling: dynamo does not trace into the native graph; the op checks the rows too)
        if not torch.compiler.is_compiling() and edge_attr.shape[0] != edge_index.num_edges:
            raise invalid_argument(f"dfgnn.torch.{name}: edge_attr has {edge_attr.shape[0]} rows, but the "
                                   f"dfgnn.Graph has {edge_index.num_edges} edges (with a Graph, edge_attr has "
                                   f"one row per edge id, its self-loops included: see self_loop_edge_attr)",
                                   kind="shape")
    else:
        # (in an eager call the layer's graph was resolved before, so a bad edge_index failed there,
        # before the self-loop rows index with it)
        ei = torch.as_tensor(edge_index)
        if edge_attr.shape[0] != ei.shape[1]:
            raise invalid_argument(f"dfgnn.torch.{name}: edge_attr has {edge_attr.shape[0]} rows, but edge_index "
                                   f"has {ei.shape[1]} edges", kind="shape")
        if add_self_loops:
            # PyG's loops: one per node, or i -> i for i < min(N_src, N_dst) of a bipartite graph
            num_loops, num_dst = (min(nodes), nodes[1]) if isinstance(nodes, tuple) else (nodes, nodes)
            edge_attr = _with_loop_rows(ei, edge_attr, num_loops, layer.fill_value, num_dst)
    return edge_attr.view(-1, 1) if edge_attr.dim() == 1 else edge_attr


def _attention_dropout(layer, features):
    """(dropout, seed) of one layer call: in training mode with dropout > 0, the layer's dropout and
    a new seed, drawn where the features are: on CUDA a one-element int64 tensor from torch's CUDA
    generator (read by the kernels: no host sync, no graph break, and a captured CUDA graph draws a
    fresh one per replay), on the CPU an int from torch's default CPU generator. torch.manual_seed
    reproduces both; under torch.compile the draw is traced into the graph, where inductor may draw
    other values than eager (equally reproducible; torch._inductor.config.fallback_random draws
    eager's). Otherwise no dropout. (A dropout outside [0, 1) reaches the op, which rejects it.)"""
    if layer.training and layer.dropout != 0:
        if features.is_cuda:
            return layer.dropout, torch.randint(0, 2 ** 62, (1,), dtype=torch.int64, device=features.device)
        return layer.dropout, torch.randint(0, 2 ** 62, (1,)).item()
    return 0.0, 0


def _attention_weights(layer, g, x, score_fn, num_src=None):
    """PyG's ``return_attention_weights``: ``(edge_index, alpha)`` with the graph's edges in edge id
    order (PyG's order: an edge_index's columns, with self-loops those that are not loops, then the
    added loops) and alpha [E, H] their attention weights. The fused kernels never store these E x H
    values, so they are computed here only when asked for, with torch ops: score_fn(src, dst) gives
    the [E, H] scores (edge features are in edge id order already), softmax per destination. x: the
    op's features (for a bipartite graph, sources' rows then destinations'; the edge_index returned
    has PyG's ids). Differentiable."""
    if layer.training and layer.dropout != 0:
        raise NotImplementedError(f"dfgnn.torch.{type(layer).__name__}: return_attention_weights with attention "
                                  "dropout in training mode is not supported yet (call eval() first)")
    if isinstance(g, _Bipartite):
        num_src = g.num_src
    if not isinstance(g, Graph):
        g = _resolve(g, x.size(0), getattr(layer, "add_self_loops", False))
    _check_graph(g)
    by_id = np.argsort(g.csr()[2], kind="stable")  # CSR positions in edge id order
    edge_index = torch.from_numpy(np.ascontiguousarray(g.edge_index()[:, by_id])).to(x.device)
    src, dst = edge_index[0], edge_index[1]
    if num_src is not None:
        edge_index = torch.stack([src, dst - num_src])
    scores = score_fn(src, dst)
    work = scores if scores.dtype == torch.float64 else scores.float()
    n, heads = g.num_nodes, work.shape[1]
    index = dst.unsqueeze(1).expand_as(work)
    row_max = work.new_full((n, heads), float("-inf")).scatter_reduce(0, index, work, "amax")
    weights = torch.exp(work - row_max[dst])
    total = work.new_zeros((n, heads)).index_add(0, dst, weights)
    return edge_index, (weights / total[dst]).to(scores.dtype)


class GATConv(torch.nn.Module):
    """PyG's GATConv on dfgnn's fused kernels (same arguments and parameter names:
    ``lin.weight``, or ``lin_src`` / ``lin_dst`` for a pair ``in_channels``, ``att_src``,
    ``att_dst``, ``lin_edge.weight``, ``att_edge``, ``bias``, ``res.weight``; ``in_channels=-1``
    is lazy, as PyG's).

    ``forward(x, edge_index, edge_attr=None, size=None, return_attention_weights=None)`` with ``x``
    a tensor or PyG's pair ``(x_src, x_dst)`` (``x_dst`` may be None; then ``size`` or ``x_src``
    gives the destinations' count) and ``edge_index`` a PyG edge_index tensor or, for one node set
    (an int ``in_channels`` and a tensor ``x``), a :class:`dfgnn.Graph` (used as given: build it
    with ``add_self_loops=True`` to match PyG's default). ``edge_attr`` (with ``edge_dim``):
    [E, edge_dim] (or [E]) rows of the edge_index's columns, the self-loops' rows made from
    ``fill_value`` as in PyG; with a Graph, one row per edge id of the graph (see
    :func:`self_loop_edge_attr`). ``dropout``: attention dropout in training mode, a new mask per
    call (its seed drawn from torch's generator of the features' device); none in eval mode."""

    def __init__(self, in_channels, out_channels, heads=1, concat=True, negative_slope=0.2, dropout=0.0,
                 add_self_loops=True, edge_dim=None, fill_value="mean", bias=True, residual=False, **kwargs):
        super().__init__()
        _check_kwargs("GATConv", kwargs)
        in_src, in_dst = _channels("GATConv", in_channels)
        self.in_channels, self.out_channels, self.heads, self.concat = in_channels, out_channels, heads, concat
        self.negative_slope, self.dropout, self.add_self_loops = negative_slope, dropout, add_self_loops
        self.edge_dim, self.fill_value, self.residual = edge_dim, fill_value, residual
        self.lin = self.lin_src = self.lin_dst = None
        if isinstance(in_channels, int):
            self.lin = _linear(in_channels, heads * out_channels, False, True)
        else:
            self.lin_src = _linear(in_src, heads * out_channels, False, True)
            self.lin_dst = _linear(in_dst, heads * out_channels, False, True)
        self.att_src = torch.nn.Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = torch.nn.Parameter(torch.empty(1, heads, out_channels))
        if edge_dim is not None:
            self.lin_edge = _linear(edge_dim, heads * out_channels, False, True)
            self.att_edge = torch.nn.Parameter(torch.empty(1, heads, out_channels))
        else:
            self.lin_edge = None
            self.register_parameter("att_edge", None)
        total = out_channels * (heads if concat else 1)
        self.res = _linear(in_dst, total, False, True) if residual else None
        self.bias = torch.nn.Parameter(torch.empty(total)) if bias else None
        self.reset_parameters()

    def reset_parameters(self):
        """Re-initialises the parameters as PyG's GATConv does: glorot Linear weights and attention
        vectors, zero bias (a lazy Linear not called yet is initialised at its first call)."""
        for lin in (self.lin, self.lin_src, self.lin_dst, self.lin_edge, self.res):
            _reset_linear(lin, True)
        _glorot(self.att_src)
        _glorot(self.att_dst)
        _glorot(self.att_edge)
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)

    def forward(self, x, edge_index, edge_attr=None, size=None, return_attention_weights=None):
        """Projects the nodes, runs fused GAT attention over the graph and aggregates.

        Args:
            x: node features [N, in_channels], or PyG's pair ``(x_src, x_dst)`` for a bipartite
                graph (``x_dst`` may be None). On CUDA float32, float16 or bfloat16 (or float32
                under ``torch.autocast``); on the CPU float64 (the reference ops: call
                ``layer.double()``).
            edge_index: a PyG edge_index [2, E] (int32/int64; row 0 = source j, row 1 = target i;
                the layer adds self-loops when ``add_self_loops``), or, for one node set, a
                :class:`dfgnn.Graph`, used as given (build it with ``add_self_loops=True`` to
                match PyG's default).
            edge_attr: edge features [E, edge_dim] (or [E] for edge_dim 1), required when the layer
                has ``edge_dim`` and refused (ValueError) when it has not; with a Graph, one row
                per edge id of the graph (see :func:`self_loop_edge_attr`).
            size: ``(N_src, N_dst)`` as in PyG, for a pair whose ``x_dst`` is None.
            return_attention_weights: if true, also return the attention weights (computed with
                torch ops on request; not with attention dropout in training mode).

        Returns:
            ``out`` [N_dst, heads * out_channels] (``concat``) or [N_dst, out_channels] (mean over
            the heads), plus the residual and the bias; with ``return_attention_weights``,
            ``(out, (edge_index, alpha))`` where ``edge_index`` [2, E'] lists the edges in edge id
            order (self-loops included) and ``alpha`` [E', heads] their weights.
        """
        H, C = self.heads, self.out_channels
        x_src, x_dst, pair = _split_x("GATConv", x, dst_optional=True)
        n_src, n_dst = _pair_sizes(x_src, x_dst, size)
        bipartite = pair or self.lin is None
        if not bipartite:
            g = _layer_graph(edge_index, x, self.add_self_loops)
            h = self.lin(x).view(-1, H, C)
        else:
            # Sources and destinations as one square graph (_bipartite_graph): the op's rows are the
            # sources' projections, then the destinations' (zeros without x_dst: PyG then leaves the
            # att_dst term out); lin_src / lin_dst on one node set take this path with x as both.
            g = _pair_graph("GATConv", edge_index, n_src, n_dst, self.add_self_loops)
            lin_src, lin_dst = (self.lin, self.lin) if self.lin is not None else (self.lin_src, self.lin_dst)
            h_src = lin_src(x_src).view(-1, H, C)
            h_dst = h_src.new_zeros(n_dst, H, C) if x_dst is None else lin_dst(x_dst).view(-1, H, C)
            h = torch.cat([h_src, h_dst])
        nodes = (n_src, n_dst) if bipartite else n_src
        edge_attr = _layer_edge_attr(self, "GATConv", edge_index, nodes, edge_attr, self.add_self_loops)
        # PyG's alpha_edge = (lin_edge(edge_attr).view(-1, H, C) * att_edge).sum(-1), the [E, H] logit
        # term, with att_edge folded into lin_edge's weight first ([H, edge_dim]): the same sum without
        # the E x H x C intermediate, which made the edge term cost 5x the attention on R-MAT 2^18.
        alpha_edge = None
        if edge_attr is not None:
            folded = (self.lin_edge.weight.view(H, C, -1) * self.att_edge.view(H, C, 1)).sum(1)
            alpha_edge = torch.nn.functional.linear(edge_attr, folded)
        dropout, seed = _attention_dropout(self, h)
        att_dst = self.att_dst if x_dst is not None else self.att_dst.detach()  # unused by PyG: no gradient
        out = gat(g, h, self.att_src, att_dst, negative_slope=self.negative_slope,
                  add_self_loops=self.add_self_loops, dropout=dropout, dropout_seed=seed, edge=alpha_edge)
        if bipartite:
            out = out[n_src:]
        out = out.reshape(-1, H * C) if self.concat else out.mean(dim=1)
        if self.res is not None and x_dst is not None:
            out = out + self.res(x_dst)
        if self.bias is not None:
            out = out + self.bias
        if return_attention_weights:  # as PyG 2.8's GATConv (TransformerConv also returns them for False)
            def scores(src, dst):
                a_src, a_dst = self.att_src.view(1, H, C).to(h.dtype), att_dst.view(1, H, C).to(h.dtype)
                z = (h * a_src).sum(-1)[src] + (h * a_dst).sum(-1)[dst]
                if alpha_edge is not None:
                    z = z + alpha_edge.to(z.dtype)
                return torch.nn.functional.leaky_relu(z, self.negative_slope)
            return out, _attention_weights(self, g, h, scores, n_src if bipartite else None)
        return out

    def __repr__(self):
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"


class GATv2Conv(torch.nn.Module):
    """PyG's GATv2Conv on dfgnn's fused kernels (parameters ``lin_l``, ``lin_r``, ``att``,
    ``lin_edge``, ``bias``, ``res``); ``x`` a tensor or a pair ``(x_src, x_dst)`` (lin_l on
    x_src, lin_r on x_dst), with an edge_index; lazy ``in_channels``, ``edge_attr`` and ``dropout``
    as in :class:`GATConv`."""

    def __init__(self, in_channels, out_channels, heads=1, concat=True, negative_slope=0.2, dropout=0.0,
                 add_self_loops=True, edge_dim=None, fill_value="mean", bias=True, share_weights=False,
                 residual=False, **kwargs):
        super().__init__()
        _check_kwargs("GATv2Conv", kwargs)
        in_src, in_dst = _channels("GATv2Conv", in_channels)
        self.in_channels, self.out_channels, self.heads, self.concat = in_channels, out_channels, heads, concat
        self.negative_slope, self.dropout, self.add_self_loops = negative_slope, dropout, add_self_loops
        self.edge_dim, self.fill_value, self.residual = edge_dim, fill_value, residual
        self.share_weights = share_weights
        self.lin_l = _linear(in_src, heads * out_channels, bias, True)
        self.lin_r = self.lin_l if share_weights else _linear(in_dst, heads * out_channels, bias, True)
        self.att = torch.nn.Parameter(torch.empty(1, heads, out_channels))
        self.lin_edge = None if edge_dim is None else _linear(edge_dim, heads * out_channels, False, True)
        total = out_channels * (heads if concat else 1)
        self.res = _linear(in_dst, total, False, True) if residual else None
        self.bias = torch.nn.Parameter(torch.empty(total)) if bias else None
        self.reset_parameters()

    def reset_parameters(self):
        """Re-initialises the parameters as PyG's GATv2Conv does: glorot Linear weights and
        attention vector, default Linear biases, zero bias."""
        for lin in (self.lin_l, self.lin_r, self.lin_edge, self.res):
            _reset_linear(lin, True)
        _glorot(self.att)
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)

    def forward(self, x, edge_index, edge_attr=None, return_attention_weights=None):
        """Projects the nodes (``lin_l`` for the sources, ``lin_r`` for the targets), runs fused
        GATv2 attention and aggregates the sources' projections.

        Args:
            x: node features [N, in_channels], or a pair ``(x_src, x_dst)`` of tensors. Dtypes as
                in :meth:`GATConv.forward`.
            edge_index: a PyG edge_index [2, E] or, for one node set, a :class:`dfgnn.Graph`, as in
                :meth:`GATConv.forward`.
            edge_attr: edge features [E, edge_dim] (or [E]), as in :meth:`GATConv.forward`.
            return_attention_weights: if true, also return ``(edge_index, alpha)`` as
                :meth:`GATConv.forward` does.

        Returns:
            ``out`` [N_dst, heads * out_channels] (``concat``) or [N_dst, out_channels], plus the
            residual and the bias; with ``return_attention_weights``, ``(out, (edge_index,
            alpha))``.
        """
        H, C = self.heads, self.out_channels
        x_src, x_dst, pair = _split_x("GATv2Conv", x)
        x_l = self.lin_l(x_src).view(-1, H, C)
        x_r = x_l if self.share_weights and not pair else self.lin_r(x_dst).view(-1, H, C)
        if pair:
            # one square graph (_bipartite_graph): sources' rows, then destinations'; each side's
            # rows of the other side's input are zeros (no edge reads them)
            n_src, n_dst = x_src.size(0), x_dst.size(0)
            g = _pair_graph("GATv2Conv", edge_index, n_src, n_dst, self.add_self_loops)
            h, h_dst = torch.cat([x_l, x_l.new_zeros(n_dst, H, C)]), torch.cat([x_r.new_zeros(n_src, H, C), x_r])
        else:
            g = _layer_graph(edge_index, x, self.add_self_loops)
            h, h_dst = x_l, x_r
        nodes = (n_src, n_dst) if pair else x.size(0)
        edge_attr = _layer_edge_attr(self, "GATv2Conv", edge_index, nodes, edge_attr, self.add_self_loops)
        edge = None if edge_attr is None else self.lin_edge(edge_attr).view(-1, H, C)
        dropout, seed = _attention_dropout(self, h)
        out = gatv2(g, h, h_dst, self.att, negative_slope=self.negative_slope, add_self_loops=self.add_self_loops,
                    dropout=dropout, dropout_seed=seed, edge=edge)
        if pair:
            out = out[n_src:]
        out = out.reshape(-1, H * C) if self.concat else out.mean(dim=1)
        if self.res is not None:
            out = out + self.res(x_dst)
        if self.bias is not None:
            out = out + self.bias
        if return_attention_weights:  # as PyG 2.8's GATv2Conv
            def scores(src, dst):
                z = h[src] + h_dst[dst]
                z = torch.nn.functional.leaky_relu(z if edge is None else z + edge.to(z.dtype), self.negative_slope)
                return (z * self.att.view(1, H, C).to(z.dtype)).sum(-1)
            return out, _attention_weights(self, g, h, scores, n_src if pair else None)
        return out

    def __repr__(self):
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"


class TransformerConv(torch.nn.Module):
    """PyG's TransformerConv on dfgnn's fused kernels (parameters ``lin_key``, ``lin_query``,
    ``lin_value``, ``lin_edge``, ``lin_skip``, ``lin_beta``). Like PyG, it adds no self-loops;
    ``x`` a tensor or a pair ``(x_src, x_dst)`` (keys and values from x_src, queries and the skip
    from x_dst), with an edge_index; lazy ``in_channels`` as in PyG; ``edge_attr`` [E, edge_dim]
    (not [E], as in PyG) and ``dropout`` as in :class:`GATConv`."""

    def __init__(self, in_channels, out_channels, heads=1, concat=True, beta=False, dropout=0.0, edge_dim=None,
                 bias=True, root_weight=True, **kwargs):
        super().__init__()
        _check_kwargs("TransformerConv", kwargs)
        in_src, in_dst = _channels("TransformerConv", in_channels)
        self.in_channels, self.out_channels, self.heads, self.concat = in_channels, out_channels, heads, concat
        self.beta, self.root_weight = beta and root_weight, root_weight
        self.dropout, self.edge_dim = dropout, edge_dim
        self.lin_key = _linear(in_src, heads * out_channels, bias, False)
        self.lin_query = _linear(in_dst, heads * out_channels, bias, False)
        self.lin_value = _linear(in_src, heads * out_channels, bias, False)
        self.lin_edge = None if edge_dim is None else _linear(edge_dim, heads * out_channels, False, False)
        skip = heads * out_channels if concat else out_channels
        self.lin_skip = _linear(in_dst, skip, bias, False)
        self.lin_beta = _linear(3 * skip, 1, False, False) if self.beta else None

    def reset_parameters(self):
        """Re-initialises every Linear with torch.nn.Linear's default initialisation, as PyG's
        TransformerConv does."""
        for lin in (self.lin_key, self.lin_query, self.lin_value, self.lin_edge, self.lin_skip, self.lin_beta):
            _reset_linear(lin, False)

    def forward(self, x, edge_index, edge_attr=None, return_attention_weights=None):
        """Projects queries (targets), keys and values (sources), runs fused scaled dot-product
        attention over the graph (no self-loops are added) and adds the skip connection.

        Args:
            x: node features [N, in_channels], or a pair ``(x_src, x_dst)`` of tensors (keys and
                values from ``x_src``, queries and the skip from ``x_dst``). Dtypes as in
                :meth:`GATConv.forward`.
            edge_index: a PyG edge_index [2, E] or, for one node set, a :class:`dfgnn.Graph`.
            edge_attr: edge features [E, edge_dim] (2-D, as in PyG), required when the layer has
                ``edge_dim``; added through ``lin_edge`` to every edge's key and value.
            return_attention_weights: as PyG 2.8's TransformerConv: for any bool (True or False)
                the result is ``(out, (edge_index, alpha))``; None returns ``out`` only.

        Returns:
            ``out`` [N_dst, heads * out_channels] (``concat``) or [N_dst, out_channels], plus
            ``lin_skip(x_dst)`` when ``root_weight`` (gated by ``lin_beta`` when ``beta``).
        """
        H, C = self.heads, self.out_channels
        x_src, x_dst, pair = _split_x("TransformerConv", x)
        q = self.lin_query(x_dst).view(-1, H, C)
        k = self.lin_key(x_src).view(-1, H, C)
        v = self.lin_value(x_src).view(-1, H, C)
        if pair:
            # one square graph (_bipartite_graph): queries on the destinations' rows, keys and values
            # on the sources'; the other rows are zeros (no edge reads them)
            n_src, n_dst = x_src.size(0), x_dst.size(0)
            g = _pair_graph("TransformerConv", edge_index, n_src, n_dst, False)
            q = torch.cat([q.new_zeros(n_src, H, C), q])
            k, v = torch.cat([k, k.new_zeros(n_dst, H, C)]), torch.cat([v, v.new_zeros(n_dst, H, C)])
        else:
            g = _layer_graph(edge_index, x, False)
        # PyG's TransformerConv applies lin_edge to edge_attr as given: [E] is not [E, 1] there
        nodes = (n_src, n_dst) if pair else x.size(0)
        edge_attr = _layer_edge_attr(self, "TransformerConv", edge_index, nodes, edge_attr, False, flat=False)
        edge = None if edge_attr is None else self.lin_edge(edge_attr).view(-1, H, C)
        dropout, seed = _attention_dropout(self, q)
        out = transformer(g, q, k, v, dropout=dropout, dropout_seed=seed, edge=edge)
        if pair:
            out = out[n_src:]
        out = out.reshape(-1, H * C) if self.concat else out.mean(dim=1)
        if self.root_weight:
            x_r = self.lin_skip(x_dst)
            if self.lin_beta is not None:
                b = self.lin_beta(torch.cat([out, x_r, out - x_r], dim=-1)).sigmoid()
                out = b * x_r + (1 - b) * out
            else:
                out = out + x_r
        if isinstance(return_attention_weights, bool):  # as PyG 2.8's TransformerConv: for True and False
            def scores(src, dst):
                key = k[src] if edge is None else k[src] + edge.to(k.dtype)
                return (q[dst] * key).sum(-1) / math.sqrt(C)
            return out, _attention_weights(self, g, q, scores, n_src if pair else None)
        return out

    def __repr__(self):
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"


class AGNNConv(torch.nn.Module):
    """PyG's AGNNConv on dfgnn's fused kernels (parameter or buffer ``beta``). As PyG's, it has no
    in_channels and takes one node set (no pair x)."""

    def __init__(self, requires_grad=True, add_self_loops=True, **kwargs):
        super().__init__()
        _check_kwargs("AGNNConv", kwargs)
        self.requires_grad, self.add_self_loops = requires_grad, add_self_loops
        if requires_grad:
            self.beta = torch.nn.Parameter(torch.empty(1))
        else:
            self.register_buffer("beta", torch.ones(1))
        self.reset_parameters()

    def reset_parameters(self):
        """Sets ``beta`` to 1 when it is a parameter (``requires_grad=True``), as PyG's AGNNConv."""
        if self.requires_grad:
            with torch.no_grad():
                self.beta.fill_(1)

    def forward(self, x, edge_index):
        """Runs fused AGNN attention (beta times the cosine similarity of the endpoints' features)
        and aggregates the neighbours' features, without a projection.

        Args:
            x: node features [N, F], one tensor (AGNNConv has no bipartite form); dtypes as in
                :meth:`GATConv.forward`.
            edge_index: a PyG edge_index [2, E] (self-loops added when ``add_self_loops``) or a
                :class:`dfgnn.Graph`, used as given.

        Returns:
            ``out`` [N, F].
        """
        if isinstance(x, (tuple, list)):
            # PyG's AGNNConv.forward takes a tensor only (a pair fails inside it)
            raise TypeError("dfgnn.torch.AGNNConv: x must be one tensor [N, F]; AGNNConv has no bipartite (x_src, "
                            "x_dst) form, in PyG either")
        g = _layer_graph(edge_index, x, self.add_self_loops)
        return agnn(g, x.unsqueeze(1), self.beta, add_self_loops=self.add_self_loops).squeeze(1)

    def __repr__(self):
        return f"{self.__class__.__name__}()"
