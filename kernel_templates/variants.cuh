// dfgnn kernel templates, part 2: the models as variant functors. Each supplies the score of an
// edge j -> i from a row-side context (node i) and a key fragment (node j), and the pieces of its
// gradient; the passes in passes.cuh plug them into one softmax/aggregation skeleton.
//
// Interface of a variant M<G>:
//   S                       number of per-lane partial sums that a score needs (group-reduced)
//   kSeparateValue          aggregated values come from x2 (Transformer) instead of the key (h_j)
//   Row, load_row(...)      row-side context of node i (registers, group-uniform scalars)
//   load_key(...)           key fragment of node j
//   partials(...), score()  lane partial sums, then the score from their group sums
// and, with edge features (G::E; edge = the edge's id, the row of Params::edge):
//   edge_key(...)           adds the edge's features to the key (and value) fragments
//   edge_sums(...)          adds the edge's scalar term to the group sums (GAT's logit term)
//   RowGrad::edge_grad(...) writes the edge's gradient (the row pass visits each edge once)
//   ColGrad::edge_nbr(...)  the edge's part of a column-pass neighbour (Nbr) and partial sums
#pragma once

namespace dfgnn {

template <typename G>
__device__ __forceinline__ const typename G::T* row_of(const void* base, int node, int head) {
  return static_cast<const typename G::T*>(base) + (static_cast<long long>(node) * G::H + head) * G::D;
}
template <typename G>
__device__ __forceinline__ typename G::T* row_of_mut(void* base, int node, int head) {
  return static_cast<typename G::T*>(base) + (static_cast<long long>(node) * G::H + head) * G::D;
}
template <typename G>
__device__ __forceinline__ float node_scalar(const float* a, int node, int head) {
  return a[static_cast<long long>(node) * G::H + head];
}

// Row (edge, head) of the edge features and of their gradient: [E, H, D] in T; GAT's [E, H] float32.
template <typename G>
__device__ __forceinline__ const typename G::T* edge_row(const Params& p, int edge, int head) {
  return static_cast<const typename G::T*>(p.edge) + (static_cast<long long>(edge) * G::H + head) * G::D;
}
template <typename G>
__device__ __forceinline__ typename G::T* edge_grad_row(const Params& p, int edge, int head) {
  return static_cast<typename G::T*>(p.g_edge) + (static_cast<long long>(edge) * G::H + head) * G::D;
}
template <typename G>
__device__ __forceinline__ float edge_scalar(const Params& p, int edge, int head) {
  return static_cast<const float*>(p.edge)[static_cast<long long>(edge) * G::H + head];
}

// Fragment of a float32 [H, D] parameter (attention vectors), element-wise loads.
template <typename G>
__device__ __forceinline__ void load_param(const float* base, int head, int gl, float (&f)[G::R]) {
#pragma unroll
  for (int r = 0; r < G::R; ++r) {
    const int d = channel<G>(gl, r);
    f[r] = d < G::D ? base[head * G::D + d] : 0.f;
  }
}

// ---------------------------------------------------------------- Graph Transformer
template <typename G>
struct Transformer {
  static constexpr int kModel = 2;  // DFGNN_MODEL_TRANSFORMER: its row of model_traits (params.cuh)
  static constexpr int S = 1;
  static constexpr bool kSeparateValue = true;
  struct Row {
    float q[G::R];
  };
  __device__ static void load_row(const Params& p, int node, int head, int gl, unsigned, Row& row) {
    load_frag<G>(row_of<G>(p.x0, node, head), gl, row.q);
  }
  __device__ static void load_key(const Params& p, int j, int head, int gl, float (&k)[G::R]) {
    load_frag<G>(row_of<G>(p.x1, j, head), gl, k);
  }
  // PyG adds the edge's features to its key and to its value.
  __device__ static void edge_key(const Params& p, int edge, int head, int gl, float (&k)[G::R], float (&v)[G::R]) {
    float e[G::R];
    load_frag<G>(edge_row<G>(p, edge, head), gl, e);
#pragma unroll
    for (int r = 0; r < G::R; ++r) k[r] += e[r], v[r] += e[r];
  }
  __device__ static void edge_sums(const Params&, int, int, float (&)[S]) {}
  __device__ static void partials(const Params&, const Row& row, const float (&k)[G::R], float (&s)[S]) {
    s[0] = dot(row.q, k);
  }
  __device__ static float score(const Params& p, const Row&, const float (&s)[S]) { return p.scale * s[0]; }

