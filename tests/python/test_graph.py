"""dfgnn.Graph: construction from edge_index / CSR / files / generators, validation errors, CSR and CSC."""

import gc

import numpy as np
import pytest

import dfgnn

# A PyG edge_index (row 0 = source j, row 1 = target i): edges 0->1, 1->2, 2->0, 2->1, 3->1.
EDGE_INDEX = [[0, 1, 2, 2, 3],
              [1, 2, 0, 1, 1]]
# CSR by destination (row i lists the sources of its in-edges, in input order).
ROW_PTR = [0, 1, 4, 5, 5]
COL_IDX = [2, 0, 2, 3, 1]
EDGE_ID = [2, 0, 3, 4, 1]


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_edge_index_to_csr(dtype):
    g = dfgnn.Graph(np.array(EDGE_INDEX, dtype=dtype))
    assert (g.num_nodes, g.num_edges) == (4, 5)
    row_ptr, col_idx, edge_id = g.csr()
    assert row_ptr.dtype == np.int32 and col_idx.dtype == np.int32 and edge_id.dtype == np.int32
    assert row_ptr.tolist() == ROW_PTR
    assert col_idx.tolist() == COL_IDX
    assert edge_id.tolist() == EDGE_ID


def test_csc_is_the_transpose():
    g = dfgnn.Graph(np.array(EDGE_INDEX))
    col_ptr, row_idx, csr_pos = g.csc()
    row_ptr, col_idx, _ = g.csr()
    # Column j lists the destinations of j's out-edges: 0->1; 1->2; 2->0, 2->1; 3->1.
    assert col_ptr.tolist() == [0, 1, 2, 4, 5]
    assert row_idx.tolist() == [1, 2, 0, 1, 1]
    dst_of_csr = np.repeat(np.arange(4), np.diff(row_ptr))
    for j in range(4):
        for p in range(col_ptr[j], col_ptr[j + 1]):
            assert col_idx[csr_pos[p]] == j
            assert dst_of_csr[csr_pos[p]] == row_idx[p]


def test_lists_num_nodes_and_isolated_nodes():
    g = dfgnn.Graph(EDGE_INDEX, num_nodes=7)
    assert (g.num_nodes, g.num_edges) == (7, 5)
    assert g.csr()[0].tolist() == ROW_PTR + [5, 5, 5]
    assert g.in_degrees().tolist() == [1, 3, 1, 0, 0, 0, 0]
    # num_nodes inferred as max index + 1, like PyG's maybe_num_nodes
    assert dfgnn.Graph(EDGE_INDEX).num_nodes == 4
    assert dfgnn.Graph(np.zeros((2, 0), np.int64)).num_nodes == 0
    assert dfgnn.Graph([[], []], num_nodes=3).num_edges == 0


def test_edge_index_round_trip():
    ei = np.array(EDGE_INDEX)
    g = dfgnn.Graph(ei)
    back = g.edge_index()
    assert back.dtype == np.int64 and back.shape == (2, 5)
    assert sorted(map(tuple, back.T.tolist())) == sorted(map(tuple, ei.T.tolist()))
    assert dfgnn.Graph.from_edge_index(back).csr()[0].tolist() == ROW_PTR


def pyg_self_loops(edge_index, num_nodes):
    """PyG's remove_self_loops followed by add_self_loops, in pure Python."""
    kept = [(s, d) for s, d in zip(*edge_index) if s != d]
    return kept + [(i, i) for i in range(num_nodes)]


