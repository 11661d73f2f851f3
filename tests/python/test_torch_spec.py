"""dfgnn.torch's two op paths, the autograd Functions and the custom ops, are made from one spec per
model (dfgnn/torch/_spec.py): their public signatures (pinned here), arguments bound by name (keywords
and the trailing defaults the dispatcher may drop, checked against dfgnn's reference ops), and the op
options each model reads."""

import inspect

import numpy as np
import pytest

import dfgnn
from conftest import HAS_TORCH, call_op, requires_torch, torch_inputs

if HAS_TORCH:
    import torch
    import dfgnn.torch as dt
    from dfgnn.torch._spec import SPECS, Argument, Signature

N, H, D = 7, 2, 3
SEED = 12345
EDGES = np.array([(0, 1), (1, 2), (3, 2), (4, 2), (2, 0), (5, 4), (6, 5), (1, 6), (4, 1)]).T

# The public signatures (apply's arguments after ctx) and the custom ops' schemas.
FUNCTION_SIGNATURES = {
    "GATFunction": "(ctx, graph, h, att_src, att_dst, negative_slope=0.2, schedule=None, dropout=0.0, "
                   "dropout_seed=0, edge=None)",
    "GATv2Function": "(ctx, graph, h, h_dst, att, negative_slope=0.2, schedule=None, dropout=0.0, dropout_seed=0, "
                     "edge=None)",
    "TransformerFunction": "(ctx, graph, q, k, v, scale=None, schedule=None, dropout=0.0, dropout_seed=0, edge=None)",
    "AGNNFunction": "(ctx, graph, h, beta, schedule=None, dropout=0.0, dropout_seed=0)",
}
_TAIL = ("Tensor? edge_index, SymInt graph_key, bool add_self_loops, float negative_slope, float? scale, "
         "str? schedule, float dropout=0., SymInt dropout_seed=0")
SCHEMAS = {
    "gat": f"dfgnn::gat(Tensor h, Tensor att_src, Tensor att_dst, {_TAIL}, Tensor? edge=None, "
           "Tensor? dropout_seed_tensor=None) -> (Tensor, Tensor)",
    "gatv2": f"dfgnn::gatv2(Tensor h, Tensor h_dst, Tensor att_src, {_TAIL}, Tensor? edge=None, "
             "Tensor? dropout_seed_tensor=None) -> (Tensor, Tensor)",
    "transformer": f"dfgnn::transformer(Tensor q, Tensor k, Tensor v, {_TAIL}, Tensor? edge=None, "
                   "Tensor? dropout_seed_tensor=None) -> (Tensor, Tensor)",
    "agnn": f"dfgnn::agnn(Tensor h, Tensor beta, {_TAIL}, Tensor? dropout_seed_tensor=None) -> (Tensor, Tensor)",
}


def graph():
    return dfgnn.Graph(np.ascontiguousarray(EDGES), N, add_self_loops=True)


@requires_torch
@pytest.mark.parametrize("name", sorted(FUNCTION_SIGNATURES))
def test_function_signatures(name):
    cls = getattr(dt, name)
    assert str(inspect.signature(cls.forward)) == FUNCTION_SIGNATURES[name]
    assert FUNCTION_SIGNATURES[name].replace("ctx, ", "") in cls.__doc__  # the apply line of the class text
    assert cls.__module__ == "dfgnn.torch" and cls.forward.__doc__.startswith("Runs the fused")


@requires_torch
@pytest.mark.parametrize("model", sorted(SCHEMAS))
def test_custom_op_schemas(model):
    assert str(dt.OPS[model]._schema) == SCHEMAS[model]
    backward = getattr(torch.ops.dfgnn, f"{model}_backward").default
    names = [a.name for a in backward._schema.arguments]
    assert names[:len(SPECS[model].inputs) + 1] == ["grad_out", *SPECS[model].inputs]
    assert "deterministic" not in str(backward._schema)


@requires_torch
def test_specs_follow_the_library_model_table():
    """Inputs from dfgnn.MODEL_INPUTS, the options each model reads, edge features where the library
    takes them; the op params a model passes on hold only its own options."""
    assert {m: s.inputs for m, s in SPECS.items()} == dfgnn.MODEL_INPUTS
    assert {m: [o.name for o in s.options] for m, s in SPECS.items()} == {
        "gat": ["negative_slope"], "gatv2": ["negative_slope"], "transformer": ["scale"], "agnn": []}
    assert [m for m, s in SPECS.items() if s.edge] == ["gat", "gatv2", "transformer"]
    options = dict(negative_slope=0.1, scale=0.5)
    assert SPECS["gat"].params(0.3, options) == {"negative_slope": 0.1, "dropout": 0.3}
    assert SPECS["transformer"].params(0.0, options) == {"scale": 0.5, "dropout": 0.0}
    assert SPECS["agnn"].params(0.0, options) == {"dropout": 0.0}


def _reference(model, inputs, **kw):
    return dfgnn.reference_forward(graph(), model, inputs, **kw)[0]


def _apply_takes_keywords():
    """Whether this torch's Function.apply binds keyword arguments (newer releases do; 2.11 does not)."""
    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, factor=1.0):
            return x * factor

        @staticmethod
        def backward(ctx, grad):
            return grad, None
    try:
        Scale.apply(torch.ones(1), factor=2.0)
        return True
    except TypeError:
        return False


