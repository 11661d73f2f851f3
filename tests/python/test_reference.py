"""Float64 reference ops against an independent NumPy implementation (npref.py) of all four models."""

import numpy as np
import pytest

import dfgnn
import npref

MODELS = ["gat", "gatv2", "transformer", "agnn"]

# 7 nodes: a duplicate edge (0->1 twice), a self-loop (3->3), node 6 without in-edges, a hub (node 2).
EDGES = np.array([(0, 1), (0, 1), (1, 2), (3, 2), (4, 2), (5, 2), (0, 2), (2, 0), (3, 3), (4, 5),
                  (5, 4), (1, 3), (6, 2), (2, 1)])
N = 7


def small_graph():
    return dfgnn.Graph(np.ascontiguousarray(EDGES.T), num_nodes=N)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("heads,dim", [(1, 4), (3, 2)])
def test_forward_matches_numpy(model, heads, dim, rng):
    g = small_graph()
    inputs = npref.random_inputs(model, N, heads, dim, rng)
    out, lse = dfgnn.reference_forward(g, model, inputs)
    want_out, want_lse = npref.forward(model, N, EDGES, inputs)
    assert out.shape == (N, heads, dim) and out.dtype == np.float64
    assert lse.shape == (N, heads)
    np.testing.assert_allclose(out, want_out, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-12, atol=1e-12)
    # node 6 has no in-edges: zero output, -inf log-sum-exp
    assert (out[6] == 0).all() and np.isneginf(lse[6]).all()


@pytest.mark.parametrize("model", MODELS)
def test_backward_matches_finite_differences(model, rng):
    g = small_graph()
    heads, dim = 2, 3
    inputs = npref.random_inputs(model, N, heads, dim, rng)
    grad_out = rng.standard_normal((N, heads, dim))
    grads = dfgnn.reference_backward(g, model, inputs, grad_out)
    assert set(grads) == set(inputs)
    want = npref.numeric_grads(lambda: npref.forward(model, N, EDGES, inputs)[0], inputs, grad_out)
    for name in inputs:
        assert grads[name].shape == inputs[name].shape and grads[name].dtype == np.float64
        np.testing.assert_allclose(grads[name], want[name], rtol=1e-6, atol=1e-7, err_msg=f"{model} d/d{name}")


def test_options_negative_slope_and_scale(rng):
    g = small_graph()
    for model, kw in [("gat", dict(negative_slope=0.05)), ("gatv2", dict(negative_slope=0.5)),
                      ("transformer", dict(scale=0.3))]:
        inputs = npref.random_inputs(model, N, 2, 4, rng)
        out, lse = dfgnn.reference_forward(g, model, inputs, **kw)
        want_out, want_lse = npref.forward(model, N, EDGES, inputs, **kw)
        np.testing.assert_allclose(out, want_out, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(lse, want_lse, rtol=1e-12, atol=1e-12)
        default_out, _ = dfgnn.reference_forward(g, model, inputs)
        assert not np.allclose(out, default_out)
        grads = dfgnn.reference_backward(g, model, inputs, np.ones((N, 2, 4)), **kw)
        key = "v" if model == "transformer" else "h"
        assert grads[key].shape == (N, 2, 4)


def test_cora_with_self_loops(cora_path, rng):
    g = dfgnn.Graph.from_file(cora_path, add_self_loops=True)
    ei = g.edge_index()
    inputs = npref.random_inputs("gat", g.num_nodes, 2, 8, rng)
    out, lse = dfgnn.reference_forward(g, dfgnn.Model.GAT, inputs)
    row_ptr = g.csr()[0]
    # spot-check rows (the NumPy loop over all 2708 rows is slow): restrict to edges into a few nodes
    for i in [0, 1, 100, int(np.argmax(np.diff(row_ptr)))]:
        sub = ei[:, ei[1] == i].T
        want_out, want_lse = npref.forward("gat", g.num_nodes, sub, inputs)
        np.testing.assert_allclose(out[i], want_out[i], rtol=1e-11, atol=1e-12)
        np.testing.assert_allclose(lse[i], want_lse[i], rtol=1e-12)


def test_flat_shapes_and_aliases(rng):
    g = small_graph()
    inputs = npref.random_inputs("gatv2", N, 2, 3, rng)
    out, _ = dfgnn.reference_forward(g, "gatv2", inputs)
    flat = {"h": inputs["h"].reshape(N, 6), "h_dst": inputs["h_dst"].reshape(N, 6),
            "att": inputs["att_src"].reshape(1, 2, 3)}           # PyG's [1, H, C] parameter
    out2, _ = dfgnn.reference_forward(g, "gatv2", flat, heads=2)
    np.testing.assert_array_equal(out, out2)
    grads = dfgnn.reference_backward(g, "gatv2", flat, np.ones((N, 2, 3)), heads=2)
    assert grads["att"].shape == (1, 2, 3) and grads["h"].shape == (N, 6)
    # CPU arrays of another framework through DLPack
    from test_graph import DLPackOnly
    wrapped = {k: DLPackOnly(v) for k, v in inputs.items()}
    out3, _ = dfgnn.reference_forward(g, "gatv2", wrapped)
    np.testing.assert_array_equal(out, out3)


def test_input_errors(rng):
    g = small_graph()
    inputs = npref.random_inputs("gat", N, 2, 3, rng)
    with pytest.raises(dfgnn.InvalidArgumentError, match="lacks 'att_dst': gat takes h, att_src, att_dst"):
        dfgnn.reference_forward(g, "gat", {"h": inputs["h"], "att_src": inputs["att_src"]})
    with pytest.raises(dfgnn.InvalidArgumentError, match="has 'q', but gat takes h, att_src, att_dst"):
        dfgnn.reference_forward(g, "gat", dict(inputs, q=inputs["h"]))
    with pytest.raises(dfgnn.InvalidArgumentError, match="unknown model 'gcn'"):
        dfgnn.reference_forward(g, "gcn", inputs)
    with pytest.raises(dfgnn.DTypeError, match=r"inputs\['h'\] must have dtype float64 .* got float32"):
        dfgnn.reference_forward(g, "gat", dict(inputs, h=inputs["h"].astype(np.float32)))
    with pytest.raises(dfgnn.InvalidArgumentError, match=r"must have shape \[N, H, D\] = \[7, 2, 3\].*"
                                                         r"got \[5, 2, 3\] \(the graph has 7 nodes\)"):
        dfgnn.reference_forward(g, "gat", dict(inputs, h=inputs["h"][:5]))
    with pytest.raises(dfgnn.InvalidArgumentError, match=r"att_src'\] must have shape \[H, D\] = \[2, 3\]"):
        dfgnn.reference_forward(g, "gat", dict(inputs, att_src=np.zeros((3, 2))))
    with pytest.raises(dfgnn.InvalidArgumentError, match="must be C-contiguous"):
        h = np.asfortranarray(inputs["h"])
        dfgnn.reference_forward(g, "gat", dict(inputs, h=h))
    with pytest.raises(dfgnn.InvalidArgumentError, match="pass heads"):
        dfgnn.reference_forward(g, "gat", dict(inputs, h=inputs["h"].reshape(N, 6)))
    with pytest.raises(dfgnn.InvalidArgumentError, match="beta'\\] must have one element"):
        dfgnn.reference_forward(g, "agnn", {"h": inputs["h"], "beta": np.ones(2)})
    with pytest.raises(dfgnn.InvalidArgumentError, match="grad_out must have shape"):
        dfgnn.reference_backward(g, "gat", inputs, np.ones((N, 3, 3)))
