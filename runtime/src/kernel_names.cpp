#include "kernel_names.hpp"

#include "error.hpp"
#include "op.hpp"
#include "solver.hpp"

#include <fmt/format.h>

namespace dfgnn {

const char* element_type(dfgnn_dtype_t dtype) {
  switch (dtype) {
    case DFGNN_DTYPE_FLOAT32: return "float";
    case DFGNN_DTYPE_FLOAT16: return "dfgnn::f16";
    case DFGNN_DTYPE_BFLOAT16: return "dfgnn::bf16";
    default: fail(DFGNN_STATUS_NOT_SUPPORTED, "GPU ops take float32, float16 or bfloat16 features, not {}", dtype_name(dtype));
  }
}

const char* variant_type(dfgnn_model_t model) { return model_row(model).variant; }

namespace {

const char* pass_template(PassKind pass) {
  switch (pass) {
    case PassKind::Forward: return "dfgnn::Forward";
    case PassKind::BackwardRow: return "dfgnn::BackwardRow";
    case PassKind::BackwardCol: return "dfgnn::BackwardCol";
  }
  return "?";
}

}  // namespace

std::string geo_type(const dfgnn_op_t& op, int32_t lanes, int32_t heads, int32_t vec, bool edge_features,
                     bool dropout) {
  // Geo's L is the lanes of one head; a group of `lanes` spans `heads` of them, and the last
  // argument compiles dropout in. Both are left to their defaults (1, false) where they can be, so
  // that one-head names without dropout read as they always did.
  const std::string tail = dropout ? fmt::format(",{},true", heads) : heads == 1 ? "" : fmt::format(",{}", heads);
  return fmt::format("dfgnn::Geo<{},{},{},{},{},{}{}>", element_type(op.dtype), op.dim, op.heads, lanes / heads, vec,
                     edge_features ? "true" : "false", tail);
}

std::string pass_type(const dfgnn_op_t& op, PassKind pass, int32_t lanes, int32_t heads, int32_t vec) {
  return fmt::format("{}<{},{}>", pass_template(pass),
                     geo_type(op, lanes, heads, vec, op.edge_features != 0, dropout_compiled_in(op)),
                     variant_type(op.model));
}

std::string rows_kernel(const dfgnn_op_t& op, PassKind pass, int32_t lanes, int32_t heads, int32_t vec, int32_t groups,
                        int32_t team) {
  return fmt::format("&dfgnn::rows_kernel<{},{},{}>", pass_type(op, pass, lanes, heads, vec), groups, team);
}

std::string merge_kernel(const dfgnn_op_t& op, PassKind pass, int32_t lanes, int32_t heads, int32_t vec) {
  return fmt::format("&dfgnn::merge_kernel<{},{}>", pass_type(op, pass, lanes, heads, vec), 256 / lanes);
}

std::string balanced_kernel(const dfgnn_op_t& op, PassKind pass, int32_t lanes, int32_t heads, int32_t vec,
                            int32_t groups) {
  return fmt::format("&dfgnn::balanced_kernel<{},{}>", pass_type(op, pass, lanes, heads, vec), groups);
}

std::string prep_kernel(const dfgnn_op_t& op) {
  const int32_t lanes = lanes_for_dim(op.dim, 1);
  // The prep kernel reads no edge features.
  return fmt::format("&dfgnn::prep_kernel<{},{},{}>", geo_type(op, lanes, 1, 1, false, false), variant_type(op.model),
                     256 / lanes);
}

std::string reduce_stage1_kernel(const dfgnn_op_t& op) {
  switch (model_row(op.model).param_reduction) {
    case ParamReduction::WeightedInput:
      return fmt::format("&dfgnn::reduce_nodes_stage1<{},{},true>", element_type(op.dtype), op.dim);
    case ParamReduction::Channels: return fmt::format("&dfgnn::reduce_nodes_stage1<float,{},false>", op.dim);
    case ParamReduction::Total: return "&dfgnn::reduce_nodes_stage1<float,1,false>";
    case ParamReduction::None: break;
  }
  return {};
}

std::string reduce_stage2_kernel(const dfgnn_op_t& op) {
  switch (model_row(op.model).param_reduction) {
    case ParamReduction::WeightedInput:
    case ParamReduction::Channels: return "&dfgnn::reduce_nodes_stage2<false>";
    case ParamReduction::Total: return "&dfgnn::reduce_nodes_stage2<true>";
    case ParamReduction::None: break;
  }
  return {};
}

}  // namespace dfgnn
