#include "plan.hpp"

#include "error.hpp"
#include "graph.hpp"
#include "logging.hpp"
#include "solver.hpp"

#include <fmt/format.h>


namespace dfgnn {

RowPointers plan_rows(const Compressed& c, int32_t rows_read) {
  if (rows_read == 0) return RowPointers{c.ptr.data(), c.num_rows, {}};
  return RowPointers{nullptr, c.num_rows, long_rows_of(c.ptr.data(), c.num_rows, rows_read)};
}

HostPlan make_plan(const Compressed& c, const Schedule& s) {
  const Solver& solver = solver_of(s);
  return solver.plan(plan_rows(c, solver.rows_read(s)), s);
}

const Plan::Device& Plan::device() const {
  std::call_once(uploaded_, [&] {
    for (const HostPlan::Part& part : host_.parts)
      device_.parts.push_back(part.listed() ? upload(part.segments.data(), part.segments.size() * sizeof(Segment)) : DeviceBuffer());
    device_.hubs = upload(host_.hubs.data(), host_.hubs.size() * sizeof(Segment));
  });
  return device_;
}

std::shared_ptr<const Plan> get_plan(const Graph& graph, PassKind pass, const Schedule& s) {
  const bool csc = pass == PassKind::BackwardCol;
  // Only the fields the solver plans by shape a plan (launches take lanes, groups and vec from
  // the schedule, not from the plan).
  const std::string key = fmt::format("{}:{}", csc ? "csc" : "csr", solver_of(s).plan_key(s));
  const Solver& solver = solver_of(s);
  return graph.plan(key, [&] {
    const Span span("plan built and uploaded");
    return std::make_shared<const Plan>(solver.plan(graph.plan_rows(csc, solver.rows_read(s)), s));
  });
}

}  // namespace dfgnn
