"""ctypes bindings of dfgnn's C API (runtime/include/dfgnn/dfgnn.h).

Standard library only: importing this module needs neither torch nor numpy, and loading the library
needs no GPU (host functions work everywhere; GPU entry points then fail with DFGNN_STATUS_NO_DEVICE).

Pointers are passed as plain integers (e.g. torch.Tensor.data_ptr()) or None for NULL. Every call's
status is checked; a failure raises DfgnnError (a RuntimeError) carrying dfgnnGetStatusString and
dfgnnGetLastErrorMessage.
"""

import ctypes
import os
from ctypes import (POINTER, Structure, byref, c_char_p, c_double, c_float, c_int, c_int32, c_int64,
                    c_size_t, c_uint32, c_uint64, c_void_p)

# ---------------------------------------------------------------- enums (values from dfgnn.h)

STATUS_NAMES = [
    "DFGNN_STATUS_SUCCESS", "DFGNN_STATUS_INVALID_ARGUMENT", "DFGNN_STATUS_NULL_POINTER",
    "DFGNN_STATUS_NEGATIVE_SIZE", "DFGNN_STATUS_INDEX_OVERFLOW", "DFGNN_STATUS_ROW_PTR_START",
    "DFGNN_STATUS_ROW_PTR_DECREASING", "DFGNN_STATUS_ROW_PTR_END", "DFGNN_STATUS_INDEX_OUT_OF_RANGE",
    "DFGNN_STATUS_DUPLICATE_EDGE", "DFGNN_STATUS_OUT_OF_MEMORY", "DFGNN_STATUS_NO_DEVICE",
    "DFGNN_STATUS_CUDA_ERROR", "DFGNN_STATUS_COMPILE_ERROR", "DFGNN_STATUS_NOT_SUPPORTED",
    "DFGNN_STATUS_IO_ERROR", "DFGNN_STATUS_PARSE_ERROR", "DFGNN_STATUS_DATABASE_ERROR",
    "DFGNN_STATUS_INTERNAL_ERROR",
]
STATUS_SUCCESS = 0
STATUS_NO_DEVICE = 11

INDEX_INT32, INDEX_INT64 = 0, 1
MEMORY_HOST, MEMORY_DEVICE = 0, 1
DUPLICATES_KEEP, DUPLICATES_REJECT = 0, 1

RMAT_DEDUPLICATE = 1
RMAT_NO_SELF_LOOPS = 2
RMAT_PERMUTE_IDS = 4
RMAT_SYMMETRIZE = 8

MODEL_GAT, MODEL_GATV2, MODEL_TRANSFORMER, MODEL_AGNN = 0, 1, 2, 3
MODELS = {"gat": MODEL_GAT, "gatv2": MODEL_GATV2, "transformer": MODEL_TRANSFORMER, "agnn": MODEL_AGNN}

DTYPE_FLOAT32, DTYPE_FLOAT16, DTYPE_BFLOAT16, DTYPE_FLOAT64 = 0, 1, 2, 3
DTYPES = {"float32": DTYPE_FLOAT32, "float16": DTYPE_FLOAT16, "bfloat16": DTYPE_BFLOAT16,
          "float64": DTYPE_FLOAT64}

FORWARD, BACKWARD = 0, 1

FINGERPRINT_HIST_BINS = 24
FINGERPRINT_HUB_THRESHOLDS = 10

# The eight slots of dfgnn_inputs_t / dfgnn_grads_t, in header order.
SLOTS = ("h", "h_dst", "q", "k", "v", "att_src", "att_dst", "beta")
# Slots each model reads (dfgnn.h, dfgnn_inputs_t comment); the others must stay NULL.
MODEL_SLOTS = {
    MODEL_GAT: ("h", "att_src", "att_dst"),
    MODEL_GATV2: ("h", "h_dst", "att_src"),
    MODEL_TRANSFORMER: ("q", "k", "v"),
    MODEL_AGNN: ("h", "beta"),
}
# Slots holding [N, H, D] features (op dtype); the rest are float32 parameters ([H, D] or [1]).
FEATURE_SLOTS = ("h", "h_dst", "q", "k", "v")


# ---------------------------------------------------------------- structs (mirror dfgnn.h exactly)

