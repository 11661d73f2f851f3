"""dfgnn.reorder and dfgnn.torch.Reorder: exact permutations, each method's order, errors, and model outputs
that permute exactly with the input (float64 reference ops, so only reassociation may differ)."""

import importlib.util
import subprocess
import sys

import numpy as np
import pytest

import dfgnn
import npref
from conftest import HAS_TORCH, requires_torch

HAS_SCIPY = importlib.util.find_spec("scipy") is not None
HAS_PYMETIS = importlib.util.find_spec("pymetis") is not None
requires_scipy = pytest.mark.skipif(not HAS_SCIPY, reason="SciPy is not installed (method='rcm')")
requires_pymetis = pytest.mark.skipif(not HAS_PYMETIS, reason="pymetis is not installed (method='metis')")

METHODS = ["degree", pytest.param("rcm", marks=requires_scipy), pytest.param("metis", marks=requires_pymetis),
           "community"]
OPTIONS = {"metis": dict(parts=4)}  # Cora's default would be one part: the identity
RTOL = 1e-12  # float64 sums over the same in-edges, at most reassociated


def random_edge_index(rng, n=60, e=400):
    return rng.integers(0, n, size=(2, e)).astype(np.int64), n


def cora_edge_index(cora_path):
    g = dfgnn.Graph.from_file(cora_path)
    return g.edge_index(), g.num_nodes


def inverse(perm):
    return np.argsort(perm)


@pytest.mark.parametrize("method", METHODS)
def test_is_a_deterministic_permutation(method, cora_path):
    ei, n = cora_edge_index(cora_path)
    perm, seconds = dfgnn.reorder(ei, n, method, return_time=True, **OPTIONS.get(method, {}))
    assert perm.dtype == np.int64 and perm.shape == (n,)
    np.testing.assert_array_equal(np.sort(perm), np.arange(n))
    inv = inverse(perm)
    np.testing.assert_array_equal(perm[inv], np.arange(n))
    np.testing.assert_array_equal(inv[perm], np.arange(n))
    assert seconds >= 0
    # the same order from every input form
    for other in (dfgnn.Graph(ei, n), ei.astype(np.int32), ei.tolist()):
        np.testing.assert_array_equal(dfgnn.reorder(other, n, method, **OPTIONS.get(method, {})), perm)
    if HAS_TORCH:
        import torch
        np.testing.assert_array_equal(dfgnn.reorder(torch.from_numpy(ei), n, method, **OPTIONS.get(method, {})),
                                      perm)


def test_degree_order(rng):
    ei, n = random_edge_index(rng)
    perm = dfgnn.reorder(ei, n)  # "degree" is the default
    deg = np.bincount(ei[1], minlength=n)[perm]
    assert (np.diff(deg) <= 0).all()
    tie = deg[1:] == deg[:-1]
    assert (perm[1:][tie] > perm[:-1][tie]).all(), "equal degrees keep their id order"
    # isolated nodes (beyond every edge's ids) come last
    np.testing.assert_array_equal(dfgnn.reorder(ei, n + 3)[-3:], [n, n + 1, n + 2])


@requires_scipy
def test_rcm_is_scipys(cora_path):
    import scipy.sparse as sp
    from scipy.sparse.csgraph import reverse_cuthill_mckee
    ei, n = cora_edge_index(cora_path)
    a = sp.csr_matrix((np.ones(ei.shape[1]), (ei[1], ei[0])), shape=(n, n))
    np.testing.assert_array_equal(dfgnn.reorder(ei, n, "rcm"), reverse_cuthill_mckee((a + a.T).tocsr(), True))


@requires_pymetis
def test_metis_parts_are_consecutive(cora_path):
    import pymetis
    ei, n = cora_edge_index(cora_path)
    perm = dfgnn.reorder(ei, n, "metis", parts=8)
    a, b = np.concatenate([ei[0], ei[1]]), np.concatenate([ei[1], ei[0]])
    pairs = np.unique(np.stack([a, b])[:, a != b], axis=1)  # METIS's input: simple, undirected, sorted
    part = np.asarray(pymetis.part_graph(8, adjacency=pymetis.CSRAdjacency(
        adj_starts=np.searchsorted(pairs[0], np.arange(n + 1)), adjacent=pairs[1])).vertex_part)
    assert (np.diff(part[perm]) >= 0).all() and len(np.unique(part)) == 8
    np.testing.assert_array_equal(perm, np.lexsort((np.arange(n), part)))


