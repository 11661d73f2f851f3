"""dfgnn.Graph: a validated graph held as CSR by destination plus its transpose (CSC)."""

import atexit
import itertools
import os
import weakref

import numpy as np

from . import _dfgnn
from ._errors import Status, invalid_argument, make_error
from ._op import INT32, INT64, UINT64, as_int


def _context(context):
    return _dfgnn.default_context() if context is None else context


def _as_index_array(x, name):
    """Lists and tuples become int64 NumPy arrays; arrays (any framework) pass through untouched."""
    if isinstance(x, (list, tuple)):
        a = np.asarray(x)
        if a.size == 0:
            a = a.astype(np.int64)
        if a.dtype.kind not in "iu":
            raise invalid_argument(f"{name} must hold integers, got {a.dtype}", kind="dtype")
        if a.dtype.kind == "u" and int(a.max()) > INT64[2]:  # astype would wrap it to a negative id
            raise invalid_argument(f"{name} holds {int(a.max())}, beyond int64", kind="value")
        return a.astype(np.int64, copy=False)
    return x


def _stream_handle(arrays, stream):
    """The cudaStream_t (an int) that a graph from device arrays is built on: ``stream`` (an int, or an
    object with ``cuda_stream`` such as ``torch.cuda.Stream``), else torch's current stream for torch
    CUDA tensors (so the build is ordered after the kernel that wrote them), else 0 (the legacy
    default stream)."""
    if stream is not None:
        return int(getattr(stream, "cuda_stream", stream))
    for a in arrays:
        device = getattr(a, "device", None)
        if getattr(device, "type", None) == "cuda" and type(a).__module__.startswith("torch"):
            import torch
            return torch.cuda.current_stream(device).cuda_stream
    return 0


def _infer_num_nodes(edge_index):
    """PyG's maybe_num_nodes: max index + 1 (0 without edges). Works for NumPy, torch, CuPy, JAX."""
    shape = tuple(getattr(edge_index, "shape", ()))
    if len(shape) == 2 and shape[1] == 0:
        return 0
    if len(shape) != 2 or shape[0] != 2:
        return 0  # let the binding report the shape
    if not hasattr(edge_index, "max"):
        raise invalid_argument(
            f"num_nodes is required for a {type(edge_index).__name__} edge_index (it has no .max())")
    largest = int(edge_index.max())
    if largest < 0:  # max + 1 would be a meaningless node count; name the real problem
        raise make_error(Status.INDEX_OUT_OF_RANGE, "", f"edge_index holds only negative node ids (largest {largest}); "
                         "node ids must be >= 0")
    return largest + 1


# Every Graph gets a process-unique integer key (never reused), and a weak registry maps keys back
# to live graphs. dfgnn.torch passes the key through torch custom ops, whose schemas take tensors
# and scalars but not arbitrary Python objects (torch.compile then treats the key like any int).
_keys = itertools.count(1)
_by_key = weakref.WeakValueDictionary()


@atexit.register
def _release_native_graphs():
    """Frees, at interpreter exit, the native graphs that Python objects still reference: a graph
    held by torch's autograd graph (an output kept in a global) or by a cache would otherwise outlive
    the extension's teardown, which nanobind reports as a leak."""
    for g in list(_by_key.values()):
        g._h = None


def graph_by_key(key):
    """The live Graph with this key (see :attr:`Graph.key`); an error if it was freed."""
    g = _by_key.get(int(key))
    if g is None:
        raise invalid_argument(f"dfgnn.Graph #{int(key)} no longer exists: keep the Graph object alive while ops "
                               "that use it (forward and backward) can run", kind="value")
    return g


