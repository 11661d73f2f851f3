"""An independent pure-NumPy implementation of the four attention models (from the formulas in
dfgnn.h / the README), over a plain edge list, for checking dfgnn's reference ops."""

import numpy as np


def _leaky(x, slope):
    return np.where(x > 0, x, slope * x)


def scores(model, edges, inputs, negative_slope=0.2, scale=None):
    """Per-edge scores e [E, H] for edges (j, i) = (source, target). negative_slope and scale are
    float fields of dfgnn_op_t: use their float32 values (0.2f is not 0.2)."""
    src, dst = edges[:, 0], edges[:, 1]
    negative_slope = float(np.float32(negative_slope))
    scale = None if scale is None else float(np.float32(scale))
    if model == "gat":
        h, a_s, a_d = inputs["h"], inputs["att_src"], inputs["att_dst"]
        return _leaky((h[dst] * a_d).sum(-1) + (h[src] * a_s).sum(-1), negative_slope)
    if model == "gatv2":
        h, hd, a = inputs["h"], inputs["h_dst"], inputs["att_src"]
        return (_leaky(hd[dst] + h[src], negative_slope) * a).sum(-1)
    if model == "transformer":
        q, k = inputs["q"], inputs["k"]
        s = 1.0 / np.sqrt(q.shape[2]) if scale is None else scale
        return s * (q[dst] * k[src]).sum(-1)
    if model == "agnn":
        h, beta = inputs["h"], float(np.asarray(inputs["beta"]).reshape(-1)[0])
        hn = h / np.maximum(np.linalg.norm(h, axis=-1, keepdims=True), 1e-12)
        return beta * (hn[dst] * hn[src]).sum(-1)
    raise ValueError(model)


def forward(model, num_nodes, edges, inputs, negative_slope=0.2, scale=None):
    """(out [N, H, D], lse [N, H]) with a per-target softmax over the in-edges."""
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    value = inputs["v"] if model == "transformer" else inputs["h"]
    _, heads, dim = value.shape
    e = scores(model, edges, inputs, negative_slope, scale)
    out = np.zeros((num_nodes, heads, dim))
    lse = np.full((num_nodes, heads), -np.inf)
    for i in range(num_nodes):
        rows = np.nonzero(edges[:, 1] == i)[0]
        if len(rows) == 0:
            continue
        ei = e[rows]                       # [deg, H]
        m = ei.max(axis=0)
        w = np.exp(ei - m)
        z = w.sum(axis=0)
        alpha = w / z                      # [deg, H]
        out[i] = (alpha[:, :, None] * value[edges[rows, 0]]).sum(axis=0)
        lse[i] = m + np.log(z)
    return out, lse


def numeric_grads(forward_out, inputs, grad_out, eps=1e-6):
    """Central finite differences of sum(grad_out * forward_out()) with respect to every input array;
    forward_out reads the arrays of `inputs`, which are perturbed in place (and restored)."""
    grads = {}
    for name, x in inputs.items():
        g = np.zeros_like(x)
        flat, gflat = x.reshape(-1), g.reshape(-1)
        for t in range(flat.size):
            old = flat[t]
            flat[t] = old + eps
            up = (forward_out() * grad_out).sum()
            flat[t] = old - eps
            down = (forward_out() * grad_out).sum()
            flat[t] = old
            gflat[t] = (up - down) / (2 * eps)
        grads[name] = g
    return grads


def random_inputs(model, num_nodes, heads, dim, rng):
    f = lambda: rng.standard_normal((num_nodes, heads, dim))  # noqa: E731
    p = lambda: rng.standard_normal((heads, dim))  # noqa: E731
    if model == "gat":
        return {"h": f(), "att_src": p(), "att_dst": p()}
    if model == "gatv2":
        return {"h": f(), "h_dst": f(), "att_src": p()}
    if model == "transformer":
        return {"q": f(), "k": f(), "v": f()}
    return {"h": f(), "beta": np.array([rng.uniform(0.5, 2.0)])}
