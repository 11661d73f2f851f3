"""Graphs of dfgnn.torch: PyG edge_index tensors turned into dfgnn.Graph objects (cached per tensor),
the square graph of a bipartite edge_index, and the graph argument of the custom ops."""

import weakref
from typing import NamedTuple

import numpy as np
import torch

from .._errors import InvalidArgumentError, Status, invalid_argument, make_error
from .._graph import Graph, graph_by_key

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
    if edge_index is None:
        raise invalid_argument("graph must be a dfgnn.Graph or an edge_index [2, E] (int32/int64), got None",
                               kind="type")
    if not isinstance(edge_index, torch.Tensor):
        return Graph(edge_index, num_nodes, add_self_loops=add_self_loops, reject_duplicates=reject_duplicates)
    if num_nodes is None:
        num_nodes = int(edge_index.max()) + 1 if edge_index.numel() > 0 else 0
    return _cached(edge_index, (int(num_nodes), bool(add_self_loops), bool(reject_duplicates)),
                   lambda ei, stream: Graph(ei, num_nodes, add_self_loops=add_self_loops,
                                            reject_duplicates=reject_duplicates, stream=stream))


def _cached(edge_index, options, build):
    """The Graph build(detached contiguous edge_index, or its DLPack capsule on CUDA) makes, cached
    by (the tensor, options) while the tensor lives unmodified."""
    key = (id(edge_index),) + options
    hit = _graph_cache.get(key)
    if hit is not None and hit[0]() is edge_index and hit[1] == _version(edge_index):
        return hit[2]
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        # A build synchronises (its validation flags come to the host), which a capture forbids; and
        # a replay would reuse the captured graph whatever the edge_index then holds.
        raise invalid_argument(
            "dfgnn.torch: a graph would be built from an edge_index while a CUDA graph is being captured "
            "(torch.compile mode='reduce-overhead' copies inputs into static buffers, so the op sees a new "
            "tensor): build it before, g = dfgnn.torch.graph(edge_index, num_nodes, add_self_loops=True), and "
            "pass g instead of the edge_index", kind="value")
    ei = edge_index.detach()
    if not ei.is_contiguous():
        ei = ei.contiguous()
    if ei.is_cuda:
        # Built on the GPU, on the stream that produced edge_index (ordered after it, no sync here).
        with torch.cuda.device(ei.device):
            g = build(_dl(ei), torch.cuda.current_stream(ei.device).cuda_stream)
    else:
        g = build(ei, None)
    if len(_graph_cache) >= _CACHE_SIZE:
        _graph_cache.pop(next(iter(_graph_cache)))
    try:
        ref = weakref.ref(edge_index, _drop_cached(key))
    except TypeError:
        return g
    _graph_cache[key] = (ref, _version(edge_index), g)
    return g


def _bipartite_graph(edge_index, num_src, num_dst, add_self_loops):
    """The square Graph of num_src + num_dst nodes that runs a bipartite PyG edge_index (row 0
    indexes the sources, row 1 the destinations): sources keep their ids, destination i becomes
    num_src + i, and edge ids stay the columns' order. add_self_loops as PyG's GATConv and GATv2Conv
    do for a pair (x_src, x_dst): columns with equal ids are removed, then i -> i is added for
    i < min(num_src, num_dst). Cached like graph()."""
    def build(_ei, _stream):
        # on the host: the id ranges are checked against both node sets (the relabelling would
        # otherwise turn a source id past num_src into a destination)
        if edge_index.dim() != 2 or edge_index.shape[0] != 2:
            raise invalid_argument(f"edge_index must have shape [2, E], got {list(edge_index.shape)}", kind="shape")
        if edge_index.dtype not in (torch.int32, torch.int64):  # as graph(): no bool masks or bytes taken as ids
            raise invalid_argument(f"edge_index must have dtype int32 or int64, got {edge_index.dtype}", kind="dtype")
        src, dst = edge_index.detach().cpu().long().numpy()
        if src.size and (src.min() < 0 or src.max() >= num_src or dst.min() < 0 or dst.max() >= num_dst):
            raise make_error(Status.INDEX_OUT_OF_RANGE, "", f"a bipartite edge_index needs sources in [0, {num_src}) "
                             f"(rows of x_src) and destinations in [0, {num_dst}) (rows of x_dst), got sources in "
                             f"[{src.min()}, {src.max()}] and destinations in [{dst.min()}, {dst.max()}]", "value")
        if add_self_loops:
            keep = src != dst
            loops = np.arange(min(num_src, num_dst), dtype=np.int64)
            src, dst = np.concatenate([src[keep], loops]), np.concatenate([dst[keep], loops])
        return Graph(np.stack([src, dst + num_src]), num_src + num_dst)
    return _cached(edge_index, ("bipartite", int(num_src), int(num_dst), bool(add_self_loops)), build)


def _check_graph(g):
    if not isinstance(g, Graph):
        raise invalid_argument(f"graph must be a dfgnn.Graph (see dfgnn.torch.graph), got {type(g).__name__}",
                               kind="type")
    if getattr(g, "_h", None) is None or getattr(g, "_key", None) is None:
        raise invalid_argument("this dfgnn.Graph has no native graph (released at interpreter exit, or never "
                               "initialised): build a new dfgnn.Graph", kind="value")


def _dl(t):
    """A DLPack capsule of a tensor (detached: DLPack refuses tensors that require grad) without any
    stream synchronisation: by default Tensor.__dlpack__ makes the legacy default stream wait on the
    current one, which costs an event per tensor and is not allowed while a CUDA graph is being
    captured. The kernels run on the current stream, so no synchronisation is needed."""
    return None if t is None else t.detach().__dlpack__(stream=-1)


class _Bipartite(NamedTuple):
    """A layer's bipartite edge_index and its source count: the graph argument that runs it on the
    square graph of _bipartite_graph (the op's features have the sources' rows, then the
    destinations')."""
    edge_index: "torch.Tensor"
    num_src: int


def _resolve(g, num_nodes, add_self_loops):
    """The Graph of a graph argument (a Graph, an edge_index or a _Bipartite) for num_nodes rows."""
    if isinstance(g, _Bipartite):
        return _bipartite_graph(g.edge_index, g.num_src, num_nodes - g.num_src, add_self_loops)
    return graph(g, num_nodes, add_self_loops=add_self_loops)


def _op_graph_args(g, add_self_loops, num_nodes):
    """(Graph or None, (edge_index, graph_key, add_self_loops)) of a graph argument, for the custom
    ops; the Graph is returned so that the caller holds it during the call."""
    if isinstance(g, _Bipartite):
        return None, (g.edge_index, 1 + g.num_src, bool(add_self_loops))
    if isinstance(g, torch.Tensor):
        return None, (g, 0, bool(add_self_loops))
    if not isinstance(g, Graph):
        g = graph(g, num_nodes, add_self_loops=add_self_loops)  # NumPy arrays, lists: eager only
    _check_graph(g)
    return g, (None, g.key, False)


def _op_graph(edge_index, key, add_self_loops, num_nodes):
    if edge_index is not None and key:
        return _bipartite_graph(edge_index, key - 1, num_nodes - key + 1, add_self_loops)
    if edge_index is not None:
        return graph(edge_index, num_nodes, add_self_loops=add_self_loops)
    return graph_by_key(key)


def _by_key_or_none(key):
    try:
        return graph_by_key(key)
    except InvalidArgumentError:  # freed already: the op itself reports it
        return None

