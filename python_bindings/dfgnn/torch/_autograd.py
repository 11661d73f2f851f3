"""The ops as torch.autograd.Function classes (GATFunction, ...), made from the model specs (_spec):
the eager path of the functions and layers on plain tensors, and a lower-level API."""

import inspect

import torch

from ._calls import _contiguous, _run_backward, _run_forward
from ._spec import SPECS, Argument, Signature


def _signature(spec, name):
    """apply's arguments: the graph, the model's tensors, its options, then the schedule, the dropout,
    its seed and (models with edge features) ``edge`` last."""
    arguments = [Argument("graph")] + [Argument(a) for a in spec.arguments]
    arguments += [Argument(o.name, o.default) for o in spec.options]
    arguments += [Argument("schedule", None), Argument("dropout", 0.0), Argument("dropout_seed", 0)]
    if spec.edge:
        arguments.append(Argument("edge", None))
    return Signature(f"{name}.forward", arguments)


def _function_seed(dropout, seed, on_cuda):
    """An autograd Function's seed argument as _run_forward takes it: a CUDA tensor stays one for
    CUDA features (read on the device), any other tensor is read with .item()."""
    if dropout and isinstance(seed, torch.Tensor) and not (seed.is_cuda and on_cuda):
        return seed.item()
    return seed


class _AttentionFunction(torch.autograd.Function):
    """The backward shared by the four ops: gradients of the tensor arguments, None for the graph and
    the options; the optional ``edge`` argument comes last (after the options)."""

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        g, spec, positions, params, schedule, seed = ctx.dfgnn
        saved = ctx.saved_tensors
        n = len(ctx.dfgnn_inputs)
        inputs = dict(zip(ctx.dfgnn_inputs, saved))
        out, lse = saved[n], saved[n + 1]
        if len(saved) > n + 2:  # a CUDA seed tensor (saved, so an in-place change before backward is caught)
            seed = saved[n + 2]
        grads = _run_backward(g, spec.model, inputs, out, lse, grad_out, params, schedule, seed)
        needs = ctx.needs_input_grad  # one entry per positional argument of forward (ctx not counted)
        result = [None] * len(needs)
        for slot, i in positions:
            if slot in grads and i < len(needs) and needs[i]:
                result[i] = grads[slot]
        return tuple(result)


def _with_signature(spec, signature, body):
    """forward(ctx, <the signature's arguments>), which calls body(ctx, graph, inputs by slot, op params,
    schedule, dropout, dropout_seed, edge). It is made from the spec with a real signature, as dataclasses
    make __init__: torch's Function.apply binds keyword arguments by the parameter names of forward's
    code, inspect (so the documentation) shows them, and the dicts are built as literals (an eager call's
    host time counts)."""
    assert all(name.isidentifier() for name in signature.names)
    params = ", ".join(a.name if a.required else f"{a.name}=_defaults[{a.name!r}]" for a in signature.arguments)
    inputs = ", ".join(f"{slot!r}: {arg}" for slot, arg in zip(spec.inputs, spec.arguments))
    options = "".join(f"{o.name!r}: {o.name}, " for o in spec.options)  # ModelSpec.params' order
    edge = "edge" if spec.edge else "None"
    namespace = {"_defaults": signature.defaults, "_body": body}
    exec(f"def forward(ctx, {params}):\n"
         f"    return _body(ctx, graph, {{{inputs}}}, {{{options}'dropout': dropout}}, schedule, dropout, "
         f"dropout_seed, {edge})\n", namespace)
    return namespace["forward"]


def _make_function(spec, name, summary, note, forward_doc):
    """The Function class of a model: forward binds its arguments by name (signature); the class text
    is the summary, the apply line (from the signature) and the note."""
    signature = _signature(spec, name)
    # (input slot, position among apply's arguments) of every tensor that gets a gradient
    positions = tuple((slot, signature.position(arg)) for slot, arg in zip(spec.inputs, spec.arguments))
    if spec.edge:
        positions += (("edge", signature.position("edge")),)

    def body(ctx, g, inputs, params, schedule, dropout, dropout_seed, edge):
        inputs = _contiguous(inputs, edge)
        seed = _function_seed(dropout, dropout_seed, next(iter(inputs.values())).is_cuda)
        out, lse = _run_forward(g, spec.model, inputs, params, schedule, seed)
        seed_tensor = (seed,) if isinstance(seed, torch.Tensor) else ()
        ctx.dfgnn = (g, spec, positions, params, schedule, None if seed_tensor else seed)
        ctx.dfgnn_inputs = tuple(inputs)
        ctx.save_for_backward(*inputs.values(), out, lse, *seed_tensor)
        return out

    forward = _with_signature(spec, signature, body)
    forward.__doc__ = forward_doc
    forward.__qualname__ = f"{name}.forward"
    forward.__module__ = "dfgnn.torch"
    apply_text = str(inspect.signature(forward)).replace("(ctx, ", "(", 1)
    return type(name, (_AttentionFunction,), {
        "__doc__": f"{summary}\n\n    ``apply{apply_text}``{note}",
        "__module__": "dfgnn.torch", "__qualname__": name, "forward": staticmethod(forward)})


