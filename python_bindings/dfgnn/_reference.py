"""Float64 reference ops on host arrays (dfgnnReferenceForward / dfgnnReferenceBackward)."""

import numpy as np

from . import _dfgnn
from ._errors import Status, make_error
from ._op import MODEL_INPUTS, _shape, check_input_names, infer_heads_dim, make_op
from .ops import _graph_handle


def _reference_op(graph, model, inputs, heads, dim, negative_slope, scale, dropout, dropout_seed):
    name = check_input_names(model, inputs)
    heads, dim = infer_heads_dim(name, inputs, heads, dim)
    # Before the outputs are allocated (a dim of 2**30 + 1 asked NumPy for gigabytes): the C API's
    # limit and status, which it would give only after.
    if heads * dim > _dfgnn.MAX_CHANNELS:
        raise make_error(Status.NOT_SUPPORTED, "dfgnnReferenceForward",
                         f"op.heads * op.dim = {heads} * {dim} exceeds {_dfgnn.MAX_CHANNELS} channels per node, the "
                         "most supported (schedules serve D up to 2048)")
    return make_op(name, "float64", heads, dim, negative_slope=negative_slope, scale=scale, dropout=dropout,
                   dropout_seed=dropout_seed, edge_features="edge" in inputs)


def reference_forward(graph, model, inputs, heads=None, dim=None, *, negative_slope=0.2, scale=None, dropout=0.0,
                      dropout_seed=0):
    """Forward of one attention op in float64 on the host.

    ``model``: "gat", "gatv2", "transformer" or "agnn" (or a :class:`dfgnn.Model`).
    ``inputs``: dict of C-contiguous float64 host arrays (NumPy, or CPU tensors through DLPack):

    - gat: ``h`` [N, H, D], ``att_src`` [H, D], ``att_dst`` [H, D]
    - gatv2: ``h`` [N, H, D] (source side, aggregated), ``h_dst`` [N, H, D], ``att_src`` (or ``att``) [H, D]
    - transformer: ``q``, ``k``, ``v`` [N, H, D]
    - agnn: ``h`` [N, H, D], ``beta`` [1]
    - optional ``edge`` (gat, gatv2, transformer; PyG's edge_dim), one row per edge id
      (the order of ``graph.csr()[2]``): gat [E, H], a term added to the logit inside the LeakyReLU;
      gatv2 [E, H, D], added to h_dst_i + h_j inside the LeakyReLU; transformer [E, H, D], added to
      the key and to the value of every edge

    Features may also be [N, H*D] with ``heads`` given, attention vectors [1, H, D] or [H*D].
    ``negative_slope`` (GAT, GATv2) and ``scale`` (Transformer; None = 1/sqrt(D)) as in PyG.
    ``dropout`` in [0, 1) and ``dropout_seed`` (an int in [0, 2**64)): attention dropout, the
    GPU kernels' mask: the weight alpha_ij of edge j -> i in head h is multiplied by 1 / (1 - dropout)
    or dropped (0) by a hash of (seed, the edge's CSR position, h). lse is that of the softmax
    without dropout.

    Returns ``(out, lse)``: out [N, H, D] and the per-(node, head) log-sum-exp of the scores
    [N, H] (-inf for nodes without in-edges), both new float64 NumPy arrays.
    """
    handle = _graph_handle(graph)
    op = _reference_op(graph, model, inputs, heads, dim, negative_slope, scale, dropout, dropout_seed)
    n = graph.num_nodes
    out = np.empty((n, op.heads, op.dim), dtype=np.float64)
    lse = np.empty((n, op.heads), dtype=np.float64)
    _dfgnn.reference_forward(handle, op, dict(inputs), out, lse)
    return out, lse


def reference_backward(graph, model, inputs, grad_out, heads=None, dim=None, *, negative_slope=0.2, scale=None,
                       dropout=0.0, dropout_seed=0):
    """Backward of :func:`reference_forward`: given d(loss)/d(out) (``grad_out``, [N, H, D]),
    returns a dict with the gradient of every input (same keys and shapes as ``inputs``, new
    float64 NumPy arrays). ``dropout`` and ``dropout_seed``: the forward's (same mask)."""
    handle = _graph_handle(graph)
    op = _reference_op(graph, model, inputs, heads, dim, negative_slope, scale, dropout, dropout_seed)
    grads = {k: np.empty(_shape(v), dtype=np.float64) for k, v in inputs.items()}
    _dfgnn.reference_backward(handle, op, dict(inputs), grad_out, grads)
    return grads


__all__ = ["reference_forward", "reference_backward", "MODEL_INPUTS"]
