"""Low-level GPU ops over DLPack arrays (torch, CuPy, JAX, ... CUDA arrays; no framework needed).

These call dfgnnForward / dfgnnBackward directly: the caller allocates every output and passes
the CUDA stream to run on. Kernels run asynchronously on that stream.

- Features (``h``, ``h_dst``, ``q``, ``k``, ``v``, ``out``, ``grad_out`` and their gradients) are
  [N, H, D] (or [N, H*D]) arrays of the op dtype: float32, float16 or bfloat16 (inferred from the
  first feature input unless ``dtype`` is given).
- Attention vectors (``att_src``, ``att_dst``: [H, D]), ``beta`` ([1]), ``lse`` ([N, H]) and
  their gradients are float32.
- Every array is C-contiguous and on the same CUDA device, which must be the *current* CUDA device
  of the calling thread (dfgnn keeps one device copy of each graph, made on its first GPU use; a
  graph used on one device cannot be used on another).
- ``workspace``: device scratch of at least :func:`workspace_size` bytes (often 0). Pass a CUDA
  array (any dtype, e.g. ``torch.empty(n, dtype=torch.uint8, device="cuda")``), or an
  ``allocator(nbytes) -> CUDA array`` that is called only when scratch is needed. The scratch
  must stay valid until the stream has run the op (stream-ordered allocators such as PyTorch's
  caching allocator on the same stream satisfy this).
- Arrays are imported through ``__dlpack__()`` without a stream argument. PyTorch then makes the
  legacy default stream wait on its current stream (harmless, but not allowed while capturing a
  CUDA graph); :mod:`dfgnn.torch` avoids that by exporting with ``stream=-1``.
"""

from . import _dfgnn
from ._errors import invalid_argument
from ._graph import Graph
from ._op import (MODEL_INPUTS, Direction, as_direction, check_input_names, infer_heads_dim, make_op)

_PASSES = {"forward": 0, "backward_row": 1, "backward_col": 2}


def _context(context):
    return _dfgnn.default_context() if context is None else context


def _graph_handle(graph):
    if not isinstance(graph, Graph):
        raise invalid_argument(f"graph must be a dfgnn.Graph, got {type(graph).__name__}", kind="type")
    return graph._h


def _first_feature(name, inputs):
    return next(inputs[k] for k in MODEL_INPUTS[name] if k in inputs)


def _bind_device(graph, array, what):
    """Remembers the CUDA device of a graph's first GPU op and rejects any other later."""
    info = _dfgnn.array_info(array)
    if not info["is_cuda"]:
        raise invalid_argument(f"{what} is on {info['device']}, but GPU ops take CUDA arrays "
                               "(use dfgnn.reference_forward / reference_backward for float64 host arrays)",
                               kind="device")
    device = info["device_id"]
    if graph._device is not None and graph._device != device:
        raise invalid_argument(f"this graph's device copy lives on cuda:{graph._device}, but {what} is on "
                               f"cuda:{device}; build one dfgnn.Graph per device", kind="device")
    return info


def _bound(graph, info):
    if graph._device is None:
        graph._device = info["device_id"]


def _op_for(graph, model, inputs, heads, dim, dtype, negative_slope, scale, deterministic, dropout, dropout_seed):
    name = check_input_names(model, inputs)
    first = _first_feature(name, inputs)
    info = _bind_device(graph, first, f"inputs[{next(k for k in MODEL_INPUTS[name] if k in inputs)!r}]")
    heads, dim = infer_heads_dim(name, inputs, heads, dim)
    o = make_op(name, dtype if dtype is not None else info["dtype"], heads, dim, negative_slope=negative_slope,
                scale=scale, deterministic=deterministic, dropout=dropout, dropout_seed=dropout_seed,
                edge_features="edge" in inputs)
    return o, info


def op(model, dtype="float32", heads=1, dim=1, *, negative_slope=None, scale=None, deterministic=None,
       dropout=0.0, dropout_seed=0, edge_features=False):
    """A :class:`dfgnn.Op` (PyG's defaults unless overridden), for :func:`workspace_size`,
    :func:`schedule`, :func:`list_schedules` and :func:`compile`. ``deterministic`` is deprecated
    and ignored (every kernel is deterministic)."""
    return make_op(model, dtype, heads, dim, negative_slope=negative_slope, scale=scale, deterministic=deterministic,
                   dropout=dropout, dropout_seed=dropout_seed, edge_features=edge_features)


def workspace_size(graph, op, direction="forward", schedule=None, *, context=None):
    """Bytes of device scratch an op direction needs on this graph (with the schedule that would
    run, or the forced ``schedule``). Needs no GPU."""
    return _dfgnn.workspace_size(_context(context), _graph_handle(graph), op, as_direction(direction), schedule)


