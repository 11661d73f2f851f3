#!/usr/bin/env python3
"""Data-parallel training of the Cora GAT (examples/train_cora.py's model and hyperparameters) with
torch.distributed (DDP, NCCL) on several GPUs of one node, using dfgnn.torch.GATConv.

- Every rank points dfgnn at one tuning database file on the node (--db), so that a schedule tuned
  once (--tune: rank 0 tunes, the others wait) serves every rank.
- After the first epoch each rank asks dfgnn how it dispatched each attention op (dfgnn.explain:
  forward, backward row and column passes of both layers); the ranks gather and compare the
  schedules, and the run fails if they differ.
- Each rank runs the whole graph and takes the loss over its share of the training nodes; DDP
  averages the gradients (equal shares: the full-batch gradient). The test accuracy at the best
  validation epoch is compared with a run on one GPU (same seeds), and the ranks' final parameters
  must be identical.

NVLink multicast (NVLS) is kept off: the script sets NCCL_NVLS_ENABLE=0 before NCCL starts.

    python examples/ddp_train.py --nproc 2 --json ddp.json     # spawns 2 ranks, then 1 for comparison
    torchrun --nproc_per_node 2 examples/ddp_train.py          # ranks from torchrun, no comparison run
    python examples/ddp_train.py --device cpu --epochs 3       # gloo on the CPU (float64 path), a check
"""

import os

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # before torch.distributed creates any NCCL communicator

