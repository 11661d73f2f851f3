"""Tuning across the ranks of a distributed job into one site database, and the checks a
distributed job makes of the site database it dispatches from.

The pipeline of :func:`tune_distributed` (one call on every rank, e.g. under ``torchrun``):

1. The graphs are split across the ranks (:func:`shard`: round robin, disjoint and covering), or
   every rank tunes every graph (``split=False``: the agreement check of :func:`agreement`).
2. Each rank tunes its graphs on its own GPU into its own database, ``WORK_DIR/rank-NNNN.db``
   (:func:`rank_database`). Every tuning run is one committed SQLite transaction there, so a rank
   killed mid-way leaves a database that is still mergeable.
3. The ranks meet at a barrier with a timeout (gloo's ``monitored_barrier``, which names the ranks
   that did not arrive) and gather what they did. A rank that died or hangs makes rank 0 raise
   :class:`DistributedTuningError` naming it, without writing the site snapshot: the rank databases
   stay, and :func:`merge_and_export` (``python -m dfgnn.distributed merge``) merges them later.
4. Rank 0 merges the rank databases with ``dfgnn-db merge`` (the library's pooled merge: candidate
   statistics pooled exactly, idempotent, order-independent, each file all or nothing) into a fresh
   ``WORK_DIR/merged.db`` and writes one snapshot with ``dfgnn-db export`` (a temporary file renamed
   over the target: a reader sees the old snapshot or the new one, never half of one).

Results are keyed by GPU class (name, compute capability, SM count), so in a heterogeneous job every
class keeps its own winners and no rank overrides another class's.

Only :func:`tune_distributed` with a world size above 1 needs PyTorch (torch.distributed); the rest
needs the ``dfgnn-db`` tool, which the wheel ships (``dfgnn/bin``) or ``PATH`` provides.
"""

import argparse
import datetime
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from ._errors import Error, invalid_argument

__all__ = ["shard", "rank_database", "find_tool", "check_site_database", "merge_and_export", "load_graph",
           "Tuner", "tune_distributed", "agreement", "SiteDatabaseError", "DistributedTuningError"]

#: Two ranks' winners of one problem agree when they are the same schedule, or when their medians
#: are within this fraction of each other (both are then equally good, within the noise band).
NOISE_BAND = 0.03


class SiteDatabaseError(RuntimeError):
    """A site database is missing or unusable (the message says which file and why)."""


class DistributedTuningError(RuntimeError):
    """Distributed tuning did not complete on every rank; nothing was exported."""


def shard(items, rank, world):
    """This rank's share of ``items`` (a sequence, tensor or array): every ``world``-th item from
    position ``rank``. The shares of ranks 0..world-1 are disjoint and cover ``items``; their sizes
    differ by at most one."""
    rank, world = int(rank), int(world)
    if world < 1 or not 0 <= rank < world:
        raise invalid_argument(f"rank {rank} is not in a world of {world} (0 <= rank < world, world >= 1)")
    return items[rank::world]


def rank_database(work_dir, rank):
    """The database rank ``rank`` tunes into."""
    return Path(work_dir) / f"rank-{int(rank):04d}.db"


def find_tool(name="dfgnn-db"):
    """Path of a dfgnn command-line tool: the one this package ships (``dfgnn/bin``), else ``PATH``."""
    shipped = Path(__file__).resolve().parent / "bin" / name
    if os.access(shipped, os.X_OK):
        return str(shipped)
    found = shutil.which(name)
    if found:
        return found
    raise FileNotFoundError(f"{name} is not in this installation of dfgnn ({shipped.parent}) nor on PATH "
                            f"(install the dfgnn wheel, or put the build's tools/ directory on PATH)")


def _dfgnn_db(*args, what):
    """Runs dfgnn-db; returns its stdout, or raises RuntimeError with its one-line reason."""
    proc = subprocess.run([find_tool("dfgnn-db"), *map(str, args)], capture_output=True, text=True)
    if proc.returncode != 0:
        reason = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise RuntimeError(f"{what}: {reason[-1] if reason else f'dfgnn-db exited {proc.returncode}'}")
    return proc.stdout


