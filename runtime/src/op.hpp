// Op description checks shared by the reference ops and the GPU ops: dims, dtype, and which
// input/gradient slots a model reads (from the model table, kernel_templates/params.cuh).
#pragma once

#include <dfgnn/dfgnn.h>

#include <vector_types.h>  // int4, which params.cuh uses (host includers bring it; NVRTC has it built in)

#include <cstdint>
#include <vector>

#include "params.cuh"

namespace dfgnn {

// Input slots as a bit set, in dfgnn_inputs_t field order: kSlotH ... kSlotEdge (params.cuh,
// equal to the C API's DFGNN_INPUT_*).
constexpr int kNumSlots = 9;
constexpr int kEdgeSlot = 8;  // index of kSlotEdge
extern const char* const kSlotNames[kNumSlots];

// The model's row of the model table (params.cuh); INVALID_ARGUMENT for a value that is no model.
ModelTraits traits_of(dfgnn_model_t model);

// How the backward sums per-node parts into the model's parameter gradients (two-stage sums over
// the nodes: ops.cpp launches them, kernel_names.cpp names them).
enum class ParamReduction {
  None,           // no parameters (Transformer)
  WeightedInput,  // GAT: att_src = sum_i node_b_i x0_i, att_dst = sum_i node_c_i x0_i, per head and channel
  Channels,       // GATv2: att_src = sum_i param_part_i, param_part [N, H, D] float32
  Total,          // AGNN: beta = the sum of param_part [N, H] float32 over nodes and heads
};

constexpr int kNoSlot = -1;

// The host's columns of the model table, one row per model beside its ModelTraits (params.cuh
// holds only what the kernels read too): its name, which input slots the GPU ops pass as
// Params::x0..x2 (and whose gradients as g0..g2), its parameter-gradient reduction and the
// backward scratch its passes use.
struct ModelRow {
  const char* name;     // dfgnnModelName: messages, the tools' --model, Python's model names
  const char* variant;  // its variant functor (variants.cuh) in kernel names
  int x0, x1, x2;       // input slots, or kNoSlot
  int x2_with_edge;     // x2 when op.edge_features is set (GATv2 then loads its values h_j on their own)
  int node_scalars;     // how many of the [N, H] float32 arrays node_a, node_b, node_c its passes use
  bool row_grad;        // its row pass keeps part of an input gradient in [N, H, D] float32 (AGNN)
  ParamReduction param_reduction;
  // The models whose tuned winners answer for this one where the database has none of its own on
  // an op shape, most alike first, comma-separated (models_alike).
  const char* alike;
};
// INVALID_ARGUMENT for a value that is no model.
const ModelRow& model_row(dfgnn_model_t model);
// ModelRow::alike as models. On the 12-06 sweep another model's winner on the same op shape ran at
// 1.003-1.025x the model's own best (geomean; bench/results/2026-12-06c-default-rule.md).
std::vector<dfgnn_model_t> models_alike(dfgnn_model_t model);
// The slots a model reads (and whose gradients its backward writes), without edge features.
uint32_t model_slots(dfgnn_model_t model);
// The slots an op reads: its model's, plus edge when op.edge_features is set.
uint32_t op_slots(const dfgnn_op_t& op);
// Floats per (edge, head) of inputs.edge: 1 for GAT (a logit term), D for GATv2 and Transformer.
int64_t edge_width(const dfgnn_op_t& op);
// Elements of input slot `slot` (and of its gradient) on a graph of num_nodes nodes, num_edges edges.
int64_t slot_elements(const dfgnn_op_t& op, int slot, int64_t num_nodes, int64_t num_edges);
// Whether the slot holds op.dtype values (node features; GATv2's and the Transformer's edge
// features) rather than float32 (attention vectors, beta, GAT's edge logit terms).
bool slot_in_op_dtype(const dfgnn_op_t& op, int slot);
// The model's name, "unknown" for a value that is no model (for messages).
const char* model_name(dfgnn_model_t model);
const char* dtype_name(dfgnn_dtype_t dtype);
size_t dtype_size(dfgnn_dtype_t dtype);

// Most channels per node (H*D) an op may have (the header's DFGNN_MAX_CHANNELS, 2^24): far above
// any D a schedule serves (2048), yet small enough that N*H*D elements of any graph fit int64 bytes.
inline constexpr int64_t kMaxChannels = DFGNN_MAX_CHANNELS;

// Validates enum values and dims (H >= 1, D >= 1, N*H*D and E*H*D representable), and that only
// GAT, GATv2 and Transformer take edge features. Throws INVALID_ARGUMENT, or NOT_SUPPORTED for
// H*D above kMaxChannels.
void validate_op(const dfgnn_op_t& op, int64_t num_nodes, int64_t num_edges);
// Required slots non-null (node-sized ones may be null when num_nodes is 0, edge when num_edges
// is 0), others null. 'what' names the struct in messages ("inputs", "grads").
void validate_slots(const dfgnn_op_t& op, const void* const slots[kNumSlots], const char* what, int64_t num_nodes,
                    int64_t num_edges);
// Score scale actually used (Transformer: op.scale or 1/sqrt(D)).
double effective_scale(const dfgnn_op_t& op);
// Dropout mask parameters of the kernels and the reference (params.cuh, dropout_factor): the
// drop threshold p * 2^32 (0: no dropout) and the keep scale 1 / (1 - p).
uint32_t dropout_threshold(const dfgnn_op_t& op);
// Whether the op's kernels carry the dropout mask (Geo's P): exactly where a launch's threshold is
// nonzero, so kernels without it never run a launch that drops edges. Kernel names and recipes key on it.
bool dropout_compiled_in(const dfgnn_op_t& op);
float dropout_scale(const dfgnn_op_t& op);

}  // namespace dfgnn