import argparse  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_cora  # noqa: E402  (data loading and the model)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--nproc", type=int, default=2, help="ranks to spawn (ignored under torchrun)")
    p.add_argument("--data", default=str(train_cora.REPO / "data" / "cora"))
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--db", help="the tuning database shared by the ranks (default: a new file in a temp dir)")
    p.add_argument("--tune", type=float, default=0.0, metavar="SECONDS",
                   help="rank 0 tunes each op direction for this budget before training (0: no tuning)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help="cpu: gloo backend and dfgnn's float64 reference path (a check of the script)")
    p.add_argument("--no-single", action="store_true", help="skip the 1-process comparison run")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--result-dir", help=argparse.SUPPRESS)  # where spawned ranks leave their results
    return p.parse_args(argv)


def _ops(num_classes):
    """The attention ops the model runs: conv1 (8 heads x 8), conv2 (1 head x classes)."""
    import dfgnn
    return {"conv1": dfgnn.op("gat", "float32", 8, 8, negative_slope=0.2),
            "conv2": dfgnn.op("gat", "float32", 1, num_classes, negative_slope=0.2)}


def _decisions(graph, ops):
    """{op: {direction: [(pass, schedule, level), ...]}} from dfgnn.explain."""
    import dfgnn
    out = {}
    for name, op in ops.items():
        out[name] = {d: [(p.get("pass", ""), p["schedule"], p["level"]) for p in dfgnn.explain(graph, op, d)]
                     for d in ("forward", "backward")}
    return out


def _same_schedules(all_decisions):
    """Schedules equal across ranks (the level may differ: a rank that tuned answers from its cache)."""
    strip = [{k: {d: [(p, s) for p, s, _ in v] for d, v in ops.items()} for k, ops in r.items()}
             for r in all_decisions]
    return all(s == strip[0] for s in strip[1:])


def worker(rank, world, args, master_port=None):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    import dfgnn
    import dfgnn.torch as dt

    cuda = args.device == "cuda"
    if master_port is not None:  # spawned by this script (torchrun sets these itself)
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(master_port), RANK=str(rank),
                          WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    dtype = torch.float32 if cuda else torch.float64
    # One database file for all ranks on the node (SQLite in WAL mode: concurrent readers, one writer).
    dfgnn.set_database(user=args.db)

    data = train_cora.to_torch(train_cora.load_planetoid(args.data), device, dtype)
    n = data["x"].shape[0]
    graph = dt.graph(data["edge_index"], n, add_self_loops=True)  # the Graph the layers will use (cached)
    ops = _ops(data["num_classes"])
    if args.tune > 0 and cuda:
        if rank == 0:
            for op in ops.values():
                for direction in ("forward", "backward"):
                    dfgnn.tune(graph, op, direction, budget_seconds=args.tune)
        dist.barrier()  # the others dispatch only once rank 0's results are in the database

    results = []
    decisions = None
    for seed in args.seeds:
        torch.manual_seed(seed)
        model = train_cora.make_gat(dt.GATConv, data["x"].shape[1], data["num_classes"], 0.0).to(device, dtype)
        ddp = DDP(model, device_ids=[local_rank] if cuda else None)
        opt = torch.optim.Adam(ddp.parameters(), lr=0.005, weight_decay=5e-4)
        torch.manual_seed(seed * 1000 + rank)  # each rank its own dropout masks
        mine = data["train"][rank::world]      # this rank's share of the training nodes
        best_val = test_at_best = 0.0
        start = time.perf_counter()
        for epoch in range(args.epochs):
            ddp.train()
            opt.zero_grad()
            loss = F.cross_entropy(ddp(data["x"], data["edge_index"])[mine], data["y"][mine])
            loss.backward()
            opt.step()
            if decisions is None:
                decisions = _decisions(graph, ops)
            ddp.eval()
            with torch.no_grad():
                logits = model(data["x"], data["edge_index"])
            val = train_cora._accuracy(logits, data["y"], data["val"])
            test = train_cora._accuracy(logits, data["y"], data["test"])
            if val > best_val:
                best_val, test_at_best = val, test
        seconds = time.perf_counter() - start
        checksum = torch.stack([p.detach().double().sum() for p in model.parameters()]).cpu()
        results.append(dict(seed=seed, test_acc=test_at_best, best_val_acc=best_val, seconds=seconds,
                            checksum=checksum.tolist()))

    gathered = [None] * world
    dist.all_gather_object(gathered, dict(rank=rank, decisions=decisions, results=results,
                                          device=torch.cuda.get_device_name(device) if cuda else "cpu"))
    ok = True
    if rank == 0:
        same_dispatch = _same_schedules([g["decisions"] for g in gathered])
        same_params = all(g["results"][i]["checksum"] == gathered[0]["results"][i]["checksum"]
                          for g in gathered for i in range(len(results)))
        ok = same_dispatch and same_params
        for g in gathered:
            print(f"rank {g['rank']} ({g['device']}) dispatch:", flush=True)
            for name, by_dir in g["decisions"].items():
                for d, passes in by_dir.items():
                    print(f"  {name} {d}: " + "; ".join(f"{p or 'forward'}={s} [{lvl}]" for p, s, lvl in passes))
        print(f"world {world}: dispatch identical on every rank: {same_dispatch}; final parameters identical: "
              f"{same_params}")
        accs = [r["test_acc"] for r in results]
        print(f"world {world}: test accuracy {100 * statistics.mean(accs):.1f}% over seeds {args.seeds} "
              f"({', '.join(f'{100 * a:.1f}' for a in accs)})", flush=True)
        if args.result_dir:
            pathlib.Path(args.result_dir, f"world{world}.json").write_text(json.dumps(dict(
                world=world, results=results, dispatch=[g["decisions"] for g in gathered],
                dispatch_identical=same_dispatch, parameters_identical=same_params)))
    dist.barrier()
    dist.destroy_process_group()
    if not ok:
        sys.exit(1)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None):
    args = parse_args(argv)
    if "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ:  # under torchrun
        args.db = args.db or os.path.join(tempfile.gettempdir(), "dfgnn-ddp-tuning.db")
        worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
        return 0
    import torch
    import torch.multiprocessing as mp
    if args.device == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count < args.nproc:
            print(f"ddp_train.py: {args.nproc} GPUs wanted, {count} visible", file=sys.stderr)
            return 3
    scratch = tempfile.mkdtemp(prefix="dfgnn-ddp-")
    args.db = args.db or os.path.join(scratch, "tuning.db")
    args.result_dir = scratch
    worlds = [args.nproc] + ([] if args.no_single or args.nproc == 1 else [1])
    for world in worlds:
        print(f"=== {world} process{'es' if world > 1 else ''} ({args.device}), database {args.db}", flush=True)
        mp.spawn(worker, args=(world, args, _free_port()), nprocs=world, join=True)
    runs = {w: json.loads(pathlib.Path(scratch, f"world{w}.json").read_text()) for w in worlds}
    summary = dict(device=args.device, nproc=args.nproc, seeds=args.seeds, epochs=args.epochs, database=args.db,
                   nccl_nvls_enable=os.environ.get("NCCL_NVLS_ENABLE"), tune_seconds=args.tune, runs=runs)
    for w, r in runs.items():
        summary[f"test_acc_world{w}"] = statistics.mean(x["test_acc"] for x in r["results"])
    ok = all(r["dispatch_identical"] and r["parameters_identical"] for r in runs.values())
    if len(runs) == 2:
        diff = summary[f"test_acc_world{args.nproc}"] - summary["test_acc_world1"]
        summary["accuracy_difference"] = diff
        print(f"test accuracy: {args.nproc} ranks {100 * summary[f'test_acc_world{args.nproc}']:.1f}%, 1 rank "
              f"{100 * summary['test_acc_world1']:.1f}% (difference {100 * diff:+.1f} points)")
        # the same model up to dropout masks and reduction order: a gap beyond noise is a failure
        summary["accuracy_within_2_points"] = abs(diff) <= 0.02
        ok = ok and summary["accuracy_within_2_points"]
    summary["ok"] = ok
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(summary, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
