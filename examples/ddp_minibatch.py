#!/usr/bin/env python3
"""Mini-batch training of a GAT and a Graph Transformer with dfgnn layers under DDP (torchrun), on a
graph too large for full-graph training on one GPU, with PyG's layers in the same run.

- The graph: R-MAT with 2**--rmat nodes and --edges-per-node edges per node (dfgnn's seeded
  generator, on the host; every rank builds the same graph), or --dataset DIR. Random features and
  labels (a throughput benchmark, not an accuracy one).
- Each rank takes its own share of the seed nodes (dfgnn.distributed.shard of one seeded
  permutation: disjoint, covering) and samples its own mini-batches from it with
  examples/minibatch_train.py's GpuNeighborSampler through PyG's NodeLoader. Shares differ by at
  most one node, so ranks may run one step more or less: DDP's Join handles the uneven ends.
- Every rank dispatches from one read-only site database (--site-db, default $DFGNN_SITE_DB; no
  user database, no tuning): each rank first checks the file (dfgnn.distributed.check_site_database)
  and the ranks exchange the outcome, so a database missing on one rank is a clear error there and
  every rank exits (no hang). Then every rank asks dfgnn.explain how it dispatches each attention op
  on one probe batch that all ranks sample alike; the ranks' answers must be identical.
- Reported per rank (JSON from rank 0, --json): step time (forward, backward, optimizer step,
  synchronised; the epoch's first step excluded), epoch time (with sampling), edges per second
  (sampled edges / epoch time; summed over ranks for the job), and peak GPU memory.

    torchrun --nproc_per_node 2 examples/ddp_minibatch.py --site-db site.db --json ddp.json
    torchrun --nproc_per_node 1 examples/ddp_minibatch.py --site-db site.db --json one.json  # 1-GPU baseline
    torchrun --nproc_per_node 4 examples/ddp_minibatch.py --site-db site.db --baseline one.json  # + efficiency
    python examples/ddp_minibatch.py --device cpu --rmat 10 --site-db site.db  # one process, CPU

--device cpu uses gloo and dfgnn.torch's float64 reference path (a check of the script, not a speed
measurement). NVLink multicast (NVLS) is kept off: NCCL_NVLS_ENABLE=0 is set before NCCL starts.
"""

import os

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # before torch.distributed creates any NCCL communicator

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

MODELS = ("gat", "transformer")
LAYERS = ("dfgnn", "pyg")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default="gat,transformer", help="comma-separated: gat, transformer")
    p.add_argument("--layers", default="dfgnn,pyg", help="comma-separated: dfgnn, pyg (PyG's layers, same weights)")
    p.add_argument("--rmat", type=int, default=24, metavar="SCALE", help="R-MAT graph with 2**SCALE nodes")
    p.add_argument("--edges-per-node", type=int, default=16, help="R-MAT edges sampled per node")
    p.add_argument("--dataset", help="a graph file or dataset directory instead of R-MAT")
    p.add_argument("--train-nodes", type=int, default=1 << 18, help="seed nodes per epoch, over all ranks")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--fanout", default="10,10")
    p.add_argument("--features", type=int, default=128)
    p.add_argument("--classes", type=int, default=16)
    p.add_argument("--epochs", type=int, default=2, help="the last one is reported (the first compiles)")
    p.add_argument("--max-steps", type=int, default=0, help="steps per epoch and rank at most (0: all)")
    p.add_argument("--site-db", default=os.environ.get("DFGNN_SITE_DB", ""),
                   help="the read-only site database every rank dispatches from ({rank} and {local_rank} are "
                        "replaced: node-local copies)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--backend", choices=["nccl", "gloo"],
                   help="DDP's backend (default nccl on cuda, gloo on cpu; gloo lets ranks share one GPU)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds a collective waits for the other ranks")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the report here (rank 0)")
    p.add_argument("--baseline", help="the --json report of a 1-process run: adds the scaling efficiency "
                                      "(edges/s of this job / (world x edges/s of that run))")
    args = p.parse_args(argv)
    args.model = [m for m in args.model.split(",") if m]
    args.layers = [x for x in args.layers.split(",") if x]
    bad = [m for m in args.model if m not in MODELS] + [x for x in args.layers if x not in LAYERS]
    if bad or not args.model or not args.layers:
        p.error(f"--model takes {', '.join(MODELS)} and --layers {', '.join(LAYERS)}; got {bad or 'nothing'}")
    if not args.site_db:
        p.error("a site database is needed: --site-db PATH or DFGNN_SITE_DB (make one with dfgnn-db export, or "
                "python -m dfgnn.distributed tune)")
    return args


