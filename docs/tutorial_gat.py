#!/usr/bin/env python3
"""The tutorial's program (docs/tutorial.rst shows it piece by piece): load Cora,
tune its attention ops, train PyG's two-layer GAT with dfgnn's layers, and read
what dispatch chose.

    python docs/tutorial_gat.py     # from the repository root; --epochs N to shorten

On a CUDA machine it tunes and trains in float32 on the GPU. Without one, the
tuning step is skipped with a message and the model trains on the CPU in float64
through dfgnn's reference ops (slower, same model). tools/docs.sh runs it that way
for a few epochs, so the tutorial's code is checked against the current API
whenever the documentation is built.
"""

import argparse
import json
import pathlib

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--data", default="data/cora", help="Cora in dfgnn's layout")
parser.add_argument("--epochs", type=int, default=200)
parser.add_argument("--budget", type=float, default=5.0,
                    help="tuning seconds per op and direction")
args = parser.parse_args()

# [load]
import numpy as np
import dfgnn

data = pathlib.Path(args.data)
# one self-loop per node, as GATConv adds by default
graph = dfgnn.Graph.from_file(data, add_self_loops=True)
print(graph)             # dfgnn.Graph(num_nodes=2708, num_edges=13264)
print(graph.bucket_key)  # n2^11.e2^13.max2^7.cv1
print(graph.fingerprint["max_degree"])  # 169: the largest in-degree, loop included

# Node features (a sparse bag of words), labels and the standard split.
with open(data / "features.txt") as f:
    dims = int(f.readline().split()[4])    # header: "# nodes 2708 dims 1433 ..."
    words = np.loadtxt(f, dtype=np.int64)  # one (node, word) pair per line
x = np.zeros((graph.num_nodes, dims), dtype=np.float32)
x[words[:, 0], words[:, 1]] = 1.0
x /= np.maximum(x.sum(1, keepdims=True), 1.0)  # as PyG's NormalizeFeatures
y = np.loadtxt(data / "labels.txt", dtype=np.int64, comments="#")
split = {}
with open(data / "split.txt") as f:
    for line in f:
        if line.strip() and not line.startswith("#"):
            name, *ids = line.split()
            split[name] = [int(i) for i in ids]
# [/load]

# [tune]
on_gpu, reason = dfgnn.has_device()
layer_ops = [dfgnn.op("gat", "float32", heads=8, dim=8),  # layer 1: 8 heads x 8
             dfgnn.op("gat", "float32", heads=1, dim=7)]  # layer 2: 7 classes
if on_gpu:
    for op in layer_ops:
        for direction in ("forward", "backward"):
            for p in dfgnn.tune(graph, op, direction, budget_seconds=args.budget):
                print(f"{p['pass']:>12}: {p['winner']} "
                      f"({p['speedup_over_default']:.2f}x the default)")
else:
    print(f"no GPU, tuning skipped: {reason}")
# [/tune]

# [model]
import torch
import torch.nn.functional as F
import dfgnn.torch as dt


class GAT(torch.nn.Module):
    """PyG's examples/gat.py model with dfgnn's GATConv (attention dropout 0.6
    runs inside the fused kernels)."""

    def __init__(self, in_channels, hidden, heads, classes):
        super().__init__()
        self.conv1 = dt.GATConv(in_channels, hidden, heads=heads, dropout=0.6)
        self.conv2 = dt.GATConv(hidden * heads, classes, heads=1, concat=False,
                                dropout=0.6)

    def forward(self, x, graph):
        x = F.dropout(x, p=0.6, training=self.training)
        x = F.elu(self.conv1(x, graph))
        x = F.dropout(x, p=0.6, training=self.training)
        return self.conv2(x, graph)


# float32 on the GPU; on the CPU dfgnn.torch runs its float64 reference ops
gpu = on_gpu and torch.cuda.is_available()
device, dtype = ("cuda", torch.float32) if gpu else ("cpu", torch.float64)
torch.manual_seed(0)
model = GAT(dims, 8, 8, int(y.max()) + 1).to(device, dtype)
x_t = torch.from_numpy(x).to(device, dtype)
y_t = torch.from_numpy(y).to(device)
train = torch.arange(*split["train"], device=device)
val = torch.arange(*split["val"], device=device)
test = torch.tensor(split["test"], device=device)
# [/model]

# [train]
optimizer = torch.optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4)
best_val = test_at_best = 0.0
for epoch in range(args.epochs):
    model.train()
    optimizer.zero_grad()
    out = model(x_t, graph)  # the prebuilt Graph, used as given
    loss = F.cross_entropy(out[train], y_t[train])
    loss.backward()
    optimizer.step()
    model.eval()
    with torch.no_grad():
        pred = model(x_t, graph).argmax(-1)
    val_acc = (pred[val] == y_t[val]).double().mean().item()
    if val_acc > best_val:
        best_val = val_acc
        test_at_best = (pred[test] == y_t[test]).double().mean().item()
print(f"{args.epochs} epochs: loss {loss.item():.3f}, best validation accuracy "
      f"{best_val:.3f}, test accuracy there {test_at_best:.3f}")
# [/train]

# [explain]
for op in layer_ops:
    for p in dfgnn.explain(graph, op, "backward"):
        # "cache": this context answered before; "origin" says what answered first
        origin = p.get("origin", p["level"])
        print(f"{p['pass']:>12}: {p['level']}/{origin}  {p['schedule']}")
print(json.dumps(dfgnn.explain(graph, layer_ops[0], "forward"), indent=2))
# [/explain]
