#include "solver.hpp"

#include "error.hpp"
#include "kernel_names.hpp"
#include "op.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

namespace dfgnn {

// ---------------------------------------------------------------- the registry
// One line per solver (defined in solvers/NAME.cpp), in the order the tuner lists candidates.
const Solver& subwarp_solver();
const Solver& block_row_solver();
const Solver& hub_split_solver();
const Solver& hybrid_solver();
const Solver& edge_balanced_solver();

const std::vector<const Solver*>& all_solvers() {
  static const std::vector<const Solver*> solvers{&subwarp_solver(), &block_row_solver(), &hub_split_solver(),
                                                  &hybrid_solver(), &edge_balanced_solver()};
  return solvers;
}

const Solver* find_solver(SolverId id) {
  for (const Solver* s : all_solvers())
    if (s->id() == id) return s;
  return nullptr;
}

const Solver& solver_of(const Schedule& s) {
  const Solver* solver = find_solver(s.solver);
  if (solver == nullptr) fail(DFGNN_STATUS_INTERNAL_ERROR, "unknown solver id {}", static_cast<int>(s.solver));
  return *solver;
}

std::vector<Schedule> enumerate_schedules(const PassProblem& problem) {
  std::vector<Schedule> out;
  for (const Solver* s : all_solvers()) {
    if (!s->applicable(problem)) continue;
    for (const Schedule& sched : s->enumerate(problem)) out.push_back(sched);
  }
  return out;
}

void require_valid(const PassProblem& problem, const Schedule& s) {
  const Solver* solver = find_solver(s.solver);
  if (solver == nullptr) fail(DFGNN_STATUS_INVALID_ARGUMENT, "unknown solver id {}", static_cast<int>(s.solver));
  const std::string reason = solver->invalid_reason(problem, s);
  if (!reason.empty())
    fail(DFGNN_STATUS_INVALID_ARGUMENT, "schedule {} is not valid for {} {} (D = {}): {}", to_string(s),
         model_name(problem.op.model), pass_name(problem.pass), problem.op.dim, reason);
}

// ---------------------------------------------------------------- geometry
int32_t state_floats(const dfgnn_op_t& op, PassKind pass) {
  const ModelTraits traits = traits_of(op.model);
  const StateShape shape = pass == PassKind::Forward       ? traits.forward
                           : pass == PassKind::BackwardRow ? traits.backward_row
                                                           : traits.backward_col;
  return shape.ns + shape.nv * op.dim;
}

int32_t lanes_for_dim(int32_t dim, int32_t vec) {
  return static_cast<int32_t>(std::clamp<int64_t>(solvers::next_pow2((int64_t{dim} + vec - 1) / vec), 4, 32));
}

int32_t lanes_per_head_for_dim(int32_t dim, int32_t vec) {
  return static_cast<int32_t>(std::clamp<int64_t>(solvers::next_pow2((int64_t{dim} + vec - 1) / vec), 1, 32));
}

int32_t default_group_heads(const dfgnn_op_t& op, int32_t vec) {
  if (op.heads <= 1 || op.dim > 32) return 1;
  const int32_t per_head = lanes_per_head_for_dim(op.dim, vec);
  int32_t heads = 1;
  while (op.heads % (heads * 2) == 0 && heads * 2 * per_head <= 32) heads *= 2;
  return heads;
}

int32_t registers_per_lane(int32_t dim, int32_t lanes, int32_t vec) {
  // In 64 bits: D near 2^31 must not wrap; the result is at most D, so it fits again.
  const int64_t per_chunk = int64_t{lanes} * vec;
  return static_cast<int32_t>((int64_t{dim} + per_chunk - 1) / per_chunk * vec);
}

// ---------------------------------------------------------------- the base
namespace {

constexpr int32_t kMaxRegistersPerLane = 64;  // channels a lane holds; beyond, kernels would spill

std::string common_invalid_reason(const PassProblem& p, const Schedule& s) {
  const int32_t lanes = s.lanes;
  if (lanes != 4 && lanes != 8 && lanes != 16 && lanes != 32) return fmt::format("lanes = {} is not 4, 8, 16 or 32", lanes);
  if (s.heads < 1 || (s.heads & (s.heads - 1)) != 0 || lanes % s.heads != 0 || p.op.heads % s.heads != 0)
    return fmt::format("heads = {} is not a power of two dividing lanes = {} and H = {}", s.heads, lanes, p.op.heads);
  if (s.vec < 1 || s.vec > 8 || (s.vec & (s.vec - 1)) != 0) return fmt::format("vec = {} is not 1, 2, 4 or 8", s.vec);
  if (s.vec * static_cast<int32_t>(dtype_size(p.op.dtype)) > 16)
    return fmt::format("vec = {} {} values exceed a 16-byte load", s.vec, dtype_name(p.op.dtype));
  if (p.op.dim % s.vec != 0) return fmt::format("vec = {} does not divide D = {}", s.vec, p.op.dim);
  if (s.vec > p.max_vec) return fmt::format("vec = {} exceeds what the data's alignment allows ({})", s.vec, p.max_vec);
  if (s.groups < 1 || int64_t{s.groups} * lanes > 1024 || (s.groups * lanes) % 32 != 0)  // 64 bits: groups is user text
    return fmt::format("groups = {} of {} lanes is not a block of 32..1024 whole warps", s.groups, lanes);
  if (s.team < 1 || s.groups % s.team != 0) return fmt::format("team = {} does not divide groups = {}", s.team, s.groups);
  const int32_t per_head = s.lanes_per_head();
  if (registers_per_lane(p.op.dim, per_head, s.vec) > kMaxRegistersPerLane)
    return fmt::format("D = {} needs {} values per lane with {} lanes{} (limit {})", p.op.dim,
                       registers_per_lane(p.op.dim, per_head, s.vec), per_head, s.heads > 1 ? " per head" : "",
                       kMaxRegistersPerLane);
  if (s.team > 1 && solvers::group_state_bytes(p.op, p.pass, s) > solvers::kMaxTeamSharedBytes)
    return fmt::format("team merge needs {} bytes of shared memory (limit {})", solvers::group_state_bytes(p.op, p.pass, s),
                       solvers::kMaxTeamSharedBytes);
  return {};
}

// Largest vector width for the dtype that divides D and the alignment allows.
int32_t best_vec(const PassProblem& p) {
  const int32_t by_bytes = 16 / static_cast<int32_t>(dtype_size(p.op.dtype));
  int32_t v = std::min(by_bytes, p.max_vec);
  while (v > 1 && p.op.dim % v != 0) v /= 2;
  return v;
}

int64_t blocks_for(int64_t work, int64_t per_block) { return (work + per_block - 1) / per_block; }

size_t state_bytes(const dfgnn_op_t& op, PassKind pass) {
  return static_cast<size_t>(state_floats(op, pass)) * sizeof(float);
}

}  // namespace

std::string Solver::invalid_reason(const PassProblem& problem, const Schedule& s) const {
  if (s.solver != id()) return fmt::format("schedule belongs to solver {}, not {}", solver_name(s.solver), name());
  return common_invalid_reason(problem, s);
}

Schedule Solver::fit_to_shape(const PassProblem& problem, const Schedule& s) const {
  const Schedule base = default_schedule(problem);
  Schedule fitted = s;
  fitted.lanes = base.lanes;
  fitted.heads = base.heads;
  fitted.vec = base.vec;
  const int64_t threads = int64_t{s.groups} * s.lanes;
  fitted.groups = static_cast<int32_t>(std::max<int64_t>(s.team, threads / base.lanes / s.team * s.team));
  return fitted;
}

std::string Solver::plan_key(const Schedule& s) const {
  return fmt::format("{}:{}:{}:{}", name(), s.mid, s.threshold, s.chunk);
}

// ---------------------------------------------------------------- helpers of the solver files
namespace solvers {

// The smallest power of two >= x, in 64 bits so that every int32_t x has one (2^31 for x > 2^30).
int64_t next_pow2(int64_t x) {
  int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

int32_t max_degree(const PassProblem& p) { return static_cast<int32_t>(p.fingerprint->max_degree); }

Schedule base_schedule(const PassProblem& p, SolverId id) {
  Schedule s;
  s.solver = id;
  s.vec = best_vec(p);
  const std::vector<LaneMapping> spanning = spanning_mappings(p, s.vec, false);
  const LaneMapping m = spanning.empty() ? LaneMapping{lanes_for_dim(p.op.dim, s.vec), 1} : spanning.back();
  s.lanes = m.lanes;
  s.heads = m.heads;
  s.groups = 256 / s.lanes;
  return s;
}

std::vector<LaneMapping> spanning_mappings(const PassProblem& p, int32_t vec, bool every) {
  std::vector<LaneMapping> out;
  const int32_t most = default_group_heads(p.op, vec), per_head = lanes_per_head_for_dim(p.op.dim, vec);
  // A group of 4 lanes may hold 2 heads of 1 lane and idle lanes; larger groups are filled.
  for (int32_t heads = every ? 2 : most; heads > 1 && heads <= most; heads *= 2)
    out.push_back({std::max(4, heads * per_head), heads});
  return out;
}

int64_t group_state_bytes(const dfgnn_op_t& op, PassKind pass, const Schedule& s) {
  return int64_t{s.groups} * s.heads * state_floats(op, pass) * int64_t{sizeof(float)};
}

std::vector<int32_t> threshold_candidates(const PassProblem& p) {
  // Tail quantiles and multiples of the mean, as powers of two.
  const dfgnn_fingerprint_t& fp = *p.fingerprint;
  std::set<int32_t> t;
  for (double q : {fp.p99, fp.p999, 8 * fp.mean_degree, 32 * fp.mean_degree, 256.0, 1024.0, 4096.0}) {
    const int32_t v = static_cast<int32_t>(std::ceil(q));
    if (v >= 64 && next_pow2(v) < fp.max_degree) t.insert(static_cast<int32_t>(next_pow2(v)));
  }
  return {t.begin(), t.end()};
}

}  // namespace solvers

std::vector<RowSpan> long_rows_of(const int32_t* ptr, int32_t rows, int32_t min_degree) {
  std::vector<RowSpan> out;
  for (int32_t i = 0; i < rows; ++i)
    if (ptr[i + 1] - ptr[i] >= min_degree) out.push_back({i, ptr[i], ptr[i + 1]});
  return out;
}

namespace solvers {

void split_row(const RowSpan& row, int32_t chunk, HostPlan& plan, HostPlan::Part& part) {
  const int32_t first = plan.num_slots;
  // In 64 bits: chunk comes from schedule text and b + chunk may pass 2^31.
  for (int64_t b = row.begin; b < row.end; b += chunk)
    part.segments.push_back({row.row, static_cast<int32_t>(b), static_cast<int32_t>(std::min<int64_t>(row.end, b + chunk)),
                             plan.num_slots++});
  plan.hubs.push_back({row.row, first, plan.num_slots - first, 0});
}

int32_t part_items(const HostPlan::Part& part, int32_t num_rows) {
  return part.listed() ? static_cast<int32_t>(part.segments.size()) : num_rows;
}

Launch rows_launch(const dfgnn_op_t& op, PassKind pass, const char* role, std::string kernel, int32_t part,
                   int32_t items, int32_t lanes, int32_t heads, int32_t groups, int32_t team) {
  Launch l;
  l.role = role;
  l.kernel = std::move(kernel);
  l.part = part;
  l.grid = blocks_for(int64_t{items} * (op.heads / heads), groups / team);
  l.block = groups * lanes;
  l.smem = team > 1 ? groups * heads * state_bytes(op, pass) : 0;
  return l;
}

Launch merge_launch(const dfgnn_op_t& op, std::string kernel, const HostPlan& plan, int32_t lanes, int32_t heads) {
  Launch l;
  l.role = "merge";
  l.kernel = std::move(kernel);
  l.part = Launch::kHubList;
  l.grid = blocks_for(static_cast<int64_t>(plan.hubs.size()) * (op.heads / heads), 256 / lanes);
  l.block = 256;
  l.smem = 0;
  return l;
}

}  // namespace solvers
HostPlan WholeRowsSolver::plan(const RowPointers&, const Schedule& s) const {
  HostPlan plan;
  plan.parts.push_back(HostPlan::Part{.kind = HostPlan::Part::Kind::Rows, .lanes = s.lanes});
  return plan;
}

std::vector<std::string> WholeRowsSolver::kernels(const dfgnn_op_t& op, PassKind pass, const Schedule& s) const {
  return {rows_kernel(op, pass, s.lanes, s.heads, s.vec, s.groups, s.team)};
}

std::vector<Launch> WholeRowsSolver::launches(const dfgnn_op_t& op, PassKind pass, const Schedule& s,
                                              const HostPlan&, int32_t num_rows) const {
  return {solvers::rows_launch(op, pass, "rows", rows_kernel(op, pass, s.lanes, s.heads, s.vec, s.groups, s.team), 0,
                               num_rows, s.lanes, s.heads, s.groups, s.team)};
}

}  // namespace dfgnn