# Each model's Function: (class name, summary, note after the apply line, forward's text).
_DOCS = {
    "gat": (
        "GATFunction",
        "GAT attention: e_ij = LeakyReLU(att_dst . h_i + att_src . h_j [+ edge_ij]), out_i = sum_j alpha_ij h_j.",
        "; edge: [E, H] logit terms, one row per edge id of the graph.",
        """Runs the fused GAT forward (called by ``GATFunction.apply``; autograd passes ``ctx``).

        Args:
            graph: a :class:`dfgnn.Graph` (used as given: no edge_index and no self-loops here).
            h: features [N, H, D]: float64 on the CPU (reference op), float32, float16 or bfloat16
                on CUDA.
            att_src, att_dst: attention vectors [H, D] (float32 on CUDA, float64 on the CPU).
            negative_slope: LeakyReLU slope.
            schedule: a forced schedule text, or None for dispatch.
            dropout, dropout_seed: attention dropout and its mask's seed (see the module text).
            edge: optional [E, H] logit terms, one row per edge id of the graph.

        Returns:
            out [N, H, D] in the features' dtype; the backward recomputes attention from the
            per-(node, head) log-sum-exp saved here.
        """),
    "gatv2": (
        "GATv2Function",
        "GATv2 attention: e_ij = att . LeakyReLU(h_dst_i + h_j [+ edge_ij]), out_i = sum_j alpha_ij h_j.",
        "; edge: [E, H, D] features, one row per edge id of the graph.",
        """Runs the fused GATv2 forward (called by ``GATv2Function.apply``).

        Args:
            graph: a :class:`dfgnn.Graph`.
            h: source-side features [N, H, D] (the ones aggregated); dtypes as in
                :meth:`GATFunction.forward`.
            h_dst: target-side features [N, H, D].
            att: attention vector [H, D].
            negative_slope, schedule, dropout, dropout_seed: as in :meth:`GATFunction.forward`.
            edge: optional [E, H, D] edge features, one row per edge id of the graph.

        Returns:
            out [N, H, D] in the features' dtype.
        """),
    "transformer": (
        "TransformerFunction",
        "Graph Transformer attention: e_ij = scale * (q_i . (k_j [+ edge_ij])), "
        "out_i = sum_j alpha_ij (v_j [+ edge_ij]).",
        "; scale None = 1/sqrt(D); edge: [E, H, D] features, one row per edge id of the graph.",
        """Runs the fused Graph Transformer forward (called by ``TransformerFunction.apply``).

        Args:
            graph: a :class:`dfgnn.Graph`.
            q: queries of the targets [N, H, D]; dtypes as in :meth:`GATFunction.forward`.
            k, v: keys and values of the sources [N, H, D].
            scale: score scale; None is 1/sqrt(D).
            schedule, dropout, dropout_seed: as in :meth:`GATFunction.forward`.
            edge: optional [E, H, D] edge features added to each edge's key and value.

        Returns:
            out [N, H, D] in the features' dtype.
        """),
    "agnn": (
        "AGNNFunction",
        "AGNN attention: e_ij = beta * cos(h_i, h_j), out_i = sum_j alpha_ij h_j.",
        "",
        """Runs the fused AGNN forward (called by ``AGNNFunction.apply``).

        Args:
            graph: a :class:`dfgnn.Graph`.
            h: features [N, H, D]; dtypes as in :meth:`GATFunction.forward`.
            beta: one-element tensor [1] (float32 on CUDA, float64 on the CPU).
            schedule, dropout, dropout_seed: as in :meth:`GATFunction.forward`.

        Returns:
            out [N, H, D] in the features' dtype.
        """),
}

#: The Function class of each model.
FUNCTIONS = {model: _make_function(spec, *_DOCS[model]) for model, spec in SPECS.items()}
GATFunction = FUNCTIONS["gat"]
GATv2Function = FUNCTIONS["gatv2"]
TransformerFunction = FUNCTIONS["transformer"]
AGNNFunction = FUNCTIONS["agnn"]