class GraphOptions(Structure):
    """dfgnn_graph_options_t"""
    _fields_ = [("add_self_loops", c_int), ("duplicates", c_int)]


class Fingerprint(Structure):
    """dfgnn_fingerprint_t"""
    _fields_ = [
        ("version", c_int32),
        ("num_nodes", c_int64),
        ("num_edges", c_int64),
        ("mean_degree", c_double),
        ("max_degree", c_int64),
        ("p50", c_double), ("p90", c_double), ("p99", c_double), ("p999", c_double),
        ("cv", c_double),
        ("gini", c_double),
        ("hist", c_double * FINGERPRINT_HIST_BINS),
        ("top1pct_edge_share", c_double),
        ("hub_rows", c_int64 * FINGERPRINT_HUB_THRESHOLDS),
    ]


class Op(Structure):
    """dfgnn_op_t"""
    _fields_ = [
        ("model", c_int),
        ("dtype", c_int),
        ("heads", c_int32),
        ("dim", c_int32),
        ("negative_slope", c_float),
        ("scale", c_float),
        ("dropout", c_float),
        ("dropout_seed", c_uint64),
        ("edge_features", c_int32),
    ]


class Inputs(Structure):
    """dfgnn_inputs_t (8 const void*)"""
    _fields_ = [(name, c_void_p) for name in SLOTS]


class Grads(Structure):
    """dfgnn_grads_t (8 void*)"""
    _fields_ = [(name, c_void_p) for name in SLOTS]


class Launch(Structure):
    """dfgnn_launch_t"""
    _fields_ = [
        ("stream", c_void_p),
        ("workspace", c_void_p),
        ("workspace_bytes", c_size_t),
        ("schedule", c_char_p),
    ]


class DfgnnError(RuntimeError):
    def __init__(self, function, status, status_string, message):
        self.function = function
        self.status = status
        self.status_string = status_string
        self.message = message
        name = STATUS_NAMES[status] if 0 <= status < len(STATUS_NAMES) else f"status {status}"
        super().__init__(f"{function} failed: {name} ({status_string}): {message}")


def _slots(struct_type, pointers):
    """Builds Inputs/Grads from a dict slot -> pointer (int or None); unknown keys are an error."""
    unknown = set(pointers) - set(SLOTS)
    if unknown:
        raise ValueError(f"unknown slots {sorted(unknown)}; valid: {SLOTS}")
    s = struct_type()
    for name in SLOTS:
        p = pointers.get(name)
        setattr(s, name, None if p is None else int(p))
    return s


def _enc(text):
    return None if text is None else text.encode()


PP_INT32 = POINTER(POINTER(c_int32))


