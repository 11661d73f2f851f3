#include "ops.hpp"

#include "context.hpp"
#include "cuda.hpp"
#include "error.hpp"
#include "graph.hpp"
#include "op.hpp"
#include "nvrtc.hpp"
#include "plan.hpp"
#include "recipe.hpp"

#include <vector_types.h>

#include "params.cuh"

#include <algorithm>
#include <cstdint>

namespace dfgnn {
namespace {

constexpr int32_t kMergeGroups = 8;  // merge/prep kernels: 8 groups of 32 lanes (or 256 / L groups)
constexpr int32_t kReduceBlocks = 264;
constexpr size_t kAlign = 256;
constexpr int64_t kMaxGridBlocks = 0x7fffffff;  // gridDim.x limit

const char* element_type(dfgnn_dtype_t dtype) {
  switch (dtype) {
    case DFGNN_DTYPE_FLOAT32: return "float";
    case DFGNN_DTYPE_FLOAT16: return "dfgnn::f16";
    case DFGNN_DTYPE_BFLOAT16: return "dfgnn::bf16";
    default: fail(DFGNN_STATUS_NOT_SUPPORTED, "GPU ops take float32, float16 or bfloat16 features, not {}", dtype_name(dtype));
  }
}

const char* variant_type(dfgnn_model_t model) {
  switch (model) {
    case DFGNN_MODEL_GAT: return "dfgnn::Gat";
    case DFGNN_MODEL_GATV2: return "dfgnn::Gatv2";
    case DFGNN_MODEL_TRANSFORMER: return "dfgnn::Transformer";
    case DFGNN_MODEL_AGNN: return "dfgnn::Agnn";
  }
  return "?";
}

const char* pass_type(PassKind pass) {
  switch (pass) {
    case PassKind::Forward: return "dfgnn::Forward";
    case PassKind::BackwardRow: return "dfgnn::BackwardRow";
    case PassKind::BackwardCol: return "dfgnn::BackwardCol";
  }
  return "?";
}

std::string geo(const dfgnn_op_t& op, int32_t lanes, int32_t vec, bool edge_features) {
  return fmt::format("dfgnn::Geo<{},{},{},{},{},{}>", element_type(op.dtype), op.dim, op.heads, lanes, vec,
                     edge_features ? "true" : "false");
}

std::string pass_of(const dfgnn_op_t& op, PassKind pass, int32_t lanes, int32_t vec) {
  return fmt::format("{}<{},{}>", pass_type(pass), geo(op, lanes, vec, op.edge_features != 0), variant_type(op.model));
}

std::string rows_name(const dfgnn_op_t& op, PassKind pass, int32_t lanes, int32_t vec, int32_t groups, int32_t team) {
  return fmt::format("&dfgnn::rows_kernel<{},{},{}>", pass_of(op, pass, lanes, vec), groups, team);
}

std::string balanced_name(const dfgnn_op_t& op, PassKind pass, int32_t lanes, int32_t vec, int32_t groups) {
  return fmt::format("&dfgnn::balanced_kernel<{},{}>", pass_of(op, pass, lanes, vec), groups);
}

std::string merge_name(const dfgnn_op_t& op, PassKind pass, int32_t lanes, int32_t vec) {
  return fmt::format("&dfgnn::merge_kernel<{},{}>", pass_of(op, pass, lanes, vec), 256 / lanes);
}

// Kernel shape for a plan part, from the schedule (plans are shared by schedules that differ
// only in lanes, groups or vec): a hybrid's warp bins (marked 32 lanes in the plan; a hybrid's
// own lanes are fewer) use 8 whole warps; an edge-balanced schedule's row groups run on its
// balanced kernel and its split rows on 256-thread blocks (the hub-split kernels); everything
// else the schedule's groups of its lanes.
struct PartShape {
  int32_t kernel_index, lanes, groups, team;
};
PartShape part_shape(const Schedule& s, const HostPlan::Part& part) {
  if (s.solver == SolverId::Hybrid && part.lanes == 32) return {1, 32, kMergeGroups, 1};
  if (s.solver == SolverId::EdgeBalanced) return part.row_groups ? PartShape{2, s.lanes, s.groups, 1} : PartShape{0, s.lanes, 256 / s.lanes, 1};
  return {0, s.lanes, s.groups, s.team};
}

// Largest vector width (in elements) every feature pointer's alignment allows.
int32_t alignment_vec(const dfgnn_op_t& op, std::initializer_list<const void*> pointers) {
  const size_t elem = dtype_size(op.dtype);
  int32_t vec = static_cast<int32_t>(16 / elem);
  for (const void* p : pointers) {
    if (p == nullptr) continue;
    while (vec > 1 && reinterpret_cast<uintptr_t>(p) % (vec * elem) != 0) vec /= 2;
  }
  return vec;
}

// Carves aligned regions out of the caller's workspace (or just measures, with base = null).
class Carver {
 public:
  explicit Carver(void* base) : base_(static_cast<char*>(base)) {}
  template <typename T>
  T* take(size_t count) {
    offset_ = (offset_ + kAlign - 1) / kAlign * kAlign;
    T* p = base_ == nullptr || count == 0 ? nullptr : reinterpret_cast<T*>(base_ + offset_);
    offset_ += count * sizeof(T);
    return p;
  }
  size_t used() const { return offset_; }

