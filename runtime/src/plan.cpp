#include "plan.hpp"

#include "error.hpp"
#include "graph.hpp"
#include "solver.hpp"

#include <fmt/format.h>


namespace dfgnn {

HostPlan make_plan(const Compressed& c, const Schedule& s) {
  return solver_of(s).plan(RowPointers{c.ptr.data(), c.num_rows}, s);
}

const Plan::Device& Plan::device() const {
  std::call_once(uploaded_, [&] {
    for (const HostPlan::Part& part : host_.parts)
      device_.parts.push_back(part.whole_rows ? DeviceBuffer() : upload(part.segments.data(), part.segments.size() * sizeof(Segment)));
    device_.hubs = upload(host_.hubs.data(), host_.hubs.size() * sizeof(Segment));
  });
  return device_;
}

std::shared_ptr<const Plan> get_plan(const Graph& graph, PassKind pass, const Schedule& s) {
  const bool csc = pass == PassKind::BackwardCol;
  // Only the fields the solver plans by shape a plan (launches take lanes, groups and vec from
  // the schedule, not from the plan).
  const std::string key = fmt::format("{}:{}", csc ? "csc" : "csr", solver_of(s).plan_key(s));
  return graph.plan(key, [&] { return std::make_shared<const Plan>(make_plan(csc ? graph.csc_rows() : graph.csr_rows(), s)); });
}

}  // namespace dfgnn