def test_community_groups_cliques():
    # two 5-cliques with interleaved ids (evens, odds) and one edge between them: each becomes one block
    ids = [np.arange(0, 10, 2), np.arange(1, 10, 2)]
    pairs = [(i, j) for c in ids for i in c for j in c if i != j] + [(0, 1)]
    perm = dfgnn.reorder(np.array(pairs).T, 10, "community")
    assert sorted(perm[:5] % 2) == [0] * 5 and sorted(perm[5:] % 2) == [1] * 5
    np.testing.assert_array_equal(perm, np.r_[ids[0], ids[1]])


def test_empty_and_edgeless():
    assert dfgnn.reorder(np.zeros((2, 0), dtype=np.int64)).shape == (0,)
    np.testing.assert_array_equal(dfgnn.reorder(np.zeros((2, 0), dtype=np.int64), 4, "community"), np.arange(4))


def test_errors(rng):
    ei, n = random_edge_index(rng)
    with pytest.raises(dfgnn.InvalidArgumentError, match="unknown reorder method 'metiss': expected one of degree"):
        dfgnn.reorder(ei, n, "metiss")
    with pytest.raises(dfgnn.GraphError, match=r"node ids in \[-1, .*outside \[0, 60\)"):
        dfgnn.reorder(np.where(ei == 0, -1, ei), n)
    with pytest.raises(dfgnn.GraphError, match=r"outside \[0, 10\) \(num_nodes = 10\)"):
        dfgnn.reorder(ei, 10)
    with pytest.raises(dfgnn.InvalidArgumentError, match=r"shape \[2, E\], got \[3, 400\]"):
        dfgnn.reorder(np.zeros((3, 400), dtype=np.int64))
    with pytest.raises(dfgnn.DTypeError, match="must hold integers, got float64"):
        dfgnn.reorder(ei.astype(np.float64))
    with pytest.raises(dfgnn.InvalidArgumentError, match="num_nodes = 5, but the dfgnn.Graph has 60 nodes"):
        dfgnn.reorder(dfgnn.Graph(ei, n), 5)
    with pytest.raises(dfgnn.InvalidArgumentError, match="parts is an option of method='metis', not of 'rcm'"):
        dfgnn.reorder(ei, n, "rcm", parts=4)
    with pytest.raises(dfgnn.InvalidArgumentError, match="parts = 0"):
        dfgnn.reorder(ei, n, "metis", parts=0)
    with pytest.raises(TypeError, match="num_nodes must be an integer"):
        dfgnn.reorder(ei, 60.0)


