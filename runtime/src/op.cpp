#include "op.hpp"

#include "api_guard.hpp"
#include "error.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>
#include <string_view>

namespace dfgnn {

const char* const kSlotNames[kNumSlots] = {"h", "h_dst", "q", "k", "v", "att_src", "att_dst", "beta", "edge"};

// The mask bits are the C API's.
static_assert(kSlotH == DFGNN_INPUT_H && kSlotHDst == DFGNN_INPUT_H_DST && kSlotQ == DFGNN_INPUT_Q &&
              kSlotK == DFGNN_INPUT_K && kSlotV == DFGNN_INPUT_V && kSlotAttSrc == DFGNN_INPUT_ATT_SRC &&
              kSlotAttDst == DFGNN_INPUT_ATT_DST && kSlotBeta == DFGNN_INPUT_BETA && kSlotEdge == DFGNN_INPUT_EDGE);
static_assert(kEdgeSlot == 8 && (1u << kEdgeSlot) == kSlotEdge);

namespace {

constexpr int slot(InputBit bit) { return std::countr_zero(static_cast<unsigned>(bit)); }

// dfgnn_model_t order, as model_traits.
constexpr ModelRow kModelRows[] = {
    // GAT and GATv2 differ in their score only; the Transformer's passes map lanes as GATv2's with a
    // dot-product score; AGNN's cosine score is nearest the Transformer's.
    {"gat", "dfgnn::Gat", slot(kSlotH), kNoSlot, kNoSlot, kNoSlot, 3, false, ParamReduction::WeightedInput,
     "gatv2,transformer,agnn"},
    {"gatv2", "dfgnn::Gatv2", slot(kSlotH), slot(kSlotHDst), kNoSlot, slot(kSlotH), 0, false, ParamReduction::Channels,
     "gat,transformer,agnn"},
    {"transformer", "dfgnn::Transformer", slot(kSlotQ), slot(kSlotK), slot(kSlotV), slot(kSlotV), 0, false,
     ParamReduction::None, "gatv2,gat,agnn"},
    {"agnn", "dfgnn::Agnn", slot(kSlotH), kNoSlot, kNoSlot, kNoSlot, 1, true, ParamReduction::Total,
     "transformer,gatv2,gat"},
};
static_assert(std::size(kModelRows) == kNumModels && kNumModels == DFGNN_NUM_MODELS);

constexpr int most_model_inputs() {
  int most = 0;
  for (int m = 0; m < kNumModels; ++m) {
    const ModelTraits traits = model_traits(m);
    most = std::max(most, std::popcount(traits.inputs | (traits.edge ? static_cast<unsigned>(kSlotEdge) : 0u)));
  }
  return most;
}
static_assert(most_model_inputs() == DFGNN_MAX_MODEL_INPUTS);

bool is_model(dfgnn_model_t model) { return static_cast<int>(model) >= 0 && static_cast<int>(model) < kNumModels; }

}  // namespace

ModelTraits traits_of(dfgnn_model_t model) {
  model_row(model);
  return model_traits(model);
}

const ModelRow& model_row(dfgnn_model_t model) {
  if (!is_model(model))
    fail(DFGNN_STATUS_INVALID_ARGUMENT, "model {} is not a dfgnn_model_t value", static_cast<int>(model));
  return kModelRows[model];
}

std::vector<dfgnn_model_t> models_alike(dfgnn_model_t model) {
  std::vector<dfgnn_model_t> out;
  const std::string_view names = model_row(model).alike;
  for (size_t start = 0; start < names.size();) {
    const size_t comma = std::min(names.find(',', start), names.size());
    const std::string_view name = names.substr(start, comma - start);
    for (int m = 0; m < kNumModels; ++m)
      if (kModelRows[m].name == name) out.push_back(static_cast<dfgnn_model_t>(m));
    start = comma + 1;
  }
  return out;
}

uint32_t model_slots(dfgnn_model_t model) { return traits_of(model).inputs; }

uint32_t op_slots(const dfgnn_op_t& op) { return model_slots(op.model) | (op.edge_features ? kSlotEdge : 0u); }

int64_t edge_width(const dfgnn_op_t& op) { return traits_of(op.model).edge_logits ? 1 : op.dim; }

int64_t slot_elements(const dfgnn_op_t& op, int slot, int64_t num_nodes, int64_t num_edges) {
  const int64_t hd = int64_t{op.heads} * op.dim;
  if (slot < 5) return num_nodes * hd;  // h, h_dst, q, k, v
  if (slot == kEdgeSlot) return num_edges * op.heads * edge_width(op);
  return (1u << slot) == kSlotBeta ? 1 : hd;
}

bool slot_in_op_dtype(const dfgnn_op_t& op, int slot) {
  return slot < 5 || (slot == kEdgeSlot && !traits_of(op.model).edge_logits);
}

const char* model_name(dfgnn_model_t model) { return is_model(model) ? kModelRows[model].name : "unknown"; }

const char* dtype_name(dfgnn_dtype_t dtype) {
  switch (dtype) {
    case DFGNN_DTYPE_FLOAT32: return "float32";
    case DFGNN_DTYPE_FLOAT16: return "float16";
    case DFGNN_DTYPE_BFLOAT16: return "bfloat16";
    case DFGNN_DTYPE_FLOAT64: return "float64";
  }
  return "unknown";
}

size_t dtype_size(dfgnn_dtype_t dtype) {
  switch (dtype) {
    case DFGNN_DTYPE_FLOAT32: return 4;
    case DFGNN_DTYPE_FLOAT16:
    case DFGNN_DTYPE_BFLOAT16: return 2;
    case DFGNN_DTYPE_FLOAT64: return 8;
  }
  fail(DFGNN_STATUS_INVALID_ARGUMENT, "dtype {} is not a dfgnn_dtype_t value", static_cast<int>(dtype));
}

void validate_op(const dfgnn_op_t& op, int64_t num_nodes, int64_t num_edges) {
  model_slots(op.model);
  dtype_size(op.dtype);
  require(op.heads >= 1, "op.heads must be >= 1 (got {})", op.heads);
  require(op.dim >= 1, "op.dim must be >= 1 (got {})", op.dim);
  // Kernels are specialised on H and D and index a node's H*D channels in 32 bits; bounding the
  // product here keeps every size derived from it (workspaces, launch grids) far from overflow.
  if (int64_t{op.heads} * op.dim > kMaxChannels)
    fail(DFGNN_STATUS_NOT_SUPPORTED, "op.heads * op.dim = {} * {} exceeds {} channels per node, the most supported "
         "(schedules serve D up to 2048)", op.heads, op.dim, kMaxChannels);
  constexpr double kMaxElements = static_cast<double>(std::numeric_limits<int64_t>::max() / 8);
  require(static_cast<double>(num_nodes) * op.heads * op.dim < kMaxElements, "N*H*D = {}*{}*{} is too large",
          num_nodes, op.heads, op.dim);
  require(op.edge_features == 0 || op.edge_features == 1, "op.edge_features must be 0 or 1 (got {})",
          op.edge_features);
  require(!op.edge_features || traits_of(op.model).edge,
          "op.edge_features is set but {} takes no edge features{}", model_name(op.model),
          op.model == DFGNN_MODEL_AGNN ? " (PyG's AGNNConv has no edge_dim)" : "");
  require(!op.edge_features || static_cast<double>(num_edges) * op.heads * edge_width(op) < kMaxElements,
          "E*H*D = {}*{}*{} edge features are too many", num_edges, op.heads, edge_width(op));
  require(std::isfinite(op.negative_slope), "op.negative_slope must be finite");
  require(std::isfinite(op.scale) && op.scale >= 0, "op.scale must be finite and >= 0 (0 = 1/sqrt(D))");
  require(op.dropout >= 0.f && op.dropout < 1.f, "op.dropout must be in [0, 1) (got {})", op.dropout);
}

uint32_t dropout_threshold(const dfgnn_op_t& op) {
  return static_cast<uint32_t>(std::min(std::llround(static_cast<double>(op.dropout) * 4294967296.0), 4294967295LL));
}

bool dropout_compiled_in(const dfgnn_op_t& op) { return dropout_threshold(op) != 0; }

float dropout_scale(const dfgnn_op_t& op) { return 1.0f / (1.0f - op.dropout); }

void validate_slots(const dfgnn_op_t& op, const void* const slots[kNumSlots], const char* what, int64_t num_nodes,
                    int64_t num_edges) {
  const uint32_t needed = op_slots(op);
  // Without nodes the [N, H, D] arrays are empty, and an empty array may be null (as out is);
  // likewise the edge features without edges.
  const uint32_t may_be_null =
      (num_nodes == 0 ? kSlotH | kSlotHDst | kSlotQ | kSlotK | kSlotV : 0u) | (num_edges == 0 ? kSlotEdge : 0u);
  for (int s = 0; s < kNumSlots; ++s) {
    const bool want = (needed >> s) & 1u;
    if (want && slots[s] == nullptr && !((may_be_null >> s) & 1u))
      fail(DFGNN_STATUS_NULL_POINTER, "{}.{} is null but {} needs it{}", what, kSlotNames[s], model_name(op.model),
           s == kEdgeSlot ? " (op.edge_features is set)" : "");
    if (!want && slots[s] != nullptr)
      fail(DFGNN_STATUS_INVALID_ARGUMENT, "{}.{} is set but {} does not use it (leave it null{})", what, kSlotNames[s],
           model_name(op.model), s == kEdgeSlot ? "; op.edge_features is 0" : "");
  }
}

double effective_scale(const dfgnn_op_t& op) {
  return op.scale > 0 ? static_cast<double>(op.scale) : 1.0 / std::sqrt(static_cast<double>(op.dim));
}

}  // namespace dfgnn

