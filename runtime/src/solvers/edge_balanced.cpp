// edge_balanced: blocks take row groups of about block_edges() (text: chunk) edges (a row costs
// its edges plus one) and split them evenly over their groups; longer rows are split into pieces
// of block_edges() / groups edges and merged as in hub_split. Balances blocks whatever the degree
// distribution, at the price of merging rows cut by share boundaries.
#include "solver.hpp"

#include "kernel_names.hpp"
#include "params.cuh"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

namespace dfgnn {
namespace {

class EdgeBalancedSolver final : public Solver {
 public:
  SolverId id() const override { return SolverId::EdgeBalanced; }
  bool applicable(const PassProblem&) const override { return true; }
  Schedule default_schedule(const PassProblem& p) const override {
    Schedule s = solvers::base_schedule(p, id());
    s.chunk = 64 * s.groups;
    return s;
  }
  std::string invalid_reason(const PassProblem& p, const Schedule& s) const override {
    if (s.team != 1) return "edge_balanced schedules have team = 1";
    if (s.mid != 0 || s.threshold != 0) return "edge_balanced schedules take no mid/threshold";
    if (s.chunk < 1) return "edge_balanced needs chunk >= 1";
    if (std::string r = Solver::invalid_reason(p, s); !r.empty()) return r;
    // Split rows run on rows_kernel blocks of 256 threads (kernels shared with hub_split).
    Schedule split = s;
    split.groups = split_groups(s);
    if (std::string r = Solver::invalid_reason(p, split); !r.empty()) return r;
    const int64_t parked = solvers::group_state_bytes(p.op, p.pass, s);
    if (parked > solvers::kMaxTeamSharedBytes)
      return fmt::format("parked row pieces need {} bytes of shared memory (limit {})", parked,
                         solvers::kMaxTeamSharedBytes);
    return {};
  }
  std::vector<Schedule> enumerate(const PassProblem& p) const override {
    std::vector<Schedule> out;
    const Schedule base = default_schedule(p);
    std::vector<solvers::LaneMapping> mappings{{lanes_for_dim(p.op.dim, base.vec), 1}};
    for (const solvers::LaneMapping& m : solvers::spanning_mappings(p, base.vec, false)) mappings.push_back(m);
    for (const solvers::LaneMapping& m : mappings)
      for (int32_t threads : {256, 512})
        for (int32_t edges_per_group : {16, 64, 256}) {
          Schedule s = base;
          s.lanes = m.lanes;
          s.heads = m.heads;
          s.groups = threads / s.lanes;
          s.chunk = edges_per_group * s.groups;
          if (invalid_reason(p, s).empty()) out.push_back(s);
        }
    return out;
  }

  // A block's edges scale with its groups: what carries over between op shapes is the edges per
  // group (the enumerated 16, 64, 256), so a leaf measured at 16 lanes keeps its balance at 4.
  Schedule fit_to_shape(const PassProblem& p, const Schedule& s) const override {
    Schedule fitted = Solver::fit_to_shape(p, s);
    fitted.chunk = static_cast<int32_t>(std::min<int64_t>(int64_t{s.chunk} / std::max(1, s.groups) * fitted.groups, INT32_MAX));
    return fitted;
  }

