// dfgnn kernel templates, part 3: passes. A pass is what one lane group computes for one
// (node, head) over a segment of that node's edges; schedules (schedules.cuh) decide which group
// takes which segment and merge partial states. Three passes per model:
//   Forward      CSR rows: online softmax + aggregation, writes out and lse
//   BackwardRow  CSR rows: row-side gradients (dq, d h_dst, d er, AGNN's row part)
//   BackwardCol  CSC columns: column-side gradients (dk, dv, dh_j) without atomics
// Scores are recomputed from the saved per-(node, head) log-sum-exp; no E x H array is stored.
#pragma once

namespace dfgnn {

// Accumulator state of a group: NV vector fragments and NS group-uniform scalars.
template <int NV, int NS, int R>
struct Acc {
  float v[NV > 0 ? NV : 1][R];
  float s[NS > 0 ? NS : 1];
};

template <int NV, int NS, int R>
__device__ __forceinline__ void zero(Acc<NV, NS, R>& a) {
#pragma unroll
  for (int k = 0; k < NV; ++k) fill(a.v[k], 0.f);
#pragma unroll
  for (int k = 0; k < NS; ++k) a.s[k] = 0.f;
}

template <int NV, int NS, int R>
__device__ __forceinline__ void add(Acc<NV, NS, R>& a, const Acc<NV, NS, R>& b) {
#pragma unroll
  for (int k = 0; k < NV; ++k)
#pragma unroll
    for (int r = 0; r < R; ++r) a.v[k][r] += b.v[k][r];
#pragma unroll
  for (int k = 0; k < NS; ++k) a.s[k] += b.s[k];
}

// Serialised state: NS scalars, then NV blocks of D channels.
template <typename G, int NV, int NS>
__device__ __forceinline__ void store_state(float* dst, int gl, const Acc<NV, NS, G::R>& a) {
  if (gl == 0)
#pragma unroll
    for (int k = 0; k < NS; ++k) dst[k] = a.s[k];
#pragma unroll
  for (int k = 0; k < NV; ++k)
#pragma unroll
    for (int r = 0; r < G::R; ++r) {
      const int d = channel<G>(gl, r);
      if (d < G::D) dst[NS + k * G::D + d] = a.v[k][r];
    }
}

template <typename G, int NV, int NS>
__device__ __forceinline__ void load_state(const float* src, int gl, Acc<NV, NS, G::R>& a) {
#pragma unroll
  for (int k = 0; k < NS; ++k) a.s[k] = src[k];
#pragma unroll
  for (int k = 0; k < NV; ++k)
#pragma unroll
    for (int r = 0; r < G::R; ++r) {
      const int d = channel<G>(gl, r);
      a.v[k][r] = d < G::D ? src[NS + k * G::D + d] : 0.f;
    }
}

// Edges handled per step: enough independent gathers in flight to hide latency, bounded by the
// registers they occupy (floats per edge per lane).
template <int FloatsPerEdge>
__host__ __device__ constexpr int batch_for() {
  return FloatsPerEdge <= 8 ? 4 : FloatsPerEdge <= 16 ? 2 : 1;
}

// Loads U neighbour ids of a batch starting at e0 with n valid entries; invalid slots repeat the
// last valid id, so their (discarded) gathers stay in bounds and hit the cache.
template <int U>
__device__ __forceinline__ void load_ids(const Params& p, int e0, int n, int (&j)[U]) {
#pragma unroll
  for (int u = 0; u < U; ++u) j[u] = p.idx[e0 + (u < n ? u : n - 1)];
}

// Edge ids (rows of the edge features) of a batch, invalid slots as in load_ids. The column pass
// reaches them through the CSR position of its CSC entries.
template <int U>
__device__ __forceinline__ void load_edge_ids(const Params& p, int e0, int n, int (&e)[U]) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int pos = e0 + (u < n ? u : n - 1);
    e[u] = p.edge_id[p.eid != nullptr ? p.eid[pos] : pos];
  }
}

