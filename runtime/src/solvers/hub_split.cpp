// hub_split: rows of at least `threshold` edges (hubs) are cut into chunks of `chunk` edges, each
// chunk's partial state merged afterwards; the other rows run whole as in subwarp.
#include "solver.hpp"

#include "kernel_names.hpp"

#include <algorithm>

namespace dfgnn {
namespace {

class HubSplitSolver final : public Solver {
 public:
  SolverId id() const override { return SolverId::HubSplit; }
  bool applicable(const PassProblem& p) const override { return solvers::max_degree(p) >= 128; }
  Schedule default_schedule(const PassProblem& p) const override {
    Schedule s = solvers::base_schedule(p, id());
    s.threshold = s.chunk = solvers::default_split(s.lanes);
    return s;
  }
  std::string invalid_reason(const PassProblem& p, const Schedule& s) const override {
    if (s.team != 1) return "hub_split schedules have team = 1";
    if (s.mid != 0) return "hub_split schedules take no mid";
    if (s.threshold < 1 || s.chunk < 1) return "hub_split needs threshold >= 1 and chunk >= 1";
    return Solver::invalid_reason(p, s);
  }
  std::vector<Schedule> enumerate(const PassProblem& p) const override {
    std::vector<Schedule> out;
    const Schedule base = default_schedule(p);
    std::vector<solvers::LaneMapping> mappings{{lanes_for_dim(p.op.dim, base.vec), 1}};
    for (const solvers::LaneMapping& m : solvers::spanning_mappings(p, base.vec, false)) mappings.push_back(m);
    mappings.push_back({32, 1});
    for (const solvers::LaneMapping& m : mappings)
      for (int32_t threshold : solvers::threshold_candidates(p))
        for (int32_t chunk : {128, 256, 512, 1024}) {
          if (chunk > threshold) continue;
          Schedule s = base;
          s.lanes = m.lanes;
          s.heads = m.heads;
          s.groups = 256 / m.lanes;
          s.threshold = threshold;
          s.chunk = chunk;
          if (invalid_reason(p, s).empty() && std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
        }
    return out;
  }

  // Only the rows to split.
  int32_t rows_read(const Schedule& s) const override { return std::max(1, s.threshold); }
  HostPlan plan(const RowPointers& rows, const Schedule& s) const override {
    // Chunks of hub rows first (the longest work starts first), then the other rows whole.
    HostPlan plan;
    HostPlan::Part chunks{.kind = HostPlan::Part::Kind::Chunks, .lanes = s.lanes};
    for (const RowSpan& hub : rows.long_rows) solvers::split_row(hub, s.split_chunk(), plan, chunks);
    if (!chunks.segments.empty()) plan.parts.push_back(std::move(chunks));
    plan.parts.push_back(HostPlan::Part{.kind = HostPlan::Part::Kind::Rows, .lanes = s.lanes, .max_degree = s.threshold});
    return plan;
  }
  std::vector<std::string> kernels(const dfgnn_op_t& op, PassKind pass, const Schedule& s) const override {
    return {rows_kernel(op, pass, s.lanes, s.heads, s.vec, s.groups, 1), merge_kernel(op, pass, s.lanes, s.heads, s.vec)};
  }
  std::vector<Launch> launches(const dfgnn_op_t& op, PassKind pass, const Schedule& s, const HostPlan& plan,
                               int32_t num_rows) const override {
    std::vector<Launch> out;
    for (size_t k = 0; k < plan.parts.size(); ++k) {
      const HostPlan::Part& part = plan.parts[k];
      out.push_back(solvers::rows_launch(op, pass, part.kind == HostPlan::Part::Kind::Rows ? "rows" : "chunks",
                                         rows_kernel(op, pass, s.lanes, s.heads, s.vec, s.groups, 1),
                                         static_cast<int32_t>(k), solvers::part_items(part, num_rows), s.lanes, s.heads,
                                         s.groups, 1));
    }
    if (!plan.hubs.empty())
      out.push_back(solvers::merge_launch(op, merge_kernel(op, pass, s.lanes, s.heads, s.vec), plan, s.lanes, s.heads));
    return out;
  }
};

}  // namespace

const Solver& hub_split_solver() {
  static const HubSplitSolver solver;
  return solver;
}

}  // namespace dfgnn