 private:
  char* base_;
  size_t offset_ = 0;
};

struct BackwardScratch {
  float *delta, *node_a, *node_b, *node_c, *param_part, *row_grad, *partials, *stage;
};

// The one layout of a backward's workspace, used to size it and to carve it. Slots: partial
// states per head of the row and column passes' plans.
BackwardScratch carve_backward(Carver& c, int32_t num_nodes, const dfgnn_op_t& op, int32_t row_slots,
                               int32_t col_slots) {
  const size_t nh = static_cast<size_t>(num_nodes) * op.heads, nhd = nh * op.dim;
  const size_t slots = std::max(static_cast<size_t>(row_slots) * state_floats(op, PassKind::BackwardRow),
                                static_cast<size_t>(col_slots) * state_floats(op, PassKind::BackwardCol));
  BackwardScratch w{};
  w.delta = c.take<float>(nh);
  w.node_a = c.take<float>(op.model == DFGNN_MODEL_GAT || op.model == DFGNN_MODEL_AGNN ? nh : 0);
  w.node_b = c.take<float>(op.model == DFGNN_MODEL_GAT ? nh : 0);
  w.node_c = c.take<float>(op.model == DFGNN_MODEL_GAT ? nh : 0);
  w.param_part = c.take<float>(op.model == DFGNN_MODEL_GATV2 ? nhd : op.model == DFGNN_MODEL_AGNN ? nh : 0);
  w.row_grad = c.take<float>(op.model == DFGNN_MODEL_AGNN ? nhd : 0);
  w.partials = c.take<float>(slots * op.heads);
  w.stage = c.take<float>(op.model == DFGNN_MODEL_TRANSFORMER ? 0 : kReduceBlocks * static_cast<size_t>(op.heads) * op.dim);
  return w;
}

float* carve_forward(Carver& c, const dfgnn_op_t& op, int32_t slots) {
  return c.take<float>(static_cast<size_t>(slots) * op.heads * state_floats(op, PassKind::Forward));
}

size_t workspace_bytes(const dfgnn_op_t& op, dfgnn_direction_t direction, int32_t num_nodes, int32_t row_slots,
                       int32_t col_slots) {
  Carver c(nullptr);
  if (direction == DFGNN_FORWARD) carve_forward(c, op, row_slots);
  else carve_backward(c, num_nodes, op, row_slots, col_slots);
  return c.used();
}

void check_workspace(const LaunchArgs& launch, size_t needed) {
  if (launch.workspace_bytes < needed)
    fail(DFGNN_STATUS_INVALID_ARGUMENT, "workspace of {} bytes is too small: this call needs {} bytes "
         "(dfgnnGetWorkspaceSize)", launch.workspace_bytes, needed);
  if (needed > 0 && launch.workspace == nullptr) fail(DFGNN_STATUS_NULL_POINTER, "workspace is null but {} bytes are needed", needed);
}

void launch_kernel(cudaKernel_t kernel, unsigned grid, unsigned block, size_t smem, cudaStream_t stream, void** args,
                   const char* what) {
  if (grid == 0) return;
  cuda_check(cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(grid), dim3(block), args, smem, stream), what);
}

int64_t blocks_for(int64_t work, int64_t per_block) { return (work + per_block - 1) / per_block; }

// The launches of one pass: rows kernels per plan part, then the merge of split rows.
PassRecipe build_pass(Context& ctx, const Graph& g, const dfgnn_op_t& op, PassKind pass, const Schedule& s) {
  PassRecipe r;
  const DeviceCompressed& structure = pass == PassKind::BackwardCol ? g.device_csc() : g.device_csr();
  r.ptr = structure.ptr.as<const int>();
  r.idx = structure.idx.as<const int>();
  if (pass == PassKind::BackwardCol) r.eid = structure.eid.as<const int>();
  if (op.edge_features) r.edge_id = g.device_csr().eid.as<const int>();
  r.plan = get_plan(g, pass, s);
  r.slots = r.plan->host().num_slots;
  const Plan::Device& device = r.plan->device();
  r.module = ctx.modules.loaded(pass_kernel_names(op, pass, s), ctx.current_arch());
  const size_t smem_per_group = static_cast<size_t>(state_floats(op, pass)) * sizeof(float);
  for (size_t k = 0; k < r.plan->host().parts.size(); ++k) {
    const HostPlan::Part& part = r.plan->host().parts[k];
    const PartShape shape = part_shape(s, part);
    KernelLaunch l;
    l.kernel = r.module->kernel(shape.kernel_index);
    l.list = part.whole_rows ? nullptr : device.parts[k].as<const int4>();
    l.count = part.whole_rows ? g.num_nodes() : static_cast<int32_t>(part.segments.size());
    l.min_degree = part.min_degree;
    l.max_degree = part.max_degree;
    // Row groups: one block per (row group, block's heads); otherwise one team per (item, head).
    const int64_t blocks = part.row_groups ? int64_t{l.count} * (op.heads / balanced_heads_per_block(shape.groups, op.heads))
                                           : blocks_for(int64_t{l.count} * op.heads, shape.groups / shape.team);
    if (blocks > kMaxGridBlocks)
      fail(DFGNN_STATUS_NOT_SUPPORTED, "schedule {} needs {} blocks for this graph, more than a grid holds ({}); "
           "a larger chunk or more groups per block would fit", to_string(s), blocks, kMaxGridBlocks);
    l.grid = static_cast<unsigned>(blocks);
    l.block = shape.groups * shape.lanes;
    l.smem = shape.team > 1 || part.row_groups ? shape.groups * smem_per_group : 0;
    r.rows.push_back(l);
  }
  if (!r.plan->host().hubs.empty()) {
    KernelLaunch l;
    l.kernel = r.module->kernel(s.solver == SolverId::Hybrid ? 2 : 1);
    l.list = device.hubs.as<const int4>();
    l.count = static_cast<int32_t>(r.plan->host().hubs.size());
    l.grid = static_cast<unsigned>(blocks_for(int64_t{l.count} * op.heads, 256 / (s.solver == SolverId::Hybrid ? 32 : s.lanes)));
    l.block = 256;
    r.merge = l;
  }
  return r;
}

void launch_pass(const PassRecipe& r, int32_t num_nodes, Params p, cudaStream_t stream) {
  p.ptr = r.ptr;
  p.idx = r.idx;
  p.eid = r.eid;
  p.edge_id = r.edge_id;
  p.num_nodes = num_nodes;
  void* args[] = {&p};
  for (const KernelLaunch& l : r.rows) {
    p.segments = l.list;
    p.num_items = l.count;
    p.min_degree = l.min_degree;
    p.max_degree = l.max_degree;
    launch_kernel(l.kernel, l.grid, l.block, l.smem, stream, args, "rows kernel launch");
  }
  if (r.merge) {
    p.hubs = r.merge->list;
    p.num_hubs = r.merge->count;
    launch_kernel(r.merge->kernel, r.merge->grid, r.merge->block, 0, stream, args, "merge kernel launch");
  }
}

// The aggregated features when the model loads them on their own (Params::x2): the Transformer's
// v, and GATv2's h once edge features make its key h_j + edge_ij.
const void* value_input(const dfgnn_op_t& op, const dfgnn_inputs_t& in) {
  return op.model == DFGNN_MODEL_GATV2 && op.edge_features ? in.h : in.v;
}

// An edge-feature array read in fragments like node features (its alignment limits the vector
// width); GAT's float32 [E, H] logit terms are read one float at a time.
const void* feature_edge(const dfgnn_op_t& op, const void* edge) {
  return slot_in_op_dtype(op, kEdgeSlot) ? edge : nullptr;
}

void set_dropout(const dfgnn_op_t& op, Params& p) {
  p.dropout_threshold = dropout_threshold(op);
  p.dropout_seed = op.dropout_seed;
  p.dropout_scale = dropout_scale(op);
}

const Schedule& parse_checked(const PassProblem& problem, const std::string& text, Schedule& out) {
  out = parse_schedule(text);
  require_valid(problem, out);
  return out;
}

void check_gpu_op(const Graph& g, const dfgnn_op_t* op) {
  if (op == nullptr) fail(DFGNN_STATUS_INVALID_ARGUMENT, "op is null");
  validate_op(*op, g.num_nodes(), g.num_edges());
  element_type(op->dtype);
}

}  // namespace

