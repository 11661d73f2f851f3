"""The ops as torch custom ops (torch.compile traces them), made from the model specs (_spec).

The four ops are registered as torch custom ops: dfgnn::gat, dfgnn::gatv2, dfgnn::transformer,
dfgnn::agnn (forward; returns out and lse) and dfgnn::<model>_backward, with fake implementations
(shapes only, for torch.compile's tracing) and the backward attached with register_autograd. The
functional API and the layers call them, so torch.compile(fullgraph=True) traces a layer stack
without graph breaks, and the backward shows up in the compiled backward graph.

A dfgnn.Graph is not a tensor, so an op takes its graph as three arguments
(edge_index, graph_key, add_self_loops):
  - a dfgnn.Graph travels by Graph.key, an int (torch.compile guards on it or makes it symbolic);
    the op looks the live Graph up in a weak registry (dfgnn._graph.graph_by_key);
  - an edge_index tensor travels as itself and becomes a Graph inside the op, where real data
    exists (through graph()'s cache: built once per edge_index tensor, not per call). Its
    graph_key is 0, or 1 + N_src for a bipartite edge_index of the layers (sources 0..N_src-1,
    the rest of the op's N rows destinations; see _bipartite_graph).
Torch's opaque-object support for custom ops is still changing between releases (2.11 and 2.15
differ), so an int key is the portable choice.

The dropout seed is a SymInt (an int64; seeds are in [0, 2**63)): a layer draws it inside its
forward with torch.randint(...).item(), which torch.compile traces as a data-dependent (unbacked)
symbolic int, so the draw stays in the compiled graph (a new seed per call, no recompilation, no
graph break); an `int` argument would not accept that. The backward op gets the same seed.
On CUDA the seed is a one-element int64 CUDA tensor instead, the last argument
`Tensor? dropout_seed_tensor=None` (drawn by the layers with torch.randint on the device from
torch's CUDA generator): the kernels read it by pointer, so the draw forces neither a host sync nor
a graph break, and a captured CUDA graph draws a fresh seed (a fresh mask) on every replay. The
forward saves it for the backward op.

GAT, GATv2 and the Transformer take edge features as a last optional argument `Tensor? edge=None`
(rows by the graph's edge ids, see dfgnn.Graph.csr); their backward ops return its gradient as a
last `Tensor?` (None without edge features).

Every op takes both options (negative_slope, scale); a model reads its own (ModelSpec.options).
"""

import torch

from ._calls import _contiguous, _run_backward, _run_forward
from ._graphs import _by_key_or_none, _op_graph
from ._spec import OPTIONS, SPECS, Argument, Signature


def _signatures(spec):
    """(forward, backward) Signatures of a model's ops: forward (tensors, graph arguments, options,
    schedule, dropout, seed[, edge], seed tensor); backward (grad_out, the tensors, out, lse, then the
    forward's arguments after its tensors)."""
    tensors = [Argument(n, schema="Tensor") for n in spec.inputs]
    rest = [Argument("edge_index", schema="Tensor?"), Argument("graph_key", schema="SymInt"),
            Argument("add_self_loops", schema="bool")]
    rest += [Argument(o.name, schema=o.schema) for o in OPTIONS]
    rest += [Argument("schedule", schema="str?"), Argument("dropout", 0.0, "float"),
             Argument("dropout_seed", 0, "SymInt")]
    if spec.edge:
        rest.append(Argument("edge", None, "Tensor?"))
    rest.append(Argument("dropout_seed_tensor", None, "Tensor?"))
    forward = Signature(f"dfgnn::{spec.model}", tensors + rest)
    backward = Signature(f"dfgnn::{spec.model}_backward", [Argument("grad_out", schema="Tensor")] + tensors
                         + [Argument("out", schema="Tensor"), Argument("lse", schema="Tensor")] + rest)
    return forward, backward


# The tensors among the arguments after the model's inputs (saved for the backward, not kept in ctx).
_TENSOR_ARGS = ("edge_index", "edge", "dropout_seed_tensor")


