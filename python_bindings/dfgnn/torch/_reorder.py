"""dfgnn.torch.Reorder: a PyG transform that renumbers a graph's nodes by dfgnn.reorder."""

import copy

import numpy as np
import torch

from .._errors import invalid_argument
from .._reorder import check_method, reorder


def _keys(data):
    keys = getattr(data, "keys", None)  # PyG's Data.keys() (a method since PyG 2.4)
    return list(keys() if callable(keys) else keys if keys is not None else vars(data))


class Reorder:
    """A PyG transform (``Data`` -> ``Data``) that renumbers the nodes by :func:`dfgnn.reorder`
    with ``method`` (and ``parts``). Apply it once to the whole graph, before any sampling or
    batching: called directly, or as a dataset's ``pre_transform`` (a ``transform`` would
    recompute the order on every access).

    It returns a new object (a shallow copy of ``data``; the input is not changed) in which

    - every node-level attribute -- a tensor or NumPy array whose first dimension is
      ``data.num_nodes`` and whose name does not contain ``"edge"`` (``x``, ``y``, ``pos``,
      ``train_mask``, ``val_mask``, ``test_mask``, ...) -- is indexed by ``perm``;
    - ``edge_index`` is relabelled (``inv_perm[edge_index]``) with the edges in their order, so
      ``edge_attr``, ``edge_weight`` and the other edge-level attributes stay as they are;
    - ``perm`` (``perm[new] = old``) and ``inv_perm`` (``inv_perm[old] = new``), int64 tensors
      on ``edge_index``'s device, map back to the input: an output ``out`` of a model on the
      reordered graph is ``out[inv_perm]`` in the input's node order. A ``data`` that already
      has them (a second Reorder) gets the compositions, so they still refer to the first input.

    Other index-valued attributes (``face``, ``adj_t``, node ids kept as values) are not
    relabelled. ``reorder_time``: the wall seconds the method took on the last call (from
    :func:`dfgnn.reorder`'s ``return_time``), the cost paid once per dataset.
    """

    def __init__(self, method="degree", *, parts=None):
        self.method = check_method(method)
        self.parts = parts
        self.reorder_time = None

    def __call__(self, data):
        edge_index = data.edge_index
        if not isinstance(edge_index, torch.Tensor):
            raise invalid_argument(f"data.edge_index must be a torch tensor, got {type(edge_index).__name__}",
                                   kind="type")
        num_nodes = getattr(data, "num_nodes", None)
        if num_nodes is None:
            raise invalid_argument("Reorder needs data.num_nodes (or a node-level x)")
        perm_np, self.reorder_time = reorder(edge_index, num_nodes, self.method, parts=self.parts, return_time=True)
        perm = torch.from_numpy(perm_np).to(edge_index.device)
        inv = torch.empty_like(perm)
        inv[perm] = torch.arange(len(perm), device=perm.device)
        out = copy.copy(data)
        for key in _keys(data):
            value = getattr(data, key)
            if (key not in ("perm", "inv_perm") and "edge" not in key and isinstance(value, (torch.Tensor, np.ndarray))
                    and value.ndim >= 1 and value.shape[0] == num_nodes):
                setattr(out, key, value[perm.to(value.device) if isinstance(value, torch.Tensor) else perm_np])
        out.edge_index = inv[edge_index]
        # perm maps new ids to the input's; after an earlier Reorder, composed with its maps to reach the first input
        old_perm, old_inv = getattr(data, "perm", None), getattr(data, "inv_perm", None)
        out.perm = perm if old_perm is None else old_perm.to(perm.device)[perm]
        out.inv_perm = inv if old_inv is None else inv[old_inv.to(perm.device)]
        return out

    def __repr__(self):
        parts = "" if self.parts is None else f", parts={self.parts}"
        return f"{type(self).__name__}({self.method!r}{parts})"