def _workspace(ctx, graph, op, direction, schedule, workspace, allocator):
    if workspace is not None:
        return workspace
    nbytes = _dfgnn.workspace_size(ctx, graph._h, op, direction, schedule)
    if nbytes == 0:
        return None
    if allocator is None:
        raise invalid_argument(f"this {direction.name.lower()} needs {nbytes} bytes of device workspace: pass "
                               "workspace=<CUDA array of at least that many bytes> or allocator=callable(nbytes)")
    return allocator(nbytes)


def forward(graph, model, inputs, out, lse=None, *, heads=None, dim=None, dtype=None, negative_slope=0.2,
            scale=None, deterministic=None, dropout=0.0, dropout_seed=0, stream=0, workspace=None, allocator=None,
            schedule=None, context=None):
    """Fused forward: writes ``out`` [N, H, D] (op dtype) and, if given, ``lse`` [N, H] (float32,
    the per-(node, head) log-sum-exp the backward needs).

    ``dropout``, ``dropout_seed``: attention dropout (see :func:`dfgnn.op`); the mask is a function
    of the seed, so pass a new seed per training step and the same values to :func:`backward`.

    ``model``/``inputs`` as in :func:`dfgnn.reference_forward`. ``stream``: the cudaStream_t as an
    integer (0 = legacy default stream; with torch, ``torch.cuda.current_stream().cuda_stream``).
    ``schedule`` forces a schedule (e.g. ``"subwarp:lanes=32,groups=8,vec=4"``) instead of
    dispatch. Returns the workspace array used (or None)."""
    ctx = _context(context)
    o, info = _op_for(graph, model, inputs, heads, dim, dtype, negative_slope, scale, deterministic, dropout,
                      dropout_seed)
    ws = _workspace(ctx, graph, o, Direction.FORWARD, schedule, workspace, allocator)
    _dfgnn.forward(ctx, graph._h, o, dict(inputs), out, lse, int(stream), ws, schedule)
    _bound(graph, info)
    return ws


def backward(graph, model, inputs, out, lse, grad_out, grads, *, heads=None, dim=None, dtype=None,
             negative_slope=0.2, scale=None, deterministic=None, dropout=0.0, dropout_seed=0, stream=0,
             workspace=None, allocator=None, schedule=None, context=None):
    """Fused backward: given the forward's ``inputs``, ``out`` and ``lse`` and d(loss)/d(out)
    (``grad_out``), writes (does not add to) the gradient of every input into ``grads``, a dict
    with the same keys as ``inputs`` (features in the op dtype, attention vectors and beta in
    float32). ``dropout`` and ``dropout_seed`` must be the forward's (the mask is regenerated from
    them). ``schedule``: ``"ROW|COL"`` or one schedule for both passes. Returns the workspace
    array used (or None)."""
    ctx = _context(context)
    o, info = _op_for(graph, model, inputs, heads, dim, dtype, negative_slope, scale, deterministic, dropout,
                      dropout_seed)
    ws = _workspace(ctx, graph, o, Direction.BACKWARD, schedule, workspace, allocator)
    _dfgnn.backward(ctx, graph._h, o, dict(inputs), out, lse, grad_out, dict(grads), int(stream), ws, schedule)
    _bound(graph, info)
    return ws


def schedule(graph, op, direction="forward", schedule=None, *, context=None):
    """The schedule text that would run (dispatch, or ``schedule`` after validation). Needs no GPU."""
    return _dfgnn.get_schedule(_context(context), _graph_handle(graph), op, as_direction(direction), schedule)


def list_schedules(graph, op, pass_="forward", *, context=None):
    """Every candidate schedule of one pass ("forward", "backward_row", "backward_col" or 0/1/2)."""
    p = _PASSES.get(pass_, pass_) if isinstance(pass_, str) else int(pass_)
    if not isinstance(p, int):
        raise invalid_argument(f"pass_ must be one of {', '.join(_PASSES)} or 0, 1, 2, got {pass_!r}")
    text = _dfgnn.list_schedules(_context(context), _graph_handle(graph), op, p)
    return [line for line in text.splitlines() if line]


def compile(op, direction="forward", schedule=None, arch=90, *, graph=None, context=None):
    """Compiles (NVRTC, no GPU needed) the kernels of an op direction for compute capability
    ``arch`` into the context's module cache. Without a graph a ``schedule`` is required."""
    g = None if graph is None else _graph_handle(graph)
    _dfgnn.compile(_context(context), g, op, as_direction(direction), schedule, int(arch))


def cache_counters(context=None):
    """The context's module cache counters: {"compiles", "hits", "loads"}."""
    return _context(context).cache_counters()