class Library:
    """The loaded libdfgnn with typed entry points."""

    # name: (restype, argtypes). restype c_int = dfgnn_status_t (checked).
    _SIGNATURES = {
        "dfgnnGetStatusString": (c_char_p, [c_int]),
        "dfgnnGetLastErrorMessage": (c_char_p, []),
        "dfgnnGetVersion": (c_char_p, []),
        "dfgnnCreate": (c_int, [POINTER(c_void_p)]),
        "dfgnnDestroy": (c_int, [c_void_p]),
        "dfgnnHasDevice": (c_int, [c_void_p, POINTER(c_int), POINTER(c_char_p)]),
        "dfgnnGraphDefaultOptions": (GraphOptions, []),
        "dfgnnGraphCreateCsr": (c_int, [c_void_p, c_int64, c_int64, c_void_p, c_void_p, c_int, c_int,
                                        POINTER(GraphOptions), POINTER(c_void_p)]),
        "dfgnnGraphCreateCoo": (c_int, [c_void_p, c_int64, c_int64, c_void_p, c_int, c_int,
                                        POINTER(GraphOptions), POINTER(c_void_p)]),
        "dfgnnGraphCreateFromFile": (c_int, [c_void_p, c_char_p, POINTER(GraphOptions), POINTER(c_void_p)]),
        "dfgnnGraphCreateRmat": (c_int, [c_void_p, c_int32, c_int64, c_double, c_double, c_double, c_uint32,
                                         c_uint64, POINTER(GraphOptions), POINTER(c_void_p)]),
        "dfgnnGraphCreatePlantedHubs": (c_int, [c_void_p, c_int64, c_int32, c_int32, c_int64, c_uint64,
                                                POINTER(GraphOptions), POINTER(c_void_p)]),
        "dfgnnGraphDestroy": (c_int, [c_void_p]),
        "dfgnnGraphGetSize": (c_int, [c_void_p, POINTER(c_int64), POINTER(c_int64)]),
        "dfgnnGraphGetCsr": (c_int, [c_void_p, c_int, PP_INT32, PP_INT32, PP_INT32]),
        "dfgnnGraphGetCsc": (c_int, [c_void_p, c_int, PP_INT32, PP_INT32, PP_INT32]),
        "dfgnnGraphGetFingerprint": (c_int, [c_void_p, POINTER(Fingerprint)]),
        "dfgnnFingerprintSerialize": (c_int, [POINTER(Fingerprint), c_void_p, c_size_t, POINTER(c_size_t)]),
        "dfgnnFingerprintBucketKey": (c_int, [POINTER(Fingerprint), c_void_p, c_size_t, POINTER(c_size_t)]),
        "dfgnnOpDefault": (Op, [c_int, c_int, c_int32, c_int32]),
        "dfgnnReferenceForward": (c_int, [c_void_p, POINTER(Op), POINTER(Inputs), c_void_p, c_void_p]),
        "dfgnnReferenceBackward": (c_int, [c_void_p, POINTER(Op), POINTER(Inputs), c_void_p, POINTER(Grads)]),
        "dfgnnGetWorkspaceSize": (c_int, [c_void_p, c_void_p, POINTER(Op), c_int, c_char_p, POINTER(c_size_t)]),
        "dfgnnForward": (c_int, [c_void_p, c_void_p, POINTER(Op), POINTER(Inputs), c_void_p, c_void_p,
                                 POINTER(Launch)]),
        "dfgnnBackward": (c_int, [c_void_p, c_void_p, POINTER(Op), POINTER(Inputs), c_void_p, c_void_p, c_void_p,
                                  POINTER(Grads), POINTER(Launch)]),
        "dfgnnGetSchedule": (c_int, [c_void_p, c_void_p, POINTER(Op), c_int, c_char_p, c_void_p, c_size_t,
                                     POINTER(c_size_t)]),
        "dfgnnListSchedules": (c_int, [c_void_p, c_void_p, POINTER(Op), c_int, c_void_p, c_size_t,
                                       POINTER(c_size_t)]),
        "dfgnnCompile": (c_int, [c_void_p, c_void_p, POINTER(Op), c_int, c_char_p, c_int]),
        "dfgnnGetCacheCounters": (c_int, [c_void_p, POINTER(c_uint64), POINTER(c_uint64), POINTER(c_uint64)]),
    }

    def __init__(self, path):
        self.path = os.path.abspath(path)
        self._lib = ctypes.CDLL(self.path)
        for name, (restype, argtypes) in self._SIGNATURES.items():
            fn = getattr(self._lib, name)
            fn.restype = restype
            fn.argtypes = argtypes

    # -- errors

    def status_string(self, status):
        return self._lib.dfgnnGetStatusString(status).decode(errors="replace")

    def last_error(self):
        return self._lib.dfgnnGetLastErrorMessage().decode(errors="replace")

    def call(self, name, *args):
        """Calls a status-returning entry point; raises DfgnnError on failure."""
        status = getattr(self._lib, name)(*args)
        if status != STATUS_SUCCESS:
            raise DfgnnError(name, status, self.status_string(status), self.last_error())

    def version(self):
        return self._lib.dfgnnGetVersion().decode()

    # -- plain constructors of by-value structs

    def default_options(self, add_self_loops=False, reject_duplicates=False):
        o = self._lib.dfgnnGraphDefaultOptions()
        o.add_self_loops = 1 if add_self_loops else 0
        if reject_duplicates:
            o.duplicates = DUPLICATES_REJECT
        return o

    def op(self, model, dtype, heads, dim, negative_slope=None, scale=None):
        """dfgnnOpDefault(model, dtype, H, D) with optional overrides. model/dtype: enum or name."""
        model = MODELS[model] if isinstance(model, str) else int(model)
        dtype = DTYPES[dtype] if isinstance(dtype, str) else int(dtype)
        o = self._lib.dfgnnOpDefault(model, dtype, int(heads), int(dim))
        if negative_slope is not None:
            o.negative_slope = float(negative_slope)
        if scale is not None:
            o.scale = float(scale)
        return o

    def _text(self, fn, *args):
        """Size-query protocol: call with capacity 0, then with a buffer."""
        length = c_size_t(0)
        self.call(fn, *args, None, 0, byref(length))
        buf = ctypes.create_string_buffer(length.value + 1)
        self.call(fn, *args, buf, length.value + 1, byref(length))
        return buf.value.decode()


