"""Careless input through the Python package (issue 15, item 9): counts that are not integers,
arrays the C API would misread (masked, non-native byte order), all-negative ids, embedded NULs in
strings passed to C, sizes beyond the kernels' limit, and fingerprints that would not read back."""

import json
import math

import numpy as np
import pytest

import dfgnn

EDGE_INDEX = np.array([[0, 1, 2], [1, 2, 0]], dtype=np.int64)


def test_num_nodes_must_be_an_integer():
    for bad in (3.9, 3.0, "3", True):
        with pytest.raises(TypeError, match="num_nodes must be an integer"):
            dfgnn.Graph(EDGE_INDEX, num_nodes=bad)
    # Python and NumPy integers are accepted as they are.
    for good in (4, np.int32(4), np.int64(4), np.uint8(4)):
        g = dfgnn.Graph(EDGE_INDEX, num_nodes=good)
        assert g.num_nodes == 4


def test_masked_arrays_are_rejected():
    masked = np.ma.masked_array(EDGE_INDEX, mask=[[0, 0, 1], [0, 0, 1]])
    with pytest.raises(dfgnn.InvalidArgumentError, match="masked array"):
        dfgnn.Graph(masked, num_nodes=3)
    g = dfgnn.Graph(EDGE_INDEX)
    h = np.ma.masked_array(np.ones((3, 1, 2)), mask=np.zeros((3, 1, 2)))
    with pytest.raises(dfgnn.InvalidArgumentError, match="masked array"):
        dfgnn.reference_forward(g, "agnn", {"h": h, "beta": np.ones(1)})


def test_big_endian_arrays_name_the_byte_order():
    big = EDGE_INDEX.astype(">i8")
    with pytest.raises(dfgnn.InvalidArgumentError, match="non-native byte order") as e:
        dfgnn.Graph(big, num_nodes=3)
    assert ">i8" in str(e.value)
    # Converted as the message says, it works.
    assert dfgnn.Graph(big.astype(big.dtype.newbyteorder("=")), num_nodes=3).num_edges == 3


def test_all_negative_ids_name_the_negative_id():
    with pytest.raises(dfgnn.GraphError, match="negative node id") as e:
        dfgnn.Graph(np.array([[-3, -2], [-2, -5]]))
    assert "num_nodes is negative" not in str(e.value)


@pytest.mark.parametrize("text", ["\x00", "subwarp:lanes=8\x00garbage"])
def test_schedule_with_embedded_nul_is_rejected(text):
    g = dfgnn.Graph(EDGE_INDEX)
    op = dfgnn.op("gat", "float32", heads=1, dim=8)
    with pytest.raises(dfgnn.InvalidArgumentError, match="schedule contains an embedded NUL"):
        dfgnn.ops.schedule(g, op, schedule=text)
    with pytest.raises(dfgnn.InvalidArgumentError, match="embedded NUL"):
        dfgnn.ops.compile(op, schedule=text, graph=g)
    with pytest.raises(dfgnn.InvalidArgumentError, match="embedded NUL"):
        dfgnn.ops.workspace_size(g, op, schedule=text)


def test_paths_with_embedded_nul_are_rejected(tmp_path):
    ctx = dfgnn.Context()
    with pytest.raises(dfgnn.InvalidArgumentError, match="user contains an embedded NUL"):
        dfgnn.set_database("a\x00b", context=ctx)
    with pytest.raises(dfgnn.InvalidArgumentError, match="sites contains an embedded NUL"):
        dfgnn.set_database("", ["x\x00y"], context=ctx)
    path = tmp_path / "g.txt"
    path.write_text("# nodes 2 edges 1\n0 1\n")
    with pytest.raises(dfgnn.InvalidArgumentError, match="path contains an embedded NUL"):
        dfgnn.Graph.from_file(str(path) + "\x00.ignored")


def test_huge_head_dim_is_refused_at_once():
    g = dfgnn.Graph(EDGE_INDEX)
    for heads, dim in ((1, 2**30 + 1), (1, 2**31 - 1), (100000, 100000)):
        op = dfgnn.op("transformer", "float32", heads=heads, dim=dim)
        with pytest.raises(dfgnn.NotSupportedError, match="16777216"):
            dfgnn.ops.schedule(g, op)
        with pytest.raises(dfgnn.NotSupportedError, match="16777216"):
            dfgnn.explain(g, op)


