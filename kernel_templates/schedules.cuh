// dfgnn kernel templates, part 4: schedules (thread mappings) and helper kernels.
//
// rows_kernel<Pass, GROUPS, TEAM>: a block of GROUPS lane groups (GROUPS * GL threads, a group
// serving HG heads, common.cuh's Geo); TEAM consecutive groups cooperate on one (item, head block):
// TEAM = 1 is "sub-warp / warp per row",
// TEAM > 1 is "block per row" (the team's groups take interleaved edge batches and merge their
// partial states in shared memory, in a fixed order). An item is a node (whole row) or, with a
// work list, a segment (node, begin, end, slot): slot >= 0 stores a partial state for
// merge_kernel, which is how hub rows are split over many blocks and merged deterministically.
#pragma once

namespace dfgnn {

template <int L>
__device__ __forceinline__ unsigned group_mask() {
  if constexpr (L == 32) return 0xffffffffu;
  else return ((1u << L) - 1u) << ((threadIdx.x & 31) / L * L);
}

template <typename Pass>
__host__ __device__ constexpr int state_floats() {
  return Pass::NS + Pass::NV * Pass::G_::D;
}

// Minimum resident blocks per SM asked of the compiler: with Pass::kHalfOccupancy, enough for half
// the SM's 2048 threads (at most 64 registers per thread), else 0, no constraint (1 is not the
// same: ptxas then took 64-80 registers where it had taken 48-64); more where the geometry asks
// (Resident).
template <typename Pass, int THREADS>
__host__ __device__ constexpr int min_blocks() {
  const int own = Pass::kHalfOccupancy && THREADS <= 1024 ? 1024 / THREADS : 0;
  return Pass::G_::kMinBlocks > own ? Pass::G_::kMinBlocks : own;
}

// A thread's place in its group: the group, the head it serves (of the group's HG heads starting
// at head block `block` * HG) and its lane in that head's segment of L lanes.
template <typename G>
struct GroupLane {
  int group, head_slot, gl;
  __device__ GroupLane() {
    const int lane = threadIdx.x % G::GL;
    group = threadIdx.x / G::GL;
    head_slot = lane / G::L;
    gl = lane % G::L;
  }
  __device__ int head(int block) const { return block * G::HG + head_slot; }
  // Its slot among per-(group, head) states in shared memory.
  __device__ int state_slot() const { return group * G::HG + head_slot; }
};

template <typename Pass, int GROUPS, int TEAM>
__global__ void __launch_bounds__(GROUPS * Pass::G_::GL, (min_blocks<Pass, GROUPS * Pass::G_::GL>()))
    rows_kernel(const Params p) {
  using G = typename Pass::G_;
  constexpr int TEAMS = GROUPS / TEAM, U = Pass::U;
  static_assert(GROUPS % TEAM == 0, "TEAM must divide GROUPS");
  const GroupLane<G> at;
  const int gl = at.gl, team = at.group / TEAM, member = at.group % TEAM;
  const unsigned mask = group_mask<G::GL>();
  const long long item_block = static_cast<long long>(blockIdx.x) * TEAMS + team;
  const int item = static_cast<int>(item_block / G::HB), head = at.head(static_cast<int>(item_block % G::HB));
  const bool in_range = item < p.num_items;

  int node = 0, begin = 0, end = 0, slot = -1;
  if (in_range) {
    if (p.segments != nullptr) {
      const int4 s = p.segments[item];
      node = s.x, begin = s.y, end = s.z, slot = s.w;
    } else {
      node = item, begin = p.ptr[item], end = p.ptr[item + 1];
    }
  }
  // Whole-row launches serve one degree bin; rows of other bins belong to other launches.
  const bool in_bin = p.segments != nullptr || (end - begin >= p.min_degree && end - begin < p.max_degree);
  const bool active = in_range && in_bin;
  typename Pass::Ctx ctx;
  typename Pass::State st;
  Pass::init(st);
  if (active) {
    Pass::load_ctx(p, node, head, load_dropout_key<G>(p, head), gl, mask, ctx);
    for (int e = begin + member * U; e < end; e += TEAM * U) Pass::consume(p, ctx, e, min(U, end - e), gl, mask, st);
  }
  if constexpr (TEAM > 1) {
    extern __shared__ float team_states[];
    constexpr int SF = state_floats<Pass>();
    float* mine = team_states + at.state_slot() * SF;
    if (active && member > 0) store_state<G>(mine, gl, st);
    __syncthreads();
    if (active && member == 0) {
      for (int k = 1; k < TEAM; ++k) {
        typename Pass::State other;
        load_state<G>(mine + k * G::HG * SF, gl, other);
        Pass::merge(st, other);
      }
    }
  }
  if (!active || member != 0) return;
  if (slot < 0) {
    Pass::finish(p, ctx, gl, mask, st);
  } else {
    store_state<G>(p.partials + (static_cast<long long>(slot) * G::H + head) * state_floats<Pass>(), gl, st);
  }
}

// Folds the partial states of each split row in slot order (deterministic), then finishes it.
template <typename Pass, int GROUPS>
__global__ void __launch_bounds__(GROUPS * Pass::G_::GL) merge_kernel(const Params p) {
  using G = typename Pass::G_;
  const GroupLane<G> at;
  const int gl = at.gl;
  const long long hub_block = static_cast<long long>(blockIdx.x) * GROUPS + at.group;
  const int hub = static_cast<int>(hub_block / G::HB), head = at.head(static_cast<int>(hub_block % G::HB));
  if (hub >= p.num_hubs) return;
  const int4 h = p.hubs[hub];
  const unsigned mask = group_mask<G::GL>();
  typename Pass::Ctx ctx;
  Pass::load_ctx(p, h.x, head, load_dropout_key<G>(p, head), gl, mask, ctx);
  typename Pass::State st;
  Pass::init(st);
  for (int k = 0; k < h.z; ++k) {
    typename Pass::State part;
    load_state<G>(p.partials + (static_cast<long long>(h.y + k) * G::H + head) * state_floats<Pass>(), gl, part);
    Pass::merge(st, part);
  }
  Pass::finish(p, ctx, gl, mask, st);
}

// Edge-balanced block: a block serves one row group of segments (rows [x, y), none longer than
// the plan's chunk: longer rows go to rows_kernel as split rows) for HB head blocks. Its groups
// form GROUPS / HB shares of HB groups, the head blocks of one share side by side (they read the
// same neighbours, as in rows_kernel); the shares split the row group's edges into equal contiguous
// ranges, so a block's groups finish together whatever the degrees. A group owns the rows that
// begin in its share and finishes those that end in it; a row cut by share boundaries is finished
// by its owner after it folds the later shares' pieces of it, parked in shared memory, in share
// order (deterministic, no atomics).
template <typename Pass, int GROUPS>
__global__ void __launch_bounds__(GROUPS * Pass::G_::GL, (min_blocks<Pass, GROUPS * Pass::G_::GL>()))
    balanced_kernel(const Params p) {
  using G = typename Pass::G_;
  constexpr int U = Pass::U, SF = state_floats<Pass>();
  constexpr int HB = balanced_heads_per_block(GROUPS, G::HB), SHARES = GROUPS / HB;
  extern __shared__ float parked[];  // per (group, head): its piece of a row that began in an earlier share
  const GroupLane<G> at;
  const int gl = at.gl;
  const int mine = at.group / HB, block_slot = at.group % HB;  // share index, head block within the block
  const unsigned mask = group_mask<G::GL>();
  const int4 rows = p.segments[blockIdx.x / (G::HB / HB)];
  const int head = at.head(blockIdx.x % (G::HB / HB) * HB + block_slot);
  const unsigned key = load_dropout_key<G>(p, head);  // once: a group serves many rows of one head
  const int r0 = rows.x, r1 = rows.y;
  const int eb = p.ptr[r0], ee = p.ptr[r1];
  const bool last = mine == SHARES - 1;
  const int share = (ee - eb + SHARES - 1) / SHARES;
  const int s0 = min(ee, eb + mine * share);
  const int s1 = last ? ee : min(ee, s0 + share);  // this share's edges [s0, s1)
  // First row that begins at or after s0 (rows are short and few: a binary search over ptr).
  int r = r0;
  for (int hi = r1; r < hi;) {
    const int mid = r + (hi - r) / 2;  // no overflow past 2^30 rows
    if (p.ptr[mid] < s0) r = mid + 1;
    else hi = mid;
  }
  typename Pass::Ctx ctx;
  typename Pass::State st;
  // The piece of the row that began before s0 and reaches into this share.
  if (r > r0 && s0 < s1 && p.ptr[r] > s0) {
    Pass::init(st);
    Pass::load_ctx(p, r - 1, head, key, gl, mask, ctx);
    const int end = min(p.ptr[r], s1);
    for (int e = s0; e < end; e += U) Pass::consume(p, ctx, e, min(U, end - e), gl, mask, st);
    store_state<G>(parked + at.state_slot() * SF, gl, st);
  }
  // Owned rows; only the last can run past s1 (it stays open, its state in registers).
  int open_end = -1;
  for (; r < r1 && (last || p.ptr[r] < s1); ++r) {
    const int begin = p.ptr[r], end = p.ptr[r + 1];
    Pass::init(st);
    Pass::load_ctx(p, r, head, key, gl, mask, ctx);
    const int stop = min(end, s1);
    for (int e = begin; e < stop; e += U) Pass::consume(p, ctx, e, min(U, stop - e), gl, mask, st);
    if (end > s1) {
      open_end = end;
      break;
    }
    Pass::finish(p, ctx, gl, mask, st);
  }
  __syncthreads();
  if (open_end < 0) return;
  for (int k = mine + 1; k < SHARES && eb + k * share < open_end; ++k) {
    typename Pass::State piece;
    load_state<G>(parked + ((k * HB + block_slot) * G::HG + at.head_slot) * SF, gl, piece);
    Pass::merge(st, piece);
  }
  Pass::finish(p, ctx, gl, mask, st);
}

// Backward preparation, one group per (node, head): Delta = dout . out, and the model's node
// scalar (GAT er, AGNN inverse norm) into node_a.
template <typename G, template <typename> class Var, int GROUPS>
__global__ void __launch_bounds__(GROUPS * G::L) prep_kernel(const Params p) {
  using M = Var<G>;
  const int group = threadIdx.x / G::L, gl = threadIdx.x % G::L;
  const long long nh = static_cast<long long>(blockIdx.x) * GROUPS + group;
  if (nh >= static_cast<long long>(p.num_nodes) * G::H) return;
  const int node = static_cast<int>(nh / G::H), head = static_cast<int>(nh % G::H);
  const unsigned mask = group_mask<G::L>();
  float d[G::R], o[G::R];
  load_frag<G>(row_of<G>(p.dout, node, head), gl, d);
  load_frag<G>(row_of<G>(p.fwd_out, node, head), gl, o);
  const float delta = group_sum<G::L>(dot(d, o), mask);
  float scalar = 0.f;
  if constexpr (M::kPrep) scalar = M::prep(p, node, head, gl, mask);
  if (gl == 0) {
    p.delta[nh] = delta;
    if constexpr (M::kPrep) p.node_a[nh] = scalar;
  }
}

// Deterministic sums over nodes of a [N, COLS] float32 array x, or of w_k[n, col / D] * x[n, col]
// with x of type T (the features), gridDim.y of them at once (GAT's two attention vectors weigh the
// same x, so one launch pair serves both). Stage 1: block (b, k) sums its fixed node range into
// stage[k][b, :]; stage 2: block k adds sum k's block rows. In both, the threads of a block split
// into `parts` interleaved subsets of the summed rows per column, added up in a fixed order: a
// class-count layer's few columns still use the whole block. No atomics: bitwise reproducible.
// The sum of rows r0, r0 + step, ... < r1 of column `col` of `rows` (a row stride of `cols`).
template <typename T, int D, bool WEIGHTED>
__device__ __forceinline__ float strided_column_sum(const T* rows, const float* w, int r0, int r1, int step, int cols,
                                                    int col) {
  float acc = 0.f;
  for (int r = r0; r < r1; r += step) {
    const float v = to_float(rows[static_cast<long long>(r) * cols + col]);
    acc += WEIGHTED ? w[static_cast<long long>(r) * (cols / D) + col / D] * v : v;
  }
  return acc;
}

// Column sums over rows [r0, r1) of `rows` into out[col] (and, with TOTAL, their sum in order into
// *total), by the whole block: a column's `parts` partial sums meet in shared memory.
template <typename T, int D, bool WEIGHTED, bool TOTAL>
__device__ __forceinline__ void block_column_sums(const T* rows, const float* w, int r0, int r1, int cols, float* out,
                                                  float* total) {
  __shared__ float part_sums[256];
  const int width = min(cols, static_cast<int>(blockDim.x)), parts = blockDim.x / width;
  const int c = threadIdx.x % width, part = threadIdx.x / width;
  float running = 0.f;  // TOTAL: thread 0's sum of the columns so far
  for (int col0 = 0; col0 < cols; col0 += width) {
    const int col = col0 + c;
    if (part < parts)
      part_sums[threadIdx.x] =
          col < cols ? strided_column_sum<T, D, WEIGHTED>(rows, w, r0 + part, r1, parts, cols, col) : 0.f;
    __syncthreads();
    if (part == 0) {
      float sum = 0.f;
      for (int q = 0; q < parts; ++q) sum += part_sums[q * width + c];
      part_sums[c] = sum;  // only this thread read column c's slots of parts > 0 and slot c
      if (col < cols && out != nullptr) out[col] = sum;
    }
    __syncthreads();
    if (TOTAL && threadIdx.x == 0)
      for (int k = 0; k < width && col0 + k < cols; ++k) running += part_sums[k];
    __syncthreads();
  }
  if (TOTAL && threadIdx.x == 0) *total = running;
}

template <typename T, int D, bool WEIGHTED>
__global__ void __launch_bounds__(256) reduce_nodes_stage1(const void* x, const float* w0, const float* w1,
                                                           int num_nodes, int cols, int nodes_per_block, float* stage) {
  const int n0 = blockIdx.x * nodes_per_block;
  const int n1 = min(num_nodes, n0 + nodes_per_block);
  float* out = stage + (static_cast<long long>(blockIdx.y) * gridDim.x + blockIdx.x) * cols;
  block_column_sums<T, D, WEIGHTED, false>(static_cast<const T*>(x), blockIdx.y == 0 ? w0 : w1, n0, n1, cols, out,
                                           nullptr);
}

// result_k[col] = sum_b stage[k][b, col] for block k; with TOTAL, only result_k[0] = the sum over
// all cols as well (AGNN beta).
template <bool TOTAL>
__global__ void __launch_bounds__(256) reduce_nodes_stage2(const float* stage, int blocks, int cols, float* result0,
                                                           float* result1) {
  float* result = blockIdx.x == 0 ? result0 : result1;
  block_column_sums<float, 1, false, TOTAL>(stage + static_cast<long long>(blockIdx.x) * blocks * cols, nullptr, 0,
                                            blocks, cols, TOTAL ? nullptr : result, result);
}

}  // namespace dfgnn