  // Backward hooks. Row: d q_i = scale * sum_j ds k_j. Column: d k_j = scale * sum_i ds q_i.
  static constexpr bool kPrep = false;
  __device__ static float prep(const Params&, int, int, int, unsigned) { return 0.f; }
  struct RowGrad {
    static constexpr int NV = 1, NS = 0;
    template <typename St>
    __device__ static void accumulate(const Params&, const Row&, const float (&k)[G::R], const float (&)[S], float ds,
                                      St& st) {
#pragma unroll
      for (int r = 0; r < G::R; ++r) st.v[0][r] = fmaf(ds, k[r], st.v[0][r]);
    }
    template <typename St>
    __device__ static void finish(const Params& p, const Row&, int node, int head, int gl, unsigned, St& st) {
#pragma unroll
      for (int r = 0; r < G::R; ++r) st.v[0][r] *= p.scale;
      store_frag<G>(row_of_mut<G>(p.g0, node, head), gl, st.v[0]);
    }
    // d edge_ij = w_ij dout_i (through the value; w = p_ij m_ij) + ds_ij scale q_i (through the key).
    __device__ static void edge_grad(const Params& p, const Row& row, const float (&)[G::R], const float (&)[S],
                                     const float (&dout)[G::R], float w, float ds, int edge, int head, int gl) {
      float g[G::R];
#pragma unroll
      for (int r = 0; r < G::R; ++r) g[r] = fmaf(w, dout[r], ds * p.scale * row.q[r]);
      store_frag<G>(edge_grad_row<G>(p, edge, head), gl, g);
    }
  };
  struct ColGrad {
    static constexpr int S = 1, NV = 1, NS = 0, kNbrFrags = 1;
    struct Col {
      float k[G::R], v[G::R];
    };
    struct Nbr {
      float q[G::R];
    };
    __device__ static void load_col(const Params& p, int node, int head, int gl, unsigned, Col& c) {
      load_frag<G>(row_of<G>(p.x1, node, head), gl, c.k);
      load_frag<G>(row_of<G>(p.x2, node, head), gl, c.v);
    }
    __device__ static const float (&value(const Col& c))[G::R] { return c.v; }
    __device__ static void load_nbr(const Params& p, int i, int head, int gl, Nbr& n) {
      load_frag<G>(row_of<G>(p.x0, i, head), gl, n.q);
    }
    __device__ static void partials(const Params&, const Col& c, const Nbr& n, float (&s)[S + 1]) { s[0] = dot(n.q, c.k); }
    __device__ static float score(const Params& p, const Col&, const Nbr&, const float (&s)[S + 1], float&) {
      return p.scale * s[0];
    }
    // The edge's features in the key (q_i . e) and in the value (dout_i . e, part of dp).
    __device__ static void edge_nbr(const Params& p, int edge, int head, int gl, Nbr& n, const float (&dout)[G::R],
                                    float (&extra)[S + 1]) {
      float e[G::R];
      load_frag<G>(edge_row<G>(p, edge, head), gl, e);
      extra[0] = dot(n.q, e);
      extra[S] = dot(dout, e);
    }
    template <typename St>
    __device__ static void accumulate(const Params&, const Col&, const Nbr& n, float, float ds, St& st) {
#pragma unroll
      for (int r = 0; r < G::R; ++r) st.v[1][r] = fmaf(ds, n.q[r], st.v[1][r]);
    }
    template <typename St>
    __device__ static void finish(const Params& p, const Col&, int node, int head, int gl, unsigned, St& st) {
#pragma unroll
      for (int r = 0; r < G::R; ++r) st.v[1][r] *= p.scale;
      store_frag<G>(row_of_mut<G>(p.g1, node, head), gl, st.v[1]);
      store_frag<G>(row_of_mut<G>(p.g2, node, head), gl, st.v[0]);
    }
  };
};

// ---------------------------------------------------------------- GAT
template <typename G>
struct Gat {
  static constexpr int kModel = 0;  // DFGNN_MODEL_GAT: its row of model_traits (params.cuh)
  static constexpr int S = 1;
  static constexpr bool kSeparateValue = false;
  struct Row {
    float att_src[G::R];
    float er;  // att_dst . h_i, group-uniform
  };
  __device__ static void load_row(const Params& p, int node, int head, int gl, unsigned mask, Row& row) {
    float h[G::R], a[G::R];
    load_frag<G>(row_of<G>(p.x0, node, head), gl, h);
    load_param<G>(p.att_dst, head, gl, a);
    row.er = group_sum<G::L>(dot(h, a), mask);
    load_param<G>(p.att_src, head, gl, row.att_src);
  }
  __device__ static void load_key(const Params& p, int j, int head, int gl, float (&k)[G::R]) {
    load_frag<G>(row_of<G>(p.x0, j, head), gl, k);
  }
  __device__ static void partials(const Params&, const Row& row, const float (&k)[G::R], float (&s)[S]) {
    s[0] = dot(row.att_src, k);
  }
  __device__ static float score(const Params& p, const Row& row, const float (&s)[S]) {
    return leaky(row.er + s[0], p.slope);
  }
  // GAT's edge term (att_edge . lin_edge(edge_attr), computed by the caller) joins el_j inside the LeakyReLU.
  __device__ static void edge_key(const Params&, int, int, int, float (&)[G::R], float (&)[G::R]) {}
  __device__ static void edge_sums(const Params& p, int edge, int head, float (&s)[S]) { s[0] += edge_scalar<G>(p, edge, head); }