PassProblem pass_problem(const Graph& graph, const dfgnn_op_t& op, PassKind pass, int32_t max_vec) {
  PassProblem p;
  p.op = op;
  p.pass = pass;
  p.fingerprint = pass == PassKind::BackwardCol ? &graph.csc_fingerprint() : &graph.fingerprint();
  p.max_vec = max_vec;
  return p;
}

OpSchedules choose_schedules(Context& ctx, const Graph& graph, const dfgnn_op_t& op, dfgnn_direction_t direction,
                             const char* forced, int32_t max_vec) {
  check_gpu_op(graph, &op);
  if (direction != DFGNN_FORWARD && direction != DFGNN_BACKWARD)
    fail(DFGNN_STATUS_INVALID_ARGUMENT, "direction {} is neither DFGNN_FORWARD nor DFGNN_BACKWARD", static_cast<int>(direction));
  const PassKind first = direction == DFGNN_FORWARD ? PassKind::Forward : PassKind::BackwardRow;
  const PassProblem row = pass_problem(graph, op, first, max_vec);
  const PassProblem col = pass_problem(graph, op, PassKind::BackwardCol, max_vec);
  OpSchedules s;
  if (forced == nullptr || *forced == '\0') {
    s.row = ctx.dispatcher.decide(ctx, graph, op, first, max_vec).schedule;
    if (direction == DFGNN_BACKWARD) s.col = ctx.dispatcher.decide(ctx, graph, op, PassKind::BackwardCol, max_vec).schedule;
    return s;
  }
  const std::string text(forced);
  const size_t bar = text.find('|');
  if (direction == DFGNN_FORWARD) {
    if (bar != std::string::npos) fail(DFGNN_STATUS_PARSE_ERROR, "schedule '{}': '|' separates the backward's row and column schedules; a forward takes one", text);
    parse_checked(row, text, s.row);
    return s;
  }
  parse_checked(row, text.substr(0, bar), s.row);
  parse_checked(col, bar == std::string::npos ? text : text.substr(bar + 1), s.col);
  return s;
}

