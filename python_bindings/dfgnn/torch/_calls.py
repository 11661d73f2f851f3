"""The lean CUDA call path of dfgnn.torch's ops (and the CPU float64 reference path): _run_forward and
_run_backward run one op on dicts of named input tensors, for both the autograd Functions and the
custom ops."""

import atexit
import weakref

import torch

from .. import _dfgnn
from .._errors import invalid_argument
from .._op import Direction, check_dropout_seed, make_op
from . import _native
from ._graphs import _check_graph, _dl
from ._spec import SPECS

_GPU_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# The lean CUDA call path. A call looks up the prepared launches (_Prepared) of its graph, op
# configuration, schedule and kind of arguments (each tensor's shape, dtype and device), allocates
# out and lse through torch's caching allocator and launches with raw pointers (Tensor.data_ptr())
# and the raw stream: no make_op, no workspace size query, no DLPack capsules, no binding-side
# checks after the first call. The first call of a kind builds the _dfgnn.Launch, which validates
# that call's arrays exactly as _dfgnn.forward / backward do (same errors), and queries the workspace
# size once; a kind that failed validation is not cached, so it fails the same way every time.
# Contiguity, the one property the key does not hold, is ensured on every call (_contiguous).
_launches = weakref.WeakKeyDictionary()  # Graph -> {key: _Prepared}, dropped with the Graph
_MAX_PTRS = _dfgnn.MAX_MODEL_INPUTS  # pointers a Launch call takes per input set: the model's inputs, then edge
_NONES = (None,) * _MAX_PTRS  # the native op's unused input arguments


@atexit.register
def _release_prepared():
    """Drops the prepared launches at interpreter exit (registered after dfgnn's own release, so it
    runs first): their native Prepareds hold graph references, which are given back here, while the
    library is loaded, not in torch's teardown. (Autograd nodes still pending keep theirs.)"""
    _launches.clear()


class _Prepared:
    """The launches of one (graph, op configuration, schedule, kind of arguments): the op, and the
    forward and (made at the first backward) backward _dfgnn.Launch."""
    __slots__ = ("op", "schedule", "device", "out_shape", "lse_shape", "forward", "backward", "native")

    def __init__(self, op, schedule, device, out_shape):
        self.op, self.schedule, self.device, self.out_shape = op, schedule, device, out_shape
        self.lse_shape = out_shape[:2]
        self.forward = self.backward = None
        self.native = None  # (torch.classes.dfgnn_native.Prepared, its address), made at the first native call

    def workspace(self, nbytes):
        """The device scratch of one call, from torch's caching allocator on the current stream: the
        Launch asks for it at each call (about a microsecond), and once more, larger, when dispatch
        has chosen a schedule with a larger workspace since (_prepared_call.hpp). Not cached across
        calls: torch.compile's CUDA graph trees run warm-up calls with every allocation going to
        their private pool, and a cached buffer made there would outlive the warm-up untracked
        (they refuse that), while a buffer captured in one CUDA graph must not be shared with eager
        calls either."""
        return torch.empty(nbytes, dtype=torch.uint8, device=self.device)


def _launch_key(model, option_values, schedule, tensors):
    """The cache key of a kind, for both call paths: the model, the schedule, the op's option values
    (ModelSpec.params' order: the model's options, then dropout) and each tensor's shape, dtype and
    device."""
    return (model, schedule, tuple(option_values), tuple([(t.shape, t.dtype, t.get_device()) for t in tensors]))


def _new_prepared(model, g, first, params, schedule, edge_features):
    """A new kind's _Prepared: its op (make_op checks the options) for features like first."""
    op = make_op(model, str(first.dtype), first.shape[1], first.shape[2], edge_features=edge_features, **params)
    return _Prepared(op, schedule, first.get_device(), (g.num_nodes, first.shape[1], first.shape[2]))


def _pointers(tensors):
    ptrs = [t.data_ptr() for t in tensors]
    return ptrs + [0] * (_MAX_PTRS - len(ptrs))


def _seed_args(seed):
    """(int seed, device pointer) for a Launch call: a CUDA seed tensor is read by the kernels."""
    if isinstance(seed, torch.Tensor):
        return 0, seed.data_ptr()
    return seed, 0


class _OnDevice:
    """torch.cuda.device(index) only when index is not the current device (entering one costs
    several microseconds)."""
    __slots__ = ("index", "ctx")

    def __init__(self, index):
        self.index, self.ctx = index, None

    def __enter__(self):
        if torch._C._cuda_getDevice() != self.index:
            self.ctx = torch.cuda.device(self.index)
            self.ctx.__enter__()
        return self

    def __exit__(self, *exc):
        return False if self.ctx is None else self.ctx.__exit__(*exc)