def check_site_database(path):
    """Checks that ``path`` is a site database dispatch can read: a regular, readable file that dfgnn
    opens as a tuning database (``dfgnn-db --site PATH stats``). Raises :class:`SiteDatabaseError`
    saying why not (dispatch itself would log the file and skip it, falling back to the default rule,
    which in a distributed job would make ranks quietly dispatch differently). Returns the path."""
    p = Path(os.fspath(path))
    if not p.exists():
        raise SiteDatabaseError(f"site database {p}: no such file")
    if not p.is_file():
        raise SiteDatabaseError(f"site database {p}: not a regular file")
    if not os.access(p, os.R_OK):
        raise SiteDatabaseError(f"site database {p}: not readable")
    try:
        _dfgnn_db("--site", p, "stats", what=f"site database {p}")
    except RuntimeError as e:
        raise SiteDatabaseError(str(e)) from None
    return p


def merge_and_export(databases, out, *, merged=None):
    """Merges tuning databases with the library's pooled merge (``dfgnn-db merge``) into a fresh
    database ``merged`` (default: a temporary file beside ``out``, removed afterwards) and writes
    one site snapshot to ``out`` (``dfgnn-db export``: atomic, so ``out`` is never half-written).
    Missing files are skipped and listed: a rank's database is created by its first stored result, so a
    rank that died before it, or whose every tuning call failed, has none. None present is an error.
    Returns a dict: out, merged, missing, and the tool's lines."""
    out = Path(os.fspath(out))
    present = [Path(os.fspath(d)) for d in databases if Path(os.fspath(d)).is_file()]
    missing = [str(d) for d in databases if not Path(os.fspath(d)).is_file()]
    if not present:
        raise FileNotFoundError(f"no tuning database to merge into {out}: none of {missing} exists")
    keep = merged is not None
    merged = Path(os.fspath(merged)) if keep else out.with_name(f".{out.name}.merge-{os.getpid()}.db")
    for suffix in ("", "-wal", "-shm"):  # fresh: only these sources' runs
        Path(f"{merged}{suffix}").unlink(missing_ok=True)
    lines = []
    try:
        lines += _dfgnn_db("--db", merged, "merge", *present, what="merge").splitlines()
        lines += _dfgnn_db("--db", merged, "export", out, what=f"export to {out}").splitlines()
    finally:
        if not keep:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{merged}{suffix}").unlink(missing_ok=True)
    return {"out": str(out), "merged": [str(p) for p in present], "missing": missing, "log": lines}


def load_graph(spec, add_self_loops=False, context=None):
    """A graph from a spec: ``rmat:SCALE[:EDGES[:SEED]]`` (R-MAT with 2**SCALE nodes, EDGES sampled
    edges, default 16 per node, seed 1; deduplicated, no self-loops, permuted ids as dfgnn-tune's
    --rmat) or a graph file / dataset directory."""
    from ._graph import Graph
    spec = os.fspath(spec)
    if spec.startswith("rmat:"):
        try:
            parts = [int(x) for x in spec[5:].split(":")]
        except ValueError:
            parts = []
        if not 1 <= len(parts) <= 3:
            raise invalid_argument(f"graph spec {spec!r}: expected rmat:SCALE[:EDGES[:SEED]]")
        scale = parts[0]
        edges = parts[1] if len(parts) > 1 else 16 << scale
        seed = parts[2] if len(parts) > 2 else 1
        return Graph.rmat(scale, edges, seed=seed, permute=True, add_self_loops=add_self_loops, context=context)
    return Graph.from_file(spec, add_self_loops=add_self_loops, context=context)