// The dropout mask's key of a thread's head, derived once per kernel, not per row (the seed may
// live in device memory, so that a captured graph replays with new seeds); 0 without dropout.
template <typename G>
__device__ __forceinline__ unsigned load_dropout_key(const Params& p, int head) {
  if constexpr (!G::P) {
    return 0u;
  } else {
    if (p.dropout_threshold == 0u) return 0u;
    return dropout_key(p.dropout_seed_ptr != nullptr ? *p.dropout_seed_ptr : p.dropout_seed, head);
  }
}

// Dropout keep bits of a batch: bit u is set when edge e0 + u (u < n) of the traversed structure
// keeps its weight (every bit without dropout). One word, not U factors: the factors stayed live
// through the batch and cost the backward row pass 17 registers. The L lanes of a head's segment
// would each hash every edge of the batch; instead lane gl hashes edges gl, gl + L, ... and one
// ballot per round hands the keep bits to the segment, so a lane hashes ceil(U / L) edges a batch.
template <typename G, int U, bool kColumns>
__device__ __forceinline__ unsigned dropout_batch(const Params& p, unsigned key, int e0, int n, int gl, unsigned mask) {
  static_assert(U <= 32, "one bit per edge of the batch");
  if (!G::P || p.dropout_threshold == 0u) return ~0u;  // G::P false: no mask code compiled at all
  const auto keeps = [&](int u) {
    const int pos = e0 + u;
    return dropout_keeps(key, p.dropout_threshold, kColumns ? p.eid[pos] : pos);
  };
  unsigned bits = 0u;
  if constexpr (G::L == 1) {
#pragma unroll
    for (int u = 0; u < U; ++u) bits |= (u < n && keeps(u)) ? 1u << u : 0u;
  } else {
    constexpr unsigned segment = G::L >= 32 ? ~0u : (1u << G::L) - 1u;
    const int first = (threadIdx.x & 31) - gl;  // the segment's first lane in the warp
#pragma unroll
    for (int u0 = 0; u0 < U; u0 += G::L)
      bits |= ((__ballot_sync(mask, u0 + gl < n && keeps(u0 + gl)) >> first) & segment) << u0;
  }
  return bits;
}

// The factor of edge u of a batch: 1 / (1 - p) when kept, 0 when dropped, 1 without dropout.
template <typename G>
__device__ __forceinline__ float dropout_factor_of(const Params& p, unsigned bits, int u) {
  if constexpr (!G::P) {
    return 1.f;
  } else {
    return (bits >> u) & 1u ? p.dropout_scale : 0.f;
  }
}

// ================================================================ forward
template <typename G, template <typename> class Var>
struct Forward {
  using G_ = G;
  using M = Var<G>;
  using T = typename G::T;
  static constexpr int NV = 1, NS = 2;  // acc; running max m, running sum l
  static_assert(NV == model_traits(M::kModel).forward.nv && NS == model_traits(M::kModel).forward.ns,
                "the model table's forward state (params.cuh) disagrees with the pass");
  static constexpr int U = batch_for<G::R*(M::kSeparateValue ? 2 : 1)>();
  static constexpr bool kHalfOccupancy = false;  // fits 64 registers by itself at small R
  using State = Acc<NV, NS, G::R>;
  struct Ctx {
    typename M::Row row;
    unsigned key;  // dropout (load_dropout_key)
    int node, head;
  };