dfgnn_status_t dfgnnModelInputs(dfgnn_model_t model, int32_t edge_features, uint32_t* inputs, int32_t* edge_logits) {
  using namespace dfgnn;
  return guard([&] {
    if (inputs == nullptr) fail(DFGNN_STATUS_NULL_POINTER, "inputs is null");
    const ModelTraits traits = traits_of(model);
    if (edge_features != 0 && edge_features != 1)
      fail(DFGNN_STATUS_INVALID_ARGUMENT, "edge_features must be 0 or 1 (got {})", edge_features);
    if (edge_features && !traits.edge)
      fail(DFGNN_STATUS_INVALID_ARGUMENT, "{} takes no edge features", model_name(model));
    *inputs = traits.inputs | (edge_features ? kSlotEdge : 0u);
    if (edge_logits != nullptr) *edge_logits = traits.edge_logits ? 1 : 0;
  });
}

dfgnn_status_t dfgnnModelName(dfgnn_model_t model, const char** name) {
  using namespace dfgnn;
  return guard([&] {
    if (name == nullptr) fail(DFGNN_STATUS_NULL_POINTER, "name is null");
    *name = model_row(model).name;
  });
}

dfgnn_status_t dfgnnModelFromName(const char* name, dfgnn_model_t* model) {
  using namespace dfgnn;
  return guard([&] {
    if (name == nullptr || model == nullptr) fail(DFGNN_STATUS_NULL_POINTER, "{} is null", name == nullptr ? "name" : "model");
    std::string known;
    for (int m = 0; m < kNumModels; ++m) {
      if (std::string_view(name) == kModelRows[m].name) {
        *model = static_cast<dfgnn_model_t>(m);
        return;
      }
      known += std::string(m == 0 ? "" : ", ") + kModelRows[m].name;
    }
    fail(DFGNN_STATUS_INVALID_ARGUMENT, "'{}' is no model (the models are {})", name, known);
  });
}