def op_label(op):
    """``model/dtype/H/D`` of an op (with ``/edge`` for edge features)."""
    edge = "/edge" if getattr(op, "edge_features", 0) else ""
    return f"{op.model.name.lower()}/{op.dtype.name.lower()}/H{op.heads}/D{op.dim}{edge}"


class Tuner:
    """The default measurer of :func:`tune_distributed`: ``dfgnn.tune`` on this process's GPU, with
    a context whose only database is the rank's (``database``) and no site layer. Graphs are loaded
    once per spec. Any callable ``measure(spec, op, direction, budget_seconds, database)`` returning
    dfgnn.tune's report (a list of pass dicts with "winner", "winner_median_ms", ...) may replace it;
    a report may carry "env_class" (the GPU class it was measured on)."""

    def __init__(self, add_self_loops=False):
        self.add_self_loops = add_self_loops
        self._contexts = {}
        self._graphs = {}

    def _context(self, database):
        from . import _dfgnn
        from ._tuning import set_database
        if database not in self._contexts:
            ctx = _dfgnn.Context()
            set_database(user=database, sites=[], context=ctx)
            self._contexts[database] = ctx
        return self._contexts[database]

    def __call__(self, spec, op, direction, budget_seconds, database):
        from ._tuning import tune
        ctx = self._context(str(database))
        key = (spec, str(database))
        if key not in self._graphs:
            self._graphs = {key: load_graph(spec, self.add_self_loops, context=ctx)}  # one graph held at a time
        return tune(self._graphs[key], op, direction, budget_seconds, context=ctx)


def _gpu_class():
    """This process's GPU class as the database keys it ("name|sm_CC|SMS"), or None without CUDA."""
    try:
        import torch
        if not torch.cuda.is_available():
            return None
        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        return f"{p.name}|sm_{p.major}{p.minor}|{p.multi_processor_count}"
    except Exception:  # noqa: BLE001 - no torch, or no usable device: the class is unknown
        return None


def agreement(records, noise_band=NOISE_BAND):
    """Compares the winners of every problem (graph, op, direction, pass) that more than one rank of
    the same GPU class tuned. ``records``: the "results" of :func:`tune_distributed`'s report. A pair
    agrees if the winners are the same schedule or their medians are within ``noise_band`` of each
    other. Returns a list of dicts (problem, env_class, ranks, winners, medians, agree)."""
    groups = {}
    for r in records:
        for p in r.get("passes") or []:
            key = (r["graph"], r["op"], r["direction"], p.get("pass", ""), r.get("env_class") or "")
            groups.setdefault(key, []).append((r["rank"], p.get("winner"), p.get("winner_median_ms")))
    out = []
    for (graph, op, direction, pass_name, env), entries in sorted(groups.items()):
        if len({rank for rank, _, _ in entries}) < 2:
            continue
        winners = [w for _, w, _ in entries]
        medians = [m for _, _, m in entries]
        same = len(set(winners)) == 1
        finite = all(isinstance(m, (int, float)) and m > 0 for m in medians)
        within = finite and (max(medians) - min(medians)) <= noise_band * min(medians)
        out.append({"graph": graph, "op": op, "direction": direction, "pass": pass_name, "env_class": env,
                    "ranks": [rank for rank, _, _ in entries], "winners": winners, "medians_ms": medians,
                    "same_winner": same, "agree": bool(same or within)})
    return out


def _group(timeout_s):
    """(rank, world, gloo group for control messages, whether we initialised torch.distributed)."""
    if "WORLD_SIZE" not in os.environ and not _dist_initialized():
        return 0, 1, None, False
    import torch.distributed as dist
    created = False
    timeout = datetime.timedelta(seconds=timeout_s)
    if not dist.is_initialized():
        dist.init_process_group("gloo", timeout=timeout)
        created = True
    world = dist.get_world_size()
    _set_local_device()
    group = dist.group.WORLD if dist.get_backend() == "gloo" else dist.new_group(backend="gloo", timeout=timeout)
    return dist.get_rank(), world, group, created