  // Backward hooks. With z_ij = er_i + el_j and dz = ds * LeakyReLU'(z): the row pass sums
  // d er_i = sum_j dz; the column pass sums d el_j = sum_i dz and writes
  // dh_j = sum_i p_ij dout_i + d el_j att_src + d er_j att_dst. Parameter gradients are
  // weighted node sums of h (reduce kernel): d att_src = sum_j d el_j h_j, d att_dst likewise.
  static constexpr bool kPrep = true;  // node_a = er = att_dst . h
  __device__ static float prep(const Params& p, int node, int head, int gl, unsigned mask) {
    float h[G::R], a[G::R];
    load_frag<G>(row_of<G>(p.x0, node, head), gl, h);
    load_param<G>(p.att_dst, head, gl, a);
    return group_sum<G::L>(dot(h, a), mask);
  }
  struct RowGrad {
    static constexpr int NV = 0, NS = 1;
    template <typename St>
    __device__ static void accumulate(const Params& p, const Row& row, const float (&)[G::R], const float (&sums)[S],
                                      float ds, St& st) {
      st.s[0] = fmaf(ds, leaky_grad(row.er + sums[0], p.slope), st.s[0]);
    }
    template <typename St>
    __device__ static void finish(const Params& p, const Row&, int node, int head, int gl, unsigned, St& st) {
      if (gl == 0) p.node_c[static_cast<long long>(node) * G::H + head] = st.s[0];
    }
    // d edge_ij = dz_ij (sums[0] already holds el_j + edge_ij).
    __device__ static void edge_grad(const Params& p, const Row& row, const float (&)[G::R], const float (&sums)[S],
                                     const float (&)[G::R], float, float ds, int edge, int head, int gl) {
      if (gl == 0)
        static_cast<float*>(p.g_edge)[static_cast<long long>(edge) * G::H + head] =
            ds * leaky_grad(row.er + sums[0], p.slope);
    }
  };
  struct ColGrad {
    static constexpr int S = 0, NV = 0, NS = 1, kNbrFrags = 0;
    struct Col {
      float h[G::R];
      float el;
    };
    struct Nbr {
      float er;
    };
    __device__ static void load_col(const Params& p, int node, int head, int gl, unsigned mask, Col& c) {
      float a[G::R];
      load_frag<G>(row_of<G>(p.x0, node, head), gl, c.h);
      load_param<G>(p.att_src, head, gl, a);
      c.el = group_sum<G::L>(dot(c.h, a), mask);
    }
    __device__ static const float (&value(const Col& c))[G::R] { return c.h; }
    __device__ static void load_nbr(const Params& p, int i, int head, int, Nbr& n) {
      n.er = p.node_a[static_cast<long long>(i) * G::H + head];
    }
    __device__ static void edge_nbr(const Params& p, int edge, int head, int, Nbr& n, const float (&)[G::R],
                                    float (&)[S + 1]) {
      n.er += edge_scalar<G>(p, edge, head);
    }
    __device__ static void partials(const Params&, const Col&, const Nbr&, float (&)[S + 1]) {}
    __device__ static float score(const Params& p, const Col& c, const Nbr& n, const float (&)[S + 1], float& z) {
      z = n.er + c.el;
      return leaky(z, p.slope);
    }
    template <typename St>
    __device__ static void accumulate(const Params& p, const Col&, const Nbr&, float z, float ds, St& st) {
      st.s[0] = fmaf(ds, leaky_grad(z, p.slope), st.s[0]);
    }
    template <typename St>
    __device__ static void finish(const Params& p, const Col& c, int node, int head, int gl, unsigned, St& st) {
      float a_src[G::R], a_dst[G::R];
      load_param<G>(p.att_src, head, gl, a_src);
      load_param<G>(p.att_dst, head, gl, a_dst);
      const long long nh = static_cast<long long>(node) * G::H + head;
      const float der = p.node_c[nh], del = st.s[0];
#pragma unroll
      for (int r = 0; r < G::R; ++r) st.v[0][r] += del * a_src[r] + der * a_dst[r];
      store_frag<G>(row_of_mut<G>(p.g0, node, head), gl, st.v[0]);
      if (gl == 0) p.node_b[nh] = del;
    }
  };
};

// ---------------------------------------------------------------- GATv2
template <typename G>
struct Gatv2 {
  static constexpr int kModel = 1;  // DFGNN_MODEL_GATV2: its row of model_traits (params.cuh)
  static constexpr int S = 1;
  // With edge features the key becomes h_j + edge_ij while h_j is aggregated: the value is then
  // loaded on its own (x2 = h, the same rows, mostly cache hits).
  static constexpr bool kSeparateValue = G::E;
  struct Row {
    float h_dst[G::R];
    float att[G::R];
  };
  __device__ static void load_row(const Params& p, int node, int head, int gl, unsigned, Row& row) {
    load_frag<G>(row_of<G>(p.x1, node, head), gl, row.h_dst);
    load_param<G>(p.att_src, head, gl, row.att);
  }
  __device__ static void load_key(const Params& p, int j, int head, int gl, float (&k)[G::R]) {
    load_frag<G>(row_of<G>(p.x0, j, head), gl, k);
  }
  __device__ static void partials(const Params& p, const Row& row, const float (&k)[G::R], float (&s)[S]) {
    float acc = 0.f;
#pragma unroll
    for (int r = 0; r < G::R; ++r) acc = fmaf(row.att[r], leaky(row.h_dst[r] + k[r], p.slope), acc);
    s[0] = acc;  // padded channels have att = 0
  }
  __device__ static float score(const Params&, const Row&, const float (&s)[S]) { return s[0]; }
  __device__ static void edge_key(const Params& p, int edge, int head, int gl, float (&k)[G::R], float (&)[G::R]) {
    float e[G::R];
    load_frag<G>(edge_row<G>(p, edge, head), gl, e);
#pragma unroll
    for (int r = 0; r < G::R; ++r) k[r] += e[r];
  }
  __device__ static void edge_sums(const Params&, int, int, float (&)[S]) {}