def _fail(rank, message):
    print(f"ddp_minibatch.py rank {rank}: {message}", file=sys.stderr, flush=True)


def check_site_everywhere(dist, group, rank, world, path):
    """Each rank checks its site database; every rank learns every outcome (one collective, which all
    ranks reach whatever their check found). Returns None, or the message this rank exits with."""
    from dfgnn.distributed import SiteDatabaseError, check_site_database
    try:
        check_site_database(path)
        mine = None
    except (SiteDatabaseError, FileNotFoundError) as e:
        mine = str(e)
    outcomes = [None] * world
    dist.all_gather_object(outcomes, mine, group=group)
    failed = {r: m for r, m in enumerate(outcomes) if m}
    if not failed:
        return None
    if mine:
        return mine
    return "stopping: the site database check failed on rank(s) " + ", ".join(map(str, sorted(failed)))


def make_graph(args):
    """(edge_index int64 [2, E] on the host, N, a description)."""
    import numpy as np
    import torch
    import dfgnn
    start = time.perf_counter()
    if args.dataset:
        g = dfgnn.Graph.from_file(args.dataset)
        source = str(args.dataset)
    else:
        g = dfgnn.Graph.rmat(args.rmat, args.edges_per_node << args.rmat, seed=args.seed + 1, permute=True)
        source = f"rmat:{args.rmat}:{args.edges_per_node << args.rmat}:{args.seed + 1}"
    edge_index = torch.from_numpy(np.ascontiguousarray(g.edge_index()))
    info = dict(source=source, nodes=g.num_nodes, edges=int(edge_index.shape[1]),
                build_s=time.perf_counter() - start)
    return edge_index, g.num_nodes, info


def make_model(name, nn, features, classes):
    import torch
    import torch.nn.functional as F

    class GT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.TransformerConv(features, 64, heads=4)
            self.conv2 = nn.TransformerConv(256, classes, heads=1)

        def forward(self, x, edge_index):
            return self.conv2(F.elu(self.conv1(x, edge_index)), edge_index)

    if name == "gat":
        from minibatch_train import GAT
        return GAT(nn, features, 8, 8, classes)
    return GT()


def layer_ops(name, classes):
    """The attention ops a model's dfgnn layers run (what explain is asked about)."""
    import dfgnn
    if name == "gat":
        return {"conv1": dfgnn.op("gat", "float32", 8, 8), "conv2": dfgnn.op("gat", "float32", 1, classes)}
    return {"conv1": dfgnn.op("transformer", "float32", 4, 64),
            "conv2": dfgnn.op("transformer", "float32", 1, classes)}


def explain_probe(probe_edge_index, num_nodes, models, classes):
    """{model/layer: {direction: [(pass, schedule, level, source)]}} for the probe batch (level: where the
    answer came from, through the in-process cache: "exact", "nearest" or "default"), built as the
    layers build their graphs (GATConv adds self-loops, TransformerConv does not)."""
    import dfgnn
    import dfgnn.torch as dt
    out = {}
    for name in models:
        g = dt.graph(probe_edge_index, num_nodes, add_self_loops=name == "gat")
        for layer, op in layer_ops(name, classes).items():
            out[f"{name}/{layer}"] = {
                d: [(p.get("pass", ""), p["schedule"], p.get("origin", p["level"]), p.get("source", ""))
                    for p in dfgnn.explain(g, op, d)]
                for d in ("forward", "backward")}
    return out