def test_reference_ops_refuse_a_huge_dim_before_allocating():
    # Issue 26: reference_forward(..., dim=2**30 + 1) asked NumPy for 24 GiB (MemoryError) where the
    # C API returns NOT_SUPPORTED; now that status, with the C API's limit, at once.
    g = dfgnn.Graph(EDGE_INDEX)
    inputs = {"q": np.ones((3, 1, 2)), "k": np.ones((3, 1, 2)), "v": np.ones((3, 1, 2))}
    for heads, dim in ((1, 2**30 + 1), (100000, 100000)):
        with pytest.raises(dfgnn.NotSupportedError, match=f"{heads} \\* {dim} exceeds 16777216 channels per node"):
            dfgnn.reference_forward(g, "transformer", inputs, heads=heads, dim=dim)
        with pytest.raises(dfgnn.NotSupportedError, match="exceeds 16777216 channels per node"):
            dfgnn.reference_backward(g, "transformer", inputs, np.ones((3, 1, 2)), heads=heads, dim=dim)
    assert dfgnn._dfgnn.MAX_CHANNELS == 2**24


def test_parse_error_quotes_matrix_market_words_clean(tmp_path):
    # Issue 26: a banner word reached ParseError (and the terminal) with its escape sequences raw.
    path = tmp_path / "evil.mtx"
    path.write_bytes(b"%%MatrixMarket matrix coordinate pattern general\x1b]0;title\x07\x1b[31m\xe2\x80\xae\n"
                     b"2 2 1\n1 2\n")
    with pytest.raises(dfgnn.ParseError) as caught:
        dfgnn.Graph.from_file(str(path))
    message = str(caught.value)
    assert "symmetry 'general?]0;title??[31m???' is not general or symmetric" in message
    assert all(" " <= c <= "~" for c in message), repr(message)


def test_fingerprint_to_json_refuses_what_parse_rejects():
    fp = dfgnn.Graph(EDGE_INDEX).fingerprint
    assert dfgnn.parse_fingerprint(dfgnn.fingerprint_to_json(fp)) == fp
    for key, value, needle in (("num_nodes", -5, '"num_nodes" must be >= 0'), ("cv", math.nan, '"cv" must be finite'),
                               ("version", 99, '"version" 99')):
        bad = dict(fp)
        bad[key] = value
        with pytest.raises(dfgnn.InvalidArgumentError, match=needle):
            dfgnn.fingerprint_to_json(bad)
    json.loads(dfgnn.fingerprint_to_json(fp))


# ---------------------------------------------------------------- second audit (arguments)

def test_integers_beyond_their_c_type_name_the_argument():
    # An integer beyond its C type is refused naming the argument and value.
    for call, needle in ((lambda: dfgnn.Graph(EDGE_INDEX, num_nodes=2**63), "num_nodes = 9223372036854775808"),
                         (lambda: dfgnn.Graph.rmat(2**31, 10), "scale = 2147483648"),
                         (lambda: dfgnn.Graph.rmat(4, 2**63, seed=1), "edges = 9223372036854775808"),
                         (lambda: dfgnn.Graph.rmat(4, 10, seed=-1), "seed = -1"),
                         (lambda: dfgnn.Graph.planted_hubs(10, 2**31, 0, 0), "avg_degree = 2147483648"),
                         (lambda: dfgnn.Graph.planted_hubs(10, 2, 0, 0, seed=2**64), "seed = 18446744073709551616"),
                         (lambda: dfgnn.op("gat", heads=2**31), "heads = 2147483648"),
                         (lambda: dfgnn.op("gat", dim=-2**31 - 1), "dim = -2147483649")):
        with pytest.raises(dfgnn.InvalidArgumentError, match=needle + " is out of range"):
            call()
    # The extremes of each type still reach the library, which checks what it supports.
    assert dfgnn.Graph.rmat(4, 10, seed=2**64 - 1).num_nodes == 16
    with pytest.raises(dfgnn.InvalidArgumentError, match="scale must be in"):
        dfgnn.Graph.rmat(2**31 - 1, 10)


