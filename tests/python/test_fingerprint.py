"""Degree fingerprints: values against an independent NumPy computation, JSON, bucket key, distance."""

import json
import math
import re

import numpy as np
import pytest

import dfgnn


def numpy_fingerprint(degrees):
    """The fingerprint fields from dfgnn.h, computed from in-degrees with NumPy."""
    d = np.sort(np.asarray(degrees, dtype=np.int64))
    n, e = len(d), int(d.sum())
    mean = e / n
    quantile = lambda q: float(d[max(0, math.ceil(q * n) - 1)])  # noqa: E731  nearest rank
    cv = float(d.std() / mean) if mean > 0 else 0.0
    gini = float((2 * np.arange(1, n + 1) - n - 1).dot(d) / (n * e)) if e > 0 else 0.0
    hist = np.zeros(24)
    for x in d:
        b = 0 if x == 0 else min(int(x).bit_length(), 23)
        hist[b] += 1
    top = int(math.ceil(0.01 * n))
    return {
        "version": 1, "num_nodes": n, "num_edges": e, "mean_degree": mean, "max_degree": int(d[-1]),
        "p50": quantile(0.5), "p90": quantile(0.9), "p99": quantile(0.99), "p999": quantile(0.999),
        "cv": cv, "gini": gini, "hist": (hist / n).tolist(),
        "top1pct_edge_share": float(d[-top:].sum() / e),
        "hub_rows": [int((d >= 2 ** (k + 6)).sum()) for k in range(10)],
    }


def assert_fingerprint_close(got, want):
    assert list(got) == list(want)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key


def test_cora_fingerprint(cora_path):
    g = dfgnn.Graph.from_file(cora_path)
    fp = g.fingerprint
    ei = np.loadtxt(cora_path / "edges.txt", dtype=np.int64, comments="#").T
    degrees = np.bincount(ei[1], minlength=2708)
    assert_fingerprint_close(fp, numpy_fingerprint(degrees))
    assert fp["num_nodes"] == 2708 and fp["num_edges"] == 10556 and fp["max_degree"] == 168
    assert fp["mean_degree"] == pytest.approx(10556 / 2708)
    assert g.bucket_key == "n2^11.e2^13.max2^7.cv1"


@pytest.mark.parametrize("make", [
    lambda: dfgnn.Graph.rmat(11, 20000, seed=3),
    lambda: dfgnn.Graph.planted_hubs(3000, 3, 2, 1500, seed=4),
    lambda: dfgnn.Graph([[0, 1, 2], [1, 2, 0]], num_nodes=10),   # mostly empty rows
])
def test_fingerprint_values(make):
    g = make()
    assert_fingerprint_close(g.fingerprint, numpy_fingerprint(g.in_degrees()))


def test_fingerprint_is_a_fresh_dict():
    g = dfgnn.Graph([[0, 1], [1, 0]])
    fp = g.fingerprint
    fp["num_nodes"] = 99
    fp["hist"][0] = 5
    assert g.fingerprint["num_nodes"] == 2 and g.fingerprint["hist"][0] == 0


def test_json_round_trip(cora_path):
    g = dfgnn.Graph.from_file(cora_path)
    text = g.fingerprint_json
    parsed = json.loads(text)
    assert list(parsed) == list(g.fingerprint)          # fixed key order
    assert parsed["num_edges"] == 10556
    assert dfgnn.parse_fingerprint(text) == g.fingerprint
    assert dfgnn.fingerprint_to_json(dfgnn.parse_fingerprint(text)) == text
    assert dfgnn.fingerprint_to_json(g) == text


def test_parse_errors():
    with pytest.raises(dfgnn.ParseError) as e:
        dfgnn.parse_fingerprint("{not json")
    assert isinstance(e.value, ValueError)
    bad = json.loads(dfgnn.Graph([[0], [1]]).fingerprint_json)
    bad["version"] = 999
    with pytest.raises(dfgnn.ParseError):
        dfgnn.parse_fingerprint(json.dumps(bad))
    with pytest.raises(dfgnn.InvalidArgumentError, match="lacks the key 'gini'"):
        fp = dfgnn.Graph([[0], [1]]).fingerprint
        del fp["gini"]
        dfgnn.bucket_key(fp)


def test_bucket_key_and_distance(cora_path):
    cora = dfgnn.Graph.from_file(cora_path)
    rmat = dfgnn.Graph.rmat(14, 200000, seed=1)
    key = rmat.bucket_key
    assert re.fullmatch(r"n2\^\d+\.e2\^\d+\.max2\^\d+\.cv\d+", key)
    assert key.startswith("n2^14.")
    assert dfgnn.bucket_key(rmat.fingerprint) == key
    assert cora.distance(cora) == 0.0
    assert cora.distance(cora.fingerprint_json) == 0.0
    d = cora.distance(rmat)
    assert d > 0 and d == pytest.approx(rmat.distance(cora))
    same_shape = dfgnn.Graph.from_file(cora_path, add_self_loops=True)
    assert 0 < cora.distance(same_shape) < d
    assert dfgnn.fingerprint_distance(cora.fingerprint, rmat) == pytest.approx(d)
    with pytest.raises(dfgnn.InvalidArgumentError):
        dfgnn.fingerprint_distance(cora, 3)
