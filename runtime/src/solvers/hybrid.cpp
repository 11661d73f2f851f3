// hybrid: degree bins. Rows of at least `threshold` edges are split into `chunk`-edge chunks on
// whole warps, rows in [mid, threshold) run whole on whole warps, shorter rows on groups of
// `lanes` lanes.
#include "solver.hpp"

#include "kernel_names.hpp"

#include <algorithm>

namespace dfgnn {
namespace {

constexpr int32_t kWarpGroups = 8;  // the warp bins' blocks: 8 warps

class HybridSolver final : public Solver {
 public:
  SolverId id() const override { return SolverId::Hybrid; }
  bool applicable(const PassProblem& p) const override {
    return p.fingerprint->cv >= 1.0 && solvers::max_degree(p) >= 64;
  }
  Schedule default_schedule(const PassProblem& p) const override {
    Schedule s = solvers::base_schedule(p, id());
    s.heads = 1;
    s.lanes = std::min<int32_t>(lanes_for_dim(p.op.dim, s.vec), 8);
    s.groups = 256 / s.lanes;
    s.mid = 32;
    s.threshold = 2048;
    s.chunk = 512;
    return s;
  }
  std::string invalid_reason(const PassProblem& p, const Schedule& s) const override {
    if (s.team != 1) return "hybrid schedules have team = 1";
    if (s.lanes == 32) return "hybrid schedules use fewer than 32 lanes for their low-degree bin";
    if (s.mid < 1 || s.threshold <= s.mid || s.chunk < 1) return "hybrid needs 1 <= mid < threshold and chunk >= 1";
    if (std::string r = Solver::invalid_reason(p, s); !r.empty()) return r;
    Schedule warp = s;  // the high-degree bins run whole warps, one head each
    warp.lanes = 32;
    warp.heads = 1;
    warp.groups = kWarpGroups;
    return Solver::invalid_reason(p, warp);
  }
  std::vector<Schedule> enumerate(const PassProblem& p) const override {
    std::vector<Schedule> out;
    const Schedule base = default_schedule(p);
    std::vector<int32_t> thresholds = solvers::threshold_candidates(p);
    thresholds.push_back(base.threshold);
    std::vector<solvers::LaneMapping> mappings{{4, 1}, {8, 1}, {16, 1}};
    for (const solvers::LaneMapping& m : solvers::spanning_mappings(p, base.vec, false))
      if (m.lanes < 32) mappings.push_back(m);
    for (const solvers::LaneMapping& m : mappings)
      for (int32_t mid : {8, 16, 32, 64})
        for (int32_t threshold : thresholds) {
          Schedule s = base;
          s.lanes = m.lanes;
          s.heads = m.heads;
          s.groups = 256 / m.lanes;
          s.mid = mid;
          s.threshold = threshold;
          s.chunk = 512;
          if (invalid_reason(p, s).empty() && std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
        }
    return out;
  }

  // Only the rows to split.
  int32_t rows_read(const Schedule& s) const override { return std::max(1, s.threshold); }
  HostPlan plan(const RowPointers& rows, const Schedule& s) const override {
    // Split rows and the middle bin run on whole warps, the low bin on the schedule's groups.
    using Kind = HostPlan::Part::Kind;
    HostPlan plan;
    HostPlan::Part chunks{.kind = Kind::Chunks, .lanes = 32};
    for (const RowSpan& hub : rows.long_rows) solvers::split_row(hub, s.split_chunk(), plan, chunks);
    if (!chunks.segments.empty()) plan.parts.push_back(std::move(chunks));
    plan.parts.push_back(HostPlan::Part{.kind = Kind::WarpRows, .lanes = 32, .min_degree = s.mid, .max_degree = s.threshold});
    plan.parts.push_back(HostPlan::Part{.kind = Kind::Rows, .lanes = s.lanes, .max_degree = s.mid});
    return plan;
  }
  std::vector<std::string> kernels(const dfgnn_op_t& op, PassKind pass, const Schedule& s) const override {
    return {small_kernel(op, pass, s), warp_kernel(op, pass, s), merge_kernel(op, pass, 32, 1, s.vec)};
  }
  std::vector<Launch> launches(const dfgnn_op_t& op, PassKind pass, const Schedule& s, const HostPlan& plan,
                               int32_t num_rows) const override {
    std::vector<Launch> out;
    for (size_t k = 0; k < plan.parts.size(); ++k) {
      const HostPlan::Part& part = plan.parts[k];
      const int32_t items = solvers::part_items(part, num_rows), index = static_cast<int32_t>(k);
      if (part.kind != HostPlan::Part::Kind::Rows)
        out.push_back(solvers::rows_launch(op, pass, part.listed() ? "chunks" : "warp rows", warp_kernel(op, pass, s),
                                           index, items, 32, 1, kWarpGroups, 1));
      else
        out.push_back(
            solvers::rows_launch(op, pass, "rows", small_kernel(op, pass, s), index, items, s.lanes, s.heads, s.groups, 1));
    }
    if (!plan.hubs.empty()) out.push_back(solvers::merge_launch(op, merge_kernel(op, pass, 32, 1, s.vec), plan, 32, 1));
    return out;
  }

 private:
  static std::string small_kernel(const dfgnn_op_t& op, PassKind pass, const Schedule& s) {
    return rows_kernel(op, pass, s.lanes, s.heads, s.vec, s.groups, 1);
  }
  static std::string warp_kernel(const dfgnn_op_t& op, PassKind pass, const Schedule& s) {
    return rows_kernel(op, pass, 32, 1, s.vec, kWarpGroups, 1);
  }
};

}  // namespace

const Solver& hybrid_solver() {
  static const HybridSolver solver;
  return solver;
}

}  // namespace dfgnn