def test_self_loops_like_pyg():
    ei = [[0, 1, 1, 2, 2, 0],
          [1, 1, 2, 2, 0, 1]]   # loops 1->1, 2->2 and a duplicate 0->1
    g = dfgnn.Graph(np.array(ei), num_nodes=4, add_self_loops=True)
    expected = pyg_self_loops(ei, 4)
    assert g.num_edges == len(expected) == 8
    row_ptr, col_idx, edge_id = g.csr()
    got = {}
    for i in range(4):
        for p in range(row_ptr[i], row_ptr[i + 1]):
            got[int(edge_id[p])] = (int(col_idx[p]), i)
    # edge ids follow PyG's resulting edge_index order: kept edges, then loops 0..N-1
    assert [got[k] for k in range(len(expected))] == expected
    # an isolated node gets its loop too; the duplicate 0->1 stays (it counts twice in softmax)
    assert g.in_degrees().tolist() == [2, 3, 2, 1]


def test_duplicates_kept_or_rejected():
    ei = np.array([[0, 0, 1], [1, 1, 0]])
    assert dfgnn.Graph(ei).num_edges == 3
    with pytest.raises(dfgnn.GraphError, match="duplicate edge 0 -> 1") as e:
        dfgnn.Graph(ei, reject_duplicates=True)
    assert e.value.status == dfgnn.Status.DUPLICATE_EDGE
    assert isinstance(e.value, ValueError)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_from_csr(dtype):
    g = dfgnn.Graph.from_csr(np.array(ROW_PTR, dtype=dtype), np.array(COL_IDX, dtype=dtype))
    assert (g.num_nodes, g.num_edges) == (4, 5)
    row_ptr, col_idx, edge_id = g.csr()
    assert row_ptr.tolist() == ROW_PTR and col_idx.tolist() == COL_IDX
    assert edge_id.tolist() == list(range(5))  # edge ids are CSR positions of the given arrays
    loops = dfgnn.Graph.from_csr(ROW_PTR, COL_IDX, add_self_loops=True)
    assert loops.num_edges == 5 + 4


def test_views_are_read_only_and_keep_the_graph_alive():
    g = dfgnn.Graph(np.array(EDGE_INDEX))
    row_ptr, col_idx, _ = g.csr()
    assert not row_ptr.flags.writeable
    with pytest.raises(ValueError):
        row_ptr[0] = 1
    del g
    gc.collect()
    assert row_ptr.tolist() == ROW_PTR and col_idx.tolist() == COL_IDX


def test_read_only_and_strided_inputs():
    ei = np.array(EDGE_INDEX, dtype=np.int64)
    ei.flags.writeable = False
    assert dfgnn.Graph(ei).num_edges == 5
    # a C-contiguous slice of a bigger array is fine (no copy needed)
    big = np.array([EDGE_INDEX, EDGE_INDEX])
    assert dfgnn.Graph(big[1]).csr()[0].tolist() == ROW_PTR


class DLPackOnly:
    """An array known only through the DLPack protocol (like a tensor of another framework)."""

    def __init__(self, a):
        self.a = a
        self.shape = a.shape

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()

    def max(self):
        return self.a.max()


def test_any_dlpack_array():
    g = dfgnn.Graph(DLPackOnly(np.array(EDGE_INDEX, dtype=np.int32)))
    assert g.csr()[1].tolist() == COL_IDX
    g = dfgnn.Graph.from_csr(DLPackOnly(np.array(ROW_PTR)), DLPackOnly(np.array(COL_IDX)))
    assert g.csr()[0].tolist() == ROW_PTR


# ---------------------------------------------------------------- bad inputs


def test_wrong_shape():
    with pytest.raises(dfgnn.InvalidArgumentError) as e:
        dfgnn.Graph(np.zeros((3, 5), np.int64), num_nodes=4)
    assert str(e.value).startswith("edge_index must have shape [2, E], got [3, 5]")
    assert e.value.status == dfgnn.Status.INVALID_ARGUMENT and e.value.kind == "shape"
    assert isinstance(e.value, ValueError) and isinstance(e.value, dfgnn.Error)
    with pytest.raises(ValueError, match=r"must have shape \[2, E\], got \[10\]"):
        dfgnn.Graph(np.arange(10), num_nodes=10)
    with pytest.raises(ValueError, match=r"row_ptr must have shape \[N \+ 1\]"):
        dfgnn.Graph.from_csr(np.zeros((2, 2), np.int64), np.zeros(0, np.int64))