def _set_local_device():
    """Makes torchrun's LOCAL_RANK the current CUDA device (dfgnn's contexts use the current device)."""
    if "LOCAL_RANK" not in os.environ:
        return
    try:
        import torch
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
    except ImportError:
        pass


def _dist_initialized():
    try:
        import torch.distributed as dist
    except ImportError:
        return False
    return dist.is_available() and dist.is_initialized()


def tune_distributed(graphs, ops, out, work_dir, *, directions=("forward",), budget_seconds=20.0, split=True,
                     exclusive=False, measure=None, add_self_loops=False, timeout_s=None, noise_band=NOISE_BAND):
    """Tunes ``ops`` on ``graphs`` across the ranks of a job and writes one site snapshot to ``out``.

    Call it on every rank (world and rank from torch.distributed, initialised here with gloo from
    torchrun's environment if it is not yet; without one, a world of 1). ``graphs``: specs for
    :func:`load_graph` (paths, ``rmat:SCALE[:EDGES[:SEED]]``). ``split``: each rank tunes its
    :func:`shard` of the graphs (True) or every graph (False, for :func:`agreement` and for pooling
    repeated measurements). ``exclusive``: the ranks measure one after the other (several ranks on
    one GPU, whose timings would otherwise disturb each other). ``measure``: see :class:`Tuner`.
    ``timeout_s``: how long the ranks wait for each other after tuning (default: the budget of every
    problem of every graph, doubled, plus 10 minutes). Runs already in ``work_dir``'s rank databases (an earlier
    job's) are pooled with the new ones: give a fresh directory for a snapshot of this job alone.

    Returns, on every rank, rank 0's report: per problem and rank the tuning report ("results"),
    the agreement of ranks of one GPU class ("agreement"), failures, and the merge's lines. A tuning
    call that fails is recorded and the rest continue; the snapshot holds what was tuned. Raises
    :class:`DistributedTuningError` on the ranks still running if a rank did not finish (rank 0 names
    it) or the merge failed: nothing is exported then, and the rank databases in ``work_dir`` stay
    mergeable."""
    from ._op import as_direction
    graphs = [os.fspath(g) for g in graphs]
    ops = list(ops)
    directions = [directions] if isinstance(directions, str) else list(directions)
    for d in directions:
        as_direction(d)
    if not graphs or not ops or not directions:
        raise invalid_argument("tune_distributed needs at least one graph, one op and one direction")
    for name, seconds in (("budget_seconds", budget_seconds), ("timeout_s", timeout_s)):
        if seconds is not None and not (isinstance(seconds, (int, float)) and 0 < seconds < math.inf):
            raise invalid_argument(f"{name} must be a positive number of seconds, got {seconds!r}")
    work_dir = Path(os.fspath(work_dir))
    out = Path(os.fspath(out))
    problems_per_rank = len(graphs) * len(ops) * len(directions)
    if timeout_s is None:
        timeout_s = 2 * budget_seconds * problems_per_rank + 600
    rank, world, group, created = _group(timeout_s)
    try:
        return _tune(rank, world, group, graphs, ops, directions, budget_seconds, split, exclusive,
                     measure or Tuner(add_self_loops), work_dir, out, timeout_s, noise_band)
    finally:
        if created:
            import torch.distributed as dist
            dist.destroy_process_group()