std::vector<std::string> pass_kernel_names(const dfgnn_op_t& op, PassKind pass, const Schedule& s) {
  switch (s.solver) {
    case SolverId::Subwarp:
    case SolverId::BlockRow: return {rows_name(op, pass, s.lanes, s.vec, s.groups, s.team)};
    case SolverId::HubSplit: return {rows_name(op, pass, s.lanes, s.vec, s.groups, 1), merge_name(op, pass, s.lanes, s.vec)};
    case SolverId::Hybrid:
      return {rows_name(op, pass, s.lanes, s.vec, s.groups, 1), rows_name(op, pass, 32, s.vec, kMergeGroups, 1),
              merge_name(op, pass, 32, s.vec)};
    case SolverId::EdgeBalanced:
      return {rows_name(op, pass, s.lanes, s.vec, 256 / s.lanes, 1), merge_name(op, pass, s.lanes, s.vec),
              balanced_name(op, pass, s.lanes, s.vec, s.groups)};
  }
  fail(DFGNN_STATUS_INTERNAL_ERROR, "unknown solver {}", static_cast<int>(s.solver));
}

std::vector<std::string> backward_helper_names(const dfgnn_op_t& op) {
  const int32_t lanes = lanes_for_dim(op.dim, 1);
  const std::string g = geo(op, lanes, 1, false);  // the prep kernel reads no edge features
  std::vector<std::string> names{
      fmt::format("&dfgnn::prep_kernel<{},{},{}>", g, variant_type(op.model), 256 / lanes)};
  switch (op.model) {
    case DFGNN_MODEL_GAT:
      names.push_back(fmt::format("&dfgnn::reduce_nodes_stage1<{},{},true>", element_type(op.dtype), op.dim));
      names.push_back("&dfgnn::reduce_nodes_stage2<false>");
      break;
    case DFGNN_MODEL_GATV2:
      names.push_back(fmt::format("&dfgnn::reduce_nodes_stage1<float,{},false>", op.dim));
      names.push_back("&dfgnn::reduce_nodes_stage2<false>");
      break;
    case DFGNN_MODEL_AGNN:
      names.push_back("&dfgnn::reduce_nodes_stage1<float,1,false>");
      names.push_back("&dfgnn::reduce_nodes_stage2<true>");
      break;
    case DFGNN_MODEL_TRANSFORMER: break;
  }
  return names;
}

