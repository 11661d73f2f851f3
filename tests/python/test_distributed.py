"""Distributed tuning and the DDP mini-batch example, on the CPU: ranks are processes started with
torchrun's environment and meeting through torch.distributed's gloo backend.

The ranks' measurer is injected: dfgnn_fake_tune (tests/distributed/) stores tuning runs measured on
fake timings through the database API, as the tuner stores real ones, so split, merge, export and
agreement run on real database files. Results are read back from the exported snapshot with sqlite3
(read-only), independently of the code under test.
"""

import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import dfgnn
from conftest import HAS_TORCH, REPO
from dfgnn import distributed as dd

WORKER = Path(__file__).resolve().parent / "distributed_worker.py"
EXAMPLE = REPO / "examples" / "ddp_minibatch.py"
H200, A100 = "NVIDIA H200", "NVIDIA A100-SXM4-80GB"


def _fake_tune():
    if os.environ.get("DFGNN_FAKE_TUNE"):
        return Path(os.environ["DFGNN_FAKE_TUNE"])
    build = Path(os.environ.get("DFGNN_BUILD_DIR", "build"))
    return (build if build.is_absolute() else REPO / build) / "tests" / "distributed" / "dfgnn_fake_tune"


FAKE_TUNE = _fake_tune()
requires_fake_tune = pytest.mark.skipif(not os.access(FAKE_TUNE, os.X_OK),
                                        reason=f"{FAKE_TUNE} is not built (cmake --build build --target "
                                               "dfgnn_fake_tune, or set DFGNN_FAKE_TUNE)")
requires_torch = pytest.mark.skipif(not HAS_TORCH, reason="PyTorch is not installed (torch.distributed)")


def _has_pyg():
    import importlib.util
    return HAS_TORCH and importlib.util.find_spec("torch_geometric") is not None


requires_pyg = pytest.mark.skipif(not _has_pyg(), reason="PyTorch Geometric is not installed (the example)")