def test_missing_package_is_named(tmp_path):
    code = ("import sys; sys.modules['scipy'] = None; sys.modules['pymetis'] = None\nimport numpy as np, dfgnn\n"
            "for m, pkg in (('rcm', 'scipy'), ('metis', 'pymetis')):\n"
            "    try:\n        dfgnn.reorder(np.array([[0], [1]]), method=m)\n"
            "    except ImportError as e:\n        assert f'pip install {pkg}' in str(e), e\n"
            "    else:\n        raise SystemExit(m + ' ran without ' + pkg)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


def permuted(perm, inputs, nodes):
    return {k: np.ascontiguousarray(v[perm]) if k in nodes else v for k, v in inputs.items()}


@pytest.mark.parametrize("method", METHODS)
def test_gat_output_permutes_exactly(method, cora_path, rng):
    ei, n = cora_edge_index(cora_path)
    perm = dfgnn.reorder(ei, n, method, **OPTIONS.get(method, {}))
    inv = inverse(perm)
    inputs = npref.random_inputs("gat", n, 2, 8, rng)
    out, lse = dfgnn.reference_forward(dfgnn.Graph(ei, n, add_self_loops=True), "gat", inputs)
    out_new, lse_new = dfgnn.reference_forward(dfgnn.Graph(inv[ei], n, add_self_loops=True), "gat",
                                               permuted(perm, inputs, {"h"}))
    np.testing.assert_allclose(out_new, out[perm], rtol=RTOL, atol=0)
    np.testing.assert_allclose(lse_new, lse[perm], rtol=RTOL, atol=0)


@pytest.mark.parametrize("method", METHODS)
def test_transformer_with_edge_features_permutes_exactly(method, rng):
    ei, n = random_edge_index(rng)
    ei = np.concatenate([ei, np.tile(np.arange(n), (2, 1))], axis=1)  # self-loops as edges: edge ids stay put
    perm = dfgnn.reorder(ei, n, method, **OPTIONS.get(method, {}))
    inv = inverse(perm)
    inputs = npref.random_inputs("transformer", n, 3, 4, rng)
    inputs["edge"] = rng.standard_normal((ei.shape[1], 3, 4))  # one row per edge, in edge_index order
    out, _ = dfgnn.reference_forward(dfgnn.Graph(ei, n), "transformer", inputs)
    out_new, _ = dfgnn.reference_forward(dfgnn.Graph(inv[ei], n), "transformer", permuted(perm, inputs, "qkv"))
    np.testing.assert_allclose(out_new, out[perm], rtol=RTOL, atol=0)
    np.testing.assert_allclose(out_new[inv], out, rtol=RTOL, atol=0)


# ------------------------------------------------------------ the PyG transform


def make_data(rng, n=50, e=300):
    import torch
    try:
        from torch_geometric.data import Data
    except ImportError:  # the transform is duck-typed: a plain object with the same attributes
        class Data:
            def __init__(self, **kw):
                self.__dict__.update(kw)
                self.num_nodes = len(kw["x"])
    ei = torch.from_numpy(rng.integers(0, n, size=(2, e)))
    ei = torch.cat([ei, torch.arange(n).repeat(2, 1)], dim=1)
    masks = torch.from_numpy(rng.random((3, n)) < 0.3)
    return Data(x=torch.randn(n, 3, 8, dtype=torch.float64), y=torch.arange(n) % 7, edge_index=ei,
                edge_attr=torch.randn(ei.shape[1], 3, 8, dtype=torch.float64), train_mask=masks[0],
                val_mask=masks[1], test_mask=masks[2], pos=torch.randn(n, 2))


@requires_torch
@pytest.mark.parametrize("method", METHODS)
def test_transform_permutes_data(method, rng):
    import torch
    import dfgnn.torch as dt
    data = make_data(rng)
    t = dt.Reorder(method, **OPTIONS.get(method, {}))
    new = t(data)
    perm, inv = new.perm, new.inv_perm
    assert perm.dtype == torch.int64 and isinstance(t.reorder_time, float)
    np.testing.assert_array_equal(perm.numpy(), dfgnn.reorder(data.edge_index, 50, method, **OPTIONS.get(method, {})))
    assert torch.equal(inv[perm], torch.arange(50)) and torch.equal(perm[inv], torch.arange(50))
    for key in ("x", "y", "train_mask", "val_mask", "test_mask", "pos"):
        assert torch.equal(getattr(new, key), getattr(data, key)[perm]), key
    assert torch.equal(new.edge_index, inv[data.edge_index])
    assert new.edge_attr is data.edge_attr  # edges keep their order, so edge features stay aligned
    assert not hasattr(data, "perm") and data.x.data_ptr() != new.x.data_ptr()  # the input is untouched
    # the same model on the reordered Data: the output rows of the input's nodes, exactly
    att = {"att_src": rng.standard_normal((3, 8)), "att_dst": rng.standard_normal((3, 8))}
    out, _ = dfgnn.reference_forward(dfgnn.Graph(data.edge_index.numpy(), 50), "gat", dict(att, h=data.x.numpy()))
    out_new, _ = dfgnn.reference_forward(dfgnn.Graph(new.edge_index.numpy(), 50), "gat", dict(att, h=new.x.numpy()))
    np.testing.assert_allclose(out_new[inv.numpy()], out, rtol=RTOL, atol=0)
    # a second transform composes perm and inv_perm with the first
    again = dt.Reorder("degree")(new)
    assert torch.equal(again.x, data.x[again.perm]) and torch.equal(again.inv_perm[again.perm], torch.arange(50))


@requires_torch
def test_transform_checks_and_lazy_pyg(tmp_path):
    import dfgnn.torch as dt
    with pytest.raises(dfgnn.InvalidArgumentError, match="unknown reorder method 'bfs'"):
        dt.Reorder("bfs")
    assert repr(dt.Reorder("metis", parts=16)) == "Reorder('metis', parts=16)"
    code = "import sys, dfgnn.torch; sys.exit('torch_geometric' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, "import dfgnn.torch imported torch_geometric" + r.stderr[-2000:]
