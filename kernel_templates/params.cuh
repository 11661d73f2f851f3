// dfgnn kernel templates, part 0: the kernel parameter block, the dropout mask and the model table.
// Plain data and pure functions, so the host runtime includes this same file to fill the block,
// the float64 reference draws the same mask and the host reads the same model facts as the kernels
// (one definition on both sides).
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define DFGNN_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define DFGNN_HOST_DEVICE inline
#endif

namespace dfgnn {

// Attention dropout: the weight of edge `edge` (its CSR position) in head `head` is kept, scaled by
// `keep_scale` = 1 / (1 - p), when a counter-based hash of (seed, edge, head) is at or above
// `threshold` = p * 2^32, else dropped. Stateless, so the backward passes regenerate the forward's
// mask without storing it (the column pass through the CSC's CSR positions). A kernel derives the
// per-(seed, head) key once per thread; the per-edge hash runs for every edge and head of every
// pass, so it is the core of a 32-bit xorshift-multiply mixer: two multiplies and one shift. Its
// outer shifts are left out: the first would only fold high edge bits down before the first
// multiply (the later shift does that), the last changes only the low 16 bits, which decide a
// comparison with the threshold once in 2^16. (Three 64-bit multiplies per edge and head, emulated
// on the GPU, cost 30-50% of a small-D pass; the full mixer, 13-30%.)
DFGNN_HOST_DEVICE unsigned mix32(unsigned x) {  // a low-bias 32-bit finaliser (xorshift-multiply)
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}
DFGNN_HOST_DEVICE unsigned dropout_key(unsigned long long seed, int head) {
  const unsigned lo = static_cast<unsigned>(seed), hi = static_cast<unsigned>(seed >> 32);
  return mix32(mix32(lo ^ static_cast<unsigned>(head + 1) * 0x9e3779b9u) ^ hi);
}
DFGNN_HOST_DEVICE unsigned dropout_bits(unsigned key, int edge) {
  unsigned x = (static_cast<unsigned>(edge) ^ key) * 0x7feb352du;
  x ^= x >> 15;
  return x * 0x846ca68bu;
}
DFGNN_HOST_DEVICE bool dropout_keeps(unsigned key, unsigned threshold, int edge) {
  return dropout_bits(key, edge) >= threshold;
}
DFGNN_HOST_DEVICE float dropout_factor(unsigned key, unsigned threshold, float keep_scale, int edge) {
  return dropout_keeps(key, threshold, edge) ? keep_scale : 0.f;
}

// Head blocks (a group's heads, Geo::HB of them per node) one balanced_kernel block serves: all
// of them when they divide its lane groups (the head blocks of one edge share then sit side by
// side), else one. The host sizes that kernel's grid by it.
DFGNN_HOST_DEVICE constexpr int balanced_heads_per_block(int groups, int heads) {
  return groups % heads == 0 ? heads : 1;
}

// ---------------------------------------------------------------- the model table
// Inputs as bits of a mask: bit s is field s of dfgnn_inputs_t (and of dfgnn_grads_t), the values
// of the C API's DFGNN_INPUT_* (op.cpp checks they agree).
enum InputBit : unsigned {
  kSlotH = 1u << 0,
  kSlotHDst = 1u << 1,
  kSlotQ = 1u << 2,
  kSlotK = 1u << 3,
  kSlotV = 1u << 4,
  kSlotAttSrc = 1u << 5,  // [H, D] float32
  kSlotAttDst = 1u << 6,  // [H, D] float32
  kSlotBeta = 1u << 7,    // [1] float32
  kSlotEdge = 1u << 8,    // [E, H, D] in the op's dtype, or [E, H] float32 logit terms (edge_logits)
};

// A pass's accumulator state: NS group-uniform scalars and NV vectors of D channels (passes.cuh's
// Acc; a serialised state is NS + NV * D floats).
struct StateShape {
  int nv, ns;
};

// One row per model, indexed by dfgnn_model_t: what the host (validation, bindings, tools,
// workspace sizes) and the kernels (passes.cuh asserts its states against it) must agree on.
// Node features h, h_dst, q, k, v are [N, H, D] in the op's dtype.
struct ModelTraits {
  unsigned inputs;    // InputBits read (their gradients written), without edge features
  bool edge;          // takes edge features (op.edge_features)
  bool edge_logits;   // they are [E, H] float32 logit terms, not [E, H, D] features
  StateShape forward, backward_row, backward_col;
};

// The table (dfgnn_model_t order: GAT, GATv2, Transformer, AGNN); a zero row for other values.
DFGNN_HOST_DEVICE constexpr ModelTraits model_traits(int model) {
  switch (model) {
    case 0: return {kSlotH | kSlotAttSrc | kSlotAttDst, true, true, {1, 2}, {0, 1}, {1, 1}};  // GAT
    case 1: return {kSlotH | kSlotHDst | kSlotAttSrc, true, false, {1, 2}, {2, 0}, {2, 0}};   // GATv2
    case 2: return {kSlotQ | kSlotK | kSlotV, true, false, {1, 2}, {1, 0}, {2, 0}};            // Transformer
    case 3: return {kSlotH | kSlotBeta, false, false, {1, 2}, {1, 2}, {2, 1}};                 // AGNN
    default: return {0u, false, false, {0, 0}, {0, 0}, {0, 0}};
  }
}
constexpr int kNumModels = 4;

// Everything a kernel may need, passed by value; each model/pass reads its own fields.
// The traversed structure (ptr/idx) is CSR (by destination) for forward and row passes, and
// CSC for column passes.
struct Params {
  const int* ptr;
  const int* idx;
  // Features [N, H, D] in the op's dtype: x0 = h or q, x1 = h_dst or k, x2 = v.
  const void* x0;
  const void* x1;
  const void* x2;
  const float* att_src;  // [H, D]
  const float* att_dst;  // [H, D]
  const float* beta;     // [1]
  void* out;             // forward output [N, H, D]
  float* lse;            // [N, H] log-sum-exp of scores (forward writes, backward reads)
  const void* dout;      // backward: gradient of out
  const void* fwd_out;   // backward: the forward's out (for Delta = dout . out)
  float* delta;          // [N, H] dout . out
  float* node_a;         // [N, H] model scalars: GAT er = att_dst . h; AGNN |h|
  float* node_b;         // [N, H] model scalars: GAT d(el) (column pass result)
  float* node_c;         // [N, H] model scalars: GAT d(er) (row pass result)
  void* g0;              // gradient of x0 [N, H, D]
  void* g1;              // gradient of x1
  void* g2;              // gradient of x2
  float* param_part;     // [N, H, D] or [N, H]: per-node contributions to parameter gradients
  float* row_grad;       // [N, H, D] float32 scratch: row-pass part of an input gradient (AGNN)
  float* partials;       // split-row partial states [slot, H, state floats]
  const int4* segments;  // work list (node, begin, end, slot) or null: item = node, whole row
  const int4* hubs;      // merge list (node, first slot, slot count, -)
  int num_items;         // nodes, or entries of segments
  int min_degree;        // whole-row launches: rows outside [min_degree, max_degree) are skipped
  int max_degree;
  int num_hubs;
  int num_nodes;
  float slope;           // LeakyReLU negative slope
  float scale;           // Transformer score scale
  const int* eid;        // column pass: CSR position of each CSC entry (edge ids of the dropout mask)
  const void* edge;      // edge features by edge id: GAT [E, H] float32 logit terms, else [E, H, D] in T
  void* g_edge;          // backward: their gradient (the row pass writes each edge's once)
  const int* edge_id;    // CSR position -> edge id (the row of edge)
  unsigned long long dropout_seed;
  const unsigned long long* dropout_seed_ptr;  // device seed; when set, used instead of dropout_seed
  unsigned dropout_threshold;  // 0: no dropout
  float dropout_scale;         // 1 / (1 - p)
};

}  // namespace dfgnn