def fake_tune(db, spec, model, heads, dim, direction, gpu, seed):
    out = subprocess.run([str(FAKE_TUNE), str(db), spec, model, "float32", str(heads), str(dim), direction, gpu,
                          str(seed)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def site_rows(path):
    """Every result of a snapshot: env class, pass, winner, runs, and the graph's edge count."""
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        rows = con.execute("SELECT r.env_class, r.direction, r.schedule, r.runs, r.median_ms, f.text "
                           "FROM results r JOIN fingerprints f ON f.id = r.fingerprint_id").fetchall()
    finally:
        con.close()
    return [dict(env_class=e, pass_=d, winner=s, runs=n, median_ms=m,
                 edges=dfgnn.parse_fingerprint(t)["num_edges"]) for e, d, s, n, m, t in rows]


def edges_of(spec):
    return dd.load_graph(spec).num_edges


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(argv_of_rank, world, timeout_s, extra_env=None):
    """Starts `world` processes with torchrun's environment; returns [(rc, stdout, stderr)] once all
    exit. One still running after timeout_s is a hang: killed, and the test fails."""
    port = free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1",
                   **(extra_env or {}))
        procs.append(subprocess.Popen(argv_of_rank(rank), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    deadline = time.monotonic() + timeout_s
    out, hung = [], []
    for rank, p in enumerate(procs):
        try:
            stdout, stderr = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            stdout, stderr = p.communicate()
            hung.append(rank)
        out.append((p.returncode, stdout, stderr))
    assert not hung, f"rank(s) {hung} still running after {timeout_s} s (a hang): " + \
        "\n".join(f"rank {r}: {o[2][-2000:]}" for r, o in enumerate(out))
    return out


def run_tuning(tmp_path, world, graphs, gpus, split=True, die_after=None, timeout_s=60, directions=("forward",)):
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    cfg = dict(graphs=graphs, ops=[["gat", "float32", 2, 16]], directions=list(directions), out=str(tmp_path / "site.db"),
               work_dir=str(work), split=split, timeout_s=timeout_s, fake_tune=str(FAKE_TUNE), gpus=gpus,
               die_after={str(k): v for k, v in (die_after or {}).items()})
    config = tmp_path / "config.json"
    config.write_text(json.dumps(cfg))
    procs = launch(lambda rank: [sys.executable, str(WORKER), str(config)], world, timeout_s + 60)
    results = []
    for rank in range(world):
        f = work / f"result-{rank}.json"
        results.append(json.loads(f.read_text()) if f.is_file() else None)
    return procs, results, work


# ------------------------------------------------------------------------------ no torch needed

@pytest.mark.parametrize("n", [0, 1, 5, 16, 1001])
@pytest.mark.parametrize("world", [1, 2, 3, 8])
def test_shard_is_disjoint_and_covering(n, world):
    items = list(range(100, 100 + n))
    shares = [dd.shard(items, r, world) for r in range(world)]
    flat = [x for s in shares for x in s]
    assert sorted(flat) == items and len(set(flat)) == n  # covering, disjoint
    assert max(map(len, shares)) - min(map(len, shares)) <= 1


def test_shard_rejects_a_rank_outside_the_world():
    with pytest.raises(ValueError, match="rank 2 is not in a world of 2"):
        dd.shard([1, 2, 3], 2, 2)
    with pytest.raises(ValueError, match="world of 0"):
        dd.shard([1], 0, 0)


def test_agreement_compares_the_ranks_of_one_gpu_class():
    def rec(rank, winner, ms, env, graph="g"):
        return dict(rank=rank, graph=graph, op="gat", direction="forward", env_class=env,
                    passes=[{"pass": "forward", "winner": winner, "winner_median_ms": ms}])
    same = dd.agreement([rec(0, "a", 1.0, "X"), rec(1, "a", 1.5, "X")])
    assert [a["agree"] for a in same] == [True] and same[0]["same_winner"]
    close = dd.agreement([rec(0, "a", 1.0, "X"), rec(1, "b", 1.02, "X")])
    assert close[0]["agree"] and not close[0]["same_winner"]
    far = dd.agreement([rec(0, "a", 1.0, "X"), rec(1, "b", 1.10, "X")])
    assert not far[0]["agree"]
    # other GPU classes, and problems only one rank tuned, are not compared
    assert dd.agreement([rec(0, "a", 1.0, "X"), rec(1, "b", 2.0, "Y"), rec(2, "c", 1.0, "X", graph="h")]) == []


def test_site_database_check_names_the_problem(tmp_path):
    with pytest.raises(dd.SiteDatabaseError, match=r"nope\.db: no such file"):
        dd.check_site_database(tmp_path / "nope.db")
    with pytest.raises(dd.SiteDatabaseError, match="not a regular file"):
        dd.check_site_database(tmp_path)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database" * 100)
    with pytest.raises(dd.SiteDatabaseError, match="junk.db"):
        dd.check_site_database(junk)
    with pytest.raises(FileNotFoundError, match="no tuning database to merge"):
        dd.merge_and_export([tmp_path / "rank-0000.db"], tmp_path / "site.db")
    assert not (tmp_path / "site.db").exists()


def make_site(path):
    """A valid site snapshot with one result (the example's tests dispatch from it)."""
    rank_db = path.with_name(path.stem + "-rank.db")
    fake_tune(rank_db, "rmat:7:900", "gat", 2, 16, "forward", H200, 1)
    dd.merge_and_export([rank_db], path)
    return path


@requires_fake_tune
def test_merge_pools_runs_and_a_failed_merge_leaves_the_snapshot(tmp_path):
    a, b = tmp_path / "rank-0000.db", tmp_path / "rank-0001.db"
    ra = fake_tune(a, "rmat:8:2000", "gat", 2, 16, "forward", H200, 1)
    rb = fake_tune(b, "rmat:8:2000", "gat", 2, 16, "forward", H200, 2)
    fake_tune(b, "rmat:7:900", "gat", 2, 16, "forward", H200, 3)
    site = tmp_path / "site.db"
    report = dd.merge_and_export([a, b, tmp_path / "rank-0002.db"], site)
    assert dd.check_site_database(site) == site
    assert report["missing"] == [str(tmp_path / "rank-0002.db")]
    rows = {r["edges"]: r for r in site_rows(site)}
    assert set(rows) == {edges_of("rmat:8:2000"), edges_of("rmat:7:900")}
    pooled = rows[edges_of("rmat:8:2000")]
    assert pooled["runs"] == 2 and pooled["env_class"] == "NVIDIA H200|sm_90|132"
    assert pooled["winner"] in {ra[0]["winner"], rb[0]["winner"]}
    assert rows[edges_of("rmat:7:900")]["runs"] == 1
    # a damaged source: the merge fails naming it, and the snapshot written before stays as it was
    before = site.read_bytes()
    bad = tmp_path / "rank-0003.db"
    bad.write_bytes(b"SQLite format 3\x00" + b"\x07" * 4000)
    with pytest.raises(RuntimeError, match="rank-0003.db"):
        dd.merge_and_export([a, bad], site)
    assert site.read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".site.db.merge")]


@requires_fake_tune
def test_a_world_of_one_needs_no_torch_distributed(tmp_path, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    calls = []

    def measure(spec, op, direction, budget, database):
        calls.append(spec)
        return fake_tune(database, spec, "gat", op.heads, op.dim, direction, H200, len(calls))

    report = dd.tune_distributed(["rmat:7:900", str(REPO / "data" / "cora")], [dfgnn.op("gat", "float32", 2, 16)],
                                 tmp_path / "site.db", tmp_path / "work", measure=measure)
    assert calls == ["rmat:7:900", str(REPO / "data" / "cora")] and report["world"] == 1
    assert {r["edges"] for r in site_rows(tmp_path / "site.db")} == {edges_of("rmat:7:900"), 10556}


@requires_fake_tune
def test_merge_command_finishes_what_a_dead_job_left(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    fake_tune(dd.rank_database(work, 0), "rmat:7:900", "gat", 2, 16, "forward", H200, 1)
    fake_tune(dd.rank_database(work, 3), "rmat:8:2000", "gat", 2, 16, "forward", H200, 2)
    p = subprocess.run([sys.executable, "-m", "dfgnn.distributed", "merge", str(work), "--out", str(tmp_path / "s.db")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert {r["edges"] for r in site_rows(tmp_path / "s.db")} == {edges_of("rmat:7:900"), edges_of("rmat:8:2000")}
    p = subprocess.run([sys.executable, "-m", "dfgnn.distributed", "merge", str(tmp_path / "none"), "--out",
                        str(tmp_path / "t.db")], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "no rank-*.db in" in p.stderr


def test_tune_command_rejects_a_malformed_op(tmp_path):
    p = subprocess.run([sys.executable, "-m", "dfgnn.distributed", "tune", "rmat:5", "--op", "gat:8", "--out",
                        str(tmp_path / "s.db"), "--work-dir", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--op 'gat:8': expected MODEL:HEADS:DIM" in p.stderr


def test_tune_command_names_a_bad_op_dtype_or_budget(tmp_path):
    # A bad op, dtype or budget (NaN included) ends the command with one line naming it, before any rank starts.
    for extra, needle in ((["--op", "resnet:1:8"], "--op 'resnet:1:8' --dtype 'float32': unknown model 'resnet'"),
                          (["--op", "gat:0:8"], "heads and dim must be >= 1"),
                          (["--dtype", "float99"], "unsupported dtype 'float99'"),
                          (["--budget", "nan"], "--budget nan must be a positive number of seconds"),
                          (["--budget", "0"], "--budget 0.0 must be a positive number of seconds"),
                          (["--timeout", "-1"], "--timeout -1.0 must be a positive number of seconds")):
        p = subprocess.run([sys.executable, "-m", "dfgnn.distributed", "tune", "rmat:5", "--out", str(tmp_path / "s.db"),
                            "--work-dir", str(tmp_path), *extra], capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and needle in p.stderr and "Traceback" not in p.stderr, (extra, p.stderr)
        assert p.stderr.strip().splitlines()[-1].startswith("dfgnn.distributed: "), p.stderr  # after runpy's warning
    for bad in (float("nan"), 0, -5.0, float("inf"), "20"):
        with pytest.raises(dfgnn.InvalidArgumentError, match="budget_seconds must be a positive number"):
            dd.tune_distributed(["rmat:5"], [dfgnn.op("gat", "float32", 1, 8)], tmp_path / "s.db", tmp_path / "w",
                                budget_seconds=bad)
    assert not (tmp_path / "w").exists()


# ------------------------------------------------------------------------------ 2-3 ranks (gloo)

@requires_torch
@requires_fake_tune
def test_two_ranks_split_the_graphs_and_export_one_snapshot(tmp_path):
    graphs = ["rmat:7:900", "rmat:8:2000", str(REPO / "data" / "cora")]
    procs, results, work = run_tuning(tmp_path, 2, graphs, [H200, H200], directions=["forward", "backward"])
    assert all(rc == 0 for rc, _, _ in procs), [p[2][-2000:] for p in procs]
    report = results[0]["report"]
    assert results[1]["report"] == report  # every rank returns rank 0's report
    by_rank = {r["rank"]: r["graphs"] for r in report["ranks"]}
    assert by_rank == {0: [graphs[0], graphs[2]], 1: [graphs[1]]}
    assert sorted((r["graph"], r["direction"]) for r in report["results"]) == \
        sorted((g, d) for g in graphs for d in ("forward", "backward"))
    # each rank's database holds only its graphs; the snapshot holds all, one run per pass
    assert {r["edges"] for r in site_rows(work / "rank-0001.db")} == {edges_of(graphs[1])}
    rows = site_rows(tmp_path / "site.db")
    assert len(rows) == 3 * 3 and all(r["runs"] == 1 for r in rows)  # 3 graphs x (forward, row, col)
    winners = {(r["edges"], r["pass_"]): r["winner"] for r in rows}
    pass_ids = {"forward": 0, "backward_row": 1, "backward_col": 2}
    for r in report["results"]:
        for p in r["passes"]:
            assert winners[(edges_of(r["graph"]), pass_ids[p["pass"]])] == p["winner"]
    assert report["agreement"] == [] and report["failures"] == []


@requires_torch
@requires_fake_tune
def test_ranks_of_one_class_agree_and_another_class_keeps_its_own_key(tmp_path):
    graphs = ["rmat:7:900", "rmat:8:2000"]
    procs, results, _ = run_tuning(tmp_path, 3, graphs, [H200, H200, A100], split=False)
    assert all(rc == 0 for rc, _, _ in procs), [p[2][-2000:] for p in procs]
    report = results[0]["report"]
    agreement = report["agreement"]
    assert len(agreement) == 2 and all(a["agree"] and a["ranks"] == [0, 1] for a in agreement)
    assert all(a["env_class"] == "NVIDIA H200|sm_90|132" for a in agreement)
    rows = site_rows(tmp_path / "site.db")
    by_class = {}
    for r in rows:
        by_class.setdefault(r["env_class"], {})[r["edges"]] = r
    assert set(by_class) == {"NVIDIA H200|sm_90|132", "NVIDIA A100-SXM4-80GB|sm_90|132"}
    assert all(r["runs"] == 2 for r in by_class["NVIDIA H200|sm_90|132"].values())  # pooled over ranks 0 and 1
    a100 = by_class["NVIDIA A100-SXM4-80GB|sm_90|132"]
    for r in report["results"]:
        if r["rank"] == 2:  # the A100's own winners, untouched by the H200 ranks
            assert a100[edges_of(r["graph"])]["winner"] == r["passes"][0]["winner"]
            assert a100[edges_of(r["graph"])]["runs"] == 1


@requires_torch
@requires_fake_tune
def test_a_rank_dying_mid_tuning_stops_the_export_and_leaves_the_databases_mergeable(tmp_path):
    graphs = ["rmat:7:900", "rmat:8:2000", "rmat:6:400", "rmat:7:1200"]
    start = time.monotonic()
    procs, results, work = run_tuning(tmp_path, 2, graphs, [H200, H200], die_after={1: 1}, timeout_s=30)
    assert procs[1][0] == 17 and results[1] is None
    assert procs[0][0] == 1 and "error" in results[0], procs[0][2][-2000:]
    assert "rank" in results[0]["error"] and "mergeable" in results[0]["error"]
    assert time.monotonic() - start < 80  # found out, not waited out past the timeout
    assert not (tmp_path / "site.db").exists()  # nothing exported
    # rank 0's share and the one problem rank 1 committed before it died merge into a snapshot
    dd.merge_and_export([dd.rank_database(work, r) for r in range(2)], tmp_path / "site.db")
    assert {r["edges"] for r in site_rows(tmp_path / "site.db")} == \
        {edges_of(graphs[0]), edges_of(graphs[2]), edges_of(graphs[1])}


# ------------------------------------------------------------------------------ the DDP example

def example(rank, tmp_path, site, *extra):
    return [sys.executable, str(EXAMPLE), "--device", "cpu", "--rmat", "9", "--edges-per-node", "4",
            "--train-nodes", "100", "--batch-size", "16", "--fanout", "3,3", "--features", "8", "--classes", "3",
            "--epochs", "1", "--max-steps", "2", "--site-db", str(site), "--timeout", "60", *extra]


@requires_pyg
@requires_fake_tune
def test_example_two_ranks_on_the_cpu(tmp_path):
    site = make_site(tmp_path / "site.db")
    out = tmp_path / "ddp.json"
    procs = launch(lambda rank: example(rank, tmp_path, site, "--model", "gat,transformer", "--json", str(out)),
                   2, 240)
    assert all(rc == 0 for rc, _, _ in procs), [p[2][-3000:] for p in procs]
    report = json.loads(out.read_text())
    assert report["world"] == 2 and report["backend"] == "gloo" and report["dispatch_identical"]
    assert sorted(r["seed_nodes"] for r in report["ranks"]) == [50, 50]  # 100 seeds, split evenly
    for key in ("gat/dfgnn", "gat/pyg", "transformer/dfgnn", "transformer/pyg"):
        per_rank = [r["runs"][key] for r in report["ranks"]]
        assert all(p["steps"] == 2 and p["edges"] > 0 and p["epoch_s"] > 0 and p["step_ms_median"] > 0
                   for p in per_rank), per_rank
        assert report["job"][key]["edges_per_s"] > 0
    assert set(report["dispatch"][0]) == {"gat/conv1", "gat/conv2", "transformer/conv1", "transformer/conv2"}


@requires_pyg
@requires_fake_tune
def test_example_stops_every_rank_when_one_lacks_the_site_database(tmp_path):
    make_site(tmp_path / "site0.db")  # rank 1's site1.db does not exist
    start = time.monotonic()
    procs = launch(lambda rank: example(rank, tmp_path, tmp_path / "site{rank}.db", "--model", "gat"), 2, 120)
    assert [rc for rc, _, _ in procs] == [2, 2], [p[2][-2000:] for p in procs]
    assert f"rank 1: site database {tmp_path / 'site1.db'}: no such file" in procs[1][2]
    assert "check failed on rank(s) 1" in procs[0][2]
    assert time.monotonic() - start < 100


def test_example_needs_a_site_database():
    env = {k: v for k, v in os.environ.items() if k != "DFGNN_SITE_DB"}
    p = subprocess.run([sys.executable, str(EXAMPLE), "--device", "cpu"], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 2 and "a site database is needed" in p.stderr