  __device__ static void load_ctx(const Params& p, int node, int head, unsigned key, int gl, unsigned mask, Ctx& c) {
    c.node = node;
    c.head = head;
    c.key = key;
    M::load_row(p, node, head, gl, mask, c.row);
  }
  __device__ static void init(State& st) {
    fill(st.v[0], 0.f);
    st.s[0] = neg_inf();
    st.s[1] = 0.f;
  }
  __device__ static void consume(const Params& p, const Ctx& c, int e0, int n, int gl, unsigned mask, State& st) {
    int j[U], edge[G::E ? U : 1];
    load_ids<U>(p, e0, n, j);
    if constexpr (G::E) load_edge_ids<U>(p, e0, n, edge);
    float key[U][G::R];
    float val[M::kSeparateValue ? U : 1][G::R];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      M::load_key(p, j[u], c.head, gl, key[u]);
      if constexpr (M::kSeparateValue) load_frag<G>(row_of<G>(p.x2, j[u], c.head), gl, val[u]);
      if constexpr (G::E) M::edge_key(p, edge[u], c.head, gl, key[u], val[M::kSeparateValue ? u : 0]);
    }
    const unsigned kept = dropout_batch<G, U, false>(p, c.key, e0, n, gl, mask);
    float part[U][M::S];
#pragma unroll
    for (int u = 0; u < U; ++u) M::partials(p, c.row, key[u], part[u]);
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int s = 0; s < M::S; ++s) part[u][s] = group_sum<G::L>(part[u][s], mask);
      if constexpr (G::E) M::edge_sums(p, edge[u], c.head, part[u]);
    }
    float score[U];
    float m_new = st.s[0];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      score[u] = u < n ? M::score(p, c.row, part[u]) : neg_inf();
      m_new = fmaxf(m_new, score[u]);
    }
    const float correction = exp_fast(st.s[0] - m_new);  // 0 on the first batch (m = -inf)
    st.s[1] *= correction;
#pragma unroll
    for (int r = 0; r < G::R; ++r) st.v[0][r] *= correction;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const float w = exp_fast(score[u] - m_new);
      st.s[1] += w;  // the softmax normalises over every edge; dropout scales what is aggregated
      const float wv = u < n ? w * dropout_factor_of<G>(p, kept, u) : 0.f;
      const float(&value)[G::R] = M::kSeparateValue ? val[M::kSeparateValue ? u : 0] : key[u];
#pragma unroll
      for (int r = 0; r < G::R; ++r) st.v[0][r] = fmaf(wv, value[r], st.v[0][r]);
    }
    st.s[0] = m_new;
  }
  // Softmax merge of two partial states of the same row (split rows, block teams).
  __device__ static void merge(State& a, const State& b) {
    const float m = fmaxf(a.s[0], b.s[0]);
    if (m == neg_inf()) return;  // both empty
    const float ca = exp_fast(a.s[0] - m), cb = exp_fast(b.s[0] - m);
    a.s[1] = a.s[1] * ca + b.s[1] * cb;
#pragma unroll
    for (int r = 0; r < G::R; ++r) a.v[0][r] = a.v[0][r] * ca + b.v[0][r] * cb;
    a.s[0] = m;
  }
  __device__ static void finish(const Params& p, const Ctx& c, int gl, unsigned, State& st) {
    const float l = st.s[1];
    const float inv = l > 0.f ? 1.f / l : 0.f;  // a row without edges gives 0, never NaN
#pragma unroll
    for (int r = 0; r < G::R; ++r) st.v[0][r] *= inv;
    store_frag<G>(row_of_mut<G>(p.out, c.node, c.head), gl, st.v[0]);
    if (p.lse != nullptr && gl == 0)
      p.lse[static_cast<long long>(c.node) * G::H + c.head] = l > 0.f ? st.s[0] + logf(l) : neg_inf();
  }
};