size_t workspace_size(const Graph& graph, const dfgnn_op_t& op, dfgnn_direction_t direction, const OpSchedules& s) {
  const PassKind first = direction == DFGNN_FORWARD ? PassKind::Forward : PassKind::BackwardRow;
  const int32_t row_slots = get_plan(graph, first, s.row)->host().num_slots;
  const int32_t col_slots =
      direction == DFGNN_FORWARD ? 0 : get_plan(graph, PassKind::BackwardCol, s.col)->host().num_slots;
  return workspace_bytes(op, direction, graph.num_nodes(), row_slots, col_slots);
}

std::shared_ptr<const Recipe> recipe_for(Context& ctx, const Graph& g, const dfgnn_op_t& op,
                                         dfgnn_direction_t direction, const char* forced, int32_t max_vec) {
  RecipeKey key;
  key.context = ctx.serial;
  key.generation = ctx.dispatcher.generation();  // read first: tuning during this build retires the recipe
  key.model = op.model;
  key.dtype = op.dtype;
  key.heads = op.heads;
  key.dim = op.dim;
  key.edge_features = op.edge_features;
  key.direction = direction;
  key.max_vec = max_vec;
  cuda_check(cudaGetDevice(&key.device), "cudaGetDevice");
  if (forced != nullptr) key.forced = forced;
  if (auto found = g.recipe(key)) return found;

  auto r = std::make_shared<Recipe>();
  r->schedules = choose_schedules(ctx, g, op, direction, forced, max_vec);
  if (direction == DFGNN_FORWARD) {
    r->first = build_pass(ctx, g, op, PassKind::Forward, r->schedules.row);
  } else {
    r->first = build_pass(ctx, g, op, PassKind::BackwardRow, r->schedules.row);
    r->second = build_pass(ctx, g, op, PassKind::BackwardCol, r->schedules.col);
    r->helpers = ctx.modules.loaded(backward_helper_names(op), ctx.current_arch());
  }
  r->workspace_bytes = workspace_bytes(op, direction, g.num_nodes(), r->first.slots, r->second.slots);
  return g.store_recipe(key, std::move(r));
}