namespace dfgnn {

// For the tuner's output checks (not an op: atomics are fine here): accumulates
// sum((a - b)^2) into out[0] and sum(b^2) into out[1] over the finite entries of b; equal values
// (including equal infinities, e.g. the lse of empty rows) match, any other NaN or inf in a or b
// makes out[0] infinite.
template <typename T>
__global__ void __launch_bounds__(256) diff_norms(const void* a, const void* b, long long n, float* out) {
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  float diff = 0.f, ref = 0.f;
  for (long long i = blockIdx.x * 256LL + threadIdx.x; i < n; i += 256LL * gridDim.x) {
    const float u = to_float(x[i]), v = to_float(y[i]);
    const bool finite = isfinite(u) && isfinite(v);
    diff += u == v ? 0.f : finite ? (u - v) * (u - v) : __int_as_float(0x7f800000);
    ref += isfinite(v) ? v * v : 0.f;
  }
  for (int o = 16; o > 0; o /= 2) {
    diff += __shfl_xor_sync(0xffffffffu, diff, o);
    ref += __shfl_xor_sync(0xffffffffu, ref, o);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(&out[0], diff);
    atomicAdd(&out[1], ref);
  }
}

}  // namespace dfgnn

namespace dfgnn {

// Uniform values in [lo, hi) from a counter-based hash (splitmix64) of (seed, index): the tuner's
// random inputs, generated on the device.
template <typename T>
__global__ void __launch_bounds__(256) fill_random(void* dst, long long n, unsigned long long seed, float lo, float hi) {
  T* out = static_cast<T*>(dst);
  for (long long i = blockIdx.x * 256LL + threadIdx.x; i < n; i += 256LL * gridDim.x) {
    unsigned long long z = seed + 0x9e3779b97f4a7c15ULL * static_cast<unsigned long long>(i + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
    out[i] = from_float<T>(lo + (hi - lo) * u);
  }
}

}  // namespace dfgnn
