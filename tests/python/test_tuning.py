"""Tuning from Python: database layers, the tune switch, explain (no GPU needed), tune (GPU)."""

import pytest

import dfgnn
from conftest import requires_gpu


@pytest.fixture
def ctx(tmp_path):
    c = dfgnn.Context()
    dfgnn.set_database(user=tmp_path / "tuning.db", sites=[], context=c)
    return c


def test_explain_default_rule(ctx, cora_path):
    g = dfgnn.Graph.from_file(cora_path, add_self_loops=True)
    op = dfgnn.op("gat", "float32", heads=8, dim=8)
    fwd = dfgnn.explain(g, op, context=ctx)
    assert isinstance(fwd, list) and len(fwd) == 1
    assert fwd[0]["level"] in ("default", "cache") and fwd[0]["schedule"]
    assert fwd[0]["schedule"] == dfgnn.ops.schedule(g, op, context=ctx)
    bwd = dfgnn.explain(g, op, "backward", context=ctx)
    assert len(bwd) == 2 and bwd[0]["pass"] != bwd[1]["pass"]
    assert "|".join(p["schedule"] for p in bwd) == dfgnn.ops.schedule(g, op, "backward", context=ctx)


def test_database_layers(tmp_path, cora_path):
    c = dfgnn.Context()
    # a missing site database is logged and skipped; "" disables the user database
    dfgnn.set_database(user="", sites=[tmp_path / "nope.db", tmp_path / "other.db"], context=c)
    g = dfgnn.Graph.from_file(cora_path)
    assert dfgnn.explain(g, dfgnn.op("agnn", "float16", 1, 16), context=c)[0]["schedule"]
    dfgnn.set_database(context=c)     # back to the environment's defaults
    assert c.modules_from_database() == 0


def test_tune_mode(ctx):
    dfgnn.set_tune_mode("on_miss", context=ctx)
    dfgnn.set_tune_mode("off", context=ctx)
    dfgnn.set_tune_mode(False, context=ctx)
    with pytest.raises(dfgnn.InvalidArgumentError, match="'off' or 'on_miss'"):
        dfgnn.set_tune_mode("sometimes", context=ctx)


def test_tune_needs_a_device(ctx):
    if dfgnn.has_device()[0]:
        pytest.skip("a CUDA device is present (see test_tune_on_gpu)")
    g = dfgnn.Graph.rmat(10, 8000, seed=1)
    with pytest.raises(dfgnn.NoDeviceError):
        dfgnn.tune(g, dfgnn.op("transformer", "float32", 2, 32), budget_seconds=1, context=ctx)


@requires_gpu
def test_tune_on_gpu(ctx):
    g = dfgnn.Graph.rmat(12, 40000, seed=1, add_self_loops=True)
    op = dfgnn.op("transformer", "float32", 2, 32)
    report = dfgnn.tune(g, op, budget_seconds=5, context=ctx)
    assert len(report) == 1
    after = dfgnn.explain(g, op, context=ctx)
    assert after[0]["level"] in ("cache", "tuned", "exact")


@requires_gpu
def test_tuning_records_the_runtimes_gpu_name(ctx, tmp_path):
    """The environment's GPU name comes from the driver's cuDeviceGetName (cudaGetDeviceProperties
    takes milliseconds); stored results must carry the name the CUDA runtime reports."""
    import sqlite3
    torch = pytest.importorskip("torch", reason="torch names the GPU independently of dfgnn")
    g = dfgnn.Graph.rmat(10, 8000, seed=1, add_self_loops=True)
    dfgnn.tune(g, dfgnn.op("gat", "float32", 1, 16), budget_seconds=1, context=ctx)
    with sqlite3.connect(tmp_path / "tuning.db") as conn:
        names = {row[0] for row in conn.execute("SELECT gpu_name FROM environments")}
    assert names == {torch.cuda.get_device_name()}


@requires_gpu
@pytest.mark.parametrize("model", ["gat", "transformer"])
def test_tune_edge_features_on_gpu(ctx, model):
    """Ops with edge features tune (the measurer feeds and checks the edge input and its gradient) under their
    own database key: the edge-less op of the same shape is left to the default rule."""
    g = dfgnn.Graph.rmat(11, 20000, seed=2, add_self_loops=True)
    op = dfgnn.op(model, "float32", 2, 32, edge_features=True)
    for direction, passes in (("forward", 1), ("backward", 2)):
        report = dfgnn.tune(g, op, direction, budget_seconds=5, context=ctx)
        assert len(report) == passes
        assert all(p["level"] in ("cache", "tuned", "exact") for p in dfgnn.explain(g, op, direction, context=ctx))
    plain = dfgnn.explain(g, dfgnn.op(model, "float32", 2, 32), context=ctx)
    assert plain[0]["origin"] == "default", plain  # level is "cache": explain reports the remembered answer
