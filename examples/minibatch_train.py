#!/usr/bin/env python3
"""Mini-batch GAT training with dfgnn layers and PyG's loader API, beside PyG's own GATConv.

Every step sees a new, relabelled edge_index: dfgnn builds its graph (CSR, CSC, fingerprint) on the
GPU from it, and dispatch answers from its fingerprint-bucket cache, so a batch costs no host-side
graph building and no database query.

Sampling: PyG's NeighborLoader needs pyg-lib or torch-sparse, and neither installs from PyPI for this
torch (pyg-lib's wheels live on PyG's own index, torch-sparse 0.6.18 is a source build against torch).
So the loader here is PyG's NodeLoader with a neighbour sampler of our own (`GpuNeighborSampler`, a
torch_geometric.sampler.BaseSampler): k in-neighbours per node and hop, drawn on the device from a
CSR with replacement and de-duplicated, as GraphSAGE-style samplers do. With pyg-lib installed, pass
--pyg-sampler to use NeighborLoader itself.

Usage: examples/minibatch_train.py [--dataset DIR] [--epochs N] [--batch-size B] [--fanout 10,10] [--layers pyg|dfgnn|both]
Without --dataset it trains on the Cora graph shipped in data/cora (labels, random features if none).
"""

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import torch
import torch_geometric.nn as pnn
from torch_geometric.data import Data
from torch_geometric.loader import NeighborLoader, NodeLoader
from torch_geometric.sampler import BaseSampler, SamplerOutput

import dfgnn
import dfgnn.torch as dt

ROOT = Path(__file__).resolve().parent.parent


def load(dataset, device, features):
    g = dfgnn.Graph.from_file(str(dataset))
    edge_index = torch.from_numpy(np.ascontiguousarray(g.edge_index())).to(device)
    n = g.num_nodes
    labels_path = Path(dataset) / "labels.txt"
    if labels_path.is_file():
        y = torch.from_numpy(np.loadtxt(labels_path, comments="#", dtype=np.int64).reshape(-1)[:n])
    else:
        y = torch.zeros(n, dtype=torch.int64)
    y = y.clamp(min=0).to(device)
    x = torch.randn(n, features, device=device)
    return x, edge_index, y


class GpuNeighborSampler(BaseSampler):
    """k in-neighbours per node and hop, sampled on the device with replacement (duplicates removed),
    as a PyG BaseSampler: NodeLoader turns its output into relabelled subgraph batches."""

    def __init__(self, edge_index, num_nodes, fanout, seed=0):
        src, dst = edge_index
        order = torch.argsort(dst, stable=True)
        self.col = src[order]  # sources, grouped by destination
        self.ptr = torch.zeros(num_nodes + 1, dtype=torch.int64, device=edge_index.device)
        self.ptr[1:] = torch.cumsum(torch.bincount(dst, minlength=num_nodes), 0)
        self.edge_id = order
        self.fanout = fanout
        self.num_nodes = num_nodes
        self.gen = torch.Generator(device=edge_index.device).manual_seed(seed)

    def sample_from_nodes(self, inputs, **_):
        device = self.col.device
        seeds = inputs.node.to(device)
        nodes = seeds.unique()
        # local ids: positions in `nodes`, which grows hop by hop (seeds first, as PyG does)
        nodes = torch.cat([seeds, nodes[~torch.isin(nodes, seeds)]])
        frontier = seeds
        rows, cols, eids = [], [], []
        for k in self.fanout:
            deg = self.ptr[frontier + 1] - self.ptr[frontier]
            has = deg > 0
            f, d = frontier[has], deg[has]
            r = (torch.rand(f.numel(), k, generator=self.gen, device=device) * d.unsqueeze(1)).long()
            pos = (self.ptr[f].unsqueeze(1) + r).reshape(-1)
            pair = torch.unique(pos)  # CSR positions: each sampled edge once
            src, eid = self.col[pair], self.edge_id[pair]
            dst = torch.searchsorted(self.ptr, pair, right=True) - 1  # the row holding each position
            new = src.unique()
            new = new[~torch.isin(new, nodes)]
            nodes = torch.cat([nodes, new])
            rows.append(src), cols.append(dst), eids.append(eid)
            frontier = new
        src, dst, eid = torch.cat(rows), torch.cat(cols), torch.cat(eids)
        # relabel global ids to positions in `nodes`
        lookup = torch.full((self.num_nodes,), -1, dtype=torch.int64, device=device)
        lookup[nodes] = torch.arange(nodes.numel(), device=device)
        return SamplerOutput(node=nodes, row=lookup[src], col=lookup[dst], edge=eid, batch=None,
                             metadata=(inputs.input_id, inputs.time))

    def sample_from_edges(self, inputs, neg_sampling=None):
        raise NotImplementedError("GpuNeighborSampler samples from seed nodes only (NodeLoader)")