class Context:
    """dfgnn_context_t owner (use as a context manager or call close())."""

    def __init__(self, lib):
        self.lib = lib
        self.handle = c_void_p()
        lib.call("dfgnnCreate", byref(self.handle))

    def close(self):
        if self.handle:
            self.lib.call("dfgnnDestroy", self.handle)
            self.handle = c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def has_device(self):
        has = c_int(0)
        reason = c_char_p()
        self.lib.call("dfgnnHasDevice", self.handle, byref(has), byref(reason))
        return bool(has.value), (reason.value.decode(errors="replace") if reason.value else "")

    # -- graphs

    def graph_coo(self, num_nodes, num_edges, edge_index_ptr, index_type=INDEX_INT64, memory=MEMORY_DEVICE,
                  options=None):
        g = c_void_p()
        opts = options if options is not None else self.lib.default_options()
        self.lib.call("dfgnnGraphCreateCoo", self.handle, int(num_nodes), int(num_edges), edge_index_ptr,
                      int(index_type), int(memory), byref(opts), byref(g))
        return Graph(self.lib, g)

    def graph_csr(self, num_nodes, nnz, row_ptr_ptr, col_idx_ptr, index_type=INDEX_INT64, memory=MEMORY_DEVICE,
                  options=None):
        g = c_void_p()
        opts = options if options is not None else self.lib.default_options()
        self.lib.call("dfgnnGraphCreateCsr", self.handle, int(num_nodes), int(nnz), row_ptr_ptr, col_idx_ptr,
                      int(index_type), int(memory), byref(opts), byref(g))
        return Graph(self.lib, g)

    def graph_file(self, path, options=None):
        g = c_void_p()
        opts = options if options is not None else self.lib.default_options()
        self.lib.call("dfgnnGraphCreateFromFile", self.handle, _enc(str(path)), byref(opts), byref(g))
        return Graph(self.lib, g)

    def graph_rmat(self, scale, num_edges, a=0.57, b=0.19, c=0.19, flags=RMAT_DEDUPLICATE | RMAT_NO_SELF_LOOPS,
                   seed=1, options=None):
        g = c_void_p()
        opts = options if options is not None else self.lib.default_options()
        self.lib.call("dfgnnGraphCreateRmat", self.handle, int(scale), int(num_edges), float(a), float(b), float(c),
                      int(flags), int(seed), byref(opts), byref(g))
        return Graph(self.lib, g)

    def graph_planted_hubs(self, num_nodes, avg_degree, num_hubs, hub_degree, seed=1, options=None):
        g = c_void_p()
        opts = options if options is not None else self.lib.default_options()
        self.lib.call("dfgnnGraphCreatePlantedHubs", self.handle, int(num_nodes), int(avg_degree), int(num_hubs),
                      int(hub_degree), int(seed), byref(opts), byref(g))
        return Graph(self.lib, g)

    # -- ops

    def workspace_size(self, graph, op, direction, schedule=None):
        n = c_size_t(0)
        self.lib.call("dfgnnGetWorkspaceSize", self.handle, graph.handle, byref(op), int(direction), _enc(schedule),
                      byref(n))
        return n.value

    def forward(self, graph, op, inputs, out_ptr, lse_ptr, stream=None, workspace_ptr=None, workspace_bytes=0,
                schedule=None):
        """dfgnnForward. inputs: dict slot -> device pointer."""
        launch = Launch(stream, workspace_ptr, int(workspace_bytes), _enc(schedule))
        ins = _slots(Inputs, inputs)
        self.lib.call("dfgnnForward", self.handle, graph.handle, byref(op), byref(ins), out_ptr, lse_ptr,
                      byref(launch))

    def backward(self, graph, op, inputs, out_ptr, lse_ptr, grad_out_ptr, grads, stream=None, workspace_ptr=None,
                 workspace_bytes=0, schedule=None):
        """dfgnnBackward. inputs, grads: dicts slot -> device pointer."""
        launch = Launch(stream, workspace_ptr, int(workspace_bytes), _enc(schedule))
        ins = _slots(Inputs, inputs)
        gs = _slots(Grads, grads)
        self.lib.call("dfgnnBackward", self.handle, graph.handle, byref(op), byref(ins), out_ptr, lse_ptr,
                      grad_out_ptr, byref(gs), byref(launch))

    def reference_forward(self, graph, op, inputs, out_ptr, lse_ptr=None):
        """dfgnnReferenceForward on host float64 arrays (op.dtype must be float64)."""
        ins = _slots(Inputs, inputs)
        self.lib.call("dfgnnReferenceForward", graph.handle, byref(op), byref(ins), out_ptr, lse_ptr)

    def reference_backward(self, graph, op, inputs, grad_out_ptr, grads):
        ins = _slots(Inputs, inputs)
        gs = _slots(Grads, grads)
        self.lib.call("dfgnnReferenceBackward", graph.handle, byref(op), byref(ins), grad_out_ptr, byref(gs))

    def schedule(self, graph, op, direction, schedule=None):
        return self.lib._text("dfgnnGetSchedule", self.handle, graph.handle, byref(op), int(direction),
                              _enc(schedule))

    def list_schedules(self, graph, op, pass_index):
        text = self.lib._text("dfgnnListSchedules", self.handle, graph.handle, byref(op), int(pass_index))
        return [line for line in text.splitlines() if line]

    def compile(self, graph, op, direction, schedule, arch):
        self.lib.call("dfgnnCompile", self.handle, graph.handle if graph is not None else None, byref(op),
                      int(direction), _enc(schedule), int(arch))

    def cache_counters(self):
        compiles, hits, loads = c_uint64(0), c_uint64(0), c_uint64(0)
        self.lib.call("dfgnnGetCacheCounters", self.handle, byref(compiles), byref(hits), byref(loads))
        return {"compiles": compiles.value, "hits": hits.value, "loads": loads.value}