def test_wrong_dtype():
    with pytest.raises(dfgnn.DTypeError, match="edge_index must have dtype int32 or int64, got float32") as e:
        dfgnn.Graph(np.zeros((2, 5), np.float32), num_nodes=4)
    assert isinstance(e.value, TypeError) and isinstance(e.value, ValueError)
    with pytest.raises(TypeError, match="got uint8"):
        dfgnn.Graph(np.zeros((2, 5), np.uint8), num_nodes=4)
    with pytest.raises(dfgnn.DTypeError, match="row_ptr and col_idx must have the same dtype, got int32 and int64"):
        dfgnn.Graph.from_csr(np.array(ROW_PTR, np.int32), np.array(COL_IDX, np.int64))
    with pytest.raises(dfgnn.DTypeError, match="must hold integers"):
        dfgnn.Graph([[0.5, 1.0], [1.0, 0.0]])


def test_non_contiguous():
    ei = np.ascontiguousarray(np.array(EDGE_INDEX).T).T   # [2, E] view with strides (1, 2)
    assert not ei.flags.c_contiguous
    with pytest.raises(dfgnn.InvalidArgumentError, match="edge_index must be C-contiguous") as e:
        dfgnn.Graph(ei)
    assert e.value.kind == "layout" and "strides [1, 2]" in str(e.value)
    with pytest.raises(ValueError, match="col_idx must be C-contiguous"):
        dfgnn.Graph.from_csr(np.array(ROW_PTR), np.arange(10)[::2])


def test_not_an_array():
    with pytest.raises(dfgnn.InvalidArgumentError, match="must be an array .* got dict") as e:
        dfgnn.Graph({"a": 1}, num_nodes=3)
    assert e.value.kind == "type"


def test_index_out_of_range():
    with pytest.raises(dfgnn.GraphError, match=r"out of range \[0, 4\)") as e:
        dfgnn.Graph(np.array([[0, 1, 9], [1, 2, 0]]), num_nodes=4)
    assert e.value.status == dfgnn.Status.INDEX_OUT_OF_RANGE
    assert e.value.function == "dfgnnGraphCreateCoo"
    assert e.value.message in str(e.value) and "INDEX_OUT_OF_RANGE" in str(e.value)
    with pytest.raises(dfgnn.GraphError, match="-1 is out of range"):
        dfgnn.Graph(np.array([[0, -1], [1, 0]]), num_nodes=2)
    with pytest.raises(dfgnn.GraphError, match="out of range"):
        dfgnn.Graph.from_csr([0, 1, 2], [0, 5])


def test_row_ptr_errors():
    cases = [
        ([1, 2, 3], [0, 1], dfgnn.Status.ROW_PTR_START, r"row_ptr\[0\] = 1 but must be 0"),
        ([0, 2, 1], [0, 1], dfgnn.Status.ROW_PTR_DECREASING, "row_ptr decreases at row 1"),
        ([0, 1, 1], [0, 1], dfgnn.Status.ROW_PTR_END, "must equal nnz = 2"),
    ]
    for row_ptr, col_idx, status, message in cases:
        with pytest.raises(dfgnn.GraphError, match=message) as e:
            dfgnn.Graph.from_csr(np.array(row_ptr), np.array(col_idx))
        assert e.value.status == status
        assert e.value.function == "dfgnnGraphCreateCsr"


def test_negative_num_nodes():
    with pytest.raises(dfgnn.InvalidArgumentError, match="num_nodes is negative") as e:
        dfgnn.Graph(np.zeros((2, 0), np.int64), num_nodes=-1)
    assert e.value.status == dfgnn.Status.NEGATIVE_SIZE