def test_op_sizes_must_be_integers():
    # Op sizes are integers: 2.5, "8" and True are refused, not truncated or parsed.
    for heads in (2.5, "8", True):
        with pytest.raises(TypeError, match="heads must be an integer"):
            dfgnn.op("gat", "float32", heads=heads, dim=8)
    assert dfgnn.op("gat", "float32", heads=np.int32(2), dim=np.int64(8)).heads == 2


def test_list_ids_beyond_int64_are_named():
    # List ids beyond int64 are refused naming the value, not wrapped.
    with pytest.raises(dfgnn.InvalidArgumentError, match="edge_index holds 9223372036854775809, beyond int64"):
        dfgnn.Graph([[2**63, 2**63 + 1], [2**63 + 1, 2**63]], num_nodes=2)


def test_flat_features_need_a_divisor_of_their_width(rng):
    g = dfgnn.Graph(EDGE_INDEX)
    inputs = {"h": rng.standard_normal((3, 8)), "beta": np.ones(1)}
    # Flat features need heads that divide their width; anything else is refused naming both.
    for kw, needle in (({"heads": 0}, "heads=0 does not divide its 8 channels"),
                       ({"heads": 3}, "heads=3 does not divide its 8 channels"),
                       ({"dim": 3}, "dim=3 does not divide its 8 channels")):
        with pytest.raises(dfgnn.InvalidArgumentError, match=needle):
            dfgnn.reference_forward(g, "agnn", inputs, **kw)
    out, _ = dfgnn.reference_forward(g, "agnn", inputs, heads=2)
    assert out.shape == (3, 2, 4)


def test_enum_arguments_refuse_bools_and_floats():
    g = dfgnn.Graph(EDGE_INDEX)
    op = dfgnn.op("gat", "float32", heads=1, dim=8)
    # Enum arguments refuse bools and floats instead of reading them as 1.
    for direction in (True, 1.7):
        with pytest.raises(dfgnn.InvalidArgumentError, match="direction must be 'forward' or 'backward'"):
            dfgnn.explain(g, op, direction)
    for model in (True, 1.5):
        with pytest.raises(dfgnn.InvalidArgumentError, match="unknown model"):
            dfgnn.op(model)
    with pytest.raises(dfgnn.InvalidArgumentError, match="unsupported dtype True"):
        dfgnn.op("gat", True)
    assert len(dfgnn.explain(g, op, 1)) == 2 and dfgnn.op(2).model == dfgnn.Model.TRANSFORMER


def test_tuning_calls_name_a_wrong_graph_or_op():
    g = dfgnn.Graph(EDGE_INDEX)
    op = dfgnn.op("gat", "float32", heads=1, dim=8)
    # A wrong graph or op is refused with dfgnn's error naming the argument and the type it got.
    with pytest.raises(dfgnn.InvalidArgumentError, match="graph must be a dfgnn.Graph, got str"):
        dfgnn.explain("data/cora", op)
    with pytest.raises(dfgnn.InvalidArgumentError, match="graph must be a dfgnn.Graph, got str"):
        dfgnn.tune("data/cora", op, budget_seconds=1)
    with pytest.raises(dfgnn.InvalidArgumentError, match="op must be a dfgnn.Op"):
        dfgnn.explain(g, "gat")
    with pytest.raises(dfgnn.InvalidArgumentError, match="graph must be a dfgnn.Graph, got int"):
        dfgnn.reference_forward(3, "agnn", {"h": np.ones((3, 1, 2)), "beta": np.ones(1)})
    with pytest.raises(dfgnn.InvalidArgumentError, match="budget_seconds must be positive"):
        dfgnn.tune(g, op, budget_seconds=math.nan)


def test_paths_with_a_colon_or_as_bytes(tmp_path):
    ctx = dfgnn.Context()
    # A database path holding ':' is refused (the joined list would split it).
    with pytest.raises(dfgnn.InvalidArgumentError, match="contains ':'"):
        dfgnn.set_database("", [tmp_path / "a:b.db"], context=ctx)
    # A bytes path is a path too.
    dfgnn.set_database(bytes(tmp_path / "user.db"), [bytes(tmp_path / "site.db")], context=ctx)
    assert dfgnn.explain(dfgnn.Graph(EDGE_INDEX), dfgnn.op("gat", "float32", 1, 8), context=ctx)
    path = tmp_path / "g.txt"
    path.write_text("# nodes 2 edges 1\n0 1\n")
    assert dfgnn.Graph.from_file(bytes(path)).num_edges == 1