  // Backward hooks. With z = h_dst_i + h_j (per channel), ds spreads as ds att LeakyReLU'(z) to
  // both sides; d att = sum over edges of ds LeakyReLU(z), summed per row into param_part.
  static constexpr bool kPrep = false;
  __device__ static float prep(const Params&, int, int, int, unsigned) { return 0.f; }
  struct RowGrad {
    static constexpr int NV = 2, NS = 0;  // d h_dst, d att (row contribution)
    template <typename St>
    __device__ static void accumulate(const Params& p, const Row& row, const float (&k)[G::R], const float (&)[S],
                                      float ds, St& st) {
#pragma unroll
      for (int r = 0; r < G::R; ++r) {
        const float z = row.h_dst[r] + k[r];
        st.v[0][r] = fmaf(ds * row.att[r], leaky_grad(z, p.slope), st.v[0][r]);
        st.v[1][r] = fmaf(ds, leaky(z, p.slope), st.v[1][r]);
      }
    }
    template <typename St>
    __device__ static void finish(const Params& p, const Row&, int node, int head, int gl, unsigned, St& st) {
      store_frag<G>(row_of_mut<G>(p.g1, node, head), gl, st.v[0]);
      store_frag<G>(p.param_part + (static_cast<long long>(node) * G::H + head) * G::D, gl, st.v[1]);
    }
    // d edge_ij = dz_ij per channel, as d h_dst_i's term (k already holds h_j + edge_ij).
    __device__ static void edge_grad(const Params& p, const Row& row, const float (&k)[G::R], const float (&)[S],
                                     const float (&)[G::R], float, float ds, int edge, int head, int gl) {
      float g[G::R];
#pragma unroll
      for (int r = 0; r < G::R; ++r) g[r] = ds * row.att[r] * leaky_grad(row.h_dst[r] + k[r], p.slope);
      store_frag<G>(edge_grad_row<G>(p, edge, head), gl, g);
    }
  };
  struct ColGrad {
    static constexpr int S = 1, NV = 1, NS = 0, kNbrFrags = 1;
    struct Col {
      float h[G::R], att[G::R];
    };
    struct Nbr {
      float h_dst[G::R];
    };
    __device__ static void load_col(const Params& p, int node, int head, int gl, unsigned, Col& c) {
      load_frag<G>(row_of<G>(p.x0, node, head), gl, c.h);
      load_param<G>(p.att_src, head, gl, c.att);
    }
    __device__ static const float (&value(const Col& c))[G::R] { return c.h; }
    __device__ static void load_nbr(const Params& p, int i, int head, int gl, Nbr& n) {
      load_frag<G>(row_of<G>(p.x1, i, head), gl, n.h_dst);
    }
    // z = h_dst_i + edge_ij + h_j: the edge joins the neighbour's side.
    __device__ static void edge_nbr(const Params& p, int edge, int head, int gl, Nbr& n, const float (&)[G::R],
                                    float (&)[S + 1]) {
      float e[G::R];
      load_frag<G>(edge_row<G>(p, edge, head), gl, e);
#pragma unroll
      for (int r = 0; r < G::R; ++r) n.h_dst[r] += e[r];
    }
    __device__ static void partials(const Params& p, const Col& c, const Nbr& n, float (&s)[S + 1]) {
      float acc = 0.f;
#pragma unroll
      for (int r = 0; r < G::R; ++r) acc = fmaf(c.att[r], leaky(n.h_dst[r] + c.h[r], p.slope), acc);
      s[0] = acc;
    }
    __device__ static float score(const Params&, const Col&, const Nbr&, const float (&s)[S + 1], float&) { return s[0]; }
    template <typename St>
    __device__ static void accumulate(const Params& p, const Col& c, const Nbr& n, float, float ds, St& st) {
#pragma unroll
      for (int r = 0; r < G::R; ++r)
        st.v[1][r] = fmaf(ds * c.att[r], leaky_grad(n.h_dst[r] + c.h[r], p.slope), st.v[1][r]);
    }
    template <typename St>
    __device__ static void finish(const Params& p, const Col&, int node, int head, int gl, unsigned, St& st) {
#pragma unroll
      for (int r = 0; r < G::R; ++r) st.v[0][r] += st.v[1][r];
      store_frag<G>(row_of_mut<G>(p.g0, node, head), gl, st.v[0]);
    }
  };
};

// ---------------------------------------------------------------- AGNN

template <typename G>
struct Agnn {
  static constexpr int kModel = 3;  // DFGNN_MODEL_AGNN: its row of model_traits (params.cuh)
  static_assert(!G::E, "AGNN takes no edge features");
  static constexpr float kAgnnEps = 1e-12f;  // torch.nn.functional.normalize's eps
  static constexpr int S = 2;  // h_i . h_j and |h_j|^2
  static constexpr bool kSeparateValue = false;
  struct Row {
    float h[G::R];
    float inv_norm;  // 1 / max(|h_i|, eps)
    float beta;
  };
  __device__ static void load_row(const Params& p, int node, int head, int gl, unsigned mask, Row& row) {
    load_frag<G>(row_of<G>(p.x0, node, head), gl, row.h);
    row.inv_norm = 1.f / fmaxf(sqrtf(group_sum<G::L>(dot(row.h, row.h), mask)), kAgnnEps);
    row.beta = *p.beta;
  }
  __device__ static void load_key(const Params& p, int j, int head, int gl, float (&k)[G::R]) {
    load_frag<G>(row_of<G>(p.x0, j, head), gl, k);
  }
  __device__ static void partials(const Params&, const Row& row, const float (&k)[G::R], float (&s)[S]) {
    s[0] = dot(row.h, k);
    s[1] = dot(k, k);
  }
  __device__ static float score(const Params&, const Row& row, const float (&s)[S]) {
    return row.beta * s[0] * row.inv_norm / fmaxf(sqrtf(s[1]), kAgnnEps);
  }

