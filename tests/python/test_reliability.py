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