def test_errors_pickle():
    import pickle
    try:
        dfgnn.Graph.from_csr([1, 1], [0])
    except dfgnn.GraphError as e:
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is dfgnn.GraphError and back.status == e.status and str(back) == str(e)


# ---------------------------------------------------------------- files


def test_cora(cora_path):
    g = dfgnn.Graph.from_file(cora_path)
    assert (g.num_nodes, g.num_edges) == (2708, 10556)
    assert dfgnn.Graph.from_file(str(cora_path / "edges.txt")).num_edges == 10556
    loops = dfgnn.Graph.from_file(cora_path, add_self_loops=True)
    assert (loops.num_nodes, loops.num_edges) == (2708, 10556 + 2708)
    # same graph as from its edge list through numpy
    ei = np.ascontiguousarray(np.loadtxt(cora_path / "edges.txt", dtype=np.int64, comments="#").T)
    assert np.array_equal(dfgnn.Graph(ei, num_nodes=2708).csr()[0], g.csr()[0])


def test_file_errors(tmp_path):
    missing = tmp_path / "nope.txt"
    with pytest.raises(dfgnn.IoError) as e:
        dfgnn.Graph.from_file(missing)
    assert isinstance(e.value, OSError)
    assert str(missing) in str(e.value) and e.value.status == dfgnn.Status.IO_ERROR
    bad = tmp_path / "bad.txt"
    bad.write_text("# nodes 3 edges 2\n0 1\n1 x\n")
    with pytest.raises(dfgnn.ParseError) as e:
        dfgnn.Graph.from_file(bad)
    assert isinstance(e.value, ValueError) and e.value.status == dfgnn.Status.PARSE_ERROR


def test_matrix_market(tmp_path):
    mtx = tmp_path / "g.mtx"
    mtx.write_text("%%MatrixMarket matrix coordinate pattern general\n3 3 3\n1 2\n2 3\n3 1\n")
    g = dfgnn.Graph.from_file(mtx)
    assert (g.num_nodes, g.num_edges) == (3, 3)
    # entry (r, c) is the edge r -> c (1-based): 0->1, 1->2, 2->0
    assert g.csr()[1].tolist() == [2, 0, 1]


# ---------------------------------------------------------------- generators


def test_rmat():
    a = dfgnn.Graph.rmat(10, 8000, seed=7)
    b = dfgnn.Graph.rmat(10, 8000, seed=7)
    c = dfgnn.Graph.rmat(10, 8000, seed=8)
    assert a.num_nodes == 1024 and 0 < a.num_edges <= 8000
    assert np.array_equal(a.csr()[1], b.csr()[1]) and np.array_equal(a.csr()[0], b.csr()[0])
    assert not np.array_equal(a.csr()[0], c.csr()[0])
    ei = a.edge_index()
    assert (ei[0] != ei[1]).all()                                # no self-loops by default
    assert len(set(map(tuple, ei.T.tolist()))) == a.num_edges    # deduplicated
    raw = dfgnn.Graph.rmat(10, 8000, seed=7, dedup=False, self_loops=True)
    assert raw.num_edges == 8000
    sym = dfgnn.Graph.rmat(8, 500, seed=1, symmetrize=True)
    pairs = set(map(tuple, sym.edge_index().T.tolist()))
    assert all((d, s) in pairs for s, d in pairs)
    assert a.fingerprint["max_degree"] > 4 * a.fingerprint["mean_degree"]   # power-law: hubs
    with pytest.raises(dfgnn.InvalidArgumentError):
        dfgnn.Graph.rmat(10, 100, a=0.9, b=0.9, c=0.9)


def test_planted_hubs():
    g = dfgnn.Graph.planted_hubs(2000, 4, 3, 500, seed=2)
    deg = g.in_degrees()
    assert g.num_nodes == 2000
    assert (deg[:3] >= 500).all() and np.median(deg[3:]) <= 8
    assert g.fingerprint["hub_rows"][2] == 3      # rows with degree >= 256: the three hubs
