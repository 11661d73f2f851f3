// dfgnn kernel templates, part 0: the kernel parameter block. Plain data only, so the host
// runtime includes this same file to fill it (one definition on both sides).
#pragma once

namespace dfgnn {

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
  float* grad_att_src;   // [H, D] (written by the parameter reduction)
  float* grad_att_dst;   // [H, D]
  float* grad_beta;      // [1]
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
};

}  // namespace dfgnn