def train(model, loader, device, epochs, max_steps):
    """Per epoch: step times (ms), epoch time (s), sampled edges, steps."""
    import torch
    import torch.nn.functional as F
    from torch.distributed.algorithms.join import Join
    opt = torch.optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4)
    model.train()
    cuda = device.type == "cuda"
    epochs_out = []
    for _ in range(epochs):
        step_ms, edges, steps = [], 0, 0
        if cuda:
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        with Join([model]):  # ranks whose share ends a step earlier shadow the others' all-reduces
            for batch in loader:
                if max_steps and steps >= max_steps:
                    break
                batch = batch.to(device)
                t0 = time.perf_counter()
                opt.zero_grad(set_to_none=True)
                out = model(batch.x, batch.edge_index)
                loss = F.cross_entropy(out[:batch.batch_size], batch.y[:batch.batch_size])
                loss.backward()
                opt.step()
                if cuda:
                    torch.cuda.synchronize(device)
                step_ms.append((time.perf_counter() - t0) * 1e3)
                edges += int(batch.edge_index.shape[1])
                steps += 1
        if cuda:
            torch.cuda.synchronize(device)
        epochs_out.append(dict(epoch_s=time.perf_counter() - start, step_ms=step_ms, edges=edges, steps=steps,
                               loss=float(loss.detach()) if steps else None))
    return epochs_out


def summarize(epochs):
    last = epochs[-1]
    steps = last["step_ms"][1:] or last["step_ms"]  # the first step of an epoch builds loader state
    return dict(steps=last["steps"], epoch_s=last["epoch_s"], edges=last["edges"],
                step_ms_median=statistics.median(steps) if steps else None,
                step_ms_mean=statistics.fmean(steps) if steps else None,
                edges_per_s=last["edges"] / last["epoch_s"] if last["epoch_s"] > 0 else None,
                loss=last["loss"], first_epoch_s=epochs[0]["epoch_s"])


def run(args):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    if "RANK" not in os.environ:  # one process without torchrun: a world of 1
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        _fail(rank, "--device cuda but torch.cuda.is_available() is False")
        return 3
    if cuda:
        torch.cuda.set_device(local_rank % torch.cuda.device_count())  # ranks may share a GPU (tests)
    timeout = datetime.timedelta(seconds=args.timeout)
    backend = args.backend or ("nccl" if cuda else "gloo")
    dist.init_process_group(backend, timeout=timeout)
    # Control messages (checks, reports) go through gloo: it has timeouts on the CPU and needs no GPU.
    control = dist.group.WORLD if backend == "gloo" else dist.new_group(backend="gloo", timeout=timeout)
    try:
        return _run(args, rank, world, local_rank, cuda, backend, control, dist, torch, DDP)
    finally:
        dist.destroy_process_group()


