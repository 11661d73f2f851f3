#include "kernel_names.hpp"

#include "error.hpp"
#include "op.hpp"
#include "solver.hpp"

#include <fmt/format.h>

#include <vector>

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

// Geo's arguments after (T, D, H, L, V, E): the heads of a group and whether dropout is compiled in,
// each left to its default (1, false) where it can be, so that one-head names without dropout read
// as they always did.
std::string geo_tail(const std::string& heads, bool dropout) {
  return dropout ? "," + heads + ",true" : heads == "1" ? "" : "," + heads;
}

}  // namespace

std::string geo_type(const dfgnn_op_t& op, int32_t lanes, int32_t heads, int32_t vec, bool edge_features,
                     bool dropout) {
  // Geo's L is the lanes of one head; a group of `lanes` spans `heads` of them.
  return fmt::format("dfgnn::Geo<{},{},{},{},{},{}{}>", element_type(op.dtype), op.dim, op.heads, lanes / heads, vec,
                     edge_features ? "true" : "false", geo_tail(std::to_string(heads), dropout));
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

namespace {

// The geometry of a kernel name that compiles dropout in: where "dfgnn::Geo<...>" lies and its
// arguments (T, D, H, L, V, E, HG, P: geo_type writes all eight when P is set).
struct DropoutGeo {
  size_t begin = 0, end = 0;  // [begin, end) spans "dfgnn::Geo<...>"
  std::vector<std::string> args;
};

std::optional<DropoutGeo> dropout_geo(const std::string& kernel) {
  const std::string open = "dfgnn::Geo<";
  DropoutGeo g;
  g.begin = kernel.find(open);
  if (g.begin == std::string::npos) return std::nullopt;
  const size_t close = kernel.find('>', g.begin);  // Geo's arguments hold no template
  if (close == std::string::npos) return std::nullopt;
  g.end = close + 1;
  const std::string args = kernel.substr(g.begin + open.size(), close - g.begin - open.size());
  for (size_t at = 0;;) {
    const size_t comma = args.find(',', at);
    g.args.push_back(args.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  if (g.args.size() != 8 || g.args[7] != "true") return std::nullopt;
  return g;
}

}  // namespace

std::optional<std::string> without_dropout(const std::string& kernel) {
  const std::optional<DropoutGeo> g = dropout_geo(kernel);
  if (!g) return std::nullopt;
  std::string geo = "dfgnn::Geo<" + g->args[0];
  for (size_t k = 1; k < 6; ++k) geo += "," + g->args[k];
  geo += geo_tail(g->args[6], false) + ">";
  return kernel.substr(0, g->begin) + geo + kernel.substr(g->end);
}

std::optional<std::string> held_resident(const std::string& kernel, int blocks) {
  if (kernel.rfind("&dfgnn::rows_kernel<", 0) != 0 && kernel.rfind("&dfgnn::balanced_kernel<", 0) != 0)
    return std::nullopt;  // not a kernel whose launch bounds ask for resident blocks (schedules.cuh)
  const std::optional<DropoutGeo> g = dropout_geo(kernel);
  if (!g || blocks < 1) return std::nullopt;
  return fmt::format("{}dfgnn::Resident<{},{}>{}", kernel.substr(0, g->begin),
                     kernel.substr(g->begin, g->end - g->begin), blocks, kernel.substr(g->end));
}

}  // namespace dfgnn