def _tune(rank, world, group, graphs, ops, directions, budget, split, exclusive, measure, work_dir, out,
          timeout_s, noise_band):
    mine = shard(graphs, rank, world) if split else graphs
    work_dir.mkdir(parents=True, exist_ok=True)
    database = rank_database(work_dir, rank)
    env_class = _gpu_class()
    host = socket.gethostname()
    results, failures = [], []

    def run_share():
        for spec in mine:
            for op in ops:
                for direction in directions:
                    start = time.perf_counter()
                    record = dict(rank=rank, host=host, graph=spec, op=op_label(op), direction=direction,
                                  env_class=env_class)
                    try:
                        passes = measure(spec, op, direction, budget, database)
                    except Exception as e:  # noqa: BLE001 - one failing problem must not lose the others
                        failures.append(dict(record, error=f"{type(e).__name__}: {e}"))
                        continue
                    passes = list(passes or [])
                    for p in passes:
                        if isinstance(p, dict) and p.get("env_class"):
                            record["env_class"] = p["env_class"]
                    record.update(passes=passes, seconds=time.perf_counter() - start)
                    results.append(record)

    if exclusive and world > 1:
        import torch.distributed as dist
        for turn in range(world):
            if turn == rank:
                run_share()
            _barrier(dist, group, rank, timeout_s, f"turn of rank {turn}")
    else:
        run_share()

    mine_report = dict(rank=rank, host=host, graphs=mine, database=str(database), results=results,
                       failures=failures)
    if world == 1:
        reports = [mine_report]
    else:
        import torch.distributed as dist
        _barrier(dist, group, rank, timeout_s, "after tuning")
        reports = [None] * world
        dist.all_gather_object(reports, mine_report, group=group)

    report = None
    error = None
    if rank == 0:
        try:
            dbs = [rank_database(work_dir, r) for r in range(world)]
            merge = merge_and_export(dbs, out, merged=work_dir / "merged.db")
            all_results = [x for r in reports for x in r["results"]]
            report = dict(world=world, out=str(out), work_dir=str(work_dir), split=split,
                          graphs=graphs, ops=[op_label(o) for o in ops], directions=directions,
                          budget_seconds=budget, ranks=[dict(rank=r["rank"], host=r["host"], graphs=r["graphs"],
                                                             database=r["database"]) for r in reports],
                          results=all_results, failures=[f for r in reports for f in r["failures"]],
                          agreement=agreement(all_results, noise_band), noise_band=noise_band, merge=merge)
        except Exception as e:  # noqa: BLE001 - every rank must learn that rank 0 failed
            failed = [f for r in reports for f in r["failures"]]
            error = f"rank 0: merge and export failed: {e}" + (
                f" ({len(failed)} tuning call(s) failed, the first on rank {failed[0]['rank']}: {failed[0]['error']})"
                if failed else "")
    if world > 1:
        import torch.distributed as dist
        box = [report, error]
        dist.broadcast_object_list(box, src=0, group=group)
        report, error = box
    if error:
        raise DistributedTuningError(error)
    return report


def _barrier(dist, group, rank, timeout_s, what):
    """gloo's monitored barrier: rank 0 learns which ranks did not arrive (died or hang) within the
    timeout; the others learn that rank 0 is gone. Both raise DistributedTuningError."""
    try:
        dist.monitored_barrier(group=group, timeout=datetime.timedelta(seconds=timeout_s), wait_all_ranks=True)
    except RuntimeError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DistributedTuningError(
            f"rank {rank}: ranks did not meet ({what}): {first}. Nothing was exported; the rank databases "
            f"stay mergeable (python -m dfgnn.distributed merge WORK_DIR --out SITE.db)") from None


# ---------------------------------------------------------------------------------------- CLI