  HostPlan plan(const RowPointers& rows, const Schedule& s) const override {
    // Consecutive rows gathered into groups costing at most block_edges(); a row with more edges
    // is split instead, into pieces of block_edges() / groups edges, one lane group's part of a
    // block's edges (whole-chunk pieces on one group each made hubs the tail, up to 3.9x slower
    // on blogcatalog), and ends the group before it. A group holds at most
    // kMaxEmptyRowsInGroup consecutive rows without edges (see there).
    HostPlan plan;
    const int32_t edges = s.block_edges(), piece = std::max(1, edges / s.groups);
    HostPlan::Part chunks{.kind = HostPlan::Part::Kind::Chunks, .lanes = s.lanes};
    HostPlan::Part groups{.kind = HostPlan::Part::Kind::RowGroups, .lanes = s.lanes};
    int32_t first = 0;
    int64_t cost = 0;  // 64 bits: a group's cost plus the next row's may pass 2^31 when block_edges() is large
    int32_t empty_run = 0;  // rows without edges that end the group so far
    auto close = [&](int32_t end) {
      if (end > first) groups.segments.push_back({first, end, rows.begin(first), rows.begin(end)});
    };
    for (int32_t i = 0; i < rows.rows; ++i) {
      const int32_t degree = rows.degree(i);
      if (degree > edges) {
        close(i);
        solvers::split_row({i, rows.begin(i), rows.end(i)}, piece, plan, chunks);
        first = i + 1;
        cost = 0;
        empty_run = 0;
        continue;
      }
      const bool full = cost + degree + 1 > edges || (degree == 0 && empty_run == solvers::kMaxEmptyRowsInGroup);
      if (full && i > first) {
        close(i);
        first = i;
        cost = 0;
        empty_run = 0;
      }
      cost += int64_t{degree} + 1;
      empty_run = degree == 0 ? empty_run + 1 : 0;
    }
    close(rows.rows);
    if (!chunks.segments.empty()) plan.parts.push_back(std::move(chunks));
    if (!groups.segments.empty()) plan.parts.push_back(std::move(groups));
    return plan;
  }
  // Groups shape the plan too (the size of split-row pieces).
  std::string plan_key(const Schedule& s) const override { return fmt::format("{}:{}", Solver::plan_key(s), s.groups); }
  std::vector<std::string> kernels(const dfgnn_op_t& op, PassKind pass, const Schedule& s) const override {
    return {split_kernel(op, pass, s), merge_kernel(op, pass, s.lanes, s.heads, s.vec),
            balanced_kernel(op, pass, s.lanes, s.heads, s.vec, s.groups)};
  }
  std::vector<Launch> launches(const dfgnn_op_t& op, PassKind pass, const Schedule& s, const HostPlan& plan,
                               int32_t num_rows) const override {
    std::vector<Launch> out;
    for (size_t k = 0; k < plan.parts.size(); ++k) {
      const HostPlan::Part& part = plan.parts[k];
      const int32_t items = solvers::part_items(part, num_rows), index = static_cast<int32_t>(k);
      if (part.kind == HostPlan::Part::Kind::Chunks) {
        out.push_back(solvers::rows_launch(op, pass, "chunks", split_kernel(op, pass, s), index, items, s.lanes,
                                           s.heads, split_groups(s), 1));
        continue;
      }
      // One block per (row group, the block's head blocks); pieces of rows park in shared memory.
      const int32_t head_blocks = op.heads / s.heads;
      Launch l;
      l.role = "balanced";
      l.kernel = balanced_kernel(op, pass, s.lanes, s.heads, s.vec, s.groups);
      l.part = index;
      l.grid = int64_t{items} * (head_blocks / balanced_heads_per_block(s.groups, head_blocks));
      l.block = s.groups * s.lanes;
      l.smem = static_cast<size_t>(solvers::group_state_bytes(op, pass, s));
      out.push_back(std::move(l));
    }
    if (!plan.hubs.empty())
      out.push_back(solvers::merge_launch(op, merge_kernel(op, pass, s.lanes, s.heads, s.vec), plan, s.lanes, s.heads));
    return out;
  }

 private:
  // Split rows run on the hub-split kernels' 256-thread blocks, whatever the schedule's groups.
  static int32_t split_groups(const Schedule& s) { return 256 / s.lanes; }
  static std::string split_kernel(const dfgnn_op_t& op, PassKind pass, const Schedule& s) {
    return rows_kernel(op, pass, s.lanes, s.heads, s.vec, split_groups(s), 1);
  }
};

}  // namespace

const Solver& edge_balanced_solver() {
  static const EdgeBalancedSolver solver;
  return solver;
}

}  // namespace dfgnn