void forward(Context& ctx, const Graph& g, const dfgnn_op_t& op, const dfgnn_inputs_t& in, void* out, float* lse,
             const LaunchArgs& launch) {
  check_gpu_op(g, &op);
  require_device("dfgnnForward");
  const int32_t n = g.num_nodes();
  if (n == 0) {  // nothing to launch; a forced schedule is still checked
    choose_schedules(ctx, g, op, DFGNN_FORWARD, launch.schedule, alignment_vec(op, {}));
    return;
  }
  if (out == nullptr) fail(DFGNN_STATUS_NULL_POINTER, "out is null");
  const int32_t max_vec = alignment_vec(op, {in.h, in.h_dst, in.q, in.k, in.v, out, feature_edge(op, in.edge)});
  const auto recipe = recipe_for(ctx, g, op, DFGNN_FORWARD, launch.schedule, max_vec);
  check_workspace(launch, recipe->workspace_bytes);
  Carver carver(launch.workspace);
  Params p{};
  p.x0 = op.model == DFGNN_MODEL_TRANSFORMER ? in.q : in.h;
  p.x1 = op.model == DFGNN_MODEL_TRANSFORMER ? in.k : in.h_dst;
  p.x2 = value_input(op, in);
  p.att_src = static_cast<const float*>(in.att_src);
  p.att_dst = static_cast<const float*>(in.att_dst);
  p.beta = static_cast<const float*>(in.beta);
  p.edge = in.edge;
  p.out = out;
  p.lse = lse;
  p.partials = carve_forward(carver, op, recipe->first.slots);
  p.slope = op.negative_slope;
  p.scale = static_cast<float>(effective_scale(op));
  set_dropout(op, p);
  p.dropout_seed_ptr = reinterpret_cast<const unsigned long long*>(launch.dropout_seed_device);
  launch_pass(recipe->first, n, p, launch.stream);
}

