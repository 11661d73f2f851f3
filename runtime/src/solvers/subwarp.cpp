// subwarp: one lane group of `lanes` lanes per (row, head), `groups` groups per block, every row
// whole. The mapping of short rows; sized to D by default.
#include "solver.hpp"

namespace dfgnn {
namespace {

class SubwarpSolver final : public WholeRowsSolver {
 public:
  SolverId id() const override { return SolverId::Subwarp; }
  bool applicable(const PassProblem&) const override { return true; }
  Schedule default_schedule(const PassProblem& p) const override { return solvers::base_schedule(p, id()); }
  std::string invalid_reason(const PassProblem& p, const Schedule& s) const override {
    if (s.team != 1) return "subwarp schedules have team = 1";
    if (s.mid != 0 || s.threshold != 0 || s.chunk != 0) return "subwarp schedules take no mid/threshold/chunk";
    return Solver::invalid_reason(p, s);
  }
  std::vector<Schedule> enumerate(const PassProblem& p) const override {
    std::vector<Schedule> out;
    const Schedule base = default_schedule(p);
    std::vector<solvers::LaneMapping> mappings;
    for (int32_t lanes : {4, 8, 16, 32})
      if (lanes <= 2 * lanes_for_dim(p.op.dim, base.vec)) mappings.push_back({lanes, 1});  // else mostly idle lanes
    for (const solvers::LaneMapping& m : solvers::spanning_mappings(p, base.vec, true)) mappings.push_back(m);
    for (const solvers::LaneMapping& m : mappings)
      for (int32_t threads : {128, 256, 512}) {
        Schedule s = base;
        s.lanes = m.lanes;
        s.heads = m.heads;
        s.groups = threads / m.lanes;
        if (invalid_reason(p, s).empty()) out.push_back(s);
      }
    return out;
  }
};

}  // namespace

const Solver& subwarp_solver() {
  static const SubwarpSolver solver;
  return solver;
}

}  // namespace dfgnn