// ================================================================ backward, row side (CSR)
// Per edge j of row i: p_ij = exp(s_ij - lse_i), dp_ij = m_ij dout_i . value_j (m: the dropout
// factor, 1 without dropout), ds_ij = p_ij (dp_ij - Delta_i); the variant's row hook accumulates ds
// into row gradients. Delta_i = dout_i . out_i already holds the dropped weights.
template <typename G, template <typename> class Var>
struct BackwardRow {
  using G_ = G;
  using M = Var<G>;
  using Hooks = typename M::RowGrad;
  static constexpr int NV = Hooks::NV, NS = Hooks::NS;
  static_assert(NV == model_traits(M::kModel).backward_row.nv && NS == model_traits(M::kModel).backward_row.ns,
                "the model table's backward row state (params.cuh) disagrees with the variant's RowGrad");
  static constexpr int U = batch_for<G::R*(M::kSeparateValue ? 2 : 1)>();
  static constexpr bool kHalfOccupancy = false;
  using State = Acc<NV, NS, G::R>;
  struct Ctx {
    typename M::Row row;
    float dout[G::R];
    float lse, delta;
    unsigned key;  // dropout (load_dropout_key)
    int node, head;
  };

  __device__ static void load_ctx(const Params& p, int node, int head, unsigned key, int gl, unsigned mask, Ctx& c) {
    c.node = node;
    c.head = head;
    c.key = key;
    M::load_row(p, node, head, gl, mask, c.row);
    load_frag<G>(row_of<G>(p.dout, node, head), gl, c.dout);
    c.lse = node_scalar<G>(p.lse, node, head);
    c.delta = node_scalar<G>(p.delta, node, head);
  }
  __device__ static void init(State& st) { zero(st); }
  __device__ static void consume(const Params& p, const Ctx& c, int e0, int n, int gl, unsigned mask, State& st) {
    int j[U], edge[G::E ? U : 1];
    load_ids<U>(p, e0, n, j);
    if constexpr (G::E) load_edge_ids<U>(p, e0, n, edge);
    float key[U][G::R];
    float val[M::kSeparateValue ? U : 1][G::R];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      M::load_key(p, j[u], c.head, gl, key[u]);
      if constexpr (M::kSeparateValue) load_frag<G>(row_of<G>(p.x2, j[u], c.head), gl, val[u]);
      if constexpr (G::E) M::edge_key(p, edge[u], c.head, gl, key[u], val[M::kSeparateValue ? u : 0]);
    }
    const unsigned kept = dropout_batch<G, U, false>(p, c.key, e0, n, gl, mask);
    float part[U][M::S + 1];  // score partials, then dp
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float sp[M::S];
      M::partials(p, c.row, key[u], sp);
#pragma unroll
      for (int s = 0; s < M::S; ++s) part[u][s] = sp[s];
      part[u][M::S] = dot(c.dout, M::kSeparateValue ? val[M::kSeparateValue ? u : 0] : key[u]);
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int s = 0; s <= M::S; ++s) part[u][s] = group_sum<G::L>(part[u][s], mask);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (u >= n) break;
      float sums[M::S];
#pragma unroll
      for (int s = 0; s < M::S; ++s) sums[s] = part[u][s];
      if constexpr (G::E) M::edge_sums(p, edge[u], c.head, sums);
      const float prob = exp_fast(M::score(p, c.row, sums) - c.lse);
      const float keep = dropout_factor_of<G>(p, kept, u);
      const float ds = prob * (part[u][M::S] * keep - c.delta);
      Hooks::accumulate(p, c.row, key[u], sums, ds, st);
      if constexpr (G::E) Hooks::edge_grad(p, c.row, key[u], sums, c.dout, prob * keep, ds, edge[u], c.head, gl);
    }
  }
  __device__ static void merge(State& a, const State& b) { add(a, b); }
  __device__ static void finish(const Params& p, const Ctx& c, int gl, unsigned mask, State& st) {
    Hooks::finish(p, c.row, c.node, c.head, gl, mask, st);
  }
};