class GAT(torch.nn.Module):
    def __init__(self, nn, in_channels, hidden, heads, classes, dropout=0.6):
        super().__init__()
        self.dropout = dropout
        self.conv1 = nn.GATConv(in_channels, hidden, heads, dropout=dropout)
        self.conv2 = nn.GATConv(hidden * heads, classes, heads=1, concat=False, dropout=dropout)

    def forward(self, x, edge_index):
        x = torch.nn.functional.dropout(x, self.dropout, self.training)
        x = torch.nn.functional.elu(self.conv1(x, edge_index))
        x = torch.nn.functional.dropout(x, self.dropout, self.training)
        return self.conv2(x, edge_index)


def make_loader(data, sampler, batch_size, args):
    if args.pyg_sampler:
        return NeighborLoader(data, num_neighbors=[int(k) for k in args.fanout.split(",")], batch_size=batch_size,
                              shuffle=True)
    return NodeLoader(data, node_sampler=sampler, input_nodes=None, batch_size=batch_size, shuffle=True)


def train(label, model, loader, device, epochs):
    opt = torch.optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4)
    model.train()
    step_ms, edges = [], []
    first_ms = None
    for epoch in range(epochs):
        for batch in loader:
            batch = batch.to(device)
            start = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            out = model(batch.x, batch.edge_index)
            loss = torch.nn.functional.cross_entropy(out[:batch.batch_size], batch.y[:batch.batch_size])
            loss.backward()
            opt.step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            ms = (time.perf_counter() - start) * 1e3
            if first_ms is None:
                first_ms = ms
            else:
                step_ms.append(ms)
            edges.append(batch.edge_index.shape[1])
        print(f"{label}: epoch {epoch} loss {loss.item():.4f}", flush=True)
    med = statistics.median(step_ms) if step_ms else first_ms
    print(f"{label}: first step {first_ms:.1f} ms, median step {med:.2f} ms over {len(step_ms)} steps, "
          f"median batch {statistics.median(edges):.0f} edges", flush=True)
    return med


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default=str(ROOT / "data" / "cora"))
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--fanout", default="10,10")
    ap.add_argument("--features", type=int, default=128)
    ap.add_argument("--layers", default="both", choices=["pyg", "dfgnn", "both"])
    ap.add_argument("--pyg-sampler", action="store_true", help="PyG's NeighborLoader (needs pyg-lib or torch-sparse)")
    args = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.float32 if device.type == "cuda" else torch.float64  # dfgnn.torch on the CPU: float64 reference
    x, edge_index, y = load(args.dataset, device, args.features)
    x = x.to(dtype)
    data = Data(x=x, edge_index=edge_index, y=y)
    classes = int(y.max()) + 1
    sampler = GpuNeighborSampler(edge_index, x.shape[0], [int(k) for k in args.fanout.split(",")])
    results = {}
    theirs = GAT(pnn, args.features, 8, 8, classes).to(device, dtype)
    ours = GAT(dt, args.features, 8, 8, classes).to(device, dtype)
    ours.load_state_dict(theirs.state_dict())
    for label, model in (("pyg", theirs), ("dfgnn", ours)):
        if args.layers in (label, "both"):
            results[label] = train(label, model, make_loader(data, sampler, args.batch_size, args), device, args.epochs)
    if len(results) == 2:
        print(f"dfgnn step is {results['pyg'] / results['dfgnn']:.2f}x PyG's", flush=True)


if __name__ == "__main__":
    main()