def _cuda_forward(g, model, inputs, params, schedule, seed, first):
    tensors = tuple(inputs.values())
    key = _launch_key(model, params.values(), schedule, tensors)
    cache = _launches.get(g)
    prep = None if cache is None else cache.get(key)
    fresh = prep is None
    if fresh:
        if first.dtype not in _GPU_DTYPES:
            raise invalid_argument(f"CUDA features must be float32, float16 or bfloat16, got {first.dtype}",
                                   kind="dtype")
        _bind_device(g, first)
        prep = _new_prepared(model, g, first, params, schedule, "edge" in inputs)
    out = first.new_empty(prep.out_shape)
    lse = first.new_empty(prep.lse_shape, dtype=torch.float32)
    seed_int, seed_ptr = _seed_args(seed)
    with _OnDevice(prep.device):
        if prep.forward is None:  # a new kind, or one the native path prepared
            prep.forward = _dfgnn.make_launch(_dfgnn.default_context(), g._h, prep.op, Direction.FORWARD, schedule,
                                              _dls(inputs), _dl(out), _dl(lse), None, None)
        stream = torch._C._cuda_getCurrentRawStream(prep.device)
        a = _pointers(tensors)
        prep.forward.forward(g._h, a[0], a[1], a[2], a[3], out.data_ptr(), lse.data_ptr(), stream, seed_int, seed_ptr,
                             prep.workspace)
    if fresh:
        g._device = prep.device
        if cache is None:
            cache = _launches.setdefault(g, {})
        cache[key] = prep
    return out, lse


def _cuda_backward(g, model, inputs, out, lse, grad_out, params, schedule, seed):
    tensors = tuple(inputs.values())
    cache = _launches.get(g)
    prep = None if cache is None else cache.get(_launch_key(model, params.values(), schedule, tensors))
    if prep is None:  # a backward without this process's forward (e.g. a custom op called on its own)
        _bind_device(g, tensors[0])
        prep = _new_prepared(model, g, tensors[0], params, schedule, "edge" in inputs)
    grads = {k: torch.empty_like(v) for k, v in inputs.items()}
    seed_int, seed_ptr = _seed_args(seed)
    with _OnDevice(prep.device):
        if prep.backward is None:
            prep.backward = _dfgnn.make_launch(_dfgnn.default_context(), g._h, prep.op, Direction.BACKWARD,
                                               schedule, _dls(inputs), _dl(out), _dl(lse), _dl(grad_out),
                                               _dls(grads))
        stream = torch._C._cuda_getCurrentRawStream(prep.device)
        a, d = _pointers(tensors), _pointers(grads.values())
        prep.backward.backward(g._h, a[0], a[1], a[2], a[3], out.data_ptr(), lse.data_ptr(), grad_out.data_ptr(),
                               d[0], d[1], d[2], d[3], stream, seed_int, seed_ptr, prep.workspace)
    return grads


def _native_call(model, g, tensors, values, schedule, dropout, seed, seed_tensor):
    """A CUDA eager call through the native ops (_native: the op and its autograd in C++), or None
    when this call takes the Python path: no native ops (DFGNN_TORCH_NATIVE, not built yet, or they
    could not be built), or a call the native op refused or failed (bad arguments, out of memory, a
    compile error after dispatch changed the schedule, ...): the Python path runs it again and
    raises its dfgnn error class with the binding's message. The first call of a kind prepares it
    here (the op checks its arguments as the binding does: dtypes, shapes, one CUDA device).
    tensors: the model's inputs in spec order, then edge if given; values: the op options (spec
    order), as the Functions get them; seed: the int seed (with dropout); seed_tensor: the CUDA
    seed tensor or None."""
    ops = _native.ops()  # first: with the native ops off a call pays nothing more here
    if ops is None or g._h is None:
        return None
    key = _launch_key(model, (*values, dropout), schedule, tensors)
    cache = _launches.get(g)
    prep = None if cache is None else cache.get(key)
    fresh = prep is None
    if fresh:
        prep = _native_prepared(model, g, tensors, values, schedule, dropout)
        if prep is None:
            return None
    try:
        native = prep.native
        if native is None:
            script = torch.classes.dfgnn_native.Prepared(_dfgnn.default_context()._address, g._h._address,
                                                         prep.op._address, schedule)
            # (the script object, which this _Prepared keeps alive, and the address the op takes)
            native = prep.native = (script, script.address())
        out = ops.attention(native[1], *tensors, *_NONES[len(tensors):], seed_tensor,
                            seed if dropout and seed_tensor is None else 0)
    except RuntimeError:
        return None
    if fresh:  # cached once it ran, so a refused kind is never cached
        g._device = prep.device
        _launches.setdefault(g, {})[key] = prep
    return out