  // Backward hooks. c = (h_i . h_j) n_i n_j with n = 1 / max(|h|, eps); d c / d h_i =
  // n_i n_j h_j - c n_i^2 h_i (the second term vanishes where the eps clamp is active).
  // The row pass writes its part of dh_i in float32 to param_part-sized row_grad scratch; the
  // column pass adds the rest; d beta = sum over edges of ds c (per row into param_part).
  static constexpr bool kPrep = true;  // node_a = 1 / max(|h|, eps)
  __device__ static float prep(const Params& p, int node, int head, int gl, unsigned mask) {
    float h[G::R];
    load_frag<G>(row_of<G>(p.x0, node, head), gl, h);
    return 1.f / fmaxf(sqrtf(group_sum<G::L>(dot(h, h), mask)), kAgnnEps);
  }
  __device__ static bool unclamped(float inv_norm) { return inv_norm < 1.f / kAgnnEps; }
  struct RowGrad {
    static constexpr int NV = 1, NS = 2;  // sum g n_j h_j; sum g c; sum ds c
    template <typename St>
    __device__ static void accumulate(const Params&, const Row& row, const float (&k)[G::R], const float (&sums)[S],
                                      float ds, St& st) {
      const float inv_j = 1.f / fmaxf(sqrtf(sums[1]), kAgnnEps);
      const float c = sums[0] * row.inv_norm * inv_j;
      const float g = ds * row.beta;
#pragma unroll
      for (int r = 0; r < G::R; ++r) st.v[0][r] = fmaf(g * inv_j, k[r], st.v[0][r]);
      st.s[0] = fmaf(g, c, st.s[0]);
      st.s[1] = fmaf(ds, c, st.s[1]);
    }
    template <typename St>
    __device__ static void finish(const Params& p, const Row& row, int node, int head, int gl, unsigned, St& st) {
      const float n = row.inv_norm, self = unclamped(n) ? st.s[0] * n * n : 0.f;
#pragma unroll
      for (int r = 0; r < G::R; ++r) st.v[0][r] = n * st.v[0][r] - self * row.h[r];
      const long long nh = static_cast<long long>(node) * G::H + head;
      store_frag<G>(p.row_grad + nh * G::D, gl, st.v[0]);
      if (gl == 0) p.param_part[nh] = st.s[1];
    }
  };
  struct ColGrad {
    static constexpr int S = 1, NV = 1, NS = 1, kNbrFrags = 1;
    struct Col {
      float h[G::R];
      float inv, beta;
    };
    struct Nbr {
      float h[G::R];
      float inv;
    };
    __device__ static void load_col(const Params& p, int node, int head, int gl, unsigned, Col& c) {
      load_frag<G>(row_of<G>(p.x0, node, head), gl, c.h);
      c.inv = node_scalar<G>(p.node_a, node, head);
      c.beta = *p.beta;
    }
    __device__ static const float (&value(const Col& c))[G::R] { return c.h; }
    __device__ static void load_nbr(const Params& p, int i, int head, int gl, Nbr& n) {
      load_frag<G>(row_of<G>(p.x0, i, head), gl, n.h);
      n.inv = node_scalar<G>(p.node_a, i, head);
    }
    __device__ static void partials(const Params&, const Col& c, const Nbr& n, float (&s)[S + 1]) { s[0] = dot(n.h, c.h); }
    __device__ static float score(const Params&, const Col& c, const Nbr& n, const float (&s)[S + 1], float& cosine) {
      cosine = s[0] * n.inv * c.inv;
      return c.beta * cosine;
    }
    template <typename St>
    __device__ static void accumulate(const Params&, const Col& c, const Nbr& n, float cosine, float ds, St& st) {
      const float g = ds * c.beta;
#pragma unroll
      for (int r = 0; r < G::R; ++r) st.v[1][r] = fmaf(g * n.inv, n.h[r], st.v[1][r]);
      st.s[0] = fmaf(g, cosine, st.s[0]);
    }
    template <typename St>
    __device__ static void finish(const Params& p, const Col& c, int node, int head, int gl, unsigned, St& st) {
      float row[G::R];
      const long long nh = static_cast<long long>(node) * G::H + head;
      load_frag<G>(p.row_grad + nh * G::D, gl, row);
      const float self = unclamped(c.inv) ? st.s[0] * c.inv * c.inv : 0.f;
#pragma unroll
      for (int r = 0; r < G::R; ++r) st.v[0][r] += row[r] + c.inv * st.v[1][r] - self * c.h[r];
      store_frag<G>(row_of_mut<G>(p.g0, node, head), gl, st.v[0]);
    }
  };
};

}  // namespace dfgnn
