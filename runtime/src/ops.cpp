#include "ops.hpp"

#include "context.hpp"
#include "cuda.hpp"
#include "error.hpp"
#include "graph.hpp"
#include "kernel_names.hpp"
#include "logging.hpp"
#include "op.hpp"
#include "nvrtc.hpp"
#include "plan.hpp"
#include "recipe.hpp"
#include "solver.hpp"

#include <vector_types.h>

#include "params.cuh"

#include <algorithm>
#include <cstdint>

namespace dfgnn {
namespace {

constexpr int32_t kReduceBlocks = 264;
constexpr size_t kAlign = 256;
constexpr int64_t kMaxGridBlocks = 0x7fffffff;  // gridDim.x limit

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
  const ModelRow& model = model_row(op.model);
  const ParamReduction reduction = model.param_reduction;
  BackwardScratch w{};
  w.delta = c.take<float>(nh);
  w.node_a = c.take<float>(model.node_scalars >= 1 ? nh : 0);
  w.node_b = c.take<float>(model.node_scalars >= 2 ? nh : 0);
  w.node_c = c.take<float>(model.node_scalars >= 3 ? nh : 0);
  w.param_part = c.take<float>(reduction == ParamReduction::Channels ? nhd : reduction == ParamReduction::Total ? nh : 0);
  w.row_grad = c.take<float>(model.row_grad ? nhd : 0);
  w.partials = c.take<float>(slots * op.heads);
  // WeightedInput's two sums (GAT's attention vectors) side by side; Total's sums over heads fit too.
  const size_t sums = reduction == ParamReduction::None ? 0 : reduction == ParamReduction::WeightedInput ? 2 : 1;
  w.stage = c.take<float>(sums * kReduceBlocks * static_cast<size_t>(op.heads) * op.dim);
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

void launch_kernel(cudaKernel_t kernel, dim3 grid, unsigned block, size_t smem, cudaStream_t stream, void** args,
                   const char* what) {
  if (grid.x == 0 || grid.y == 0) return;
  cuda_check(cudaLaunchKernel(reinterpret_cast<const void*>(kernel), grid, dim3(block), args, smem, stream), what);
}

int64_t blocks_for(int64_t work, int64_t per_block) { return (work + per_block - 1) / per_block; }

// A kernel of a loaded module by its name expression (the module was compiled from `names`).
cudaKernel_t kernel_named(const LoadedModule& module, const std::vector<std::string>& names, const std::string& name) {
  const auto found = std::find(names.begin(), names.end(), name);
  if (found == names.end()) fail(DFGNN_STATUS_INTERNAL_ERROR, "kernel {} is not among the module's kernels", name);
  return module.kernel(static_cast<size_t>(found - names.begin()));
}

// The launches of one pass, as its solver shapes them over its plan.
PassRecipe build_pass(Context& ctx, const Graph& g, const dfgnn_op_t& op, PassKind pass, const Schedule& s) {
  const Span span("pass recipe (plan, module, launches)");
  const Solver& solver = solver_of(s);
  PassRecipe r;
  const DeviceCompressed& structure = pass == PassKind::BackwardCol ? g.device_csc() : g.device_csr();
  r.ptr = structure.ptr.as<const int>();
  r.idx = structure.idx.as<const int>();
  if (pass == PassKind::BackwardCol) r.eid = structure.eid.as<const int>();
  if (op.edge_features) r.edge_id = g.device_csr_edge_ids();
  r.plan = get_plan(g, pass, s);
  const HostPlan& plan = r.plan->host();
  r.slots = plan.num_slots;
  const Plan::Device& device = r.plan->device();
  const std::vector<std::string> names = solver.kernels(op, pass, s);
  r.module = ctx.modules.loaded(names, ctx.current_arch());
  for (const Launch& launch : solver.launches(op, pass, s, plan, g.num_nodes())) {
    if (launch.grid > kMaxGridBlocks)
      fail(DFGNN_STATUS_NOT_SUPPORTED, "schedule {} needs {} blocks for this graph, more than a grid holds ({}); "
           "a larger chunk or more groups per block would fit", to_string(s), launch.grid, kMaxGridBlocks);
    KernelLaunch l;
    l.what = fmt::format("{} kernel launch ({})", launch.role, solver.name());
    l.kernel = kernel_named(*r.module, names, launch.kernel);
    l.grid = static_cast<unsigned>(launch.grid);
    l.block = static_cast<unsigned>(launch.block);
    l.smem = launch.smem;
    if (launch.part == Launch::kHubList) {
      l.merge = true;
      l.list = device.hubs.as<const int4>();
      l.count = static_cast<int32_t>(plan.hubs.size());
    } else {
      const HostPlan::Part& part = plan.parts.at(static_cast<size_t>(launch.part));
      l.list = part.listed() ? device.parts[static_cast<size_t>(launch.part)].as<const int4>() : nullptr;
      l.count = solvers::part_items(part, g.num_nodes());
      l.min_degree = part.min_degree;
      l.max_degree = part.max_degree;
    }
    r.launches.push_back(l);
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
  for (const KernelLaunch& l : r.launches) {
    if (l.merge) {
      p.hubs = l.list;
      p.num_hubs = l.count;
    } else {
      p.segments = l.list;
      p.num_items = l.count;
      p.min_degree = l.min_degree;
      p.max_degree = l.max_degree;
    }
    launch_kernel(l.kernel, l.grid, l.block, l.smem, stream, args, l.what.c_str());
  }
}

// The input or gradient in slot `slot` of a dfgnn_inputs_t or dfgnn_grads_t (fields in slot
// order); null for kNoSlot.
template <typename Slots>
auto slot_pointer(const Slots& slots, int slot) {
  using Pointer = decltype(slots.h);
  static_assert(sizeof(Slots) == kNumSlots * sizeof(Pointer));
  return slot == kNoSlot ? Pointer{} : reinterpret_cast<const Pointer*>(&slots)[slot];
}

// Params' inputs x0, x1, x2 from the model's row of the model table.
void set_inputs(const dfgnn_op_t& op, const dfgnn_inputs_t& in, Params& p) {
  const ModelRow& model = model_row(op.model);
  p.x0 = slot_pointer(in, model.x0);
  p.x1 = slot_pointer(in, model.x1);
  p.x2 = slot_pointer(in, op.edge_features ? model.x2_with_edge : model.x2);
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

SchedulePair choose_schedules(Context& ctx, const Graph& graph, const dfgnn_op_t& op, dfgnn_direction_t direction,
                             const char* forced, int32_t max_vec) {
  check_gpu_op(graph, &op);
  if (direction != DFGNN_FORWARD && direction != DFGNN_BACKWARD)
    fail(DFGNN_STATUS_INVALID_ARGUMENT, "direction {} is neither DFGNN_FORWARD nor DFGNN_BACKWARD", static_cast<int>(direction));
  const PassKind first = direction == DFGNN_FORWARD ? PassKind::Forward : PassKind::BackwardRow;
  const PassProblem row = pass_problem(graph, op, first, max_vec);
  const PassProblem col = pass_problem(graph, op, PassKind::BackwardCol, max_vec);
  SchedulePair s;
  if (forced == nullptr || *forced == '\0') {
    s.row = ctx.dispatcher.decide(ctx, graph, op, first, max_vec).schedule;
    if (direction == DFGNN_BACKWARD) s.col = ctx.dispatcher.decide(ctx, graph, op, PassKind::BackwardCol, max_vec).schedule;
    return s;
  }
  s = parse_schedules(direction, forced);
  require_valid(row, s.row);
  if (direction == DFGNN_BACKWARD) require_valid(col, s.col);
  return s;
}

std::vector<std::string> pass_kernel_names(const dfgnn_op_t& op, PassKind pass, const Schedule& s) {
  return solver_of(s).kernels(op, pass, s);
}

std::vector<std::vector<std::string>> backward_module_names(const dfgnn_op_t& op, const SchedulePair& s) {
  return {pass_kernel_names(op, PassKind::BackwardRow, s.row), pass_kernel_names(op, PassKind::BackwardCol, s.col),
          backward_helper_names(op)};
}

std::vector<std::string> backward_helper_names(const dfgnn_op_t& op) {
  std::vector<std::string> names{prep_kernel(op)};
  for (std::string reduce : {reduce_stage1_kernel(op), reduce_stage2_kernel(op)})
    if (!reduce.empty()) names.push_back(std::move(reduce));
  return names;
}

size_t workspace_size(const Graph& graph, const dfgnn_op_t& op, dfgnn_direction_t direction, const SchedulePair& s) {
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
  key.dropout = dropout_compiled_in(op) ? 1 : 0;
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
    ctx.modules.cubins(backward_module_names(op, r->schedules), ctx.current_arch());
    r->first = build_pass(ctx, g, op, PassKind::BackwardRow, r->schedules.row);
    r->second = build_pass(ctx, g, op, PassKind::BackwardCol, r->schedules.col);
    const std::vector<std::string> names = backward_helper_names(op);
    r->helpers = ctx.modules.loaded(names, ctx.current_arch());
    r->prep = kernel_named(*r->helpers, names, prep_kernel(op));
    if (const std::string stage1 = reduce_stage1_kernel(op); !stage1.empty()) {
      r->reduce_stage1 = kernel_named(*r->helpers, names, stage1);
      r->reduce_stage2 = kernel_named(*r->helpers, names, reduce_stage2_kernel(op));
    }
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
  set_inputs(op, in, p);
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
  const ModelRow& model = model_row(op.model);
  Params p{};
  set_inputs(op, in, p);
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
  p.g0 = slot_pointer(grads, model.x0);
  p.g1 = slot_pointer(grads, model.x1);
  p.g2 = slot_pointer(grads, model.x2);
  p.param_part = w.param_part;
  p.row_grad = w.row_grad;
  p.partials = w.partials;
  p.num_nodes = n;
  p.slope = op.negative_slope;
  p.scale = static_cast<float>(effective_scale(op));
  set_dropout(op, p);
  p.dropout_seed_ptr = reinterpret_cast<const unsigned long long*>(launch.dropout_seed_device);

  const int32_t prep_lanes = lanes_for_dim(op.dim, 1);
  {
    void* args[] = {&p};
    const auto grid = static_cast<unsigned>(blocks_for(int64_t{n} * op.heads, 256 / prep_lanes));
    launch_kernel(recipe->prep, grid, 256, 0, launch.stream, args, "prep kernel launch");
  }
  launch_pass(recipe->first, n, p, launch.stream);
  launch_pass(recipe->second, n, p, launch.stream);

  // Parameter gradients: deterministic two-stage sums over nodes, `sums` (1 or 2) of them weighing the
  // same x at once.
  auto reduce = [&](const void* x, int cols, int sums, const float* w0, float* result0, const float* w1,
                    float* result1) {
    const int blocks = std::min<int>(kReduceBlocks, n);
    int nodes_per_block = (n + blocks - 1) / blocks;
    const int used_blocks = (n + nodes_per_block - 1) / nodes_per_block;
    void* args1[] = {&x, &w0, &w1, const_cast<int32_t*>(&n), &cols, &nodes_per_block, const_cast<float**>(&w.stage)};
    launch_kernel(recipe->reduce_stage1, dim3(used_blocks, sums), 256, 0, launch.stream, args1, "reduce kernel launch");
    int b = used_blocks;
    void* args2[] = {const_cast<float**>(&w.stage), &b, &cols, &result0, &result1};
    launch_kernel(recipe->reduce_stage2, dim3(sums), 256, 0, launch.stream, args2, "reduce kernel launch");
  };
  const int hd = op.heads * op.dim;
  switch (model.param_reduction) {
    case ParamReduction::WeightedInput:
      reduce(p.x0, hd, 2, w.node_b, static_cast<float*>(grads.att_src), w.node_c, static_cast<float*>(grads.att_dst));
      break;
    case ParamReduction::Channels:
      reduce(w.param_part, hd, 1, nullptr, static_cast<float*>(grads.att_src), nullptr, nullptr);
      break;
    case ParamReduction::Total: reduce(w.param_part, op.heads, 1, nullptr, static_cast<float*>(grads.beta), nullptr, nullptr); break;
    case ParamReduction::None: break;
  }
  cuda_check(cudaGetLastError(), "backward kernels");
}

}  // namespace dfgnn
