"""Where dispatch's answer came from (explain's origin) and the shipped tuning database.

conftest.py switches the shipped layer off (DFGNN_SHIPPED_DB=off) for every other test; the tests
here run fresh processes with the layer as an installed package has it, or with a database they
build themselves.
"""

import re
import json
import os
import pathlib
import subprocess
import sys

import pytest

import dfgnn
from conftest import HAS_TORCH, REPO, requires_gpu

PACKAGE = pathlib.Path(dfgnn.__file__).resolve().parent
INSTALLED = sorted((PACKAGE / "data" / "tuning").glob("*.db"))

# Explains the forward of each (graph, op) in a fresh process and prints the answers as JSON.
_EXPLAIN = r"""
import json, sys
import dfgnn
out = []
for path, (model, dtype, heads, dim) in json.loads(sys.argv[1]):
    g = dfgnn.Graph.from_file(path)
    op = dfgnn.op(model, dtype, heads=heads, dim=dim)
    for p in dfgnn.explain(g, op):
        out.append(dict(p, graph=path, op=[model, dtype, heads, dim]))
print(json.dumps(out))
"""


def _explain_in_fresh_process(tmp_path, cases, shipped):
    env = dict(os.environ, DFGNN_CACHE_DIR=str(tmp_path / "cache"), DFGNN_TUNE="off")
    env.pop("DFGNN_SITE_DB", None)
    if shipped is None:
        env.pop("DFGNN_SHIPPED_DB", None)  # as a user's process: the installed databases
    else:
        env["DFGNN_SHIPPED_DB"] = str(shipped)
    done = subprocess.run([sys.executable, "-c", _EXPLAIN, json.dumps(cases)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_explain_names_the_default_rule_also_when_cached(tmp_path, cora_path):
    c = dfgnn.Context()
    dfgnn.set_database(user=tmp_path / "tuning.db", sites=[], context=c)
    g = dfgnn.Graph.from_file(cora_path)
    op = dfgnn.op("transformer", "float32", 1, 64)
    for _ in range(2):
        (p,) = dfgnn.explain(g, op, context=c)
        if p["origin"] != "default":  # a GPU with something tuned for cora in the scratch database
            pytest.skip(f"dispatch answered {p['origin']!r}")
        assert p["cached"] is True and p["level"] == "cache"
        assert re.fullmatch(r"fitted rule leaf \d+|hand rule", p["rule"]), p["rule"]
        assert p["origin_detail"] == "default rule: " + p["rule"]
        assert "layer" not in p


def test_package_tools_find_the_shipped_directory(tmp_path):
    """The package's dfgnn-db (in dfgnn/bin/) finds dfgnn/data/tuning/ as libdfgnn does."""
    if not (PACKAGE / "data" / "tuning").is_dir():
        pytest.skip(f"{PACKAGE / 'data' / 'tuning'} is not installed (no shipped database in this build)")
    env = dict(os.environ)
    env.pop("DFGNN_SHIPPED_DB", None)
    done = subprocess.run([str(PACKAGE / "bin" / "dfgnn-db"), "--db", str(tmp_path / "none.db"), "layers"], env=env,
                          capture_output=True, text=True)
    assert f"shipped databases: installed in {PACKAGE / 'data' / 'tuning'}" in done.stdout, done.stdout + done.stderr
    for db in INSTALLED:
        assert f"shipped  {db}: ok" in done.stdout, done.stdout


def _sm90():
    if not HAS_TORCH:
        return False, "PyTorch is not installed (needed to read the GPU's architecture)"
    import torch
    if not torch.cuda.is_available():
        return False, "no CUDA device"
    cc = torch.cuda.get_device_capability()
    return cc == (9, 0), f"the GPU is sm_{cc[0]}{cc[1]}, the shipped database is for sm_90"


@requires_gpu
def test_installed_shipped_database_answers_on_sm90(tmp_path, cora_path):
    """After pip install: a fresh process with an empty user database takes its answers from the
    shipped layer (exact or nearest) wherever a database layer answers at all."""
    ok, reason = _sm90()
    if not ok:
        pytest.skip(reason)
    if not INSTALLED:
        pytest.skip(f"no shipped database installed in {PACKAGE / 'data' / 'tuning'}")
    graphs = [str(cora_path)]
    shared = REPO.parent / "shared" / "datasets"
    graphs += [str(d) for d in sorted(shared.glob("*")) if (d / "edges.txt").exists() or (d / "edges.txt.gz").exists()]
    ops = [("transformer", "float32", 1, 128), ("transformer", "float32", 4, 64), ("gat", "float32", 1, 128),
           ("gatv2", "float32", 1, 128)]
    answers = _explain_in_fresh_process(tmp_path, [[g, op] for g in graphs for op in ops], shipped=None)
    layered = [a for a in answers if "layer" in a]
    assert layered, "no pass was answered by a database layer: " + json.dumps(answers[:4])
    assert {a["layer"] for a in layered} == {"shipped"}, json.dumps(layered[:4])
    assert all(a["source"] in {str(p) for p in INSTALLED} for a in layered)


@requires_gpu
def test_own_shipped_database_in_a_fresh_process(tmp_path):
    """A database tuned here, exported as dfgnn-db does and shipped through DFGNN_SHIPPED_DB, is
    found and used by a fresh process, which says so."""
    path = tmp_path / "graph.txt"
    n = 2000
    edges = [((i * 7 + k) % n, i) for i in range(n) for k in range(1 + i % 9) if (i * 7 + k) % n != i]
    path.write_text(f"# nodes {n} edges {len(edges)}\n" + "".join(f"{j} {i}\n" for j, i in edges))
    c = dfgnn.Context()
    dfgnn.set_database(user=tmp_path / "tuned.db", sites=[], context=c)
    g = dfgnn.Graph.from_file(path)
    op = dfgnn.op("transformer", "float32", 1, 64)
    dfgnn.tune(g, op, budget_seconds=2, context=c)
    shipped = tmp_path / "share" / "sm90.db"
    shipped.parent.mkdir()
    export = subprocess.run([str(PACKAGE / "bin" / "dfgnn-db"), "--db", str(tmp_path / "tuned.db"), "export",
                             str(shipped)], capture_output=True, text=True)
    assert export.returncode == 0, export.stdout + export.stderr
    (answer,) = _explain_in_fresh_process(tmp_path, [[str(path), ["transformer", "float32", 1, 64]]],
                                          shipped=shipped.parent)
    assert answer["origin"] == "exact" and answer["layer"] == "shipped", answer
    assert answer["source"] == str(shipped)