def _parse(argv):
    p = argparse.ArgumentParser(prog="python -m dfgnn.distributed", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("tune", help="tune on every rank (run under torchrun), merge, export one site database")
    t.add_argument("graphs", nargs="+", help="graph files, dataset directories or rmat:SCALE[:EDGES[:SEED]]")
    t.add_argument("--out", required=True, help="the site snapshot to write")
    t.add_argument("--work-dir", required=True, help="shared directory of the rank databases")
    t.add_argument("--op", action="append", metavar="MODEL:HEADS:DIM",
                   help="an op to tune (repeatable; default transformer:1:128), in each --dtype")
    t.add_argument("--dtype", default="float32", help="comma-separated dtypes")
    t.add_argument("--direction", default="forward", choices=["forward", "backward", "both"])
    t.add_argument("--budget", type=float, default=20.0, help="seconds per problem")
    t.add_argument("--self-loops", action="store_true", help="add self-loops to every graph (GATConv's default)")
    t.add_argument("--no-split", action="store_true", help="every rank tunes every graph (agreement check)")
    t.add_argument("--exclusive", action="store_true", help="ranks measure one at a time (ranks sharing a GPU)")
    t.add_argument("--timeout", type=float, help="seconds the ranks wait for each other after tuning")
    t.add_argument("--json", help="write the report here (rank 0)")
    m = sub.add_parser("merge", help="merge rank databases (e.g. after a rank died) and export one site database")
    m.add_argument("work_dir", help="directory holding rank-NNNN.db files")
    m.add_argument("--out", required=True)
    return p.parse_args(argv)


def main(argv=None):
    args = _parse(argv)
    if args.command == "merge":
        dbs = sorted(Path(args.work_dir).glob("rank-*.db"))
        if not dbs:
            print(f"dfgnn.distributed merge: no rank-*.db in {args.work_dir}", file=sys.stderr)
            return 1
        r = merge_and_export(dbs, args.out)
        print("\n".join(r["log"]))
        return 0
    from ._op import make_op
    ops = []
    for text in args.op or ["transformer:1:128"]:
        parts = text.split(":")
        if len(parts) != 3 or not all(x.isdigit() for x in parts[1:]):
            print(f"dfgnn.distributed: --op {text!r}: expected MODEL:HEADS:DIM, e.g. gat:8:8", file=sys.stderr)
            return 2
        try:
            ops += [make_op(parts[0], dtype, int(parts[1]), int(parts[2])) for dtype in args.dtype.split(",")]
        except Error as e:  # an unknown model or dtype, heads or dim 0
            print(f"dfgnn.distributed: --op {text!r} --dtype {args.dtype!r}: {e.message}", file=sys.stderr)
            return 2
    for name, seconds in (("--budget", args.budget), ("--timeout", args.timeout)):
        if seconds is not None and not 0 < seconds < math.inf:
            print(f"dfgnn.distributed: {name} {seconds!r} must be a positive number of seconds", file=sys.stderr)
            return 2
    directions = ["forward", "backward"] if args.direction == "both" else [args.direction]
    try:
        report = tune_distributed(args.graphs, ops, args.out, args.work_dir, directions=directions,
                                  budget_seconds=args.budget, split=not args.no_split, exclusive=args.exclusive,
                                  add_self_loops=args.self_loops, timeout_s=args.timeout)
    except DistributedTuningError as e:
        print(f"dfgnn.distributed: {e}", file=sys.stderr)
        return 1
    rank = int(os.environ.get("RANK", "0"))
    if rank == 0:
        for r in report["results"]:
            for p in r["passes"]:
                print(f"rank {r['rank']} {r['graph']} {r['op']} {r['direction']} {p.get('pass', '')}: "
                      f"{p.get('winner')} {p.get('winner_median_ms')} ms")
        for f in report["failures"]:
            print(f"FAILED rank {f['rank']} {f['graph']} {f['op']} {f['direction']}: {f['error']}")
        disagree = [a for a in report["agreement"] if not a["agree"]]
        print(f"wrote {report['out']}: {len(report['results'])} problem(s) tuned on {report['world']} rank(s), "
              f"{len(report['failures'])} failure(s), {len(report['agreement'])} compared across ranks, "
              f"{len(disagree)} disagreeing")
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=1))
        return 1 if report["failures"] or disagree else 0
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Leave without the interpreter's teardown: gloo's worker threads can still be joinable while
    # Python finalises, and then abort the process ("terminate called without an active exception",
    # intermittently, after a clean destroy_process_group; pytorch/pytorch#179291 describes the race).
    # Everything this process reports is written and flushed by now.
    os._exit(0 if code is None else int(code))