@requires_torch
def test_function_apply_binds_keywords():
    """Keywords bind by name (torch's apply takes a keyword once the arguments before it are given):
    equal to the positional call and to the reference op with those values (the keyword is used: slope
    0.2 gives another result)."""
    if not _apply_takes_keywords():
        pytest.skip(f"torch {torch.__version__}: autograd.Function.apply takes no keyword arguments")
    g = graph()
    inputs, t = torch_inputs("gat", N, H, D, "cpu", torch.float64)
    x = (t["h"], t["att_src"], t["att_dst"])
    by_name = dt.GATFunction.apply(g, *x, 0.1, None, dropout=0.3, dropout_seed=SEED)
    by_position = dt.GATFunction.apply(g, *x, 0.1, None, 0.3, SEED)
    want = _reference("gat", inputs, negative_slope=0.1, dropout=0.3, dropout_seed=SEED)
    np.testing.assert_allclose(by_name.detach().numpy(), want, rtol=1e-12, atol=1e-12)
    assert torch.equal(by_name, by_position)
    assert not np.allclose(want, _reference("gat", inputs, negative_slope=0.2, dropout=0.3, dropout_seed=SEED))
    slope_only = dt.GATFunction.apply(g, *x, negative_slope=0.1)
    np.testing.assert_allclose(slope_only.detach().numpy(), _reference("gat", inputs, negative_slope=0.1),
                               rtol=1e-12, atol=1e-12)
    by_name.sum().backward()
    assert all(v.grad is not None for v in x)
    with pytest.raises(TypeError, match="deterministic"):
        dt.GATFunction.apply(g, *x, deterministic=True)
    with pytest.raises(TypeError, match="deterministic"):
        dt.gat(g, *x, deterministic=True)


@requires_torch
@pytest.mark.parametrize("model", sorted(SCHEMAS))
def test_custom_ops_bind_keywords_and_trailing_defaults(model):
    """The custom op with dropout and its seed by keyword, with them positional, and without them (the
    schema defaults) equal the reference ops; backward through the op gives gradients of every input."""
    g = graph()
    inputs, t = torch_inputs(model, N, H, D, "cpu", torch.float64)
    x = [t[k] for k in dfgnn.MODEL_INPUTS[model]]
    head = (*x, None, g.key, False, 0.2, None, None)
    out_kw, _ = dt.OPS[model](*head, dropout=0.3, dropout_seed=SEED)
    out_pos, _ = dt.OPS[model](*head, 0.3, SEED)
    out_plain, _ = dt.OPS[model](*head)
    want = _reference(model, inputs, dropout=0.3, dropout_seed=SEED)
    np.testing.assert_allclose(out_kw.detach().numpy(), want, rtol=1e-12, atol=1e-12)
    assert torch.equal(out_kw, out_pos)
    np.testing.assert_allclose(out_plain.detach().numpy(), _reference(model, inputs), rtol=1e-12, atol=1e-12)
    out_kw.sum().backward()
    assert all(v.grad is not None and v.grad.shape == v.shape for v in x)


@requires_torch
def test_signature_bind_by_name():
    s = Signature("f", [Argument("a"), Argument("b", 2), Argument("c", 3)])
    assert s.bind((1,)) == {"a": 1, "b": 2, "c": 3}
    assert s.bind((1,), {"c": 9}) == {"a": 1, "b": 2, "c": 9}
    assert s.position("c") == 2
    with pytest.raises(TypeError, match="takes 3 arguments, got 4"):
        s.bind((1, 2, 3, 4))
    with pytest.raises(TypeError, match=r"unexpected or repeated keyword arguments \['a'\]"):
        s.bind((1,), {"a": 5})
    with pytest.raises(TypeError, match="missing the argument 'a'"):
        s.bind(())


@requires_torch
@pytest.mark.parametrize("model", sorted(SCHEMAS))
def test_both_paths_run_the_same_op(model, monkeypatch):
    """A functional call on the Function path and on the custom-op path hands the call path the same
    inputs, op params (in the same order: they key the prepared launches), schedule and seed."""
    from dfgnn.torch import _autograd, _calls, _custom_ops
    seen = []

    def spy(g, name, inputs, params, schedule, seed=0):
        seen.append((name, list(inputs), list(params.items()), schedule, seed))
        return _calls._run_forward(g, name, inputs, params, schedule, seed)

    monkeypatch.setattr(_autograd, "_run_forward", spy)
    monkeypatch.setattr(_custom_ops, "_run_forward", spy)
    g = graph()
    _, t = torch_inputs(model, N, H, D, "cpu", torch.float64)
    edge = {} if model == "agnn" else dict(edge=torch.randn((g.num_edges, H) if model == "gat" else
                                                         (g.num_edges, H, D), dtype=torch.float64))
    outs = []
    for functions in (True, False):
        monkeypatch.setattr(dt, "use_functions_in_eager", functions)
        outs.append(call_op(model, g, t, dropout=0.25, dropout_seed=SEED, **edge))
    assert len(seen) == 2 and seen[0] == seen[1], seen
    name, inputs, params, _, seed = seen[0]
    assert inputs == list(dfgnn.MODEL_INPUTS[model]) + list(edge) and seed == SEED
    assert [k for k, _ in params] == [o.name for o in SPECS[model].options] + ["dropout"]
    assert torch.equal(outs[0], outs[1])