def _run(args, rank, world, local_rank, cuda, backend, control, dist, torch, DDP):
    import dfgnn
    from dfgnn.distributed import shard

    site = args.site_db.format(rank=rank, local_rank=local_rank)
    problem = check_site_everywhere(dist, control, rank, world, site)  # before anything slow
    if problem:
        _fail(rank, problem)
        return 2
    import dfgnn.torch as dt
    import torch_geometric.nn as pnn
    from torch_geometric.data import Data
    from torch_geometric.loader import NodeLoader
    from minibatch_train import GpuNeighborSampler
    dfgnn.set_database(user="", sites=[site])  # read-only: every rank the same answers
    dfgnn.set_tune_mode("off")

    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    dtype = torch.float32 if cuda else torch.float64
    edge_index, n, graph_info = make_graph(args)
    edge_index = edge_index.to(device)
    gen = torch.Generator().manual_seed(args.seed)  # the same features, labels and seeds on every rank
    x = torch.randn(n, args.features, generator=gen).to(device, dtype)
    y = torch.randint(0, args.classes, (n,), generator=gen).to(device)
    seeds = torch.randperm(n, generator=gen)[:min(args.train_nodes, n)]
    mine = shard(seeds, rank, world)
    fanout = [int(k) for k in args.fanout.split(",")]
    data = Data(x=x, edge_index=edge_index, y=y)
    sampler = GpuNeighborSampler(edge_index, n, fanout, seed=args.seed * 1000 + rank)

    # The probe: one batch that every rank samples alike (same seeds, same sampler seed).
    from torch_geometric.sampler import NodeSamplerInput
    probe_sampler = GpuNeighborSampler(edge_index, n, fanout, seed=args.seed)
    probe = probe_sampler.sample_from_nodes(NodeSamplerInput(input_id=None, node=seeds[:args.batch_size].to(device)))
    probe_ei = torch.stack([probe.row, probe.col])
    decisions = explain_probe(probe_ei, int(probe.node.numel()), args.model, args.classes)
    all_decisions = [None] * world
    dist.all_gather_object(all_decisions, decisions, group=control)
    # Schedules must be equal (levels and sources may differ: node-local copies of one database).
    schedules = [{k: {d: [(pa, sc) for pa, sc, _, _ in v] for d, v in ops.items()} for k, ops in r.items()}
                 for r in all_decisions]
    same_dispatch = all(s == schedules[0] for s in schedules)

    runs = {}
    for name in args.model:
        torch.manual_seed(args.seed)
        reference = make_model(name, pnn, args.features, args.classes)
        for layers in args.layers:
            model = make_model(name, dt if layers == "dfgnn" else pnn, args.features, args.classes)
            model.load_state_dict(reference.state_dict())  # the same weights for both libraries
            model = model.to(device, dtype)
            ddp = DDP(model, device_ids=[device.index] if cuda else None)
            torch.manual_seed(args.seed * 1000 + rank)  # each rank its own shuffles and dropout masks
            loader = NodeLoader(data, node_sampler=sampler, input_nodes=mine.cpu(), batch_size=args.batch_size,
                                shuffle=True)
            if cuda:
                torch.cuda.reset_peak_memory_stats(device)
            epochs = train(ddp, loader, device, args.epochs, args.max_steps)
            result = summarize(epochs)
            result["peak_memory_bytes"] = torch.cuda.max_memory_allocated(device) if cuda else None
            runs[f"{name}/{layers}"] = result
            del ddp, model, loader

    mine_report = dict(rank=rank, host=socket.gethostname(), device=torch.cuda.get_device_name(device) if cuda
                       else "cpu", seed_nodes=int(mine.numel()), site_db=site, runs=runs)
    reports = [None] * world
    dist.all_gather_object(reports, mine_report, group=control)
    if rank == 0:
        job = {}
        for key in runs:
            per = [r["runs"][key] for r in reports]
            job[key] = dict(epoch_s=max(p["epoch_s"] for p in per),
                            edges_per_s=sum(p["edges"] for p in per) / max(p["epoch_s"] for p in per),
                            step_ms_median=statistics.median(p["step_ms_median"] for p in per
                                                             if p["step_ms_median"] is not None),
                            peak_memory_bytes_max=max((p["peak_memory_bytes"] or 0) for p in per) or None)
            print(f"{key}: world {world}, epoch {job[key]['epoch_s']:.3f} s, step {job[key]['step_ms_median']:.2f} ms"
                  f" (median over ranks' medians), {job[key]['edges_per_s'] / 1e6:.2f} M edges/s", flush=True)
        if args.baseline:
            base = json.loads(Path(args.baseline).read_text())["job"]
            for key, j in job.items():
                if key in base and base[key]["edges_per_s"]:
                    j["scaling_efficiency"] = j["edges_per_s"] / (world * base[key]["edges_per_s"])
                    print(f"{key}: scaling efficiency {100 * j['scaling_efficiency']:.1f}% against 1 process",
                          flush=True)
        print(f"dispatch identical on every rank: {same_dispatch}", flush=True)
        report = dict(world=world, backend=backend, nccl_nvls_enable=os.environ.get("NCCL_NVLS_ENABLE"),
                      graph=graph_info, train_nodes=int(seeds.numel()), batch_size=args.batch_size, fanout=fanout,
                      features=args.features, classes=args.classes, epochs=args.epochs, max_steps=args.max_steps,
                      dtype=str(dtype).replace("torch.", ""), dispatch=all_decisions,
                      dispatch_identical=same_dispatch, ranks=reports, job=job)
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=1))
    return 0 if same_dispatch else 1


def main(argv=None):
    return run(parse_args(argv))


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Leave without the interpreter's teardown: gloo's worker threads can still be joinable while
    # Python finalises, and then abort the process ("terminate called without an active exception",
    # intermittently, after a clean destroy_process_group; pytorch/pytorch#179291 describes the race).
    # Everything this process reports is written and flushed by now.
    os._exit(0 if code is None else int(code))