def _native_prepared(model, g, tensors, values, schedule, dropout):
    """A new kind's _Prepared for the native path (its Python launches are made when the Python path
    first runs it), or None where the Python path must decide (and raise)."""
    first = tensors[0]
    if first.dtype not in _GPU_DTYPES or (g._device is not None and g._device != first.get_device()):
        return None
    spec = SPECS[model]
    params = dict(zip([o.name for o in spec.options], values), dropout=dropout)
    try:
        return _new_prepared(model, g, first, params, schedule, len(tensors) > len(spec.inputs))
    except Exception:  # noqa: BLE001 (the Python path raises the same error, from its own call)
        return None


def _run_forward(g, model, inputs, params, schedule, seed=0):
    """inputs: dict slot -> contiguous tensors; params: the op's options but the seed; seed: an int
    in [0, 2**64), or (CUDA) a one-element int64 tensor on the features' device. Returns (out, lse)."""
    _check_graph(g)
    first = next(iter(inputs.values()))
    if first.is_cuda:
        return _cuda_forward(g, model, inputs, params, schedule, _checked_seed(params, seed), first)
    if first.dtype != torch.float64:
        raise invalid_argument(f"on the CPU dfgnn.torch runs the float64 reference ops, but the features are "
                               f"{first.dtype}: use CUDA tensors for float32/float16/bfloat16, or .double()",
                               kind="dtype")
    n, heads, dim = g.num_nodes, first.shape[1], first.shape[2]
    op = make_op(model, "float64", heads, dim, edge_features="edge" in inputs, dropout_seed=_host_seed(seed),
                 **params)
    out = torch.empty((n, heads, dim), dtype=torch.float64)
    lse = torch.empty((n, heads), dtype=torch.float64)
    _dfgnn.reference_forward(g._h, op, _dls(inputs), _dl(out), _dl(lse))
    return out, lse


def _run_backward(g, model, inputs, out, lse, grad_out, params, schedule, seed=0):
    first = next(iter(inputs.values()))
    if grad_out.dtype != out.dtype:
        grad_out = grad_out.to(out.dtype)
    grad_out = grad_out.contiguous()
    if grad_out.shape != out.shape:
        grad_out = grad_out.view(out.shape)
    if first.is_cuda:
        return _cuda_backward(g, model, inputs, out, lse, grad_out, params, schedule, _checked_seed(params, seed))
    grads = {k: torch.empty_like(v) for k, v in inputs.items()}
    op = make_op(model, "float64", first.shape[1], first.shape[2], edge_features="edge" in inputs,
                 dropout_seed=_host_seed(seed), **params)
    _dfgnn.reference_backward(g._h, op, _dls(inputs), _dl(grad_out), _dls(grads))
    return grads


_SEED_LIMIT = 1 << 64


def _checked_seed(params, seed):
    """The seed of a CUDA call: 0 without dropout; an int checked as make_op checks it; a tensor as
    _device_seed makes it."""
    if not params.get("dropout"):
        return 0
    if isinstance(seed, torch.Tensor):
        return _device_seed(seed)
    if type(seed) is int and 0 <= seed < _SEED_LIMIT:
        return seed
    return check_dropout_seed(seed)


def _host_seed(seed):
    """A seed tensor's value, for the CPU reference path (an int passes as it is)."""
    return int(seed.item()) if isinstance(seed, torch.Tensor) else seed


def _device_seed(seed):
    """A seed tensor for the kernels to read: one element, an integer dtype (as int64; the kernels
    take its 64 bits as the unsigned seed), contiguous. Its value is not checked (that would sync)."""
    if seed.numel() != 1 or seed.is_floating_point() or seed.is_complex() or seed.dtype == torch.bool:
        raise invalid_argument(f"a dropout_seed tensor must hold one integer, got {seed.dtype} "
                               f"{list(seed.shape)}", kind="type")
    if seed.dtype != torch.int64:
        seed = seed.to(torch.int64)
    return seed.reshape(1).contiguous()


def _bind_device(g, t):
    if g._device is not None and g._device != t.device.index:
        raise invalid_argument(f"this graph's device copy lives on cuda:{g._device}, but the features are on "
                               f"{t.device}; build one dfgnn.Graph per device", kind="device")


def _dls(tensors):
    return {k: _dl(v) for k, v in tensors.items()}


def _contiguous(inputs, edge=None):
    """Contiguous inputs (a no-op for contiguous ones); the optional edge input (edge features) goes
    last, as "edge". Not detached: only their pointers (or DLPack capsules, see _dl) are taken."""
    if edge is not None:
        inputs["edge"] = edge
    for k, v in inputs.items():
        if not v.is_contiguous():
            inputs[k] = v.contiguous()
    return inputs