def _lse_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _run_args(spec, a):
    """(Graph, inputs, params, schedule, seed) of bound op arguments a."""
    inputs = _contiguous({n: a[n] for n in spec.inputs}, a.get("edge"))
    g = _op_graph(a["edge_index"], a["graph_key"], a["add_self_loops"], a[spec.inputs[0]].shape[0])
    seed = a["dropout_seed"] if a["dropout_seed_tensor"] is None else a["dropout_seed_tensor"]
    return g, inputs, spec.params(a["dropout"], a), a["schedule"], seed


def _define_ops(spec):
    model, names = spec.model, spec.inputs
    fwd, bwd = _signatures(spec)
    kept = [n for n in fwd.names[len(names):] if n not in _TENSOR_ARGS]  # the non-tensor arguments

    def forward_impl(*args, **kwargs):
        g, inputs, params, schedule, seed = _run_args(spec, fwd.bind(args, kwargs))
        return _run_forward(g, model, inputs, params, schedule, seed)

    def forward_fake(*args, **kwargs):
        first = args[0]
        n, heads, dim = first.shape
        return first.new_empty((n, heads, dim)), first.new_empty((n, heads), dtype=_lse_dtype(first.dtype))

    def backward_impl(*args, **kwargs):
        a = bwd.bind(args, kwargs)
        g, inputs, params, schedule, seed = _run_args(spec, a)
        grads = _run_backward(g, model, inputs, a["out"].contiguous(), a["lse"].contiguous(), a["grad_out"],
                              params, schedule, seed)
        return tuple(grads[n] for n in names) + ((grads.get("edge"),) if spec.edge else ())

    def backward_fake(*args, **kwargs):
        a = bwd.bind(args, kwargs)
        grads = tuple(a[n].new_empty(a[n].shape) for n in names)
        if spec.edge:
            edge = a["edge"]
            grads += (None if edge is None else edge.new_empty(edge.shape),)
        return grads

    def setup_context(ctx, inputs, output):
        a = fwd.bind(tuple(inputs))
        ctx.dfgnn_args = {n: a[n] for n in kept}  # graph key and options, dropout and its int seed included
        ctx.dfgnn_count = len(inputs)
        # the seed tensor too: the backward regenerates the forward's mask from it
        ctx.save_for_backward(*(a[n] for n in names), *output, *(a.get(n) for n in _TENSOR_ARGS))
        if a["edge_index"] is None and isinstance(a["graph_key"], int):
            # eager mode: hold the Graph until the backward (the caller may drop it right away)
            ctx.dfgnn_graph = _by_key_or_none(a["graph_key"])

    def backward(ctx, grad_out, _grad_lse):
        saved = ctx.saved_tensors
        k = len(names)
        a = dict(zip(names, saved[:k]), out=saved[k], lse=saved[k + 1], **ctx.dfgnn_args)
        a.update(zip(_TENSOR_ARGS, saved[k + 2:]))
        # under autocast the incoming gradient may be float32 for a bfloat16 output
        a["grad_out"] = grad_out.to(a["out"].dtype)
        grads = backward_op(*(a[n] for n in bwd.names))
        result = [None] * ctx.dfgnn_count  # one per argument the forward got
        result[:k] = grads[:k]
        if a.get("edge") is not None:
            result[fwd.position("edge")] = grads[k]
        return tuple(result)

    returns = ", ".join(["Tensor"] * len(names) + (["Tensor?"] if spec.edge else []))
    forward_def = torch.library.custom_op(f"dfgnn::{model}", forward_impl, mutates_args=(),
                                          schema=f"({fwd.schema_text()}) -> (Tensor, Tensor)")
    backward_def = torch.library.custom_op(f"dfgnn::{model}_backward", backward_impl, mutates_args=(),
                                           schema=f"({bwd.schema_text()}) -> ({returns})")
    forward_def.register_fake(forward_fake)
    backward_def.register_fake(backward_fake)
    backward_op = getattr(torch.ops.dfgnn, f"{model}_backward").default
    forward_def.register_autograd(backward, setup_context=setup_context)
    return getattr(torch.ops.dfgnn, model).default


#: The forward custom ops, by model name (torch.ops.dfgnn.<model>.default).
OPS = {model: _define_ops(spec) for model, spec in SPECS.items()}
