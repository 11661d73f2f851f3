"""dfgnn: fused attention GNN kernels (GAT, GATv2, Graph Transformer, AGNN) with per-graph
schedule tuning. Python bindings of the C API (runtime/include/dfgnn/dfgnn.h), built with nanobind.

Works without PyTorch and without a GPU: graphs (:class:`Graph`), degree fingerprints, and the
float64 reference ops (:func:`reference_forward`, :func:`reference_backward`) on NumPy arrays, and
node orders for locality (:func:`reorder`).
GPU ops over any DLPack CUDA arrays are in :mod:`dfgnn.ops`; PyTorch autograd ops and layers are
in :mod:`dfgnn.torch` (imports torch). Tuning: :func:`tune`, :func:`explain`, :func:`set_tune_mode`,
:func:`set_database`; across the ranks of a distributed job: :func:`tune_distributed`
(:mod:`dfgnn.distributed`).
"""

from . import _nvrtc
_nvrtc.add_wheel_hint()  # before the first compile, which is when libdfgnn looks for NVRTC

from . import _dfgnn  # noqa: E402
from ._errors import (CompileError, CudaError, DatabaseError, DeviceError, DTypeError, Error, GraphError,
                      InternalError, InvalidArgumentError, IoError, NoDeviceError, NotSupportedError,
                      OutOfMemoryError, ParseError, Status, make_error as _make_error)

_dfgnn._set_error_factory(_make_error)

from ._graph import Graph, bucket_key, fingerprint_distance, fingerprint_to_json, parse_fingerprint  # noqa: E402
from ._op import MODEL_INPUTS, Direction, DType, Model, Op, make_op as op  # noqa: E402
from ._reference import reference_backward, reference_forward  # noqa: E402
from ._reorder import reorder  # noqa: E402
from ._tuning import explain, set_database, set_tune_mode, tune  # noqa: E402
from . import ops  # noqa: E402
from .distributed import tune_distributed  # noqa: E402  (the rest of it: dfgnn.distributed)

Context = _dfgnn.Context

__version__ = _dfgnn.version()


def library_version():
    """Version of the loaded libdfgnn (dfgnnGetVersion)."""
    return _dfgnn.version()


def default_context():
    """The process-wide context that every call uses unless given ``context=``."""
    return _dfgnn.default_context()


def has_device(context=None):
    """``(available, reason)``: whether a CUDA device is usable from this process, and why not."""
    return (_dfgnn.default_context() if context is None else context).has_device()


__all__ = [
    "Graph", "Context", "Op", "Model", "DType", "Direction", "Status", "MODEL_INPUTS",
    "op", "ops", "reference_forward", "reference_backward", "reorder", "has_device", "default_context",
    "tune", "explain", "set_tune_mode", "set_database", "tune_distributed",
    "library_version", "bucket_key", "fingerprint_distance", "fingerprint_to_json", "parse_fingerprint",
    "Error", "InvalidArgumentError", "GraphError", "DTypeError", "DeviceError", "OutOfMemoryError",
    "NoDeviceError", "CudaError", "CompileError", "NotSupportedError", "IoError", "ParseError",
    "DatabaseError", "InternalError",
]