class Graph:
    """A graph for dfgnn's attention ops: CSR by destination (row i lists the sources j of its
    in-edges), its transpose, the degree fingerprint and, on first GPU use, device copies and
    per-op plans, all built once and cached.

    Build one from a PyG ``edge_index`` (``Graph(edge_index)``, row 0 = source j, row 1 =
    target i), from CSR arrays (:meth:`from_csr`), a file (:meth:`from_file`) or a generator
    (:meth:`rmat`, :meth:`planted_hubs`). Index arrays are int32 or int64, C-contiguous, on the
    host (NumPy, CPU tensors) or on the current CUDA device (torch/CuPy/JAX arrays through
    DLPack); nothing is copied on the Python side. Every input is validated: a malformed graph
    raises :class:`dfgnn.GraphError` (a ValueError) with the library's message.

    Options: ``add_self_loops`` removes existing self-loops and appends one per node (PyG's
    ``add_self_loops``); ``reject_duplicates`` makes a repeated edge an error (by default
    duplicates stay and each counts in the softmax, as in PyG). Device arrays are validated and
    compressed on the GPU, on ``stream`` (default: torch's current stream for torch tensors, else
    the legacy default stream), and nothing edge-sized comes to the host.
    """

    __slots__ = ("_h", "_fingerprint", "_device", "_key", "__weakref__")

    def __init__(self, edge_index, num_nodes=None, *, add_self_loops=False, reject_duplicates=False, context=None,
                 stream=None):
        edge_index = _as_index_array(edge_index, "edge_index")
        num_nodes = _infer_num_nodes(edge_index) if num_nodes is None else as_int(num_nodes, "num_nodes")
        self._init(_dfgnn.graph_coo(_context(context), edge_index, num_nodes, bool(add_self_loops),
                                    bool(reject_duplicates), _stream_handle((edge_index,), stream)))

    def _init(self, handle):
        self._h = handle
        self._fingerprint = None
        self._device = None  # CUDA device index of the device copy, once a GPU op used it
        self._key = next(_keys)
        _by_key[self._key] = self

    @classmethod
    def _wrap(cls, handle):
        g = cls.__new__(cls)
        g._init(handle)
        return g

    @classmethod
    def from_edge_index(cls, edge_index, num_nodes=None, **options):
        """Same as ``Graph(edge_index, num_nodes, ...)``."""
        return cls(edge_index, num_nodes, **options)

    @classmethod
    def from_csr(cls, row_ptr, col_idx, *, add_self_loops=False, reject_duplicates=False, context=None, stream=None):
        """CSR by destination: ``col_idx[row_ptr[i]:row_ptr[i+1]]`` are the sources of node i's
        in-edges (N = len(row_ptr) - 1). Both arrays have the same dtype (int32 or int64) and
        live in the same memory."""
        row_ptr = _as_index_array(row_ptr, "row_ptr")
        col_idx = _as_index_array(col_idx, "col_idx")
        return cls._wrap(_dfgnn.graph_csr(_context(context), row_ptr, col_idx, bool(add_self_loops),
                                          bool(reject_duplicates), _stream_handle((row_ptr, col_idx), stream)))

    @classmethod
    def from_file(cls, path, *, add_self_loops=False, reject_duplicates=False, context=None):
        """Reads dfgnn's edge-list format (``# nodes N edges E`` header, then ``src dst`` lines,
        optionally ``.gz``), Matrix Market ``.mtx`` (entry (r, c) is the edge r -> c), or a
        directory holding ``edges.txt[.gz]``. A missing or unreadable file raises
        :class:`dfgnn.IoError` (an OSError), a malformed one :class:`dfgnn.ParseError`."""
        return cls._wrap(_dfgnn.graph_from_file(_context(context), os.fsdecode(path), bool(add_self_loops),
                                                bool(reject_duplicates)))

    @classmethod
    def rmat(cls, scale, edges, a=0.57, b=0.19, c=0.19, seed=1, *, dedup=True, self_loops=False, permute=False,
             symmetrize=False, add_self_loops=False, reject_duplicates=False, context=None):
        """Seeded R-MAT power-law graph: 2**scale nodes, ``edges`` sampled edges with quadrant
        probabilities a, b, c (d = 1 - a - b - c). ``dedup`` drops repeated pairs, ``self_loops``
        keeps sampled i -> i edges, ``permute`` relabels node ids randomly, ``symmetrize`` adds
        every reverse edge. Deterministic per seed."""
        flags = ((_dfgnn.RMAT_DEDUPLICATE if dedup else 0) | (0 if self_loops else _dfgnn.RMAT_NO_SELF_LOOPS) |
                 (_dfgnn.RMAT_PERMUTE_IDS if permute else 0) | (_dfgnn.RMAT_SYMMETRIZE if symmetrize else 0))
        return cls._wrap(_dfgnn.graph_rmat(_context(context), as_int(scale, "scale", INT32), as_int(edges, "edges"),
                                           float(a), float(b), float(c), flags, as_int(seed, "seed", UINT64),
                                           bool(add_self_loops), bool(reject_duplicates)))

    @classmethod
    def planted_hubs(cls, num_nodes, avg_degree, num_hubs, hub_degree, seed=1, *, add_self_loops=False,
                     reject_duplicates=False, context=None):
        """A uniform random graph (each node receives ``avg_degree`` in-edges) with ``num_hubs``
        hubs (nodes 0..num_hubs-1) that each receive and send ``hub_degree`` edges."""
        return cls._wrap(_dfgnn.graph_planted_hubs(
            _context(context), as_int(num_nodes, "num_nodes"), as_int(avg_degree, "avg_degree", INT32),
            as_int(num_hubs, "num_hubs", INT32), as_int(hub_degree, "hub_degree"), as_int(seed, "seed", UINT64),
            bool(add_self_loops), bool(reject_duplicates)))

    # ------------------------------------------------------------ structure

    @property
    def num_nodes(self):
        """Node count N (rows of the CSR)."""
        return self._h.size()[0]

    @property
    def num_edges(self):
        """Edge count after self-loop handling."""
        return self._h.size()[1]

    @property
    def key(self):
        """A process-unique integer naming this graph (never reused after it is freed); see
        :mod:`dfgnn.torch`'s custom ops, which take graphs by key."""
        return self._key

    @property
    def context(self):
        """The :class:`dfgnn.Context` the graph was built in (its ops run in it by default)."""
        return self._h.context()

    def csr(self):
        """``(row_ptr [N+1], col_idx [E], edge_id [E])``: read-only int32 NumPy views of the host
        CSR (no copy; they keep the graph alive). ``edge_id`` maps CSR positions to input edge
        ids: positions in edge_index; with ``add_self_loops``, positions among the input edges that
        are not self-loops (as after PyG's ``remove_self_loops``), then the added loop of node i as
        id (kept edges) + i, the order of PyG's ``add_self_loops``."""
        return self._h.csr()

    def csc(self):
        """``(col_ptr [N+1], row_idx [E], csr_pos [E])``: the transpose, read-only int32 views.
        Column j lists the destinations i of j's out-edges; ``csr_pos`` gives each edge's
        position in the CSR arrays."""
        return self._h.csc()

    def edge_index(self):
        """The graph as an int64 ``[2, E]`` edge_index in CSR order (a new NumPy array)."""
        row_ptr, col_idx, _ = self.csr()
        dst = np.repeat(np.arange(self.num_nodes, dtype=np.int64), np.diff(row_ptr))
        return np.stack([col_idx.astype(np.int64), dst])

    def in_degrees(self):
        """In-degree of every node (the lengths of the CSR rows), an int32 NumPy array [N]."""
        return np.diff(self.csr()[0])

    # ------------------------------------------------------------ fingerprint

    @property
    def fingerprint(self):
        """The degree fingerprint as a dict (a fresh copy; computed once per graph)."""
        if self._fingerprint is None:
            self._fingerprint = self._h.fingerprint()
        fp = dict(self._fingerprint)
        fp["hist"] = list(fp["hist"])
        fp["hub_rows"] = list(fp["hub_rows"])
        return fp

    @property
    def fingerprint_json(self):
        """The fingerprint's stable, versioned JSON text (fixed key order)."""
        return _dfgnn.fingerprint_serialize(self.fingerprint)

    @property
    def bucket_key(self):
        """Coarse key such as ``"n2^11.e2^13.max2^7.cv1"``; equal keys mark graphs whose tuning
        results are candidates for reuse."""
        return _dfgnn.fingerprint_bucket_key(self.fingerprint)

    def distance(self, other):
        """Fingerprint distance (>= 0, symmetric, 0 when identical) to another Graph, fingerprint
        dict or fingerprint JSON text."""
        return fingerprint_distance(self, other)

    def __repr__(self):
        return f"dfgnn.Graph(num_nodes={self.num_nodes}, num_edges={self.num_edges})"


def _fingerprint_of(x):
    if isinstance(x, Graph):
        return x.fingerprint
    if isinstance(x, str):
        return _dfgnn.fingerprint_parse(x)
    if isinstance(x, dict):
        return x
    raise invalid_argument(f"expected a dfgnn.Graph, fingerprint dict or JSON text, got {type(x).__name__}",
                           kind="type")


def parse_fingerprint(text):
    """Parses a fingerprint's JSON text (:attr:`Graph.fingerprint_json`) into a dict; an unknown
    version or malformed text raises :class:`dfgnn.ParseError`."""
    return _dfgnn.fingerprint_parse(text)


def fingerprint_to_json(fingerprint):
    """The JSON text of a fingerprint (a dict, Graph or JSON text)."""
    return _dfgnn.fingerprint_serialize(_fingerprint_of(fingerprint))


def bucket_key(fingerprint):
    """The bucket key of a fingerprint (a dict, Graph or JSON text)."""
    return _dfgnn.fingerprint_bucket_key(_fingerprint_of(fingerprint))


def fingerprint_distance(a, b):
    """Distance between two fingerprints, each a Graph, a dict or JSON text."""
    return _dfgnn.fingerprint_distance(_fingerprint_of(a), _fingerprint_of(b))