// ================================================================ backward, column side (CSC)
// Column j visits the destinations i it feeds; state v[0] gathers dvalue_j = sum_i p_ij dout_i,
// the variant's column hook adds the score-gradient part.
template <typename G, template <typename> class Var>
struct BackwardCol {
  using G_ = G;
  using M = Var<G>;
  using Hooks = typename M::ColGrad;
  using Col = typename Hooks::Col;
  using Nbr = typename Hooks::Nbr;
  static constexpr int NV = 1 + Hooks::NV, NS = Hooks::NS;
  static_assert(NV == model_traits(M::kModel).backward_col.nv && NS == model_traits(M::kModel).backward_col.ns,
                "the model table's backward column state (params.cuh) disagrees with the variant's ColGrad");
  // Each neighbour in flight holds its dout and model fragments plus lse, Delta and the partial
  // sums (counted as one more fragment); sized so the pass fits 64 registers at small R.
  static constexpr int U = batch_for<G::R*(2 + Hooks::kNbrFrags + (G::E ? 1 : 0))>();
  // Measured on the H200 (bench/results): with four neighbours in flight this pass took over 100
  // registers, two blocks per SM and a third of the DRAM bandwidth; capped at 64 registers it
  // keeps half the SM's warps resident.
  static constexpr bool kHalfOccupancy = G::R <= 4;
  using State = Acc<NV, NS, G::R>;
  struct Ctx {
    Col col;
    unsigned key;  // dropout (load_dropout_key)
    int node, head;
  };

  __device__ static void load_ctx(const Params& p, int node, int head, unsigned key, int gl, unsigned mask, Ctx& c) {
    c.node = node;
    c.head = head;
    c.key = key;
    Hooks::load_col(p, node, head, gl, mask, c.col);
  }
  __device__ static void init(State& st) { zero(st); }
  __device__ static void consume(const Params& p, const Ctx& c, int e0, int n, int gl, unsigned mask, State& st) {
    int i[U], edge[G::E ? U : 1];
    load_ids<U>(p, e0, n, i);
    if constexpr (G::E) load_edge_ids<U>(p, e0, n, edge);
    Nbr nbr[U];
    float dout[U][G::R];
    float lse[U], delta[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      Hooks::load_nbr(p, i[u], c.head, gl, nbr[u]);
      load_frag<G>(row_of<G>(p.dout, i[u], c.head), gl, dout[u]);
      lse[u] = node_scalar<G>(p.lse, i[u], c.head);
      delta[u] = node_scalar<G>(p.delta, i[u], c.head);
    }
    constexpr int S = Hooks::S;
    const unsigned kept = dropout_batch<G, U, true>(p, c.key, e0, n, gl, mask);
    float part[U][S + 1];  // score partials, then dp = dout_i . value_j
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float extra[S + 1] = {};  // the edge features' share of the partial sums
      if constexpr (G::E) Hooks::edge_nbr(p, edge[u], c.head, gl, nbr[u], dout[u], extra);
      Hooks::partials(p, c.col, nbr[u], part[u]);
      part[u][S] = dot(dout[u], Hooks::value(c.col));
      if constexpr (G::E)
#pragma unroll
        for (int s = 0; s <= S; ++s) part[u][s] += extra[s];
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int s = 0; s <= S; ++s) part[u][s] = group_sum<G::L>(part[u][s], mask);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (u >= n) break;
      float aux = 0.f;  // variant's score intermediate (z for GAT, cos for AGNN)
      const float prob = exp_fast(Hooks::score(p, c.col, nbr[u], part[u], aux) - lse[u]);
      const float keep = dropout_factor_of<G>(p, kept, u);
      const float ds = prob * (part[u][S] * keep - delta[u]);
#pragma unroll
      for (int r = 0; r < G::R; ++r) st.v[0][r] = fmaf(prob * keep, dout[u][r], st.v[0][r]);
      Hooks::accumulate(p, c.col, nbr[u], aux, ds, st);
    }
  }
  __device__ static void merge(State& a, const State& b) { add(a, b); }
  __device__ static void finish(const Params& p, const Ctx& c, int gl, unsigned mask, State& st) {
    Hooks::finish(p, c.col, c.node, c.head, gl, mask, st);
  }
};

}  // namespace dfgnn