class Graph:
    """dfgnn_graph_t owner."""

    def __init__(self, lib, handle):
        self.lib = lib
        self.handle = handle

    def close(self):
        if self.handle:
            self.lib.call("dfgnnGraphDestroy", self.handle)
            self.handle = c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def size(self):
        n, e = c_int64(0), c_int64(0)
        self.lib.call("dfgnnGraphGetSize", self.handle, byref(n), byref(e))
        return n.value, e.value

    def _compressed(self, fn, memory):
        a, b, c = POINTER(c_int32)(), POINTER(c_int32)(), POINTER(c_int32)()
        self.lib.call(fn, self.handle, int(memory), byref(a), byref(b), byref(c))
        return a, b, c

    def csr(self, memory=MEMORY_HOST):
        """Borrowed int32 pointers (row_ptr [N+1], col_idx [E], edge_id [E]); valid while the graph lives."""
        return self._compressed("dfgnnGraphGetCsr", memory)

    def csc(self, memory=MEMORY_HOST):
        """Borrowed int32 pointers (col_ptr [N+1], row_idx [E], csr_pos [E])."""
        return self._compressed("dfgnnGraphGetCsc", memory)

    def csr_lists(self):
        """Host CSR copied into Python lists (row_ptr, col_idx, edge_id). For small graphs and tests."""
        n, e = self.size()
        rp, ci, eid = self.csr(MEMORY_HOST)
        return rp[:n + 1], (ci[:e] if e else []), (eid[:e] if e else [])

    def fingerprint(self):
        f = Fingerprint()
        self.lib.call("dfgnnGraphGetFingerprint", self.handle, byref(f))
        return f

    def fingerprint_json(self):
        f = self.fingerprint()
        return self.lib._text("dfgnnFingerprintSerialize", byref(f))

    def bucket_key(self):
        f = self.fingerprint()
        return self.lib._text("dfgnnFingerprintBucketKey", byref(f))


def load(path):
    """Loads libdfgnn from path (raises OSError if it cannot be loaded)."""
    return Library(path)