void backward(Context& ctx, const Graph& g, const dfgnn_op_t& op, const dfgnn_inputs_t& in, const void* out,
              const float* lse, const void* grad_out, const dfgnn_grads_t& grads, const LaunchArgs& launch) {
  check_gpu_op(g, &op);
  require_device("dfgnnBackward");
  const int32_t n = g.num_nodes();
  if (n == 0) {
    // No nodes: nothing to launch; parameter gradients are zero.
    choose_schedules(ctx, g, op, DFGNN_BACKWARD, launch.schedule, alignment_vec(op, {}));
    if (grads.att_src) cuda_check(cudaMemsetAsync(grads.att_src, 0, sizeof(float) * op.heads * op.dim, launch.stream), "memset");
    if (grads.att_dst) cuda_check(cudaMemsetAsync(grads.att_dst, 0, sizeof(float) * op.heads * op.dim, launch.stream), "memset");
    if (grads.beta) cuda_check(cudaMemsetAsync(grads.beta, 0, sizeof(float), launch.stream), "memset");
    return;
  }
  if (out == nullptr || lse == nullptr || grad_out == nullptr)
    fail(DFGNN_STATUS_NULL_POINTER, "backward needs the forward's out and lse and grad_out ({} is null)",
         out == nullptr ? "out" : lse == nullptr ? "lse" : "grad_out");
  const int32_t max_vec = alignment_vec(op, {in.h, in.h_dst, in.q, in.k, in.v, out, grad_out, grads.h, grads.h_dst,
                                             grads.q, grads.k, grads.v, feature_edge(op, in.edge),
                                             feature_edge(op, grads.edge)});
  const auto recipe = recipe_for(ctx, g, op, DFGNN_BACKWARD, launch.schedule, max_vec);
  check_workspace(launch, recipe->workspace_bytes);
  Carver carver(launch.workspace);
  const BackwardScratch w = carve_backward(carver, n, op, recipe->first.slots, recipe->second.slots);
  Params p{};
  const bool tr = op.model == DFGNN_MODEL_TRANSFORMER;
  p.x0 = tr ? in.q : in.h;
  p.x1 = tr ? in.k : in.h_dst;
  p.x2 = value_input(op, in);
  p.att_src = static_cast<const float*>(in.att_src);
  p.att_dst = static_cast<const float*>(in.att_dst);
  p.beta = static_cast<const float*>(in.beta);
  p.edge = in.edge;
  p.g_edge = grads.edge;
  p.lse = const_cast<float*>(lse);  // read only in backward passes
  p.dout = grad_out;
  p.fwd_out = out;
  p.delta = w.delta;
  p.node_a = w.node_a;
  p.node_b = w.node_b;
  p.node_c = w.node_c;
  p.g0 = tr ? grads.q : grads.h;
  p.g1 = tr ? grads.k : grads.h_dst;
  p.g2 = grads.v;
  p.param_part = w.param_part;
  p.row_grad = w.row_grad;
  p.partials = w.partials;
  p.num_nodes = n;
  p.slope = op.negative_slope;
  p.scale = static_cast<float>(effective_scale(op));
  set_dropout(op, p);
  p.dropout_seed_ptr = reinterpret_cast<const unsigned long long*>(launch.dropout_seed_device);

  const LoadedModule& helpers = *recipe->helpers;
  const int32_t prep_lanes = lanes_for_dim(op.dim, 1);
  {
    void* args[] = {&p};
    const auto grid = static_cast<unsigned>(blocks_for(int64_t{n} * op.heads, 256 / prep_lanes));
    launch_kernel(helpers.kernel(0), grid, 256, 0, launch.stream, args, "prep kernel launch");
  }
  launch_pass(recipe->first, n, p, launch.stream);
  launch_pass(recipe->second, n, p, launch.stream);

  // Parameter gradients: deterministic two-stage sums over nodes.
  auto reduce = [&](const void* x, const float* weights, int cols, float* result) {
    const int blocks = std::min<int>(kReduceBlocks, n);
    int nodes_per_block = (n + blocks - 1) / blocks;
    const int used_blocks = (n + nodes_per_block - 1) / nodes_per_block;
    void* args1[] = {&x, &weights, const_cast<int32_t*>(&n), &cols, &nodes_per_block, const_cast<float**>(&w.stage)};
    launch_kernel(helpers.kernel(1), used_blocks, 256, 0, launch.stream, args1, "reduce kernel launch");
    int b = used_blocks;
    void* args2[] = {const_cast<float**>(&w.stage), &b, &cols, &result};
    launch_kernel(helpers.kernel(2), 1, 256, 0, launch.stream, args2, "reduce kernel launch");
  };
  const int hd = op.heads * op.dim;
  switch (op.model) {
    case DFGNN_MODEL_GAT:
      reduce(in.h, w.node_b, hd, static_cast<float*>(grads.att_src));
      reduce(in.h, w.node_c, hd, static_cast<float*>(grads.att_dst));
      break;
    case DFGNN_MODEL_GATV2: reduce(w.param_part, nullptr, hd, static_cast<float*>(grads.att_src)); break;
    case DFGNN_MODEL_AGNN: reduce(w.param_part, nullptr, op.heads, static_cast<float*>(grads.beta)); break;
    case DFGNN_MODEL_TRANSFORMER: break;
  }
  cuda_check(cudaGetLastError(), "backward kernels");
}

}  // namespace dfgnn
