// block_row: a team of `team` groups of `lanes` lanes splits each (row, head) and merges in shared
// memory. For long rows that one group would serialise.
#include "solver.hpp"

namespace dfgnn {
namespace {

class BlockRowSolver final : public WholeRowsSolver {
 public:
  SolverId id() const override { return SolverId::BlockRow; }
  // Worth trying only when rows are long enough to keep several warps busy.
  bool applicable(const PassProblem& p) const override {
    return p.fingerprint->mean_degree >= 16 || solvers::max_degree(p) >= 256;
  }
  Schedule default_schedule(const PassProblem& p) const override {
    Schedule s = solvers::base_schedule(p, id());
    s.lanes = 32;
    s.heads = 1;  // a team splits one head's long row
    s.team = 4;
    s.groups = 4;
    return s;
  }
  std::string invalid_reason(const PassProblem& p, const Schedule& s) const override {
    if (s.team < 2) return "block_row schedules have team >= 2";
    if (s.mid != 0 || s.threshold != 0 || s.chunk != 0) return "block_row schedules take no mid/threshold/chunk";
    return Solver::invalid_reason(p, s);
  }
  std::vector<Schedule> enumerate(const PassProblem& p) const override {
    std::vector<Schedule> out;
    for (int32_t lanes : {16, 32})
      for (int32_t team : {2, 4, 8}) {
        Schedule s = default_schedule(p);
        s.lanes = lanes;
        s.team = team;
        s.groups = team * (lanes == 16 ? 2 : 1);
        if (invalid_reason(p, s).empty()) out.push_back(s);
      }
    return out;
  }
};

}  // namespace

const Solver& block_row_solver() {
  static const BlockRowSolver solver;
  return solver;
}

}  // namespace dfgnn
